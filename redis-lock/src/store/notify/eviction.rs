//! Knowing when notification is blind: a server whose tracking table is full evicts keys
//! from it, and an eviction caused while the tracked connection's own command runs sends no
//! invalidation (`NOLOOP`). A connection of its own without `NOLOOP`, which sends nothing
//! else, therefore reads a canary nobody writes (`wire::tracking::canary`); its invalidation
//! can only be an eviction, and is always announced. (Read on the tracked connection, the
//! canary itself was forgotten silently now and then, and with it every held key: blind while
//! saying `Notified`.) Then notification is off (`Evicting`: renewals find losses) until a
//! probe, after a pause that doubles while the table stays full, keeps the canary tracked for
//! a while (`Probing`).

use std::time::{Duration, Instant};

use std::sync::atomic::Ordering;

use redis::{ConnectionLike, RedisResult, Value};

use super::{Conn, Manager, Phase, Refusal, Shared, failed_with, server_answer, tracking};
use crate::store::plain::Closer;

/// The first pause of an evicting server's notification before it probes again (doubling up to
/// `EVICTING_MAX` while the server still evicts), and how long a probe's canary must stay
/// tracked for notification to be on again.
pub(super) const EVICTING_FIRST: Duration = Duration::from_secs(1);
const EVICTING_MAX: Duration = Duration::from_secs(30);
const PROBE_WINDOW: Duration = Duration::from_secs(1);

/// The connection that reads the canary, and its socket as the listener looks at it for a
/// hang-up.
pub(super) struct CanaryConn {
    conn: Conn,
    closer: Option<Closer>,
}

/// The timing of the `Evicting` and `Probing` phases, and of the canary's reads.
#[derive(Debug)]
pub(super) struct Eviction {
    /// The pause before the next probe (doubles each time a probe finds the table full).
    pub(super) pause: Duration,
    /// `Evicting`: when to probe. `Probing`: when the probe succeeds.
    pub(super) next: Option<Instant>,
    /// When the canary was last read (tracked again).
    pub(super) canary_read: Option<Instant>,
    /// When a probe last found room: an eviction soon after is the same full table, and the
    /// pause goes on doubling.
    pub(super) room_at: Option<Instant>,
}

impl Shared {
    /// Opens the canary's connection, redirecting to listener `id`, and reads the canary on
    /// it. Its setup is part of opening it, not counted as requests. (Unnamed: `CLIENT
    /// SETNAME` would be one more command for the ACL rule; in `CLIENT LIST` it is the
    /// tracking connection whose last command is a `GET`.)
    pub(super) fn open_canary(&self, manager: &Manager, id: u64) -> Result<(), Refusal> {
        let mut conn = Conn::open_now(manager).map_err(Refusal::Down)?;
        server_answer::<()>(tracking::track_canary(id).query(&mut conn))?;
        self.read_canary(&mut conn)
            .map_err(|e| Refusal::Down(failed_with("reading the canary", &e)))?;
        let closer = conn.closer();
        *self.canary_conn.lock() = Some(CanaryConn { conn, closer });
        Ok(())
    }

    /// The canary's connection was closed (killed, a proxy's idle timeout): the server
    /// dropped its tracking, so an eviction would go unannounced. Counted as the tracked
    /// connection's closing: both are opened again and every watcher checks.
    pub(super) fn canary_hung_up(&self) {
        let gone = self
            .canary_conn
            .lock()
            .as_ref()
            .and_then(|c| c.closer.as_ref())
            .is_some_and(Closer::peer_closed);
        if gone {
            tracing::debug!(target: "redis_lock", server = %self.label, "the canary's connection was closed; opening it again");
            self.put_tracked(&mut self.tracked.lock(), None);
            self.reopen_tracked();
        }
    }

    /// Reads the canary on `conn` (the canary's connection), so that the server tracks it. A
    /// refusal (an ACL without `GET` on it) leaves eviction undetected: only a broken
    /// connection is an error.
    pub(super) fn read_canary(&self, conn: &mut Conn) -> RedisResult<()> {
        let Some(canary) = self.canary.lock().clone() else {
            return Ok(());
        };
        match tracking::read_canary(&canary).query::<Value>(conn) {
            Err(e) if crate::error::is_network_error(&e) || !conn.is_open() => Err(e),
            Err(error) => {
                tracing::debug!(target: "redis_lock", server = %self.label, %error, "reading the notification canary was refused");
                Ok(())
            }
            Ok(_) => {
                self.eviction.lock().canary_read = Some(Instant::now());
                Ok(())
            }
        }
    }

    /// Reads the canary again on its connection (a request), if it is open; a broken one
    /// counts as the tracked connection's closing.
    pub(super) fn rearm_canary(&self) {
        let broken = {
            let mut canary = self.canary_conn.lock();
            let Some(c) = canary.as_mut() else {
                return;
            };
            self.requests.fetch_add(1, Ordering::Relaxed);
            self.read_canary(&mut c.conn).is_err() || !c.conn.is_open()
        };
        if broken {
            // Not under `canary_conn`: `put_tracked` takes it after `tracked`.
            self.put_tracked(&mut self.tracked.lock(), None);
        }
    }

    /// The canary was invalidated: the server's tracking table is full. Evicting from now on
    /// (a probe that found it so doubles the pause before the next).
    pub(super) fn canary_evicted(&self) {
        let mut phase = self.phase.lock();
        let mut eviction = self.eviction.lock();
        eviction.canary_read = None;
        match *phase {
            Phase::On
                if eviction
                    .room_at
                    .is_some_and(|at| at.elapsed() < EVICTING_MAX) =>
            {
                eviction.pause = (eviction.pause * 2).min(EVICTING_MAX);
                tracing::debug!(target: "redis_lock", server = %self.label, pause = ?eviction.pause,
                    "the server's tracking table is full again");
            }
            Phase::On => {
                eviction.pause = EVICTING_FIRST;
                tracing::warn!(target: "redis_lock", server = %self.label,
                    "the server's tracking table is full (tracking-table-max-keys): it forgets \
                     tracked keys, so a lock changed by somebody else is noticed at its next \
                     renewal until it has room again");
            }
            Phase::Probing => {
                eviction.pause = (eviction.pause * 2).min(EVICTING_MAX);
                tracing::debug!(target: "redis_lock", server = %self.label, pause = ?eviction.pause,
                    "the server's tracking table is still full");
            }
            _ => return,
        }
        *phase = Phase::Evicting;
        eviction.next = Instant::now().checked_add(eviction.pause);
    }

    /// The listener's timer for a full tracking table: after the pause, a probe (the canary
    /// and every watched key read again on the tracked connection); after a probe's window
    /// without the canary's eviction, notification is on again. Returns how long until the
    /// next step, if one is due.
    pub(super) fn eviction_timer(&self) -> Option<Duration> {
        let now = Instant::now();
        let phase = *self.phase.lock();
        let next = self.eviction.lock().next?;
        if next > now {
            return Some(next - now);
        }
        match phase {
            Phase::Evicting => {
                {
                    let mut phase = self.phase.lock();
                    if *phase != Phase::Evicting {
                        return None;
                    }
                    *phase = Phase::Probing;
                    self.eviction.lock().next = now.checked_add(PROBE_WINDOW);
                }
                self.rearm_canary();
                // Every watcher reads its key again on the tracked connection.
                self.tell_all();
                Some(PROBE_WINDOW)
            }
            Phase::Probing => {
                let armed = self.eviction.lock().canary_read.is_some();
                {
                    let mut phase = self.phase.lock();
                    if *phase != Phase::Probing {
                        return None;
                    }
                    if armed {
                        *phase = Phase::On;
                        let mut eviction = self.eviction.lock();
                        eviction.next = None;
                        eviction.room_at = Some(now);
                    } else {
                        // The canary could not be read: probed again after the pause.
                        *phase = Phase::Evicting;
                        let mut eviction = self.eviction.lock();
                        eviction.next = now.checked_add(eviction.pause);
                        return Some(eviction.pause);
                    }
                }
                tracing::info!(target: "redis_lock", server = %self.label,
                    "the server's tracking table has room again: loss notification is on");
                // Keys whose invalidation was not passed on while evicting are read again.
                self.tell_all();
                None
            }
            _ => {
                self.eviction.lock().next = None;
                None
            }
        }
    }
}
