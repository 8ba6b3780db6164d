//! The guarded resource: a fenced register served over TCP by the runner.
//!
//! Protocol, one line each way: `<kind> <client> <lock> <zxid> <generation>` →
//! `ok` or `reject`. The register keeps one slot per lock name. A write is accepted when its
//! token is at least the highest token accepted so far for its lock (equal only happens for
//! the holder that wrote it), which is exactly the check a fenced `UPDATE … WHERE last_token <=
//! ?` makes. A multi-lock holder's write names a second `<lock> <zxid> <generation>` and is
//! accepted only if both tokens pass (`… WHERE a_token <= ? AND b_token <= ?`). Every attempt
//! is logged with its decision and the time it was decided, under the register's lock, so the
//! log order is the real order.
//!
//! The kinds are the lock workload's `claim`, `write` and `done`, and the leader workload's
//! `late` (a write made with a term's token after the term ended); the register treats them
//! alike.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::clock::now_ns;
use super::history::{Part, Token, WriteRecord};

#[derive(Debug, Default)]
struct State {
    highest: HashMap<String, Token>,
    log: Vec<WriteRecord>,
}

/// The fenced register; stops serving when dropped.
#[derive(Debug)]
pub struct Register {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    shutdown: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Register {
    /// Starts serving on a free loopback port.
    pub fn start() -> std::io::Result<Register> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let shutdown = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let state = state.clone();
            let shutdown = shutdown.clone();
            thread::Builder::new().name("chaos-register".into()).spawn(move || {
                for stream in listener.incoming() {
                    if shutdown.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let state = state.clone();
                    let _ = thread::Builder::new()
                        .name("chaos-register-conn".into())
                        .spawn(move || serve(stream, &state));
                }
            })?
        };
        Ok(Register {
            addr,
            state,
            shutdown,
            acceptor: Some(acceptor),
        })
    }

    /// Where contenders connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The log so far, in decision order.
    pub fn log(&self) -> Vec<WriteRecord> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).log.clone()
    }
}

impl Drop for Register {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(500));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) {
    let Ok(mut out) = stream.try_clone() else { return };
    let reader = BufReader::new(stream);
    for line in reader.lines() {
        let Ok(line) = line else { return };
        let answer = match parse(&line) {
            Some((kind, client, first, second)) => {
                let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
                let parts = std::iter::once(&first).chain(second.as_ref());
                let accepted = parts
                    .clone()
                    .all(|p| state.highest.get(&p.lock).is_none_or(|h| p.token >= *h));
                if accepted {
                    for p in parts {
                        state.highest.insert(p.lock.clone(), p.token);
                    }
                }
                let seq = state.log.len() as u64;
                state.log.push(WriteRecord {
                    seq,
                    at_ns: now_ns(),
                    client: client.to_string(),
                    lock: first.lock,
                    token: first.token,
                    second,
                    kind: kind.to_string(),
                    accepted,
                });
                if accepted {
                    "ok\n"
                } else {
                    "reject\n"
                }
            }
            None => "error bad request\n",
        };
        if out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn parse(line: &str) -> Option<(&str, &str, Part, Option<Part>)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let part = |w: &[&str]| -> Option<Part> {
        Some(Part {
            lock: w[0].to_string(),
            token: Token {
                zxid: w[1].parse().ok()?,
                generation: w[2].parse().ok()?,
            },
        })
    };
    let (kind, client) = (*words.first()?, *words.get(1)?);
    if !matches!(kind, "claim" | "write" | "done" | "late") {
        return None;
    }
    match words.len() {
        5 => Some((kind, client, part(&words[2..5])?, None)),
        8 => Some((kind, client, part(&words[2..5])?, Some(part(&words[5..8])?))),
        _ => None,
    }
}

/// A writer's connection to the register, made on first use and made again after a failure.
#[derive(Debug)]
pub struct Writer {
    addr: String,
    connection: Option<tokio::io::BufReader<tokio::net::TcpStream>>,
}

impl Writer {
    /// A writer to the register at `addr`; nothing is connected yet.
    pub fn new(addr: impl Into<String>) -> Writer {
        Writer {
            addr: addr.into(),
            connection: None,
        }
    }

    /// Sends the fenced write of `client` (see [`request`]) and returns whether the register
    /// accepted it. Panics, naming `client`, when the register stays unreachable (50 tries, at
    /// least 5 s): the run cannot be judged without it.
    pub async fn write(&mut self, kind: &str, client: &str, first: &Part, second: Option<&Part>) -> bool {
        match self.try_write(kind, client, first, second).await {
            Some(accepted) => accepted,
            None => panic!("chaos {client}: the register is unreachable"),
        }
    }

    /// As [`write`](Self::write), but `None` when the register stays unreachable.
    pub async fn try_write(&mut self, kind: &str, client: &str, first: &Part, second: Option<&Part>) -> Option<bool> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

        let line = request(kind, client, first, second);
        for _ in 0..50 {
            if self.connection.is_none() {
                match tokio::net::TcpStream::connect(&self.addr).await {
                    Ok(s) => self.connection = Some(tokio::io::BufReader::new(s)),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
            let conn = self.connection.as_mut().expect("connected above");
            let mut answer = String::new();
            let ok = conn.get_mut().write_all(line.as_bytes()).await.is_ok()
                && conn.read_line(&mut answer).await.map(|n| n > 0).unwrap_or(false);
            if ok {
                return Some(answer.trim() == "ok");
            }
            self.connection = None;
        }
        None
    }
}

/// The request line of a fenced write (see the module docs).
pub fn request(kind: &str, client: &str, first: &Part, second: Option<&Part>) -> String {
    let mut line = format!(
        "{kind} {client} {} {} {}",
        first.lock, first.token.zxid, first.token.generation
    );
    if let Some(p) = second {
        line.push_str(&format!(" {} {} {}", p.lock, p.token.zxid, p.token.generation));
    }
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(lock: &str, zxid: i64) -> Part {
        Part {
            lock: lock.into(),
            token: Token { zxid, generation: 0 },
        }
    }

    #[test]
    fn a_joint_write_passes_only_if_both_tokens_are_current() {
        let register = Register::start().expect("a register");
        let stream = TcpStream::connect(register.addr()).expect("connected");
        let mut out = stream.try_clone().expect("a second handle");
        let mut answers = BufReader::new(stream).lines();
        let mut ask = |line: String| {
            out.write_all(line.as_bytes()).expect("sent");
            answers.next().expect("an answer").expect("readable")
        };
        assert_eq!(ask(request("claim", "a", &part("x", 5), None)), "ok");
        assert_eq!(ask(request("claim", "b", &part("y", 7), None)), "ok");
        // x is current, y is stale: rejected as a whole, and x's slot does not move.
        assert_eq!(ask(request("claim", "m", &part("x", 6), Some(&part("y", 3)))), "reject");
        assert_eq!(ask(request("write", "a", &part("x", 5), None)), "ok");
        assert_eq!(ask(request("claim", "m", &part("x", 6), Some(&part("y", 8)))), "ok");
        assert_eq!(ask(request("write", "a", &part("x", 5), None)), "reject");
        assert_eq!(ask("claim m x 6 0 y\n".into()), "error bad request");
        let log = register.log();
        assert_eq!(log.len(), 6);
        assert_eq!(log[2].second, Some(part("y", 3)));
        assert!(!log[2].accepted);
    }
}
