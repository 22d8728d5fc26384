//! Giving a lock back when Redis did not answer: a release, or the undo of an acquisition
//! whose outcome is unknown, sent again in the background until Redis answers it, so that no
//! lock that nobody owns stays taken for its whole TTL.
//!
//! Why in the background: a server that does not answer (frozen by a long command, `DEBUG
//! SLEEP`, a paused VM, a cut connection) still runs the requests it queued once it wakes,
//! and then holds a lock that nobody owns. The caller has its error already; the lock is
//! given back as soon as Redis can be reached again. What counts as answered:
//!
//! - a **release**: any answer (released, or already gone: either way nothing of ours is left);
//! - an **undo** of an acquisition: released, or twice nothing of ours. The attempt itself
//!   may still be queued behind a freeze, and run after a first "nothing ours"; the second
//!   answer comes after a turn of Redis's event loop in which every request queued during the
//!   freeze, the attempt's too, has run.
//!
//! A job stops when its lock would have expired anyway (`until`) or the client is dropped.
//! One thread per client at most (`redis-lock-giveback`), started by the first job and gone
//! when the last one is done; it holds the client only while it sends.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::Inner;
use super::primitive::Lock;
use crate::error::Result;
use crate::wire::{Form, LockKeys, Release, ReleaseArgs};

/// The first pause between tries, doubled after each up to `MAX_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// What is being given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A release of a lock we held: done at the first answer.
    Release,
    /// The undo of an acquisition whose outcome is unknown: done when released, or at the
    /// second "nothing ours".
    Undo,
}

/// One lock to give back. Owned: it outlives the call that failed.
pub(crate) struct Job {
    pub(crate) primitive: Arc<dyn Lock>,
    pub(crate) keys: LockKeys,
    pub(crate) token: String,
    pub(crate) grant: String,
    pub(crate) registration: String,
    pub(crate) cooldown: Duration,
    /// Taken on the native fast path (see `wire::Form`), and what it wrote if known.
    pub(crate) native: bool,
    pub(crate) value: Option<String>,
    pub(crate) kind: Kind,
    /// When the lock would have expired: nothing is left to give back after it.
    pub(crate) until: Instant,
}

/// Without the owner token, grant or written value.
impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.keys.name())
            .field("kind", &self.kind)
            .field("until", &self.until)
            .finish_non_exhaustive()
    }
}

/// What an answer means for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Done,
    Again,
}

/// The pure rule (see the module's documentation): `answer` to the job's latest try, with
/// `nothing_ours` such answers before it.
fn verdict(kind: Kind, answer: Option<Release>, nothing_ours: u32) -> Verdict {
    match (kind, answer) {
        (_, None) => Verdict::Again,
        (Kind::Release, Some(_)) => Verdict::Done,
        (Kind::Undo, Some(Release::Released | Release::Kept)) => Verdict::Done,
        (Kind::Undo, Some(Release::Late | Release::Lost)) if nothing_ours >= 1 => Verdict::Done,
        (Kind::Undo, Some(_)) => Verdict::Again,
    }
}

impl Job {
    /// One try.
    pub(crate) fn send(&self, inner: &Inner) -> Result<Release> {
        let form = match self.kind {
            Kind::Release => Form::of(self.native, self.value.as_deref()),
            // An acquisition's attempt took the native path if it was allowed to; a script
            // reads either form.
            Kind::Undo => Form::of(true, self.value.as_deref()),
        };
        inner.deployment.release(
            &*self.primitive,
            &ReleaseArgs {
                keys: &self.keys,
                token: &self.token,
                grant: &self.grant,
                registration: &self.registration,
                cooldown: self.cooldown,
                undo: self.kind == Kind::Undo,
                form,
                routed: false,
            },
        )
    }
}

/// A job and where it stands.
struct Pending {
    job: Job,
    next: Instant,
    pause: Duration,
    nothing_ours: u32,
}

#[derive(Default)]
struct State {
    pending: Vec<Pending>,
    /// Jobs the thread is sending now (out of `pending` meanwhile).
    sending: usize,
    /// The thread is running (or starting).
    running: bool,
    /// The client is gone.
    closed: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    woken: Condvar,
}

/// The client's jobs (see the module's documentation).
#[derive(Default)]
pub(crate) struct Givebacks {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Givebacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Givebacks")
            .field("pending", &self.shared.state.lock().pending.len())
            .finish()
    }
}

/// The client is gone: its thread stops at once.
impl Drop for Givebacks {
    fn drop(&mut self) {
        self.shared.state.lock().closed = true;
        self.shared.woken.notify_all();
    }
}

impl Givebacks {
    /// Jobs not done yet.
    #[cfg(feature = "testing")]
    pub(crate) fn pending(&self) -> usize {
        let state = self.shared.state.lock();
        state.pending.len() + state.sending
    }
}

impl Inner {
    /// Sends `job` once, now; when no answer comes (a connection error), again in the
    /// background until one does. Another error (the server refused it) is final: the lock
    /// expires with its TTL.
    pub(crate) fn give_back_now(self: &Arc<Self>, job: Job) {
        match job.send(self) {
            Ok(_) => {}
            Err(error) if error.is_connection_error() => {
                tracing::warn!(target: "redis_lock", key = job.keys.name(), %error, "giving back a lock failed; trying again in the background until Redis answers or it expires");
                self.give_back(job);
            }
            Err(error) => {
                tracing::warn!(target: "redis_lock", key = job.keys.name(), %error, "giving back a lock failed; it expires with its ttl");
            }
        }
    }

    /// Gives `job`'s lock back in the background (see the module's documentation).
    pub(crate) fn give_back(self: &Arc<Self>, job: Job) {
        let name = job.keys.name().to_owned();
        let shared = &self.givebacks.shared;
        let mut state = shared.state.lock();
        state.pending.push(Pending {
            job,
            next: Instant::now(),
            pause: FIRST_PAUSE,
            nothing_ours: 0,
        });
        if state.running {
            shared.woken.notify_all();
            return;
        }
        let (client, shared) = (Arc::downgrade(self), Arc::clone(shared));
        let spawned = std::thread::Builder::new()
            .name("redis-lock-giveback".into())
            .stack_size(128 * 1024)
            .spawn(move || work(&client, &shared));
        match spawned {
            Ok(_) => state.running = true,
            Err(error) => {
                state.pending.clear();
                tracing::warn!(target: "redis_lock", key = name, %error, "no thread to give back a lock whose release was not answered; it expires with its ttl");
            }
        }
    }
}

/// The thread: tries every job that is due, then sleeps until the next one is (or a new job
/// comes); ends when no job is left or the client is gone.
fn work(client: &Weak<Inner>, shared: &Shared) {
    loop {
        let due: Vec<Pending> = {
            let mut state = shared.state.lock();
            let now = Instant::now();
            state.pending.retain(|p| p.job.until > now);
            if state.closed || state.pending.is_empty() {
                state.pending.clear();
                state.running = false;
                return;
            }
            let next = state.pending.iter().map(|p| p.next).min().unwrap_or(now);
            if next > now {
                shared.woken.wait_until(&mut state, next);
                continue;
            }
            let (due, later) = std::mem::take(&mut state.pending)
                .into_iter()
                .partition(|p| p.next <= now);
            state.pending = later;
            state.sending = due.len();
            due
        };
        let Some(inner) = client.upgrade() else {
            shared.state.lock().closed = true;
            continue;
        };
        let mut again = Vec::new();
        for mut p in due {
            let answer = p.job.send(&inner).ok();
            let key = p.job.keys.name();
            match verdict(p.job.kind, answer, p.nothing_ours) {
                Verdict::Done => {
                    tracing::info!(target: "redis_lock", key, ?answer, "gave back a lock whose release was not answered, once Redis answered")
                }
                Verdict::Again => {
                    if answer.is_some() {
                        p.nothing_ours += 1;
                    }
                    p.next = Instant::now() + p.pause;
                    p.pause = (p.pause * 2).min(MAX_PAUSE);
                    again.push(p);
                }
            }
        }
        drop(inner);
        let mut state = shared.state.lock();
        state.pending.extend(again);
        state.sending = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_done_at_its_first_answer() {
        assert_eq!(verdict(Kind::Release, None, 0), Verdict::Again);
        for answer in [
            Release::Released,
            Release::Kept,
            Release::Late,
            Release::Lost,
        ] {
            assert_eq!(verdict(Kind::Release, Some(answer), 0), Verdict::Done);
        }
    }

    #[test]
    fn an_undo_is_done_when_released_or_at_the_second_nothing_ours() {
        assert_eq!(verdict(Kind::Undo, None, 5), Verdict::Again);
        assert_eq!(
            verdict(Kind::Undo, Some(Release::Released), 0),
            Verdict::Done
        );
        assert_eq!(verdict(Kind::Undo, Some(Release::Kept), 0), Verdict::Done);
        assert_eq!(verdict(Kind::Undo, Some(Release::Late), 0), Verdict::Again);
        assert_eq!(verdict(Kind::Undo, Some(Release::Lost), 0), Verdict::Again);
        assert_eq!(verdict(Kind::Undo, Some(Release::Late), 1), Verdict::Done);
        assert_eq!(verdict(Kind::Undo, Some(Release::Lost), 1), Verdict::Done);
    }
}
