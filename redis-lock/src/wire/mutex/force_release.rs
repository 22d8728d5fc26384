//! Breaking a mutex whoever holds it: the `FORCE_RELEASE` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::{Broken, LockKeys, decode_broken};

/// Operator's release: give up whatever lock is there (handing it to a waiter, as a release
/// does), returning who held it.
/// KEYS: lock, fence, signal, waiters, queue. ARGV: grant token for `hand_over`. Returns `{}`
/// when free, `{-2}` when the lock key holds another type (or a hash without owner token), `{-4}` when the signal key does
/// (nothing changed), else `{host, pid}`.
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        hand_over!(),
        "if redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n",
        "local h = redis.pcall('HMGET', KEYS[1], 'info', 'token')\n",
        "if h['err'] then\n",
        // A string lock taken natively: `token \n info`.
        "  local s = redis.pcall('GET', KEYS[1])\n",
        "  h = type(s) == 'string' and select(2, string.match(s, ",
        string_lock!(),
        "))\n",
        "  if not h then return {-2} end\n",
        "elseif h[2] == false then return {-2}\n",
        "else h = h[1] end\n",
        "local sk = redis.call('TYPE', KEYS[3])['ok']\n",
        "if sk ~= 'none' and sk ~= 'list' then return {-4} end\n",
        "local host, pid = string.match(h or '', '^([^\\n]*)\\n([^\\n]*)\\n')\n",
        "if not hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1]) then redis.call('DEL', KEYS[1]) end\n",
        "return {host or '', pid or ''}\n",
    ))
});

/// `FORCE_RELEASE`: break the lock whoever holds it (handing it to a waiter under `grant`).
pub(crate) fn force_release(keys: &LockKeys, grant: &str) -> Request<Broken> {
    let k = keys.clone();
    Request::script(
        &FORCE_RELEASE,
        &[
            keys.lock.as_bytes(),
            keys.fence.as_bytes(),
            keys.signal.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
        ],
        &[grant.as_bytes()],
        move |v: Vec<String>| decode_broken(&k, &v, |code| wrong_key(&k, code)),
    )
}

/// The key the reply's code names: `-4` the wake-up list (any other: the lock key).
fn wrong_key(keys: &LockKeys, code: &str) -> Option<String> {
    (code == "-4").then(|| keys.signal.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn force_release_reply_decodes() {
        let k = LockKeys::new("lock:", "k").unwrap();
        let decode = |v: &[String]| decode_broken(&k, v, |code| wrong_key(&k, code));
        assert_eq!(decode(&[]).unwrap(), None);
        assert_eq!(
            decode(&["h".into(), "12".into()]).unwrap(),
            Some(("h".into(), 12))
        );
        match decode(&["-4".into()]) {
            Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, k.signal),
            other => panic!("{other:?}"),
        }
        match decode(&["-2".into()]) {
            Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, k.lock),
            other => panic!("{other:?}"),
        }
    }
}
