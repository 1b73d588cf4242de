// Kafka's RLM tasks ask isReady of every partition each run. This drives rlmm's RLMM
// class against a running rlmm serve (the bridge only attaches), for one partition:
// led, then isReady until true; then <asks> more isReady; then stopped, isReady once;
// then led again, isReady until true. Run with java's single-file launcher:
//   java -cp <jar>:<kafka libs>/* ReadinessCaller.java <socket> <asks>
// It prints "first <calls until ready>", "asked <n> true <m>", "stopped <answer>",
// "again <calls until ready>" and exits 0 (1 if a partition never became ready in 30 s).
import io.rlmm.kafka.RlmmRemoteLogMetadataManager;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;

public class ReadinessCaller {
  static long untilReady(RlmmRemoteLogMetadataManager rlmm, TopicIdPartition tp) throws Exception {
    long calls = 0;
    long deadline = System.nanoTime() + 30_000_000_000L;
    while (System.nanoTime() < deadline) {
      calls++;
      if (rlmm.isReady(tp)) return calls;
      Thread.sleep(20);
    }
    System.out.println("never ready after " + calls + " calls");
    System.exit(1);
    return calls;
  }

  public static void main(String[] args) throws Exception {
    RlmmRemoteLogMetadataManager rlmm = new RlmmRemoteLogMetadataManager();
    rlmm.configure(Map.of("socket", args[0], "broker.id", "1"));
    TopicIdPartition tp = new TopicIdPartition(Uuid.randomUuid(), 0, "ready");
    rlmm.onPartitionLeadershipChanges(Set.of(tp), Set.of());
    System.out.println("first " + untilReady(rlmm, tp));
    int asks = Integer.parseInt(args[1]);
    int trues = 0;
    for (int i = 0; i < asks; i++) if (rlmm.isReady(tp)) trues++;
    System.out.println("asked " + asks + " true " + trues);
    rlmm.onStopPartitions(Set.of(tp));
    System.out.println("stopped " + rlmm.isReady(tp));
    rlmm.onPartitionLeadershipChanges(Set.of(tp), Set.of());
    System.out.println("again " + untilReady(rlmm, tp));
    rlmm.close();
  }
}
