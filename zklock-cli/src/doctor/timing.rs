//! The timing checks: the session timeout, the servers' `syncLimit × tickTime`, the lock-delay
//! and the clocks, each a function of what was measured (tested on numbers below).

use std::time::Duration;

use super::output::Check;
use super::words::Probe;

/// How long a node must be held before zklock watches it for deletion by someone else
/// (`ARM_AFTER` in zklock-runtime's engine/own_node.rs; docs/safety.md, guarantee 10).
const WATCH_ARMED_AFTER: Duration = Duration::from_millis(100);
/// The scheduler logs a clock off ZooKeeper's by more than this (`CLOCK_SKEW_WARNING`).
const CLOCK_WARN_MS: i64 = 500;
/// Half the servers' default container check interval (60 s): a node whose clock is behind by
/// more than that interval may run a removed job's tick again (docs/scheduler.md, limits).
const CLOCK_FAIL_MS: i64 = 30_000;

/// The session the doctor opened.
#[derive(Debug, Clone, Copy)]
pub struct Session {
    /// What `--session-timeout` asked for (the library's default, 30 s, without it).
    pub asked: Duration,
    /// What the server granted.
    pub granted: Duration,
    /// How long a connection may stay down before holds are reported lost, as in force.
    pub loss_after: Duration,
}

impl Session {
    /// When a holder that noticed a silent connection itself is told of the loss, counted from
    /// the server's last word: the client notices within 2/5 of the timeout, then waits
    /// `loss_after` (docs/safety.md, guarantee 2).
    fn told_after(&self) -> Duration {
        self.granted * 2 / 5 + self.loss_after
    }
}

/// What the servers' `conf` and `srvr` say about timing; the least favourable value when
/// servers differ.
#[derive(Debug, Clone, Default)]
pub struct ServerTiming {
    pub tick: Option<Duration>,
    pub min_session: Option<Duration>,
    pub max_session: Option<Duration>,
    /// Every server that answered `srvr` runs standalone.
    pub standalone: bool,
    /// The longest `syncLimit × tickTime` of a member: how long a follower cut off from its
    /// leader keeps serving its clients.
    pub follower_cutoff: Option<Duration>,
    /// Which servers' `conf` could not be read, and why.
    pub unread: Vec<String>,
}

impl ServerTiming {
    pub fn from_probes(probes: &[Probe]) -> ServerTiming {
        let ms = Duration::from_millis;
        let mut timing = ServerTiming {
            standalone: probes.iter().any(|p| p.mode().is_some())
                && probes.iter().filter_map(Probe::mode).all(|m| m == "standalone"),
            ..ServerTiming::default()
        };
        for probe in probes {
            if probe.conf.text().is_none() {
                timing.unread.push(format!(
                    "{} ({})",
                    probe.address,
                    super::server::why_unanswered(&probe.conf)
                ));
                continue;
            }
            let tick = probe.setting("tickTime").map(ms);
            timing.tick = timing.tick.max(tick);
            timing.min_session = timing.min_session.max(probe.setting("minSessionTimeout").map(ms));
            if let Some(max) = probe.setting("maxSessionTimeout").map(ms) {
                timing.max_session = Some(timing.max_session.map_or(max, |m| m.min(max)));
            }
            if let (Some(tick), Some(limit)) = (tick, probe.setting("syncLimit")) {
                timing.follower_cutoff = timing.follower_cutoff.max(Some(tick * limit as u32));
            }
        }
        timing
    }

    fn could_not_read(&self) -> String {
        format!(
            "could not read the servers' settings: `conf` unanswered by {}",
            self.unread.join(", ")
        )
    }
}

/// A duration as `4s`, `1s 600ms`.
pub fn show(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

/// 1. The negotiated session timeout, against what was asked, the servers' tick and bounds,
///    and the client's loss timing.
pub fn session_timeout(session: Option<&Session>, servers: &ServerTiming) -> Check {
    const NAME: &str = "session-timeout";
    let Some(s) = session else {
        return Check::warn(NAME, "not checked: no session was opened", "see the connection check");
    };
    let mut found = format!(
        "granted {} (asked {}); a holder cut off is told of the loss {} after the server's last word \
         (2/5 of the timeout to notice, then loss_after {}), {} before the session can expire",
        show(s.granted),
        show(s.asked),
        show(s.told_after()),
        show(s.loss_after),
        show(s.granted.saturating_sub(s.told_after())),
    );
    let bounds = [
        ("tickTime", servers.tick),
        ("minSessionTimeout", servers.min_session),
        ("maxSessionTimeout", servers.max_session),
    ];
    let known: Vec<String> = bounds
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={}", v.as_millis())))
        .collect();
    if !known.is_empty() {
        found.push_str(&format!("; servers: {}", known.join(", ")));
    }
    if s.granted > s.asked {
        found.push_str("; raised to the servers' minSessionTimeout");
    }
    let check = if let Some(tick) = servers.tick.filter(|t| s.granted < *t * 2) {
        Check::fail(
            NAME,
            found,
            format!(
                "the timeout is under two ticks ({}), the minimum ZooKeeper's Programmer's Guide states; \
                 the servers schedule expiry in whole ticks, and the client's loss report comes less than \
                 a tick ({} here) before it. Set minSessionTimeout to at least 2 × tickTime on every \
                 server, or lower tickTime, and ask for more with --session-timeout \
                 (LockClientBuilder::session_timeout)",
                show(tick * 2),
                show(s.granted.saturating_sub(s.told_after())),
            ),
        )
    } else if s.granted < s.asked {
        Check::warn(
            NAME,
            found,
            format!(
                "the servers capped the timeout below what was asked (maxSessionTimeout, default 20 × \
                 tickTime): raise maxSessionTimeout to at least {} on every server, or ask for {} so \
                 the timeout you configure is the one in force (loss_after and the lock-delay are \
                 measured against the granted one)",
                show(s.asked),
                show(s.granted),
            ),
        )
    } else {
        Check::pass(NAME, found)
    };
    if servers.tick.is_none() {
        check.at_least_warn(
            &servers.could_not_read(),
            "allow `conf` in 4lw.commands.whitelist to check the timeout against tickTime",
        )
    } else {
        check
    }
}

/// 2. `syncLimit × tickTime` against the session timeout: the loss-timing precondition of
///    docs/safety.md (`session timeout > syncLimit × tickTime + loss_after + margin`).
pub fn sync_limit(session: Option<&Session>, servers: &ServerTiming) -> Check {
    const NAME: &str = "sync-limit";
    let Some(s) = session else {
        return Check::warn(NAME, "not checked: no session was opened", "see the connection check");
    };
    let Some(cutoff) = servers.follower_cutoff else {
        if servers.standalone {
            return Check::pass(
                NAME,
                "standalone server: there is no follower to be cut off from a leader",
            );
        }
        let why = if servers.unread.is_empty() {
            "the servers' `conf` names no syncLimit".to_owned()
        } else {
            servers.could_not_read()
        };
        return Check::warn(
            NAME,
            format!("not checked: {why}"),
            "allow `conf` (and `srvr`) in 4lw.commands.whitelist so syncLimit × tickTime can be checked \
             against the session timeout",
        );
    };
    let told = cutoff + s.loss_after;
    let found = format!(
        "syncLimit × tickTime = {} ({}% of the {} session timeout): a holder on a follower cut off from \
         the quorum is told of the loss {} (that plus loss_after {}) after the quorum last heard of it",
        show(cutoff),
        cutoff.as_millis() * 100 / s.granted.as_millis().max(1),
        show(s.granted),
        show(told),
        show(s.loss_after),
    );
    if told >= s.granted {
        Check::fail(
            NAME,
            format!("{found}, when the session may already have expired and the lock gone to another"),
            format!(
                "the loss-timing precondition (docs/safety.md, guarantee 2) does not hold: lower syncLimit \
                 or tickTime so syncLimit × tickTime + loss_after stays well under {}, or ask for a session \
                 timeout above {} with a margin",
                show(s.granted),
                show(told),
            ),
        )
    } else if cutoff > s.granted * 2 / 5 {
        Check::warn(
            NAME,
            format!("{found}; {} of margin before expiry", show(s.granted - told)),
            format!(
                "a cut-off follower hides the silence for longer than the 2/5 of the timeout ({}) in which \
                 a client notices it itself, so the margin is thin and `zklock exec`'s kill bound \
                 (3/5 of the timeout less loss_after) does not cover it: lower syncLimit × tickTime under {}, \
                 or raise the session timeout above {}",
                show(s.granted * 2 / 5),
                show(s.granted * 2 / 5),
                show(cutoff * 5 / 2),
            ),
        )
    } else {
        Check::pass(
            NAME,
            format!("{found}; {} of margin before expiry", show(s.granted - told)),
        )
    }
}

/// 3. The lock-delay the contenders use (`--lock-delay`): it should outlast the time an old
///    holder may still believe it holds after its node vanished.
pub fn lock_delay(
    delay: Option<Duration>,
    session: Option<&Session>,
    servers: &ServerTiming,
    rtt: Option<Duration>,
) -> Check {
    const NAME: &str = "lock-delay";
    let Some(delay) = delay else {
        return Check::pass(
            NAME,
            "not set (pass --lock-delay D with the delay your contenders use to check it): writes a vanished \
             holder still has in flight are stopped by fencing alone (docs/safety.md, guarantees 4, 12 and 15)",
        );
    };
    let Some(s) = session else {
        return Check::warn(NAME, "not checked: no session was opened", "see the connection check");
    };
    // A node deleted by someone else: the holder hears of it once its watch is armed and the
    // event arrives.
    let deleted = WATCH_ARMED_AFTER + rtt.unwrap_or_default();
    // A session expired while its holder talked to a cut-off follower: it is told only after
    // syncLimit × tickTime + loss_after, which may come after the expiry.
    let expired = servers
        .follower_cutoff
        .map(|cutoff| (cutoff + s.loss_after).saturating_sub(s.granted));
    let reach = deleted.max(expired.unwrap_or_default());
    let mut found = format!(
        "lock-delay {}; an old holder may still think it holds up to {} after its node vanished \
         (a deleted node: the watch is armed after {} and the event takes a round trip{}",
        show(delay),
        show(reach),
        show(WATCH_ARMED_AFTER),
        rtt.map(|r| format!(", {}", show(r))).unwrap_or_default(),
    );
    match expired {
        Some(e) => found.push_str(&format!("; an expired session on a cut-off follower: {})", show(e))),
        None => found.push(')'),
    }
    let check = if delay < reach {
        Check::fail(
            NAME,
            found,
            format!(
                "the delay ends while the old holder may still act: use at least {} (give every contender of \
                 the lock the same value), and fence the resource with the token (docs/safety.md, \
                 guarantee 15)",
                show(reach)
            ),
        )
    } else {
        Check::pass(NAME, found)
    };
    if expired.is_none() && !servers.standalone {
        check.at_least_warn(
            "could not read syncLimit × tickTime: checked against a deleted node only",
            "allow `conf` and `srvr` in 4lw.commands.whitelist so the doctor can read syncLimit",
        )
    } else {
        check
    }
}

/// A clock comparison: ZooKeeper's commit time of a node created by the doctor against this
/// host's clock before and after the create.
#[derive(Debug, Clone, Copy)]
pub struct ClockSample {
    /// ZooKeeper's time less this host's at the middle of the round trip, in ms.
    pub offset_ms: i64,
    /// The round trip of the create, in ms (the offset is known to within half of it).
    pub rtt_ms: i64,
}

/// 4. The clock offset between this host and ZooKeeper (the leader's clock stamps `ctime`).
pub fn clock(sample: Result<ClockSample, String>) -> Check {
    const NAME: &str = "clock";
    let sample = match sample {
        Ok(sample) => sample,
        Err(why) => {
            return Check::warn(
                NAME,
                format!("not measured: {why}"),
                "let the doctor create an ephemeral node under the namespace (or its parent) to compare clocks",
            )
        }
    };
    let half = (sample.rtt_ms + 1) / 2;
    // The smallest offset the measurement proves.
    let proven = (sample.offset_ms.abs() - half).max(0);
    let found = format!(
        "ZooKeeper's clock is {} ms {} this host's (± {half} ms, round trip {} ms)",
        sample.offset_ms.abs(),
        if sample.offset_ms >= 0 { "ahead of" } else { "behind" },
        sample.rtt_ms,
    );
    let sync = "synchronise this host's clock (and the ZooKeeper servers') with NTP";
    if proven > CLOCK_FAIL_MS {
        Check::fail(
            NAME,
            found,
            format!(
                "{sync}: over 30 s off, a scheduler node whose clock is behind comes close to the container \
                 check interval (60 s by default), past which it may run a removed job's tick again \
                 (docs/scheduler.md); lock ages and history times shown are off by as much"
            ),
        )
    } else if proven > CLOCK_WARN_MS {
        Check::warn(
            NAME,
            found,
            format!(
                "{sync}: the scheduler logs a clock off by more than 500 ms, runs ticks early or late by the \
                 offset, and a node more than 1 s ahead takes ticks by ZooKeeper's clock instead of its own \
                 (CLOCK_AHEAD_LIMIT, docs/scheduler.md)"
            ),
        )
    } else if half > CLOCK_WARN_MS {
        Check::warn(
            NAME,
            found,
            "the round trip is too slow to compare the clocks to within 500 ms; run the doctor closer to \
             the servers",
        )
    } else {
        Check::pass(NAME, found)
    }
}
