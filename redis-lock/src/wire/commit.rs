//! A commit under the lock: the user's commands, sent with the holder's ownership check as one
//! script, so that Redis runs them only while the lock is still this holder's, atomically with
//! the check. Every primitive brings its check (the body of its `OWNED_TTL` script, with its
//! keys first in `KEYS`); the commands are the same for all.
//!
//! KEYS: the check's keys, then the commands' keys where they are known (a Cluster's, which
//! must be declared: see [`keys_of`]). ARGV: the check's arguments (one owner token; for a
//! multi-lock the member count and a token per member), then each command as its argument
//! count followed by its arguments. Returns `{-2, member}` (gone) or `{-3, member}` (not
//! ours; `member` from 1, always 1 but for a multi-lock) with nothing run, or `{1, replies}`
//! with one reply per command. A command that fails stops the script there: the ones before
//! it are not undone (Redis has no rollback), and the error is the reply.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::Con;
use super::request::Request;
use super::{LockKeys, OwnedTtl, decode_owned_ttl};
use crate::error::{Error, Result};

/// What runs after the check, `owned()`: its code (the PTTL, `-2` gone, `-3` not ours), where
/// the commands start in ARGV (default 2, after one token) and which member failed (default 1).
/// Each command in turn, `redis.call` so that an error stops it. `unpack` takes at most about
/// 8,000 values: a larger command fails (see the reply above).
const COMMANDS: &str = "\
local left, from, member = owned()
if left == -2 or left == -3 then return {left, member or 1} end
local out, i = {}, from or 2
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  out[#out + 1] = redis.call(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return {1, out}
";

/// The commit script of a primitive whose `OWNED_TTL` script is `owned_ttl` (a chunk that
/// returns the PTTL, `-2` gone or `-3` not ours, reading the token from `ARGV[1]`).
pub(crate) fn script(owned_ttl: &str) -> Script {
    Script::new(&format!(
        "local function owned()\n{owned_ttl}end\n{COMMANDS}"
    ))
}

/// A primitive's ownership check, as a commit runs it: its commit script (from [`script`])
/// and the keys its check reads, in order.
#[derive(Debug)]
pub(crate) struct Check {
    pub(crate) script: &'static Script,
    pub(crate) keys: Vec<String>,
    /// Several members, each with its token: ARGV starts with their count.
    pub(crate) members: bool,
}

/// Several mutex locks held together (a multi-lock): every member must still be its
/// token's. KEYS: the members' lock keys. ARGV: the member count, then their tokens.
const ALL_OWNED: &str = concat!(
    owner_of!(),
    "local m = tonumber(ARGV[1])\n",
    "for i = 1, m do\n",
    "  local t = owner_of(KEYS[i])\n",
    "  if t ~= ARGV[i + 1] then\n",
    "    if t == false then return -2, 0, i end\n",
    "    return -3, 0, i\n",
    "  end\n",
    "end\n",
    "return 0, m + 2\n",
);

static COMMIT_ALL: LazyLock<Script> = LazyLock::new(|| script(ALL_OWNED));

/// The check of a commit under the mutex locks `keys` held together.
pub(crate) fn all_check(keys: &[&LockKeys]) -> Check {
    Check {
        script: &COMMIT_ALL,
        keys: keys.iter().map(|k| k.lock.clone()).collect(),
        members: true,
    }
}

/// What a commit came to.
#[derive(Debug)]
pub(crate) enum Committed {
    /// The lock was ours: every command ran; their replies in order.
    Applied(Vec<Value>),
    /// The lock (member `member`, from 0, of a multi-lock) was not ours (gone or another
    /// owner's): nothing ran.
    Lost { why: OwnedTtl, member: usize },
}

/// Sends `commands` under `check` for the holder of `tokens` (one, or a multi-lock's, one
/// per member; one round trip). `keys`: the commands' keys to declare (a Cluster's; empty
/// elsewhere).
pub(crate) fn commit(
    check: &Check,
    tokens: &[&str],
    keys: &[Vec<u8>],
    commands: &[Vec<&[u8]>],
) -> Request<Committed> {
    let all_keys: Vec<&[u8]> = check
        .keys
        .iter()
        .map(|k| k.as_bytes())
        .chain(keys.iter().map(Vec::as_slice))
        .collect();
    let counts: Vec<String> = commands.iter().map(|c| c.len().to_string()).collect();
    let members = tokens.len().to_string();
    let mut args: Vec<&[u8]> = Vec::with_capacity(tokens.len() + 1 + counts.len());
    if check.members {
        args.push(members.as_bytes());
    }
    args.extend(tokens.iter().map(|t| t.as_bytes()));
    for (command, count) in commands.iter().zip(&counts) {
        args.push(count.as_bytes());
        args.extend(command.iter().copied());
    }
    Request::script(check.script, &all_keys, &args, decode)
}

fn decode(reply: Value) -> Result<Committed> {
    let unexpected = || {
        Error::Redis(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "unexpected reply to a commit",
        )))
    };
    let Value::Array(mut parts) = reply else {
        return Err(unexpected());
    };
    match (parts.len(), parts.first()) {
        (2, Some(Value::Int(1))) => match parts.pop() {
            Some(Value::Array(replies)) => Ok(Committed::Applied(replies)),
            _ => Err(unexpected()),
        },
        (2, Some(&Value::Int(code))) if code == -2 || code == -3 => match parts[1] {
            Value::Int(member) if member >= 1 => Ok(Committed::Lost {
                why: decode_owned_ttl(code),
                member: usize::try_from(member - 1).unwrap_or(0),
            }),
            _ => Err(unexpected()),
        },
        _ => Err(unexpected()),
    }
}

/// The keys of each command, as the server finds them (`COMMAND GETKEYS`, a round trip per
/// command: a Cluster's commits only): a Cluster's commit declares them, and they must all be
/// in the lock's slot. A command without keys has none; one the server does not know fails
/// here, before anything runs.
pub(crate) fn keys_of(con: &mut Con<'_>, commands: &[Vec<&[u8]>]) -> Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    for command in commands {
        let mut getkeys = redis::cmd("COMMAND");
        getkeys.arg("GETKEYS");
        for arg in command {
            getkeys.arg(*arg);
        }
        match getkeys.query::<Vec<Vec<u8>>>(con) {
            Ok(found) => keys.extend(found),
            // "The command has no key arguments": PING, TIME, ...
            Err(e) if e.to_string().contains("no key arguments") => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_reply_decodes_to_what_it_says() {
        let applied = decode(Value::Array(vec![
            Value::Int(1),
            Value::Array(vec![Value::Int(7), Value::Okay]),
        ]))
        .unwrap();
        assert!(matches!(applied, Committed::Applied(r) if r == [Value::Int(7), Value::Okay]));
        assert!(matches!(
            decode(Value::Array(vec![Value::Int(-2), Value::Int(1)])).unwrap(),
            Committed::Lost {
                why: OwnedTtl::Gone,
                member: 0
            }
        ));
        assert!(matches!(
            decode(Value::Array(vec![Value::Int(-3), Value::Int(2)])).unwrap(),
            Committed::Lost {
                why: OwnedTtl::NotOurs,
                member: 1
            }
        ));
        for bad in [
            Value::Int(1),
            Value::Array(vec![Value::Int(0)]),
            Value::Array(vec![Value::Int(-2)]),
            Value::Array(vec![Value::Int(-2), Value::Int(0)]),
            Value::Array(vec![Value::Int(1), Value::Int(2)]),
            Value::Array(vec![]),
        ] {
            assert!(decode(bad).is_err());
        }
    }
}
