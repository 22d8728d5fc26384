//! Waking a cancelled waiter: the script that pushes onto its cancel list
//! (`LockKeys::cancel`), which it blocks on beside its wake-up list.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::Con;
use super::resp::Decimal;
use super::script::run;
use super::{LockKeys, ms};
use crate::error::Result;

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
pub(crate) fn wake(con: &mut Con<'_>, keys: &LockKeys, id: &str) -> Result<()> {
    let (list, ttl) = (keys.cancel(id), Decimal::new(ms(CANCEL_TTL)));
    run::<i64>(con, &WAKE, &[list.as_bytes()], &[ttl.as_bytes()])?;
    Ok(())
}
