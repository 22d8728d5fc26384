//! A request as a value: the bytes one protocol operation sends (a script's `EVALSHA`, one
//! native command, or a few native commands written together) and how its reply is read,
//! built without a connection, the way mini-redis turns a command into a frame. Every
//! operation of this layer returns one; whoever sends it (a pooled connection here, a combined
//! batch in `store/combine.rs`, the quorum's direct path) decodes the reply once, and a script
//! the server has not cached (`NOSCRIPT`) is loaded through [`Request::load`], the one place
//! that knows how.
//!
//! Scripts are packed by hand (`resp::pack_array`), which costs the client about half of what
//! building the request through `redis::Script` does (measured on the release, the hot
//! script). A Redis Cluster connection takes no packed bytes (it routes a `Cmd` by its keys),
//! so there [`Request::on`] sends the same arguments as a `Cmd`.

use std::fmt;

use redis::{Cmd, FromRedisValue, Script, Value};

use super::Con;
use super::resp;
use crate::error::Result;

type Decode<T> = Box<dyn Fn(Value) -> Result<T> + Send + Sync>;

/// One request and the reading of its reply (see the module documentation).
#[must_use = "a request does nothing until it is sent"]
pub(crate) struct Request<T> {
    packed: Vec<u8>,
    /// Commands in `packed`: more than one are written together, and their replies are
    /// decoded as one array.
    count: usize,
    /// The script `packed` runs by its SHA1, to load where the server lacks it.
    script: Option<&'static Script>,
    decode: Decode<T>,
}

/// Without the bytes: they carry owner tokens.
impl<T> fmt::Debug for Request<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("commands", &self.count)
            .field("script", &self.script.map(Script::get_hash))
            .finish_non_exhaustive()
    }
}

impl<T> Request<T> {
    /// `EVALSHA` of `script` with `keys` and `args`; the reply (a server error returned as
    /// `Err`) converted to `R` and read by `decode`.
    pub(crate) fn script<R: FromRedisValue>(
        script: &'static Script,
        keys: &[&[u8]],
        args: &[&[u8]],
        decode: impl Fn(R) -> Result<T> + Send + Sync + 'static,
    ) -> Self {
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
        Request {
            packed,
            count: 1,
            script: Some(script),
            decode: typed(decode),
        }
    }

    /// One native command (`parts`: its name and arguments); its reply as it came (a server
    /// error is a `Value::ServerError`, for the decoder to tell apart).
    pub(crate) fn command(
        parts: &[&[u8]],
        decode: impl Fn(Value) -> Result<T> + Send + Sync + 'static,
    ) -> Self {
        let mut packed = Vec::with_capacity(parts.iter().map(|p| p.len() + 16).sum());
        resp::pack_command(&mut packed, parts);
        Request {
            packed,
            count: 1,
            script: None,
            decode: Box::new(decode),
        }
    }

    /// Native commands written together in one write (not a transaction: see where one is
    /// built); their replies as one `Value::Array`, each as it came.
    pub(crate) fn commands(
        commands: &[&[&[u8]]],
        decode: impl Fn(Value) -> Result<T> + Send + Sync + 'static,
    ) -> Self {
        let mut packed = Vec::with_capacity(64 * commands.len());
        for parts in commands {
            resp::pack_command(&mut packed, parts);
        }
        Request {
            packed,
            count: commands.len(),
            script: None,
            decode: Box::new(decode),
        }
    }

    /// The bytes of a one-command request, for a transport that sends packed requests one at
    /// a time (a combined batch, the quorum's direct path); `None` for several commands.
    pub(crate) fn packed(&self) -> Option<&[u8]> {
        (self.count == 1).then_some(&self.packed[..])
    }

    /// Reads the reply this request got.
    pub(crate) fn decode(&self, reply: Value) -> Result<T> {
        (self.decode)(reply)
    }

    /// The reply is the server's `NOSCRIPT`: [`load`](Self::load) the script, then send
    /// the request again.
    pub(crate) fn wants_script(&self, reply: &Value) -> bool {
        self.script.is_some() && is_no_script(reply)
    }

    /// Loads this request's script on `con` (`SCRIPT LOAD`; a no-op for a native command).
    pub(crate) fn load(&self, con: &mut Con<'_>) -> Result<()> {
        if let Some(script) = self.script {
            script.load(con)?;
        }
        Ok(())
    }

    /// Sends the request on a real connection and decodes its reply; a script the server
    /// lacks is loaded and the request sent once more.
    pub(crate) fn on(&self, con: &mut Con<'_>) -> Result<T> {
        if !con.supports_pipelining() {
            return self.routed(con);
        }
        let reply = self.send(con)?;
        if self.wants_script(&reply) {
            // `SCRIPT LOAD` and neither request is counted (`PooledConn`): one request.
            self.load(con)?;
            return self.decode(self.send(con)?);
        }
        self.decode(reply)
    }

    fn send(&self, con: &mut Con<'_>) -> Result<Value> {
        Ok(if self.count == 1 {
            con.req_packed_command(&self.packed)?
        } else {
            Value::Array(con.req_packed_commands(&self.packed, 0, self.count)?)
        })
    }

    /// On a connection that routes by key (a cluster's): the same arguments as a `Cmd`.
    fn routed(&self, con: &mut Con<'_>) -> Result<T> {
        let cmd = self.as_cmd()?;
        let reply = match con.req_command(&cmd) {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.load(con)?;
                con.req_command(&cmd)
            }
            Ok(v) if self.wants_script(&v) => {
                self.load(con)?;
                con.req_command(&cmd)
            }
            other => other,
        };
        match reply {
            Ok(v) => self.decode(v),
            // A script's error is the decoder's `Err` either way; a native command's
            // decoder tells server errors apart itself.
            Err(e)
                if self.script.is_none()
                    && matches!(
                        e.kind(),
                        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
                    ) =>
            {
                self.decode(Value::ServerError(server_error(&e)))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The request's one command as a `Cmd` (read back from its bytes: only on the routed
    /// path, where the cost does not matter next to the cluster's routing).
    fn as_cmd(&self) -> Result<Cmd> {
        let bad = || {
            crate::error::Error::Redis(redis::RedisError::from((
                redis::ErrorKind::Client,
                "several commands cannot be routed as one",
            )))
        };
        if self.count != 1 {
            return Err(bad());
        }
        let Value::Array(parts) = redis::parse_redis_value(&self.packed)? else {
            return Err(bad());
        };
        let mut cmd = Cmd::new();
        for part in parts {
            match part {
                Value::BulkString(bytes) => cmd.arg(bytes),
                _ => return Err(bad()),
            };
        }
        Ok(cmd)
    }

    /// The same request with its decoded answer passed through `f`.
    pub(crate) fn map<U>(self, f: impl Fn(T) -> U + Send + Sync + 'static) -> Request<U>
    where
        T: 'static,
    {
        let decode = self.decode;
        Request {
            packed: self.packed,
            count: self.count,
            script: self.script,
            decode: Box::new(move |v| decode(v).map(&f)),
        }
    }
}

/// A script's reply: a server error is `Err`, the rest converted to `R` for `decode`.
fn typed<R: FromRedisValue, T>(
    decode: impl Fn(R) -> Result<T> + Send + Sync + 'static,
) -> Decode<T> {
    Box::new(move |reply: Value| {
        let reply = reply.extract_error()?;
        decode(redis::from_redis_value(reply).map_err(redis::RedisError::from)?)
    })
}

/// `true` for the reply a server gives a script it has not cached.
pub(crate) fn is_no_script(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript))
}

/// A routed command's server error as the reply value it was.
fn server_error(e: &redis::RedisError) -> redis::ServerError {
    let raw = format!(
        "-{} {}\r\n",
        e.code().unwrap_or("ERR"),
        e.detail().unwrap_or("")
    );
    match redis::parse_redis_value(raw.as_bytes()) {
        Ok(Value::ServerError(s)) => s,
        _ => redis::parse_redis_value(b"-ERR unreadable server error\r\n")
            .ok()
            .and_then(|v| match v {
                Value::ServerError(s) => Some(s),
                _ => None,
            })
            .expect("a literal server error parses"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::LazyLock;

    static ECHO: LazyLock<Script> = LazyLock::new(|| Script::new("return ARGV[1]"));

    #[test]
    fn a_script_request_is_the_evalsha_the_redis_crate_would_send() {
        let r: Request<String> = Request::script(&ECHO, &[b"k"], &[b"v"], Ok);
        let by_cmd = redis::cmd("EVALSHA")
            .arg(ECHO.get_hash())
            .arg(1)
            .arg("k")
            .arg("v")
            .get_packed_command();
        assert_eq!(r.packed(), Some(&by_cmd[..]));
        assert_eq!(
            r.as_cmd().unwrap().get_packed_command(),
            by_cmd,
            "the routed form sends the same"
        );
    }

    #[test]
    fn a_script_reply_is_decoded_once_and_a_server_error_is_an_error() {
        let r: Request<i64> = Request::script(&ECHO, &[], &[b"1"], |n: i64| Ok(n * 2));
        assert_eq!(r.decode(Value::Int(21)).unwrap(), 42);
        let wrong = redis::parse_redis_value(b"-WRONGTYPE Operation\r\n").unwrap();
        assert!(r.decode(wrong).is_err());
        assert!(r.map(|n| n + 1).decode(Value::Int(1)).unwrap() == 3);
    }

    #[test]
    fn only_a_script_request_wants_its_script_after_noscript() {
        let no_script = redis::parse_redis_value(b"-NOSCRIPT No matching script\r\n").unwrap();
        let wrong = redis::parse_redis_value(b"-WRONGTYPE Operation\r\n").unwrap();
        let s: Request<i64> = Request::script(&ECHO, &[], &[], Ok);
        let c: Request<Value> = Request::command(&[b"GET", b"k"], Ok);
        assert!(s.wants_script(&no_script));
        assert!(!s.wants_script(&wrong));
        assert!(!c.wants_script(&no_script));
        assert!(!is_no_script(&Value::Okay));
    }

    #[test]
    fn several_commands_are_not_one_packed_request() {
        let r: Request<Value> = Request::commands(&[&[b"PING"], &[b"PING"]], Ok);
        assert_eq!(r.packed(), None);
        assert!(r.as_cmd().is_err());
        let one: Request<Value> = Request::command(&[b"PING"], Ok);
        assert_eq!(
            one.packed(),
            Some(&redis::cmd("PING").get_packed_command()[..])
        );
    }

    #[test]
    fn a_routed_server_error_keeps_its_code() {
        let e = redis::RedisError::from(
            match redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n").unwrap() {
                Value::ServerError(s) => s,
                _ => unreachable!(),
            },
        );
        let s = server_error(&e);
        assert_eq!(s.code(), "WRONGTYPE");
    }
}
