package io.rlmm.kafka;

import static io.rlmm.kafka.ServeConnection.args;

import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

/**
 * Kafka's RemoteStorageManager, answered by {@code rlmm serve} (the broker's
 * {@code remote.log.storage.manager.class.name}; its settings under {@code rsm.config.}).
 *
 * <p>Invariant: no tiering logic here; every method is one call to rlmm serve (a fetch, one call per chunk) and
 * fails with RemoteStorageException (RemoteResourceNotFoundException for {@code not_found}) when that call does.
 */
public class RlmmRemoteStorageManager implements RemoteStorageManager {
  private static final RemoteLogMetadataSerde SERDE = new RemoteLogMetadataSerde();
  private final ServeConnection serve = new ServeConnection("rsm", null);
  /** Slack on a fetch's first chunk for Kafka's skip from the offset index's entry to the fetch offset. */
  private static final int FIRST_CHUNK_SLACK = 64 << 10;

  private int chunkBytes = 1 << 20;

  @Override
  public void configure(Map<String, ?> configs) {
    // rlmm serve answers at most 16 MiB per chunk (MAX_CHUNK_BYTES), the first one's slack included
    chunkBytes = (int) Math.max(1, Math.min(ServeConnection.number(configs, "fetch.chunk.bytes", 1 << 20),
        (16 << 20) - FIRST_CHUNK_SLACK));
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
    if (start < 0 || end < start) {
      throw new IllegalArgumentException("bad segment range: start " + start + ", end " + (end - 1));
    }
    byte[] md = SERDE.serialize(metadata);
    return new SegmentInputStream((position, length) -> bytes("rsm.fetch_log_segment",
        serve.call("rsm.fetch_log_segment", args("metadata", md, "position", position, "length", length))),
        start, end, chunkBytes + FIRST_CHUNK_SLACK, chunkBytes);
  }

  @Override
  public InputStream fetchIndex(RemoteLogSegmentMetadata metadata, IndexType indexType) throws RemoteStorageException {
    Object answer = serve.call("rsm.fetch_index",
        args("metadata", SERDE.serialize(metadata), "index_type", indexType.name()));
    return new ByteArrayInputStream(bytes("rsm.fetch_index", answer));
  }

  @Override
  public void deleteLogSegmentData(RemoteLogSegmentMetadata metadata) throws RemoteStorageException {
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
