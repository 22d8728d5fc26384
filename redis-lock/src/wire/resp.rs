//! RESP2 replies: where the first reply in a buffer ends (`complete`), and the reply itself as
//! a `redis::Value` (`parse`), for the connections that read their own sockets
//! (`store/plain.rs`, and the direct path of a quorum, which reads replies in pieces).
//!
//! Why not the `redis` crate's parser: it reads through a `combine` buffer that zero-fills
//! 8 KiB of spare room on every read, which was a quarter of the client's instructions in an
//! uncontended lock cycle (`valgrind --tool=callgrind`: `memset` 25.6 % of all). Error replies
//! are still built by the crate (`parse_redis_value` on the error line), so they are exactly
//! what its own connections return.

use redis::Value;

/// The length of the first complete RESP2 value in `buf`: `Ok(None)` while more bytes are
/// needed, `Err(())` when `buf` is not RESP2.
pub(crate) fn complete(buf: &[u8]) -> Result<Option<usize>, ()> {
    value(buf, 0, 0)
}

/// Appends one command to `out` as RESP sends it: an array of bulk strings. The native fast
/// path packs its two commands this way, with no `Cmd` or `Pipeline` allocated per call.
pub(crate) fn pack_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    pack_array(out, args.len());
    for arg in args {
        pack_bulk(out, arg);
    }
}

/// Appends the header of a command of `len` arguments (each then added by [`pack_bulk`]).
pub(crate) fn pack_array(out: &mut Vec<u8>, len: usize) {
    out.push(b'*');
    push_decimal(out, len as u64);
    out.extend_from_slice(b"\r\n");
}

/// Appends one argument of a command (see [`pack_array`]).
pub(crate) fn pack_bulk(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'$');
    push_decimal(out, arg.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal digits (no `format!`: this runs on every acquisition).
pub(crate) fn push_decimal(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(Decimal::new(n).as_bytes());
}

/// A number's decimal digits, kept on the stack: an argument of a request packed by hand
/// (no allocation, no `format!`).
#[derive(Clone, Copy)]
pub(crate) struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    pub(crate) fn new(mut n: u64) -> Decimal {
        let mut digits = [0; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            // `n % 10` is below 10.
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Decimal { digits, start }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

/// The first RESP2 value in `buf` and its length, once it is complete: `Ok(None)` while more
/// bytes are needed, `Err(())` when `buf` is not RESP2.
pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Value, usize)>, ()> {
    match complete(buf)? {
        Some(len) => build(buf, 0, 0).map(|(v, end)| {
            debug_assert_eq!(end, len);
            Some((v, len))
        }),
        None => Ok(None),
    }
}

/// The value at `at` of a buffer known to hold it whole (`complete` said so), and where it
/// ends.
fn build(buf: &[u8], at: usize, depth: usize) -> Result<(Value, usize), ()> {
    let kind = *buf.get(at).ok_or(())?;
    let end = line_end(buf, at + 1).ok_or(())?;
    let after = end + 2;
    let line = &buf[at + 1..end];
    match kind {
        b'+' if line == b"OK" => Ok((Value::Okay, after)),
        b'+' => Ok((
            Value::SimpleString(String::from_utf8_lossy(line).into_owned()),
            after,
        )),
        b'-' => redis::parse_redis_value(&buf[at..after])
            .map(|v| (v, after))
            .map_err(|_| ()),
        b':' => Ok((Value::Int(number(line)?), after)),
        b'$' => {
            let len = number(line)?;
            if len < 0 {
                return Ok((Value::Nil, after));
            }
            let len = usize::try_from(len).map_err(|_| ())?;
            let data = buf.get(after..after + len).ok_or(())?;
            Ok((Value::BulkString(data.to_vec()), after + len + 2))
        }
        b'*' => {
            let count = number(line)?;
            if count < 0 {
                return Ok((Value::Nil, after));
            }
            if depth >= MAX_DEPTH {
                return Err(());
            }
            // Bounded by the bytes: every element takes at least three.
            let mut items =
                Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(buf.len() / 3));
            let mut pos = after;
            for _ in 0..count {
                let (v, next) = build(buf, pos, depth + 1)?;
                items.push(v);
                pos = next;
            }
            Ok((Value::Array(items), pos))
        }
        _ => Err(()),
    }
}

/// Nested arrays deeper than this are refused (no reply of ours nests more than twice).
const MAX_DEPTH: usize = 16;

fn value(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, ()> {
    if depth > MAX_DEPTH {
        return Err(());
    }
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some(end) = line_end(buf, at + 1) else {
        return Ok(None);
    };
    let after = end + 2;
    match kind {
        b'+' | b'-' => Ok(Some(after)),
        b':' => number(&buf[at + 1..end]).map(|_| Some(after)),
        b'$' => {
            let len = number(&buf[at + 1..end])?;
            if len < 0 {
                return Ok(Some(after));
            }
            let total = after + usize::try_from(len).map_err(|_| ())? + 2;
            if buf.len() < total {
                return Ok(None);
            }
            if &buf[total - 2..total] != b"\r\n" {
                return Err(());
            }
            Ok(Some(total))
        }
        b'*' => {
            let count = number(&buf[at + 1..end])?;
            let mut pos = after;
            for _ in 0..count.max(0) {
                match value(buf, pos, depth + 1)? {
                    Some(next) => pos = next,
                    None => return Ok(None),
                }
            }
            Ok(Some(pos))
        }
        _ => Err(()),
    }
}

/// Where the line starting at `from` ends (the index of its `\r`), once `\r\n` is in.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn number(digits: &[u8]) -> Result<i64, ()> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(())
}

#[cfg(test)]
mod tests {
    use super::{complete, parse};

    /// Replies of every RESP2 kind, nested arrays and errors among them.
    const REPLIES: &[&[u8]] = &[
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"-NOSCRIPT No matching script\r\n",
        b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        b":42\r\n",
        b":-2\r\n",
        b"$-1\r\n",
        b"$0\r\n\r\n",
        b"$5\r\nab\r\nc\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*3\r\n:1\r\n$2\r\nhi\r\n*2\r\n:7\r\n$-1\r\n",
        b"*2\r\n+OK\r\n-ERR inside\r\n",
    ];

    /// Each reply is measured and parsed whole (as the `redis` crate parses it), not before
    /// its last byte, and not past its end.
    #[test]
    fn whole_replies_are_measured_and_parse_as_the_redis_crate_parses_them() {
        for &reply in REPLIES {
            assert_eq!(complete(reply), Ok(Some(reply.len())), "{reply:?}");
            let theirs = redis::parse_redis_value(reply).unwrap();
            assert_eq!(parse(reply), Ok(Some((theirs, reply.len()))), "{reply:?}");
            for cut in 0..reply.len() {
                assert_eq!(complete(&reply[..cut]), Ok(None), "{reply:?} cut at {cut}");
                assert_eq!(parse(&reply[..cut]), Ok(None), "{reply:?} cut at {cut}");
            }
            let mut more = reply.to_vec();
            more.extend_from_slice(b":1\r\n");
            assert_eq!(complete(&more), Ok(Some(reply.len())));
            assert_eq!(parse(&more).unwrap().unwrap().1, reply.len());
        }
        assert_eq!(parse(b":x\r\n"), Err(()));
    }

    #[test]
    fn commands_pack_as_the_redis_crate_packs_them() {
        let mut ours = Vec::new();
        super::pack_command(
            &mut ours,
            &[b"SET", b"k{x}", b"a\nb", b"NX", b"PX", b"10000"],
        );
        super::pack_command(&mut ours, &[b"INCR", b""]);
        let theirs = redis::pipe()
            .cmd("SET")
            .arg("k{x}")
            .arg("a\nb")
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .cmd("INCR")
            .arg("")
            .get_packed_pipeline();
        assert_eq!(ours, theirs);
        for n in [0, 7, 10, 1_234_567_890, u64::MAX] {
            let mut out = Vec::new();
            super::push_decimal(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            &b"?\r\n"[..],
            b":x\r\n",
            b"$2\r\nabcd\r\n",
            b"*z\r\n",
            b"$99999999999999999999999\r\n",
        ] {
            assert_eq!(complete(bad), Err(()), "{bad:?}");
        }
        let deep = "*1\r\n".repeat(20) + ":1\r\n";
        assert_eq!(complete(deep.as_bytes()), Err(()));
    }
}
