//! The local queue and its handoff, under shuttle (see the module above).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use futures_util::future::{select, Either};
use shuttle::future::{block_on, spawn, yield_now};
use shuttle::rand::{thread_rng, Rng};
use tokio::sync::oneshot;

use super::ITERATIONS;
use crate::engine::local_queue::Gate;

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
