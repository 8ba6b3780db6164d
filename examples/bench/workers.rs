//! Worker processes: sections that need contenders in processes (sessions) of their own start
//! copies of the bench binary with a hidden subcommand ([`this_binary`], or another [`Launch`]:
//! the smoke tests re-run their own binary), and read each one's JSON answer from its standard
//! output. Also the wall-clock windows the workers agree on.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::zklock_side::epoch_ms;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A wall-clock window starting `lead` from now, as (start, end) in ms since the epoch.
pub fn window(lead: Duration, length: Duration) -> (u64, u64) {
    let start = epoch_ms() + lead.as_millis() as u64;
    (start, start + length.as_millis() as u64)
}

/// How a worker process is started: the command for a worker's arguments (its subcommand
/// first).
pub type Launch = dyn Fn(&[String]) -> std::io::Result<Command> + Send + Sync;

/// The bench's own launch: this binary, with the worker's subcommand.
pub fn this_binary(args: &[String]) -> std::io::Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args(args);
    Ok(command)
}

/// The JSON object a line of a worker's output ends with, if any: a test harness that runs the
/// worker may print text of its own before it (`test name ... {...}`) and on lines around it.
fn object_in(line: &str) -> Option<Value> {
    let start = line.find('{')?;
    serde_json::from_str::<Value>(line[start..].trim_end())
        .ok()
        .filter(Value::is_object)
}

/// The answer in a worker's output: the last line that ends with a JSON object.
fn answer(output: &[u8]) -> Result<Value, BoxError> {
    String::from_utf8_lossy(output)
        .lines()
        .rev()
        .find_map(object_in)
        .ok_or_else(|| "the worker printed no JSON answer".into())
}

/// Starts one worker process per argument list.
pub fn spawn(launch: &Launch, workers: &[Vec<String>]) -> Result<Vec<Child>, BoxError> {
    let mut children = Vec::new();
    for args in workers {
        children.push(
            launch(args)?
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()?,
        );
    }
    Ok(children)
}

/// Waits for `children` and parses the JSON answer each printed.
pub async fn collect(children: Vec<Child>, who: &str) -> Result<Vec<Value>, BoxError> {
    let outputs =
        tokio::task::spawn_blocking(move || children.into_iter().map(|c| c.wait_with_output()).collect::<Vec<_>>())
            .await?;
    let mut results = Vec::new();
    for output in outputs {
        let output = output?;
        if !output.status.success() {
            return Err(format!("a {who} worker failed: {}", output.status).into());
        }
        results.push(answer(&output.stdout)?);
    }
    Ok(results)
}

/// A worker that answers once it is ready and then holds its state until told to stop: it
/// prints one JSON line, and ends when its standard input closes. Killed when dropped, so a
/// failed section leaves no process behind.
pub struct Held {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Held {
    /// Starts a worker with `args`.
    pub fn spawn(launch: &Launch, args: &[String]) -> Result<Held, BoxError> {
        let mut child = launch(args)?
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().ok_or("the worker has no stdout")?);
        Ok(Held { child, stdin, stdout })
    }

    /// The worker's ready answer (the first line that ends with a JSON object), parsed; an
    /// error when it ended without one.
    pub fn ready(&mut self) -> Result<Value, BoxError> {
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line)? == 0 {
                let status = self.child.wait()?;
                return Err(format!("a worker ended before it was ready: {status}").into());
            }
            if let Some(ready) = object_in(&line) {
                return Ok(ready);
            }
        }
    }

    /// Closes the worker's standard input and waits for it to end; an error unless it ended
    /// well.
    pub fn finish(mut self) -> Result<(), BoxError> {
        if let Some(mut stdin) = self.stdin.take() {
            // The worker may already have ended; its exit status says how.
            let _ = stdin.flush();
        }
        let status = self.child.wait()?;
        if !status.success() {
            return Err(format!("a worker failed as it stopped: {status}").into());
        }
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The worker's side of [`Held`]: prints `ready` as one line, then waits until the parent
/// closes standard input (or ends).
pub async fn hold_until_told(ready: &Value) -> Result<(), BoxError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{ready}")?;
    out.flush()?;
    drop(out);
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink)
    })
    .await??;
    Ok(())
}
