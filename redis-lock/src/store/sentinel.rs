//! Finding the master through Redis Sentinel, and noticing when it moves.
//!
//! The `redis` crate's sentinel client connects to sentinels and masters without a connect or
//! reply timeout, so an unreachable sentinel would stall a pool for the operating system's TCP
//! timeout. Discovery is two commands, so it is done here with the client's own timeouts:
//! `SENTINEL GET-MASTER-ADDR-BY-NAME` on the first sentinel that answers, then `ROLE` on the
//! named server to make sure it is a master.
//!
//! After a failover the old master keeps accepting writes until the sentinels turn it into a
//! replica (about 8 s later when it is still up), so pooled connections to it would keep
//! taking locks there. Every connection therefore records the *epoch* it was made in; the
//! epoch moves on whenever anyone sees the sentinels name a different master (a new
//! connection, or the periodic check on the pool's housekeeping thread), and connections
//! from an older epoch are discarded at their next checkout.
//!
//! Work that must reach the master the sentinels name *after* a move (a release that the old
//! master answered, or could not answer, while the new one may still hold the lock) waits
//! here as an after-move job: the move that starts a newer epoch runs it on a thread of its
//! own, unless its deadline has passed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, ErrorKind, RedisError, RedisResult};

/// The master of one sentinel-monitored group, as last seen.
pub(crate) struct SentinelTarget {
    master_name: String,
    sentinels: Vec<ConnectionInfo>,
    /// Username, password and database for the master; the address is replaced.
    master_template: ConnectionInfo,
    connect_timeout: Duration,
    io_timeout: Duration,
    known: Mutex<Option<(String, u16)>>,
    pub(crate) epoch: AtomicU64,
    /// Jobs to run once the master has moved past their epoch (oldest first).
    after_move: Mutex<VecDeque<AfterMove>>,
}

/// Work for the master the sentinels name after a move (see [`SentinelTarget::after_move`]).
pub(crate) type MoveJob = Box<dyn FnOnce() + Send>;

/// At most this many after-move jobs wait at once; beyond it the oldest is dropped (its lock
/// then expires with its TTL on a new master). They are only made for releases that failed or
/// were not acknowledged, so a full queue means a long outage.
const MAX_AFTER_MOVE: usize = 10_000;

/// No `Debug` derive: the job is a closure (it may hold an owner token, which is not shown).
struct AfterMove {
    /// Run once the epoch is past this one.
    epoch: u64,
    /// Not run from this instant on (the lock it concerns has expired by then).
    until: Instant,
    job: MoveJob,
}

impl std::fmt::Debug for AfterMove {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfterMove")
            .field("epoch", &self.epoch)
            .field("until", &self.until)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelTarget")
            .field("master_name", &self.master_name)
            .field("sentinels", &self.sentinels.len())
            .field("known", &*self.known.lock())
            .field("epoch", &self.epoch.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn error(what: &'static str, detail: String) -> RedisError {
    RedisError::from((ErrorKind::Client, what, detail))
}

impl SentinelTarget {
    pub(crate) fn new(
        master_name: String,
        sentinels: Vec<ConnectionInfo>,
        master_template: ConnectionInfo,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> SentinelTarget {
        SentinelTarget {
            master_name,
            sentinels,
            master_template,
            connect_timeout,
            io_timeout,
            known: Mutex::new(None),
            epoch: AtomicU64::new(0),
            after_move: Mutex::new(VecDeque::new()),
        }
    }

    /// A connection to a sentinel, as to any server: connected and through its handshake
    /// within the connect timeout, then each reply within the reply timeout.
    /// Our own plain connection (`plain.rs`) where it serves, as the pools' connections are
    /// made, else the `redis` crate's with the same timeouts.
    fn connect(&self, info: &ConnectionInfo) -> RedisResult<Box<dyn ConnectionLike>> {
        if super::plain::Plain::serves(info) {
            return Ok(Box::new(super::plain::Plain::connect(
                info,
                self.connect_timeout,
                self.io_timeout,
            )?));
        }
        let con =
            redis::Client::open(info.clone())?.get_connection_with_timeout(self.connect_timeout)?;
        con.set_read_timeout(Some(self.io_timeout))?;
        con.set_write_timeout(Some(self.io_timeout))?;
        Ok(Box::new(con))
    }

    /// Asks the sentinels, in order, where the master is; the first answer counts.
    fn locate(&self) -> RedisResult<(String, u16)> {
        let mut failures = Vec::new();
        for info in &self.sentinels {
            let reply = self.connect(info).and_then(|mut con| {
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master_name)
                    .query::<Option<(String, u16)>>(&mut *con)
            });
            match reply {
                Ok(Some(addr)) => return Ok(addr),
                Ok(None) => failures.push(format!("{}: does not know the master", info.addr())),
                Err(e) => failures.push(format!("{}: {e}", info.addr())),
            }
        }
        Err(error(
            "no sentinel named the master",
            format!("{:?} ({})", self.master_name, failures.join("; ")),
        ))
    }

    /// Records where the sentinels say the master is; a change starts a new epoch (and runs
    /// the after-move jobs of older epochs).
    fn note(&self, addr: &(String, u16)) -> u64 {
        let moved = {
            let mut known = self.known.lock();
            let moved = known.is_some() && known.as_ref() != Some(addr);
            if moved {
                tracing::info!(
                    target: "redis_lock",
                    master = %self.master_name,
                    host = %addr.0,
                    port = addr.1,
                    "sentinel: the master moved; dropping connections to the old one"
                );
                self.epoch.fetch_add(1, Ordering::AcqRel);
            }
            if known.as_ref() != Some(addr) {
                *known = Some(addr.clone());
            }
            moved
        };
        let epoch = self.epoch.load(Ordering::Acquire);
        if moved {
            self.run_due(epoch);
        }
        epoch
    }

    /// The current epoch (see the module's documentation).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Runs `job` once the master has moved past `epoch` (at once when it already has), on a
    /// thread of its own, unless `until` has passed by then. The job typically sends to the
    /// new master what the one of `epoch` answered, or could not answer.
    pub(crate) fn after_move(&self, epoch: u64, until: Instant, job: MoveJob) {
        {
            let mut queue = self.after_move.lock();
            let now = Instant::now();
            queue.retain(|j| j.until > now);
            if queue.len() >= MAX_AFTER_MOVE {
                queue.pop_front();
                tracing::warn!(target: "redis_lock", master = %self.master_name, "sentinel: too many releases wait for a new master; dropping the oldest (its lock expires with its ttl)");
            }
            queue.push_back(AfterMove { epoch, until, job });
        }
        // The master may have moved meanwhile: its move looked at the queue before the push.
        let now = self.epoch();
        if now > epoch {
            self.run_due(now);
        }
    }

    /// Takes the jobs of epochs before `epoch` whose time has not run out and runs them, in
    /// order, on a new thread (they talk to Redis, and the caller may be the pool's
    /// housekeeping thread, which new connections need).
    fn run_due(&self, epoch: u64) {
        let now = Instant::now();
        let due: Vec<MoveJob> = {
            let mut queue = self.after_move.lock();
            let (due, keep): (VecDeque<_>, VecDeque<_>) =
                queue.drain(..).partition(|j| j.epoch < epoch);
            *queue = keep;
            due.into_iter()
                .filter(|j| j.until > now)
                .map(|j| j.job)
                .collect()
        };
        if due.is_empty() {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("redis-lock-moved".into())
            .spawn(move || due.into_iter().for_each(|job| job()));
        if let Err(error) = spawned {
            tracing::warn!(target: "redis_lock", %error, "sentinel: no thread for the work after a master move; those locks expire with their ttl");
        }
    }

    /// A connection to the current master (made by `open` from the master's address and the
    /// client's credentials, whatever kind of connection the pool keeps; `con`: the
    /// connection to ask on), and the epoch it belongs to.
    pub(super) fn connect_master<L>(
        &self,
        open: impl FnOnce(&ConnectionInfo) -> RedisResult<L>,
        con: impl FnOnce(&mut L) -> &mut dyn ConnectionLike,
    ) -> RedisResult<(L, u64)> {
        let addr = self.locate()?;
        let epoch = self.note(&addr);
        let info = self
            .master_template
            .clone()
            .set_addr(ConnectionAddr::Tcp(addr.0.clone(), addr.1));
        let mut link = open(&info)?;
        // A sentinel may name a server that is not (or no longer) the master, during a
        // failover: locks written there would not count.
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(con(&mut link))?;
        match role.first() {
            Some(redis::Value::BulkString(b)) if b == b"master" => Ok((link, epoch)),
            other => Err(error(
                "the server the sentinels named is not a master",
                format!("{}:{} answered ROLE with {other:?}", addr.0, addr.1),
            )),
        }
    }

    /// The periodic check (also asked after a command failed in a way a failover explains):
    /// asks the sentinels and starts a new epoch if the master moved. Returns the epoch.
    pub(crate) fn check(&self) -> u64 {
        match self.locate() {
            Ok(addr) => self.note(&addr),
            Err(error) => {
                tracing::warn!(target: "redis_lock", %error, "sentinel: checking the master failed");
                self.epoch()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn target() -> SentinelTarget {
        let template = redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1/")
            .expect("a valid url");
        SentinelTarget::new(
            "m".into(),
            Vec::new(),
            template,
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
    }

    fn job(tx: &mpsc::Sender<&'static str>, what: &'static str) -> MoveJob {
        let tx = tx.clone();
        Box::new(move || {
            let _ = tx.send(what);
        })
    }

    const WAIT: Duration = Duration::from_secs(5);

    #[test]
    fn after_move_jobs_run_when_the_master_moves_and_not_before() {
        let t = target();
        let a = ("127.0.0.1".to_owned(), 1);
        let b = ("127.0.0.1".to_owned(), 2);
        assert_eq!(t.note(&a), 0, "the first master seen is no move");
        let (tx, rx) = mpsc::channel();
        let later = Instant::now() + Duration::from_secs(60);
        t.after_move(0, later, job(&tx, "resend"));
        t.after_move(0, Instant::now(), job(&tx, "expired"));
        assert_eq!(t.note(&a), 0, "same master: nothing runs");
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        assert_eq!(t.note(&b), 1);
        assert_eq!(rx.recv_timeout(WAIT), Ok("resend"));
        assert!(
            rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "a job past its time does not run, and none runs twice"
        );
        // A job of an epoch that is already over runs at once.
        t.after_move(0, later, job(&tx, "late"));
        assert_eq!(rx.recv_timeout(WAIT), Ok("late"));
        // A job of the current epoch waits for the next move.
        t.after_move(1, later, job(&tx, "next"));
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        assert_eq!(t.note(&a), 2);
        assert_eq!(rx.recv_timeout(WAIT), Ok("next"));
    }

    #[test]
    fn the_after_move_queue_is_bounded() {
        let t = target();
        let later = Instant::now() + Duration::from_secs(60);
        for _ in 0..MAX_AFTER_MOVE + 5 {
            t.after_move(0, later, Box::new(|| {}));
        }
        assert_eq!(t.after_move.lock().len(), MAX_AFTER_MOVE);
    }
}
