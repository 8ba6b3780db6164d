// `#[distributed_lock]` inside `#[async_trait]` impls and traits: async-trait expands first and
// leaves `fn … -> Pin<Box<dyn Future<…> + Send + '_>> { Box::pin(async move { … }) }`; the
// lock is taken inside that future.
#![deny(warnings)]

use std::sync::Arc;

use async_trait::async_trait;
use zklock::{distributed_lock, FencingToken, LockClient, LockError};

#[derive(Debug)]
pub enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

#[async_trait]
pub trait Jobs: Send + Sync {
    async fn run(&self, job: &str) -> Result<u32, AppError>;
    async fn bump(&mut self, by: u32) -> Result<u32, AppError>;
    async fn pair(&self, pair: (u8, u8)) -> Result<u8, AppError>;
    async fn fenced(&self) -> Result<FencingToken, AppError>;
    async fn consume(self: Box<Self>) -> Result<String, AppError>;
    async fn traced_outside(&self, id: u32) -> Result<u32, AppError>;
    async fn traced_inside(&self, id: u32) -> Result<u32, AppError>;

    // A provided method, locked in the trait.
    #[distributed_lock("default:{id}")]
    async fn provided(&self, id: u32) -> Result<u32, AppError> {
        Ok(id)
    }
}

pub struct Service {
    locks: LockClient,
    shared: Arc<LockClient>,
    region: String,
    count: u32,
}

#[async_trait]
impl Jobs for Service {
    #[distributed_lock("job:{self.region}:{job}", client = self.locks, timeout = "1s")]
    async fn run(&self, job: &str) -> Result<u32, AppError> {
        if job.is_empty() {
            return Ok(0);
        }
        Ok(self.count + job.len() as u32)
    }

    #[distributed_lock("bump:{by}", client = self.shared, mode = "write")]
    async fn bump(&mut self, by: u32) -> Result<u32, AppError> {
        self.count += by;
        Ok(self.count)
    }

    #[distributed_lock("pair:{a}:{b}", client = &self.locks)]
    async fn pair(&self, (a, b): (u8, u8)) -> Result<u8, AppError> {
        Ok(a + b)
    }

    #[distributed_lock("fenced", client = self.locks, token = fence)]
    async fn fenced(&self) -> Result<FencingToken, AppError> {
        Ok(fence)
    }

    #[distributed_lock("consume:{self.region}", client = self.locks.clone())]
    async fn consume(self: Box<Self>) -> Result<String, AppError> {
        Ok(self.region)
    }

    #[tracing::instrument(skip(self))]
    #[distributed_lock("traced:{id}", client = self.locks)]
    async fn traced_outside(&self, id: u32) -> Result<u32, AppError> {
        tracing::info!("inside");
        Ok(id)
    }

    #[distributed_lock("traced:{id}", client = self.locks)]
    #[tracing::instrument(skip(self), err(Debug))]
    async fn traced_inside(&self, id: u32) -> Result<u32, AppError> {
        tracing::info!("inside");
        Ok(id)
    }
}

// `?Send` impls work the same way.
#[async_trait(?Send)]
pub trait Local {
    async fn local(&self, id: u32) -> Result<u32, AppError>;
}

#[async_trait(?Send)]
impl Local for std::rc::Rc<Service> {
    #[distributed_lock("local:{id}", client = self.locks)]
    async fn local(&self, id: u32) -> Result<u32, AppError> {
        Ok(id + self.count)
    }
}

fn assert_send<T: Send>(_: &T) {}

#[tokio::main(flavor = "current_thread")]
pub async fn main() {
    // A client of a port nobody listens on: every call fails to connect, through `AppError`.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = || {
        LockClient::builder(addr.to_string())
            .connect_timeout(std::time::Duration::from_millis(200))
            .build()
            .unwrap()
    };
    let mut service = Service {
        locks: client(),
        shared: Arc::new(client()),
        region: "eu".into(),
        count: 1,
    };
    assert_send(&service.run("job"));
    // The future is `Send`: it can be spawned.
    let spawned: Arc<dyn Jobs> = Arc::new(Service {
        locks: client(),
        shared: Arc::new(client()),
        region: "us".into(),
        count: 0,
    });
    let spawned = tokio::spawn(async move { spawned.run("spawned").await });
    let jobs: &dyn Jobs = &service;
    for result in [
        spawned.await.unwrap(),
        jobs.run("job").await,
        jobs.pair((1, 2)).await.map(u32::from),
        jobs.traced_outside(3).await,
        jobs.traced_inside(4).await,
    ] {
        match result {
            Err(AppError::Lock(LockError::Connection { .. } | LockError::Timeout { .. })) => {}
            other => panic!("expected a connection error, got {other:?}"),
        }
    }
    // No default client is installed in this process.
    assert!(matches!(
        jobs.provided(5).await,
        Err(AppError::Lock(LockError::InvalidConfig { .. }))
    ));
    assert!(service.bump(1).await.is_err());
    assert!(service.fenced().await.is_err());
    let rc = std::rc::Rc::new(service);
    assert!(rc.local(1).await.is_err());
    let service = std::rc::Rc::try_unwrap(rc).ok().unwrap();
    assert!(Box::new(service).consume().await.is_err());
}
