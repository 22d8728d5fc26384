//! RESP2 framing: where the first reply in a buffer ends, so a reply read in pieces from a
//! socket the caller polls (`store/direct.rs`) is parsed once it is whole. Parsing itself is
//! the `redis` crate's.

/// The length of the first complete RESP2 value in `buf`: `Ok(None)` while more bytes are
/// needed, `Err(())` when `buf` is not RESP2.
pub(crate) fn complete(buf: &[u8]) -> Result<Option<usize>, ()> {
    value(buf, 0, 0)
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
    use super::complete;

    #[test]
    fn whole_replies_are_measured() {
        for reply in [
            &b"+OK\r\n"[..],
            b"-NOSCRIPT No matching script\r\n",
            b":42\r\n",
            b"$-1\r\n",
            b"$0\r\n\r\n",
            b"$5\r\nab\r\nc\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n$2\r\nhi\r\n*2\r\n:7\r\n$-1\r\n",
        ] {
            assert_eq!(complete(reply), Ok(Some(reply.len())), "{reply:?}");
            for cut in 0..reply.len() {
                assert_eq!(complete(&reply[..cut]), Ok(None), "{reply:?} cut at {cut}");
            }
            let mut more = reply.to_vec();
            more.extend_from_slice(b":1\r\n");
            assert_eq!(complete(&more), Ok(Some(reply.len())));
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
