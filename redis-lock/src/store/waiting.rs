//! Blocking waits on wake-up lists, shared: the threads of one client that wait on one lock
//! name form a *group* with ONE blocking connection, so the connections a process opens for
//! waiting grow with the lock names waited on, not with the waiting threads.
//!
//! Leader and followers, no thread of its own: one waiting thread of the group (the leader)
//! blocks in `BLPOP <every list of the group> <poke list> <timeout>` (a lock's lists share its
//! hash tag, so one `BLPOP` may name them all, on a Cluster too); the others sleep on a
//! condition variable. A popped element goes to the waiter it belongs to: a fair waiter's own
//! list to that waiter, the shared list to the longest-waiting member that pops it. When the
//! leader's own wait ends it passes the leadership, and the connection, to the next member.
//! A lone waiter is its own leader on its own connection: what it costs is what one waiter
//! cost before.
//!
//! What keeps a grant from being popped and dropped: a member leaves while the leader's
//! `BLPOP` is in flight only when that `BLPOP` does not name its list, or the leader pops
//! the same list (then the leader, or another member of that list, takes what comes).
//! Every other member named in the `BLPOP` (a fair waiter, a writer beside a reading leader)
//! is *pinned*: the `BLPOP`'s timeout is the earliest of their ends, and a pinned member that
//! must leave sooner (a cancel, or one that arrived with a shorter wait) ends the `BLPOP`
//! with a push onto the group's *poke list* (the cancel list of a group id, `wire::cancel`,
//! in the lock's slot), and leaves when it returns. A member whose list is not named yet gets
//! it named the same way. A peek (Redlock: `BLMOVE`, one source list, nothing taken) wakes
//! every member of its group and pins nobody; its leader, when cancellable, blocks in slices.
//! A cancel of a follower that is not pinned is a local wake-up: no request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::connection::{self, CheckoutError, PooledConn};
use super::timer::TimerHandle;
use super::{Store, WAKE_AFTER, Wake};
use crate::wire::{self, LockKeys, commands};

/// How long one slice of a cancellable peek (Redlock) blocks: `BLMOVE` has one source list,
/// so nothing can be pushed to end it early, and its leader looks at its cancel between slices.
const PEEK_CANCEL_SLICE: Duration = Duration::from_millis(10);

/// How long a member that may not leave yet sleeps between looks (it is woken when the
/// `BLPOP` it waits for returns; this only bounds a wake-up that never comes).
const PINNED_LOOK: Duration = Duration::from_millis(100);

/// One wait on a wake-up list.
pub(crate) struct WaitFor<'a> {
    /// The lock waited for: its key names the group, its cancel list the group's poke list.
    pub(crate) keys: &'a LockKeys,
    /// The wake-up list.
    pub(crate) list: &'a str,
    /// The waiter id (what a cancel names, `Store::wake`).
    pub(crate) waiter: &'a str,
    pub(crate) timeout: Duration,
    /// Take what comes (`BLPOP`); otherwise only be woken by it and leave it (`BLMOVE`).
    pub(crate) pop: bool,
    /// Whether the acquisition was cancelled (a cancel also calls `Store::wake`).
    pub(crate) cancelled: Option<&'a dyn Fn() -> bool>,
}

/// The groups of one store.
#[derive(Default)]
pub(crate) struct Hub {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    groups: HashMap<GroupKey, Group>,
    next: u64,
}

/// A group: the lock key, and for peeks the list (a peek blocks on one list).
type GroupKey = (String, Option<String>);

struct Group {
    /// The group id whose cancel list is the poke list (pop groups).
    id: String,
    /// The poke list's key.
    poke: String,
    /// In arrival order.
    members: Vec<Member>,
    /// The member that blocks for the group, if any.
    leader: Option<u64>,
    /// The connection, between the leader's calls.
    conn: Option<PooledConn>,
    /// The blocking call in flight.
    call: Option<Call>,
    /// A poke was sent since the call went out.
    poked: bool,
}

/// A blocking call in flight: the lists it names and when it times out.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    lists: Vec<String>,
    end: Instant,
}

struct Member {
    id: u64,
    waiter: String,
    list: String,
    end: Instant,
    /// A cancel reached it through `Store::wake`.
    cancelled: bool,
    /// How its wait ended, set by the leader.
    outcome: Option<Wake>,
    woken: Arc<Condvar>,
}

/// What the leader's blocking call came to.
#[derive(Debug, PartialEq, Eq)]
enum Blocked {
    /// `(list, element)` popped.
    Popped(String, String),
    /// A peek woken by an element.
    Peeked,
    TimedOut,
    /// A sentinel master moved: every member attempts again, on the new one.
    Moved,
    Failed,
}

// --- the pure decisions, unit-tested below ---

/// The member a popped element from `list` goes to: the first (longest-waiting) member still
/// waiting whose list it is. A fair waiter's own list has one member.
fn route(members: &[Member], list: &str) -> Option<usize> {
    members
        .iter()
        .position(|m| m.outcome.is_none() && m.list == list)
}

/// The next leader: the longest-waiting member still waiting, other than `but`. Popped
/// elements go to the longest-waiting member first, so the leader is usually the one a grant
/// is for: the thread woken by the `BLPOP`'s reply is the one that takes the lock (one wake-up
/// per handoff, as with a connection per waiter), and passing the leadership (a thread woken,
/// a `BLPOP` sent again) happens while the new holder holds the lock.
fn next_leader(members: &[Member], but: u64) -> Option<usize> {
    members
        .iter()
        .position(|m| m.outcome.is_none() && m.id != but)
}

/// The call the leader `leader` makes for the group at `now`: every member's list once (the
/// leader's first), the poke list for a pop, and until the earliest end of the leader and the
/// members it pins (those whose list is not the leader's). A peek names the one list and
/// pins nobody.
fn plan(members: &[Member], leader: usize, poke: Option<&str>, now: Instant) -> Call {
    let own = &members[leader];
    let mut lists = vec![own.list.clone()];
    let mut end = own.end;
    if poke.is_some() {
        for m in members.iter().filter(|m| m.outcome.is_none()) {
            if m.list != own.list {
                end = end.min(m.end);
            }
            if !lists.contains(&m.list) {
                lists.push(m.list.clone());
            }
        }
    }
    lists.extend(poke.map(str::to_owned));
    Call {
        lists,
        end: end.max(now),
    }
}

/// Whether member `m` may leave now, with `call` in flight for the leader `leader_list`: when
/// the call does not name its list, or the leader pops that list too.
fn may_leave(m: &Member, call: Option<&Call>, leader: Option<&Member>) -> bool {
    match call {
        None => true,
        Some(call) => {
            !call.lists.contains(&m.list)
                || leader.is_some_and(|l| l.id != m.id && l.list == m.list)
        }
    }
}

/// Whether member `m`, arriving or cancelled while `call` is in flight, needs the call ended
/// early: its list is not named, or it is pinned and must leave before the call ends.
fn needs_poke(m: &Member, call: &Call, leader: Option<&Member>, cancelled: bool) -> bool {
    if !call.lists.contains(&m.list) {
        return !cancelled;
    }
    let pinned = !leader.is_some_and(|l| l.id != m.id && l.list == m.list);
    let is_leader = leader.is_some_and(|l| l.id == m.id);
    is_leader && cancelled || pinned && (cancelled || m.end < call.end)
}

impl Group {
    fn index(&self, id: u64) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    fn leader(&self) -> Option<&Member> {
        self.leader
            .and_then(|id| self.members.iter().find(|m| m.id == id))
    }

    /// Ends every member still waiting with `wake` (a copy each).
    fn end_all(&mut self, wake: impl Fn() -> Wake) {
        for m in self.members.iter_mut().filter(|m| m.outcome.is_none()) {
            m.outcome = Some(wake());
            m.woken.notify_one();
        }
    }

    /// Passes the leadership on from `from` (whose wait ended) to the next member, if any.
    fn pass_on(&mut self, from: u64) {
        if self.leader != Some(from) {
            return;
        }
        self.leader = next_leader(&self.members, from).map(|i| {
            self.members[i].woken.notify_one();
            self.members[i].id
        });
    }
}

impl Hub {
    /// `(groups, members)`: the groups that wait now, and their waiting threads.
    #[cfg(feature = "testing")]
    pub(crate) fn waiting(&self) -> (usize, usize) {
        let state = self.state.lock();
        let members = state.groups.values().map(|g| g.members.len()).sum();
        (state.groups.len(), members)
    }

    /// Marks waiter `waiter` of lock `lock` cancelled and wakes it. `Some(group id)` when its
    /// group's blocking call must be ended with a poke (see the module's documentation).
    pub(crate) fn cancel(&self, lock: &str, waiter: &str) -> Option<String> {
        let mut state = self.state.lock();
        for ((key, peek), group) in &mut state.groups {
            if key != lock {
                continue;
            }
            let Some(i) = group
                .members
                .iter()
                .position(|m| m.waiter == waiter && m.outcome.is_none())
            else {
                continue;
            };
            group.members[i].cancelled = true;
            group.members[i].woken.notify_one();
            let poke = peek.is_none()
                && !group.poked
                && group
                    .call
                    .as_ref()
                    .is_some_and(|call| needs_poke(&group.members[i], call, group.leader(), true));
            if poke {
                group.poked = true;
                return Some(group.id.clone());
            }
            return None;
        }
        None
    }
}

impl Store {
    /// Waits on the wake-up list `w.list` for at most `w.timeout`, in the group of the
    /// threads of this client that wait on the same lock (see the module's documentation).
    pub(crate) fn wait(&self, w: &WaitFor<'_>) -> Wake {
        let key: GroupKey = (w.keys.lock.clone(), (!w.pop).then(|| w.list.to_owned()));
        let cancelled = || w.cancelled.is_some_and(|c| c());
        let mut state = self.waiting.state.lock();
        // Looked at under the hub's lock, which a cancel's wake-up takes too: a cancel either
        // is seen here or finds this member below.
        if cancelled() {
            return Wake::Nothing;
        }
        if !state.groups.contains_key(&key) {
            let Ok(id) = wire::token::new_token() else {
                return Wake::Failed;
            };
            let poke = w.keys.cancel(&id);
            state.groups.insert(
                key.clone(),
                Group {
                    id,
                    poke,
                    members: Vec::new(),
                    leader: None,
                    conn: None,
                    call: None,
                    poked: false,
                },
            );
        }
        let id = state.next;
        state.next += 1;
        let woken = Arc::new(Condvar::new());
        let group = state.groups.get_mut(&key).expect("made above");
        group.members.push(Member {
            id,
            waiter: w.waiter.to_owned(),
            list: w.list.to_owned(),
            end: Instant::now() + w.timeout,
            cancelled: false,
            outcome: None,
            woken: Arc::clone(&woken),
        });
        if group.leader.is_none() {
            group.leader = Some(id);
        } else if w.pop
            && !group.poked
            && group.call.as_ref().is_some_and(|call| {
                needs_poke(
                    group.members.last().expect("pushed"),
                    call,
                    group.leader(),
                    false,
                )
            })
        {
            group.poked = true;
            let gid = group.id.clone();
            drop(state);
            self.poke(w.keys, &gid);
            state = self.waiting.state.lock();
        }
        self.wait_in_group(state, &key, id, w, &woken)
    }

    fn wait_in_group<'s>(
        &'s self,
        mut state: MutexGuard<'s, State>,
        key: &GroupKey,
        id: u64,
        w: &WaitFor<'_>,
        woken: &Condvar,
    ) -> Wake {
        loop {
            let group = state.groups.get_mut(key).expect("a member keeps its group");
            let i = group.index(id).expect("a member leaves only here");
            if group.members[i].outcome.is_some() {
                let m = group.members.remove(i);
                group.pass_on(id);
                if group.members.is_empty() {
                    // Its connection goes back to the pool.
                    state.groups.remove(key);
                }
                return m.outcome.expect("looked at above");
            }
            let now = Instant::now();
            let cancelled = group.members[i].cancelled || w.cancelled.is_some_and(|c| c());
            if group.leader == Some(id) {
                if cancelled || now >= group.members[i].end {
                    group.members[i].outcome = Some(Wake::Nothing);
                    continue;
                }
                state = self.lead(state, key, i, w);
                continue;
            }
            let m = &group.members[i];
            let done = cancelled || now >= m.end;
            if done && may_leave(m, group.call.as_ref(), group.leader()) {
                group.members[i].outcome = Some(Wake::Nothing);
                continue;
            }
            let until = if done { now + PINNED_LOOK } else { m.end };
            let _ = woken.wait_until(&mut state, until);
        }
    }

    /// One blocking call by the leader (member `i`) for its group, and the routing of what it
    /// brought. Ends the members whose wait is over first.
    fn lead<'s>(
        &'s self,
        mut state: MutexGuard<'s, State>,
        key: &GroupKey,
        i: usize,
        w: &WaitFor<'_>,
    ) -> MutexGuard<'s, State> {
        let now = Instant::now();
        let group = state.groups.get_mut(key).expect("a member keeps its group");
        for m in group.members.iter_mut().filter(|m| m.outcome.is_none()) {
            if m.cancelled || now >= m.end {
                m.outcome = Some(Wake::Nothing);
                m.woken.notify_one();
            }
        }
        let poke = w.pop.then(|| group.poke.clone());
        let mut call = plan(&group.members, i, poke.as_deref(), now);
        if !w.pop && w.cancelled.is_some() {
            call.end = call.end.min(now + PEEK_CANCEL_SLICE);
        }
        group.call = Some(call.clone());
        group.poked = false;
        let conn = group.conn.take();
        drop(state);
        let conn = match conn {
            Some(conn) => Ok(conn),
            None => self.waiting_conn(call.end.saturating_duration_since(now)),
        };
        let (blocked, conn) = match conn {
            Ok(mut conn) => {
                let timeout = call.end.saturating_duration_since(Instant::now());
                let blocked = self.block(&mut conn, &call.lists, timeout, w.pop);
                let kept = (blocked != Blocked::Failed).then_some(conn);
                (blocked, kept)
            }
            Err(()) => (Blocked::Failed, None),
        };
        let mut state = self.waiting.state.lock();
        let group = state.groups.get_mut(key).expect("a member keeps its group");
        group.call = None;
        group.conn = conn;
        match blocked {
            Blocked::Popped(list, element) => {
                if poke.as_deref() != Some(list.as_str()) {
                    let wake = wire::parse_grant(&element).map_or(Wake::Nothing, Wake::Grant);
                    match route(&group.members, &list) {
                        Some(to) => {
                            group.members[to].outcome = Some(wake);
                            group.members[to].woken.notify_one();
                        }
                        // Cannot happen (a named list keeps a member that pops it); said if
                        // it does, since a grant would lapse after the handoff grace.
                        None => {
                            tracing::warn!(target: "redis_lock", "a wake-up popped for a waiter that had left")
                        }
                    }
                }
            }
            Blocked::Peeked | Blocked::Moved => group.end_all(|| Wake::Nothing),
            Blocked::Failed => group.end_all(|| Wake::Failed),
            Blocked::TimedOut => {}
        }
        state
    }

    /// A connection to block on, from the waiting pool.
    fn waiting_conn(&self, timeout: Duration) -> Result<PooledConn, ()> {
        let pool = &self.waiters;
        let conn = match pool.try_get().filter(|c| c.opened()) {
            Some(conn) => Ok(conn),
            None => connection::checkout(
                pool,
                self.timeouts.pool.min(timeout.max(self.timeouts.connect)),
            ),
        };
        match conn {
            Ok(conn) => Ok(PooledConn::waiter(conn, &self.requests)),
            Err(CheckoutError::Connect(error)) => {
                // Refused, or no answer within the connect timeout: this store is unreachable.
                tracing::debug!(target: "redis_lock", %error, "no connection to wait on");
                Err(())
            }
            Err(CheckoutError::Pool(error)) => {
                tracing::debug!(target: "redis_lock", %error, "no connection to wait on");
                Err(())
            }
        }
    }

    /// Ends the group's blocking call: a push onto its poke list.
    fn poke(&self, keys: &LockKeys, group: &str) {
        let sent = self
            .conn()
            .and_then(|mut conn| wire::cancel::wake(keys, group).on(&mut conn));
        if let Err(error) = sent {
            tracing::debug!(target: "redis_lock", %error, "could not end a group's blocking wait; it ends at its timeout");
        }
    }

    /// `BLPOP lists timeout` (or, for a peek, `BLMOVE list list`), with the wake-up `PING`s
    /// that make the server end it on time; on a sentinel master cut into slices of the check
    /// interval (a master that moved away would hold it until its whole timeout).
    fn block(
        &self,
        conn: &mut PooledConn,
        lists: &[String],
        timeout: Duration,
        pop: bool,
    ) -> Blocked {
        let wake: [TimerHandle; 2] = WAKE_AFTER.map(|after| self.wake_at(timeout + after));
        let end = Instant::now() + timeout;
        let (slice, epoch) = match self.sentinel_every() {
            Some((every, epoch)) if pop => (every, Some(epoch)),
            _ => (timeout, None),
        };
        let blocked = loop {
            let left = end.saturating_duration_since(Instant::now());
            let block = left.min(slice);
            let result = if pop {
                conn.blocking_query::<Option<(String, String)>>(
                    &commands::pop_grant(lists, block),
                    block,
                )
                .map(|popped| popped.map_or(Blocked::TimedOut, |(l, e)| Blocked::Popped(l, e)))
            } else {
                conn.blocking_query::<Option<String>>(
                    &commands::peek_grant(&lists[0], block),
                    block,
                )
                .map(|peeked| peeked.map_or(Blocked::TimedOut, |_| Blocked::Peeked))
            };
            let moved = epoch.is_some_and(|e| self.epoch() != Some(e));
            match result {
                Err(error) => {
                    tracing::debug!(target: "redis_lock", %error, "waiting for a release failed");
                    break Blocked::Failed;
                }
                Ok(Blocked::TimedOut) if moved => break Blocked::Moved,
                Ok(Blocked::TimedOut) if block < left => {}
                Ok(blocked) => break blocked,
            }
        };
        wake.iter().for_each(TimerHandle::cancel);
        blocked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, list: &str, end: Instant) -> Member {
        Member {
            id,
            waiter: format!("w{id}"),
            list: list.to_owned(),
            end,
            cancelled: false,
            outcome: None,
            woken: Arc::new(Condvar::new()),
        }
    }

    #[test]
    fn a_popped_element_goes_to_the_longest_waiting_member_of_its_list() {
        let end = Instant::now();
        let mut members = vec![
            member(1, "s:a", end),
            member(2, "s", end),
            member(3, "s", end),
        ];
        assert_eq!(route(&members, "s"), Some(1));
        assert_eq!(route(&members, "s:a"), Some(0));
        members[1].outcome = Some(Wake::Nothing);
        assert_eq!(route(&members, "s"), Some(2));
        assert_eq!(route(&members, "other"), None);
    }

    #[test]
    fn the_leadership_goes_to_the_longest_waiting_member_still_waiting() {
        let end = Instant::now();
        let mut members = vec![
            member(1, "s", end),
            member(2, "s", end),
            member(3, "s", end),
        ];
        assert_eq!(next_leader(&members, 1), Some(1));
        assert_eq!(next_leader(&members, 2), Some(0));
        members[1].outcome = Some(Wake::Nothing);
        assert_eq!(next_leader(&members, 1), Some(2));
        members[2].outcome = Some(Wake::Nothing);
        assert_eq!(next_leader(&members, 1), None);
    }

    #[test]
    fn a_call_names_every_list_once_and_ends_with_the_earliest_pinned_member() {
        let now = Instant::now();
        let at = |ms| now + Duration::from_millis(ms);
        let members = vec![
            member(1, "s", at(500)),
            member(2, "s", at(100)),
            member(3, "s:c", at(300)),
            member(4, "s:d", at(900)),
        ];
        let call = plan(&members, 0, Some("p"), now);
        assert_eq!(call.lists, ["s", "s:c", "s:d", "p"]);
        // Member 2 pops the leader's list: it is not pinned, and may leave on its own.
        assert_eq!(call.end, at(300));
        // A peek names its one list and ends with the leader.
        let peek = plan(&members, 1, None, now);
        assert_eq!((peek.lists, peek.end), (vec!["s".to_owned()], at(100)));
        // An end in the past is now.
        assert_eq!(plan(&[member(1, "s", at(0))], 0, None, at(5)).end, at(5));
    }

    #[test]
    fn only_members_the_call_does_not_pin_may_leave_during_it() {
        let now = Instant::now();
        let leader = member(1, "s", now);
        let shared = member(2, "s", now);
        let fair = member(3, "s:c", now);
        let newcomer = member(4, "s:d", now);
        let call = Call {
            lists: vec!["s".into(), "s:c".into(), "p".into()],
            end: now,
        };
        assert!(may_leave(&shared, Some(&call), Some(&leader)));
        assert!(!may_leave(&fair, Some(&call), Some(&leader)));
        assert!(may_leave(&newcomer, Some(&call), Some(&leader)));
        assert!(may_leave(&fair, None, Some(&leader)));
        // A fair leader pins the members of the shared list.
        assert!(!may_leave(&shared, Some(&call), Some(&fair)));
    }

    #[test]
    fn a_poke_is_needed_for_a_list_not_named_or_a_pinned_member_that_must_leave() {
        let now = Instant::now();
        let at = |ms| now + Duration::from_millis(ms);
        let leader = member(1, "s", at(500));
        let call = Call {
            lists: vec!["s".into(), "s:c".into(), "p".into()],
            end: at(500),
        };
        // Arriving: a list not named.
        assert!(needs_poke(
            &member(4, "s:d", at(900)),
            &call,
            Some(&leader),
            false
        ));
        // Arriving on the leader's list: covered, and free to leave.
        assert!(!needs_poke(
            &member(2, "s", at(100)),
            &call,
            Some(&leader),
            false
        ));
        assert!(!needs_poke(
            &member(2, "s", at(100)),
            &call,
            Some(&leader),
            true
        ));
        // Pinned: only when it must leave before the call ends.
        assert!(!needs_poke(
            &member(3, "s:c", at(900)),
            &call,
            Some(&leader),
            false
        ));
        assert!(needs_poke(
            &member(3, "s:c", at(100)),
            &call,
            Some(&leader),
            false
        ));
        assert!(needs_poke(
            &member(3, "s:c", at(900)),
            &call,
            Some(&leader),
            true
        ));
        // The leader cancelled.
        assert!(needs_poke(&leader, &call, Some(&leader), true));
        // Cancelled and not named: it just leaves.
        assert!(!needs_poke(
            &member(4, "s:d", at(900)),
            &call,
            Some(&leader),
            true
        ));
    }
}
