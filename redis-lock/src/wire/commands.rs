//! The plain commands the crate sends besides its scripts: replica acknowledgement, blocking
//! waits on wake-up lists, `SCAN`, `PING`. Each builds its command here; the store layer runs
//! the blocking ones with a raised reply timeout.

use std::time::Duration;

use redis::{Cmd, ConnectionLike, RedisResult};

use super::ms;

/// `WAIT n timeout`: how many replicas have processed everything this connection wrote.
pub(crate) fn wait_replicas(count: u32, timeout: Duration) -> Cmd {
    redis::cmd("WAIT")
        .arg(count)
        .arg(ms(timeout).max(1))
        .to_owned()
}

/// `WAITAOF 0 n timeout` (Redis 7.2+): how many replicas have fsynced it. Its reply is
/// `(local, replicas)`.
pub(crate) fn wait_replicas_fsynced(count: u32, timeout: Duration) -> Cmd {
    redis::cmd("WAITAOF")
        .arg(0)
        .arg(count)
        .arg(ms(timeout).max(1))
        .to_owned()
}

/// `true` when the server does not know the command (`WAITAOF` before Redis 7.2).
pub(crate) fn is_unknown_command(e: &redis::RedisError) -> bool {
    e.to_string()
        .to_ascii_lowercase()
        .contains("unknown command")
}

/// Both take seconds as a decimal, and 0 would mean "forever".
fn block_secs(timeout: Duration) -> f64 {
    timeout.as_secs_f64().max(0.001)
}

/// `BLPOP list timeout`: take the grant a release pushes; the reply is `(list, element)`.
pub(crate) fn pop_grant(list: &str, timeout: Duration) -> Cmd {
    redis::cmd("BLPOP")
        .arg(list)
        .arg(block_secs(timeout))
        .to_owned()
}

/// `BLMOVE list list LEFT RIGHT timeout`: be woken by a grant and leave it in place (Redlock
/// waiters peek: see `deploy::quorum`).
pub(crate) fn peek_grant(list: &str, timeout: Duration) -> Cmd {
    redis::cmd("BLMOVE")
        .arg(list)
        .arg(list)
        .arg("LEFT")
        .arg("RIGHT")
        .arg(block_secs(timeout))
        .to_owned()
}

/// Keys asked for per `SCAN` call: a hint to Redis, which may return more or fewer.
const SCAN_COUNT: u32 = 1000;

/// Every key matching `pattern` on the server behind `con`, fed to `found` one batch at a time.
pub(crate) fn scan(
    con: &mut dyn ConnectionLike,
    pattern: &str,
    mut found: impl FnMut(&[Vec<u8>]),
) -> RedisResult<()> {
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query(con)?;
        found(&keys);
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

pub(crate) fn ping(con: &mut dyn ConnectionLike) -> RedisResult<()> {
    redis::cmd("PING").query(con)
}
