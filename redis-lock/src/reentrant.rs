//! Which locks this thread holds, so a reentrant acquisition can join one instead of waiting
//! for itself.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use crate::lease::Lease;
use crate::ops::Inner;

thread_local! {
    /// (client, lock name, lease) for every lock acquired on this thread. Entries whose lease
    /// is gone or released are pruned on the next acquisition.
    static HELD_HERE: RefCell<Vec<(*const Inner, String, Weak<Lease>)>> = const { RefCell::new(Vec::new()) };
}

/// The live lease of `name` acquired on this thread through this client, if any.
pub(crate) fn find(inner: &Arc<Inner>, name: &str) -> Option<Arc<Lease>> {
    let me = Arc::as_ptr(inner);
    HELD_HERE.with_borrow(|held| {
        held.iter()
            .filter(|(client, n, _)| *client == me && n == name)
            .filter_map(|(_, _, lease)| lease.upgrade())
            .find(|lease| !lease.is_released() && lease.lost_reason().is_none())
    })
}

pub(crate) fn remember(inner: &Arc<Inner>, lease: &Arc<Lease>) {
    HELD_HERE.with_borrow_mut(|held| {
        held.retain(|(_, _, l)| l.strong_count() > 0);
        held.push((
            Arc::as_ptr(inner),
            lease.name.clone(),
            Arc::downgrade(lease),
        ));
    });
}
