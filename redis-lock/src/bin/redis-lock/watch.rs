//! `redis-lock watch NAME|PATTERN`: a live view of who holds and who waits.
//!
//! It polls (`inspect` for a name, `list` for a glob) every `--interval` and compares each
//! poll with the one before (`changes`, a pure function). On a terminal it redraws a table
//! and the latest changes; otherwise it prints one line per change, or one JSON object per
//! change with `--json`. A handoff is seen as a new fencing token under a lock that stayed
//! held between two polls.

use std::collections::{BTreeMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant, SystemTime};

use redis_lock::{LockClient, LockInfo};

use crate::clock::{rfc3339, unix_ms};
use crate::duration::human;
use crate::json::Json;

/// `redis-lock watch`.
#[derive(Debug)]
pub(crate) struct WatchArgs {
    pub(crate) target: String,
    pub(crate) interval: Duration,
    /// Stop after this long (`None`: until interrupted).
    pub(crate) duration: Option<Duration>,
    pub(crate) json: bool,
}

/// How many changes the terminal view keeps on screen.
const RECENT: usize = 10;

/// What one poll saw of one held lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) fence: u64,
    pub(crate) waiters: u32,
    pub(crate) queued: u32,
}

impl Seen {
    fn of(info: &LockInfo) -> Seen {
        Seen {
            host: info.host.clone(),
            pid: info.pid,
            fence: info.fencing_token,
            waiters: info.waiters,
            queued: info.queued,
        }
    }
}

/// What changed about one lock between two polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Held at the first poll.
    Held,
    /// Free at the first poll (said only for a lock name, not for a pattern).
    Free,
    /// Free at the poll before, held now.
    Acquired,
    /// Held at both polls, under a new fencing token: it changed hands in between.
    Handoff,
    /// Held at the poll before, free now.
    Released,
    /// Same holder, another number of waiters.
    Waiters,
}

impl Change {
    fn as_str(self) -> &'static str {
        match self {
            Change::Held => "held",
            Change::Free => "free",
            Change::Acquired => "acquired",
            Change::Handoff => "handoff",
            Change::Released => "released",
            Change::Waiters => "waiters",
        }
    }
}

/// The changes from `before` (`None` at the first poll) to `now`, by lock name.
pub(crate) fn changes(
    before: Option<&BTreeMap<String, Seen>>,
    now: &BTreeMap<String, Seen>,
) -> Vec<(String, Change)> {
    let mut out = Vec::new();
    let Some(before) = before else {
        return now.keys().map(|k| (k.clone(), Change::Held)).collect();
    };
    for (key, seen) in now {
        match before.get(key) {
            None => out.push((key.clone(), Change::Acquired)),
            Some(old) if old.fence != seen.fence => out.push((key.clone(), Change::Handoff)),
            Some(old) if (old.waiters, old.queued) != (seen.waiters, seen.queued) => {
                out.push((key.clone(), Change::Waiters));
            }
            Some(_) => {}
        }
    }
    for key in before.keys() {
        if !now.contains_key(key) {
            out.push((key.clone(), Change::Released));
        }
    }
    out
}

/// `true` when `target` is a glob for `list` rather than one lock name.
fn is_pattern(target: &str) -> bool {
    target.contains(['*', '?', '['])
}

fn poll(locks: &LockClient, target: &str) -> redis_lock::Result<Vec<LockInfo>> {
    if is_pattern(target) {
        locks.list(target)
    } else {
        Ok(locks.inspect(target)?.into_iter().collect())
    }
}

/// Runs until `--duration` is over (or the process is interrupted). Exit code 0; a failed
/// poll is reported and the next one tried, so the view survives a Redis restart.
pub(crate) fn watch(locks: &LockClient, server: &str, args: &WatchArgs) -> i32 {
    let terminal = !args.json && std::io::stdout().is_terminal();
    let started = Instant::now();
    let mut before: Option<BTreeMap<String, Seen>> = None;
    let mut recent: VecDeque<String> = VecDeque::new();
    loop {
        let polled_at = SystemTime::now();
        let result = poll(locks, &args.target);
        let mut out = std::io::stdout().lock();
        match &result {
            Ok(infos) => {
                let now: BTreeMap<String, Seen> =
                    infos.iter().map(|i| (i.key.clone(), Seen::of(i))).collect();
                let mut seen = changes(before.as_ref(), &now);
                if before.is_none() && now.is_empty() && !is_pattern(&args.target) {
                    seen.push((args.target.clone(), Change::Free));
                }
                for (key, change) in seen {
                    let info = infos.iter().find(|i| i.key == key);
                    if args.json {
                        let line = change_json(locks.namespace(), polled_at, &key, change, info);
                        let _ = writeln!(out, "{}", line.render());
                    } else {
                        let line = change_text(polled_at, &key, change, info);
                        if terminal {
                            recent.push_front(line);
                            recent.truncate(RECENT);
                        } else {
                            let _ = writeln!(out, "{line}");
                        }
                    }
                }
                before = Some(now);
            }
            Err(e) if !terminal => eprintln!("redis-lock: watch: {server}: {e}"),
            Err(_) => {}
        }
        if terminal {
            let error = result.as_ref().err().map(|e| format!("{server}: {e}"));
            let infos = result.as_deref().unwrap_or(&[]);
            let _ = write!(
                out,
                "{}",
                screen(
                    locks.namespace(),
                    &args.target,
                    polled_at,
                    infos,
                    &recent,
                    error
                )
            );
        }
        if out.flush().is_err() {
            // The reader went away (`| head`): nothing more to say.
            return 0;
        }
        drop(out);
        let next = started.elapsed() + args.interval;
        if args.duration.is_some_and(|d| next > d) {
            return 0;
        }
        std::thread::sleep(args.interval);
    }
}

fn change_text(at: SystemTime, key: &str, change: Change, info: Option<&LockInfo>) -> String {
    let mut line = format!("{} {:<8} {key}", rfc3339(at), change.as_str());
    if let Some(i) = info {
        line.push_str(&format!(
            " holder {} fence {} expires in {} waiters {}",
            holder(i),
            i.fencing_token,
            i.remaining_ttl.map_or_else(|| "never".to_owned(), human),
            i.waiters
        ));
        if i.queued > 0 {
            line.push_str(&format!(" (queued {})", i.queued));
        }
    }
    line
}

/// `host (pid N)`, or what a lock just handed over shows until its new holder's first renewal
/// writes its information.
fn holder(i: &LockInfo) -> String {
    if i.host.is_empty() {
        "(handed over, not yet claimed)".to_owned()
    } else {
        format!("{} (pid {})", i.host, i.pid)
    }
}

fn change_json(
    namespace: &str,
    at: SystemTime,
    key: &str,
    change: Change,
    info: Option<&LockInfo>,
) -> Json {
    let mut fields = vec![
        ("time", Json::Str(rfc3339(at))),
        ("time_unix_ms", Json::Int(unix_ms(at))),
        ("event", Json::Str(change.as_str().to_owned())),
        ("key", Json::Str(key.to_owned())),
        ("namespace", Json::Str(namespace.to_owned())),
        ("held", Json::Bool(info.is_some())),
    ];
    if let Some(i) = info {
        fields.extend([
            ("host", Json::Str(i.host.clone())),
            ("pid", Json::Int(u128::from(i.pid))),
            ("acquired_at", Json::Str(rfc3339(i.acquired_at))),
            (
                "remaining_ttl_ms",
                Json::opt_int(i.remaining_ttl.map(|d| d.as_millis())),
            ),
            ("fencing_token", Json::Int(u128::from(i.fencing_token))),
            ("waiters", Json::Int(u128::from(i.waiters))),
            ("queued", Json::Int(u128::from(i.queued))),
        ]);
    }
    Json::Object(fields)
}

/// The whole terminal screen: home, clear, a header, one row per lock, the latest changes.
fn screen(
    namespace: &str,
    target: &str,
    at: SystemTime,
    infos: &[LockInfo],
    recent: &VecDeque<String>,
    error: Option<String>,
) -> String {
    let mut s = String::from("\x1b[H\x1b[2J");
    s.push_str(&format!(
        "redis-lock watch {target} (namespace {namespace})  {}\r\n\r\n",
        rfc3339(at)
    ));
    if let Some(e) = error {
        s.push_str(&format!("error: {e}\r\n\r\n"));
    }
    if infos.is_empty() {
        s.push_str("no lock held\r\n");
    } else {
        s.push_str(&format!(
            "{:<24} {:<20} {:>8} {:>10} {:>8} {:>8}\r\n",
            "KEY", "HOLDER", "PID", "EXPIRES IN", "FENCE", "WAITERS"
        ));
        for i in infos {
            let (host, pid) = if i.host.is_empty() {
                // Handed over; the new holder writes its information at its first renewal.
                ("(handed over)".to_owned(), String::new())
            } else {
                (i.host.clone(), i.pid.to_string())
            };
            s.push_str(&format!(
                "{:<24} {:<20} {:>8} {:>10} {:>8} {:>8}\r\n",
                i.key,
                host,
                pid,
                i.remaining_ttl.map_or_else(|| "never".to_owned(), human),
                i.fencing_token,
                i.waiters
            ));
        }
    }
    s.push_str("\r\nrecent changes:\r\n");
    for line in recent {
        s.push_str(line);
        s.push_str("\r\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(fence: u64, waiters: u32) -> Seen {
        Seen {
            host: "h".into(),
            pid: 1,
            fence,
            waiters,
            queued: 0,
        }
    }

    fn map(entries: &[(&str, Seen)]) -> BTreeMap<String, Seen> {
        entries
            .iter()
            .map(|(k, s)| ((*k).to_owned(), s.clone()))
            .collect()
    }

    #[test]
    fn changes_between_polls() {
        let first = map(&[("a", seen(1, 0))]);
        assert_eq!(changes(None, &first), [("a".to_owned(), Change::Held)]);
        assert!(changes(Some(&first), &first).is_empty(), "nothing changed");
        let waiting = map(&[("a", seen(1, 2))]);
        assert_eq!(
            changes(Some(&first), &waiting),
            [("a".to_owned(), Change::Waiters)]
        );
        let handed = map(&[("a", seen(2, 1)), ("b", seen(7, 0))]);
        assert_eq!(
            changes(Some(&waiting), &handed),
            [
                ("a".to_owned(), Change::Handoff),
                ("b".to_owned(), Change::Acquired)
            ]
        );
        assert_eq!(
            changes(Some(&handed), &map(&[("b", seen(7, 0))])),
            [("a".to_owned(), Change::Released)]
        );
    }

    #[test]
    fn globs_are_listed_names_inspected() {
        assert!(is_pattern("report-*"));
        assert!(is_pattern("job-?"));
        assert!(is_pattern("[ab]"));
        assert!(!is_pattern("nightly-report"));
    }
}
