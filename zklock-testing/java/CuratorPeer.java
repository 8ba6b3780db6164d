// A small Apache Curator program driven line by line over stdin/stdout.
//
// zklock's interoperability tests and its benchmark run this peer next to zklock contenders on
// the same ZooKeeper server, so that a real InterProcessMutex / InterProcessReadWriteLock /
// InterProcessSemaphoreV2 takes part in the same queue, and a real LeaderLatch in the same
// election. Every command is answered with exactly one line; lock events (ACQUIRED, TIMEOUT,
// RELEASED, REVOKED, ERROR) and latch events (IS_LEADER, NOT_LEADER) are printed when they happen, so
// acquires and elections never block the command loop.
//
// Protocol (one command per line, words separated by spaces):
//   connect <connectString> <sessionMs>            -> CONNECTED <sessionIdHex> | ERROR - <msg>
//   mutex <id> <path>                              -> OK <id>
//   rwlock <id> <path>                             -> OK <id>
//   semaphore <id> <path> <maxLeases>              -> OK <id>
//   acquire <id> [read|write] <timeoutMs>          -> (later) ACQUIRED <id> <nodePath> | TIMEOUT <id>
//                                                     (timeoutMs < 0 waits without bound; read|write
//                                                     only for rwlock; for a semaphore one lease is
//                                                     acquired and nodePath is its lease node,
//                                                     <path>/leases/...)
//   release <id>                                   -> (later) RELEASED <id> (a semaphore returns
//                                                     its lease)
//   revocable <id>                                 -> OK <id>; mutex <id> is made revocable
//                                                     (makeRevocable, before acquiring): when a
//                                                     revocation of its hold is requested, it
//                                                     prints (later) REVOKED <id>, and keeps the
//                                                     lock until released
//   revoke <nodePath>                              -> REVOKE_SENT <nodePath>: Revoker.attemptRevoke
//                                                     (writes __REVOKE__ into the node; a node
//                                                     that is gone is not an error)
//   latch <id> <path> [<participantId>]            -> (later) OK <id> <nodePath>, once the latch has
//                                                     created its node (or ERROR <id> after 30 s)
//                                                     A LeaderLatch(client, path, participantId,
//                                                     NOTIFY_LEADER), started; participantId is
//                                                     percent-encoded (see below), "" when left out.
//                                                     Its listener prints, whenever leadership
//                                                     changes: IS_LEADER <id> | NOT_LEADER <id>
//   latch-close <id>                               -> CLOSED <id> (after NOT_LEADER <id> if it led)
//   latch-has <id>                                 -> HAS_LEADERSHIP <id> true|false
//   latch-leader <id>                              -> LEADER <id> <participant>
//   latch-participants <id>                        -> PARTICIPANTS <id> <count> <participant>...
//                                                     (in Curator's order, the leader first)
//                                                     where <participant> is true|false (isLeader),
//                                                     ':', and the percent-encoded participant id
//   bench-uncontended <path> <warmup> <cycles>     -> RESULT <json>
//   bench-contended <path> <threads> <startEpochMs> <endEpochMs>
//                                                  -> RESULT <json>
//   bench-reentrant <path> <warmup> <cycles>       -> RESULT <json>
//   bench-distinct <prefix> <threads> <keys> <beginEpochMs> <middleEpochMs> <endEpochMs>  -> RESULT <json>
//   ping                                           -> PONG
//   quit                                           -> BYE (and exit)
// Errors are reported as "ERROR <id|-> <message>". Ids are chosen by the driver; locks and latches
// share one set of ids.
// Percent-encoding: the UTF-8 bytes of a participant id, every byte but A-Z a-z 0-9 - . _ ~ written
// as %XX, so that any id (empty, with spaces or newlines) is one word.

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.RevocationListener;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.utils.ZKPaths;

public final class CuratorPeer {
    private static final PrintStream OUT =
            new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);

    /**
     * One lock the driver named: a recipe (exactly one of mutex, rw, semaphore) plus the single
     * thread that acquires and releases it.
     */
    private static final class Contender {
        final String id;
        final InterProcessMutex mutex;
        final InterProcessReadWriteLock rw;
        final InterProcessSemaphoreV2 semaphore;
        /** The semaphore's path, to turn a lease's node name into its full path. */
        final String semaphorePath;
        // Curator ties a hold to the thread that acquired it, so release must run on that thread.
        final ExecutorService thread;
        volatile InterProcessMutex held;
        /** The semaphore lease this contender holds (at most one). */
        volatile Lease lease;

        Contender(String id, InterProcessMutex mutex, InterProcessReadWriteLock rw) {
            this(id, mutex, rw, null, null);
        }

        Contender(String id, InterProcessMutex mutex, InterProcessReadWriteLock rw,
                InterProcessSemaphoreV2 semaphore, String semaphorePath) {
            this.id = id;
            this.mutex = mutex;
            this.rw = rw;
            this.semaphore = semaphore;
            this.semaphorePath = semaphorePath;
            this.thread = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "contender-" + id);
                t.setDaemon(true);
                return t;
            });
        }
    }

    private static CuratorFramework client;
    private static final Map<String, Contender> CONTENDERS = new ConcurrentHashMap<>();
    /** The leader latches the driver started, by id; a latch leaves when it is closed. */
    private static final Map<String, LeaderLatch> LATCHES = new ConcurrentHashMap<>();
    /** How long `latch` waits for Curator to create the latch's node. */
    private static final long LATCH_NODE_WAIT_MS = 30_000;
    /** Commands whose second word is the id of a lock or latch, which their errors carry. */
    private static final List<String> ID_COMMANDS = Arrays.asList("mutex", "rwlock", "semaphore", "acquire",
            "release", "revocable", "latch", "latch-close", "latch-has", "latch-leader", "latch-participants");
    private static Method lockPathMethod;

    static synchronized void say(String line) {
        OUT.println(line);
        OUT.flush();
    }

    public static void main(String[] args) throws Exception {
        lockPathMethod = InterProcessMutex.class.getDeclaredMethod("getLockPath");
        lockPathMethod.setAccessible(true);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            String[] w = line.split("\\s+");
            try {
                if (!handle(w)) {
                    break;
                }
            } catch (Exception e) {
                // Commands about one lock or latch report failures under its id, the rest under "-".
                boolean aboutOne = w.length > 1 && ID_COMMANDS.contains(w[0]);
                say("ERROR " + (aboutOne ? w[1] : "-") + " " + describe(e));
            }
        }
        if (client != null) {
            client.close();
        }
        say("BYE");
        System.exit(0);
    }

    private static String describe(Throwable e) {
        String msg = e.getMessage();
        return (e.getClass().getSimpleName() + (msg == null ? "" : ": " + msg)).replace('\n', ' ');
    }

    private static void need(String[] w, int n, String usage) {
        if (w.length < n) {
            throw new IllegalArgumentException("usage: " + usage);
        }
    }

    private static CuratorFramework client() {
        if (client == null) {
            throw new IllegalStateException("not connected (send connect first)");
        }
        return client;
    }

    private static Contender contender(String id) {
        Contender c = CONTENDERS.get(id);
        if (c == null) {
            throw new IllegalArgumentException("no lock with id " + id);
        }
        return c;
    }

    private static LeaderLatch latch(String id) {
        LeaderLatch latch = LATCHES.get(id);
        if (latch == null) {
            throw new IllegalArgumentException("no latch with id " + id);
        }
        return latch;
    }

    private static boolean idInUse(String id) {
        return CONTENDERS.containsKey(id) || LATCHES.containsKey(id);
    }

    private static boolean handle(String[] w) throws Exception {
        switch (w[0]) {
            case "ping":
                say("PONG");
                return true;
            case "quit":
                return false;
            case "connect": {
                need(w, 3, "connect <connectString> <sessionMs>");
                int sessionMs = Integer.parseInt(w[2]);
                CuratorFramework c = CuratorFrameworkFactory.builder()
                        .connectString(w[1])
                        .sessionTimeoutMs(sessionMs)
                        .connectionTimeoutMs(Math.max(sessionMs, 5000))
                        .retryPolicy(new ExponentialBackoffRetry(100, 5))
                        .build();
                c.start();
                if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) {
                    c.close();
                    say("ERROR - could not connect to " + w[1] + " within 30 s");
                    return true;
                }
                client = c;
                long sid = c.getZookeeperClient().getZooKeeper().getSessionId();
                say("CONNECTED " + Long.toHexString(sid));
                return true;
            }
            case "mutex":
            case "rwlock": {
                need(w, 3, w[0] + " <id> <path>");
                if (idInUse(w[1])) {
                    say("ERROR " + w[1] + " id already in use");
                    return true;
                }
                Contender c = w[0].equals("mutex")
                        ? new Contender(w[1], new InterProcessMutex(client(), w[2]), null)
                        : new Contender(w[1], null, new InterProcessReadWriteLock(client(), w[2]));
                CONTENDERS.put(w[1], c);
                say("OK " + w[1]);
                return true;
            }
            case "revocable": {
                need(w, 2, "revocable <id>");
                Contender c = CONTENDERS.get(w[1]);
                if (c == null || c.mutex == null) {
                    say("ERROR " + w[1] + " no mutex with that id");
                    return true;
                }
                final String id = c.id;
                RevocationListener<InterProcessMutex> listener = lock -> say("REVOKED " + id);
                c.mutex.makeRevocable(listener);
                say("OK " + w[1]);
                return true;
            }
            case "revoke": {
                need(w, 2, "revoke <nodePath>");
                Revoker.attemptRevoke(client(), w[1]);
                say("REVOKE_SENT " + w[1]);
                return true;
            }
            case "semaphore": {
                need(w, 4, "semaphore <id> <path> <maxLeases>");
                if (idInUse(w[1])) {
                    say("ERROR " + w[1] + " id already in use");
                    return true;
                }
                int maxLeases = Integer.parseInt(w[3]);
                if (maxLeases < 1) {
                    throw new IllegalArgumentException("maxLeases must be at least 1, got " + w[3]);
                }
                InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(client(), w[2], maxLeases);
                CONTENDERS.put(w[1], new Contender(w[1], null, null, s, w[2]));
                say("OK " + w[1]);
                return true;
            }
            case "acquire": {
                need(w, 3, "acquire <id> [read|write] <timeoutMs>");
                Contender c = contender(w[1]);
                if (c.semaphore != null) {
                    long timeoutMs = Long.parseLong(w[w.length - 1]);
                    c.thread.submit(() -> acquireLease(c, timeoutMs));
                    return true;
                }
                InterProcessMutex which;
                long timeoutMs;
                if (c.rw != null) {
                    need(w, 4, "acquire <id> read|write <timeoutMs>");
                    if (w[2].equals("read")) {
                        which = c.rw.readLock();
                    } else if (w[2].equals("write")) {
                        which = c.rw.writeLock();
                    } else {
                        throw new IllegalArgumentException("mode must be read or write, got " + w[2]);
                    }
                    timeoutMs = Long.parseLong(w[3]);
                } else {
                    which = c.mutex;
                    timeoutMs = Long.parseLong(w[w.length - 1]);
                }
                c.thread.submit(() -> acquire(c, which, timeoutMs));
                return true;
            }
            case "release": {
                need(w, 2, "release <id>");
                Contender c = contender(w[1]);
                c.thread.submit(() -> {
                    if (c.semaphore != null) {
                        releaseLease(c);
                        return;
                    }
                    InterProcessMutex held = c.held;
                    if (held == null) {
                        say("ERROR " + c.id + " not held");
                        return;
                    }
                    try {
                        held.release();
                        c.held = null;
                        say("RELEASED " + c.id);
                    } catch (Exception e) {
                        say("ERROR " + c.id + " " + describe(e));
                    }
                });
                return true;
            }
            case "latch": {
                need(w, 3, "latch <id> <path> [<participantId>]");
                if (w.length > 4) {
                    throw new IllegalArgumentException(
                            "usage: latch <id> <path> [<participantId>] (the participant id percent-encoded)");
                }
                String id = w[1];
                if (idInUse(id)) {
                    say("ERROR " + id + " id already in use");
                    return true;
                }
                String participantId = w.length > 3 ? decode(w[3]) : "";
                // The constructor checks the path; NOTIFY_LEADER makes close() tell the listener.
                LeaderLatch latch =
                        new LeaderLatch(client(), w[2], participantId, LeaderLatch.CloseMode.NOTIFY_LEADER);
                latch.addListener(new LeaderLatchListener() {
                    @Override
                    public void isLeader() {
                        say("IS_LEADER " + id);
                    }

                    @Override
                    public void notLeader() {
                        say("NOT_LEADER " + id);
                    }
                });
                LATCHES.put(id, latch);
                try {
                    latch.start();
                } catch (Exception e) {
                    LATCHES.remove(id, latch);
                    throw e;
                }
                Thread waiter = new Thread(() -> awaitLatchNode(id, latch), "latch-" + id);
                waiter.setDaemon(true);
                waiter.start();
                return true;
            }
            case "latch-close": {
                need(w, 2, "latch-close <id>");
                LeaderLatch latch = latch(w[1]);
                try {
                    // Deletes the node (a guaranteed delete, in the background) and, as the latch
                    // was made with NOTIFY_LEADER, calls notLeader first if it led.
                    latch.close();
                } finally {
                    // close() marks the latch closed before anything in it can fail.
                    LATCHES.remove(w[1], latch);
                }
                say("CLOSED " + w[1]);
                return true;
            }
            case "latch-has": {
                need(w, 2, "latch-has <id>");
                say("HAS_LEADERSHIP " + w[1] + " " + latch(w[1]).hasLeadership());
                return true;
            }
            case "latch-leader": {
                need(w, 2, "latch-leader <id>");
                say("LEADER " + w[1] + " " + participant(latch(w[1]).getLeader()));
                return true;
            }
            case "latch-participants": {
                need(w, 2, "latch-participants <id>");
                List<Participant> all = new ArrayList<>(latch(w[1]).getParticipants());
                StringBuilder line =
                        new StringBuilder("PARTICIPANTS ").append(w[1]).append(' ').append(all.size());
                for (Participant p : all) {
                    line.append(' ').append(participant(p));
                }
                say(line.toString());
                return true;
            }
            case "bench-uncontended": {
                need(w, 4, "bench-uncontended <path> <warmup> <cycles>");
                say("RESULT " + benchUncontended(w[1], Integer.parseInt(w[2]), Integer.parseInt(w[3])));
                return true;
            }
            case "bench-reentrant": {
                need(w, 4, "bench-reentrant <path> <warmup> <cycles>");
                say("RESULT " + benchReentrant(w[1], Integer.parseInt(w[2]), Integer.parseInt(w[3])));
                return true;
            }
            case "bench-contended": {
                need(w, 5, "bench-contended <path> <threads> <startEpochMs> <endEpochMs>");
                say("RESULT " + benchContended(w[1], Integer.parseInt(w[2]), Long.parseLong(w[3]), Long.parseLong(w[4])));
                return true;
            }
            case "bench-distinct": {
                need(w, 7, "bench-distinct <prefix> <threads> <keys> <beginEpochMs> <middleEpochMs> <endEpochMs>");
                say("RESULT " + benchDistinct(w[1], Integer.parseInt(w[2]), Integer.parseInt(w[3]),
                        Long.parseLong(w[4]), Long.parseLong(w[5]), Long.parseLong(w[6])));
                return true;
            }
            default:
                say("ERROR - unknown command " + w[0]);
                return true;
        }
    }

    private static void acquire(Contender c, InterProcessMutex which, long timeoutMs) {
        try {
            boolean ok;
            if (timeoutMs < 0) {
                which.acquire();
                ok = true;
            } else {
                ok = which.acquire(timeoutMs, TimeUnit.MILLISECONDS);
            }
            if (ok) {
                c.held = which;
                say("ACQUIRED " + c.id + " " + lockPathMethod.invoke(which));
            } else {
                say("TIMEOUT " + c.id);
            }
        } catch (Exception e) {
            say("ERROR " + c.id + " " + describe(e));
        }
    }

    /** Acquires one lease of a semaphore contender (on its thread); one lease at a time. */
    private static void acquireLease(Contender c, long timeoutMs) {
        if (c.lease != null) {
            say("ERROR " + c.id + " already holds a lease");
            return;
        }
        try {
            Lease lease = timeoutMs < 0
                    ? c.semaphore.acquire()
                    : c.semaphore.acquire(timeoutMs, TimeUnit.MILLISECONDS);
            if (lease != null) {
                c.lease = lease;
                // getNodeName() is only the last path segment; leases live in <path>/leases.
                say("ACQUIRED " + c.id + " " + ZKPaths.makePath(c.semaphorePath, "leases", lease.getNodeName()));
            } else {
                say("TIMEOUT " + c.id);
            }
        } catch (Exception e) {
            say("ERROR " + c.id + " " + describe(e));
        }
    }

    /** Returns a semaphore contender's lease (on its thread). */
    private static void releaseLease(Contender c) {
        Lease lease = c.lease;
        if (lease == null) {
            say("ERROR " + c.id + " not held");
            return;
        }
        try {
            // Deletes the lease node (a guaranteed delete: Curator retries it in the background
            // if this attempt fails). Unlike returnLease, close reports the failure.
            lease.close();
            c.lease = null;
            say("RELEASED " + c.id);
        } catch (Exception e) {
            say("ERROR " + c.id + " " + describe(e));
        }
    }

    // ---- leader latches ----------------------------------------------------------------------

    /**
     * Answers `latch` once the latch has created its node: LeaderLatch creates it in the
     * background after start() returns, and a test wants Curator in the election before it goes
     * on. Gives up (closing the latch) after LATCH_NODE_WAIT_MS, e.g. when the node cannot be
     * created under that path; Curator only logs that failure.
     */
    private static void awaitLatchNode(String id, LeaderLatch latch) {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(LATCH_NODE_WAIT_MS);
        String node;
        try {
            synchronized (latch) {
                // The latch notifies its own monitor each time it sets its leadership, which it
                // does right after it has created its node and read the children; the short
                // bound covers every other way there.
                while ((node = latch.getOurPath()) == null && latch.getState() == LeaderLatch.State.STARTED
                        && System.nanoTime() < deadline) {
                    latch.wait(20);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            say("ERROR " + id + " interrupted while waiting for the latch node");
            return;
        }
        if (node != null) {
            say("OK " + id + " " + node);
            return;
        }
        if (latch.getState() != LeaderLatch.State.STARTED) {
            say("ERROR " + id + " the latch was closed before it created its node");
            return;
        }
        LATCHES.remove(id, latch);
        try {
            latch.close(LeaderLatch.CloseMode.SILENT);
        } catch (Exception e) {
            // Closed either way; the error below says what matters.
        }
        say("ERROR " + id + " Curator created no latch node under the path within "
                + LATCH_NODE_WAIT_MS / 1000 + " s (can the path's parents be created there?)");
    }

    /** A participant as one word: isLeader, ':', the percent-encoded id. */
    private static String participant(Participant p) {
        return p.isLeader() + ":" + encode(p.getId());
    }

    private static final char[] HEX = "0123456789ABCDEF".toCharArray();

    /** Percent-encodes the UTF-8 bytes of {@code s}, all but A-Z a-z 0-9 - . _ ~. */
    static String encode(String s) {
        StringBuilder out = new StringBuilder();
        for (byte b : s.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            boolean plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                    || c == '-' || c == '.' || c == '_' || c == '~';
            if (plain) {
                out.append((char) c);
            } else {
                out.append('%').append(HEX[c >> 4]).append(HEX[c & 0xf]);
            }
        }
        return out.toString();
    }

    /** Reverses {@link #encode}; characters that are not escaped stand for themselves. */
    static String decode(String s) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (int i = 0; i < s.length(); i++) {
            int c = s.codePointAt(i);
            if (c != '%') {
                byte[] bytes = new String(Character.toChars(c)).getBytes(StandardCharsets.UTF_8);
                out.write(bytes, 0, bytes.length);
                i += Character.charCount(c) - 1;
                continue;
            }
            int hi = i + 2 < s.length() ? Character.digit(s.charAt(i + 1), 16) : -1;
            int lo = i + 2 < s.length() ? Character.digit(s.charAt(i + 2), 16) : -1;
            if (hi < 0 || lo < 0) {
                throw new IllegalArgumentException("bad percent-encoding at " + i + " in " + s);
            }
            out.write(hi * 16 + lo);
            i += 2;
        }
        return new String(out.toByteArray(), StandardCharsets.UTF_8);
    }

    // ---- benchmark modes -------------------------------------------------------------------

    /** Acquire+release cycles of one uncontended mutex; latencies in nanoseconds. */
    private static String benchUncontended(String path, int warmup, int cycles) throws Exception {
        InterProcessMutex m = new InterProcessMutex(client(), path);
        for (int i = 0; i < warmup; i++) {
            m.acquire();
            m.release();
        }
        long[] ns = new long[cycles];
        long t0 = System.nanoTime();
        for (int i = 0; i < cycles; i++) {
            long s = System.nanoTime();
            m.acquire();
            m.release();
            ns[i] = System.nanoTime() - s;
        }
        long total = System.nanoTime() - t0;
        return "{\"total_ns\":" + total + ",\"latencies_ns\":" + Arrays.toString(ns).replace(" ", "") + "}";
    }

    /** Re-acquire cost of a mutex this thread already holds (Curator counts it in process). */
    private static String benchReentrant(String path, int warmup, int cycles) throws Exception {
        InterProcessMutex m = new InterProcessMutex(client(), path);
        m.acquire();
        try {
            for (int i = 0; i < warmup; i++) {
                m.acquire();
                m.release();
            }
            long t0 = System.nanoTime();
            for (int i = 0; i < cycles; i++) {
                m.acquire();
                m.release();
            }
            long total = System.nanoTime() - t0;
            return "{\"total_ns\":" + total + ",\"cycles\":" + cycles + "}";
        } finally {
            m.release();
        }
    }

    /**
     * {@code threads} threads share one InterProcessMutex and loop acquire / tiny critical
     * section / release. Only acquisitions completed in [start, end] count; every thread
     * stops at end. A holder overlap (two threads inside) is counted as a violation.
     */
    private static String benchContended(String path, int threads, long startEpochMs, long endEpochMs)
            throws Exception {
        InterProcessMutex m = new InterProcessMutex(client(), path);
        AtomicLong counted = new AtomicLong();
        AtomicInteger inside = new AtomicInteger();
        AtomicLong overlaps = new AtomicLong();
        AtomicLong shared = new AtomicLong();
        List<Thread> ts = new ArrayList<>();
        List<Throwable> errors = java.util.Collections.synchronizedList(new ArrayList<>());
        for (int t = 0; t < threads; t++) {
            Thread th = new Thread(() -> {
                try {
                    long wait = startEpochMs - System.currentTimeMillis();
                    if (wait > 0) {
                        Thread.sleep(wait);
                    }
                    while (System.currentTimeMillis() < endEpochMs) {
                        m.acquire();
                        if (inside.incrementAndGet() != 1) {
                            overlaps.incrementAndGet();
                        }
                        shared.incrementAndGet(); // the tiny critical section
                        inside.decrementAndGet();
                        m.release();
                        long now = System.currentTimeMillis();
                        if (now >= startEpochMs && now <= endEpochMs) {
                            counted.incrementAndGet();
                        }
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            });
            th.start();
            ts.add(th);
        }
        for (Thread th : ts) {
            th.join();
        }
        if (!errors.isEmpty()) {
            throw new IllegalStateException("contender failed: " + describe(errors.get(0)));
        }
        return "{\"acquisitions\":" + counted.get() + ",\"window_ms\":" + (endEpochMs - startEpochMs)
                + ",\"overlaps\":" + overlaps.get() + ",\"threads\":" + threads + "}";
    }

    /**
     * Per-key locking, the way a service locks one of many items: each thread picks a random
     * key out of {@code keys}, acquires an InterProcessMutex on {@code prefix/key-N} and releases
     * it, from beginEpochMs to endEpochMs. Acquisitions are counted per phase: the cold one
     * [begin, middle), where the key directories are first made, and the warm one [middle, end].
     */
    private static String benchDistinct(String prefix, int threads, int keys, long beginEpochMs, long middleEpochMs,
            long endEpochMs) throws Exception {
        CuratorFramework c = client();
        AtomicLong cold = new AtomicLong();
        AtomicLong warm = new AtomicLong();
        List<Thread> ts = new ArrayList<>();
        List<Throwable> errors = java.util.Collections.synchronizedList(new ArrayList<>());
        for (int t = 0; t < threads; t++) {
            final long seed = 0x9E3779B97F4A7C15L * (t + 1);
            Thread th = new Thread(() -> {
                java.util.Random random = new java.util.Random(seed);
                try {
                    long wait = beginEpochMs - System.currentTimeMillis();
                    if (wait > 0) {
                        Thread.sleep(wait);
                    }
                    while (System.currentTimeMillis() < endEpochMs) {
                        InterProcessMutex m = new InterProcessMutex(c, prefix + "/key-" + random.nextInt(keys));
                        m.acquire();
                        m.release();
                        long now = System.currentTimeMillis();
                        if (now >= beginEpochMs && now < middleEpochMs) {
                            cold.incrementAndGet();
                        } else if (now >= middleEpochMs && now <= endEpochMs) {
                            warm.incrementAndGet();
                        }
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            });
            th.start();
            ts.add(th);
        }
        for (Thread th : ts) {
            th.join();
        }
        if (!errors.isEmpty()) {
            throw new IllegalStateException("contender failed: " + describe(errors.get(0)));
        }
        return "{\"acquisitions\":{\"cold\":" + cold.get() + ",\"warm\":" + warm.get() + "},\"phase_ms\":"
                + (middleEpochMs - beginEpochMs) + ",\"threads\":" + threads + ",\"keys\":" + keys + "}";
    }
}
