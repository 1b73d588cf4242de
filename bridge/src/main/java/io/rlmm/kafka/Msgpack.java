package io.rlmm.kafka;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessagePacker;
import org.msgpack.core.MessageUnpacker;

/**
 * Plain Java values to and from one msgpack value.
 *
 * <p>Invariant: what {@link #pack} takes (null, String, byte[], Boolean, Integer, Long, Map, Collection)
 * {@link #unpack} gives back, except that every integer comes back as a Long and every array as a List.
 */
final class Msgpack {
  private Msgpack() {}

  static byte[] pack(Object value) throws IOException {
    try (MessageBufferPacker packer = MessagePack.newDefaultBufferPacker()) {
      write(packer, value);
      return packer.toByteArray();
    }
  }

  static Object unpack(byte[] bytes) throws IOException {
    try (MessageUnpacker unpacker = MessagePack.newDefaultUnpacker(bytes)) {
      return read(unpacker);
    }
  }

  private static void write(MessagePacker p, Object v) throws IOException {
    if (v == null) {
      p.packNil();
    } else if (v instanceof String s) {
      p.packString(s);
    } else if (v instanceof byte[] b) {
      p.packBinaryHeader(b.length).writePayload(b);
    } else if (v instanceof Boolean b) {
      p.packBoolean(b);
    } else if (v instanceof Integer || v instanceof Long) {
      p.packLong(((Number) v).longValue());
    } else if (v instanceof Map<?, ?> m) {
      p.packMapHeader(m.size());
      for (Map.Entry<?, ?> e : m.entrySet()) {
        write(p, e.getKey());
        write(p, e.getValue());
      }
    } else if (v instanceof Collection<?> c) {
      p.packArrayHeader(c.size());
      for (Object item : c) write(p, item);
    } else {
      throw new IllegalArgumentException("no msgpack form for a " + v.getClass().getName());
    }
  }

  private static Object read(MessageUnpacker u) throws IOException {
    switch (u.getNextFormat().getValueType()) {
      case NIL:
        u.unpackNil();
        return null;
      case BOOLEAN:
        return u.unpackBoolean();
      case INTEGER:
        return u.unpackLong();
      case FLOAT:
        return u.unpackDouble();
      case STRING:
        return u.unpackString();
      case BINARY:
        return u.readPayload(u.unpackBinaryHeader());
      case ARRAY:
        List<Object> list = new ArrayList<>();
        for (int n = u.unpackArrayHeader(); n > 0; n--) list.add(read(u));
        return list;
      case MAP:
        Map<Object, Object> map = new LinkedHashMap<>();
        for (int n = u.unpackMapHeader(); n > 0; n--) map.put(read(u), read(u));
        return map;
      default:
        throw new IOException("unexpected msgpack " + u.getNextFormat());
    }
  }
}
