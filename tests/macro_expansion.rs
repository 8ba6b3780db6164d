//! The expansion sample shown in the `zklock-macros` crate docs, written out by hand, so the
//! documented shape keeps compiling against the runtime it calls. It checks the shape, not the
//! macro's exact output; `tests/macro_server.rs` checks what the attribute does.

use zklock::{LockClient, LockError};

#[derive(Debug)]
#[allow(dead_code)]
enum AppError {
    Lock(LockError),
    OutOfStock,
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

struct Inventory {
    locks: LockClient,
}

impl Inventory {
    async fn deduct(&self, sku: &str, qty: u32) -> Result<u32, AppError> {
        use ::zklock; // the crate's name in Cargo.toml, or `crate = …`
        let names = ::std::vec![::std::format!("inventory:{}", sku)];
        let client = zklock::__private::explicit_client(&(self.locks));
        zklock::__private::run_locked(
            client,
            names,
            zklock::__private::LockOptions {
                kind: zklock::LockKind::Mutex,
                timeout: zklock::__private::Timeout::After(::core::time::Duration::from_millis(10000u64)),
                on_lost: zklock::__private::OnLost::Abort,
                max_hold: ::core::option::Option::None,
                templates: &["inventory:{sku}"],
            },
            zklock::__private::result_converter::<_, AppError>(),
            move |_: zklock::FencingToken| async move {
                // Fixes the future's output type before the body is checked (never runs).
                if let ::core::option::Option::Some(ret) = ::core::option::Option::None::<Result<u32, AppError>> {
                    return ret;
                }
                // The body's own statements follow: its braces are the async block's.
                if qty > 100 {
                    return Err(AppError::OutOfStock);
                }
                Ok(100 - qty)
            },
        )
        .await
    }
}

#[tokio::test]
async fn documented_expansion_compiles_and_reports_an_unreachable_ensemble() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let locks = LockClient::builder(addr.to_string())
        .connect_timeout(std::time::Duration::from_millis(500))
        .build()
        .unwrap();
    let inventory = Inventory { locks };
    match inventory.deduct("sku-1", 1).await {
        Err(AppError::Lock(LockError::Connection(_))) => {}
        other => panic!("expected a connection error through AppError, got {other:?}"),
    }
}
