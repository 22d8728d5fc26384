//! Waking a cancelled waiter: the script that pushes onto its cancel list
//! (`LockKeys::cancel`), which it blocks on beside its wake-up list.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::request::Request;
use super::resp::Decimal;
use super::{LockKeys, ms};

/// How long a cancel element waits for its waiter: the waiter is blocked or about to block
/// (it looks at the cancel flag before each wait), so this only has to outlast one round trip.
const CANCEL_TTL: Duration = Duration::from_secs(1);

/// Wake waiter `id` (not a grant: the element is `recheck`, which `parse_grant` rejects).
/// KEYS: the waiter's cancel list. ARGV: ttl_ms. Returns `1`.
static WAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "redis.call('RPUSH', KEYS[1], ",
        recheck!(),
        ")\n",
        "redis.call('PEXPIRE', KEYS[1], ARGV[1])\n",
        "return 1\n",
    ))
});

/// `WAKE`: ends the blocking wait of waiter `id` on the lock `keys`.
pub(crate) fn wake(keys: &LockKeys, id: &str) -> Request<()> {
    let (list, ttl) = (keys.cancel(id), Decimal::new(ms(CANCEL_TTL)));
    Request::script(
        &WAKE,
        &[list.as_bytes()],
        &[ttl.as_bytes()],
        |_: i64| Ok(()),
    )
}
