//! Which locks are held: per client, for `release_all`; and per thread, so a reentrant
//! acquisition can join one instead of waiting for itself.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::Inner;
use super::lease::Lease;

/// The leases a client holds.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    held: Mutex<HashMap<u64, Weak<Lease>>>,
    next: AtomicU64,
}

impl Registry {
    /// A fresh lease id.
    pub(crate) fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn remember(&self, lease: &Arc<Lease>) {
        self.held.lock().insert(lease.id, Arc::downgrade(lease));
    }

    pub(crate) fn forget(&self, lease: &Lease) {
        self.held.lock().remove(&lease.id);
    }

    /// Entries: leases held, or given up by a failed release while a guard lives.
    #[cfg(feature = "testing")]
    pub(crate) fn len(&self) -> usize {
        self.held.lock().len()
    }

    pub(crate) fn leases(&self) -> Vec<Arc<Lease>> {
        self.held
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

thread_local! {
    /// (client, lock name, lease) for every lock acquired on this thread. Entries whose lease
    /// is gone are pruned on the next acquisition.
    static HELD_HERE: RefCell<Vec<(*const Inner, String, Weak<Lease>)>> = const { RefCell::new(Vec::new()) };
}

/// A live lease of `name` acquired on this thread through this client, if any.
pub(crate) fn held_here(inner: &Arc<Inner>, name: &str) -> Option<Arc<Lease>> {
    all_held_here(inner, name).into_iter().next()
}

/// Every live lease of `name` acquired on this thread through this client, oldest first: a
/// thread holds two when it took a read share under its own write lock (a downgrade).
pub(crate) fn all_held_here(inner: &Arc<Inner>, name: &str) -> Vec<Arc<Lease>> {
    let me = Arc::as_ptr(inner);
    HELD_HERE.with_borrow(|held| {
        held.iter()
            .filter(|(client, n, _)| *client == me && n == name)
            .filter_map(|(_, _, lease)| lease.upgrade())
            .filter(|lease| !lease.is_released() && lease.lost_reason().is_none())
            .collect()
    })
}

/// Records a lease acquired on this thread.
pub(crate) fn remember_here(inner: &Arc<Inner>, lease: &Arc<Lease>) {
    HELD_HERE.with_borrow_mut(|held| {
        held.retain(|(_, _, l)| l.strong_count() > 0);
        held.push((
            Arc::as_ptr(inner),
            lease.name.clone(),
            Arc::downgrade(lease),
        ));
    });
}
