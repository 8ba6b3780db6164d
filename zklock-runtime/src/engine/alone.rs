//! Knowing without a listing that a new contender node is alone in its lock directory: the
//! uncontended fast path of exclusive locks. The argument is in `docs/safety.md` ("Skipping
//! the listing"); in short:
//!
//! - A sequential node's number is a counter of the directory (its `cversion` as the server
//!   prepares the create) that every create in the directory raises and nothing lowers.
//! - When no contender older than our node (number `s`) is in the directory (a listing shows
//!   our node alone, or `s` is 0), and the delete of that node is acknowledged, our next
//!   create in the same session that gets number `s + 1` proves that no other create happened
//!   in between: the directory held nothing but our old node, which is gone, so it holds our
//!   new node and nothing else. No listing needed.
//! - A directory deleted and recreated (a reaped container) starts a new count that can reach
//!   the same number, so an exists-watch on the directory must not have fired. It is set after
//!   the listing and before the delete is sent, while our node keeps the directory from being
//!   deleted. ZooKeeper sends a watch event ahead of the answers to later requests, and the
//!   client library hands it to the watcher before it completes those answers.
//! - Anything unexpected (another number, a fired watch, a reconnect, an evicted entry)
//!   forgets what was known, and the caller lists as usual.
//!
//! One [`Alone`] per session: a new session starts knowing nothing. Both of its tables are
//! least-recently-used caches sized for per-key locks (`seckill:{item}` over thousands of
//! items, [`DEFAULT_FAST_PATH_DIRS`] unless the builder says otherwise): a directory is only
//! watched once it was seen alone twice, and the least recently used one is forgotten (its
//! watch removed) when the table is full.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::task::noop_waker_ref;
use hashlink::LruCache;

use zookeeper_client as zk;

/// Lock directories a session remembers for the listing-free fast path unless
/// [`LockClientBuilder::fast_path_dirs`](crate::LockClientBuilder::fast_path_dirs) says
/// otherwise. The least recently used is forgotten beyond it, so per-key locks do not grow the
/// state without bound. A remembered directory costs this process about 0.7 KiB (the client
/// library's watch included) and the server one exists-watch.
pub const DEFAULT_FAST_PATH_DIRS: usize = 8192;

type ExistsAnswer = Pin<Box<dyn Future<Output = Result<(Option<zk::Stat>, zk::OneshotWatcher), zk::Error>> + Send>>;
type WatchEvent = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// What one session knows about the lock directories it was alone in.
pub(crate) struct Alone {
    /// Watched directories.
    dirs: LruCache<String, Known>,
    /// Directories seen alone once, not yet watched: the watch (one more request, and one to
    /// remove it when forgotten) is only worth it for a lock taken again, not for a name used
    /// once.
    seen: LruCache<String, ()>,
    /// The client closed the session: nothing is remembered any more, and no watch request
    /// (which keeps a handle of the session until answered and polled) is stored.
    closed: bool,
}

impl Alone {
    /// Remembers up to `capacity` directories in each table; 0 remembers none.
    pub fn new(capacity: usize) -> Alone {
        Alone {
            dirs: LruCache::new(capacity),
            seen: LruCache::new(capacity),
            closed: false,
        }
    }
}

/// One directory: our node was its only child.
struct Known {
    /// Our node while it exists; `None` once its delete was acknowledged.
    node: Option<String>,
    /// The number of our node.
    sequence: i64,
    /// Set when the delete of `node` was acknowledged: the number the next create gets if no
    /// other create happens. Taken by the create that relies on it.
    expected: Option<i64>,
    watch: DirWatch,
}

/// The exists-watch on the directory: first the answer that sets it, then the watch itself.
enum DirWatch {
    Setting(ExistsAnswer),
    Set(WatchEvent),
    Broken,
}

impl DirWatch {
    /// Sends the exists-watch request (`answer`'s first poll) and keeps what came of it. The
    /// answer may already be there: on a loaded machine the round trip can finish before this
    /// thread polls again.
    fn send(mut answer: ExistsAnswer) -> DirWatch {
        match answer.as_mut().poll(&mut Context::from_waker(noop_waker_ref())) {
            Poll::Pending => DirWatch::Setting(answer),
            Poll::Ready(answered) => DirWatch::answered(answered),
        }
    }

    /// The watch as its answer leaves it: set on a directory that exists, else unproven.
    fn answered(answer: Result<(Option<zk::Stat>, zk::OneshotWatcher), zk::Error>) -> DirWatch {
        match answer {
            Ok((Some(_), watcher)) => DirWatch::Set(Box::pin(watcher.changed())),
            // The directory was gone, or the request failed.
            _ => DirWatch::Broken,
        }
    }

    /// Whether the watch is set and has not fired, judged from what the client library has
    /// received so far (never waits).
    fn intact(&mut self) -> bool {
        let mut cx = Context::from_waker(noop_waker_ref());
        if let DirWatch::Setting(answer) = self {
            *self = match answer.as_mut().poll(&mut cx) {
                Poll::Ready(answered) => DirWatch::answered(answered),
                // No answer yet, although a later one of this session came: unproven.
                Poll::Pending => DirWatch::Broken,
            };
        }
        match self {
            DirWatch::Set(event) => match event.as_mut().poll(&mut cx) {
                Poll::Pending => true,
                Poll::Ready(_) => {
                    *self = DirWatch::Broken;
                    false
                }
            },
            DirWatch::Setting(_) | DirWatch::Broken => false,
        }
    }
}

impl Alone {
    /// `node` (number `sequence`) has no older contender in `dir`: a listing showed it as the
    /// only child, or its number is 0 (see `docs/safety.md`). The second time this happens for
    /// a directory, sets the directory watch (the request goes out now, ahead of any later
    /// delete of `node` on this session); from then on the directory can go without listings.
    pub fn proven_first(&mut self, zk: &zk::Client, dir: &str, node: &str, sequence: i64) {
        if self.closed {
            return;
        }
        if let Some(known) = self.dirs.get_mut(dir) {
            if known.watch.intact() {
                known.node = Some(node.to_owned());
                known.sequence = sequence;
                known.expected = None;
                return;
            }
            self.forget(dir);
        }
        // A directory stays in `seen` once watched, so one forgotten after a fallback is
        // watched again at its next lone listing.
        if self.seen.get(dir).is_none() {
            self.seen.insert(dir.to_owned(), ());
            return;
        }
        let (zk, path) = (zk.clone(), dir.to_owned());
        let answer: ExistsAnswer = Box::pin(async move { zk.check_and_watch_stat(&path).await });
        // Sent now, ahead of any later delete on this session.
        let watch = DirWatch::send(answer);
        self.insert(
            dir,
            Known {
                node: Some(node.to_owned()),
                sequence,
                expected: None,
                watch,
            },
        );
    }

    /// The delete of `node_path` was acknowledged on the first try: the next create in its
    /// directory may rely on the count.
    pub fn deleted(&mut self, node_path: &str) {
        let Some((dir, node)) = node_path.rsplit_once('/') else {
            return;
        };
        if let Some(known) = self.dirs.get_mut(dir) {
            if known.node.as_deref() == Some(node) {
                known.node = None;
                known.expected = Some(known.sequence + 1);
                // The watch's answer came before this delete's: keep just the watch, not the
                // request that set it (a table of thousands of directories feels the
                // difference).
                known.watch.intact();
            }
        }
    }

    /// Something else happened to `node_path` (a delete retried through a connection loss,
    /// a node already gone): forget its directory.
    pub fn unsure(&mut self, node_path: &str) {
        if let Some((dir, _)) = node_path.rsplit_once('/') {
            self.forget(dir);
        }
    }

    /// The number a create in `dir` gets if nobody else created a node there since we were
    /// alone in it and deleted our node. Taken: one create relies on it.
    pub fn expect(&mut self, dir: &str) -> Option<i64> {
        self.dirs.get_mut(dir)?.expected.take()
    }

    /// Our create in `dir` (sent after [`expect`](Self::expect) gave `expected`) made `node`
    /// with number `sequence`. True when that proves the node alone; otherwise the caller must
    /// list. Another number means another contender came (the lock is contended, not the
    /// directory replaced): the count is forgotten but an intact watch is kept, so that being
    /// alone again costs no new watch and no request removing the old one. A fired watch
    /// forgets the directory.
    pub fn confirm(&mut self, dir: &str, expected: i64, node: &str, sequence: i64) -> bool {
        let Some(known) = self.dirs.get_mut(dir) else {
            return false;
        };
        if !known.watch.intact() {
            self.forget(dir);
            return false;
        }
        let proven = sequence == expected && known.node.is_none();
        if proven {
            known.node = Some(node.to_owned());
            known.sequence = sequence;
        } else {
            known.node = None;
            known.expected = None;
        }
        proven
    }

    /// The connection dropped: watch events may be late, so nothing is trusted any more.
    pub fn clear(&mut self) {
        self.dirs.clear();
    }

    /// The client closes the session: forget everything, for good.
    pub fn close(&mut self) {
        self.dirs.clear();
        self.closed = true;
    }

    fn insert(&mut self, dir: &str, known: Known) {
        // Past capacity the least recently used directory drops out, and its watch with it.
        self.dirs.insert(dir.to_owned(), known);
    }

    fn forget(&mut self, dir: &str) {
        self.dirs.remove(dir);
    }
}
