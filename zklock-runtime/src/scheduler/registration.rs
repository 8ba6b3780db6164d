//! How a job is registered: the schedule, time zone and policy its nodes run it with, kept in
//! the job's `spec` node for operators (`zklock jobs`, [`job_records`](super::job_records)).
//!
//! The newest rollout wins. A node that started after the registration was last written (by
//! ZooKeeper's clock: the first time the node looked, against the `spec` node's `mtime`) and
//! schedules the job differently replaces it: that is a new version of the service rolling
//! out. A node that started before, and differs, is an old one still running: it notes its own
//! registration in `spec-conflict`, an *ephemeral* node, so the note goes when the last such
//! node stops (another one still running notes itself again at its next look). A node looks
//! again every [`RECHECK`], and at once when the job's node was removed.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::control::{JobSpec, SPEC_CONFLICT};
use super::store::{RecordStore, SPEC};
use zookeeper_client as zk;

/// How often a node reads the registration again, to notice a rollout that replaced it (or the
/// end of one). Every beat in tests, so that they need not wait.
const RECHECK: Duration = if cfg!(test) {
    Duration::ZERO
} else {
    Duration::from_secs(30)
};

/// The job being registered, as this node runs it.
pub(crate) struct Job<'a> {
    pub name: &'a str,
    /// How this node schedules it.
    pub spec: &'a JobSpec,
    pub store: &'a RecordStore,
    /// This node's ZooKeeper session, which owns the note it leaves.
    pub session_id: Option<i64>,
}

/// What this node knows of the job's registration.
#[derive(Debug, Default)]
pub(crate) struct Registration {
    /// When this node first looked, by ZooKeeper's clock (ms since the Unix epoch): set once,
    /// at the first look after the session learnt that clock (or by the registration it wrote).
    since_ms: Option<i64>,
    /// When the registration was last settled, by this process's clock.
    settled_at: Option<Instant>,
    /// Whether the warning about a differing registration was given.
    warned: bool,
}

impl Registration {
    /// Whether to look at the registration now: never settled, settled [`RECHECK`] ago, or the
    /// job's node was last listed without its `spec` child (removed by an operator).
    pub fn due(&self, has_spec: bool) -> bool {
        match self.settled_at {
            None => true,
            Some(at) => at.elapsed() >= RECHECK || !has_spec,
        }
    }

    /// Writes how this node schedules the job if nobody did, or if this node started after the
    /// registration was written and schedules it differently; otherwise notes a differing
    /// registration beside it. `server_now_ms` is ZooKeeper's clock as the session last learnt
    /// it: a node that does not know it yet can only register a job nobody registered.
    pub async fn settle(&mut self, job: &Job<'_>, zk: &zk::Client, acls: zk::Acls<'_>, server_now_ms: Option<i64>) {
        self.since_ms = self.since_ms.or(server_now_ms);
        if self.look(job, zk, acls).await {
            self.settled_at = Some(Instant::now());
        }
    }

    /// One look; whether it settled the registration (else it is tried again at the next beat).
    async fn look(&mut self, job: &Job<'_>, zk: &zk::Client, acls: zk::Acls<'_>) -> bool {
        let Ok(ours) = serde_json::to_vec(job.spec) else {
            return true;
        };
        let path = job.store.child(SPEC);
        let persistent = zk::CreateMode::Persistent.with_acls(acls);
        match zk.create(&path, &ours, &persistent).await {
            Ok((stat, _)) => {
                // The first to register: it started when it wrote this, whatever it looks at later.
                self.since_ms = self.since_ms.or(Some(stat.mtime));
                return withdraw_conflict(job, zk).await;
            }
            Err(zk::Error::NodeExists) => {}
            Err(_) => return false,
        }
        let Ok((data, stat)) = zk.get_data(&path).await else {
            return false;
        };
        let registered = serde_json::from_slice::<JobSpec>(&data).ok();
        if registered.as_ref().is_some_and(|r| r.agrees_with(job.spec)) {
            return withdraw_conflict(job, zk).await;
        }
        let Some(since) = self.since_ms else {
            // Which of the two is newer is told by ZooKeeper's clock, which this session has
            // not seen yet (it has written nothing): at a later beat.
            return false;
        };
        if since > stat.mtime {
            // Started after the registration was written: a rollout. Ours replaces it; the
            // nodes of the old one note theirs at their next look.
            return match zk.set_data(&path, &ours, Some(stat.version)).await {
                Ok(_) => {
                    info!(target: "zklock::scheduler", job = %job.name,
                        here = %format!("{} in {} ({})", job.spec.schedule, job.spec.time_zone, job.spec.policy),
                        "this node started after the job was registered differently; its registration replaces the old one");
                    withdraw_conflict(job, zk).await
                }
                // Written meanwhile: look again at the next beat.
                Err(_) => false,
            };
        }
        if !self.warned {
            self.warned = true;
            let registered = registered.map_or_else(
                || "an unreadable registration".to_owned(),
                |r| format!("{} in {} ({}) by {}", r.schedule, r.time_zone, r.policy, r.node),
            );
            warn!(target: "zklock::scheduler", job = %job.name, %registered,
                here = %format!("{} in {} ({})", job.spec.schedule, job.spec.time_zone, job.spec.policy),
                "a node that started later registered this job differently; both run, each on its own ticks (align the nodes)");
        }
        note_conflict(job, zk, acls, &ours).await
    }
}

/// Notes this node's differing registration in `spec-conflict`, ephemeral, unless another
/// node's note is there (one is enough). A persistent note (left by an earlier version) is
/// replaced.
async fn note_conflict(job: &Job<'_>, zk: &zk::Client, acls: zk::Acls<'_>, ours: &[u8]) -> bool {
    let path = job.store.child(SPEC_CONFLICT);
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(acls);
    for _ in 0..2 {
        match zk.create(&path, ours, &ephemeral).await {
            Ok(_) => return true,
            Err(zk::Error::NodeExists) => match zk.check_stat(&path).await {
                Ok(Some(stat)) if stat.ephemeral_owner == 0 => {
                    let _ = zk.delete(&path, Some(stat.version)).await;
                }
                Ok(Some(_)) => return true,
                Ok(None) => {}
                Err(_) => return false,
            },
            Err(err) => {
                debug!(target: "zklock::scheduler", job = %job.name, error = %err, "could not note the differing registration");
                return false;
            }
        }
    }
    false
}

/// Deletes this node's own note of a differing registration, if it left one: its registration
/// agrees (again) with the registered one.
async fn withdraw_conflict(job: &Job<'_>, zk: &zk::Client) -> bool {
    let path = job.store.child(SPEC_CONFLICT);
    match zk.check_stat(&path).await {
        Ok(Some(stat)) if Some(stat.ephemeral_owner) == job.session_id => {
            matches!(
                zk.delete(&path, Some(stat.version)).await,
                Ok(()) | Err(zk::Error::NoNode)
            )
        }
        Ok(_) => true,
        Err(_) => false,
    }
}
