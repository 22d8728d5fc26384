//! Who holds a lock, worded for people and for JSON: the holder's host and pid, or what the
//! lock is when nobody's information is stored with it.
//!
//! Two states have none (`LockInfo`'s host, pid and acquisition time are then `None`): a lock
//! cooling down after its release (`run --cooldown`), which nobody owns until it frees, and a
//! lock a release has just handed to a waiter, until that waiter's first renewal writes its
//! own information. Those are shown as what they are; in JSON the unknown fields are null.

use std::time::SystemTime;

use redis_lock::LockInfo;

use crate::clock::{rfc3339, unix_ms};
use crate::duration::human;
use crate::json::Json;

/// Why a lock has no holder information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nobody {
    /// Released with a cool-down: ownerless until it frees (`until`).
    Cooling(SystemTime),
    /// Released by its holder and kept taken, ownerless, without a cool-down time.
    Released,
    /// Handed over to a waiter that has not yet written its own information.
    HandedOver,
}

/// `None` when the holder's host and pid are known.
pub(crate) fn nobody(info: &LockInfo) -> Option<Nobody> {
    if info.host.is_some() {
        return None;
    }
    Some(match info.cooling_until {
        Some(until) => Nobody::Cooling(until),
        None if !info.owned => Nobody::Released,
        None => Nobody::HandedOver,
    })
}

/// `host (pid N)`, or `nobody: cooling down until …` and the like.
pub(crate) fn describe(info: &LockInfo) -> String {
    match nobody(info) {
        None => format!(
            "{} (pid {})",
            printable(info.host.as_deref().unwrap_or_default()),
            info.pid.unwrap_or_default()
        ),
        Some(Nobody::Cooling(until)) => format!("nobody: cooling down until {}", rfc3339(until)),
        Some(Nobody::Released) => "nobody: released by its holder, kept taken".to_owned(),
        Some(Nobody::HandedOver) => {
            "nobody yet: handed over to a waiter that has not claimed it".to_owned()
        }
    }
}

/// For a one-column cell: the host, or `(cooling down)`, `(released)`, `(handed over)`.
pub(crate) fn short(info: &LockInfo) -> String {
    match nobody(info) {
        None => printable(info.host.as_deref().unwrap_or_default()),
        Some(Nobody::Cooling(_)) => "(cooling down)".to_owned(),
        Some(Nobody::Released) => "(released)".to_owned(),
        Some(Nobody::HandedOver) => "(handed over)".to_owned(),
    }
}

/// The pid, when a holder is known.
pub(crate) fn pid(info: &LockInfo) -> Option<u32> {
    info.pid
}

/// When the holder took the lock, when a holder is known.
pub(crate) fn since(info: &LockInfo) -> Option<SystemTime> {
    info.acquired_at
}

/// The fencing token of the acquisition; 0 is what the library reports when none is stored
/// (a read-write lock cooling down): tokens start at 1.
pub(crate) fn fence(info: &LockInfo) -> Option<u64> {
    (info.fencing_token > 0).then_some(info.fencing_token)
}

/// `held by host (pid 42) for 1m 05s, expires in 28.1s`, or what the lock is instead of held
/// by someone: for one-line messages.
pub(crate) fn phrase(info: &LockInfo) -> String {
    let mut text = match nobody(info) {
        None => format!("held by {}", describe(info)),
        // The cool-down end is when it frees: an expiry would only say it again.
        Some(Nobody::Cooling(until)) => {
            return format!("cooling down until {} (held by nobody)", rfc3339(until));
        }
        Some(Nobody::Released) => "released by its holder and kept taken by nobody".to_owned(),
        Some(Nobody::HandedOver) => "just handed over to a waiter".to_owned(),
    };
    if let Some(age) = since(info).and_then(|t| SystemTime::now().duration_since(t).ok()) {
        text.push_str(&format!(" for {}", human(age)));
    }
    if let Some(ttl) = info.remaining_ttl {
        text.push_str(&format!(", expires in {}", human(ttl)));
    }
    text
}

/// `host`, `pid`, `acquired_at` and `acquired_at_unix_ms` for JSON: null when unknown.
pub(crate) fn json_fields(info: &LockInfo) -> [(&'static str, Json); 4] {
    let since = since(info);
    [
        ("host", Json::opt_str(info.host.clone())),
        ("pid", Json::opt_int(pid(info).map(u128::from))),
        ("acquired_at", Json::opt_str(since.map(rfc3339))),
        ("acquired_at_unix_ms", Json::opt_int(since.map(unix_ms))),
    ]
}

/// Control characters (a newline in a host name or metadata) would break one-line layouts.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
