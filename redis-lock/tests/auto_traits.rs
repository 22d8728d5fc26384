//! Compile-time checks of the auto traits users rely on.

fn assert_send<T: Send>() {}
fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn guards_move_between_threads_and_clients_are_shared() {
    assert_send::<redis_lock::LockGuard>();
    assert_send_sync::<redis_lock::LockClient>();
    assert_send_sync::<redis_lock::Error>();
    assert_send_sync::<redis_lock::LockOptions>();
}
