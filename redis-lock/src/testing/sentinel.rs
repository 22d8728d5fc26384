//! A throwaway Sentinel deployment: a master, one replica, and sentinels watching them.

use std::io;
use std::time::{Duration, Instant};

use super::server::{Mode, RedisServer};

/// How long the replica and the sentinels may take to find each other.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a failover may take, from `SENTINEL FAILOVER` until every sentinel names the new
/// master and the new master accepts writes.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);

/// A master, one replica of it, and three sentinels (quorum 2) monitoring it under
/// [`MASTER_NAME`](Self::MASTER_NAME), all [`RedisServer`]s on free loopback ports. Killed on
/// drop.
///
/// ```no_run
/// use redis_lock::testing::SentinelGroup;
///
/// let group = SentinelGroup::start();
/// let before = group.master_port();
/// let after = group.failover();
/// assert_ne!(before, after);
/// ```
#[derive(Debug)]
pub struct SentinelGroup {
    /// `servers[0]` is the first master, `servers[1]` its replica; a failover swaps the roles.
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl SentinelGroup {
    /// The name the sentinels know the master by.
    pub const MASTER_NAME: &'static str = "redis-lock-test";

    /// Starts the group and waits until every sentinel knows the replica in sync. (Sentinels
    /// find their peers later, through hello messages every 2 s; a `SENTINEL FAILOVER` does
    /// not need them.)
    ///
    /// # Panics
    ///
    /// When a process does not start or the group does not settle within 30 s (the message
    /// says why); use [`try_start`](Self::try_start) to handle that.
    pub fn start() -> SentinelGroup {
        match Self::try_start() {
            Ok(g) => g,
            Err(e) => panic!("starting a sentinel group failed: {e}"),
        }
    }

    /// Starts the group.
    ///
    /// # Errors
    ///
    /// A process that does not start, or a group that does not settle within 30 s.
    pub fn try_start() -> io::Result<SentinelGroup> {
        // The default 5 s delay before a diskless full sync would dominate start-up.
        let master = RedisServer::try_start_with(&["--repl-diskless-sync-delay", "0"])?;
        // Sentinels learn a replica's link state from its INFO, which they ask for when they
        // connect and then only every 10 s: start them once the replica is in sync.
        // The replica gets the same setting: once promoted, it is the master its old master
        // syncs from, and the delay would keep the new master without a replica 5 s longer.
        let replica =
            RedisServer::try_start_replica_of(&master, &["--repl-diskless-sync-delay", "0"])?;
        let sentinels = (0..3)
            .map(|_| {
                RedisServer::try_start_mode(
                    Mode::Sentinel {
                        master: Self::MASTER_NAME.to_owned(),
                        master_port: master.port(),
                        quorum: 2,
                        down_after: Duration::from_secs(2),
                    },
                    &[],
                )
            })
            .collect::<io::Result<Vec<_>>>()?;
        let group = SentinelGroup {
            servers: vec![master, replica],
            sentinels,
        };
        poll("the sentinels to see the replica", READY_TIMEOUT, || {
            group.settled()
        })?;
        Ok(group)
    }

    fn settled(&self) -> Result<(), String> {
        let master = self.master_port();
        let replica = self.replica().port();
        let link: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut connect(self.replica())?)
            .map_err(|e| e.to_string())?;
        if !link.contains("master_link_status:up") {
            return Err("the replica is not in sync with the master".into());
        }
        for s in &self.sentinels {
            let mut con = connect(s)?;
            let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
                .arg("REPLICAS")
                .arg(Self::MASTER_NAME)
                .query(&mut con)
                .map_err(|e| e.to_string())?;
            let known = replicas.iter().any(|r| {
                r.get("port") == Some(&replica.to_string())
                    && r.get("flags").is_some_and(|f| f == "slave")
                    && r.get("master-link-status").is_some_and(|l| l == "ok")
            });
            if !known {
                return Err(format!(
                    "sentinel {} does not see the replica yet",
                    s.port()
                ));
            }
            if master_addr(s)? != master {
                return Err(format!("sentinel {} names another master", s.port()));
            }
        }
        Ok(())
    }

    /// `redis://127.0.0.1:<port>/` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The sentinel processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The port of the current master, as the first sentinel names it.
    ///
    /// # Panics
    ///
    /// When the sentinel does not answer.
    pub fn master_port(&self) -> u16 {
        master_addr(&self.sentinels[0]).unwrap_or_else(|e| panic!("asking a sentinel: {e}"))
    }

    /// The current master.
    ///
    /// # Panics
    ///
    /// As [`master_port`](Self::master_port).
    pub fn master(&self) -> &RedisServer {
        let port = self.master_port();
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("the sentinels name an unknown master on port {port}"))
    }

    /// The current replica (the server that is not the master).
    ///
    /// # Panics
    ///
    /// As [`master_port`](Self::master_port).
    pub fn replica(&self) -> &RedisServer {
        let port = self.master_port();
        self.servers
            .iter()
            .find(|s| s.port() != port)
            .unwrap_or_else(|| panic!("no replica"))
    }

    /// Makes the sentinels promote the replica (`SENTINEL FAILOVER`) and waits until every
    /// sentinel names it and it reports `role:master`. Returns the new master's port.
    ///
    /// The old master is not waited for: the sentinels turn it into a replica only after it
    /// has reported `role:master` for about 8 s more, and until then it still accepts writes
    /// from clients that kept their connections (which is what a client must cope with).
    ///
    /// # Panics
    ///
    /// When the failover does not complete within 30 s.
    pub fn failover(&self) -> u16 {
        let old = self.master_port();
        let new = self.replica().port();
        // A sentinel refuses a second failover while one is in progress; ask until one starts.
        let asked = poll("the failover to start", FAILOVER_TIMEOUT, || {
            let mut con = connect(&self.sentinels[0])?;
            redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(Self::MASTER_NAME)
                .query::<()>(&mut con)
                .map_err(|e| e.to_string())
        });
        if let Err(e) = asked {
            panic!("{e}");
        }
        let promoted = self.wait_for_new_master(old);
        assert_eq!(promoted, new, "the sentinels promoted an unknown server");
        new
    }
}

impl SentinelGroup {
    /// Waits until every sentinel names a master other than the one on port `old` and that
    /// server reports `role:master`. Returns its port.
    ///
    /// # Panics
    ///
    /// When that does not happen within 60 s (an automatic failover needs the master to be
    /// seen down for 2 s, the sentinels to agree, and one of them to be elected).
    pub fn wait_for_new_master(&self, old: u16) -> u16 {
        let mut new = old;
        let done = poll("the failover to complete", 2 * FAILOVER_TIMEOUT, || {
            new = master_addr(&self.sentinels[0])?;
            if new == old {
                return Err(format!("the sentinels still name {old}"));
            }
            for s in &self.sentinels {
                if master_addr(s)? != new {
                    return Err(format!("sentinel {} does not name {new} yet", s.port()));
                }
            }
            let server = self.servers.iter().find(|s| s.port() == new);
            let role = role(server.ok_or(format!("the sentinels name unknown port {new}"))?)?;
            if role != "master" {
                return Err(format!("port {new} reports role {role}"));
            }
            Ok(())
        });
        if let Err(e) = done {
            panic!("{e}");
        }
        new
    }

    /// Kills the current master with `SIGKILL` (its data is gone; the sentinels fail over on
    /// their own), after waiting until every sentinel knows its peers: they must agree that
    /// the master is down and elect one of them to promote the replica. Returns the killed
    /// master's port.
    ///
    /// # Panics
    ///
    /// When the sentinels do not find each other within 30 s.
    pub fn kill_master(&mut self) -> u16 {
        let peers = poll("the sentinels to find each other", READY_TIMEOUT, || {
            for s in &self.sentinels {
                let peers: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("SENTINELS")
                    .arg(Self::MASTER_NAME)
                    .query(&mut connect(s)?)
                    .map_err(|e| e.to_string())?;
                if peers.len() + 1 < self.sentinels.len() {
                    return Err(format!("sentinel {} does not see its peers yet", s.port()));
                }
            }
            Ok(())
        });
        if let Err(e) = peers {
            panic!("{e}");
        }
        let port = self.master_port();
        if let Some(master) = self.servers.iter_mut().find(|s| s.port() == port) {
            master.kill();
        }
        port
    }

    /// Stops the replica with `SIGSTOP` and cuts its replication link on the master
    /// (`CLIENT KILL TYPE replica`): writes from now on stay on the master. (Pausing alone is
    /// not enough: the kernel would buffer what the master sends and the replica would read it
    /// when resumed.)
    ///
    /// # Panics
    ///
    /// When the master does not answer.
    pub fn pause_replica(&self) {
        self.replica().pause();
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query::<i64>(&mut self.master().connection())
            .unwrap_or_else(|e| panic!("cutting the replication link failed: {e}"));
    }

    /// Resumes the replica paused by [`pause_replica`](Self::pause_replica).
    pub fn resume_replica(&self) {
        self.replica().resume();
    }
}

/// Polls `condition` every 50 ms until it holds or `limit` passes.
fn poll(
    what: &str,
    limit: Duration,
    mut condition: impl FnMut() -> Result<(), String>,
) -> io::Result<()> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < limit {
        match condition() {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("waited {limit:?} for {what}; last: {last}"),
    ))
}

fn connect(server: &RedisServer) -> Result<redis::Connection, String> {
    let con = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(1))
        .map_err(|e| format!("connecting to {}: {e}", server.port()))?;
    con.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    Ok(con)
}

fn master_addr(sentinel: &RedisServer) -> Result<u16, String> {
    let (_, port): (String, u16) = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(SentinelGroup::MASTER_NAME)
        .query(&mut connect(sentinel)?)
        .map_err(|e| e.to_string())?;
    Ok(port)
}

fn role(server: &RedisServer) -> Result<String, String> {
    let reply: Vec<redis::Value> = redis::cmd("ROLE")
        .query(&mut connect(server)?)
        .map_err(|e| e.to_string())?;
    match reply.first() {
        Some(redis::Value::BulkString(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
        Some(redis::Value::SimpleString(s)) => Ok(s.clone()),
        other => Err(format!("unexpected ROLE reply {other:?}")),
    }
}
