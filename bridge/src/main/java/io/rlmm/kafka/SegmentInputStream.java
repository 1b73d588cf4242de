package io.rlmm.kafka;

import java.io.IOException;
import java.io.InputStream;
import java.util.Objects;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * A segment's bytes from {@code start} up to {@code end} (exclusive), fetched from rlmm serve one chunk at a time.
 *
 * <p>Invariant: the first chunk is fetched before the stream exists (so a missing segment fails there, not on the
 * first read); a later chunk only when a read needs it; no chunk asks beyond {@code end}; a chunk shorter than asked is
 * the segment's last.
 *
 * <p>Sizes follow Kafka's remote read: it opens the stream at the offset index's entry at or before the fetch
 * offset, skips to the batch holding the offset, reads {@code min(fetch.max.bytes, max.partition.fetch.bytes)}
 * from there (as its consumers ask: about 1.25 MiB for Kafka's ConsumerPerformance, 1 MiB for a default consumer)
 * and closes the stream. So the first chunk asks {@code firstBytes} (the caller's estimate of one read, with slack:
 * one round trip per fetch), and later chunks start at {@link #NEXT_BYTES} and double up to {@code chunkBytes}: a
 * read that overshoots the first chunk by a little does not move another full chunk through the socket. On close,
 * {@code onClose} learns how many bytes the reader took and whether the segment's end (or {@code end}) stopped it.
  */
final class SegmentInputStream extends InputStream {
  /** One fetch: at most {@code length} bytes from {@code position}. */
  interface Chunks {
    byte[] fetch(long position, int length) throws RemoteStorageException;
  }

  /** What one stream's reader took: bytes read, and whether the range's end stopped it. */
  interface OnClose {
    void closed(long taken, boolean atEnd);
  }

  /** The first later chunk's size. */
  static final int NEXT_BYTES = 64 << 10;

  private final Chunks chunks;
  private final OnClose onClose;
  private final long start;
  private final long end;
  private final int chunkBytes;
  private int want;
  private long next;
  private byte[] buf;
  private int off;
  private boolean last;
  private boolean closed;

  /** The stream over {@code first}, the answer to a first chunk call that asked {@code firstWant} bytes. */
  SegmentInputStream(Chunks chunks, byte[] first, int firstWant, long start, long end, int chunkBytes,
      OnClose onClose) throws RemoteStorageException {
    this.chunks = chunks;
    this.onClose = onClose;
    this.start = start;
    this.end = end;
    this.chunkBytes = chunkBytes;
    this.next = start;
    accept(first, (int) Math.min(firstWant, end - start));
    this.want = Math.min(NEXT_BYTES, chunkBytes);
  }

  private void fill() throws RemoteStorageException {
    int asked = (int) Math.min(want, end - next);
    byte[] got = asked <= 0 ? new byte[0] : chunks.fetch(next, asked);
    want = (int) Math.min((long) want * 2, chunkBytes);
    accept(got, asked);
  }

  private void accept(byte[] got, int asked) throws RemoteStorageException {
    if (got.length > asked) {
      throw new RemoteStorageException("rlmm serve answered " + got.length + " bytes at " + next + " for at most " + asked);
    }
    buf = got;
    off = 0;
    next += got.length;
    last = got.length < asked || next >= end;
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
    if (closed) return;
    closed = true;
    onClose.closed(next - (buf.length - off) - start, last && off == buf.length);
    buf = null;
  }
}
