// Kafka's expiration task lists every partition's segments each run. This drives two
// of rlmm's RLMM classes (two brokers: A leads the partition, B follows it) against a
// running rlmm serve (the bridges only attach), and checks that A's listings stay true
// while it keeps them: <n> listings of an empty partition; A adds a segment and lists
// at once (its own write); <n> more listings; B marks the segment copied and A lists
// until it sees that (another broker's write, pushed); A stops the partition and lists.
//   java -cp <jar>:<kafka libs>/* ListingCaller.java <socket> <n> [<A's list.cache.segments>]
// It prints "empty <n> <listings that were not empty>", "own <states right after A's
// write>", "kept <n> <listings that differed>", "other <ms until A saw B's write>
// <states>", "stopped <what a listing gave>" and exits 0 (1 if not ready in 30 s or B's
// write was not seen within 30 s).
import io.rlmm.kafka.RlmmRemoteLogMetadataManager;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;

public class ListingCaller {
  static void untilReady(RlmmRemoteLogMetadataManager rlmm, TopicIdPartition tp) throws Exception {
    long deadline = System.nanoTime() + 30_000_000_000L;
    while (!rlmm.isReady(tp)) {
      if (System.nanoTime() > deadline) {
        System.out.println("never ready");
        System.exit(1);
      }
      Thread.sleep(20);
    }
  }

  static List<String> states(RlmmRemoteLogMetadataManager rlmm, TopicIdPartition tp) throws Exception {
    List<String> out = new ArrayList<>();
    for (Iterator<RemoteLogSegmentMetadata> it = rlmm.listRemoteLogSegments(tp); it.hasNext(); ) {
      out.add(it.next().state().name());
    }
    return out;
  }

  public static void main(String[] args) throws Exception {
    int n = Integer.parseInt(args[1]);
    RlmmRemoteLogMetadataManager a = new RlmmRemoteLogMetadataManager();
    RlmmRemoteLogMetadataManager b = new RlmmRemoteLogMetadataManager();
    Map<String, String> aConfigs = new HashMap<>(Map.of("socket", args[0], "broker.id", "1"));
    if (args.length > 2) aConfigs.put("list.cache.segments", args[2]);
    a.configure(aConfigs);
    b.configure(Map.of("socket", args[0], "broker.id", "2"));
    TopicIdPartition tp = new TopicIdPartition(Uuid.randomUuid(), 0, "listed");
    a.onPartitionLeadershipChanges(Set.of(tp), Set.of());
    b.onPartitionLeadershipChanges(Set.of(), Set.of(tp));
    untilReady(a, tp);
    untilReady(b, tp);

    int notEmpty = 0;
    for (int i = 0; i < n; i++) if (!states(a, tp).isEmpty()) notEmpty++;
    System.out.println("empty " + n + " " + notEmpty);

    RemoteLogSegmentId id = new RemoteLogSegmentId(tp, Uuid.randomUuid());
    a.addRemoteLogSegmentMetadata(new RemoteLogSegmentMetadata(id, 0, 99, 0L, 1, 0L, 1000, Map.of(0, 0L))).get();
    List<String> own = states(a, tp);
    System.out.println("own " + own);

    int differed = 0;
    for (int i = 0; i < n; i++) if (!states(a, tp).equals(own)) differed++;
    System.out.println("kept " + n + " " + differed);

    b.updateRemoteLogSegmentMetadata(new RemoteLogSegmentMetadataUpdate(
        id, 1L, Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 2)).get();
    long t0 = System.nanoTime();
    List<String> seen;
    while (!(seen = states(a, tp)).equals(List.of("COPY_SEGMENT_FINISHED"))) {
      if (!seen.equals(own)) System.out.println("unexpected " + seen);
      if (System.nanoTime() - t0 > 30_000_000_000L) {
        System.out.println("other never seen " + seen);
        System.exit(1);
      }
      Thread.sleep(1);
    }
    System.out.println("other " + (System.nanoTime() - t0) / 1_000_000 + " " + seen);

    a.onStopPartitions(Set.of(tp));
    String stopped;
    try {
      stopped = "listed " + states(a, tp);
    } catch (Exception e) {
      stopped = e.getClass().getSimpleName();
    }
    System.out.println("stopped " + stopped);
    b.close();
    a.close();
  }
}
