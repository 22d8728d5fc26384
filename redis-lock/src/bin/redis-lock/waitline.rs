//! The live status line on stderr while `run` waits for a busy lock, shown only when stderr
//! is a terminal: how long we have waited and who holds the lock.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use redis_lock::{LockClient, LockInfo};

use crate::duration::human;
use crate::holder;

/// Who holds the lock is asked at most this often.
const INSPECT_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(crate) struct WaitLine {
    enabled: bool,
    key: String,
    started: Instant,
    inspected: Option<Instant>,
    holder: Option<LockInfo>,
    shown: bool,
}

impl WaitLine {
    pub(crate) fn new(key: &str) -> WaitLine {
        WaitLine {
            enabled: std::io::stderr().is_terminal(),
            key: key.to_owned(),
            started: Instant::now(),
            inspected: None,
            holder: None,
            shown: false,
        }
    }

    /// Redraws the line (asking Redis who holds the lock at most once a second).
    pub(crate) fn update(&mut self, locks: &LockClient) {
        if !self.enabled {
            return;
        }
        if self
            .inspected
            .is_none_or(|at| at.elapsed() >= INSPECT_EVERY)
        {
            self.inspected = Some(Instant::now());
            // Only decoration: a failed look-up leaves the last answer on screen.
            if let Ok(info) = locks.inspect(&self.key) {
                self.holder = info;
            }
        }
        let mut line = format!(
            "redis-lock: waiting {} for lock {:?}",
            human(self.started.elapsed()),
            self.key
        );
        if let Some(h) = &self.holder {
            line.push_str(&format!(", {}", holder::phrase(h)));
        }
        let width = terminal_width().saturating_sub(1);
        if line.chars().count() > width {
            line = line.chars().take(width).collect();
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}\x1b[K");
        let _ = err.flush();
        self.shown = true;
    }

    /// Removes the line, before anything else is printed.
    pub(crate) fn clear(&mut self) {
        if self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.shown = false;
        }
    }
}

impl Drop for WaitLine {
    fn drop(&mut self) {
        self.clear();
    }
}

fn terminal_width() -> usize {
    // `terminal_size` is in the tree already (clap wraps help text with it).
    match terminal_size::terminal_size_of(std::io::stderr()) {
        Some((terminal_size::Width(w), _)) if w > 0 => usize::from(w),
        _ => 80,
    }
}
