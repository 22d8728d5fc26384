//! Who holds a read-write lock, for anyone: the `INSPECT` script.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::super::request::Request;
use super::super::{
    Holder, Info, LockKeys, count, decode_inspect as decode_inspect_reply, int, millis, text, uint,
};
use super::RwState;
use crate::error::Result;

/// Who holds the lock. KEYS: lock, readers, waiters, writers.
/// Returns `{}` when free, `{-2}` when the key is not a read-write lock, else `{mode, pttl,
/// fence, info, readers, waiters, writers_waiting, cool_until}`: the writer's fencing token
/// and holder information, or those of the live share that expires first; `readers` counts
/// the live shares, `waiters` the live registrations, `writers_waiting` the writers among them.
static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        "local h = redis.pcall('HMGET', KEYS[1], 'mode', 'wfence', 'winfo', 'cool_until')\n",
        "if h['err'] then return {-2} end\n",
        "if h[1] == false then\n",
        "  if redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n",
        "  return {-2}\n",
        "end\n",
        "local now = clock()\n",
        "local live = redis.pcall('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf')\n",
        "if live['err'] then live = {} end\n",
        "local fence, info = h[2] or '0', h[3] or ''\n",
        "if h[1] ~= 'write' and live[1] then\n",
        "  local r = redis.call('HGET', KEYS[1], 'r:' .. live[1]) or ''\n",
        "  fence = string.match(r, '^(%d+)') or '0'\n",
        "  info = string.sub(r, #fence + 2)\n",
        "end\n",
        "local w = redis.pcall('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf')\n",
        "if w['err'] then w = {} end\n",
        "local ww = redis.pcall('ZRANGEBYSCORE', KEYS[4], '(' .. now, '+inf')\n",
        "if ww['err'] then ww = {} end\n",
        "return {h[1], redis.call('PTTL', KEYS[1]), fence, info, #live, #w, #ww, h[4] or '0'}\n",
    ))
});

/// `INSPECT`: who holds the lock, `None` when it is free;
/// [`Error::WrongType`](crate::Error::WrongType) when the key is not a read-write lock (a
/// mutex, or foreign data).
pub(crate) fn inspect(keys: &LockKeys) -> Request<Option<Holder>> {
    let (readers, writers) = (keys.readers(), keys.writers());
    let k = keys.clone();
    Request::script(
        &INSPECT,
        &[
            keys.lock.as_bytes(),
            readers.as_bytes(),
            keys.waiters.as_bytes(),
            writers.as_bytes(),
        ],
        &[],
        move |v: Vec<Value>| decode_inspect(&k, &v),
    )
}

fn decode_inspect(keys: &LockKeys, v: &[Value]) -> Result<Option<Holder>> {
    decode_inspect_reply(keys, v, "unexpected read-write lock inspect reply", |v| {
        let [
            mode,
            pttl,
            fence,
            info,
            readers,
            waiters,
            writers,
            cool_until,
        ] = v
        else {
            return None;
        };
        let mode = text(mode);
        let Info {
            host,
            pid,
            since_ms,
            meta,
        } = Info::parse(&text(info));
        let readers = count(readers);
        Some(Holder {
            remaining_ttl: int(pttl).and_then(millis),
            host,
            pid,
            since_ms,
            fence: uint(fence).unwrap_or(0),
            meta,
            hold_until_ms: None,
            owned: mode == "write" || (mode == "read" && readers > 0),
            cool_until_ms: uint(cool_until).filter(|c| *c > 0),
            waiters: count(waiters),
            queued: 0,
            queue_head: None,
            rw: Some(RwState {
                writer: mode == "write",
                readers,
                writers_waiting: count(writers),
            }),
            fence_is_counter: false,
        })
    })
}

#[cfg(test)]
mod tests {
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
            bulk("read"),
            Value::Int(900),
            bulk("17"),
            bulk("web-1\n4242\n1700000000000\nnightly\nreport"),
            Value::Int(3),
            Value::Int(2),
            Value::Int(1),
            bulk("0"),
        ];
        let h = decode_inspect(&k, &v).unwrap().unwrap();
        assert_eq!(
            (h.host.as_str(), h.pid, h.since_ms, h.fence),
            ("web-1", 4242, 1_700_000_000_000, 17)
        );
        assert_eq!(h.meta.as_deref(), Some("nightly\nreport"));
        assert!(h.owned);
        assert_eq!(
            h.rw,
            Some(RwState {
                writer: false,
                readers: 3,
                writers_waiting: 1
            })
        );
        assert_eq!(h.waiters, 2);
        // Cooling down after a release: nobody owns it.
        let v = [
            bulk("cool"),
            Value::Int(400),
            bulk("0"),
            bulk(""),
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
            bulk("1700000009000"),
        ];
        let h = decode_inspect(&k, &v).unwrap().unwrap();
        assert!(!h.owned);
        assert_eq!(h.cool_until_ms, Some(1_700_000_009_000));
        assert_eq!((h.host.as_str(), h.pid, h.meta), ("", 0, None));
        assert!(decode_inspect(&k, &[Value::Int(1), Value::Int(2)]).is_err());
    }
}
