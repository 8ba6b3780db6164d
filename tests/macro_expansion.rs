//! The expansion shown in the `zklock-macros` crate docs (`zklock-macros/docs/expansion.rs`,
//! which a unit test there compares with the attribute's real output), compiled and run
//! against the runtime it calls; `tests/macro_server.rs` checks what the attribute does.

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

// The expansion the `zklock-macros` docs show (checked there against the attribute's real
// output), compiled here against the runtime it calls.
include!("../zklock-macros/docs/expansion.rs");

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
        Err(AppError::Lock(LockError::Connection { .. })) => {}
        other => panic!("expected a connection error through AppError, got {other:?}"),
    }
}
