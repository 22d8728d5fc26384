//! The semaphore's limit, permits and waiters, for anyone: the `INSPECT` script.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::super::request::Request;
use super::super::{Info, LockKeys, count, decode_inspect as decode_inspect_reply, text, uint};
use super::{PermitHolder, Permits};
use crate::error::Result;

/// The limit, who waits, and every live permit's remaining TTL and holder information (never
/// its token).
/// KEYS: permits, holders, waiters, queue, limit. Returns `{}` when the semaphore was never
/// used (no limit stored, no permit), `{-2}` when a key holds another type, else `{limit,
/// waiters, queued, pttl_1, info_1, pttl_2, info_2, …}`, earliest expiry first; `info` is
/// `fence \n host \n pid \n since \n meta`.
static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "if wrong(KEYS[1], 'zset') or wrong(KEYS[2], 'hash') or wrong(KEYS[5], 'string') then return {-2} end\n",
        "local stored = redis.call('GET', KEYS[5])\n",
        "if not stored and redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n",
        "local now = clock()\n",
        "local w = redis.pcall('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf')\n",
        "if w['err'] then w = {} end\n",
        "local q = redis.pcall('ZRANGE', KEYS[4], 0, -1)\n",
        "if q['err'] then q = {} end\n",
        "local out = {tonumber(stored) or 0, #w, #q}\n",
        "local p = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')\n",
        "for i = 1, #p, 2 do\n",
        "  out[#out + 1] = tonumber(p[i + 1]) - now\n",
        "  out[#out + 1] = redis.call('HGET', KEYS[2], p[i]) or ''\n",
        "end\n",
        "return out\n",
    ))
});

/// `INSPECT`: the limit, the holders and the waiters; `None` for a semaphore never used.
pub(crate) fn inspect(keys: &LockKeys) -> Request<Option<Permits>> {
    let (holders, limit) = (keys.holders(), keys.limit());
    let k = keys.clone();
    Request::script(
        &INSPECT,
        &[
            keys.lock.as_bytes(),
            holders.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
            limit.as_bytes(),
        ],
        &[],
        move |v: Vec<Value>| decode_inspect(&k, &v),
    )
}

fn decode_inspect(keys: &LockKeys, v: &[Value]) -> Result<Option<Permits>> {
    decode_inspect_reply(keys, v, "unexpected semaphore inspect reply", |v| {
        let [limit, waiters, queued, rest @ ..] = v else {
            return None;
        };
        if rest.len() % 2 != 0 {
            return None;
        }
        let holders = rest
            .chunks_exact(2)
            .map(|p| decode_holder(&p[0], &text(&p[1])))
            .collect();
        Some(Permits {
            limit: count(limit),
            holders,
            waiters: count(waiters),
            queued: count(queued),
        })
    })
}

/// One permit's `pttl` and `fence \n host \n pid \n since \n meta`.
fn decode_holder(pttl: &Value, info: &str) -> PermitHolder {
    let (fence, info) = info.split_once('\n').unwrap_or((info, ""));
    let Info {
        host,
        pid,
        since_ms,
        meta,
    } = Info::parse(info);
    PermitHolder {
        remaining_ttl: uint(pttl).map_or(Duration::ZERO, Duration::from_millis),
        fence: fence.parse().unwrap_or(0),
        host,
        pid,
        since_ms,
        meta,
    }
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
        let k = LockKeys::new("lock:", "s").unwrap();
        assert_eq!(decode_inspect(&k, &[]).unwrap(), None);
        assert!(matches!(
            decode_inspect(&k, &[Value::Int(-2)]),
            Err(Error::WrongType { .. })
        ));
        let v = [
            Value::Int(3),
            Value::Int(2),
            Value::Int(1),
            Value::Int(900),
            bulk("17\nweb-1\n4242\n1700000000000\nnightly\nrun"),
            Value::Int(800),
            bulk("18\n\n\n0\n"),
        ];
        let p = decode_inspect(&k, &v).unwrap().unwrap();
        assert_eq!((p.limit, p.waiters, p.queued), (3, 2, 1));
        assert_eq!(
            p.holders[0],
            PermitHolder {
                remaining_ttl: Duration::from_millis(900),
                fence: 17,
                host: "web-1".into(),
                pid: 4242,
                since_ms: 1_700_000_000_000,
                meta: Some("nightly\nrun".into()),
            }
        );
        // A granted permit not claimed yet: empty holder fields.
        assert_eq!(p.holders[1].fence, 18);
        assert_eq!((p.holders[1].host.as_str(), p.holders[1].pid), ("", 0));
        assert_eq!(p.holders[1].meta, None);
        // An odd number of permit fields is not a reply these scripts send.
        assert!(decode_inspect(&k, &v[..6]).is_err());
    }
}
