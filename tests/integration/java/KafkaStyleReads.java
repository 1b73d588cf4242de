// Kafka's remote read (RemoteLogManager.read), driven against rlmm's RSM class: open the
// segment's stream at the offset index's position, skip to the batch holding the fetch
// offset, read max.partition.fetch.bytes, close. Run with java's single-file launcher,
// the plugin jar and Kafka's jars on the class path, against a running rlmm serve:
//   java -cp <jar>:<kafka libs>/* KafkaStyleReads.java <socket> <file reads: true|false> <metadata file> <start:skip:length[:end]>...
// <metadata file> holds the segment's metadata in Kafka's serde form; <file reads> is the
// class's fetch.file.reads; with :end, the read opens fetchLogSegment(start, end), end inclusive. For each read it
// prints "<start> <skip> <bytes read> <crc32 of them>" and exits 0.
import io.rlmm.kafka.RlmmRemoteStorageManager;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.zip.CRC32;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;

public class KafkaStyleReads {
  public static void main(String[] args) throws Exception {
    RlmmRemoteStorageManager rsm = new RlmmRemoteStorageManager();
    rsm.configure(Map.of("socket", args[0], "broker.id", "1", "fetch.file.reads", args[1]));
    RemoteLogSegmentMetadata md = (RemoteLogSegmentMetadata)
        new RemoteLogMetadataSerde().deserialize(Files.readAllBytes(Path.of(args[2])));
    for (int i = 3; i < args.length; i++) {
      String[] read = args[i].split(":");
      int start = Integer.parseInt(read[0]);
      int skip = Integer.parseInt(read[1]);
      int length = Integer.parseInt(read[2]);
      try (InputStream in = read.length > 3
          ? rsm.fetchLogSegment(md, start, Integer.parseInt(read[3]))
          : rsm.fetchLogSegment(md, start)) {
        in.readNBytes(skip);
        byte[] got = in.readNBytes(length);
        CRC32 crc = new CRC32();
        crc.update(got);
        System.out.println(start + " " + skip + " " + got.length + " " + crc.getValue());
      }
    }
    rsm.close();
  }
}
