//! `redis-lock watch NAME|PATTERN`: a live view of who holds and who waits, for locks and
//! semaphores.
//!
//! It polls (`inspect` for a name, or the semaphore's `inspect` when the name is one; `list`
//! and `list_semaphores` for a glob) every `--interval` and compares each poll with the one
//! before (`changes`, a pure function). On a terminal it redraws a table and the latest
//! changes; otherwise it prints one line per change, or one JSON object per change with
//! `--json`. A handoff is seen as a new fencing token under a lock that stayed held between
//! two polls; a semaphore's change as another count of permits in use (or a new permit).

use std::collections::{BTreeMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant, SystemTime};

use redis_lock::{Error, LockClient, LockInfo, SemaphoreInfo};

use crate::clock::{rfc3339, unix_ms};
use crate::duration::human;
use crate::exit::Failure;
use crate::holder::{self, printable};
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

/// What one poll saw of one held lock, or of one semaphore with a permit in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) host: String,
    pub(crate) pid: u32,
    /// A lock's fencing token; a semaphore's highest among its permits.
    pub(crate) fence: u64,
    pub(crate) waiters: u32,
    pub(crate) queued: u32,
    /// A semaphore's permits in use and limit; `None` for a lock.
    pub(crate) permits: Option<(u32, u32)>,
}

/// One lock or semaphore as a poll found it.
#[derive(Debug, Clone)]
enum Observed {
    Lock(LockInfo),
    Semaphore(SemaphoreInfo),
}

impl Observed {
    fn key(&self) -> &str {
        match self {
            Observed::Lock(i) => &i.key,
            Observed::Semaphore(s) => &s.name,
        }
    }

    fn seen(&self) -> Seen {
        match self {
            Observed::Lock(info) => Seen {
                // Diffed only: an unknown holder (handed over, cooling down) as empty.
                host: info.host.clone().unwrap_or_default(),
                pid: info.pid.unwrap_or_default(),
                fence: info.fencing_token,
                waiters: info.waiters,
                queued: info.queued,
                permits: None,
            },
            Observed::Semaphore(s) => Seen {
                host: String::new(),
                pid: 0,
                fence: s.holders.iter().map(|p| p.fencing_token).max().unwrap_or(0),
                waiters: s.waiters,
                queued: s.queued,
                permits: Some((s.in_use, s.limit)),
            },
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
    /// A semaphore with permits in use at both polls: another count in use or limit, or a
    /// permit taken anew in between.
    Permits,
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
            Change::Permits => "permits",
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
            Some(old)
                if seen.permits.is_some()
                    && (old.permits != seen.permits || old.fence != seen.fence) =>
            {
                out.push((key.clone(), Change::Permits));
            }
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

/// The locks held and the semaphores with a permit in use, sorted by name.
fn poll(locks: &LockClient, target: &str) -> redis_lock::Result<Vec<Observed>> {
    if is_pattern(target) {
        let mut found: Vec<Observed> = locks
            .list(target)?
            .into_iter()
            .map(Observed::Lock)
            .collect();
        found.extend(
            locks
                .list_semaphores(target)?
                .into_iter()
                .filter(|s| s.in_use > 0)
                .map(Observed::Semaphore),
        );
        found.sort_by(|a, b| a.key().cmp(b.key()));
        return Ok(found);
    }
    match locks.inspect(target) {
        // Not a lock: perhaps a semaphore (as `status` finds out). The limit given here only
        // stands in when none is stored, and then no permit is in use.
        Err(not_a_lock @ Error::WrongType { .. }) => {
            let Ok(semaphore) = locks.semaphore(target, 1) else {
                // Semaphores refused (Redlock): the key is of another type, as first said.
                return Err(not_a_lock);
            };
            let info = semaphore.inspect()?;
            Ok((info.in_use > 0)
                .then_some(Observed::Semaphore(info))
                .into_iter()
                .collect())
        }
        other => Ok(other?.map(Observed::Lock).into_iter().collect()),
    }
}

/// Runs until `--duration` is over (or the process is interrupted). Exit code 0; a failed
/// poll is reported and the next one tried, so the view survives a Redis restart. A name or
/// pattern the library refuses (empty, too long) fails the first poll and every later one
/// alike: that ends the watch at once, exit 64, before anything is printed.
pub(crate) fn watch(locks: &LockClient, server: &str, args: &WatchArgs) -> Result<i32, Failure> {
    let terminal = !args.json && std::io::stdout().is_terminal();
    let started = Instant::now();
    // One lock name: an observer wakes the loop as soon as Redis announces a change (a
    // semaphore's or a pattern's changes are seen at the next `--interval`).
    let observer = (!is_pattern(&args.target))
        .then(|| locks.observe(&args.target).ok())
        .flatten();
    let mut before: Option<BTreeMap<String, Seen>> = None;
    let mut recent: VecDeque<String> = VecDeque::new();
    loop {
        let polled_at = SystemTime::now();
        let result = poll(locks, &args.target);
        let mut out = std::io::stdout().lock();
        match &result {
            Err(e @ Error::InvalidInput { .. }) => return Err(Failure::from_lock_error(e, server)),
            Ok(infos) => {
                let now: BTreeMap<String, Seen> = infos
                    .iter()
                    .map(|i| (i.key().to_owned(), i.seen()))
                    .collect();
                let mut seen = changes(before.as_ref(), &now);
                if before.is_none() && now.is_empty() && !is_pattern(&args.target) {
                    seen.push((args.target.clone(), Change::Free));
                }
                for (key, change) in seen {
                    let info = infos.iter().find(|i| i.key() == key);
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
            return Ok(0);
        }
        drop(out);
        match &observer {
            // Woken by a change, or after the interval (or what is left of the duration). Its
            // first report is the state the first look showed; later ones are changes.
            Some(observer) => {
                let left = args.duration.map(|d| d.saturating_sub(started.elapsed()));
                if left == Some(Duration::ZERO) {
                    return Ok(0);
                }
                let _ = observer.recv_timeout(left.map_or(args.interval, |l| l.min(args.interval)));
                while let Ok(Some(_)) = observer.try_recv() {}
            }
            None => {
                // `--interval` is bounded when parsed; saturating all the same, never a panic.
                let next = started.elapsed().saturating_add(args.interval);
                if args.duration.is_some_and(|d| next > d) {
                    return Ok(0);
                }
                std::thread::sleep(args.interval);
            }
        }
    }
}

fn change_text(at: SystemTime, key: &str, change: Change, info: Option<&Observed>) -> String {
    let mut line = format!("{} {:<8} {}", rfc3339(at), change.as_str(), printable(key));
    let queued = match info {
        None => return line,
        Some(Observed::Lock(i)) => {
            line.push_str(&format!(
                " holder {} fence {} expires in {} waiters {}",
                holder::describe(i),
                holder::fence(i).map_or_else(|| "-".to_owned(), |f| f.to_string()),
                i.remaining_ttl.map_or_else(|| "never".to_owned(), human),
                i.waiters
            ));
            i.queued
        }
        Some(Observed::Semaphore(s)) => {
            line.push_str(&format!(
                " semaphore: {} of {} permits in use, waiters {}",
                s.in_use, s.limit, s.waiters
            ));
            s.queued
        }
    };
    if queued > 0 {
        line.push_str(&format!(" (queued {queued})"));
    }
    line
}

fn change_json(
    namespace: &str,
    at: SystemTime,
    key: &str,
    change: Change,
    info: Option<&Observed>,
) -> Json {
    let mut fields = vec![
        ("time", Json::Str(rfc3339(at))),
        ("time_unix_ms", Json::Int(unix_ms(at))),
        ("event", Json::Str(change.as_str().to_owned())),
        ("key", Json::Str(key.to_owned())),
        ("namespace", Json::Str(namespace.to_owned())),
        ("held", Json::Bool(info.is_some())),
    ];
    match info {
        None => {}
        Some(Observed::Lock(i)) => {
            // host, pid, acquired_at: null when not stored (cooling down, handed over).
            fields.extend(
                holder::json_fields(i)
                    .into_iter()
                    .filter(|(name, _)| *name != "acquired_at_unix_ms"),
            );
            fields.extend([
                (
                    "remaining_ttl_ms",
                    Json::opt_int(i.remaining_ttl.map(|d| d.as_millis())),
                ),
                (
                    "fencing_token",
                    Json::opt_int(holder::fence(i).map(u128::from)),
                ),
                ("waiters", Json::Int(u128::from(i.waiters))),
                ("queued", Json::Int(u128::from(i.queued))),
            ]);
        }
        Some(Observed::Semaphore(s)) => fields.extend([
            ("kind", Json::Str("semaphore".to_owned())),
            ("limit", Json::Int(u128::from(s.limit))),
            ("in_use", Json::Int(u128::from(s.in_use))),
            // Of the permit that expires first.
            (
                "remaining_ttl_ms",
                Json::opt_int(s.holders.first().map(|p| p.remaining_ttl.as_millis())),
            ),
            ("waiters", Json::Int(u128::from(s.waiters))),
            ("queued", Json::Int(u128::from(s.queued))),
        ]),
    }
    Json::Object(fields)
}

/// The whole terminal screen: home, clear, a header, one row per lock, the latest changes.
fn screen(
    namespace: &str,
    target: &str,
    at: SystemTime,
    infos: &[Observed],
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
        for observed in infos {
            let (holder, pid, expires, fence, waiters) = match observed {
                Observed::Lock(i) => (
                    holder::short(i),
                    holder::pid(i).map_or_else(String::new, |p| p.to_string()),
                    i.remaining_ttl.map_or_else(|| "never".to_owned(), human),
                    holder::fence(i).map_or_else(String::new, |f| f.to_string()),
                    i.waiters,
                ),
                Observed::Semaphore(sem) => (
                    format!("{} of {} permits", sem.in_use, sem.limit),
                    String::new(),
                    // The permit that expires first.
                    sem.holders
                        .first()
                        .map_or_else(String::new, |p| human(p.remaining_ttl)),
                    String::new(),
                    sem.waiters,
                ),
            };
            s.push_str(&format!(
                "{:<24} {:<20} {:>8} {:>10} {:>8} {:>8}\r\n",
                printable(observed.key()),
                holder,
                pid,
                expires,
                fence,
                waiters
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
            permits: None,
        }
    }

    #[test]
    fn semaphore_changes_are_permits_not_handoffs() {
        let sem = |fence, in_use| Seen {
            host: String::new(),
            pid: 0,
            fence,
            waiters: 0,
            queued: 0,
            permits: Some((in_use, 3)),
        };
        let one = map(&[("s", sem(4, 1))]);
        assert_eq!(changes(None, &one), [("s".to_owned(), Change::Held)]);
        let two = map(&[("s", sem(5, 2))]);
        assert_eq!(
            changes(Some(&one), &two),
            [("s".to_owned(), Change::Permits)]
        );
        let swapped = map(&[("s", sem(6, 2))]);
        assert_eq!(
            changes(Some(&two), &swapped),
            [("s".to_owned(), Change::Permits)]
        );
        assert!(changes(Some(&swapped), &swapped).is_empty());
        assert_eq!(
            changes(Some(&swapped), &BTreeMap::new()),
            [("s".to_owned(), Change::Released)]
        );
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
