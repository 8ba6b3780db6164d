//! The guarded resource: a fenced register served over TCP by the runner.
//!
//! Protocol, one line each way: `<kind> <client> <zxid> <generation>` →
//! `ok` or `reject`. A write is accepted when its token is at least the highest token accepted
//! so far (equal only happens for the holder that wrote it), which is exactly the check a
//! fenced `UPDATE … WHERE last_token <= ?` makes. Every attempt is logged with its decision and
//! the time it was decided, under the register's lock, so the log order is the real order.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::clock::now_ns;
use super::history::{Token, WriteRecord};

#[derive(Debug, Default)]
struct State {
    highest: Option<Token>,
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
            Some((kind, client, token)) => {
                let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
                let accepted = state.highest.map_or(true, |h| token >= h);
                if accepted {
                    state.highest = Some(token);
                }
                let seq = state.log.len() as u64;
                state.log.push(WriteRecord {
                    seq,
                    at_ns: now_ns(),
                    client: client.to_string(),
                    token,
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

fn parse(line: &str) -> Option<(&str, &str, Token)> {
    let mut parts = line.split_whitespace();
    let kind = parts.next()?;
    let client = parts.next()?;
    let zxid = parts.next()?.parse().ok()?;
    let generation = parts.next()?.parse().ok()?;
    if parts.next().is_some() || !matches!(kind, "claim" | "write" | "done") {
        return None;
    }
    Some((kind, client, Token { zxid, generation }))
}
