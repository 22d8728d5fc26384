//! The user's guide: everything beyond the README's first steps, one chapter per topic.
//!
//! This module holds documentation only: no items. The crate's front page has the quick
//! start; `SAFETY.md` in the repository states every guarantee with the test that shows it,
//! and `ARCHITECTURE.md` explains the code and the Redis protocol.
//!
//! | chapter | what it covers |
//! |---|---|
//! | [`holding`] | a held lock: the guard, the watchdog, fencing tokens, finding out about a loss, checking before a commit, release outcomes, minimum hold and cool-down |
//! | [`waiting`] | waiting for a busy lock: notify and fair mode, retry strategies, busy and timeout errors, many threads on one client, reentrancy, cancellation |
//! | [`primitives`] | read-write locks, semaphores, several locks at once, lease handles |
//! | [`deployments`] | single server, Sentinel, Cluster, Redlock; replica acknowledgement; the servers it is tested on |
//! | [`attribute`] | `#[distributed_lock]`: a function run under a lock |
//! | [`cli`] | the `redis-lock` command-line tool |
//! | [`observability`] | tracing spans, metrics, what to put on a dashboard |
//! | [`testing`] | the `testing` feature: throwaway Redis servers for your own tests |
//! | [`failures`] | what happens when Redis restarts, fails over, stalls or loses its data |
//!
//! # One client per process
//!
//! A [`LockClient`](crate::LockClient) is cheap to clone (an `Arc` inside), `Send` and
//! `Sync`. Make one per process (per Redis deployment) and share it with every thread: its
//! connection pool, its renewal threads and its waiting connections are shared by all of
//! them, so a thousand threads waiting on one lock need one blocking connection, not a
//! thousand.
//!
//! ```no_run
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!     let workers: Vec<_> = (0..8)
//!         .map(|i| {
//!             let locks = locks.clone(); // the same client, shared
//!             std::thread::spawn(move || -> redis_lock::Result<()> {
//!                 let guard = locks.lock("nightly-report")?;
//!                 guard.check_held()?; // still ours? then commit
//!                 println!("worker {i} ran under token {}", guard.fencing_token());
//!                 Ok(())
//!             })
//!         })
//!         .collect();
//!     for worker in workers {
//!         worker.join().unwrap()?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Cargo features
//!
//! | feature | what it adds |
//! |---|---|
//! | `macros` (default) | the `#[distributed_lock]` attribute ([`attribute`]) |
//! | `cluster` | `LockClient::cluster_builder`, Redis Cluster through the `redis` crate's cluster client |
//! | `tls` | `rediss://` URLs through rustls with the ring provider (no OpenSSL needed to build) |
//! | `metrics` | metrics through the `metrics` facade ([`observability`]) |
//! | `serde` | `Serialize` and `Deserialize` for [`LeaseHandle`](crate::LeaseHandle) |
//! | `testing` | `redis_lock::testing`: throwaway servers for your own tests ([`testing`]) |
//! | `cli` | the `redis-lock` binary ([`cli`]); includes `tls`; the library does not use its dependencies |

pub mod attribute;
pub mod cli;
pub mod deployments;
pub mod failures;
pub mod holding;
pub mod observability;
pub mod primitives;
pub mod testing;
pub mod waiting;
