//! A small synchronous HTTP server (tiny_http) whose handler locks per account with
//! `#[distributed_lock]`, so concurrent deposits to one account, arriving at any instance of
//! the server, never lose an update, while different accounts are served in parallel.
//!
//! Run it with `cargo run -p redis-lock-examples --example http_server`. It uses `$REDIS_URL`,
//! or starts a throwaway `redis-server` when that is unset. By default it runs a demo and
//! exits: two server instances (as two machines behind a load balancer would be) take 60
//! concurrent deposits to 3 accounts, and the final balances are checked.
//!
//! With `-- --serve` it serves on 127.0.0.1:8080 (or `$PORT`) until you press Ctrl-C:
//!
//! ```text
//! curl -X POST 'http://127.0.0.1:8080/accounts/7/deposit?amount=5'
//! curl 'http://127.0.0.1:8080/accounts/7'
//! ```

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::Commands;
use redis_lock::{LockClient, distributed_lock};
use tiny_http::{Method, Response, Server};

/// Worker threads per server instance.
const WORKERS: usize = 4;

#[derive(Debug)]
enum BankError {
    /// Taking the account's lock failed, or it was lost during the deposit.
    Lock(redis_lock::Error),
    /// Reading or writing the balance failed.
    Store(redis::RedisError),
}

impl std::fmt::Display for BankError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BankError::Lock(e) => write!(f, "lock: {e}"),
            BankError::Store(e) => write!(f, "balance store: {e}"),
        }
    }
}

impl std::error::Error for BankError {}

impl From<redis_lock::Error> for BankError {
    fn from(e: redis_lock::Error) -> Self {
        BankError::Lock(e)
    }
}

impl From<redis::RedisError> for BankError {
    fn from(e: redis::RedisError) -> Self {
        BankError::Store(e)
    }
}

fn balance_key(account: u32) -> String {
    format!("balance:{account}")
}

/// Adds `amount` to the balance of `account`: a read, a pause, a write. Without the lock,
/// two deposits running at once would both read the old balance and one would be lost.
/// The lock comes from the default client, set once in `main`.
#[distributed_lock(key = "account:{account}", ttl = 10, wait = "5s", guard = lock)]
fn deposit(store: &redis::Client, account: u32, amount: i64) -> Result<(i64, u64), BankError> {
    let mut redis = store.get_connection()?;
    let balance: Option<i64> = redis.get(balance_key(account))?;
    std::thread::sleep(Duration::from_millis(5)); // the race window, made visible
    let balance = balance.unwrap_or(0) + amount;
    // Written only if the lock is still ours at that instant, atomically with the check
    // (the balances live in the same Redis as the locks): a deposit whose lock was lost
    // meanwhile writes nothing and fails with `Lost`.
    lock.commit::<()>(redis::pipe().set(balance_key(account), balance).ignore())?;
    Ok((balance, lock.fencing_token()))
}

/// Reads need no lock.
fn balance(store: &redis::Client, account: u32) -> Result<i64, BankError> {
    let balance: Option<i64> = store.get_connection()?.get(balance_key(account))?;
    Ok(balance.unwrap_or(0))
}

/// Routes one request: `POST /accounts/{id}/deposit?amount=N` and `GET /accounts/{id}`.
fn handle(store: &redis::Client, method: &Method, url: &str) -> (u16, String) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let amount = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("amount="))
        .and_then(|a| a.parse::<i64>().ok());
    let result = match (method, parts.as_slice()) {
        (Method::Post, ["accounts", id, "deposit"]) => match (id.parse(), amount) {
            (Ok(id), Some(amount)) => deposit(store, id, amount)
                .map(|(b, token)| format!("account {id}: balance {b} (fencing token {token})")),
            _ => {
                return (
                    400,
                    "expected /accounts/<number>/deposit?amount=<number>".into(),
                );
            }
        },
        (Method::Get, ["accounts", id]) => match id.parse() {
            Ok(id) => balance(store, id).map(|b| format!("account {id}: balance {b}")),
            Err(_) => return (400, "expected /accounts/<number>".into()),
        },
        _ => return (404, "not found".into()),
    };
    match result {
        Ok(body) => (200, body),
        // Somebody else held the account for the whole wait: the client may retry.
        // Busy: say who holds it, and when to come back (the holder's remaining TTL).
        Err(BankError::Lock(e)) if e.is_busy() => match e.retry_after() {
            Some(after) => (
                409,
                format!(
                    "account busy: {e} (retry after {}s)",
                    after.as_secs().max(1)
                ),
            ),
            None => (409, format!("account busy: {e}")),
        },
        Err(e) => (503, format!("unavailable: {e}")),
    }
}

/// One server instance: `WORKERS` threads taking requests until `stop` is set.
fn serve(
    server: Arc<Server>,
    store: redis::Client,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..WORKERS)
        .map(|_| {
            let (server, store, stop) = (Arc::clone(&server), store.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                loop {
                    let request = match server.recv() {
                        Ok(request) => request,
                        Err(_) if stop.load(Ordering::SeqCst) => return,
                        Err(e) => {
                            eprintln!("accept failed: {e}");
                            continue;
                        }
                    };
                    let (status, body) = handle(&store, request.method(), request.url());
                    let _ = request.respond(Response::from_string(body).with_status_code(status));
                }
            })
        })
        .collect()
}

/// A minimal HTTP/1.1 client for the demo: one request per connection.
fn post(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_owned()))
}

fn demo(store: &redis::Client) -> Result<(), Box<dyn std::error::Error>> {
    const ACCOUNTS: u32 = 3;
    const DEPOSITS: u32 = 20; // per account, of 1..=20 each
    let stop = Arc::new(AtomicBool::new(false));
    let mut instances = Vec::new();
    for _ in 0..2 {
        let server = Arc::new(Server::http("127.0.0.1:0").map_err(|e| e.to_string())?);
        let port = server.server_addr().to_ip().map_or(0, |a| a.port());
        let workers = serve(Arc::clone(&server), store.clone(), Arc::clone(&stop));
        println!("server instance listening on 127.0.0.1:{port}");
        instances.push((server, port, workers));
    }
    let ports: Vec<u16> = instances.iter().map(|(_, port, _)| *port).collect();

    // 60 deposits at once, spread over both instances.
    let clients: Vec<_> = (0..ACCOUNTS * DEPOSITS)
        .map(|i| {
            let (account, amount) = (i % ACCOUNTS, i64::from(i / ACCOUNTS + 1));
            let port = ports[(i as usize) % ports.len()];
            std::thread::spawn(move || {
                post(
                    port,
                    &format!("/accounts/{account}/deposit?amount={amount}"),
                )
            })
        })
        .collect();
    for client in clients {
        let (status, body) = client.join().expect("client thread panicked")?;
        if status != 200 {
            return Err(format!("deposit failed with {status}: {body}").into());
        }
    }

    let expected = i64::from(DEPOSITS * (DEPOSITS + 1) / 2);
    for account in 0..ACCOUNTS {
        let got = balance(store, account)?;
        println!("account {account}: balance {got} (expected {expected})");
        if got != expected {
            return Err(format!("account {account} lost an update").into());
        }
    }
    println!(
        "{} concurrent deposits, no update lost",
        ACCOUNTS * DEPOSITS
    );

    stop.store(true, Ordering::SeqCst);
    for (server, _, workers) in instances {
        for _ in 0..WORKERS {
            server.unblock();
        }
        for worker in workers {
            let _ = worker.join();
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = redis_lock_examples::redis_url();
    // Once, at startup: the client every `#[distributed_lock]` without `client = ...` uses.
    // (Without this line, the default client would be built from $REDIS_URL.)
    redis_lock::set_default_client(LockClient::builder(&url).namespace("bank:").build()?)?;
    let store = redis::Client::open(url.as_str())?;
    // Start from zero, so that the demo's check holds on a reused Redis too.
    let mut redis = store.get_connection()?;
    for account in 0..3 {
        redis.del::<_, ()>(balance_key(account))?;
    }

    if std::env::args().any(|a| a == "--serve") {
        let port = std::env::var("PORT").unwrap_or_else(|_| "8080".into());
        let server =
            Arc::new(Server::http(format!("127.0.0.1:{port}")).map_err(|e| e.to_string())?);
        println!("serving on http://127.0.0.1:{port}/ until Ctrl-C; try");
        println!("  curl -X POST 'http://127.0.0.1:{port}/accounts/7/deposit?amount=5'");
        for worker in serve(server, store, Arc::new(AtomicBool::new(false))) {
            let _ = worker.join();
        }
        return Ok(());
    }
    demo(&store)
}
