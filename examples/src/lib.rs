//! Shared helpers for the examples.

use redis_lock::testing::RedisServer;

/// The Redis to use: `$REDIS_URL` if set, else a throwaway `redis-server` on a free loopback
/// port, which stops when the returned guard is dropped.
pub fn redis_url() -> (String, Option<RedisServer>) {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => (url, None),
        _ => match RedisServer::try_start() {
            Ok(server) => {
                eprintln!(
                    "REDIS_URL is unset: started a throwaway redis-server at {}",
                    server.url()
                );
                (server.url(), Some(server))
            }
            Err(e) => {
                eprintln!("REDIS_URL is unset and no redis-server could be started: {e}");
                std::process::exit(1);
            }
        },
    }
}
