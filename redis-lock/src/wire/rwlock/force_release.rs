//! Breaking a read-write lock whoever holds it, waking every waiter: the `FORCE_RELEASE`
//! script.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::{Broken, LockKeys, decode_broken};

/// Operator's release: delete the lock (writer and every share) and wake every waiter.
/// KEYS: lock, readers, waiters, writers, signal, writers' wake-up list. Returns `{}` when
/// free, `{-2}` when the key is not a read-write lock, `{-4}` / `{-6}` when the shared / the
/// writers' wake-up list holds another type (nothing changed),
/// else `{host, pid}` of the writer (or of one reader).
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        rw_lists_ok!(),
        rw_wake_all!(),
        "local h = redis.pcall('HMGET', KEYS[1], 'mode', 'winfo')\n",
        "if h['err'] then return {-2} end\n",
        "if h[1] == false then\n",
        "  if redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n",
        "  return {-2}\n",
        "end\n",
        "local lk = lists_ok(KEYS[5], KEYS[6])\n",
        "if lk ~= 0 then return {tostring(lk)} end\n",
        "local info = h[2] or ''\n",
        "if h[1] == 'read' then\n",
        "  local first = redis.pcall('ZRANGE', KEYS[2], 0, 0)\n",
        "  if not first['err'] and first[1] then\n",
        "    local r = redis.call('HGET', KEYS[1], 'r:' .. first[1]) or ''\n",
        "    info = string.sub(r, (string.find(r, '\\n', 1, true) or #r) + 1)\n",
        "  end\n",
        "end\n",
        "local host, pid = string.match(info, '^([^\\n]*)\\n([^\\n]*)\\n')\n",
        "redis.call('DEL', KEYS[1], KEYS[2])\n",
        "wake_all(KEYS[5], KEYS[6], KEYS[3], KEYS[4])\n",
        "return {host or '', pid or ''}\n",
    ))
});

/// `FORCE_RELEASE`: break the lock whoever holds it, waking every waiter.
pub(crate) fn force_release(keys: &LockKeys) -> Request<Broken> {
    let (readers, writers, writer_signal) = (keys.readers(), keys.writers(), keys.writer_signal());
    let k = keys.clone();
    Request::script(
        &FORCE_RELEASE,
        &[
            keys.lock.as_bytes(),
            readers.as_bytes(),
            keys.waiters.as_bytes(),
            writers.as_bytes(),
            keys.signal.as_bytes(),
            writer_signal.as_bytes(),
        ],
        &[],
        move |v: Vec<String>| {
            decode_broken(&k, &v, |code| match code {
                "-4" => Some(k.signal.clone()),
                "-6" => Some(k.writer_signal()),
                _ => None,
            })
        },
    )
}
