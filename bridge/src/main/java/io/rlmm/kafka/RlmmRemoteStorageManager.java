package io.rlmm.kafka;

import static io.rlmm.kafka.ServeConnection.args;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Kafka's RemoteStorageManager, answered by {@code rlmm serve} (the broker's
 * {@code remote.log.storage.manager.class.name}; its settings under {@code rsm.config.}).
 *
 * <p>Invariant: no tiering logic here; every method is one call to rlmm serve and fails with RemoteStorageException
 * (RemoteResourceNotFoundException for {@code not_found}) when that call does. A fetch is one call per chunk, or,
 * where rlmm serve answers with its local store's file for the segment, a read of that file here (the file is
 * remembered for the segment's next fetches: objects are written once); which file holds a segment is always
 * rlmm serve's answer.
 */
public class RlmmRemoteStorageManager implements RemoteStorageManager {
  private static final Logger LOG = LoggerFactory.getLogger(RlmmRemoteStorageManager.class);
  private static final RemoteLogMetadataSerde SERDE = new RemoteLogMetadataSerde();
  /** Slack on a fetch's first chunk for Kafka's skip from the offset index's entry to the fetch offset. */
  private static final int FIRST_CHUNK_SLACK = 64 << 10;
  /** The most rlmm serve answers per chunk (its MAX_CHUNK_BYTES). */
  private static final int MAX_CHUNK = 16 << 20;
  /** Segments whose file is remembered. */
  private static final int KNOWN_FILES = 4096;
  private final ServeConnection serve = new ServeConnection("rsm", null, null);

  private int chunkBytes = 1 << 20;
  /** Whether fetches may be answered with a file of rlmm's local store (read here, no bytes through the socket). */
  private volatile boolean fileReads = true;
  /**
   * The files rlmm serve named, by segment (a segment's objects are written once, so its file stays until deleted):
   * Kafka reads a segment in many fetches, and only the first asks rlmm serve. The least recently used go first.
   */
  private final Map<RemoteLogSegmentId, Map<?, ?>> files = Collections.synchronizedMap(
      new LinkedHashMap<>(64, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<RemoteLogSegmentId, Map<?, ?>> eldest) {
          return size() > KNOWN_FILES;
        }
      });
  /**
   * Bytes one of Kafka's remote reads takes from a stream (it depends on the consumers' fetch sizes): the largest
   * seen lately, each read decaying it by a sixteenth, so a fetch's first chunk holds the whole read.
   */
  private final AtomicInteger readBytes = new AtomicInteger();

  @Override
  public void configure(Map<String, ?> configs) {
    // rlmm serve answers at most 16 MiB per chunk (MAX_CHUNK_BYTES), the first one's slack included
    chunkBytes = (int) Math.max(1, Math.min(ServeConnection.number(configs, "fetch.chunk.bytes", 1 << 20),
        MAX_CHUNK - FIRST_CHUNK_SLACK));
    // by default only when this class starts rlmm serve itself (same host, same user); a serve it attaches to may
    // run in another container, whose files this JVM does not see
    Object setting = configs.get("fetch.file.reads");
    fileReads = setting == null ? configs.get("file") != null : Boolean.parseBoolean(String.valueOf(setting).trim());
    serve.configure(configs);
  }

  @Override
  public Optional<CustomMetadata> copyLogSegmentData(RemoteLogSegmentMetadata metadata, LogSegmentData data)
      throws RemoteStorageException {
    ByteBuffer epochs = data.leaderEpochIndex().duplicate();
    byte[] epochBytes = new byte[epochs.remaining()];
    epochs.get(epochBytes);
    Object answer = serve.call("rsm.copy_log_segment_data", args(
        "metadata", SERDE.serialize(metadata),
        "log_segment", path(data.logSegment()),
        "offset_index", path(data.offsetIndex()),
        "time_index", path(data.timeIndex()),
        "transaction_index", data.transactionIndex().map(RlmmRemoteStorageManager::path).orElse(null),
        "producer_snapshot_index", path(data.producerSnapshotIndex()),
        "leader_epoch_index", epochBytes), serve.copyTimeoutMs);
    Object custom = answer instanceof Map<?, ?> m ? m.get("custom_metadata") : null;
    return custom instanceof byte[] b ? Optional.of(new CustomMetadata(b)) : Optional.empty();
  }

  @Override
  public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition) throws RemoteStorageException {
    return fetch(metadata, startPosition, Long.MAX_VALUE);
  }

  @Override
  public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition, int endPosition)
      throws RemoteStorageException {
    return fetch(metadata, startPosition, endPosition + 1L); // Kafka's end is inclusive
  }

  private InputStream fetch(RemoteLogSegmentMetadata metadata, long start, long end) throws RemoteStorageException {
    if (start < 0 || end <= start) { // Kafka's end position is inclusive: at least one byte
      throw new IllegalArgumentException("bad segment range: start " + start + ", end " + (end - 1));
    }
    byte[] md = SERDE.serialize(metadata);
    String topic = metadata.topicIdPartition().topic();
    int first = (int) Math.min(Math.min(Math.max(chunkBytes, readBytes.get()) + FIRST_CHUNK_SLACK, MAX_CHUNK),
        end - start);
    RemoteLogSegmentId id = metadata.remoteLogSegmentId();
    Map<?, ?> known = fileReads ? files.get(id) : null;
    if (known != null) {
      InputStream direct = openFile(known, start, end, topic, false);
      if (direct != null) return direct;
      files.remove(id); // gone since, or unreadable: rlmm serve says which
    }
    Object answer = serve.call("rsm.fetch_log_segment",
        args("metadata", md, "position", start, "length", first, "file", fileReads));
    if (answer instanceof Map<?, ?> located) {
      InputStream direct = openFile(located, start, end, topic, true);
      if (direct != null) {
        files.put(id, located);
        return direct;
      }
      answer = serve.call("rsm.fetch_log_segment", args("metadata", md, "position", start, "length", first));
    }
    return new SegmentInputStream((position, length) -> bytes("rsm.fetch_log_segment",
        serve.call("rsm.fetch_log_segment", args("metadata", md, "position", position, "length", length))),
        bytes("rsm.fetch_log_segment", answer), first, start, end, chunkBytes, this::learn);
  }

  /**
   * The range read straight from the file rlmm serve named, or null when this JVM cannot open it. A file rlmm serve
   * has just named ({@code fresh}) that this JVM cannot open means rlmm serve sees other files (another container,
   * another user): file reads stop for this class, logged once, and chunks go on.
   */
  private InputStream openFile(Map<?, ?> located, long start, long end, String topic, boolean fresh)
      throws RemoteStorageException {
    if (!(located.get("path") instanceof String path) || !(located.get("size") instanceof Long size)) {
      throw new RemoteStorageException("rlmm serve answered rsm.fetch_log_segment with " + located);
    }
    try {
      return new SegmentFileStream(Path.of(path), size, start, end, (taken, atEnd) -> {
        learn(taken, atEnd);
        report(topic, taken);
      });
    } catch (IOException | SecurityException e) { // rlmm serve saw the file: this JVM does not
      if (fresh && fileReads) {
        fileReads = false;
        LOG.warn("cannot read rlmm's segment files here ({}: {}); fetching through rlmm serve from now on",
            path, e.toString());
      }
      return null;
    }
  }

  /** Tell rlmm serve how many bytes a file read took (its fetch metrics), without waiting. */
  private void report(String topic, long taken) {
    try {
      serve.callAsync("rsm.fetched", args("topic", topic, "bytes", taken), serve.callTimeoutMs)
          .exceptionally(e -> null);
    } catch (RemoteStorageException e) {
      LOG.debug("rsm.fetched not delivered: {}", e.getMessage());
    }
  }

  /** A stream closed: a read the segment's end did not cut short tells how much Kafka's reads take. */
  private void learn(long taken, boolean atEnd) {
    if (atEnd) return;
    int seen = (int) Math.min(taken, MAX_CHUNK - FIRST_CHUNK_SLACK);
    readBytes.updateAndGet(before -> Math.max(seen, before - before / 16));
  }

  @Override
  public InputStream fetchIndex(RemoteLogSegmentMetadata metadata, IndexType indexType) throws RemoteStorageException {
    Object answer = serve.call("rsm.fetch_index",
        args("metadata", SERDE.serialize(metadata), "index_type", indexType.name()));
    return new ByteArrayInputStream(bytes("rsm.fetch_index", answer));
  }

  @Override
  public void deleteLogSegmentData(RemoteLogSegmentMetadata metadata) throws RemoteStorageException {
    files.remove(metadata.remoteLogSegmentId());
    serve.call("rsm.delete_log_segment_data", args("metadata", SERDE.serialize(metadata)));
  }

  @Override
  public void close() {
    serve.close();
  }

  private static String path(Path p) {
    return p.toAbsolutePath().toString();
  }

  private static byte[] bytes(String method, Object answer) throws RemoteStorageException {
    if (answer instanceof byte[] b) {
      return b;
    }
    throw new RemoteStorageException("rlmm serve answered " + method + " with " + answer + ", not bytes");
  }
}
