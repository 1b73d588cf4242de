package io.rlmm.kafka;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Objects;

/**
 * A range of a segment's log read straight from the file rlmm serve named (its local store keeps each log as a
 * plain file on this host): no bytes through the socket.
 *
 * <p>Invariant: reads never go past {@code end} nor the file's size as rlmm serve gave it; close reports the bytes
 * read once, and a read after close fails.
 */
final class SegmentFileStream extends InputStream {
  private final FileChannel channel;
  private final SegmentInputStream.OnClose onClose;
  private final long start;
  private final long end;
  private long position;
  private boolean closed;

  SegmentFileStream(Path path, long size, long start, long end, SegmentInputStream.OnClose onClose)
      throws IOException {
    this.channel = FileChannel.open(path, StandardOpenOption.READ);
    this.onClose = onClose;
    this.start = start;
    this.end = Math.min(end, size);
    this.position = start;
  }

  @Override
  public int read() throws IOException {
    byte[] one = new byte[1];
    return read(one, 0, 1) == 1 ? one[0] & 0xff : -1;
  }

  @Override
  public int read(byte[] b, int from, int len) throws IOException {
    Objects.checkFromIndexSize(from, len, b.length);
    if (closed) throw new IOException("stream closed");
    if (len == 0) return 0;
    if (position >= end) return -1;
    int n = channel.read(ByteBuffer.wrap(b, from, (int) Math.min(len, end - position)), position);
    if (n < 0) return -1; // the file is shorter than rlmm serve said: the end of what there is
    position += n;
    return n;
  }

  @Override
  public int available() {
    return closed ? 0 : (int) Math.min(Math.max(0, end - position), Integer.MAX_VALUE);
  }

  @Override
  public void close() throws IOException {
    if (closed) return;
    closed = true;
    try {
      channel.close();
    } finally {
      onClose.closed(position - start, position >= end);
    }
  }
}
