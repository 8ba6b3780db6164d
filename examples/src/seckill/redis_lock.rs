//! The Redis lock the seckill service can run with instead of zklock, for the benchmark's
//! comparison: the usual single-instance pattern.
//!
//! - acquire: `SET <key> <token> NX PX <ttl>`, where the token is unique to this acquisition;
//!   when the key exists, retry with exponential back-off (1 ms doubling to 32 ms, with
//!   jitter) until the timeout;
//! - release: a Lua script that deletes the key only if it still holds this token
//!   (compare-and-delete), so a holder whose key expired cannot delete its successor's.
//!
//! The key expires after the TTL whatever its holder is doing: a holder paused (GC, swap, a
//! stopped VM) for longer than the TTL still believes it holds the lock while another process
//! holds it too. There is no fencing token to give the database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

/// Deletes KEYS[1] if it holds ARGV[1]; answers 1 if it did, 0 otherwise.
const RELEASE: &str =
    r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#;

/// How long connecting to the server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The first and the largest pause between two attempts.
const FIRST_BACKOFF: Duration = Duration::from_millis(1);
const MAX_BACKOFF: Duration = Duration::from_millis(32);

/// Why a Redis lock operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RedisLockError {
    /// The key stayed taken for the whole timeout.
    #[error("redis lock {key} not acquired within {waited:?}")]
    Timeout {
        /// The lock's key.
        key: String,
        /// How long it was tried.
        waited: Duration,
    },
    /// Redis failed or could not be reached.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// A client of the Redis lock: one multiplexed connection, reconnected when it breaks.
#[derive(Clone)]
pub struct RedisLock {
    connection: ConnectionManager,
    ttl: Duration,
    release: Script,
    /// Makes tokens unique within this process; the pid and the start time make them unique
    /// across processes.
    prefix: String,
    next: std::sync::Arc<AtomicU64>,
    /// Releases that found the key gone or taken by another token: the lock had expired while
    /// held.
    expired_while_held: std::sync::Arc<AtomicU64>,
}

impl std::fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLock")
            .field("ttl", &self.ttl)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// A held Redis lock; give it back to [`RedisLock::release`].
#[derive(Debug)]
pub struct RedisGuard {
    key: String,
    token: String,
}

impl RedisLock {
    /// Connects to the Redis server at `url` (`redis://host:port/`); each lock key expires
    /// `ttl` after it was set.
    pub async fn connect(url: &str, ttl: Duration) -> Result<RedisLock, RedisLockError> {
        if ttl < Duration::from_millis(1) {
            return Err(RedisLockError::Redis(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "the Redis lock TTL must be at least 1 ms",
            ))));
        }
        let client = redis::Client::open(url)?;
        // One plain connection first, so that an unreachable server is reported at once rather
        // than after the manager's retries.
        match tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection()).await {
            Ok(connected) => drop(connected?),
            Err(_) => {
                return Err(RedisLockError::Redis(redis::RedisError::from((
                    redis::ErrorKind::IoError,
                    "no answer from the Redis server",
                    format!("{url} did not accept a connection within {CONNECT_TIMEOUT:?}"),
                ))))
            }
        }
        // Reconnects after a broken connection: 10 ms, doubling, at most 500 ms apart.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(CONNECT_TIMEOUT)
            .set_exponent_base(2)
            .set_factor(10)
            .set_max_delay(500)
            .set_number_of_retries(6);
        let connection = ConnectionManager::new_with_config(client, config).await?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        Ok(RedisLock {
            connection,
            ttl,
            release: Script::new(RELEASE),
            prefix: format!("{}-{started:x}", std::process::id()),
            next: Default::default(),
            expired_while_held: Default::default(),
        })
    }

    /// Takes the lock `key`, retrying with back-off for at most `timeout`.
    pub async fn acquire(&self, key: &str, timeout: Duration) -> Result<RedisGuard, RedisLockError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let token = format!("{}-{n}", self.prefix);
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let mut connection = self.connection.clone();
        loop {
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query_async(&mut connection)
                .await?;
            if set.is_some() {
                return Ok(RedisGuard {
                    key: key.to_owned(),
                    token,
                });
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(RedisLockError::Timeout {
                    key: key.to_owned(),
                    waited,
                });
            }
            // Jitter of up to half the pause, from the token counter and the attempt, so that
            // waiters that collided do not retry in lockstep.
            let jitter =
                backoff.mul_f64(((n.wrapping_mul(0x9e37_79b9) ^ waited.as_nanos() as u64) % 512) as f64 / 1024.0);
            tokio::time::sleep((backoff + jitter).min(timeout - waited)).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Gives the lock back (compare-and-delete). `Ok(false)` when the key had expired, or
    /// been taken by someone else after it expired: the lock was not exclusive to the end.
    pub async fn release(&self, guard: RedisGuard) -> Result<bool, RedisLockError> {
        let mut connection = self.connection.clone();
        let deleted: i64 = self
            .release
            .key(&guard.key)
            .arg(&guard.token)
            .invoke_async(&mut connection)
            .await?;
        if deleted == 0 {
            self.expired_while_held.fetch_add(1, Ordering::Relaxed);
        }
        Ok(deleted == 1)
    }

    /// How many releases so far found the lock expired.
    pub fn expired_while_held(&self) -> u64 {
        self.expired_while_held.load(Ordering::Relaxed)
    }
}
