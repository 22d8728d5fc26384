//! Running a script: the one way every typed call of `wire/` sends one. The script's `KEYS`
//! and `ARGV` are byte strings (numbers as [`Decimal`](super::resp::Decimal)), and the reply
//! comes back as the type the call decodes.

use redis::{FromRedisValue, Script, Value};

use super::Con;
use super::resp;
use crate::error::Result;

/// `EVALSHA` of `script` with `keys` and `args`, decoded as `T`.
///
/// On a connection that takes packed bytes (a server's, a sentinel master's, a quorum's
/// direct path) the request is packed by hand (`resp::pack_array`), which costs the client
/// about half of what building it through `redis::Script` does (measured on the release, the
/// hot script); where the server lacks the script it is loaded and the same request sent
/// again. A cluster's connection takes no packed bytes: it routes a `Cmd` by its keys, so
/// there the `redis` crate's invocation is used (it loads the script the same way).
pub(crate) fn run<T: FromRedisValue>(
    con: &mut Con<'_>,
    script: &Script,
    keys: &[&[u8]],
    args: &[&[u8]],
) -> Result<T> {
    let reply = if con.supports_pipelining() {
        packed(con, script, keys, args)?
    } else {
        let mut call = script.prepare_invoke();
        for key in keys {
            call.key(*key);
        }
        for arg in args {
            call.arg(*arg);
        }
        call.invoke::<Value>(con)?
    };
    Ok(redis::from_redis_value(reply).map_err(redis::RedisError::from)?)
}

/// The hand-packed `EVALSHA` (see [`run`]).
fn packed(
    con: &mut Con<'_>,
    script: &Script,
    keys: &[&[u8]],
    args: &[&[u8]],
) -> redis::RedisResult<Value> {
    let size: usize = keys.iter().chain(args).map(|a| a.len() + 16).sum();
    let mut packed = Vec::with_capacity(size + 96);
    resp::pack_array(&mut packed, 3 + keys.len() + args.len());
    resp::pack_bulk(&mut packed, b"EVALSHA");
    resp::pack_bulk(&mut packed, script.get_hash().as_bytes());
    resp::pack_bulk(
        &mut packed,
        resp::Decimal::new(keys.len() as u64).as_bytes(),
    );
    for part in keys.iter().chain(args) {
        resp::pack_bulk(&mut packed, part);
    }
    let reply = match con.req_packed_command(&packed)? {
        Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript) => {
            // `SCRIPT LOAD` and neither request is counted (`PooledConn`): one request.
            script.load(con)?;
            con.req_packed_command(&packed)?
        }
        reply => reply,
    };
    reply.extract_error()
}
