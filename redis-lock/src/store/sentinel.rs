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

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult};

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
        }
    }

    fn connect(&self, info: ConnectionInfo) -> RedisResult<redis::Connection> {
        let con = redis::Client::open(info)?.get_connection_with_timeout(self.connect_timeout)?;
        con.set_read_timeout(Some(self.io_timeout))?;
        con.set_write_timeout(Some(self.io_timeout))?;
        Ok(con)
    }

    /// Asks the sentinels, in order, where the master is; the first answer counts.
    fn locate(&self) -> RedisResult<(String, u16)> {
        let mut failures = Vec::new();
        for info in &self.sentinels {
            let reply = self.connect(info.clone()).and_then(|mut con| {
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master_name)
                    .query::<Option<(String, u16)>>(&mut con)
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

    /// Records where the sentinels say the master is; a change starts a new epoch.
    fn note(&self, addr: &(String, u16)) -> u64 {
        let mut known = self.known.lock();
        if known.as_ref() != Some(addr) {
            if known.is_some() {
                tracing::info!(
                    target: "redis_lock",
                    master = %self.master_name,
                    host = %addr.0,
                    port = addr.1,
                    "sentinel: the master moved; dropping connections to the old one"
                );
                self.epoch.fetch_add(1, Ordering::AcqRel);
            }
            *known = Some(addr.clone());
        }
        self.epoch.load(Ordering::Acquire)
    }

    /// A connection to the current master, and the epoch it belongs to.
    pub(crate) fn connect_master(&self) -> RedisResult<(redis::Connection, u64)> {
        let addr = self.locate()?;
        let epoch = self.note(&addr);
        let info = self
            .master_template
            .clone()
            .set_addr(ConnectionAddr::Tcp(addr.0.clone(), addr.1));
        let mut con = self.connect(info)?;
        // A sentinel may name a server that is not (or no longer) the master, during a
        // failover: locks written there would not count.
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con)?;
        match role.first() {
            Some(redis::Value::BulkString(b)) if b == b"master" => Ok((con, epoch)),
            other => Err(error(
                "the server the sentinels named is not a master",
                format!("{}:{} answered ROLE with {other:?}", addr.0, addr.1),
            )),
        }
    }

    /// The periodic check: asks the sentinels and starts a new epoch if the master moved.
    pub(crate) fn check(&self) {
        match self.locate() {
            Ok(addr) => {
                self.note(&addr);
            }
            Err(error) => {
                tracing::warn!(target: "redis_lock", %error, "sentinel: checking the master failed")
            }
        }
    }
}
