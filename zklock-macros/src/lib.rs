//! The `#[distributed_lock]` attribute of [`zklock`](https://docs.rs/zklock): run an async
//! function only while a ZooKeeper lock is held. Use it through the `zklock` crate
//! (`use zklock::distributed_lock;`).
//!
//! ```no_run
//! use zklock::{distributed_lock, LockClient, LockError};
//!
//! #[derive(Debug)]
//! enum AppError {
//!     Lock(LockError),
//!     OutOfStock,
//! }
//! impl From<LockError> for AppError {
//!     fn from(err: LockError) -> Self {
//!         AppError::Lock(err)
//!     }
//! }
//!
//! struct Inventory {
//!     locks: LockClient,
//! }
//!
//! impl Inventory {
//!     #[distributed_lock("inventory:{sku}", timeout = "10s", client = self.locks)]
//!     async fn deduct(&self, sku: &str, qty: u32) -> Result<u32, AppError> {
//!         // Runs only while this process holds the lock `inventory:<sku>`.
//!         if qty > 100 {
//!             return Err(AppError::OutOfStock);
//!         }
//!         Ok(100 - qty)
//!     }
//! }
//! ```
//!
//! # The lock name
//!
//! The first argument is a string literal. `{arg}` inserts the `Display` of a function
//! argument, `{arg.field}` a field of it, `{self.field}` a field of the receiver (raw
//! identifiers work: `{r#type}`, `{req.r#match}`); a format spec works as in `format!`
//! (`{id:08}`, `{id:x}`, `{id:>width$}` with `width` a parameter), and `{{`/`}}` are literal
//! braces. Placeholders and format specs are checked at compile time: a name that is not a
//! parameter, or a spec `format!` would refuse, is a compile error pointing at the literal.
//!
//! A lock name must be a valid ZooKeeper node name ([`validate_name`]): not empty, at most 200
//! bytes, not `.` or `..`, no `/`, no control characters (U+0000–U+001F, U+007F–U+009F), no
//! private-use (U+E000–U+F8FF) or special (U+FFF0–U+FFFF) code points, and no characters outside
//! the Basic Multilingual Plane (emoji and the like). What the attribute can check, it checks at
//! compile time: the whole of a name without placeholders, and the fixed text around
//! placeholders. If an argument makes the filled-in name invalid (a `/`, say), the call returns
//! `LockError::InvalidName` through the error type.
//!
//! # Several locks at once
//!
//! Give several names to hold them all while the body runs, as for a transfer between two
//! accounts or an order over several items:
//!
//! ```no_run
//! use zklock::{distributed_lock, LockError};
//!
//! #[distributed_lock("account:{from}", "account:{to}", timeout = "5s")]
//! async fn transfer(from: u64, to: u64, cents: u64) -> Result<(), LockError> {
//!     let debit = zklock::current_fencing_token_for(&format!("account:{from}"));
//!     let credit = zklock::current_fencing_token_for(&format!("account:{to}"));
//!     # let _ = (debit, credit, cents);
//!     Ok(())
//! }
//! ```
//!
//! The locks are taken as one `zklock::MultiLock`: in one canonical order (sorted by lock
//! path) whatever order the names are written or filled in, so `transfer(1, 2, …)` and
//! `transfer(2, 1, …)` running at once cannot deadlock; all or nothing (on timeout or error the
//! ones already taken are released); one `timeout` for the whole acquisition; names that are
//! equal once filled in (`transfer(7, 7, …)`) are one lock. The loss of any of them is the loss
//! of all (`on_lost`), and `zklock::current_fencing_token_for(name)` gives each one's token in the body;
//! `token = …` is refused with several names, as it could name only one.
//!
//! # Options
//!
//! | option | values | default |
//! |---|---|---|
//! | `timeout` | a duration such as `"500ms"`, `"10s"`, `"1m30s"`; `"0s"` tries once; `"forever"` | `"30s"` |
//! | `mode` | `"mutex"`, `"read"`, `"write"`, `"semaphore"` (with `leases = N`) | `"mutex"` |
//! | `leases` | a positive integer, with `mode = "semaphore"` | — |
//! | `client` | an expression yielding a `LockClient`, `&LockClient` or `Arc<LockClient>` | the process-wide default |
//! | `on_lost` | `"abort"`, `"continue"` (`zklock::OnLost`) | `"abort"` |
//! | `on_revoke` | `"continue"`, `"abort"` | `"continue"` |
//! | `if_busy` | `"fail"`, `"skip"` | `"fail"` |
//! | `max_hold` | a duration such as `"30s"` | no bound |
//! | `lock_delay` | a duration such as `"5s"`, up to an hour (not with `mode = "semaphore"`) | none |
//! | `token` | an identifier, bound to the hold's `FencingToken` in the body | — |
//! | `crate` | the path of the `zklock` crate, as `crate = path` or `crate = "path"` | found in `Cargo.toml` |
//!
//! * **`timeout`**: the longest wait for the lock; past it, the function returns
//!   `LockError::Timeout` through its error type without running the body. Durations, here
//!   and in every other option, are written as the `zklock` command takes them
//!   ([humantime](https://docs.rs/humantime)'s syntax): `"500ms"`, `"10s"`, `"1m30s"`,
//!   `"1m 30s"`, `"1.5s"`, `"2 hours"`.
//! * **`mode`**: `"read"` holders share the lock with each other and exclude `"write"`
//!   holders; `"semaphore"` lets up to `leases` holders in at once.
//! * **`client`**: evaluated once per call, before the lock is taken. Without it, the client
//!   installed with `LockClient::install_default()` at start-up is used; if none is installed,
//!   the call returns `LockError::InvalidConfig` saying so (it does not panic).
//! * **`on_lost`**: with `"abort"`, if the lock is lost while the body runs (session expired,
//!   or connection down past the client's `loss_after`), the body's future is dropped at its
//!   next `.await` and the function returns `LockError::Lost`. With `"continue"` the body runs
//!   to its end; it can check `zklock::current_loss_signal()`. A lock whose node was deleted
//!   by someone else (an operator clearing it) is lost too.
//! * **`on_revoke`**: what the body does when another process asks for the lock (revocation:
//!   `zklock revoke`, `LockClient::revoke`, Curator's `Revoker.attemptRevoke`). With
//!   `"continue"` (the default, as Curator leaves the decision to the holder) the body runs on;
//!   with `"abort"` its future is dropped at its next `.await`, the lock is released, and the
//!   function returns `LockError::Revoked` (not `Lost`: the lock was held soundly until then).
//! * **`if_busy`**: with `"skip"`, a call that finds the lock held elsewhere does not run the
//!   body and returns `Ok(T::default())` (`Ok(())` for `Result<(), E>`): ShedLock's behaviour,
//!   for work that only needs doing once somewhere (a cache refresh, a report). It tries once
//!   unless a `timeout` is given, then waits up to that long before skipping. The `Ok` type
//!   must implement `Default` (a compile error on the return type says so otherwise); other
//!   errors (unreachable ZooKeeper, a loss) still come back as errors.
//! * **`max_hold`**: the longest the body may run under the lock, counted from the grant (for
//!   a nested call that re-enters, from the re-entry, a few milliseconds early at most).
//!   Past it, the body's future is dropped at its next `.await`, the lock is released, and
//!   the function returns `LockError::MaxHoldExceeded`, whatever `on_lost` says. It guards
//!   against hung work (a stuck network call, a lost wake-up), as lock4j's `expire` or
//!   ShedLock's `lockAtMostFor` do. It is not what frees the lock of a crashed process: the end
//!   of that process's ZooKeeper session does that, with or without a bound.
//! * **`lock_delay`**: after a holder vanishes without releasing (its process died, or an
//!   operator deleted its node), a caller that was waiting for it waits this long more before
//!   the body runs, so the dead holder's writes still in flight can drain (Chubby's and
//!   Consul's lock-delay; `Lock::with_lock_delay`). Clean releases cost nothing. Give every
//!   caller of the lock the same value; Curator contenders do not honour it.
//! * **`token`**: names a binding for the fencing token, to pass to the protected resource.
//!   `zklock::current_fencing_token()` returns the same value in the body's scope: the body and
//!   what it awaits, not futures polled beside it nor tasks it spawns. It cannot have the name
//!   of a parameter (that would hide the parameter in the body).
//! * **`crate`**: where the expansion finds `zklock`. By default the attribute reads the name
//!   from the `Cargo.toml` of the crate being compiled, so a renamed dependency
//!   (`locks = { package = "zklock", … }`, also through `[workspace.dependencies]`) works as
//!   is. Give `crate = …` when zklock is reached through a re-export instead, as with serde's
//!   `#[serde(crate = "…")]`: `crate = my_platform::zklock`. Without it, a crate whose
//!   `Cargo.toml` does not list zklock gets a compile error at the attribute that says so.
//!
//! ```no_run
//! use std::sync::Arc;
//! use zklock::{distributed_lock, FencingToken, LockClient, LockError};
//!
//! struct Store {
//!     locks: Arc<LockClient>,
//! }
//!
//! impl Store {
//!     // Readers share the lock; at most 2 s of waiting.
//!     #[distributed_lock("catalog", mode = "read", timeout = "2s", client = self.locks)]
//!     async fn read_catalog(&self) -> Result<Vec<String>, LockError> {
//!         Ok(vec![])
//!     }
//!
//!     // One writer at a time, which sees its fencing token as `fence`.
//!     #[distributed_lock("catalog", mode = "write", token = fence, client = self.locks)]
//!     async fn write_catalog(&self, entry: String) -> Result<FencingToken, LockError> {
//!         println!("writing {entry} fenced by {fence}");
//!         Ok(fence)
//!     }
//! }
//!
//! // At most 4 concurrent exports across the cluster; try once, do not wait.
//! #[distributed_lock("exports", mode = "semaphore", leases = 4, timeout = "0s")]
//! async fn export(batch: u64) -> Result<(), LockError> {
//!     Ok(())
//! }
//!
//! // Finish the report even if the lock is lost midway, but notice it.
//! #[distributed_lock("report:{day}", on_lost = "continue", timeout = "forever")]
//! async fn build_report(day: u32) -> Result<bool, LockError> {
//!     let lost = zklock::current_loss_signal().is_some_and(|loss| loss.is_lost());
//!     Ok(!lost)
//! }
//!
//! # async fn start() -> Result<(), LockError> {
//! // Functions without `client = …` use the default client.
//! LockClient::connect("127.0.0.1:2181").await?.install_default();
//! export(7).await?;
//! # Ok(()) }
//! ```
//!
//! # Errors
//!
//! The function must return `Result<T, E>` (or an alias of one) where `E: From<LockError>`:
//! timeouts, loss and connection failures come out as `E`. Anything else is a compile error
//! saying so. `LockError` itself, `anyhow::Error` and `Box<dyn Error + Send + Sync>` work as
//! they are; an error type of another crate, such as `String` or `std::io::Error`, cannot get
//! that impl: return an error enum of your own with a variant for `LockError`.
//!
//! # Reentrancy
//!
//! A locked function whose body calls (and awaits) another function locked on the same name,
//! through the same client, re-enters the hold at once when the kinds allow it (a mutex in a
//! mutex, a write lock in a write lock, a read lock in a read or a write lock): no deadlock, no
//! ZooKeeper round trip, the same fencing token. Semaphore leases never re-enter: each
//! acquisition is another lease, and with every lease taken it waits until its timeout.
//! Recursive calls work the same way (box the recursive future, as any recursive
//! `async fn` must). Reentrancy follows the call scope, not the task: two calls run side by
//! side in one task (`join!`, `buffer_unordered`, …) are two holders and exclude each other,
//! and a task spawned from the body that takes the same lock waits for the body to finish.
//!
//! # Where it goes
//!
//! Any `async fn`: free functions, inherent methods and trait-impl methods (`async fn` in
//! traits) taking `&self`, `&mut self` or `self`, with generics, lifetimes, `where` clauses and
//! `impl Trait` arguments. It stacks with other attributes such as `#[tracing::instrument]` in
//! either order. The body is checked as it would be without the attribute: `return` and `?`
//! work as in any function (a `return` of the wrong type is one error at that `return`),
//! bodies that never reach their end (`loop { … }`, `todo!()`, a trailing `return`) compile
//! without warnings, and inner attributes at the top of the body (`#![allow(…)]`) apply to the
//! whole function.
//!
//! Methods of [`#[async_trait]`](https://docs.rs/async-trait) impls and traits work too:
//! `#[async_trait]` expands first and turns the method into one returning
//! `Box::pin(async move { … })`; the attribute takes the lock inside that future.
//!
//! ```no_run
//! use async_trait::async_trait;
//! use zklock::{distributed_lock, LockClient, LockError};
//!
//! #[async_trait]
//! trait Jobs {
//!     async fn run(&self, job: &str) -> Result<(), LockError>;
//! }
//!
//! struct Worker {
//!     locks: LockClient,
//! }
//!
//! #[async_trait]
//! impl Jobs for Worker {
//!     #[distributed_lock("job:{job}", client = self.locks)]
//!     async fn run(&self, job: &str) -> Result<(), LockError> {
//!         Ok(())
//!     }
//! }
//! ```
//!
//! # What it expands to
//!
//! The body moves into a closure handed to the runtime; the lock logic lives in the runtime,
//! not in the expansion. The first example above expands to this (comments added; a unit
//! test checks that it is what the attribute writes, token for token):
//!
#![doc = concat!("```ignore\n", include_str!("../docs/expansion.rs"), "```")]
//!
//! [`validate_name`]: https://docs.rs/zklock/latest/zklock/fn.validate_name.html

mod args;
mod duration;
mod expand;
mod template;

use proc_macro::TokenStream;
use quote::ToTokens;

use crate::args::LockArgs;
use crate::expand::MaybeItemFn;

/// Runs the async function only while a ZooKeeper lock is held.
///
/// `#[distributed_lock("name {arg}", "more names", timeout = "10s", mode = "mutex",
/// client = expr, on_lost = "abort", max_hold = "30s", lock_delay = "5s", token = ident,
/// crate = path)]`; every
/// option may be left out, and one name is enough. See the [crate documentation](crate) for the options, the name template and the
/// errors.
///
/// ```no_run
/// use zklock::{distributed_lock, LockError};
///
/// #[distributed_lock("nightly-cleanup", timeout = "0s")]
/// async fn cleanup() -> Result<(), LockError> {
///     // Only one process of the cluster gets here at a time; the others return
///     // `Err(LockError::Timeout { .. })` at once.
///     Ok(())
/// }
/// ```
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let original: proc_macro2::TokenStream = item.clone().into();
    let args = match syn::parse::<LockArgs>(args) {
        Ok(args) => args,
        Err(err) => return with_original(err, original),
    };
    let item = match syn::parse::<MaybeItemFn>(item) {
        Ok(item) => item,
        Err(err) => return with_original(err, original),
    };
    match expand::expand(args, item) {
        Ok(tokens) => tokens.into(),
        Err(err) => with_original(err, original),
    }
}

/// The error, followed by the item unchanged, so the rest of the crate (and an IDE) still sees
/// the function.
fn with_original(err: syn::Error, original: proc_macro2::TokenStream) -> TokenStream {
    let mut tokens = err.to_compile_error();
    original.to_tokens(&mut tokens);
    tokens.into()
}
