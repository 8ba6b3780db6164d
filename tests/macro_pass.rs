//! The shapes of function `#[distributed_lock]` accepts, and the paths that need no server:
//! no default client installed, an unreachable ensemble. Every function here compiles (that
//! is half the test); the `#[tokio::test]`s check what calls return.
//!
//! This file never installs a default client, so the "none installed" test is deterministic.

#![deny(warnings)]

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use zklock::{distributed_lock, FencingToken, LockClient, LockError};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Invalid(#[allow(dead_code)] String),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

type AppResult<T> = Result<T, AppError>;

// Free functions: generics, lifetimes, where clauses, impl Trait arguments and results.

#[distributed_lock("free:{key}")]
async fn generic<K: Display + Send, V>(key: K, value: V) -> Result<V, AppError> {
    Ok(value)
}

#[distributed_lock("where:{key}", timeout = "1s")]
async fn with_where<'a, K>(key: &'a K, tail: &'a str) -> Result<&'a str, AppError>
where
    K: Display + ?Sized + Sync,
{
    Ok(tail)
}

#[distributed_lock("impl:{key}", timeout = "0s")]
async fn impl_trait_args(key: impl Display + Send, items: impl IntoIterator<Item = u32>) -> AppResult<impl Display> {
    let total: u32 = items.into_iter().sum();
    Ok(total)
}

// `?` and early `return` in the body.
#[distributed_lock("parse:{text}")]
async fn question_mark(text: &str) -> Result<u32, AppError> {
    if text.is_empty() {
        return Err(AppError::Invalid("empty".into()));
    }
    let n: u32 = text.parse().map_err(|_| AppError::Invalid(text.into()))?;
    Ok(n)
}

// Fields of arguments and a format spec in the name; the token binding.
struct Order {
    id: u64,
    line: (u32, u32),
}

#[distributed_lock("order:{order.id}:{order.line.1:04}", token = fence)]
async fn fields(order: &Order) -> Result<FencingToken, LockError> {
    Ok(fence)
}

// Methods with each receiver, holding their own client.
struct Service {
    locks: LockClient,
    shared: Arc<LockClient>,
    region: String,
    count: u32,
}

impl Service {
    #[distributed_lock("svc:{self.region}:{id}", client = self.locks)]
    async fn by_ref(&self, id: u32) -> Result<u32, AppError> {
        Ok(id + self.count)
    }

    #[distributed_lock("svc:{self.region}", client = self.shared, mode = "write")]
    async fn by_mut(&mut self) -> Result<u32, AppError> {
        self.count += 1;
        Ok(self.count)
    }

    #[distributed_lock("svc:{self.region}", client = &self.locks, mode = "read")]
    async fn by_value(self) -> Result<String, AppError> {
        Ok(self.region)
    }

    #[distributed_lock("svc:boxed", client = self.locks.clone(), mode = "semaphore", leases = 2)]
    async fn boxed(self: Box<Self>) -> Result<u32, AppError> {
        Ok(self.count)
    }
}

// Trait-impl methods (async fn in traits).
trait Jobs {
    async fn run(&self, job: &str) -> Result<(), AppError>;
    async fn run_default(&self) -> Result<(), AppError>;
}

impl Jobs for Service {
    #[distributed_lock("job:{job}", client = self.locks, on_lost = "continue")]
    async fn run(&self, job: &str) -> Result<(), AppError> {
        Ok(())
    }

    #[distributed_lock("job:default", timeout = "forever")]
    async fn run_default(&self) -> Result<(), AppError> {
        Ok(())
    }
}

// Stacked with #[tracing::instrument], in both orders.
#[tracing::instrument]
#[distributed_lock("traced:{id}")]
async fn instrument_outside(id: u32) -> Result<u32, AppError> {
    tracing::info!("inside");
    Ok(id)
}

#[distributed_lock("traced:{id}")]
#[tracing::instrument(err(Debug))]
async fn instrument_inside(id: u32) -> Result<u32, AppError> {
    tracing::info!("inside");
    Ok(id)
}

// Recursion (boxed, as any recursive async fn).
#[distributed_lock("countdown")]
async fn countdown(n: u32) -> Result<u32, AppError> {
    if n == 0 {
        return Ok(0);
    }
    Ok(1 + Box::pin(countdown(n - 1)).await?)
}

// Bodies that never fall through: no `unreachable expression` warning (this file denies
// warnings, and clippy runs on it with `-D warnings`).
#[distributed_lock("worker:{shard}", timeout = "forever")]
async fn worker(shard: u32) -> Result<(), AppError> {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[distributed_lock("todo:{id}")]
async fn not_written_yet(id: u32) -> Result<u32, AppError> {
    todo!()
}

#[distributed_lock("trailing:{x}")]
#[allow(clippy::needless_return)]
async fn trailing_return(x: u32) -> Result<u32, AppError> {
    let y = x + 1;
    return Ok(y);
}

// Inner attributes apply to the whole function.
#[distributed_lock("inner:{id}")]
async fn inner_attributes(id: u32) -> Result<u32, AppError> {
    #![allow(unused_variables)]
    let unused = 1;
    Ok(id)
}

// Raw identifiers and widths from parameters in placeholders.
#[distributed_lock("raw:{r#type}:{id:>width$}")]
async fn raw_and_width(r#type: &str, id: u32, width: usize) -> Result<u32, AppError> {
    Ok(id)
}

// The crate through an alias.
mod reexport {
    pub use zklock as locks;
}

#[distributed_lock("aliased", crate = reexport::locks, timeout = "10 sec")]
async fn through_reexport() -> Result<(), AppError> {
    Ok(())
}

// `#[async_trait]` methods, in both orders with `#[tracing::instrument]`.
#[async_trait::async_trait]
trait Ledger: Send + Sync {
    async fn post(&self, entry: u32) -> Result<u32, AppError>;
    async fn pair(&self, pair: (u8, u8)) -> Result<u8, AppError>;
    async fn traced_outside(&self, id: u32) -> Result<u32, AppError>;
    async fn traced_inside(&self, id: u32) -> Result<u32, AppError>;
    async fn consume(self: Box<Self>) -> Result<String, AppError>;
}

#[async_trait::async_trait]
impl Ledger for Service {
    #[distributed_lock("ledger:{self.region}:{entry}", client = self.locks, token = fence)]
    async fn post(&self, entry: u32) -> Result<u32, AppError> {
        if entry == 0 {
            return Ok(0);
        }
        Ok(entry + self.count + u32::from(fence.zxid() > 0))
    }

    #[distributed_lock("ledger:{a}:{b}", client = self.shared)]
    async fn pair(&self, (a, b): (u8, u8)) -> Result<u8, AppError> {
        Ok(a + b)
    }

    #[tracing::instrument(skip(self))]
    #[distributed_lock("ledger-traced:{id}", client = self.locks)]
    async fn traced_outside(&self, id: u32) -> Result<u32, AppError> {
        tracing::info!("inside");
        Ok(id)
    }

    #[distributed_lock("ledger-traced:{id}", client = self.locks)]
    #[tracing::instrument(skip(self), err(Debug))]
    async fn traced_inside(&self, id: u32) -> Result<u32, AppError> {
        tracing::info!("inside");
        Ok(id)
    }

    #[distributed_lock("ledger:{self.region}", client = self.locks.clone())]
    async fn consume(self: Box<Self>) -> Result<String, AppError> {
        Ok(self.region)
    }
}

fn assert_send<T: Send>(_: &T) {}

/// A client whose ensemble does not exist: every call fails to connect.
fn unreachable_client() -> LockClient {
    LockClient::builder(zklock_testing::process::closed_address().to_string())
        .connect_timeout(Duration::from_millis(500))
        .build()
        .expect("building a client does not connect")
}

#[test]
fn locked_futures_are_send_when_the_body_is() {
    let service = Service {
        locks: unreachable_client(),
        shared: Arc::new(unreachable_client()),
        region: "eu".into(),
        count: 0,
    };
    assert_send(&generic("k", 1u8));
    assert_send(&service.by_ref(1));
    assert_send(&service.run("j"));
    assert_send(&instrument_outside(1));
    assert_send(&instrument_inside(1));
    assert_send(&countdown(3));
    let order = Order { id: 1, line: (2, 3) };
    assert_send(&fields(&order));
    assert_send(&impl_trait_args("k", [1, 2]));
    assert_send(&with_where("k", "tail"));
    assert_send(&question_mark("1"));
    assert_send(&service.run_default());
    assert_send(&worker(1));
    assert_send(&not_written_yet(1));
    assert_send(&trailing_return(1));
    assert_send(&inner_attributes(1));
    assert_send(&raw_and_width("t", 1, 4));
    assert_send(&through_reexport());
    assert_send(&service.post(1));
    assert_send(&service.pair((1, 2)));
    assert_send(&service.traced_outside(1));
    assert_send(&service.traced_inside(1));
    let mut service = service;
    assert_send(&service.by_mut());
    assert_send(&Box::new(service).boxed());
}

#[tokio::test]
async fn async_trait_methods_and_aliased_crates_reach_the_runtime() {
    let service = Service {
        locks: unreachable_client(),
        shared: Arc::new(unreachable_client()),
        region: "eu".into(),
        count: 0,
    };
    let ledger: Box<dyn Ledger> = Box::new(service);
    for result in [
        ledger.post(1).await,
        ledger.pair((1, 2)).await.map(u32::from),
        ledger.traced_outside(2).await,
        ledger.traced_inside(3).await,
    ] {
        match result {
            Err(AppError::Lock(LockError::Connection { .. } | LockError::Timeout { .. })) => {}
            other => panic!("expected a connection error, got {other:?}"),
        }
    }
    assert!(ledger.consume().await.is_err());
    // No default client in this binary.
    assert!(matches!(
        through_reexport().await,
        Err(AppError::Lock(LockError::InvalidConfig { .. }))
    ));
}

#[tokio::test]
async fn without_a_default_client_the_call_returns_a_clear_error() {
    // No test in this binary installs a default client.
    let err = instrument_outside(7).await.unwrap_err();
    match err {
        AppError::Lock(LockError::InvalidConfig { message, .. }) => {
            assert!(message.contains("install_default"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    // The body did not run: a body would have returned Ok.
    assert!(matches!(
        countdown(2).await,
        Err(AppError::Lock(LockError::InvalidConfig { .. }))
    ));
}

#[tokio::test]
async fn an_unreachable_ensemble_comes_out_through_the_error_type() {
    let service = Service {
        locks: unreachable_client(),
        shared: Arc::new(unreachable_client()),
        region: "eu".into(),
        count: 0,
    };
    match service.by_ref(1).await {
        Err(AppError::Lock(LockError::Connection { .. } | LockError::Timeout { .. })) => {}
        other => panic!("expected a connection error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_placeholder_that_makes_the_name_invalid_is_an_error_not_a_panic() {
    let service = Service {
        locks: unreachable_client(),
        shared: Arc::new(unreachable_client()),
        region: "eu/west".into(),
        count: 0,
    };
    match service.by_ref(1).await {
        Err(AppError::Lock(LockError::InvalidName { name, .. })) => assert_eq!(name, "svc:eu/west:1"),
        other => panic!("expected InvalidName, got {other:?}"),
    }
}
