//! A waiter giving up: the `LEAVE` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::LockKeys;
use super::super::request::Request;

/// A waiter gives up: forget it; if a grant is pending for it alone, pass the grant on (or
/// free the lock when nobody else waits); a shared grant that no registered waiter is left to
/// take frees the lock.
/// KEYS: lock, fence, signal, waiters, queue, own wake-up list. ARGV: waiter id, grant token
/// (for passing on). Returns `1`.
static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        hand_over!(),
        "redis.call('ZREM', KEYS[4], ARGV[1])\n",
        "redis.call('ZREM', KEYS[5], ARGV[1])\n",
        "local h = redis.pcall('HMGET', KEYS[1], 'token', 'handoff')\n",
        // A string lock (taken natively) is never a grant: nothing to pass on.
        "if h['err'] then\n",
        "  redis.call('DEL', KEYS[6])\n",
        "  return 1\n",
        "end\n",
        "if h[2] == ARGV[1] and redis.call('LLEN', KEYS[6]) > 0 then\n",
        "  redis.call('DEL', KEYS[6])\n",
        "  redis.call('DEL', KEYS[1])\n",
        "  hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2])\n",
        "elseif h[2] == '' and redis.call('EXISTS', KEYS[4]) == 0 and redis.call('LLEN', KEYS[3]) > 0 then\n",
        "  redis.call('DEL', KEYS[3])\n",
        "  redis.call('DEL', KEYS[1])\n",
        "end\n",
        "redis.call('DEL', KEYS[6])\n",
        "return 1\n",
    ))
});

/// `LEAVE`: a waiter gives up; a grant made for it is passed on under `grant`.
pub(crate) fn leave(keys: &LockKeys, waiter: &str, grant: &str) -> Request<()> {
    let wake = keys.wake(waiter);
    Request::script(
        &LEAVE,
        &[
            keys.lock.as_bytes(),
            keys.fence.as_bytes(),
            keys.signal.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
            wake.as_bytes(),
        ],
        &[waiter.as_bytes(), grant.as_bytes()],
        |_: i64| Ok(()),
    )
}
