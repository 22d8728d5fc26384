//! Redis Cluster: locks spread over masters, one slot per lock, slot migration.

use redis_lock::testing::RedisCluster;

#[test]
fn test_cluster_forms_with_slots_on_every_master() {
    let cluster = RedisCluster::start(3);
    let ports: std::collections::HashSet<u16> = [0u16, 8000, 16383]
        .iter()
        .map(|s| cluster.port_for_slot(*s))
        .collect();
    assert_eq!(
        ports.len(),
        3,
        "three masters serve the three thirds of the slots"
    );
    let slot = cluster.keyslot("lock:{job}");
    let m = cluster.begin_migration(
        slot,
        (0..3)
            .find(|i| cluster.nodes()[*i].port() != cluster.port_for_slot(slot))
            .unwrap(),
    );
    m.finish();
}
