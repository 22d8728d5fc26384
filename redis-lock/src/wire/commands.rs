//! The plain commands the crate sends besides its scripts: replica acknowledgement, blocking
//! waits on wake-up lists, `SCAN`, `PING`, and the server-native compare-and-delete
//! (`DELIFEQ`), with what a store has learnt of which of them its server has
//! (`Capabilities`). Each builds its command here; the store layer runs the blocking ones
//! with a raised reply timeout.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use redis::{Cmd, ConnectionLike, RedisResult, Value};

use super::ms;
use super::request::Request;

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

/// `true` when the server refuses the command to this user (an ACL without it).
pub(crate) fn is_no_permission(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM")
}

/// Whether the server has a command, learnt by its first use rather than asked per call:
/// unknown until then; a server that answers "unknown command" (or refuses it to the user,
/// an ACL without it) is not sent it again.
#[derive(Debug, Default)]
pub(crate) struct Learnt(AtomicU8);

// The derived `Default` (0) is this state; only `known` names it.
#[cfg_attr(not(all(test, feature = "testing")), allow(dead_code))]
const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

impl Learnt {
    /// The command may be sent: the server has it, or has not been asked yet.
    pub(crate) fn may_try(&self) -> bool {
        self.0.load(Ordering::Relaxed) != NO
    }

    /// The server answered the command: it has it.
    pub(crate) fn has(&self) {
        self.0.store(YES, Ordering::Relaxed);
    }

    /// The server does not run the command; `true` the first time this is learnt.
    pub(crate) fn lacks(&self) -> bool {
        self.0.swap(NO, Ordering::Relaxed) != NO
    }

    /// What was learnt: `Some(true)` has it, `Some(false)` not, `None` not asked yet (read by
    /// the server tests, which need the `testing` feature).
    #[cfg_attr(not(all(test, feature = "testing")), allow(dead_code))]
    pub(crate) fn known(&self) -> Option<bool> {
        match self.0.load(Ordering::Relaxed) {
            UNKNOWN => None,
            YES => Some(true),
            _ => Some(false),
        }
    }
}

/// What one store's server has of the commands that are not in every server the crate
/// supports, each learnt by its first use (`Learnt`).
#[derive(Debug, Default)]
pub(crate) struct Capabilities {
    /// `WAITAOF` (Redis 7.2+, Valkey): replica acknowledgement fsynced.
    pub(crate) waitaof: Learnt,
    /// `DELIFEQ` (Valkey 9): the native release of a string lock.
    pub(crate) delifeq: Learnt,
}

/// `DELIFEQ key value` (Valkey 9): delete `key` if it holds exactly the string `value`, one
/// native command instead of a compare-and-delete script (1.2 us of Redis time per call
/// against 6.4 us for the release script on Valkey 9.1: `git log -p BENCHMARKS.md`).
/// `Some(true)`: deleted; `Some(false)`: not (gone, another value, or not a string: the
/// caller asks the script, which tells which); `None`: this server cannot run it
/// (the deployment remembers which in its `Capabilities`).
pub(crate) fn delete_if_equal(key: &str, value: &str) -> Request<Option<bool>> {
    Request::command(&[b"DELIFEQ", key.as_bytes(), value.as_bytes()], |reply| {
        let reply = match reply {
            Value::ServerError(e) => Err(redis::RedisError::from(e)),
            other => Ok(other),
        };
        match reply {
            Ok(Value::Int(n)) => Ok(Some(n == 1)),
            Ok(_) => Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected DELIFEQ reply",
            ))
            .into()),
            Err(e) if e.code() == Some("WRONGTYPE") => Ok(Some(false)),
            Err(e) if is_unknown_command(&e) || is_no_permission(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
}

/// Both take seconds as a decimal, and 0 would mean "forever".
fn block_secs(timeout: Duration) -> f64 {
    timeout.as_secs_f64().max(0.001)
}

/// `BLPOP list... timeout`: take the grant a release pushes to any of `lists` (one lock's
/// wake-up lists and its waiting group's poke list, all in one slot); the reply is
/// `(list, element)`.
pub(crate) fn pop_grant(lists: &[String], timeout: Duration) -> Cmd {
    redis::cmd("BLPOP")
        .arg(lists)
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

/// The masters of a Redis Cluster, as `(host, port)`, from `CLUSTER SLOTS` (in the minimal
/// ACL rule for clusters already; `CLUSTER SHARDS` would need Redis 7). Each slot range is
/// `[start, end, [host, port, id, ...], replicas...]`; a master serving several ranges is
/// listed once.
#[cfg(feature = "cluster")]
pub(crate) fn cluster_masters(con: &mut dyn ConnectionLike) -> RedisResult<Vec<(String, u16)>> {
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(con)?;
    Ok(parse_cluster_masters(&ranges))
}

/// Which master serves which slots, from `CLUSTER SLOTS`: `(first, last, host, port)` per
/// range.
#[cfg(feature = "cluster")]
pub(crate) fn cluster_slot_map(
    con: &mut dyn ConnectionLike,
) -> RedisResult<Vec<(u16, u16, String, u16)>> {
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(con)?;
    Ok(parse_slot_map(&ranges))
}

#[cfg(any(feature = "cluster", test))]
fn parse_slot_map(ranges: &[redis::Value]) -> Vec<(u16, u16, String, u16)> {
    use redis::Value;
    let slot = |v: Option<&Value>| match v {
        Some(Value::Int(n)) => u16::try_from(*n).ok(),
        _ => None,
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(parts) = range else {
                return None;
            };
            let (first, last) = (slot(parts.first())?, slot(parts.get(1))?);
            let master = parse_cluster_masters(std::slice::from_ref(range));
            let (host, port) = master.into_iter().next()?;
            Some((first, last, host, port))
        })
        .collect()
}

#[cfg(any(feature = "cluster", test))]
fn parse_cluster_masters(ranges: &[redis::Value]) -> Vec<(String, u16)> {
    use redis::Value;
    let mut masters: Vec<(String, u16)> = Vec::new();
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let Some(Value::Array(master)) = parts.get(2) else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => continue,
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        let Ok(port) = u16::try_from(*port) else {
            continue;
        };
        if !masters.iter().any(|(h, p)| *h == host && *p == port) {
            masters.push((host, port));
        }
    }
    masters
}

pub(crate) fn ping(con: &mut dyn ConnectionLike) -> RedisResult<()> {
    redis::cmd("PING").query(con)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_masters_are_read_from_cluster_slots() {
        use redis::Value;
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |start, end, master: Value, replica: Value| {
            Value::Array(vec![Value::Int(start), Value::Int(end), master, replica])
        };
        let slots = [
            range(0, 5460, node("127.0.0.1", 7000), node("127.0.0.1", 7003)),
            range(
                5461,
                10922,
                node("127.0.0.1", 7001),
                node("127.0.0.1", 7004),
            ),
            range(
                10923,
                16000,
                node("127.0.0.1", 7002),
                node("127.0.0.1", 7005),
            ),
            range(
                16001,
                16383,
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ),
            Value::Int(3),
        ];
        assert_eq!(
            parse_cluster_masters(&slots),
            [
                ("127.0.0.1".to_owned(), 7000),
                ("127.0.0.1".to_owned(), 7001),
                ("127.0.0.1".to_owned(), 7002)
            ]
        );
        let map = parse_slot_map(&slots);
        assert_eq!(map.len(), 4, "{map:?}");
        assert_eq!(map[0], (0, 5460, "127.0.0.1".to_owned(), 7000));
        assert_eq!(map[3], (16001, 16383, "127.0.0.1".to_owned(), 7000));
    }
}
