//! Driving a `lock-holder` helper process line by line.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// A running `lock-holder` process: send it commands, wait for its lines, signal it.
#[derive(Debug)]
pub struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Holder {
    /// Starts `bin` (`env!("CARGO_BIN_EXE_lock-holder")`) with `args`.
    ///
    /// # Panics
    ///
    /// When the process cannot be started.
    pub fn spawn(bin: impl Into<PathBuf>, args: &[&str]) -> Holder {
        let mut child = Command::new(bin.into())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting lock-holder");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Holder {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one command line.
    ///
    /// # Panics
    ///
    /// When the process's stdin is closed.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("writing to lock-holder");
        stdin.flush().expect("flushing lock-holder stdin");
    }

    /// The next line that starts with `prefix` (earlier lines are skipped), waiting at most
    /// `limit`; `None` when it does not come.
    pub fn expect(&mut self, prefix: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).ok()?;
            if line.starts_with(prefix) {
                return Some(line);
            }
        }
    }

    /// Every line up to and including the first that starts with `prefix`, waiting at most
    /// `limit`; `None` when that line does not come.
    pub fn lines_until(&mut self, prefix: &str, limit: Duration) -> Option<Vec<String>> {
        let deadline = Instant::now() + limit;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).ok()?;
            let done = line.starts_with(prefix);
            lines.push(line);
            if done {
                return Some(lines);
            }
        }
    }

    /// Every line it printed until its output closed (it exited or was killed), waiting at
    /// most `limit`.
    pub fn rest(&mut self, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        let mut lines = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            lines.push(line);
        }
        lines
    }

    /// Sends `signal` (`libc::SIGKILL`, `SIGSTOP`, `SIGCONT`, ...).
    pub fn signal(&self, signal: libc::c_int) {
        crate::signal(&self.child, signal);
    }

    /// Kills the process and reaps it.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// Closes stdin and waits (at most `limit`) for a clean exit; `false` otherwise.
    pub fn finish(&mut self, limit: Duration) -> bool {
        self.stdin = None;
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return false,
            }
        }
        false
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal(libc::SIGCONT);
            self.kill();
        }
    }
}
