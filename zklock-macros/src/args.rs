//! Parsing and checking the attribute's arguments:
//! `("name", "other name", timeout = "10s", mode = "read", leases = 3, client = expr,
//! on_lost = "continue", on_revoke = "abort", max_hold = "30s", lock_delay = "5s", min_hold = "5s", cache = "5s",
//! token = ident,
//! crate = path)`.
//!
//! The names come first, as string literals (one or more), then the options.

use std::time::Duration;

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, LitInt, LitStr, Path, Token};

use crate::duration::parse_duration;
use crate::template::Template;

/// The option names, for "unknown option" errors.
const OPTIONS: &str =
    "`timeout`, `mode`, `leases`, `client`, `on_lost`, `on_revoke`, `if_busy`, `max_hold`, `lock_delay`, `min_hold`, `cache`, `token`, `crate`";
const OPTION_NAMES: &[&str] = &[
    "timeout",
    "mode",
    "leases",
    "client",
    "on_lost",
    "on_revoke",
    "if_busy",
    "max_hold",
    "lock_delay",
    "min_hold",
    "cache",
    "token",
    "crate",
];

/// `timeout = …`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutArg {
    /// Not given: the runtime's documented default.
    Default,
    After(Duration),
    /// `"forever"`.
    Forever,
}

/// `mode = …` (with `leases = …` for a semaphore).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeArg {
    Mutex,
    Read,
    Write,
    Semaphore(u32),
}

/// `on_lost = …`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLostArg {
    Abort,
    Continue,
}

/// `on_revoke = …`: what the body does when another process asks for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRevokeArg {
    Continue,
    Abort,
}

/// `if_busy = …`: what a call does when the lock stays held elsewhere past its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfBusyArg {
    /// Return the timeout through the function's error type.
    Fail,
    /// Skip the body and return `Ok(Default::default())` (ShedLock's behaviour).
    Skip,
}

/// The checked arguments of one `#[distributed_lock(…)]`.
pub struct LockArgs {
    /// One or more; several are locked together, in one canonical order.
    pub names: Vec<Template>,
    pub timeout: TimeoutArg,
    pub mode: ModeArg,
    pub client: Option<Expr>,
    pub on_lost: OnLostArg,
    pub on_revoke: OnRevokeArg,
    pub if_busy: IfBusyArg,
    /// `max_hold = …`: stop the body once the lock has been held this long.
    pub max_hold: Option<Duration>,
    /// `lock_delay = …`: how long the lock stays unavailable after a holder vanished without
    /// releasing.
    pub lock_delay: Option<Duration>,
    /// `min_hold = …`: how long from the grant the lock stays taken however soon the body
    /// ends (ShedLock's `lockAtLeastFor`).
    pub min_hold: Option<Duration>,
    /// `cache = …`: how long an idle node is kept for this process after the body (lock
    /// caching); `Some(ZERO)` turns off the client's default.
    pub cache: Option<Duration>,
    pub token: Option<Ident>,
    /// `crate = path`: where the `zklock` crate is, for a re-export.
    pub krate: Option<Path>,
}

impl Parse for LockArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(syn::Error::new(
                Span::call_site(),
                "#[distributed_lock] needs a lock name, as in #[distributed_lock(\"orders:{id}\")]",
            ));
        }
        let names = parse_names(input)?;

        let mut seen: Vec<Ident> = Vec::new();
        let mut timeout = TimeoutArg::Default;
        let mut mode: Option<(LitStr, &'static str)> = None;
        let mut leases: Option<LitInt> = None;
        let mut client = None;
        let mut on_lost = OnLostArg::Abort;
        let mut on_revoke = OnRevokeArg::Continue;
        let mut if_busy = IfBusyArg::Fail;
        let mut max_hold = None;
        let mut lock_delay: Option<(LitStr, Duration)> = None;
        let mut min_hold = None;
        let mut cache: Option<(LitStr, Duration)> = None;
        let mut token = None;
        let mut krate = None;

        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.call(syn::ext::IdentExt::parse_any).map_err(|e| {
                syn::Error::new(
                    e.span(),
                    format!("expected an option such as `timeout = \"10s\"` ({OPTIONS})"),
                )
            })?;
            let key_name = key.to_string();
            if let Some(first) = seen.iter().find(|k| **k == key) {
                let mut err = syn::Error::new(key.span(), format!("duplicate option `{key_name}`"));
                err.combine(syn::Error::new(first.span(), format!("`{key_name}` first given here")));
                return Err(err);
            }
            if !OPTION_NAMES.contains(&key_name.as_str()) {
                return Err(syn::Error::new(
                    key.span(),
                    format!("unknown option `{key_name}` of #[distributed_lock]; expected one of {OPTIONS}"),
                ));
            }
            input
                .parse::<Token![=]>()
                .map_err(|e| syn::Error::new(e.span(), format!("expected `=` and a value after `{key_name}`")))?;
            match key_name.as_str() {
                "timeout" => timeout = parse_timeout(&expect_str(input, &key_name, "\"10s\"")?)?,
                "mode" => {
                    let lit = expect_str(input, &key_name, "\"read\"")?;
                    let value = match lit.value().as_str() {
                        "mutex" => "mutex",
                        "read" => "read",
                        "write" => "write",
                        "semaphore" => "semaphore",
                        other => {
                            return Err(syn::Error::new(
                                lit.span(),
                                format!(
                                    "unknown mode {other:?}; expected \"mutex\" (the default), \"read\", \"write\" \
                                     or \"semaphore\" (with `leases = N`)"
                                ),
                            ))
                        }
                    };
                    mode = Some((lit, value));
                }
                "leases" => {
                    let lit: LitInt = input.parse().map_err(|e| {
                        syn::Error::new(e.span(), "`leases` takes a positive integer, as in `leases = 4`")
                    })?;
                    match lit.base10_parse::<u32>() {
                        Ok(n) if n > 0 => leases = Some(lit),
                        _ => {
                            return Err(syn::Error::new(
                                lit.span(),
                                "`leases` must be a whole number from 1 to 4294967295",
                            ))
                        }
                    }
                }
                "client" => client = Some(input.parse::<Expr>()?),
                "on_lost" => {
                    let lit = expect_str(input, &key_name, "\"continue\"")?;
                    on_lost = either(
                        &lit,
                        "on_lost",
                        ("abort", OnLostArg::Abort),
                        ("continue", OnLostArg::Continue),
                    )?;
                }
                "on_revoke" => {
                    let lit = expect_str(input, &key_name, "\"abort\"")?;
                    on_revoke = either(
                        &lit,
                        "on_revoke",
                        ("continue", OnRevokeArg::Continue),
                        ("abort", OnRevokeArg::Abort),
                    )?;
                }
                "if_busy" => {
                    let lit = expect_str(input, &key_name, "\"skip\"")?;
                    if_busy = either(&lit, "if_busy", ("fail", IfBusyArg::Fail), ("skip", IfBusyArg::Skip))?;
                }
                "max_hold" => max_hold = Some(parse_max_hold(&expect_str(input, &key_name, "\"30s\"")?)?),
                "lock_delay" => {
                    let lit = expect_str(input, &key_name, "\"5s\"")?;
                    let delay = parse_up_to_an_hour(&lit, "lock_delay")?;
                    lock_delay = Some((lit, delay));
                }
                "min_hold" => {
                    min_hold = Some(parse_up_to_an_hour(
                        &expect_str(input, &key_name, "\"5s\"")?,
                        "min_hold",
                    )?)
                }
                "cache" => {
                    let lit = expect_str(input, &key_name, "\"5s\"")?;
                    let linger = parse_linger(&lit)?;
                    cache = Some((lit, linger));
                }
                "token" => {
                    let ident: Ident = input.parse().map_err(|e| {
                        syn::Error::new(
                            e.span(),
                            "`token` takes the name of a binding for the fencing token, as in `token = fence`",
                        )
                    })?;
                    token = Some(ident);
                }
                "crate" => krate = Some(parse_crate_path(input)?),
                _ => unreachable!("checked above"),
            }
            seen.push(key);
        }

        let mode = match (mode, leases) {
            (None | Some((_, "mutex")), None) => ModeArg::Mutex,
            (Some((_, "read")), None) => ModeArg::Read,
            (Some((_, "write")), None) => ModeArg::Write,
            (Some((_, "semaphore")), Some(n)) => ModeArg::Semaphore(n.base10_parse()?),
            (Some((lit, "semaphore")), None) => {
                return Err(syn::Error::new(
                    lit.span(),
                    "mode \"semaphore\" needs the number of leases: add `leases = N`",
                ))
            }
            (_, Some(n)) => {
                return Err(syn::Error::new(
                    n.span(),
                    "`leases` applies only to mode = \"semaphore\"",
                ))
            }
            (Some((lit, _)), None) => unreachable!("mode {:?} checked above", lit.value()),
        };

        if let (Some((lit, _)), ModeArg::Semaphore(_)) = (&lock_delay, mode) {
            return Err(syn::Error::new(
                lit.span(),
                "a semaphore takes no `lock_delay`: its acquirers do not queue behind a holder",
            ));
        }

        if let (Some((lit, linger)), ModeArg::Read | ModeArg::Semaphore(_)) = (&cache, mode) {
            if !linger.is_zero() {
                return Err(syn::Error::new(
                    lit.span(),
                    "only mutexes and write locks are cached: `cache` needs mode = \"mutex\" or \"write\"",
                ));
            }
        }

        if let (Some(token), [_, second, ..]) = (&token, names.as_slice()) {
            let mut err = syn::Error::new(
                token.span(),
                "`token` names one fencing token, but this function locks several names; read each \
                 one in the body with `zklock::current_fencing_token_for(\"<name>\")`",
            );
            err.combine(syn::Error::new(second.lit.span(), "the second lock name"));
            return Err(err);
        }

        Ok(LockArgs {
            names,
            timeout,
            mode,
            client,
            on_lost,
            on_revoke,
            if_busy,
            max_hold,
            lock_delay: lock_delay.map(|(_, delay)| delay),
            min_hold,
            cache: cache.map(|(_, linger)| linger),
            token,
            krate,
        })
    }
}

/// The lock names: one or more string literals before the options. The same literal given
/// twice is a mistake; names that are equal only once filled in collapse at run time.
fn parse_names(input: ParseStream<'_>) -> syn::Result<Vec<Template>> {
    let mut names: Vec<LitStr> = Vec::new();
    loop {
        let lit: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                if names.is_empty() {
                    "expected the lock name as a string literal first, as in #[distributed_lock(\"orders:{id}\")]"
                } else {
                    "expected the lock name as a string literal"
                },
            )
        })?;
        if let Some(first) = names.iter().find(|n| n.value() == lit.value()) {
            let mut err = syn::Error::new(lit.span(), format!("lock name {:?} given twice", lit.value()));
            err.combine(syn::Error::new(first.span(), "first given here"));
            return Err(err);
        }
        names.push(lit);
        if !(input.peek(Token![,]) && input.peek2(LitStr)) {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    names.into_iter().map(Template::parse).collect()
}

/// `crate = zk`, `crate = ::my_app::zklock` or, as in serde, `crate = "my_app::zklock"`.
fn parse_crate_path(input: ParseStream<'_>) -> syn::Result<Path> {
    const USAGE: &str = "`crate` takes the path of the zklock crate, as in `crate = zk` or `crate = my_app::zklock`";
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        return lit
            .parse_with(Path::parse_mod_style)
            .map_err(|_| syn::Error::new(lit.span(), USAGE));
    }
    input
        .call(Path::parse_mod_style)
        .map_err(|e| syn::Error::new(e.span(), USAGE))
}

fn expect_str(input: ParseStream<'_>, key: &str, example: &str) -> syn::Result<LitStr> {
    input.parse::<LitStr>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("`{key}` takes a string literal, as in `{key} = {example}`"),
        )
    })
}

fn parse_timeout(lit: &LitStr) -> syn::Result<TimeoutArg> {
    let value = lit.value();
    if value.trim() == "forever" {
        return Ok(TimeoutArg::Forever);
    }
    if !value.is_empty() && !value.contains(|c: char| c.is_ascii_digit()) {
        // A word, such as "never" or "infinite".
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "bad timeout {value:?}: write a duration such as \"500ms\", \"10s\" or \"1m30s\", \
                 or \"forever\" to wait without a limit"
            ),
        ));
    }
    parse_duration(&value)
        .map(TimeoutArg::After)
        .map_err(|why| syn::Error::new(lit.span(), format!("bad timeout {value:?}: {why}")))
}

/// The value `lit` names of an option with two choices, the first its default; otherwise an
/// error on `lit` that names both.
fn either<T>(lit: &LitStr, option: &str, default: (&str, T), other: (&str, T)) -> syn::Result<T> {
    match lit.value().as_str() {
        value if value == default.0 => Ok(default.1),
        value if value == other.0 => Ok(other.1),
        value => Err(syn::Error::new(
            lit.span(),
            format!(
                "unknown {option} {value:?}; expected {:?} (the default) or {:?}",
                default.0, other.0
            ),
        )),
    }
}

fn parse_max_hold(lit: &LitStr) -> syn::Result<Duration> {
    let value = lit.value();
    let refuse = |why: String| Err(syn::Error::new(lit.span(), why));
    if !value.contains(|c: char| c.is_ascii_digit()) {
        // A word, such as "forever" or "none".
        return refuse(format!(
            "bad max_hold {value:?}: write a duration such as \"30s\" or \"5m\"; leave `max_hold` out for no bound"
        ));
    }
    match parse_duration(&value) {
        Ok(d) if d.is_zero() => refuse("`max_hold` must be longer than zero; leave it out for no bound".into()),
        Ok(d) => Ok(d),
        Err(why) => refuse(format!("bad max_hold {value:?}: {why}")),
    }
}

/// The longest `lock_delay` and `min_hold` (as the runtime's `Lock::with_lock_delay` and
/// `Lock::with_min_hold` accept).
const MAX_UP_TO_AN_HOUR: Duration = Duration::from_secs(3600);

/// The duration of option `option` (`lock_delay`, `min_hold`): more than zero, at most an hour.
fn parse_up_to_an_hour(lit: &LitStr, option: &str) -> syn::Result<Duration> {
    let value = lit.value();
    let refuse = |why: String| Err(syn::Error::new(lit.span(), why));
    match parse_duration(&value) {
        Ok(d) if d.is_zero() => refuse(format!("`{option}` must be longer than zero; leave it out for none")),
        Ok(d) if d > MAX_UP_TO_AN_HOUR => refuse(format!("`{option}` {value:?} is over the limit of one hour")),
        Ok(d) => Ok(d),
        Err(why) => refuse(format!("bad {option} {value:?}: {why}")),
    }
}

/// The linger of `cache = …`: at most an hour; zero turns the client's default off.
fn parse_linger(lit: &LitStr) -> syn::Result<Duration> {
    let value = lit.value();
    let refuse = |why: String| Err(syn::Error::new(lit.span(), why));
    match parse_duration(&value) {
        Ok(d) if d > MAX_UP_TO_AN_HOUR => refuse(format!("`cache` {value:?} is over the limit of one hour")),
        Ok(d) => Ok(d),
        Err(why) => refuse(format!("bad cache {value:?}: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(tokens: proc_macro2::TokenStream) -> syn::Result<LockArgs> {
        syn::parse2(tokens)
    }

    fn err(tokens: proc_macro2::TokenStream) -> String {
        match parse(tokens) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn defaults() {
        let args = parse(quote::quote!("jobs")).unwrap();
        assert_eq!(args.timeout, TimeoutArg::Default);
        assert_eq!(args.mode, ModeArg::Mutex);
        assert_eq!(args.on_lost, OnLostArg::Abort);
        assert_eq!(args.on_revoke, OnRevokeArg::Continue);
        assert!(args.client.is_none() && args.token.is_none() && args.krate.is_none());
        assert_eq!(args.max_hold, None);
        assert_eq!(args.names.len(), 1);
    }

    #[test]
    fn every_option() {
        let args = parse(quote::quote!(
            "inventory:{sku}",
            timeout = "500ms",
            mode = "semaphore",
            leases = 3,
            client = self.locks.clone(),
            on_lost = "continue",
            max_hold = "1m30s",
            token = fence,
        ))
        .unwrap();
        assert_eq!(args.max_hold, Some(Duration::from_secs(90)));
        assert_eq!(args.timeout, TimeoutArg::After(Duration::from_millis(500)));
        assert_eq!(args.mode, ModeArg::Semaphore(3));
        assert_eq!(args.on_lost, OnLostArg::Continue);
        assert_eq!(args.token.unwrap().to_string(), "fence");
        assert!(args.client.is_some());
        assert_eq!(parse(quote::quote!("a", mode = "read")).unwrap().mode, ModeArg::Read);
        assert_eq!(parse(quote::quote!("a", mode = "write")).unwrap().mode, ModeArg::Write);
        assert_eq!(
            parse(quote::quote!("a", timeout = "0s")).unwrap().timeout,
            TimeoutArg::After(Duration::ZERO)
        );
        assert_eq!(
            parse(quote::quote!("a", timeout = "forever")).unwrap().timeout,
            TimeoutArg::Forever
        );
    }

    #[test]
    fn misuse() {
        assert!(err(quote::quote!()).contains("needs a lock name"));
        assert!(err(quote::quote!(timeout = "1s")).contains("string literal first"));
        assert!(err(quote::quote!("a", retries = 3)).contains("unknown option `retries`"));
        assert!(err(quote::quote!("a", timeout = "1s", timeout = "2s")).contains("duplicate option `timeout`"));
        assert!(err(quote::quote!("a", timeout = "soon")).contains("bad timeout"));
        assert!(err(quote::quote!("a", timeout = 10)).contains("takes a string literal"));
        assert!(err(quote::quote!("a", mode = "exclusive")).contains("unknown mode"));
        assert!(err(quote::quote!("a", mode = "semaphore")).contains("leases = N"));
        assert!(err(quote::quote!("a", leases = 2)).contains("only to mode"));
        assert!(err(quote::quote!("a", mode = "semaphore", leases = 0)).contains("from 1"));
        assert!(err(quote::quote!("a", on_lost = "ignore")).contains("unknown on_lost"));
        assert!(err(quote::quote!("a", on_revoke = "ignore")).contains("unknown on_revoke"));
        assert!(err(quote::quote!("a", on_revoke = abort)).contains("takes a string literal"));
        assert!(err(quote::quote!("a", token = "t")).contains("name of a binding"));
        assert!(err(quote::quote!("")).contains("empty"));
        assert!(err(quote::quote!("a", timeout = "never")).contains("\"forever\""));
        assert!(err(quote::quote!("a", "a")).contains("given twice"));
        assert!(err(quote::quote!("a", "b", token = t)).contains("locks several names"));
        assert!(err(quote::quote!("a", max_hold = "0s")).contains("longer than zero"));
        assert!(err(quote::quote!("a", max_hold = "forever")).contains("bad max_hold"));
        assert!(err(quote::quote!("a", max_hold = 30)).contains("takes a string literal"));
        assert!(err(quote::quote!("a", lock_delay = "0s")).contains("longer than zero"));
        assert!(err(quote::quote!("a", lock_delay = "2h")).contains("over the limit"));
        assert!(err(quote::quote!("a", lock_delay = "soon")).contains("bad lock_delay"));
        assert!(err(quote::quote!("a", min_hold = "0s")).contains("`min_hold` must be longer than zero"));
        assert!(err(quote::quote!("a", min_hold = "2h")).contains("`min_hold` \"2h\" is over the limit"));
        assert!(err(quote::quote!("a", min_hold = "soon")).contains("bad min_hold"));
        assert!(err(quote::quote!("a", cache = "2h")).contains("`cache` \"2h\" is over the limit"));
        assert!(err(quote::quote!("a", cache = "soon")).contains("bad cache"));
        assert!(
            err(quote::quote!("a", mode = "read", cache = "5s")).contains("only mutexes and write locks are cached")
        );
        assert!(err(quote::quote!("a", mode = "semaphore", leases = 2, cache = "5s")).contains("`cache` needs mode"));
        assert_eq!(
            parse(quote::quote!("a", cache = "0s")).unwrap().cache,
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse(quote::quote!("a", mode = "write", cache = "5s")).unwrap().cache,
            Some(Duration::from_secs(5))
        );
        assert!(err(quote::quote!("a", mode = "semaphore", leases = 2, lock_delay = "1s")).contains("no `lock_delay`"));
        assert!(err(quote::quote!("a", crate = 3)).contains("path of the zklock crate"));
        assert!(err(quote::quote!("a", crate = "not a path")).contains("path of the zklock crate"));
    }

    #[test]
    fn several_names() {
        let args = parse(quote::quote!("account:{from}", "account:{to}", timeout = "5s")).unwrap();
        let names: Vec<String> = args.names.iter().map(|n| n.lit.value()).collect();
        assert_eq!(names, ["account:{from}", "account:{to}"]);
        assert_eq!(args.timeout, TimeoutArg::After(Duration::from_secs(5)));
    }

    #[test]
    fn crate_path() {
        let path = |tokens| parse(tokens).unwrap().krate.unwrap();
        let shown = |p: Path| quote::quote!(#p).to_string();
        assert_eq!(shown(path(quote::quote!("a", crate = zk))), "zk");
        assert_eq!(
            shown(path(quote::quote!("a", crate = ::app::locks::zklock))),
            ":: app :: locks :: zklock"
        );
        assert_eq!(shown(path(quote::quote!("a", crate = "app::zklock"))), "app :: zklock");
    }
}
