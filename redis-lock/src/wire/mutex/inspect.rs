//! Who holds a mutex, for anyone: the `INSPECT` script.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::super::request::Request;
use super::super::{
    Holder, LockKeys, count, decode_inspect as decode_inspect_reply, int, millis, text, uint,
};
use crate::error::Result;

/// Read holder information, the remaining TTL and who waits in one go.
/// KEYS: lock, waiters, queue, fence. Returns `{}` when free, `{-2}` for another type, a hash
/// without owner token (a read-write lock, see `rwlock/mod.rs`) or a string not of the native
/// form, else `{pttl, host, pid, since, fence, meta, hold_until, token_is_empty, cool_until,
/// waiters, queued, head, string}`: `waiters` counts live registrations (lapsing after now),
/// `queued` the fair queue, `head` is the waiter id at its head (`''` when empty); `string`
/// is `1` for a lock taken natively, whose `fence` is the fencing counter's value. A waiter
/// key of another type (not ours) counts as nobody waiting.
static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local h = redis.pcall('HMGET', KEYS[1], 'info', 'hold_until', 'token', 'fence', 'cool_until')\n",
        "local str = 0\n",
        "if h['err'] then\n",
        // A string lock, taken natively: `token \n info`; its fencing token is not stored
        // with it, the counter's value stands for it (module docs, "Two forms").
        "  local s = redis.pcall('GET', KEYS[1])\n",
        "  if type(s) ~= 'string' then return {-2} end\n",
        "  local owner, info = string.match(s, ",
        string_lock!(),
        ")\n",
        "  if not owner then return {-2} end\n",
        // No `fence`: filled in from the counter below.
        "  h = {info, false, owner, false, false}\n",
        "end\n",
        "if h[3] == false then\n",
        "  if redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n",
        // A hash without an owner token is not a mutex (a read-write lock, or foreign data).
        "  return {-2}\n",
        "end\n",
        // A string lock, or one a waiter's registration made a hash (`ACQUIRE`), has no
        // `fence`.
        "if h[4] == false then\n",
        "  local c = redis.pcall('GET', KEYS[4])\n",
        "  if type(c) ~= 'string' then c = '0' end\n",
        "  h[4] = c\n",
        "  str = 1\n",
        "end\n",
        "local info = h[1] or ''\n",
        "local f = {}\n",
        "local pos = 1\n",
        "for n = 1, 3 do\n",
        "  local e = string.find(info, '\\n', pos, true)\n",
        "  if not e then break end\n",
        "  f[n] = string.sub(info, pos, e - 1)\n",
        "  pos = e + 1\n",
        "end\n",
        "local meta = ''\n",
        "if f[3] then meta = string.sub(info, pos) end\n",
        clock!(),
        // ZRANGEBYSCORE and ZRANGE rather than ZCOUNT and ZCARD: the scripts use them
        // already, so the minimal ACL rule (SAFETY.md) stays as it is; waiters are few.
        "local w = redis.pcall('ZRANGEBYSCORE', KEYS[2], '(' .. clock(), '+inf')\n",
        "if w['err'] then w = {} end\n",
        "local q = redis.pcall('ZRANGE', KEYS[3], 0, -1)\n",
        "if q['err'] then q = {} end\n",
        "local head = q[1] or ''\n",
        "w = #w\n",
        "q = #q\n",
        "return {redis.call('PTTL', KEYS[1]), f[1] or '', f[2] or '', f[3] or '0', h[4] or '0', meta, h[2] or '0', (h[3] == '' or h[3] == false) and 1 or 0, h[5] or '0', w, q, head, str}\n",
    ))
});

/// `INSPECT`: who holds the lock, `None` when it is free.
pub(crate) fn inspect(keys: &LockKeys) -> Request<Option<Holder>> {
    let k = keys.clone();
    Request::script(
        &INSPECT,
        &[
            keys.lock.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
            keys.fence.as_bytes(),
        ],
        &[],
        move |v: Vec<Value>| decode_inspect(&k, &v),
    )
}

fn decode_inspect(keys: &LockKeys, v: &[Value]) -> Result<Option<Holder>> {
    decode_inspect_reply(keys, v, "unexpected inspect reply", |v| {
        let [
            pttl,
            host,
            pid,
            since,
            fence,
            meta,
            hold_until,
            no_owner,
            cool_until,
            waiters,
            queued,
            head,
            string,
        ] = v
        else {
            return None;
        };
        let since_ms = uint(since).unwrap_or(0);
        let meta = text(meta);
        Some(Holder {
            remaining_ttl: int(pttl).and_then(millis),
            host: text(host),
            pid: int(pid).and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
            since_ms,
            fence: uint(fence).unwrap_or(0),
            meta: (!meta.is_empty()).then_some(meta),
            hold_until_ms: uint(hold_until).filter(|h| *h > since_ms),
            owned: int(no_owner) == Some(0),
            cool_until_ms: uint(cool_until).filter(|c| *c > 0),
            waiters: count(waiters),
            queued: count(queued),
            queue_head: Some(text(head)).filter(|h| !h.is_empty()),
            rw: None,
            fence_is_counter: int(string) == Some(1),
        })
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::Error;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn inspect_reply_decodes() {
        let k = LockKeys::new("lock:", "k").unwrap();
        assert_eq!(decode_inspect(&k, &[]).unwrap(), None);
        assert!(matches!(
            decode_inspect(&k, &[Value::Int(-2)]),
            Err(Error::WrongType { .. })
        ));
        let v = [
            Value::Int(900),
            bulk("web-1"),
            bulk("4242"),
            bulk("1700000000000"),
            bulk("17"),
            bulk("nightly"),
            bulk("1700000005000"),
            Value::Int(0),
            bulk("0"),
            Value::Int(3),
            Value::Int(2),
            bulk("w1"),
            Value::Int(0),
        ];
        let h = decode_inspect(&k, &v).unwrap().unwrap();
        assert_eq!(
            h,
            Holder {
                remaining_ttl: Some(Duration::from_millis(900)),
                host: "web-1".into(),
                pid: 4242,
                since_ms: 1_700_000_000_000,
                fence: 17,
                meta: Some("nightly".into()),
                hold_until_ms: Some(1_700_000_005_000),
                owned: true,
                cool_until_ms: None,
                waiters: 3,
                queued: 2,
                queue_head: Some("w1".into()),
                rw: None,
                fence_is_counter: false,
            }
        );
        // A grant not yet claimed: empty holder fields, no expiry, no hold.
        let v = [
            Value::Int(-1),
            bulk(""),
            bulk(""),
            bulk("0"),
            bulk("3"),
            bulk(""),
            bulk("0"),
            Value::Int(1),
            bulk("1700000009000"),
            Value::Int(0),
            Value::Int(0),
            bulk(""),
            Value::Int(1),
        ];
        let h = decode_inspect(&k, &v).unwrap().unwrap();
        assert_eq!((h.waiters, h.queued, h.queue_head.as_deref()), (0, 0, None));
        assert_eq!(
            (h.remaining_ttl, h.meta, h.hold_until_ms, h.owned),
            (None, None, None, false)
        );
        assert_eq!(h.cool_until_ms, Some(1_700_000_009_000), "cooling down");
        assert!(h.fence_is_counter, "a string lock's fence is the counter's");
        assert!(decode_inspect(&k, &[Value::Int(1), Value::Int(2)]).is_err());
    }
}
