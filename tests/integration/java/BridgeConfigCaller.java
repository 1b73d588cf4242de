// The RLMM class's own settings, given to configure() as Kafka gives a plugin's
// rlmm.config.* keys: each argument is a value of list.cache.segments; the class is
// configured with it and a socket nothing listens on (start.timeout.ms 1: no wait).
//   java -cp <jar>:<kafka libs>/* BridgeConfigCaller.java <value>...
// It prints "<i> accepted" or "<i> refused <ConfigException's message>" for the i-th
// value and exits 0.
import io.rlmm.kafka.RlmmRemoteLogMetadataManager;
import java.util.Map;
import org.apache.kafka.common.config.ConfigException;

public class BridgeConfigCaller {
  public static void main(String[] args) {
    for (int i = 0; i < args.length; i++) {
      RlmmRemoteLogMetadataManager rlmm = new RlmmRemoteLogMetadataManager();
      try {
        rlmm.configure(Map.of("socket", "/nonexistent/rlmm.sock", "start.timeout.ms", "1",
            "list.cache.segments", args[i]));
        System.out.println(i + " accepted");
      } catch (ConfigException e) {
        System.out.println(i + " refused " + e.getMessage());
      } finally {
        rlmm.close();
      }
    }
  }
}
