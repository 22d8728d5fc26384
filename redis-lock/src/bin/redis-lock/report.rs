//! `status`, `list` and `release --force`: what they print, as text or JSON.

use std::io::Write;
use std::time::{Duration, SystemTime};

use redis_lock::{
    Error, LeaseHandle, LockClient, LockGuard, LockInfo, LockMode, ReleaseOutcome, SemaphoreInfo,
};

use crate::clock::rfc3339;
use crate::duration::human;
use crate::exit::{self, Failure};
use crate::holder::{self, printable};
use crate::json::Json;

/// `redis-lock status KEY`: exit 0 when held, 1 when free.
pub(crate) fn status(
    locks: &LockClient,
    server: &str,
    key: &str,
    json: bool,
) -> Result<i32, Failure> {
    let info = match locks.inspect(key) {
        // Not a lock: perhaps a semaphore.
        Err(Error::WrongType { .. }) => return semaphore_status(locks, server, key, json),
        other => other.map_err(|e| Failure::from_lock_error(&e, server))?,
    };
    let text = match (&info, json) {
        (Some(info), true) => lock_json(locks.namespace(), info).render(),
        (None, true) => Json::Object(vec![
            ("key", Json::Str(key.to_owned())),
            ("namespace", Json::Str(locks.namespace().to_owned())),
            ("held", Json::Bool(false)),
        ])
        .render(),
        (Some(info), false) => status_text(info),
        (None, false) => format!("lock {key:?} is free"),
    };
    print(&text);
    Ok(if info.is_some() { 0 } else { exit::FREE })
}

/// `redis-lock leader ELECTION`.
pub(crate) fn leader(
    locks: &LockClient,
    server: &str,
    election: &str,
    json: bool,
) -> Result<i32, Failure> {
    let leader = locks
        .leader(election)
        .map_err(|e| Failure::from_lock_error(&e, server))?;
    let text = match (&leader, json) {
        (Some(l), true) => Json::Object(vec![
            ("election", Json::Str(election.to_owned())),
            ("namespace", Json::Str(locks.namespace().to_owned())),
            ("leader", Json::Bool(true)),
            ("value", Json::Str(l.value.clone())),
            ("host", Json::opt_str(l.host.clone())),
            (
                "pid",
                l.pid.map_or(Json::Null, |p| Json::Int(u128::from(p))),
            ),
            ("fencing_token", Json::Int(u128::from(l.fencing_token))),
            (
                "remaining_ttl_ms",
                l.remaining_ttl
                    .map_or(Json::Null, |t| Json::Int(t.as_millis())),
            ),
        ])
        .render(),
        (None, true) => Json::Object(vec![
            ("election", Json::Str(election.to_owned())),
            ("namespace", Json::Str(locks.namespace().to_owned())),
            ("leader", Json::Bool(false)),
        ])
        .render(),
        (Some(l), false) => format!(
            "{} (host {}, pid {}, token {})",
            l.value,
            l.host.as_deref().unwrap_or("-"),
            l.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            l.fencing_token
        ),
        (None, false) => format!("election {election:?} has no leader"),
    };
    print(&text);
    Ok(if leader.is_some() { 0 } else { exit::FREE })
}

/// `redis-lock list [PATTERN]`.
pub(crate) fn list(
    locks: &LockClient,
    server: &str,
    pattern: &str,
    json: bool,
) -> Result<i32, Failure> {
    let infos = locks
        .list(pattern)
        .map_err(|e| Failure::from_lock_error(&e, server))?;
    let semaphores = locks
        .list_semaphores(pattern)
        .map_err(|e| Failure::from_lock_error(&e, server))?;
    if json {
        let items = infos
            .iter()
            .map(|info| lock_json(locks.namespace(), info))
            .chain(
                semaphores
                    .iter()
                    .map(|info| semaphore_json(locks.namespace(), info)),
            )
            .collect();
        print(&Json::Array(items).render());
    } else if !semaphores.is_empty() {
        if !infos.is_empty() {
            print(&format!("{}\n", table(&infos)));
        }
        print(&semaphore_table(&semaphores));
    } else if infos.is_empty() {
        // stdout stays empty, so `redis-lock list | wc -l` counts locks.
        eprintln!(
            "no locks matching {pattern:?} under namespace {:?}",
            locks.namespace()
        );
    } else {
        print(&table(&infos));
    }
    Ok(0)
}

/// `redis-lock release KEY --force`: exit 0 when a lock was broken, 1 when it was free.
pub(crate) fn release(
    locks: &LockClient,
    server: &str,
    key: &str,
    json: bool,
) -> Result<i32, Failure> {
    // Only to say what was broken when nobody's information is stored with the lock (a
    // cool-down, a handoff): `force_release` then answers an empty host.
    let before = locks.inspect(key).ok().flatten();
    let broken = match locks.force_release(key) {
        // Not a lock: perhaps a semaphore, whose permits are all broken.
        Err(Error::WrongType { .. }) => locks.semaphore(key, 1).and_then(|s| s.force_release()),
        other => other,
    }
    .map_err(|e| Failure::from_lock_error(&e, server))?;
    let text = match (&broken, json) {
        (Some((host, pid)), true) => Json::Object(vec![
            ("key", Json::Str(key.to_owned())),
            ("namespace", Json::Str(locks.namespace().to_owned())),
            ("broken", Json::Bool(true)),
            // Null when no holder was stored (cooling down, just handed over).
            (
                "host",
                Json::opt_str((!host.is_empty()).then(|| host.clone())),
            ),
            (
                "pid",
                Json::opt_int((!host.is_empty()).then_some(u128::from(*pid))),
            ),
        ])
        .render(),
        (None, true) => Json::Object(vec![
            ("key", Json::Str(key.to_owned())),
            ("namespace", Json::Str(locks.namespace().to_owned())),
            ("broken", Json::Bool(false)),
        ])
        .render(),
        (Some((host, pid)), false) if !host.is_empty() => {
            format!(
                "broke lock {key:?}, held by {} (pid {pid})",
                printable(host)
            )
        }
        (Some(_), false) => {
            // What the look before the break saw, if it too had no holder; otherwise the
            // state changed in between, and only "nobody" is known.
            let what = match before.as_ref().filter(|i| holder::nobody(i).is_some()) {
                Some(info) => holder::describe(info),
                None => "nobody: released or handed over to a waiter not yet claimed".to_owned(),
            };
            format!("broke lock {key:?}, held by {what}")
        }
        (None, false) => format!("lock {key:?} was not held; nothing to break"),
    };
    print(&text);
    Ok(if broken.is_some() { 0 } else { exit::FREE })
}

/// The lock a handle stands for, as a guard without a watchdog (nothing renews it behind
/// the command's back). A lock that is not the handle's any more is exit code 124.
fn resume(locks: &LockClient, server: &str, text: &str) -> Result<LockGuard, Failure> {
    let handle: LeaseHandle = text
        .parse()
        .map_err(|e| Failure::from_lock_error(&e, server))?;
    locks.resume_with(&handle, false).map_err(|e| match e {
        Error::Lost { .. } | Error::HandleSpent { .. } => Failure::new(exit::LOST, e.to_string()),
        e => Failure::from_lock_error(&e, server),
    })
}

/// `release --handle`: release the lock a handle stands for.
pub(crate) fn release_handle(
    locks: &LockClient,
    server: &str,
    handle: &str,
    json: bool,
) -> Result<i32, Failure> {
    let guard = resume(locks, server, handle)?;
    let key = guard.key().to_owned();
    let outcome = guard
        .release()
        .map_err(|e| Failure::from_lock_error(&e, server))?;
    let released = outcome == ReleaseOutcome::Released;
    let text = if json {
        Json::Object(vec![
            ("key", Json::Str(key)),
            ("namespace", Json::Str(locks.namespace().to_owned())),
            ("released", Json::Bool(released)),
        ])
        .render()
    } else if released {
        format!("released lock {key:?}")
    } else {
        format!("lock {key:?} was not the handle's any more ({outcome:?}); left alone")
    };
    print(&text);
    Ok(if released { 0 } else { exit::LOST })
}

/// `extend --handle --ttl`: make the lock a handle stands for expire `ttl` from now.
pub(crate) fn extend_handle(
    locks: &LockClient,
    server: &str,
    handle: &str,
    ttl: Duration,
    json: bool,
) -> Result<i32, Failure> {
    let guard = resume(locks, server, handle)?;
    let key = guard.key().to_owned();
    let extended = guard.extend(ttl).map_err(|e| match e {
        Error::Lost { .. } => Failure::new(exit::LOST, e.to_string()),
        e => Failure::from_lock_error(&e, server),
    });
    // Not released: the handle's owner keeps the lock.
    let _ = guard.into_handle();
    extended?;
    let text = if json {
        Json::Object(vec![
            ("key", Json::Str(key)),
            ("namespace", Json::Str(locks.namespace().to_owned())),
            ("ttl_ms", Json::Int(ttl.as_millis())),
        ])
        .render()
    } else {
        format!("lock {key:?} now expires in {}", human(ttl))
    };
    print(&text);
    Ok(0)
}

/// Prints `text` and a newline on stdout. A closed pipe (`| head`) is not an error worth a
/// panic: the reader has what it wanted.
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

fn lock_json(namespace: &str, info: &LockInfo) -> Json {
    let mut fields = vec![
        ("key", Json::Str(info.key.clone())),
        ("namespace", Json::Str(namespace.to_owned())),
        ("held", Json::Bool(true)),
    ];
    // Null for what is not stored: cooling down, or just handed to a waiter.
    fields.extend(holder::json_fields(info));
    fields.extend([
        (
            "remaining_ttl_ms",
            Json::opt_int(info.remaining_ttl.map(|d| d.as_millis())),
        ),
        (
            "fencing_token",
            Json::opt_int(holder::fence(info).map(u128::from)),
        ),
        ("metadata", Json::opt_str(info.metadata.clone())),
        // Whether anybody owns it (not whether this process does): named `owned` before,
        // which read as "mine".
        ("has_owner", Json::Bool(info.owned)),
        ("hold_until", Json::opt_str(info.hold_until.map(rfc3339))),
        (
            "cooling_until",
            Json::opt_str(info.cooling_until.map(rfc3339)),
        ),
        ("waiters", Json::Int(u128::from(info.waiters))),
        ("queued", Json::Int(u128::from(info.queued))),
        // Null for a mutex, and for a lock cooling down: the library does not tell a
        // read-write lock's cool-down from a mutex's.
        ("mode", Json::opt_str(info.mode.map(|m| m.to_string()))),
        ("readers", Json::Int(u128::from(info.readers))),
        (
            "writers_waiting",
            Json::Int(u128::from(info.writers_waiting)),
        ),
    ]);
    Json::Object(fields)
}

fn ago(t: SystemTime) -> String {
    match SystemTime::now().duration_since(t) {
        Ok(age) => format!("{} ago", human(age)),
        // The holder's Redis clock is ahead of ours.
        Err(_) => "just now".to_owned(),
    }
}

fn status_text(info: &LockInfo) -> String {
    let held = match info.mode {
        Some(LockMode::Read) => format!("held for reading by {} reader(s)", info.readers),
        Some(LockMode::Write) => "held for writing".to_owned(),
        None => "held".to_owned(),
    };
    let mut lines = vec![format!("lock {:?} is {held}", info.key)];
    let mut field = |name: &str, value: String| lines.push(format!("  {name:<11} {value}"));
    // Of the readers, the one whose share expires first.
    let holder = if info.mode == Some(LockMode::Read) {
        "a reader"
    } else {
        "holder"
    };
    field(holder, holder::describe(info));
    if let Some(since) = holder::since(info) {
        field("since", format!("{} ({})", rfc3339(since), ago(since)));
    }
    field(
        "expires in",
        info.remaining_ttl
            .map_or_else(|| "never (the key has no TTL)".to_owned(), human),
    );
    if let Some(fence) = holder::fence(info) {
        field("fencing", fence.to_string());
    }
    if info.waiters > 0 || info.queued > 0 {
        let fair = if info.queued > 0 {
            format!(" ({} queued fairly)", info.queued)
        } else {
            String::new()
        };
        field("waiters", format!("{}{fair}", info.waiters));
    }
    if info.writers_waiting > 0 {
        field(
            "writers",
            format!(
                "{} waiting (new readers wait behind them)",
                info.writers_waiting
            ),
        );
    }
    if let Some(meta) = &info.metadata {
        field("metadata", printable(meta));
    }
    if !info.owned {
        // It frees at the later of the two.
        let (until, why) = match (info.hold_until, info.cooling_until) {
            (Some(h), Some(c)) if h > c => (Some(h), "minimum hold"),
            (_, Some(c)) => (Some(c), "cooling down"),
            (h, None) => (h, "minimum hold"),
        };
        let until = until.map_or_else(String::new, |t| format!(" until {}", rfc3339(t)));
        field(
            "note",
            format!("released by its holder; kept taken{until} ({why})"),
        );
    }
    lines.join("\n")
}

/// One row per lock, columns aligned.
fn table(infos: &[LockInfo]) -> String {
    let header = [
        "KEY",
        "MODE",
        "HOLDER",
        "PID",
        "SINCE",
        "EXPIRES IN",
        "FENCE",
        "WAITERS",
        "METADATA",
    ];
    let rows: Vec<[String; 9]> = infos
        .iter()
        .map(|i| {
            [
                printable(&i.key),
                match i.mode {
                    Some(LockMode::Read) => format!("read({})", i.readers),
                    Some(LockMode::Write) => "write".to_owned(),
                    // Cooling down, a read-write lock has no mode either: not known.
                    None if i.cooling_until.is_some() => "-".to_owned(),
                    None => "mutex".to_owned(),
                },
                holder::short(i),
                holder::pid(i).map_or_else(String::new, |p| p.to_string()),
                holder::since(i).map_or_else(String::new, rfc3339),
                i.remaining_ttl.map_or_else(|| "never".to_owned(), human),
                holder::fence(i).map_or_else(String::new, |f| f.to_string()),
                i.waiters.to_string(),
                i.metadata.as_deref().map_or_else(String::new, printable),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let render = |cells: &[String]| {
        let mut line = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        line.trim_end().to_owned()
    };
    let mut out = vec![render(&header.map(str::to_owned))];
    out.extend(rows.iter().map(|r| render(r)));
    out.join("\n")
}

/// `status` of a semaphore: exit 0 when a permit is held, 1 when none is.
fn semaphore_status(
    locks: &LockClient,
    server: &str,
    key: &str,
    json: bool,
) -> Result<i32, Failure> {
    let info = locks
        .semaphore(key, 1)
        .and_then(|s| s.inspect())
        .map_err(|e| Failure::from_lock_error(&e, server))?;
    let text = if json {
        semaphore_json(locks.namespace(), &info).render()
    } else {
        let mut lines = vec![format!(
            "semaphore {:?}: {} of {} permits in use",
            info.name, info.in_use, info.limit
        )];
        if info.waiters > 0 || info.queued > 0 {
            let fair = if info.queued > 0 {
                format!(" ({} queued fairly)", info.queued)
            } else {
                String::new()
            };
            lines.push(format!("  {:<11} {}{fair}", "waiters", info.waiters));
        }
        for p in &info.holders {
            let meta = p
                .metadata
                .as_deref()
                .map_or_else(String::new, |m| format!(", metadata {}", printable(m)));
            let who = match (&p.host, p.pid, p.acquired_at) {
                (Some(host), Some(pid), Some(since)) => {
                    format!("{} (pid {pid}) since {}", printable(host), rfc3339(since))
                }
                _ => "nobody yet: handed over to a waiter that has not claimed it".to_owned(),
            };
            lines.push(format!(
                "  {:<11} {who}, expires in {}, fencing {}{meta}",
                "permit",
                human(p.remaining_ttl),
                p.fencing_token
            ));
        }
        lines.join("\n")
    };
    print(&text);
    Ok(if info.in_use > 0 { 0 } else { exit::FREE })
}

fn semaphore_json(namespace: &str, info: &SemaphoreInfo) -> Json {
    let holders = info
        .holders
        .iter()
        .map(|p| {
            // A permit just handed to a waiter has no holder stored yet: null.
            Json::Object(vec![
                ("host", Json::opt_str(p.host.clone())),
                ("pid", Json::opt_int(p.pid.map(u128::from))),
                ("acquired_at", Json::opt_str(p.acquired_at.map(rfc3339))),
                ("remaining_ttl_ms", Json::Int(p.remaining_ttl.as_millis())),
                ("fencing_token", Json::Int(u128::from(p.fencing_token))),
                ("metadata", Json::opt_str(p.metadata.clone())),
            ])
        })
        .collect();
    Json::Object(vec![
        ("key", Json::Str(info.name.clone())),
        ("namespace", Json::Str(namespace.to_owned())),
        ("kind", Json::Str("semaphore".to_owned())),
        ("held", Json::Bool(info.in_use > 0)),
        ("limit", Json::Int(u128::from(info.limit))),
        ("in_use", Json::Int(u128::from(info.in_use))),
        ("available", Json::Int(u128::from(info.available))),
        ("waiters", Json::Int(u128::from(info.waiters))),
        ("queued", Json::Int(u128::from(info.queued))),
        ("holders", Json::Array(holders)),
    ])
}

/// One row per semaphore: permits in use of the limit, and waiters.
fn semaphore_table(infos: &[SemaphoreInfo]) -> String {
    let width = infos
        .iter()
        .map(|i| printable(&i.name).chars().count())
        .max()
        .unwrap_or(0)
        .max("SEMAPHORE".len());
    let mut out = vec![format!("{:<width$}  IN USE  LIMIT  WAITERS", "SEMAPHORE")];
    for i in infos {
        out.push(format!(
            "{:<width$}  {:<6}  {:<5}  {}",
            printable(&i.name),
            i.in_use,
            i.limit,
            i.waiters
        ));
    }
    out.join("\n")
}
