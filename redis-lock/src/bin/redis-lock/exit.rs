//! Exit codes, and the one-line failure every command ends with when it cannot do its job.

use redis_lock::Error;

/// `status`: the lock is free. `release --force`: there was nothing to break.
pub(crate) const FREE: i32 = 1;
/// Bad command line: unknown option, bad duration, URL, key or namespace, missing command.
pub(crate) const USAGE: i32 = 64;
/// Redis could not be reached or answered with an error.
pub(crate) const UNAVAILABLE: i32 = 69;
/// The operating system refused something the tool needs (signal handlers, a thread, `wait`).
pub(crate) const INTERNAL: i32 = 70;
/// `run`: the lock stayed busy and `--on-busy fail` (the default); `--busy-exit-code` changes it.
pub(crate) const BUSY: i32 = 75;
/// `run --kill-on-loss`: the lock was lost, so the command was terminated.
pub(crate) const LOST: i32 = 124;
/// `run`: the command exists but cannot be executed.
pub(crate) const CANNOT_EXECUTE: i32 = 126;
/// `run`: the command was not found.
pub(crate) const NOT_FOUND: i32 = 127;

/// The exit-code table shown by `--help` (kept next to the constants so they agree).
pub(crate) fn table() -> String {
    format!(
        "Exit codes:
  0        success; for run: the command exited 0, or the lock was busy with --on-busy skip
  {FREE}        status: the lock is free; release --force: it was not held
  {USAGE}       bad command line (unknown option, bad duration, URL or key, missing command)
  {UNAVAILABLE}       Redis unreachable or failing
  {INTERNAL}       the system refused what redis-lock needs (signal handlers, a thread)
  {BUSY}       run: the lock is busy (--no-wait or --wait ran out) and --on-busy fail;
           --busy-exit-code N changes it
  {LOST}      run --kill-on-loss: the lock was lost and the command was terminated
  {CANNOT_EXECUTE}      run: the command cannot be executed (permission denied, not a program)
  {NOT_FOUND}      run: the command was not found
  128+N    run: the command was killed by signal N (143 = SIGTERM), or redis-lock got
           signal N while waiting for the lock
  other    run: the command's own exit code"
    )
}

/// Why a command gave up: printed as one line on stderr, then the process exits with `code`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, message)
    }

    /// A library error, worded for the command line. `server` names the Redis server
    /// (`host:port`, never the password).
    pub(crate) fn from_lock_error(error: &Error, server: &str) -> Failure {
        match error {
            Error::InvalidInput { .. } => Failure::usage(error.to_string()),
            e if e.is_connection_error() => Failure::new(
                UNAVAILABLE,
                format!("cannot connect to Redis at {server}: {}", root_cause(e)),
            ),
            Error::WrongType { .. } => Failure::new(UNAVAILABLE, error.to_string()),
            Error::System(_) => Failure::new(INTERNAL, chain(error)),
            _ => Failure::new(UNAVAILABLE, format!("Redis at {server}: {}", chain(error))),
        }
    }
}

/// The error and its causes, each said once: `what failed: why`.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The innermost error message: "connection refused" rather than the pool's wrapper text.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut e = error;
    while let Some(source) = e.source() {
        e = source;
    }
    let text = e.to_string();
    // r2d2 wraps the last connect error into its own text.
    text.strip_prefix("timed out waiting for connection: ")
        .map(str::to_owned)
        .unwrap_or(text)
}
