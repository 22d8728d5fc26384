//! A master with replicas, for replica-acknowledgement tests.

use std::io;
use std::time::{Duration, Instant};

use super::server::RedisServer;

/// How long replication may take to come up.
const LINK_TIMEOUT: Duration = Duration::from_secs(20);

impl RedisServer {
    /// Starts a replica of `master` (`--replicaof 127.0.0.1 <port>`) and waits until the link
    /// is up on both sides: the replica reports `master_link_status:up` and the master lists
    /// it as an online replica.
    ///
    /// # Panics
    ///
    /// When the replica does not start or replication does not come up within 20 s.
    pub fn start_replica_of(master: &RedisServer) -> RedisServer {
        match Self::try_start_replica_of(master, &[]) {
            Ok(s) => s,
            Err(e) => panic!("starting a replica of port {} failed: {e}", master.port()),
        }
    }

    /// Starts a replica of `master` with extra arguments (for example `["--appendonly",
    /// "yes"]`) and waits until replication is up.
    ///
    /// # Errors
    ///
    /// When the replica does not start or replication does not come up within 20 s.
    pub fn try_start_replica_of(master: &RedisServer, args: &[&str]) -> io::Result<RedisServer> {
        let port = master.port().to_string();
        let mut all = vec!["--replicaof", "127.0.0.1", port.as_str()];
        all.extend_from_slice(args);
        let before = master.online_replicas()?;
        let replica = Self::try_start_with(&all)?;
        let start = Instant::now();
        loop {
            let up = replica.info_field("replication", "master_link_status")? == "up";
            if up && master.online_replicas()? > before {
                return Ok(replica);
            }
            if start.elapsed() > LINK_TIMEOUT {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "replication did not come up within {LINK_TIMEOUT:?}; replica log:\n{}",
                        replica.log()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many replicas the server lists as `state=online` in `INFO replication`.
    ///
    /// # Errors
    ///
    /// When the server cannot be asked.
    pub fn online_replicas(&self) -> io::Result<usize> {
        let info = self.info("replication")?;
        Ok(info
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .count())
    }

    /// One `field:value` line of `INFO <section>`; empty when the field is missing.
    ///
    /// # Errors
    ///
    /// When the server cannot be asked.
    pub fn info_field(&self, section: &str, field: &str) -> io::Result<String> {
        let info = self.info(section)?;
        let prefix = format!("{field}:");
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or("")
            .trim()
            .to_owned())
    }

    /// How often Redis ran `command` (`calls` of `cmdstat_<command>` in `INFO commandstats`,
    /// commands run inside scripts included); 0 when it never did.
    ///
    /// # Errors
    ///
    /// When the server cannot be asked.
    pub fn command_calls(&self, command: &str) -> io::Result<u64> {
        let line = self.info_field("commandstats", &format!("cmdstat_{command}"))?;
        Ok(line
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }

    /// The text of `INFO <section>`.
    ///
    /// # Errors
    ///
    /// When the server cannot be asked.
    pub fn info(&self, section: &str) -> io::Result<String> {
        let mut con = self
            .client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(io::Error::other)?;
        redis::cmd("INFO")
            .arg(section)
            .query::<String>(&mut con)
            .map_err(io::Error::other)
    }
}
