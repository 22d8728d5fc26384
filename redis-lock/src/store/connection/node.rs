//! One node of a Redis Cluster seen through a cluster connection, for the commands that
//! must reach every master (a keyless `SCAN` would otherwise go to one node at random).

use std::sync::atomic::{AtomicU64, Ordering};

use redis::{ConnectionLike, ErrorKind, RedisError, RedisResult, Value};

/// One node of a cluster, reached through the cluster connection: every command goes to it.
pub(super) struct Node<'a> {
    pub(super) cluster: &'a mut redis::cluster::ClusterConnection,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) requests: &'a AtomicU64,
}

impl ConnectionLike for Node<'_> {
    fn req_command(&mut self, cmd: &redis::Cmd) -> RedisResult<Value> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.cluster.route_command(
            cmd,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: self.host.clone(),
                port: self.port,
            }),
        )
    }

    fn req_packed_command(&mut self, _: &[u8]) -> RedisResult<Value> {
        Err(RedisError::from((
            ErrorKind::Client,
            "a cluster node connection takes commands, not packed bytes",
        )))
    }

    fn req_packed_commands(&mut self, _: &[u8], _: usize, _: usize) -> RedisResult<Vec<Value>> {
        Err(RedisError::from((
            ErrorKind::Client,
            "a cluster node connection takes commands, not pipelines",
        )))
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        self.cluster.check_connection()
    }

    fn is_open(&self) -> bool {
        self.cluster.is_open()
    }
}
