//! Reentrancy scopes, under shuttle (see the module above).

use shuttle::future::{block_on, spawn, yield_now};

use super::ITERATIONS;
use crate::engine::reentrancy::{current_fencing_token, current_fencing_token_for, model_scope};
use crate::engine::token::FencingToken;

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
