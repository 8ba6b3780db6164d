//! Lock caching against a contender of another process, under shuttle (see the module above).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use futures_util::future::{select, Either};
use shuttle::future::{block_on, spawn, yield_now};
use shuttle::rand::{thread_rng, Rng};
use tokio::sync::watch;

use super::ITERATIONS;
use crate::engine::around::Around;
use crate::engine::local_queue::Gate;

// Lock caching ([`crate::engine::cache`]): the idle node of this process against a contender
// of another process. The gate is the real one, with its parking of the idle node; the
// directory and its watch are modelled, and the keeper below takes the decisions of
// `cache::Keeper` in the same order: give the node up once the directory is crowded, hand it
// to a queued task once it is alone, give it up at the linger's end. Acquirers take a parked
// node at once when the gate lets them (`Gate::take_idle`), else queue.

/// The lock's directory on the model server: contender nodes in queue order, the watches of
/// this process's nodes (which the notifier task tells of changes some steps late), and a
/// counter bumped at every change, which contenders wait on.
struct Directory {
    queue: std::sync::Mutex<Vec<usize>>,
    next: AtomicUsize,
    watches: std::sync::Mutex<Vec<(usize, watch::Sender<Around>)>>,
    changes: watch::Sender<usize>,
    /// Nodes of this process deleted.
    deleted: AtomicUsize,
}

impl Default for Directory {
    fn default() -> Self {
        Directory {
            queue: std::sync::Mutex::default(),
            next: AtomicUsize::new(0),
            watches: std::sync::Mutex::default(),
            changes: watch::Sender::new(0),
            deleted: AtomicUsize::new(0),
        }
    }
}

impl Directory {
    /// Adds a node at the end of the queue, with its watch if it is this process's.
    fn create(&self, watch: Option<watch::Sender<Around>>) -> usize {
        let id = self.next.fetch_add(1, SeqCst);
        self.queue.lock().unwrap().push(id);
        if let Some(watch) = watch {
            self.watches.lock().unwrap().push((id, watch));
        }
        self.changes.send_modify(|n| *n += 1);
        id
    }

    fn delete(&self, id: usize) {
        self.queue.lock().unwrap().retain(|&n| n != id);
        self.watches.lock().unwrap().retain(|(n, _)| *n != id);
        self.changes.send_modify(|n| *n += 1);
    }

    fn first(&self) -> Option<usize> {
        self.queue.lock().unwrap().first().copied()
    }

    /// Waits until `id` is first in the queue: a contender's wait in ZooKeeper.
    async fn until_first(&self, id: usize) {
        let mut changes = self.changes.subscribe();
        let _ = changes.wait_for(|_| self.first() == Some(id)).await;
    }

    /// Tells the watches of this process's nodes what the directory holds: `Alone` for a node
    /// alone in it, `Crowded` (final) for one beside another.
    fn notify(&self) {
        let queue = self.queue.lock().unwrap().clone();
        for (id, watch) in self.watches.lock().unwrap().iter() {
            let alone = queue == [*id];
            watch.send_if_modified(|around| {
                let next = match (*around, alone) {
                    (Around::Crowded, _) | (_, false) => Around::Crowded,
                    (_, true) => Around::Alone,
                };
                std::mem::replace(around, next) != next
            });
        }
    }
}

/// A node of this process: deleted when dropped.
struct Cached {
    id: usize,
    dir: Arc<Directory>,
    around: watch::Receiver<Around>,
    /// Handed over by the keeper rather than by a releasing holder.
    from_cache: bool,
}

impl Cached {
    /// Creates a node, with its directory watch (`Unknown` until the first notification).
    fn create(dir: &Arc<Directory>) -> Cached {
        let (tx, around) = watch::channel(Around::Unknown);
        Cached {
            id: dir.create(Some(tx)),
            dir: dir.clone(),
            around,
            from_cache: false,
        }
    }
}

impl Drop for Cached {
    fn drop(&mut self) {
        self.dir.deleted.fetch_add(1, SeqCst);
        self.dir.delete(self.id);
    }
}

/// What the cache model's tasks share.
#[derive(Default)]
struct World {
    dir: Arc<Directory>,
    /// Set while any holder, of this process or the other, is in its critical section.
    holding: AtomicBool,
    /// Nodes this process created.
    created: AtomicUsize,
    /// Grants of a node the keeper handed over.
    from_cache: AtomicUsize,
    /// Keepers not finished yet.
    lingering: AtomicUsize,
    /// Ends every keeper (`close()`), with `expire`.
    closing: AtomicBool,
    expire: tokio::sync::Notify,
}

/// As `cache::Keeper`: hands the parked node to a queued task while the directory watch says
/// it is alone, and gives it up otherwise; follows the node across holds until then.
async fn keeper(gate: Arc<Gate<Cached>>, id: u64, mut around: watch::Receiver<Around>, world: Arc<World>) {
    let mut arrivals = gate.arrivals();
    loop {
        let expired = world.expire.notified();
        tokio::pin!(expired);
        expired.as_mut().enable();
        // The linger time runs out (or a flush, a loss) at a step of the model's choosing.
        if world.closing.load(SeqCst) || thread_rng().gen_ratio(1, 6) {
            break;
        }
        arrivals.borrow_and_update();
        // Copied out: the watch's read lock is not held into the gate's lock.
        let state = *around.borrow_and_update();
        match state {
            Around::Crowded => break,
            Around::Alone if gate.has_waiters() => {
                if let Some(mut parked) = gate.unpark(id) {
                    parked.warm.from_cache = true;
                    gate.hand_over_parked(parked);
                    continue;
                }
            }
            Around::Alone | Around::Unknown => {}
        }
        let woken = select(
            select(Box::pin(arrivals.changed()), Box::pin(around.changed())),
            expired.as_mut(),
        )
        .await;
        match woken {
            // The node is gone (its watch with it), or the linger ran out.
            Either::Left((Either::Right((Err(_), _)), _)) | Either::Right(_) => break,
            Either::Left(_) => {}
        }
    }
    if let Some((turn, node)) = gate.stop_keeping(id) {
        drop(node);
        drop(turn);
    }
    world.lingering.fetch_sub(1, SeqCst);
    world.dir.changes.send_modify(|n| *n += 1);
}

async fn caching_contender(gate: Arc<Gate<Cached>>, world: Arc<World>, rounds: usize) {
    for _ in 0..rounds {
        let (mut turn, warm) = match gate.take_idle() {
            Some((turn, mut node)) => {
                node.from_cache = true;
                (turn, Some(node))
            }
            None => {
                // Most acquisitions wait as long as it takes; some give up after a few steps (a
                // timeout, a lost `select!`).
                let patience = thread_rng().gen_range(0..8);
                let mut turn = if patience < 5 {
                    gate.clone().enter().await
                } else {
                    let give_up = Box::pin(async move {
                        for _ in 0..patience - 5 {
                            yield_now().await;
                        }
                    });
                    match select(Box::pin(gate.clone().enter()), give_up).await {
                        Either::Left((turn, _)) => turn,
                        Either::Right(_) => continue,
                    }
                };
                let warm = turn.take_warm();
                (turn, warm)
            }
        };
        let mut node = match warm {
            Some(node) => {
                if node.from_cache {
                    world.from_cache.fetch_add(1, SeqCst);
                }
                node
            }
            None => {
                world.created.fetch_add(1, SeqCst);
                let node = Cached::create(&world.dir);
                world.dir.until_first(node.id).await;
                node
            }
        };
        assert!(!world.holding.swap(true, SeqCst), "two holders at once");
        assert_eq!(
            world.dir.first(),
            Some(node.id),
            "a local holder's node is not first in the directory"
        );
        yield_now().await;
        world.holding.store(false, SeqCst);
        node.from_cache = false;
        // As `Holding::end` with a cache: hand over, else keep idle (parked with its keeper,
        // or under a new one), or, for the model's other locks, delete.
        if turn.has_waiters() {
            turn.hand_over(node);
            drop(turn);
        } else if thread_rng().gen_ratio(3, 4) {
            let key = node.id.to_string();
            if let Err((turn, node)) = gate.park(turn, node, &key) {
                let around = node.around.clone();
                world.lingering.fetch_add(1, SeqCst);
                let id = gate.start_keeping(turn, node, key, around.clone());
                spawn(keeper(gate.clone(), id, around, world.clone()));
            }
        } else {
            drop(node);
            drop(turn);
        }
    }
}

/// A contender of another process: its node queues behind ours, and it holds once first.
async fn remote_contender(world: Arc<World>, rounds: usize) {
    for _ in 0..rounds {
        for _ in 0..thread_rng().gen_range(0..4) {
            yield_now().await;
        }
        let id = world.dir.create(None);
        world.dir.until_first(id).await;
        assert!(!world.holding.swap(true, SeqCst), "two holders at once");
        yield_now().await;
        world.holding.store(false, SeqCst);
        world.dir.delete(id);
    }
}

fn cache_model() {
    block_on(async {
        let gate: Arc<Gate<Cached>> = Arc::default();
        let world = Arc::new(World::default());
        let stop = Arc::new(AtomicBool::new(false));
        // The directory's notifications, some steps after each change.
        let notifier = spawn({
            let (world, stop) = (world.clone(), stop.clone());
            async move {
                let mut changes = world.dir.changes.subscribe();
                while !stop.load(SeqCst) {
                    for _ in 0..thread_rng().gen_range(0..3) {
                        yield_now().await;
                    }
                    world.dir.notify();
                    if changes.changed().await.is_err() {
                        break;
                    }
                }
            }
        });
        let mut tasks: Vec<_> = (0..2)
            .map(|_| spawn(caching_contender(gate.clone(), world.clone(), 3)))
            .collect();
        tasks.push(spawn(remote_contender(world.clone(), 2)));
        for task in tasks {
            task.await.expect("contender task");
        }
        // Close: every keeper gives its node up.
        world.closing.store(true, SeqCst);
        world.expire.notify_waiters();
        let mut changes = world.dir.changes.subscribe();
        let _ = changes
            .wait_for(|_| world.dir.first().is_none() && world.lingering.load(SeqCst) == 0)
            .await;
        stop.store(true, SeqCst);
        world.dir.changes.send_modify(|n| *n += 1);
        notifier.await.expect("notifier");
        assert!(gate.is_idle(), "a node was left in the slot with nobody to take it");
        assert_eq!(
            world.created.load(SeqCst),
            world.dir.deleted.load(SeqCst),
            "every node this process made was deleted exactly once"
        );
    });
}

#[test]
fn lock_cache_against_a_remote_contender_under_random_interleavings() {
    shuttle::check_random(cache_model, ITERATIONS);
}

#[test]
fn lock_cache_against_a_remote_contender_under_pct_interleavings() {
    shuttle::check_pct(cache_model, ITERATIONS, 3);
}
