"""Kafka's murmur2 partitioner: the values of Kafka's own UtilsTest, every tail length,
and (with Java) Kafka's Utils.murmur2 itself on random keys."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from rlmm.restore import murmur2, murmur2_partition

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_CASES = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

_JAVA = """
import org.apache.kafka.common.utils.Utils;
public class Murmur {
    public static void main(String[] args) {
        for (String a : args) {
            byte[] b = java.util.HexFormat.of().parseHex(a);
            System.out.println(Utils.murmur2(b) + " " + Utils.toPositive(Utils.murmur2(b)) % 7);
        }
    }
}
"""


@pytest.mark.parametrize(("key", "expected"), sorted(KAFKA_CASES.items()))
def test_kafkas_own_test_values(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_partition_is_to_positive_modulo_and_null_keys_keep_their_partition() -> None:
    # toPositive(-973932308) % 7 (Kafka: 3), not abs() % 7.
    assert murmur2_partition(b"21", 7, 5) == 3
    assert murmur2_partition(None, 4, 6) == 2
    assert all(0 <= murmur2_partition(bytes([i]) * i, 5, 0) < 5 for i in range(40))


@pytest.mark.apache_kafka
@pytest.mark.timeout(120)
def test_equals_kafkas_utils_murmur2(apache_kafka_libs: Path, tmp_path: Path) -> None:
    rng = random.Random(28)
    # Every tail length (0..3), empty, long, and bytes >= 0x80 (Java's signed bytes).
    keys = [b""] + [rng.randbytes(n) for n in [*range(1, 17), 31, 64, 1000] for _ in range(3)]
    source = tmp_path / "Murmur.java"
    source.write_text(_JAVA)
    done = subprocess.run(
        ["java", "-cp", str(apache_kafka_libs / "*"), str(source), *(k.hex() for k in keys)],
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    java = [(int(lines[i]), int(lines[i + 1])) for i in range(0, len(lines), 2)]
    assert java == [(murmur2(k), murmur2_partition(k, 7, 0)) for k in keys]
