//! Sentinel: the client finds the master by name and follows a failover.

use redis_lock::testing::SentinelGroup;

#[test]
fn test_sentinel_group_fails_over() {
    let t = std::time::Instant::now();
    let group = SentinelGroup::start();
    eprintln!("started {:?}", t.elapsed());
    let before = group.master_port();
    let after = group.failover();
    eprintln!("failover {:?}", t.elapsed());
    assert_ne!(before, after);
    assert_eq!(group.master_port(), after);
}
