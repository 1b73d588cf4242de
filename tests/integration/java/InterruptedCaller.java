// Kafka cancels its remote-log tasks by interrupting their threads. This drives rlmm's
// RLMM class as Kafka would: one thread calling isReady in a loop, interrupted again and
// again (the flag cleared before each next call, as a pool thread's is before its next
// task). Run with java's single-file launcher, the plugin jar and Kafka's jars on the
// class path, against a running rlmm serve (the bridge only attaches):
//   java -cp <jar>:<kafka libs>/* InterruptedCaller.java <socket> <interrupts>
// It prints "calls <n>" and exits 0; the serve's log says how often the class connected.
import io.rlmm.kafka.RlmmRemoteLogMetadataManager;
import java.util.Map;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;

public class InterruptedCaller {
  static volatile boolean stop;

  public static void main(String[] args) throws Exception {
    RlmmRemoteLogMetadataManager rlmm = new RlmmRemoteLogMetadataManager();
    rlmm.configure(Map.of("socket", args[0], "broker.id", "1"));
    TopicIdPartition tp = new TopicIdPartition(Uuid.randomUuid(), 0, "t");
    long[] calls = {0};
    Thread caller = new Thread(() -> {
      while (!stop) {
        rlmm.isReady(tp);
        calls[0]++;
        Thread.interrupted();
      }
    });
    caller.start();
    for (int i = 0, n = Integer.parseInt(args[1]); i < n; i++) {
      caller.interrupt();
      Thread.sleep(2);
    }
    stop = true;
    caller.join(10_000);
    System.out.println("calls " + calls[0]);
    rlmm.close();
  }
}
