//! The checks' rules on numbers and answers, without a server (the tests against real servers
//! are in zklock-cli/tests/doctor.rs).

use std::time::Duration;

use zklock_runtime::zk;

use super::output::Status;
use super::server::{self, classify_version, AclFinding};
use super::timing::{self, ClockSample, ServerTiming, Session};
use super::words::{Address, Answer, Probe};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn session(asked: u64, granted: u64) -> Session {
    Session {
        asked: ms(asked),
        granted: ms(granted),
        loss_after: ms(granted / 4),
    }
}

/// What the servers' `conf` says: a tick, and for an ensemble member a syncLimit.
fn servers(tick: u64, sync_limit: Option<u64>) -> ServerTiming {
    ServerTiming {
        tick: Some(ms(tick)),
        min_session: Some(ms(tick * 2)),
        max_session: Some(ms(tick * 20)),
        standalone: sync_limit.is_none(),
        follower_cutoff: sync_limit.map(|n| ms(tick * n)),
        unread: Vec::new(),
    }
}

fn unread() -> ServerTiming {
    ServerTiming {
        unread: vec!["zk1:2181 (not in 4lw.commands.whitelist)".into()],
        ..ServerTiming::default()
    }
}

#[test]
fn the_session_timeout_fails_under_two_ticks_and_warns_when_capped() {
    let ok = timing::session_timeout(Some(&session(4_000, 4_000)), &servers(200, None));
    assert_eq!(ok.status, Status::Pass, "{ok:?}");
    assert!(ok.found.contains("told of the loss 2s 600ms"), "{}", ok.found);
    let capped = timing::session_timeout(Some(&session(30_000, 4_000)), &servers(200, None));
    assert_eq!(capped.status, Status::Warn);
    assert!(capped.advice.unwrap().contains("maxSessionTimeout"));
    let raised = timing::session_timeout(Some(&session(100, 400)), &servers(200, None));
    assert_eq!(raised.status, Status::Pass);
    assert!(raised.found.contains("raised"), "{}", raised.found);
    let short = timing::session_timeout(Some(&session(4_000, 1_000)), &servers(1_000, None));
    assert_eq!(short.status, Status::Fail, "{short:?}");
    assert!(short.advice.unwrap().contains("minSessionTimeout"));
    let blind = timing::session_timeout(Some(&session(4_000, 4_000)), &unread());
    assert_eq!(blind.status, Status::Warn);
    assert!(blind.found.contains("could not read"));
    assert_eq!(timing::session_timeout(None, &servers(200, None)).status, Status::Warn);
}

#[test]
fn sync_limit_times_tick_is_held_against_the_loss_timing_precondition() {
    // ZooKeeper's defaults (tick 2 s, syncLimit 5) and zklock's (30 s): docs/safety.md's example.
    assert_eq!(
        timing::sync_limit(Some(&session(30_000, 30_000)), &servers(2_000, Some(5))).status,
        Status::Pass
    );
    // The test ensembles: 1 s against 4 s sessions.
    assert_eq!(
        timing::sync_limit(Some(&session(4_000, 4_000)), &servers(200, Some(5))).status,
        Status::Pass
    );
    // 2 s: longer than the 1.6 s in which a client notices silence itself.
    let thin = timing::sync_limit(Some(&session(4_000, 4_000)), &servers(200, Some(10)));
    assert_eq!(thin.status, Status::Warn, "{thin:?}");
    // 3 s + loss_after 1 s reaches the 4 s expiry.
    let broken = timing::sync_limit(Some(&session(4_000, 4_000)), &servers(200, Some(15)));
    assert_eq!(broken.status, Status::Fail, "{broken:?}");
    assert!(broken.advice.unwrap().contains("precondition"));
    assert_eq!(
        timing::sync_limit(Some(&session(4_000, 4_000)), &servers(200, None)).status,
        Status::Pass
    );
    assert_eq!(
        timing::sync_limit(Some(&session(4_000, 4_000)), &unread()).status,
        Status::Warn
    );
}

#[test]
fn the_lock_delay_must_outlast_what_an_old_holder_may_still_believe() {
    let s = session(4_000, 4_000);
    let standalone = servers(200, None);
    assert_eq!(
        timing::lock_delay(None, Some(&s), &standalone, None).status,
        Status::Pass
    );
    // A deleted node is told within 100 ms and a round trip.
    let short = timing::lock_delay(Some(ms(50)), Some(&s), &standalone, Some(ms(2)));
    assert_eq!(short.status, Status::Fail, "{short:?}");
    assert!(short.advice.unwrap().contains("102ms"));
    assert_eq!(
        timing::lock_delay(Some(ms(200)), Some(&s), &standalone, Some(ms(2))).status,
        Status::Pass
    );
    // A cut-off follower holding the silence for 5 s: told 2 s after a 4 s session expired.
    let slow = servers(200, Some(25));
    assert_eq!(
        timing::lock_delay(Some(ms(1_000)), Some(&s), &slow, None).status,
        Status::Fail
    );
    assert_eq!(
        timing::lock_delay(Some(ms(3_000)), Some(&s), &slow, None).status,
        Status::Pass
    );
    // Without the servers' settings only the deleted-node case is known.
    assert_eq!(
        timing::lock_delay(Some(ms(3_000)), Some(&s), &unread(), None).status,
        Status::Warn
    );
}

#[test]
fn clocks_warn_past_half_a_second_and_fail_past_thirty() {
    let at = |offset_ms, rtt_ms| timing::clock(Ok(ClockSample { offset_ms, rtt_ms })).status;
    assert_eq!(at(3, 2), Status::Pass);
    assert_eq!(at(-800, 2), Status::Warn);
    assert_eq!(at(40_000, 2), Status::Fail);
    assert_eq!(at(-40_000, 2), Status::Fail);
    // 600 ms measured over a 400 ms round trip proves only 400 ms.
    assert_eq!(at(600, 400), Status::Pass);
    // A round trip too slow to tell.
    assert_eq!(at(0, 2_000), Status::Warn);
    assert_eq!(timing::clock(Err("no session".into())).status, Status::Warn);
    let text = timing::clock(Ok(ClockSample {
        offset_ms: -800,
        rtt_ms: 2,
    }))
    .found;
    assert!(text.contains("800 ms behind"), "{text}");
}

#[test]
fn versions_without_the_ephemeral_fix_fail_and_end_of_life_lines_warn() {
    for (version, status) in [
        ("3.8.0-${mvngit.commit.id}", Status::Pass),
        ("3.8.4", Status::Pass),
        ("3.9.2", Status::Pass),
        ("3.10.0", Status::Pass),
        ("4.0.0", Status::Pass),
        ("3.7.2", Status::Warn),
        ("3.6.4", Status::Warn),
        ("3.5.10", Status::Warn),
        ("3.5.4-beta", Status::Warn),
        ("3.5.3-beta", Status::Fail),
        ("3.4.14-4c25d480e66aadd371de8bd2fd8da255ac140bcf", Status::Warn),
        ("3.4.11", Status::Warn),
        ("3.4.10", Status::Fail),
        ("3.3.6", Status::Fail),
        ("unknown", Status::Warn),
    ] {
        let (got, why) = classify_version(version);
        assert_eq!(got, status, "{version}: {why}");
        if status == Status::Fail {
            assert!(why.contains("ZOOKEEPER-2355"), "{why}");
        }
    }
}

fn probe(conf: Answer) -> Probe {
    Probe {
        address: Address {
            host: "zk1".into(),
            port: 2181,
        },
        ruok: Answer::Text("imok".into()),
        srvr: Answer::Text("Zookeeper version: 3.8.4-abc, built on x\nMode: standalone\n".into()),
        conf,
    }
}

#[test]
fn four_letter_words_that_go_unanswered_warn_and_say_why() {
    let all = server::four_letter_words(&[probe(Answer::Text("tickTime=200\n".into()))]);
    assert_eq!(all.status, Status::Pass, "{all:?}");
    let refused = server::four_letter_words(&[probe(Answer::NotAllowed)]);
    assert_eq!(refused.status, Status::Warn);
    assert!(refused.advice.unwrap().contains("4lw.commands.whitelist"));
    let silent = server::four_letter_words(&[Probe::unanswered(
        probe(Answer::NotAllowed).address,
        "no answer within 5s".into(),
    )]);
    assert_eq!(silent.status, Status::Warn);
    assert!(silent.advice.unwrap().contains("TLS-only"));
    let mut unwell = probe(Answer::Text("tickTime=200\n".into()));
    unwell.ruok = Answer::Text("This ZooKeeper instance is not currently serving requests".into());
    let check = server::four_letter_words(&[unwell]);
    assert_eq!(check.status, Status::Warn);
    assert!(check.advice.unwrap().contains("not serving"));
    // The version still comes from srvr; the timing checks say conf was not read.
    assert_eq!(server::version(&[probe(Answer::NotAllowed)]).status, Status::Pass);
    let timing = ServerTiming::from_probes(&[probe(Answer::NotAllowed)]);
    assert!(timing.standalone && timing.tick.is_none(), "{timing:?}");
    // srvr alone says there is no follower; conf alone holds the tick.
    let s = session(4_000, 4_000);
    assert_eq!(timing::sync_limit(Some(&s), &timing).status, Status::Pass);
    assert_eq!(timing::session_timeout(Some(&s), &timing).status, Status::Warn);
}

#[test]
fn a_namespace_anyone_may_delete_under_warns() {
    let open = AclFinding::Found {
        path: "/zklock".into(),
        acls: zk::Acls::anyone_all().to_vec(),
    };
    let check = server::namespace_acl(&open);
    assert_eq!(check.status, Status::Warn);
    assert!(check.found.contains("world:anyone:cdrwa"), "{}", check.found);
    let restricted = AclFinding::Found {
        path: "/zklock".into(),
        acls: vec![
            zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("sasl", "orders")),
            zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
        ],
    };
    let check = server::namespace_acl(&restricted);
    assert_eq!(check.status, Status::Pass);
    assert!(
        check.found.contains("sasl:orders:cdrwa, world:anyone:r"),
        "{}",
        check.found
    );
    let missing = AclFinding::Missing {
        path: "/zklock".into(),
        ancestor: "/".into(),
        acls: zk::Acls::anyone_all().to_vec(),
    };
    assert_eq!(server::namespace_acl(&missing).status, Status::Warn);
    let closed = AclFinding::Unreadable {
        path: "/zklock".into(),
        error: zk::Error::NoAuth,
    };
    assert_eq!(server::namespace_acl(&closed).status, Status::Pass);
    let lost = AclFinding::Unreadable {
        path: "/zklock".into(),
        error: zk::Error::ConnectionLoss,
    };
    assert_eq!(server::namespace_acl(&lost).status, Status::Warn);
}

#[test]
fn a_remote_ensemble_without_tls_or_sasl_warns() {
    let hosts = |names: &[&str]| -> Vec<Address> {
        names
            .iter()
            .map(|h| Address {
                host: (*h).into(),
                port: 2181,
            })
            .collect()
    };
    let local = hosts(&["127.0.0.1", "localhost", "::1", "::ffff:127.0.0.1"]);
    assert_eq!(server::transport(false, false, false, &local).status, Status::Pass);
    let remote = hosts(&["127.0.0.1", "zk1.example.com"]);
    let check = server::transport(false, false, true, &remote);
    assert_eq!(check.status, Status::Warn);
    assert!(
        check.found.contains("zk1.example.com:2181") && check.found.contains("digest"),
        "{}",
        check.found
    );
    assert_eq!(server::transport(true, false, false, &remote).status, Status::Pass);
    assert_eq!(server::transport(false, true, false, &remote).status, Status::Pass);
}
