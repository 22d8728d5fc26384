//! `status`, `list` and `release --force`: what they print, as text or JSON.

use std::io::Write;
use std::time::SystemTime;

use redis_lock::{LockClient, LockInfo, LockMode};

use crate::clock::{rfc3339, unix_ms};
use crate::duration::human;
use crate::exit::{self, Failure};
use crate::json::Json;

/// `redis-lock status KEY`: exit 0 when held, 1 when free.
pub(crate) fn status(
    locks: &LockClient,
    server: &str,
    key: &str,
    json: bool,
) -> Result<i32, Failure> {
    let info = locks
        .inspect(key)
        .map_err(|e| Failure::from_lock_error(&e, server))?;
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
    if json {
        let items = infos
            .iter()
            .map(|info| lock_json(locks.namespace(), info))
            .collect();
        print(&Json::Array(items).render());
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
    let broken = locks
        .force_release(key)
        .map_err(|e| Failure::from_lock_error(&e, server))?;
    let text = match (&broken, json) {
        (Some((host, pid)), true) => Json::Object(vec![
            ("key", Json::Str(key.to_owned())),
            ("namespace", Json::Str(locks.namespace().to_owned())),
            ("broken", Json::Bool(true)),
            ("host", Json::Str(host.clone())),
            ("pid", Json::Int(u128::from(*pid))),
        ])
        .render(),
        (None, true) => Json::Object(vec![
            ("key", Json::Str(key.to_owned())),
            ("namespace", Json::Str(locks.namespace().to_owned())),
            ("broken", Json::Bool(false)),
        ])
        .render(),
        (Some((host, pid)), false) => {
            format!("broke lock {key:?}, held by {host} (pid {pid})")
        }
        (None, false) => format!("lock {key:?} was not held; nothing to break"),
    };
    print(&text);
    Ok(if broken.is_some() { 0 } else { exit::FREE })
}

/// Prints `text` and a newline on stdout. A closed pipe (`| head`) is not an error worth a
/// panic: the reader has what it wanted.
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

fn lock_json(namespace: &str, info: &LockInfo) -> Json {
    Json::Object(vec![
        ("key", Json::Str(info.key.clone())),
        ("namespace", Json::Str(namespace.to_owned())),
        ("held", Json::Bool(true)),
        ("host", Json::Str(info.host.clone())),
        ("pid", Json::Int(u128::from(info.pid))),
        ("acquired_at", Json::Str(rfc3339(info.acquired_at))),
        ("acquired_at_unix_ms", Json::Int(unix_ms(info.acquired_at))),
        (
            "remaining_ttl_ms",
            Json::opt_int(info.remaining_ttl.map(|d| d.as_millis())),
        ),
        ("fencing_token", Json::Int(u128::from(info.fencing_token))),
        ("metadata", Json::opt_str(info.metadata.clone())),
        ("owned", Json::Bool(info.owned)),
        ("hold_until", Json::opt_str(info.hold_until.map(rfc3339))),
        (
            "cooling_until",
            Json::opt_str(info.cooling_until.map(rfc3339)),
        ),
        ("waiters", Json::Int(u128::from(info.waiters))),
        ("queued", Json::Int(u128::from(info.queued))),
        ("mode", Json::opt_str(info.mode.map(|m| m.to_string()))),
        ("readers", Json::Int(u128::from(info.readers))),
        (
            "writers_waiting",
            Json::Int(u128::from(info.writers_waiting)),
        ),
    ])
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
    field(holder, format!("{} (pid {})", info.host, info.pid));
    field(
        "since",
        format!("{} ({})", rfc3339(info.acquired_at), ago(info.acquired_at)),
    );
    field(
        "expires in",
        info.remaining_ttl
            .map_or_else(|| "never (the key has no TTL)".to_owned(), human),
    );
    field("fencing", info.fencing_token.to_string());
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
                    None => "mutex".to_owned(),
                },
                printable(&i.host),
                i.pid.to_string(),
                rfc3339(i.acquired_at),
                i.remaining_ttl.map_or_else(|| "never".to_owned(), human),
                i.fencing_token.to_string(),
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

/// Control characters (a newline in metadata) would break the one-line-per-lock layout.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
