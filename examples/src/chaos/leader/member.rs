//! A member process of the leader workload: serves the election and, while leading, writes to
//! the fenced register with the term's token.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use zklock::{Election, LeaderService, Leading, LockClient, LossSignal, ServeOptions};

use super::{
    participant, token_of, BoxError, Said, TermEnd, GROUP, HANDOVER_GRACE, LATE_FOR, LINE_PREFIX, MEMBER_ENV,
    NAMESPACE, WRITE_EVERY,
};
use crate::chaos::clock::now_ns;
use crate::chaos::history::{Part, Token};
use crate::chaos::register;

fn say(said: &Said) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{LINE_PREFIX}{}", serde_json::to_string(said).unwrap_or_default());
    let _ = out.flush();
}

/// What every term of a member process shares.
struct Ctx {
    member: usize,
    life: usize,
    register: String,
    late_percent: u32,
    seed: u64,
    terms: AtomicU64,
    /// Set once the process winds down: no late writers then.
    stopping: AtomicBool,
}

/// A connection to the register that reconnects as needed.
struct RegisterWriter {
    ctx: Arc<Ctx>,
    writer: register::Writer,
}

impl RegisterWriter {
    fn new(ctx: Arc<Ctx>) -> RegisterWriter {
        let writer = register::Writer::new(ctx.register.clone());
        RegisterWriter { ctx, writer }
    }

    /// One fenced write; true when accepted.
    async fn write(&mut self, kind: &str, token: Token) -> bool {
        let part = Part {
            lock: GROUP.into(),
            token,
        };
        let participant = participant(self.ctx.member);
        match self.writer.try_write(kind, &participant, &part, None).await {
            Some(accepted) => accepted,
            None => {
                eprintln!("chaos leader member {}: the register is unreachable", self.ctx.member);
                false
            }
        }
    }
}

/// A term as its member reports it: `Gained` when made, `Ended` when ended or dropped (the
/// body is dropped when the term is lost).
struct TermReport {
    ctx: Arc<Ctx>,
    term: u64,
    token: Token,
    loss: LossSignal,
    ended: bool,
}

impl TermReport {
    fn gained(ctx: Arc<Ctx>, token: Token, loss: LossSignal) -> TermReport {
        let term = ctx.terms.fetch_add(1, Ordering::SeqCst) + 1;
        say(&Said::Gained {
            member: ctx.member,
            life: ctx.life,
            term,
            token,
            at_ns: now_ns(),
        });
        TermReport {
            ctx,
            term,
            token,
            loss,
            ended: false,
        }
    }

    fn end(&mut self, end: TermEnd) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        say(&Said::Ended {
            member: self.ctx.member,
            life: self.ctx.life,
            term: self.term,
            at_ns: now_ns(),
            end,
        });
        // Some terms leave a writer behind, as a leader whose worker was not stopped would.
        let roll = self
            .ctx
            .seed
            .wrapping_add(self.term.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .wrapping_mul(0x2545_F491_4F6C_DD1D)
            >> 33;
        let late = roll % 100 < u64::from(self.ctx.late_percent);
        if late && !self.ctx.stopping.load(Ordering::SeqCst) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(write_late(self.ctx.clone(), self.token));
            }
        }
    }
}

impl Drop for TermReport {
    fn drop(&mut self) {
        let end = if self.loss.is_lost() {
            TermEnd::Lost
        } else {
            TermEnd::Dropped
        };
        self.end(end);
    }
}

async fn write_late(ctx: Arc<Ctx>, token: Token) {
    let mut writer = RegisterWriter::new(ctx);
    let until = Instant::now() + LATE_FOR;
    while Instant::now() < until {
        writer.write("late", token).await;
        tokio::time::sleep(WRITE_EVERY).await;
    }
}

/// The leader body: a `claim`, a `write` every 50 ms, a `done` when asked to hand over.
async fn lead(ctx: Arc<Ctx>, mut leading: Leading) {
    let token = token_of(leading.fencing_token());
    let mut term = TermReport::gained(ctx.clone(), token, leading.loss_signal());
    let mut writer = RegisterWriter::new(ctx);
    writer.write("claim", token).await;
    loop {
        tokio::select! {
            () = leading.handing_over() => {
                writer.write("done", token).await;
                term.end(TermEnd::HandedOver);
                return;
            }
            () = tokio::time::sleep(WRITE_EVERY) => {
                writer.write("write", token).await;
            }
        }
    }
}

fn serve(election: &Election, ctx: &Arc<Ctx>) -> Result<LeaderService, zklock::LockError> {
    let ctx = ctx.clone();
    let options = ServeOptions::default().backoff(Duration::from_millis(100), Duration::from_secs(2));
    election.serve_with(options, move |leading| lead(ctx.clone(), leading))
}

/// A member process: serves the election until its stdin closes. A `shutdown` line shuts the
/// service down gracefully and starts it again (the member joins at the back).
pub fn member_main_from_env() -> i32 {
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let member: usize = env(MEMBER_ENV).parse().unwrap_or(0);
    let ctx = Arc::new(Ctx {
        member,
        life: env("ZKLOCK_CHAOS_LEADER_LIFE").parse().unwrap_or(0),
        register: env("ZKLOCK_CHAOS_LEADER_REGISTER"),
        late_percent: env("ZKLOCK_CHAOS_LEADER_LATE_PERCENT").parse().unwrap_or(0),
        seed: env("ZKLOCK_CHAOS_LEADER_SEED").parse().unwrap_or(0),
        terms: AtomicU64::new(0),
        stopping: AtomicBool::new(false),
    });
    let connect = env("ZKLOCK_CHAOS_LEADER_CONNECT");
    let session = Duration::from_millis(env("ZKLOCK_CHAOS_LEADER_SESSION_MS").parse().unwrap_or(4000));
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("chaos leader member {member}: {e}");
            return 2;
        }
    };
    let outcome: Result<(), BoxError> = rt.block_on(async {
        let client = LockClient::builder(&connect)
            .session_timeout(session)
            .namespace(NAMESPACE)
            .identity(participant(member))
            .connect()
            .await?;
        let election = client.election(GROUP)?.with_participant_id(participant(member))?;
        let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
        thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { return };
                if lines_tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut service = Some(serve(&election, &ctx)?);
        say(&Said::Ready { member, life: ctx.life });
        while let Some(line) = lines.recv().await {
            if line.trim() != "shutdown" {
                continue;
            }
            let called_ns = now_ns();
            if let Some(s) = service.take() {
                s.shutdown(HANDOVER_GRACE).await;
            }
            say(&Said::HandedOver {
                member,
                life: ctx.life,
                called_ns,
                returned_ns: now_ns(),
            });
            service = Some(serve(&election, &ctx)?);
        }
        ctx.stopping.store(true, Ordering::SeqCst);
        if let Some(s) = service.take() {
            s.shutdown(HANDOVER_GRACE).await;
        }
        client.close().await;
        Ok(())
    });
    match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("chaos leader member {member}: {e}");
            2
        }
    }
}
