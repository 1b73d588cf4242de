package io.rlmm.kafka;

import java.io.IOException;
import java.io.InputStream;
import java.util.Objects;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * A segment's bytes from {@code start} up to {@code end} (exclusive), fetched from rlmm serve one chunk at a time.
 *
 * <p>Invariant: the first chunk is fetched in the constructor (so a missing segment fails there, not on the first
 * read); a later chunk only when a read needs it; no chunk asks beyond {@code end}; a chunk shorter than asked is
 * the segment's last.
 *
 * <p>Sizes follow Kafka's remote read: it opens the stream at the offset index's entry at or before the fetch
 * offset (up to {@code index.interval.bytes} early), skips to the batch holding the offset, then reads
 * {@code max.partition.fetch.bytes} from there and closes the stream. So the first chunk asks {@code firstBytes}
 * (the chunk size plus slack for that skip: one round trip per fetch), and later chunks start at
 * {@link #NEXT_BYTES} and double up to {@code chunkBytes}: a read that overshoots the first chunk by a few bytes
 * does not move another full chunk through the socket.
 */
final class SegmentInputStream extends InputStream {
  /** One fetch: at most {@code length} bytes from {@code position}. */
  interface Chunks {
    byte[] fetch(long position, int length) throws RemoteStorageException;
  }

  /** The first later chunk's size. */
  static final int NEXT_BYTES = 64 << 10;

  private final Chunks chunks;
  private final long end;
  private final int chunkBytes;
  private int want;
  private long next;
  private byte[] buf;
  private int off;
  private boolean last;
  private boolean closed;

  SegmentInputStream(Chunks chunks, long start, long end, int firstBytes, int chunkBytes)
      throws RemoteStorageException {
    this.chunks = chunks;
    this.end = end;
    this.chunkBytes = chunkBytes;
    this.next = start;
    this.want = firstBytes;
    fill();
    this.want = Math.min(NEXT_BYTES, chunkBytes);
  }

  private void fill() throws RemoteStorageException {
    int want = (int) Math.min(this.want, end - next);
    this.want = (int) Math.min((long) this.want * 2, chunkBytes);
    buf = want <= 0 ? new byte[0] : chunks.fetch(next, want);
    if (buf.length > want) {
      throw new RemoteStorageException("rlmm serve answered " + buf.length + " bytes at " + next + " for at most " + want);
    }
    off = 0;
    next += buf.length;
    last = buf.length < want || next >= end;
  }

  /** True when a byte is buffered, false at the end of the range. */
  private boolean ensure() throws IOException {
    if (closed) throw new IOException("stream closed");
    while (off == buf.length) {
      if (last) return false;
      try {
        fill();
      } catch (RemoteStorageException e) {
        throw new IOException(e.getMessage(), e);
      }
    }
    return true;
  }

  @Override
  public int read() throws IOException {
    return ensure() ? buf[off++] & 0xff : -1;
  }

  @Override
  public int read(byte[] b, int from, int len) throws IOException {
    Objects.checkFromIndexSize(from, len, b.length);
    if (len == 0) return 0;
    if (!ensure()) return -1;
    int n = Math.min(len, buf.length - off);
    System.arraycopy(buf, off, b, from, n);
    off += n;
    return n;
  }

  @Override
  public int available() {
    return closed ? 0 : buf.length - off;
  }

  @Override
  public void close() {
    closed = true;
    buf = null;
  }
}
