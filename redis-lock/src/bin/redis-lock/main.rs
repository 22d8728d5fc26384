//! `redis-lock`: run commands under a distributed lock on Redis, and look at and break locks.
//!
//! `redis-lock run KEY -- COMMAND` is `flock(1)` across machines; `status`, `list`, `watch`
//! and `release --force` are for operators. Built with the `cli` feature:
//! `cargo install --path redis-lock --features cli`. See `redis-lock --help`.

mod args;
mod child;
mod clock;
mod duration;
mod exit;
mod holder;
mod json;
mod report;
mod run;
mod signals;
mod waitline;
mod watch;

use redis::IntoConnectionInfo;
use redis_lock::LockClient;

use crate::args::{Action, Connection, Parsed};
use crate::exit::Failure;

fn main() {
    let code = match dispatch() {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("redis-lock: {}", failure.message);
            failure.code
        }
    };
    std::process::exit(code);
}

fn dispatch() -> Result<i32, Failure> {
    let (connection, action) = match args::parse(std::env::args_os())? {
        Parsed::Do(connection, action) => (connection, action),
        Parsed::Print(text) => {
            print!("{text}");
            return Ok(0);
        }
    };
    let (locks, server) = connect(&connection)?;
    match action {
        Action::Run(run_args) => run::run(&locks, &server, &run_args),
        Action::Status { key, json } => report::status(&locks, &server, &key, json),
        Action::Leader { election, json } => report::leader(&locks, &server, &election, json),
        Action::List { pattern, json } => report::list(&locks, &server, &pattern, json),
        Action::Release { key, json } => report::release(&locks, &server, &key, json),
        Action::ReleaseHandle { handle, json } => {
            report::release_handle(&locks, &server, &handle, json)
        }
        Action::Extend { handle, ttl, json } => {
            report::extend_handle(&locks, &server, &handle, ttl, json)
        }
        Action::Watch(watch_args) => watch::watch(&locks, &server, &watch_args),
    }
}

/// The lock client, and the server's `host:port` for messages (never the password, which
/// the URL may carry).
fn connect(connection: &Connection) -> Result<(LockClient, String), Failure> {
    let locks = LockClient::builder(&connection.url)
        .namespace(connection.namespace.as_str())
        .connect_timeout(connection.connect_timeout)
        .build()
        .map_err(|e| Failure::from_lock_error(&e, "?"))?;
    let server = connection
        .url
        .as_str()
        .into_connection_info()
        .map(|info| info.addr().to_string())
        .unwrap_or_else(|_| "?".to_owned());
    Ok((locks, server))
}
