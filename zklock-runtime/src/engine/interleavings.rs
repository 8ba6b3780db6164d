//! Model checks of the in-process parts that decide who holds what, run under shuttle's
//! scheduler: every test runs its tasks many times, each time in another interleaving (chosen
//! at random, and by PCT, which favours the rare orders that expose ordering bugs), with
//! cancellation at chosen awaits. A deadlock fails the run as surely as a broken assertion.
//!
//! Why shuttle and not loom: the code under test is async and built on tokio's `Mutex`,
//! `oneshot` and task-local storage, which work on any executor. Shuttle runs those futures
//! on an executor of its own and chooses which task runs at every await; loom would need
//! every primitive replaced by its own. What shuttle does not explore is preemption inside a
//! `std::sync::Mutex` critical section; in the local queue those sections never await and
//! are short, and the model treats them as atomic, which they are with respect to each other.
//!
//! - The local queue and its handoff ([`crate::engine::local_queue`]): at most one local holder at a
//!   time; a released node goes to a waiter or is deleted, never left in the slot with nobody
//!   to take it, also when waiters give up or a turn is dropped at once; a release that waits
//!   for its node to be taken always hears back. The holders release as
//!   [`Holding::end`](crate::engine::guard) does: hand over when someone waits, else delete.
//! - The reentrancy scope ([`crate::engine::reentrancy`]): only code inside a scope sees it, whatever
//!   the interleaving: not sibling futures, not other tasks, and a scope future takes the
//!   scope of where it runs. (Not modelled: a task spawned from inside a scope. Shuttle may
//!   run another task within the `spawn` call itself, in the middle of the spawner's poll,
//!   which tokio never does; `tests/lock_reentrancy.rs` covers spawning on tokio.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use futures_util::future::{select, Either};
use shuttle::future::{block_on, spawn, yield_now};
use shuttle::rand::{thread_rng, Rng};
use tokio::sync::oneshot;

use crate::engine::local_queue::Gate;
use crate::engine::reentrancy::{current_fencing_token, current_fencing_token_for, model_scope};
use crate::engine::token::FencingToken;

/// Interleavings per test and scheduler; the whole file runs in a few seconds.
const ITERATIONS: usize = 3_000;

/// What happened to the model's contender nodes.
#[derive(Default)]
struct Book {
    created: AtomicUsize,
    deleted: AtomicUsize,
    /// Set while a local holder is in its critical section.
    holding: AtomicBool,
}

/// A contender node: dropping it deletes it. A release that waits for its node to be taken
/// (or deleted) hears it through `taken`.
struct Node {
    book: Arc<Book>,
    taken: Option<oneshot::Sender<()>>,
}

impl Node {
    fn create(book: &Arc<Book>) -> Node {
        book.created.fetch_add(1, SeqCst);
        Node {
            book: book.clone(),
            taken: None,
        }
    }

    /// Taken over by the next holder.
    fn claim(&mut self) {
        if let Some(taken) = self.taken.take() {
            let _ = taken.send(());
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.book.deleted.fetch_add(1, SeqCst);
        self.claim(); // deleted: the waiting release hears of it all the same
    }
}

/// How one acquisition of a model contender goes.
#[derive(Clone, Copy)]
enum Plan {
    /// Hold, then release without waiting for the outcome (a dropped guard).
    Drop,
    /// Hold, then release and wait until the node is taken or deleted (`release().await`).
    Confirm,
    /// Give up while waiting, after a few polls (a timeout, a lost `select!`).
    GiveUp(u32),
    /// Granted, and dropped before holding (a future cancelled right after its grant).
    DropTurn,
}

fn plan() -> Plan {
    let mut rng = thread_rng();
    match rng.gen_range(0..4) {
        0 => Plan::Drop,
        1 => Plan::Confirm,
        2 => Plan::GiveUp(rng.gen_range(0..3)),
        _ => Plan::DropTurn,
    }
}

async fn contender(gate: Arc<Gate<Node>>, book: Arc<Book>, rounds: usize) {
    for _ in 0..rounds {
        let plan = plan();
        let mut turn = match plan {
            Plan::GiveUp(patience) => {
                let enter = Box::pin(gate.clone().enter());
                let give_up = Box::pin(async move {
                    for _ in 0..patience {
                        yield_now().await;
                    }
                });
                match select(enter, give_up).await {
                    Either::Left((turn, _)) => turn,
                    Either::Right(_) => continue,
                }
            }
            _ => gate.clone().enter().await,
        };
        if let Plan::DropTurn = plan {
            drop(turn);
            continue;
        }
        assert!(!book.holding.swap(true, SeqCst), "two local holders at once");
        let mut node = match turn.take_warm() {
            Some(mut handed) => {
                handed.claim();
                handed
            }
            None => Node::create(&book),
        };
        yield_now().await;
        book.holding.store(false, SeqCst);
        // As `Holding::end`: hand the node to the next local waiter, or delete it.
        let (taken, outcome) = oneshot::channel();
        if let Plan::Confirm = plan {
            node.taken = Some(taken);
        }
        if turn.has_waiters() {
            turn.hand_over(node);
        } else {
            drop(node);
        }
        drop(turn);
        if let Plan::Confirm = plan {
            outcome
                .await
                .expect("a release that waits for its node always hears back");
        }
    }
}

fn local_queue_model() {
    block_on(async {
        let gate: Arc<Gate<Node>> = Arc::default();
        let book = Arc::new(Book::default());
        let done = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                let (gate, book, done) = (gate.clone(), book.clone(), done.clone());
                spawn(async move {
                    contender(gate, book, 3).await;
                    done.fetch_add(1, SeqCst);
                })
            })
            .collect();
        // Looks between every step of the others for a node left with nobody to take it
        // (bounded, so a favoured observer cannot starve the contenders).
        let observer = spawn({
            let (gate, done) = (gate.clone(), done.clone());
            async move {
                for _ in 0..200 {
                    if done.load(SeqCst) == 3 {
                        break;
                    }
                    assert!(!gate.stranded(), "a node was left in the slot with nobody to take it");
                    yield_now().await;
                }
            }
        });
        for task in tasks {
            task.await.expect("contender task");
        }
        observer.await.expect("observer");
        assert!(gate.is_idle(), "a node was left in the slot with nobody to take it");
        assert_eq!(
            book.created.load(SeqCst),
            book.deleted.load(SeqCst),
            "every node made is deleted once nobody holds it"
        );
    });
}

#[test]
fn local_queue_handoff_under_random_interleavings() {
    shuttle::check_random(local_queue_model, ITERATIONS);
}

#[test]
fn local_queue_handoff_under_pct_interleavings() {
    shuttle::check_pct(local_queue_model, ITERATIONS, 3);
}

fn token(zxid: i64) -> FencingToken {
    FencingToken::new(zxid, 0)
}

fn scope_model() {
    block_on(async {
        let (a, b) = (token(1), token(2));
        // A task inside the scope of `a`, and a sibling task outside every scope.
        let inside = spawn(model_scope(&[("a", a)], async move {
            for _ in 0..3 {
                assert_eq!(current_fencing_token_for("a"), Some(a));
                yield_now().await;
            }
            model_scope(&[("b", b)], async move {
                yield_now().await;
                assert_eq!(current_fencing_token(), Some(b), "the innermost scope answers");
                assert_eq!(current_fencing_token_for("a"), Some(a), "outer scopes stay visible");
            })
            .await;
            assert_eq!(current_fencing_token_for("b"), None, "a scope ends with its future");
            // A scope future made here and run outside takes the scope of where it runs.
            Some(model_scope(&[("b", b)], async { current_fencing_token_for("a") }))
        }));
        let outside = spawn(async move {
            for _ in 0..3 {
                assert_eq!(current_fencing_token_for("a"), None, "a task outside the scope saw it");
                yield_now().await;
            }
        });
        // Siblings polled by one task: only the future inside the scope sees it.
        let (in_scope, beside) = futures_util::join!(
            model_scope(&[("a", a)], async move {
                yield_now().await;
                current_fencing_token_for("a")
            }),
            async {
                yield_now().await;
                current_fencing_token_for("a")
            }
        );
        assert_eq!((in_scope, beside), (Some(a), None));
        let made_inside = inside.await.unwrap().expect("made inside");
        assert_eq!(
            made_inside.await,
            None,
            "a scope future carried the scope it was made in"
        );
        // Made out here, run inside `a`: sees `a`.
        let made_outside = model_scope(&[("b", b)], async { current_fencing_token_for("a") });
        assert_eq!(model_scope(&[("a", a)], made_outside).await, Some(a));
        outside.await.unwrap();
    });
}

#[test]
fn reentrancy_scopes_under_random_interleavings() {
    shuttle::check_random(scope_model, ITERATIONS);
}

#[test]
fn reentrancy_scopes_under_pct_interleavings() {
    shuttle::check_pct(scope_model, ITERATIONS, 3);
}
