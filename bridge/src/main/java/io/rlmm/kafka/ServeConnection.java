package io.rlmm.kafka;

import java.io.*;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One plugin class's connection to {@code rlmm serve} over a Unix socket, and the supervisor thread that
 * (re)connects it, starting the process when nothing listens and a config {@code file} is set.
 *
 * <p>Invariant: a call goes out only on a connection that has passed {@code hello} and {@code configure}
 * (otherwise it fails at once), and every call that went out ends by its deadline: with the answer, the mapped
 * error, a timeout, or "went away" when the connection drops. Only the instance that started a process stops it,
 * and only once rlmm serve says no other plugin class is open on it (or cannot be asked).
 */
final class ServeConnection implements Closeable {
  private static final Logger LOG = LoggerFactory.getLogger(ServeConnection.class);
  static final String VERSION = readVersion();
  /** The keys the bridge reads itself; every other one goes to rlmm serve in {@code configure}. */
  static final Set<String> BRIDGE_KEYS = Set.of("file", "command", "socket", "call.timeout.ms", "copy.timeout.ms",
      "start.timeout.ms", "fetch.chunk.bytes", "fetch.file.reads", "list.cache.segments");
  private static final int MAX_FRAME = 64 << 20;
  private static final int EXIT_ALREADY_SERVING = 3;
  private static final long MIN_BACKOFF_MS = 1_000, MAX_BACKOFF_MS = 30_000, STABLE_MS = 60_000;
  private static final long LISTEN_WAIT_MS = 60_000;
  /** How long a call waits for a restarting rlmm serve (at most its own deadline). */
  private static final long RECONNECT_WAIT_MS = 5_000;

  /** Sends state that must survive a restart of rlmm serve; run right after each connect. */
  interface OnConnect {
    void run() throws RemoteStorageException;
  }

  /** Takes a frame rlmm serve sent unasked (no id; {@code push} names its kind), on the reader thread. */
  interface OnPush {
    void accept(Map<?, ?> push);
  }

  /** The wire protocol this bridge speaks (rlmm serve's PROTOCOL_VERSION). */
  static final int PROTOCOL = 2;
  private final String role;
  private final OnConnect onConnect;
  private final OnPush onPush;
  private final CompletableFuture<Void> firstConnect = new CompletableFuture<>();
  private Path file; // null in attach mode
  private Path socket;
  private List<String> command;
  private Map<String, String> props;
  long callTimeoutMs, copyTimeoutMs;
  private long startTimeoutMs;
  private ScheduledThreadPoolExecutor timer;
  private Thread supervisor;
  private Process process; // guarded by this: the rlmm serve this instance started
  private volatile boolean closed;
  private volatile Session session; // non-null only while connected
  private volatile long sessions; // written by the supervisor thread alone
  private volatile String lastReason = "not configured";

  ServeConnection(String role, OnConnect onConnect, OnPush onPush) {
    this.role = role;
    this.onConnect = onConnect;
    this.onPush = onPush;
  }

  void configure(Map<String, ?> configs) {
    String fileProp = string(configs, "file"), socketProp = string(configs, "socket");
    if (fileProp == null && socketProp == null) {
      throw new ConfigException("rlmm bridge (" + role + "): set `file` (the rlmm TOML config, to start rlmm serve)"
          + " or `socket` (to attach to a running rlmm serve); neither is set");
    }
    synchronized (this) {
      if (supervisor != null || closed) throw new IllegalStateException("rlmm bridge configured twice or closed");
      file = fileProp == null ? null : Path.of(fileProp).toAbsolutePath().normalize();
      socket = socketProp != null ? Path.of(socketProp) : defaultSocket(file, string(configs, "broker.id"));
      command = List.of(Objects.requireNonNullElse(string(configs, "command"), "rlmm").split("\\s+"));
      callTimeoutMs = number(configs, "call.timeout.ms", 30_000);
      copyTimeoutMs = number(configs, "copy.timeout.ms", 600_000);
      startTimeoutMs = number(configs, "start.timeout.ms", 30_000);
      props = new TreeMap<>();
      configs.forEach((k, v) -> {
        if (v != null && !BRIDGE_KEYS.contains(k)) props.put(k, String.valueOf(v));
      });
      lastReason = "not connected yet";
      timer = new ScheduledThreadPoolExecutor(1, r -> daemon(r, "rlmm-bridge-" + role + "-timer"));
      timer.setRemoveOnCancelPolicy(true);
      supervisor = daemon(this::supervise, "rlmm-bridge-" + role);
      supervisor.start();
    }
    try {
      firstConnect.get(startTimeoutMs, TimeUnit.MILLISECONDS);
    } catch (TimeoutException | ExecutionException e) {
      LOG.warn("rlmm serve at {} not connected after {} ms ({}): {}; calls fail until it is",
          socket, startTimeoutMs, role, lastReason);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  static String string(Map<String, ?> configs, String key) {
    String s = configs.get(key) == null ? "" : String.valueOf(configs.get(key)).trim();
    return s.isEmpty() ? null : s;
  }

  static long number(Map<String, ?> configs, String key, long dflt) {
    String v = string(configs, key);
    if (v == null) return dflt;
    try {
      long n = Long.parseLong(v);
      if (n > 0) return n;
    } catch (NumberFormatException ignored) {
      // refused below
    }
    throw new ConfigException(key, v, "must be a positive whole number");
  }

  /** {@code <tmpdir>/rlmm-<broker.id>-<12 hex of sha-256 of file>.sock}: one per broker and file. */
  private static Path defaultSocket(Path file, String brokerId) {
    try {
      byte[] sha = MessageDigest.getInstance("SHA-256").digest(file.toString().getBytes(StandardCharsets.UTF_8));
      String id = brokerId == null ? "" : brokerId + "-";
      return Path.of(System.getProperty("java.io.tmpdir"), "rlmm-" + id + HexFormat.of().formatHex(sha, 0, 6) + ".sock");
    } catch (java.security.NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  // --- calls ---------------------------------------------------------------------------------------------------

  boolean isConnected() {
    return session != null;
  }

  /** Which connection to rlmm serve this is: a new number for each, taken before calls can use it. */
  long sessionNumber() {
    return sessions;
  }

  /** The answer's result, or the mapped exception completing the future exceptionally. */
  CompletableFuture<Object> callAsync(String method, Map<String, ?> args, long timeoutMs)
      throws RemoteStorageException {
    Session s = session;
    if (s == null) s = awaitSession(Math.min(timeoutMs, RECONNECT_WAIT_MS));
    if (s == null) throw new RemoteStorageException("rlmm serve at " + socket + " is not connected: " + lastReason);
    return s.request(method, args, timeoutMs).thenApply(ServeConnection::result);
  }

  /**
   * The session once one is up, within {@code waitMs}; null otherwise. A call made while rlmm serve restarts
   * (about a second) waits for it rather than failing: Kafka does not retry everything it gives up on (the
   * cleanup of a failed copy is tried once).
   */
  private Session awaitSession(long waitMs) {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(waitMs);
    Session s;
    while ((s = session) == null && !closed && System.nanoTime() < deadline) {
      try {
        Thread.sleep(20);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return null;
      }
    }
    return s;
  }

  Object call(String method, Map<String, ?> args) throws RemoteStorageException {
    return call(method, args, callTimeoutMs);
  }

  Object call(String method, Map<String, ?> args, long timeoutMs) throws RemoteStorageException {
    return await(callAsync(method, args, timeoutMs), method, timeoutMs);
  }

  /** Call arguments from key, value pairs (a null value is sent as nil). */
  static Map<String, Object> args(Object... keyValues) {
    Map<String, Object> m = new LinkedHashMap<>();
    for (int i = 0; i < keyValues.length; i += 2) m.put((String) keyValues[i], keyValues[i + 1]);
    return m;
  }

  private static Object result(Map<?, ?> answer) {
    if (!(answer.get("error") instanceof Map<?, ?> error)) return answer.get("result");
    String message = String.valueOf(error.get("message"));
    throw new CompletionException("not_found".equals(error.get("type"))
        ? new RemoteResourceNotFoundException(message) : new RemoteStorageException(message));
  }

  private static Object await(CompletableFuture<?> f, String method, long timeoutMs) throws RemoteStorageException {
    try {
      return f.get(timeoutMs + 5_000, TimeUnit.MILLISECONDS); // the timer fails it first
    } catch (ExecutionException e) {
      if (e.getCause() instanceof RemoteStorageException cause) throw cause;
      throw new RemoteStorageException(method + " failed: " + e.getCause(), e.getCause());
    } catch (TimeoutException e) {
      throw new RemoteStorageException("rlmm serve did not answer " + method + " within " + timeoutMs + " ms");
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RemoteStorageException("interrupted waiting for rlmm serve to answer " + method, e);
    }
  }

  // --- supervision ---------------------------------------------------------------------------------------------

  private void supervise() {
    long backoff = MIN_BACKOFF_MS;
    while (!closed) {
      long pause = backoff;
      Session s = null;
      try {
        s = new Session(connectOrStart());
        handshake(s);
        sessions++;
        session = s;
        if (onConnect != null) onConnect.run();
        firstConnect.complete(null);
        long upSince = System.nanoTime();
        lastReason = s.done.get(); // until the connection drops
        if (closed) break;
        if (System.nanoTime() - upSince >= TimeUnit.MILLISECONDS.toNanos(STABLE_MS)) {
          backoff = pause = MIN_BACKOFF_MS;
        }
        LOG.warn("{}{}; reconnecting ({})", lastReason, reap(), role);
      } catch (VersionMismatch e) {
        lastReason = e.getMessage();
        LOG.error("rlmm serve at {} refused this bridge ({} {}): {}", socket, role, VERSION, e.getMessage());
        firstConnect.completeExceptionally(e); // configure() returns: waiting cannot help
        pause = MAX_BACKOFF_MS;
      } catch (InterruptedException e) {
        break;
      } catch (Exception e) {
        if (closed) break;
        Throwable t = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
        lastReason = t.getMessage() == null ? t.toString() : t.getMessage();
        LOG.warn("rlmm serve at {} not available ({}): {}; retrying in {} ms", socket, role, lastReason, pause);
      } finally {
        session = null;
        if (s != null) s.close("rlmm serve at " + socket + " went away");
      }
      if (pause == backoff) backoff = Math.min(2 * backoff, MAX_BACKOFF_MS);
      try {
        Thread.sleep(pause);
      } catch (InterruptedException e) {
        break;
      }
    }
  }

  private SocketChannel connectOrStart() throws IOException, InterruptedException {
    SocketChannel ch = tryConnect();
    if (ch != null) return ch;
    if (file == null) throw new IOException("cannot connect to " + socket + " (attach mode: `socket` set, no `file`)");
    Process p;
    synchronized (this) {
      if (closed) throw new InterruptedException();
      if (process == null || !process.isAlive()) process = start();
      p = process;
    }
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(LISTEN_WAIT_MS);
    boolean ours = true;
    while ((ch = tryConnect()) == null) {
      if (ours && !p.isAlive()) {
        forget(p);
        if (p.exitValue() != EXIT_ALREADY_SERVING) throw new IOException("rlmm serve exited with code " + p.exitValue());
        LOG.info("another rlmm serve holds {}; attaching to it ({})", socket, role);
        ours = false;
      }
      if (System.nanoTime() > deadline) {
        if (ours) {
          forget(p);
          stop(p, false);
        }
        throw new IOException("rlmm serve did not listen on " + socket + " within " + LISTEN_WAIT_MS + " ms");
      }
      Thread.sleep(100);
    }
    return ch;
  }

  private SocketChannel tryConnect() throws IOException {
    SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
    try {
      ch.connect(UnixDomainSocketAddress.of(socket));
      return ch;
    } catch (IOException e) {
      closeQuietly(ch);
      return null;
    }
  }

  private Process start() throws IOException {
    List<String> cmd = new ArrayList<>(command);
    cmd.addAll(List.of("--config", file.toString(), "serve", "--socket", socket.toString(),
        "--parent-pid", Long.toString(ProcessHandle.current().pid())));
    LOG.info("starting rlmm serve ({}): {}", role, String.join(" ", cmd));
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true)
        .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
    daemon(() -> {
      try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
        String level = "INFO";
        for (String line; (line = r.readLine()) != null; ) level = forward(line, level);
      } catch (IOException ignored) {
        // the process is gone
      }
    }, "rlmm-serve-output-" + role + "-" + p.pid()).start();
    return p;
  }

  /**
   * Logs one line of the serve's output at the level it starts with, which then goes
   * (the serve writes "LEVEL logger: message"; the broker's log adds the time); a line
   * without one, such as a traceback's, at the level of the line before it. Returns the
   * level used.
   */
  static String forward(String line, String previous) {
    int space = line.indexOf(' ');
    String first = space > 0 ? line.substring(0, space) : "";
    String level = previous;
    String text = line;
    switch (first) {
      case "DEBUG", "INFO", "WARNING", "ERROR" -> {
        level = first;
        text = line.substring(space + 1);
      }
      case "CRITICAL" -> level = first; // logged as ERROR: the word stays
      default -> { }
    }
    switch (level) {
      case "DEBUG" -> LOG.debug("rlmm serve: {}", text);
      case "WARNING" -> LOG.warn("rlmm serve: {}", text);
      case "ERROR", "CRITICAL" -> LOG.error("rlmm serve: {}", text);
      default -> LOG.info("rlmm serve: {}", text);
    }
    return level;
  }

  private synchronized void forget(Process p) {
    if (process == p) process = null;
  }

  /** " (exit code N)" when the serve this instance started ended with the connection. */
  private String reap() throws InterruptedException {
    Process p;
    synchronized (this) {
      p = process;
    }
    if (p == null || !p.waitFor(2, TimeUnit.SECONDS)) return "";
    forget(p);
    // 3: that process found another serve on the socket; the one that went away was not ours
    return p.exitValue() == EXIT_ALREADY_SERVING ? "" : " (exit code " + p.exitValue() + ")";
  }

  /** Waits for a serve that is {@code exiting} by itself; SIGTERM otherwise; SIGKILL after 15 s. */
  private void stop(Process p, boolean exiting) {
    LOG.info("stopping rlmm serve pid {} ({})", p.pid(), role);
    try {
      if (!exiting || !p.waitFor(15, TimeUnit.SECONDS)) p.destroy();
      if (!p.waitFor(15, TimeUnit.SECONDS)) {
        LOG.warn("rlmm serve pid {} did not exit within 15 s of SIGTERM; killing it", p.pid());
        p.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      p.destroyForcibly();
      Thread.currentThread().interrupt();
    }
  }

  private void handshake(Session s) throws Exception {
    Map<?, ?> hello = (Map<?, ?>) await(s.request("hello", args("protocol", PROTOCOL, "version", VERSION, "role", role,
        "jvm_pid", ProcessHandle.current().pid()), callTimeoutMs), "hello", callTimeoutMs);
    if (hello.get("error") instanceof Map<?, ?> e && "version_mismatch".equals(e.get("type"))) {
      throw new VersionMismatch(String.valueOf(e.get("message")));
    }
    Map<?, ?> serve = result(hello) instanceof Map<?, ?> m ? m : Map.of();
    LOG.info("rlmm serve pid {} version {} at {} ({})", serve.get("pid"), serve.get("version"), socket, role);
    await(s.request("configure", args("role", role, "props", props), callTimeoutMs)
        .thenApply(ServeConnection::result), "configure", callTimeoutMs);
  }

  private static final class VersionMismatch extends Exception {
    private static final long serialVersionUID = 1L;
    VersionMismatch(String message) { super(message); }
  }

  @Override
  public void close() {
    Thread sup;
    synchronized (this) {
      if (closed) return;
      closed = true;
      sup = supervisor;
    }
    Session s = session;
    session = null;
    // rlmm serve stops itself once every class that connected has closed (Kafka closes the RSM, then the
    // RLMM): its answer says whether it is stopping, so the first class to close never takes the process
    // from the second.
    Boolean stopping = null;
    if (s != null) {
      try {
        Map<?, ?> a = s.request("close", args("role", role), 2_000).get(2, TimeUnit.SECONDS);
        if (a.get("result") instanceof Map<?, ?> r) {
          stopping = Boolean.TRUE.equals(r.get("stopping"));
        }
      } catch (Exception e) {
        LOG.debug("rlmm serve at {} did not take close ({}): {}", socket, role, e.toString());
      }
      s.close("rlmm bridge (" + role + ") closed");
    }
    if (sup != null) {
      sup.interrupt();
      try {
        sup.join(5_000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    Process p;
    synchronized (this) {
      p = process;
      process = null;
    }
    if (p != null && Boolean.FALSE.equals(stopping)) {
      LOG.info("rlmm serve pid {} left running for the other plugin class on {} ({} closed)", p.pid(), socket, role);
    } else if (p != null) {
      stop(p, Boolean.TRUE.equals(stopping));
    }
    if (timer != null) timer.shutdownNow();
  }

  private static void closeQuietly(Closeable c) {
    try {
      c.close();
    } catch (IOException ignored) {
      // closing anyway
    }
  }

  private static Thread daemon(Runnable r, String name) {
    Thread t = new Thread(r, name);
    t.setDaemon(true);
    return t;
  }

  /** The jar's version, from its own resource (Kafka loads plugin jars child-first). */
  private static String readVersion() {
    try (InputStream in = ServeConnection.class.getResourceAsStream("version.properties")) {
      Properties p = new Properties();
      if (in != null) p.load(in);
      return p.getProperty("version", "unknown");
    } catch (IOException e) {
      return "unknown";
    }
  }

  // --- one connection ------------------------------------------------------------------------------------------

  /** One socket: a reader thread completes each request's future by id; writes hold a lock. */
  /** One frame waiting for the session's writer, and whether it went out. */
  private record Outgoing(ByteBuffer[] frame, AtomicBoolean sent) {
    static final Outgoing STOP = new Outgoing(new ByteBuffer[0], new AtomicBoolean());
  }

  private final class Session {
    final SocketChannel ch;
    final CompletableFuture<String> done = new CompletableFuture<>(); // the reason, once the connection is over
    private final Map<Long, CompletableFuture<Map<?, ?>>> pending = new ConcurrentHashMap<>();
    private final AtomicLong ids = new AtomicLong();
    // Frames go out on this session's own thread, never on the caller's: Kafka cancels its tasks by
    // interrupting them, and an interrupted write closes a SocketChannel for every call in flight.
    private final LinkedBlockingQueue<Outgoing> outgoing = new LinkedBlockingQueue<>();

    Session(SocketChannel ch) {
      this.ch = ch;
      daemon(this::readLoop, "rlmm-bridge-" + role + "-reader").start();
      daemon(this::writeLoop, "rlmm-bridge-" + role + "-writer").start();
    }

    CompletableFuture<Map<?, ?>> request(String method, Map<String, ?> args, long timeoutMs) {
      long id = ids.incrementAndGet();
      CompletableFuture<Map<?, ?>> f = new CompletableFuture<>();
      byte[] body;
      try {
        body = Msgpack.pack(args("id", id, "method", method, "args", args));
        if (body.length > MAX_FRAME) throw new IOException(body.length + " bytes, more than a frame's " + MAX_FRAME);
      } catch (IOException | RuntimeException e) {
        f.completeExceptionally(new RemoteStorageException("cannot send " + method + ": " + e.getMessage(), e));
        return f;
      }
      AtomicBoolean sent = new AtomicBoolean();
      pending.put(id, f);
      ScheduledFuture<?> deadline = timer.schedule(() -> {
        if (pending.remove(id) == null) return;
        f.completeExceptionally(
            new RemoteStorageException("rlmm serve did not answer " + method + " within " + timeoutMs + " ms"));
        if (!sent.get()) close("rlmm serve at " + socket + " did not read a request for " + timeoutMs + " ms");
      }, timeoutMs, TimeUnit.MILLISECONDS);
      f.whenComplete((r, e) -> deadline.cancel(false));
      if (done.isDone()) {
        pending.remove(id);
        f.completeExceptionally(new RemoteStorageException(done.getNow("")));
        return f;
      }
      outgoing.add(new Outgoing(new ByteBuffer[] {ByteBuffer.allocate(4).putInt(0, body.length), ByteBuffer.wrap(body)},
          sent));
      return f;
    }

    private void writeLoop() {
      try {
        for (Outgoing o; (o = outgoing.take()) != Outgoing.STOP; ) {
          while (o.frame()[1].hasRemaining()) ch.write(o.frame());
          o.sent().set(true);
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } catch (IOException e) {
        close("rlmm serve at " + socket + " went away: " + e);
      }
    }

    private void readLoop() {
      String why = "rlmm serve at " + socket + " went away";
      try {
        ByteBuffer head = ByteBuffer.allocate(4);
        while (readFully(head.clear())) {
          long n = head.getInt(0) & 0xFFFFFFFFL;
          if (n > MAX_FRAME) throw new IOException("a frame of " + n + " bytes, more than " + MAX_FRAME);
          ByteBuffer body = ByteBuffer.allocate((int) n);
          if (!readFully(body)) throw new IOException("the socket closed inside a frame");
          if (!(Msgpack.unpack(body.array()) instanceof Map<?, ?> answer)) throw new IOException("a frame not a map");
          if (!answer.containsKey("id")) {
            push(answer);
            continue;
          }
          CompletableFuture<Map<?, ?>> f = answer.get("id") instanceof Long id ? pending.remove(id) : null;
          if (f != null) f.complete(answer);
        }
      } catch (IOException | RuntimeException e) {
        why += ": " + e;
      }
      close(why);
    }

    private void push(Map<?, ?> frame) {
      if (onPush == null) return;
      try {
        onPush.accept(frame);
      } catch (RuntimeException e) {
        LOG.warn("rlmm serve pushed a frame this bridge cannot take ({}): {}", role, e.toString());
      }
    }

    private boolean readFully(ByteBuffer b) throws IOException {
      while (b.hasRemaining()) {
        if (ch.read(b) < 0) return false;
      }
      return true;
    }

    /** Ends the connection: closes the socket and fails every call in flight with the reason. */
    void close(String reason) {
      if (!done.complete(reason)) return;
      outgoing.add(Outgoing.STOP);
      closeQuietly(ch);
      for (Long id : pending.keySet()) {
        CompletableFuture<Map<?, ?>> f = pending.remove(id);
        if (f != null) f.completeExceptionally(new RemoteStorageException(reason));
      }
    }
  }
}
