//! A throwaway Redis Cluster: masters only, every slot covered, on free loopback ports.

use std::io;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::server::{Mode, RedisServer, find_binary};

/// How long the cluster may take to agree on its slots after `redis-cli --cluster create`.
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest one run of `redis-cli --cluster create` may take (it waits for the nodes to join).
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// How often `redis-cli --cluster create` is tried before giving up.
const CREATE_ATTEMPTS: usize = 3;

/// A Redis Cluster of masters (no replicas), each a [`RedisServer`] started with
/// `--cluster-enabled yes`, joined with `redis-cli --cluster create`. Killed on drop.
///
/// ```no_run
/// use redis_lock::testing::RedisCluster;
///
/// let cluster = RedisCluster::start(3);
/// let slot = cluster.keyslot("lock:{job}");
/// println!("served by 127.0.0.1:{}", cluster.port_for_slot(slot));
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// The `redis-cli` binary: `$REDIS_LOCK_REDIS_CLI_BIN`, or `redis-cli` on `PATH`.
///
/// # Errors
///
/// `NotFound`, with a message that says how to install it, when neither exists.
pub fn cli_binary() -> io::Result<std::path::PathBuf> {
    find_binary("REDIS_LOCK_REDIS_CLI_BIN", "redis-cli")
}

impl RedisCluster {
    /// Starts a cluster of `masters` masters (at least 3, as `redis-cli` requires).
    ///
    /// # Panics
    ///
    /// When a node does not start or the cluster does not form (the message says why); use
    /// [`try_start`](Self::try_start) to handle that.
    pub fn start(masters: usize) -> RedisCluster {
        match Self::try_start(masters) {
            Ok(c) => c,
            Err(e) => panic!("starting a redis cluster failed: {e}"),
        }
    }

    /// Starts a cluster of `masters` masters.
    ///
    /// # Errors
    ///
    /// Fewer than 3 masters, a node that does not start, `redis-cli --cluster create` failing
    /// three times, or the nodes not agreeing on the slots within 30 s.
    pub fn try_start(masters: usize) -> io::Result<RedisCluster> {
        if masters < 3 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "redis-cli --cluster create needs at least 3 masters",
            ));
        }
        let cli = cli_binary()?;
        let nodes = (0..masters)
            .map(|_| {
                RedisServer::try_start_mode(
                    Mode::ClusterNode { bus_port: 0 },
                    &["--cluster-node-timeout", "5000"],
                )
            })
            .collect::<io::Result<Vec<_>>>()?;
        let cluster = RedisCluster { nodes };
        let mut last = String::new();
        for _ in 0..CREATE_ATTEMPTS {
            let mut create = Command::new(&cli);
            create
                .arg("--cluster")
                .arg("create")
                .args(
                    cluster
                        .nodes
                        .iter()
                        .map(|n| format!("127.0.0.1:{}", n.port())),
                )
                .arg("--cluster-yes");
            let (ok, output) = run_bounded(create, cluster.nodes[0].dir(), CREATE_TIMEOUT)?;
            if ok {
                cluster.wait_ready()?;
                return Ok(cluster);
            }
            last = output;
            // A half-created cluster cannot be created again: start over from empty nodes.
            for node in &cluster.nodes {
                let mut con = node.connection();
                let _: redis::RedisResult<()> = redis::cmd("FLUSHALL").query(&mut con);
                let _: redis::RedisResult<()> = redis::cmd("CLUSTER")
                    .arg("RESET")
                    .arg("HARD")
                    .query(&mut con);
            }
        }
        Err(io::Error::other(format!(
            "redis-cli --cluster create failed {CREATE_ATTEMPTS} times; last output:\n{last}"
        )))
    }

    /// Every node reports `cluster_state:ok`, knows every other node, and maps all slots to
    /// the same owners.
    fn wait_ready(&self) -> io::Result<()> {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < CLUSTER_READY_TIMEOUT {
            match self.agreed() {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the cluster did not become ready within {CLUSTER_READY_TIMEOUT:?}: {last}"),
        ))
    }

    fn agreed(&self) -> Result<(), String> {
        let mut first: Option<Vec<(u16, u16, u16)>> = None;
        for node in &self.nodes {
            let mut con = node
                .client()
                .get_connection_with_timeout(Duration::from_secs(1))
                .map_err(|e| e.to_string())?;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut con)
                .map_err(|e| e.to_string())?;
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(str::trim)
                    .unwrap_or("")
                    .to_owned()
            };
            if field("cluster_state") != "ok" {
                return Err(format!("node {}: cluster_state is not ok", node.port()));
            }
            if field("cluster_known_nodes") != self.nodes.len().to_string() {
                return Err(format!("node {} does not know all nodes yet", node.port()));
            }
            let map = slot_map(&mut con).map_err(|e| e.to_string())?;
            match &first {
                None => first = Some(map),
                Some(m) if *m == map => {}
                Some(_) => return Err("the nodes disagree about slot owners".into()),
            }
        }
        Ok(())
    }

    /// The nodes, in the order they were started.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// `redis://127.0.0.1:<port>/` of every node: seed URLs for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of the first node).
    ///
    /// # Panics
    ///
    /// When the node does not answer.
    pub fn keyslot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].connection())
            .unwrap_or_else(|e| panic!("CLUSTER KEYSLOT {key:?} failed: {e}"))
    }

    /// The port of the node that serves `slot` now, as the first node sees it.
    ///
    /// # Panics
    ///
    /// When the node does not answer or no node serves the slot.
    pub fn port_for_slot(&self, slot: u16) -> u16 {
        let map = slot_map(&mut self.nodes[0].connection())
            .unwrap_or_else(|e| panic!("CLUSTER SLOTS failed: {e}"));
        map.iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .map(|(_, _, port)| *port)
            .unwrap_or_else(|| panic!("no node serves slot {slot}"))
    }

    /// The node that serves `slot` now.
    ///
    /// # Panics
    ///
    /// As [`port_for_slot`](Self::port_for_slot).
    pub fn node_for_slot(&self, slot: u16) -> &RedisServer {
        let port = self.port_for_slot(slot);
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("slot {slot} is served by unknown port {port}"))
    }

    /// Starts moving `slot` to the node at `to` (an index into [`nodes`](Self::nodes)), the
    /// way `redis-cli --cluster reshard` does it: `CLUSTER SETSLOT IMPORTING` on the target,
    /// `MIGRATING` on the source. Keys move with [`SlotMigration::move_keys`]; the slot
    /// changes owner with [`SlotMigration::finish`].
    ///
    /// # Panics
    ///
    /// When the target already serves the slot or a node refuses.
    pub fn begin_migration(&self, slot: u16, to: usize) -> SlotMigration<'_> {
        let source = self
            .nodes
            .iter()
            .position(|n| n.port() == self.port_for_slot(slot))
            .unwrap_or_else(|| panic!("no node serves slot {slot}"));
        assert_ne!(source, to, "slot {slot} is already served by node {to}");
        let id = |i: usize| node_id(&self.nodes[i]);
        let (source_id, target_id) = (id(source), id(to));
        setslot(&self.nodes[to], slot, &["IMPORTING", &source_id]);
        setslot(&self.nodes[source], slot, &["MIGRATING", &target_id]);
        SlotMigration {
            cluster: self,
            slot,
            source,
            target: to,
            target_id,
        }
    }
}

/// A slot on its way from one node to another; see [`RedisCluster::begin_migration`].
#[derive(Debug)]
pub struct SlotMigration<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: usize,
    target: usize,
    target_id: String,
}

impl SlotMigration<'_> {
    /// Moves up to `count` keys of the slot from the source to the target (`MIGRATE`, which
    /// keeps their TTLs). Returns how many it moved.
    ///
    /// # Panics
    ///
    /// When a node refuses.
    pub fn move_keys(&self, count: usize) -> usize {
        let source = &self.cluster.nodes[self.source];
        let target = &self.cluster.nodes[self.target];
        let mut con = source.connection();
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(self.slot)
            .arg(count)
            .query(&mut con)
            .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT failed: {e}"));
        if keys.is_empty() {
            return 0;
        }
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(target.port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query::<()>(&mut con)
            .unwrap_or_else(|e| panic!("MIGRATE failed: {e}"));
        keys.len()
    }

    /// Moves the remaining keys, then assigns the slot to the target on every node.
    ///
    /// # Panics
    ///
    /// When a node refuses or the nodes do not agree within 30 s.
    pub fn finish(self) {
        for _ in 0..10_000 {
            if self.move_keys(100) == 0 {
                break;
            }
        }
        // Target first, as redis-cli does: then the source redirects to a node that already
        // accepts the slot.
        let order = std::iter::once(self.target)
            .chain(std::iter::once(self.source))
            .chain(
                (0..self.cluster.nodes.len()).filter(|i| *i != self.source && *i != self.target),
            );
        for i in order {
            setslot(
                &self.cluster.nodes[i],
                self.slot,
                &["NODE", &self.target_id],
            );
        }
        if let Err(e) = self.cluster.wait_ready() {
            panic!("after moving slot {}: {e}", self.slot);
        }
    }
}

/// Runs `cmd` for at most `limit`, its output going to a file in `dir`. Returns whether it
/// succeeded, and its output.
fn run_bounded(
    mut cmd: Command,
    dir: &std::path::Path,
    limit: Duration,
) -> io::Result<(bool, String)> {
    let out_path = dir.join("redis-cli.out");
    let out = std::fs::File::create(&out_path)?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if start.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut output = std::fs::read_to_string(&out_path).unwrap_or_default();
    if status.is_none() {
        output.push_str(&format!("\n(killed after {limit:?})"));
    }
    Ok((status.is_some_and(|s| s.success()), output))
}

fn setslot(node: &RedisServer, slot: u16, args: &[&str]) {
    redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(args)
        .query::<()>(&mut node.connection())
        .unwrap_or_else(|e| {
            panic!(
                "CLUSTER SETSLOT {slot} {args:?} on {} failed: {e}",
                node.port()
            )
        });
}

fn node_id(node: &RedisServer) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut node.connection())
        .unwrap_or_else(|e| panic!("CLUSTER MYID failed: {e}"))
}

/// `(first slot, last slot, master port)` for every slot range, sorted.
fn slot_map(con: &mut redis::Connection) -> redis::RedisResult<Vec<(u16, u16, u16)>> {
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(con)?;
    let mut map = Vec::new();
    for range in ranges {
        let redis::Value::Array(parts) = range else {
            continue;
        };
        let int = |v: &redis::Value| match v {
            redis::Value::Int(i) => u16::try_from(*i).ok(),
            _ => None,
        };
        let (Some(lo), Some(hi)) = (parts.first().and_then(int), parts.get(1).and_then(int)) else {
            continue;
        };
        let port = match parts.get(2) {
            Some(redis::Value::Array(master)) => master.get(1).and_then(int),
            _ => None,
        };
        if let Some(port) = port {
            map.push((lo, hi, port));
        }
    }
    map.sort_unstable();
    Ok(map)
}
