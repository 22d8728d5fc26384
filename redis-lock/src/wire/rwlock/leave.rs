//! A waiter giving up: the `LEAVE` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::LockKeys;
use super::super::request::Request;

/// A waiter gives up: unregister it; a writer that was the last one waiting lets the readers
/// it kept out in (every waiter is woken, unless a writer holds the lock or it cools down).
/// KEYS: lock, waiters, writers, signal, writers' wake-up list. ARGV: waiter id. Returns `1`.
static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        rw_writers_wait!(),
        rw_lists_ok!(),
        rw_wake_all!(),
        "redis.call('ZREM', KEYS[2], ARGV[1])\n",
        "if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 and not writers_wait(KEYS[3]) then\n",
        "  local m = redis.pcall('HGET', KEYS[1], 'mode')\n",
        "  if type(m) ~= 'table' and m ~= 'write' and m ~= 'cool' and lists_ok(KEYS[4], KEYS[5]) == 0 then\n",
        "    wake_all(KEYS[4], KEYS[5], KEYS[2], KEYS[3])\n",
        "  end\n",
        "end\n",
        "return 1\n",
    ))
});

/// `LEAVE`: a waiter gives up.
pub(crate) fn leave(keys: &LockKeys, waiter: &str) -> Request<()> {
    let (writers, writer_signal) = (keys.writers(), keys.writer_signal());
    Request::script(
        &LEAVE,
        &[
            keys.lock.as_bytes(),
            keys.waiters.as_bytes(),
            writers.as_bytes(),
            keys.signal.as_bytes(),
            writer_signal.as_bytes(),
        ],
        &[waiter.as_bytes()],
        |_: i64| Ok(()),
    )
}
