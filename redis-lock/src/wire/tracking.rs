//! Client-side tracking on the wire: the commands that make a server tell this client when a
//! key it read is changed (`CLIENT ID`, `SUBSCRIBE __redis__:invalidate`, `CLIENT TRACKING ON
//! REDIRECT <id> NOLOOP`) and the decoding of the invalidation messages it then sends.
//!
//! Tracking in its default mode remembers each key a tracked connection read (a script's reads
//! count) and sends one invalidation the next time anybody else changes, deletes, expires or
//! evicts it; `NOLOOP` leaves out the tracked connection's own writes. The messages go to
//! the connection named by `REDIRECT`, subscribed to `__redis__:invalidate` (RESP2's form).
//! Tested on Redis 7.0, Valkey 8.1 and 9.1 (`store/notify/`).

use redis::{Cmd, Value};

/// The channel invalidation messages are published on to a redirect target.
const CHANNEL: &[u8] = b"__redis__:invalidate";

/// `CLIENT ID`: the connection's id, which `REDIRECT` names.
pub(crate) fn client_id() -> Cmd {
    redis::cmd("CLIENT").arg("ID").to_owned()
}

/// `SUBSCRIBE __redis__:invalidate`, sent by the connection that receives the invalidations.
pub(crate) fn subscribe() -> Cmd {
    redis::cmd("SUBSCRIBE").arg(CHANNEL).to_owned()
}

/// `CLIENT TRACKING ON REDIRECT <id> NOLOOP`: keys this connection reads are tracked, their
/// invalidations go to connection `id`, and its own writes (the watchdog's renewals) send none.
pub(crate) fn track(redirect: u64) -> Cmd {
    redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .arg("REDIRECT")
        .arg(redirect)
        .arg("NOLOOP")
        .to_owned()
}

/// `CLIENT TRACKING ON REDIRECT <id>` without `NOLOOP`, for the connection that reads the
/// canary: an eviction from the tracking table while a `NOLOOP` connection's own command runs
/// is not announced to it, and the tracked connection's own commands (renewals, checks) are
/// what fills the table. This one sends nothing after its read, so every eviction of the
/// canary is announced.
pub(crate) fn track_canary(redirect: u64) -> Cmd {
    redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .arg("REDIRECT")
        .arg(redirect)
        .to_owned()
}

/// The canary of a tracked connection whose first watched key is `watched`: a key nobody
/// writes, in the same slot and under the same ACL pattern, so that its invalidation can only
/// mean the server evicted it from its tracking table (`store/notify/`).
pub(crate) fn canary(watched: &str) -> String {
    let mut key = String::with_capacity(watched.len() + 16);
    key.push_str(watched);
    key.push_str(":notify-canary");
    key
}

/// `GET canary`: the read that has the server track it.
pub(crate) fn read_canary(canary: &str) -> Cmd {
    redis::cmd("GET").arg(canary).to_owned()
}

/// What a message on the subscribed connection says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// These keys were changed (or deleted, expired, evicted) by someone else.
    Keys(Vec<String>),
    /// Every key may have changed (`FLUSHALL`/`FLUSHDB`, or the server dropped its tracking
    /// table): the message's key list is nil.
    All,
    /// Anything else: the subscription's confirmation, another channel.
    Other,
}

/// Decodes one message of the subscribed connection: `["message", channel, keys]`.
pub(crate) fn decode(value: &Value) -> Message {
    let Value::Array(parts) = value else {
        return Message::Other;
    };
    let [Value::BulkString(kind), Value::BulkString(channel), keys] = parts.as_slice() else {
        return Message::Other;
    };
    if kind.as_slice() != b"message" || channel.as_slice() != CHANNEL {
        return Message::Other;
    }
    match keys {
        Value::Nil => Message::All,
        Value::Array(keys) => Message::Keys(
            keys.iter()
                .filter_map(|k| match k {
                    Value::BulkString(k) => String::from_utf8(k.clone()).ok(),
                    _ => None,
                })
                .collect(),
        ),
        _ => Message::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn an_invalidation_names_its_keys() {
        let msg = Value::Array(vec![
            bulk("message"),
            bulk("__redis__:invalidate"),
            Value::Array(vec![bulk("lock:{a}"), bulk("lock:{b}")]),
        ]);
        assert_eq!(
            decode(&msg),
            Message::Keys(vec!["lock:{a}".into(), "lock:{b}".into()])
        );
    }

    #[test]
    fn a_nil_key_list_means_every_key() {
        let msg = Value::Array(vec![
            bulk("message"),
            bulk("__redis__:invalidate"),
            Value::Nil,
        ]);
        assert_eq!(decode(&msg), Message::All);
    }

    #[test]
    fn confirmations_and_other_channels_are_not_invalidations() {
        let confirm = Value::Array(vec![
            bulk("subscribe"),
            bulk("__redis__:invalidate"),
            Value::Int(1),
        ]);
        assert_eq!(decode(&confirm), Message::Other);
        let other = Value::Array(vec![
            bulk("message"),
            bulk("news"),
            Value::Array(vec![bulk("lock:{a}")]),
        ]);
        assert_eq!(decode(&other), Message::Other);
        assert_eq!(decode(&Value::Okay), Message::Other);
    }

    #[test]
    fn the_tracking_command_redirects_without_loop() {
        let packed = track(42).get_packed_command();
        let text = String::from_utf8(packed).unwrap();
        for word in ["TRACKING", "ON", "REDIRECT", "42", "NOLOOP"] {
            assert!(text.contains(word), "{text}");
        }
    }
}
