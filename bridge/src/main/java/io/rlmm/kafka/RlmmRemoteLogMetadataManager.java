package io.rlmm.kafka;

import static io.rlmm.kafka.ServeConnection.args;

import java.nio.ByteBuffer;
import java.util.*;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.*;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Kafka's RemoteLogMetadataManager, answered by {@code rlmm serve} (the broker's
 * {@code remote.log.metadata.manager.class.name}; its settings under {@code rlmm.config.}).
 *
 * <p>Invariant: no metadata is decided here. The state held is which partitions this broker leads or follows,
 * so that a restarted rlmm serve gets the full sets again: sent right after each connect, under the same lock as
 * the changes themselves, so no change is lost or overtaken. And two answers of rlmm serve, kept while they
 * cannot have changed (an idle broker asks isReady and listRemoteLogSegments of every partition each task
 * interval; each answered here saves a round trip to rlmm serve):
 * <ul>
 * <li>which partitions rlmm serve said are ready: a partition's readiness only grows while its assignment stands
 * (the manager has applied its metadata partition up to the offset it needed), so a {@code true} is remembered,
 * for the connection it came on, until the partition's leadership changes or stops;
 * <li>a partition's listing, which rlmm serve tags with its version: the partition's metadata partition and the
 * offset applied there. Every change of the partition's metadata is an event applied there, so the listing holds
 * while that offset does. rlmm serve pushes each metadata partition's offset as it moves, and answers each write
 * with the offset once applied (taken before Kafka sees the write done), so a kept listing is used only while no
 * newer offset is known. Kept for the connection it came on, forgotten with the partition's leadership, at most
 * {@code list.cache.segments} segments in all (0: keep none).
 * </ul>
 */
public class RlmmRemoteLogMetadataManager implements RemoteLogMetadataManager {
  private static final Logger LOG = LoggerFactory.getLogger(RlmmRemoteLogMetadataManager.class);
  private static final RemoteLogMetadataSerde SERDE = new RemoteLogMetadataSerde();
  private final Object leadership = new Object();
  private final Set<TopicIdPartition> leaders = new LinkedHashSet<>(); // guarded by leadership
  private final Set<TopicIdPartition> followers = new LinkedHashSet<>(); // guarded by leadership
  /** Partition -> the connection (session number) on which rlmm serve said it is ready. */
  private final Map<TopicIdPartition, Long> ready = new ConcurrentHashMap<>();
  /** Bumped (under leadership) by every change that may make a partition not ready. */
  private volatile long assignments;
  /** Metadata partition -> the highest offset rlmm serve said it has applied there (never lowered). */
  private final Map<Long, Long> applied = new ConcurrentHashMap<>();
  private record ListingKey(TopicIdPartition tp, Integer epoch) { }
  private record Listing(long session, long metadataPartition, long offset, List<RemoteLogSegmentMetadata> segments) { }
  private final Map<ListingKey, Listing> listings = new ConcurrentHashMap<>();
  private long listedSegments; // guarded by leadership: the segments in listings
  private long listCacheSegments = 100_000;
  private final ServeConnection serve = new ServeConnection("rlmm", this::resendLeadership, this::pushed);

  @Override
  public void configure(Map<String, ?> configs) {
    String keep = ServeConnection.string(configs, "list.cache.segments");
    if (keep != null) {
      try {
        listCacheSegments = Long.parseLong(keep);
      } catch (NumberFormatException e) {
        listCacheSegments = -1;
      }
      if (listCacheSegments < 0) {
        throw new org.apache.kafka.common.config.ConfigException("list.cache.segments", keep,
            "must be a whole number of segments, 0 or more (0: keep no listing)");
      }
    }
    serve.configure(configs);
  }

  @Override
  public CompletableFuture<Void> addRemoteLogSegmentMetadata(RemoteLogSegmentMetadata metadata)
      throws RemoteStorageException {
    return put("rlmm.add_remote_log_segment_metadata", metadata);
  }

  @Override
  public CompletableFuture<Void> updateRemoteLogSegmentMetadata(RemoteLogSegmentMetadataUpdate update)
      throws RemoteStorageException {
    return put("rlmm.update_remote_log_segment_metadata", update);
  }

  @Override
  public CompletableFuture<Void> putRemotePartitionDeleteMetadata(RemotePartitionDeleteMetadata metadata)
      throws RemoteStorageException {
    return put("rlmm.put_remote_partition_delete_metadata", metadata);
  }

  private CompletableFuture<Void> put(String method, RemoteLogMetadata metadata) throws RemoteStorageException {
    return serve.callAsync(method, args("metadata", SERDE.serialize(metadata)), serve.callTimeoutMs)
        .thenApply(answer -> {
          advance(answer); // before Kafka sees the write done: listings kept from before it are stale
          return null;
        });
  }

  /** A version, [metadata partition, offset applied there] (null: none), raises what is known applied. */
  private void advance(Object version) {
    if (version instanceof List<?> v && v.size() == 2 && v.get(0) instanceof Long p && v.get(1) instanceof Long o) {
      applied.merge(p, o, Math::max);
    }
  }

  /** rlmm serve's pushes: {"push": "applied", "offsets": [[metadata partition, offset], ...]}. */
  private void pushed(Map<?, ?> push) {
    if ("applied".equals(push.get("push")) && push.get("offsets") instanceof List<?> offsets) {
      for (Object version : offsets) advance(version);
    }
  }

  @Override
  public Optional<RemoteLogSegmentMetadata> remoteLogSegmentMetadata(TopicIdPartition tp, int epoch, long offset)
      throws RemoteStorageException {
    return Optional.ofNullable(segment(serve.call("rlmm.remote_log_segment_metadata",
        args("topic_id_partition", tip(tp), "epoch", epoch, "offset", offset))));
  }

  @Override
  public Optional<Long> highestOffsetForEpoch(TopicIdPartition tp, int leaderEpoch) throws RemoteStorageException {
    Object answer = serve.call("rlmm.highest_offset_for_epoch",
        args("topic_id_partition", tip(tp), "leader_epoch", leaderEpoch));
    return answer == null ? Optional.empty() : Optional.of(number(answer));
  }

  @Override
  public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition tp) throws RemoteStorageException {
    return list(tp, null);
  }

  @Override
  public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition tp, int leaderEpoch)
      throws RemoteStorageException {
    return list(tp, leaderEpoch);
  }

  private Iterator<RemoteLogSegmentMetadata> list(TopicIdPartition tp, Integer epoch) throws RemoteStorageException {
    ListingKey key = new ListingKey(tp, epoch);
    long session = serve.sessionNumber();
    Listing kept = listings.get(key);
    if (kept != null && kept.session() == session && serve.isConnected()
        && kept.offset() >= applied.getOrDefault(kept.metadataPartition(), -1L)) {
      return kept.segments().iterator();
    }
    long before = assignments;
    Object answer = serve.call("rlmm.list_remote_log_segments", args("topic_id_partition", tip(tp), "leader_epoch", epoch));
    if (!(answer instanceof Map<?, ?> listing) || !(listing.get("segments") instanceof List<?> bins)) {
      throw new RemoteStorageException("rlmm serve answered list_remote_log_segments with " + answer);
    }
    List<RemoteLogSegmentMetadata> segments = new ArrayList<>(bins.size());
    for (Object bin : bins) segments.add(segment(bin));
    segments = Collections.unmodifiableList(segments);
    if (listing.get("version") instanceof List<?> v && v.size() == 2 && v.get(0) instanceof Long p
        && v.get(1) instanceof Long o) {
      keep(key, new Listing(session, p, o, segments), before);
    }
    return segments.iterator();
  }

  /** Keeps a listing unless a leadership change or a new connection overtook its answer, or it is too many. */
  private void keep(ListingKey key, Listing listing, long before) {
    int size = listing.segments().size();
    // 0 keeps none: not even an empty listing, which would fit a bound of 0.
    if (listCacheSegments == 0 || size > listCacheSegments) return;
    synchronized (leadership) {
      if (assignments != before || serve.sessionNumber() != listing.session()) return;
      if (listedSegments + size > listCacheSegments) {
        listings.clear(); // over the bound: start again rather than track an order of use
        listedSegments = 0;
      }
      Listing old = listings.put(key, listing);
      listedSegments += size - (old == null ? 0 : old.segments().size());
    }
  }

  @Override
  public long remoteLogSize(TopicIdPartition tp, int leaderEpoch) throws RemoteStorageException {
    return number(serve.call("rlmm.remote_log_size", args("topic_id_partition", tip(tp), "leader_epoch", leaderEpoch)));
  }

  @Override
  public Optional<RemoteLogSegmentMetadata> nextSegmentWithTxnIndex(TopicIdPartition tp, int epoch, long offset)
      throws RemoteStorageException {
    return Optional.ofNullable(segment(serve.call("rlmm.next_segment_with_txn_index",
        args("topic_id_partition", tip(tp), "epoch", epoch, "offset", offset))));
  }

  @Override
  public boolean isReady(TopicIdPartition tp) {
    if (!serve.isConnected()) return false;
    long session = serve.sessionNumber(); // after: a connection's number is set before it connects
    Long readyOn = ready.get(tp);
    if (readyOn != null && readyOn == session) return true;
    long before = assignments;
    try {
      boolean answer = Boolean.TRUE.equals(serve.call("rlmm.is_ready", args("topic_id_partition", tip(tp))));
      if (answer) {
        synchronized (leadership) {
          // kept only if no leadership change and no new connection overtook the answer
          if (assignments == before && serve.sessionNumber() == session) ready.put(tp, session);
        }
      }
      return answer;
    } catch (RemoteStorageException | RuntimeException e) {
      LOG.debug("rlmm.is_ready {}: {}", tp, e.toString());
      return false;
    }
  }

  @Override
  public void onPartitionLeadershipChanges(Set<TopicIdPartition> leaderPartitions,
      Set<TopicIdPartition> followerPartitions) {
    synchronized (leadership) {
      forget(leaderPartitions);
      forget(followerPartitions);
      followers.removeAll(leaderPartitions);
      leaders.addAll(leaderPartitions);
      leaders.removeAll(followerPartitions);
      followers.addAll(followerPartitions);
      tell("rlmm.on_partition_leadership_changes",
          args("leaders", tips(leaderPartitions), "followers", tips(followerPartitions)));
    }
  }

  @Override
  public void onStopPartitions(Set<TopicIdPartition> partitions) {
    synchronized (leadership) {
      forget(partitions);
      leaders.removeAll(partitions);
      followers.removeAll(partitions);
      tell("rlmm.on_stop_partitions", args("partitions", tips(partitions)));
    }
  }

  /**
   * Sends a leadership change without waiting for the answer: Kafka calls this from the thread that applies
   * the cluster's metadata, which must never wait on rlmm serve. Sends go out in call order; the state is
   * sent whole again on every reconnect.
   */
  private void tell(String method, Map<String, ?> args) {
    if (!serve.isConnected()) {
      LOG.debug("{} kept for rlmm serve's next connection", method);
      return;
    }
    try {
      serve.callAsync(method, args, serve.callTimeoutMs).whenComplete((answer, e) -> {
        if (e != null) {
          LOG.warn("{} not delivered ({}); the leadership state is sent again when rlmm serve reconnects",
              method, (e instanceof CompletionException && e.getCause() != null ? e.getCause() : e).getMessage());
        }
      });
    } catch (RemoteStorageException e) {
      LOG.warn("{} not delivered ({}); the leadership state is sent again when rlmm serve reconnects",
          method, e.getMessage());
    }
  }

  /** Under leadership: the partitions' remembered readiness and listings go, and answers in flight are not kept. */
  private void forget(Collection<TopicIdPartition> partitions) {
    assignments++;
    ready.keySet().removeAll(partitions);
    Set<TopicIdPartition> gone = partitions instanceof Set<TopicIdPartition> set ? set : new HashSet<>(partitions);
    listings.entrySet().removeIf(e -> {
      if (!gone.contains(e.getKey().tp())) return false;
      listedSegments -= e.getValue().segments().size();
      return true;
    });
  }

  /** Run by the connection right after each (re)connect. */
  private void resendLeadership() throws RemoteStorageException {
    synchronized (leadership) {
      ready.clear(); // a new connection (maybe a new rlmm serve) decides readiness and listings afresh
      listings.clear();
      listedSegments = 0;
      if (!leaders.isEmpty() || !followers.isEmpty()) {
        serve.call("rlmm.on_partition_leadership_changes", args("leaders", tips(leaders), "followers", tips(followers)));
      }
    }
  }

  @Override
  public void close() {
    serve.close();
  }

  /** {topic_id: 16 bytes (most significant bits first), topic, partition}. */
  private static Map<String, Object> tip(TopicIdPartition tp) {
    byte[] id = ByteBuffer.allocate(16).putLong(tp.topicId().getMostSignificantBits())
        .putLong(tp.topicId().getLeastSignificantBits()).array();
    return args("topic_id", id, "topic", tp.topic(), "partition", tp.partition());
  }

  private static List<Map<String, Object>> tips(Collection<TopicIdPartition> partitions) {
    return partitions.stream().map(RlmmRemoteLogMetadataManager::tip).toList();
  }

  private static RemoteLogSegmentMetadata segment(Object answer) throws RemoteStorageException {
    try {
      if (answer == null) return null;
      if (answer instanceof byte[] bin && SERDE.deserialize(bin) instanceof RemoteLogSegmentMetadata md) return md;
    } catch (RuntimeException e) {
      throw new RemoteStorageException("rlmm serve answered with bytes that are not segment metadata: " + e, e);
    }
    throw new RemoteStorageException("rlmm serve answered with " + answer + ", not segment metadata");
  }

  private static long number(Object answer) throws RemoteStorageException {
    if (answer instanceof Long n) return n;
    throw new RemoteStorageException("rlmm serve answered with " + answer + ", not a whole number");
  }
}
