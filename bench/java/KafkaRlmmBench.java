// Benchmark driver for Kafka's own TopicBasedRemoteLogMetadataManager (Kafka 4.1).
//
// Job: the same workload as bench/kafka_writes.py's manager runs, through Kafka's Java
// API: W writer threads each loop add COPY_SEGMENT_STARTED + update
// COPY_SEGMENT_FINISHED, waiting on each returned future (which completes once
// Kafka's RLMM consumer has caught up with the write). Prints ONE JSON line.
//
// Usage (classpath: Kafka's jars + this class):
//   java KafkaRlmmBench BOOTSTRAP WRITERS SECONDS WARMUP_SECONDS PARTITIONS LOG_DIR

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;

public final class KafkaRlmmBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        int writers = Integer.parseInt(args[1]);
        double seconds = Double.parseDouble(args[2]);
        double warmup = Double.parseDouble(args[3]);
        int partitions = Integer.parseInt(args[4]);
        String logDir = args[5];

        Map<String, Object> config = new HashMap<>();
        config.put("remote.log.metadata.common.client.bootstrap.servers", bootstrap);
        config.put("remote.log.metadata.topic.replication.factor", "1");
        config.put("remote.log.metadata.topic.num.partitions", Integer.toString(partitions));
        config.put("broker.id", 1);
        config.put("log.dir", logDir);

        TopicBasedRemoteLogMetadataManager rlmm = new TopicBasedRemoteLogMetadataManager();
        int exit = 0;
        try {
            rlmm.configure(config);
            List<TopicIdPartition> tps = new ArrayList<>();
            Uuid topicId = Uuid.randomUuid();
            for (int i = 0; i < Math.max(writers, 8); i++) {
                tps.add(new TopicIdPartition(topicId, new TopicPartition("bench", i)));
            }
            rlmm.onPartitionLeadershipChanges(new HashSet<>(tps), Collections.emptySet());
            long readyBy = System.nanoTime() + 120_000_000_000L;
            for (TopicIdPartition tp : tps) {
                while (!rlmm.isReady(tp)) {
                    if (System.nanoTime() > readyBy) {
                        throw new IllegalStateException("Kafka's RLMM not ready for " + tp + " in 120 s");
                    }
                    Thread.sleep(10);
                }
            }

            long measureFrom = System.nanoTime() + (long) (warmup * 1e9);
            long deadline = measureFrom + (long) (seconds * 1e9);
            AtomicLong done = new AtomicLong();
            List<long[]> perThreadWrites = Collections.synchronizedList(new ArrayList<>());
            List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
            List<Thread> threads = new ArrayList<>();
            for (int w = 0; w < writers; w++) {
                final TopicIdPartition tp = tps.get(w % tps.size());
                final long base = (long) w * 1_000_000_000_000L;
                Thread thread = new Thread(() -> {
                    long[] latencies = new long[1 << 16];
                    int n = 0;
                    long offset = base;
                    try {
                        long t0;
                        while ((t0 = System.nanoTime()) < deadline) {
                            RemoteLogSegmentId id = new RemoteLogSegmentId(tp, Uuid.randomUuid());
                            RemoteLogSegmentMetadata m = new RemoteLogSegmentMetadata(
                                id, offset, offset + 999, 0L, 1, 0L, 1 << 30, Map.of(0, offset));
                            offset += 1000;
                            rlmm.addRemoteLogSegmentMetadata(m).get();
                            long t1 = System.nanoTime();
                            rlmm.updateRemoteLogSegmentMetadata(new RemoteLogSegmentMetadataUpdate(
                                id, 1L, Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1)).get();
                            long t2 = System.nanoTime();
                            if (t0 >= measureFrom && t2 <= deadline && n + 2 <= latencies.length) {
                                latencies[n++] = t1 - t0;
                                latencies[n++] = t2 - t1;
                                done.incrementAndGet();
                            }
                        }
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                    long[] mine = new long[n];
                    System.arraycopy(latencies, 0, mine, 0, n);
                    perThreadWrites.add(mine);
                });
                threads.add(thread);
                thread.start();
            }
            for (Thread thread : threads) {
                thread.join();
            }
            if (!failures.isEmpty()) {
                throw new IllegalStateException("writer failed", failures.get(0));
            }
            List<Long> all = new ArrayList<>();
            for (long[] values : perThreadWrites) {
                for (long v : values) {
                    all.add(v);
                }
            }
            Collections.sort(all);
            System.out.printf(
                "{\"writers\": %d, \"lifecycles\": %d, \"lifecycles_per_s\": %.1f, "
                    + "\"write_to_applied_ms_p50\": %.2f, \"write_to_applied_ms_p99\": %.2f}%n",
                writers, done.get(), done.get() / seconds, percentileMs(all, 0.50), percentileMs(all, 0.99));
        } catch (Throwable e) {
            e.printStackTrace();
            exit = 1;
        } finally {
            rlmm.close();
        }
        System.exit(exit);
    }

    private static double percentileMs(List<Long> sorted, double q) {
        if (sorted.isEmpty()) {
            return Double.NaN;
        }
        int index = Math.min(sorted.size() - 1, (int) (sorted.size() * q));
        return sorted.get(index) / 1e6;
    }
}
