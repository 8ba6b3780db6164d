// What `#[distributed_lock("inventory:{sku}", timeout = "10s", client = self.locks)]` makes of
// `deduct` (the crate documentation's first example), comments added. Shown in the crate
// documentation, compared with the attribute's output by a unit test of `expand.rs`, and
// compiled against the runtime by `tests/macro_expansion.rs`.
impl Inventory {
    async fn deduct(&self, sku: &str, qty: u32) -> Result<u32, AppError> {
        // The crate's name in Cargo.toml (renamed dependencies too), or `crate = …`.
        use ::zklock as __zklock;
        let __zklock_names = ::std::vec![::std::format!("inventory:{}", sku)];
        let __zklock_client = __zklock::__private::explicit_client(&(self.locks));
        __zklock::__private::run_locked(
            __zklock_client,
            __zklock_names,
            __zklock::__private::LockOptions {
                kind: __zklock::LockKind::Mutex,
                timeout: __zklock::__private::Timeout::After(::core::time::Duration::new(10u64, 0u32)),
                on_lost: __zklock::__private::OnLost::Abort,
                on_revoke: __zklock::__private::OnRevoke::Continue,
                max_hold: ::core::option::Option::None,
                lock_delay: ::core::option::Option::None,
                min_hold: ::core::option::Option::None,
                cache: ::core::option::Option::None,
                templates: &["inventory:{sku}"],
            },
            __zklock::__private::result_converter::<_, AppError>(),
            move |_: __zklock::FencingToken| async move {
                // Fixes the future's output type before the body is checked (never runs).
                if let ::core::option::Option::Some(__zklock_ret) =
                    ::core::option::Option::None::<Result<u32, AppError>>
                {
                    return __zklock_ret;
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
