//! Which locks this client found busy lately. An attempt on such a lock skips the native fast
//! path (`wire::mutex`): that path only takes a free lock, and on a busy one its answer costs
//! a second round trip (the script that registers the waiter) on top of its own. A free lock
//! pays nothing for this but one lookup.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a busy answer counts: a lock that was contended a moment ago is likely to be so
/// again, one idle for longer is likely free.
const REMEMBER: Duration = Duration::from_secs(2);

/// At most this many names are remembered; past it the stale ones are dropped, and if all
/// are fresh, all of them (the hint only saves a round trip, it decides nothing).
const MAX_NAMES: usize = 4096;

/// Lock keys this client found busy, with when it last did.
#[derive(Debug, Default)]
pub(crate) struct BusyHints {
    seen: Mutex<HashMap<String, Instant>>,
}

impl BusyHints {
    /// Whether an attempt on `key` found it busy within the last [`REMEMBER`].
    pub(crate) fn recently_busy(&self, key: &str) -> bool {
        let seen = self.seen.lock();
        !seen.is_empty() && seen.get(key).is_some_and(|at| at.elapsed() < REMEMBER)
    }

    /// An attempt on `key` found it busy now.
    pub(crate) fn busy(&self, key: &str) {
        let mut seen = self.seen.lock();
        if let Some(at) = seen.get_mut(key) {
            *at = Instant::now();
            return;
        }
        if seen.len() >= MAX_NAMES {
            seen.retain(|_, at| at.elapsed() < REMEMBER);
            if seen.len() >= MAX_NAMES {
                seen.clear();
            }
        }
        seen.insert(key.to_owned(), Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_lock_is_remembered_and_the_map_stays_bounded() {
        let hints = BusyHints::default();
        assert!(!hints.recently_busy("lock:{a}"));
        hints.busy("lock:{a}");
        assert!(hints.recently_busy("lock:{a}"));
        assert!(!hints.recently_busy("lock:{b}"));
        for i in 0..MAX_NAMES + 10 {
            hints.busy(&format!("lock:{{n{i}}}"));
        }
        assert!(hints.seen.lock().len() <= MAX_NAMES);
        // An answer older than REMEMBER no longer counts.
        hints
            .seen
            .lock()
            .insert("lock:{old}".into(), Instant::now() - REMEMBER);
        assert!(!hints.recently_busy("lock:{old}"));
    }
}
