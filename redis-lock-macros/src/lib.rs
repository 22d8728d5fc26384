//! The `#[distributed_lock]` attribute of `redis-lock-sync`. Use it through that crate
//! (`redis_lock::distributed_lock`), which the expansion refers to by absolute paths, under the
//! name the calling package's Cargo.toml gives it (or the path given with `crate = "..."`).

#![warn(missing_docs)]

mod args;
mod duration;
mod expand;
mod grammar;
mod runtime;
mod template;
mod validate;

use proc_macro::TokenStream;

/// Runs a function under a distributed lock: one lock per key, taken before the body runs
/// and released after it, whatever way the body exits.
///
/// ```no_run
/// use redis_lock::distributed_lock;
///
/// #[derive(Debug)]
/// enum AppError {
///     Lock(redis_lock::Error),
///     // ... the application's own errors ...
/// }
///
/// impl From<redis_lock::Error> for AppError {
///     fn from(e: redis_lock::Error) -> Self {
///         AppError::Lock(e)
///     }
/// }
///
/// struct Invoice {
///     id: u64,
/// }
///
/// /// Settles one invoice; never twice at once, on any machine.
/// #[distributed_lock(key = "invoice:{invoice.id}", ttl = 10)]
/// fn settle(invoice: &Invoice) -> Result<(), AppError> {
///     // ... runs while this process holds the lock "invoice:<id>" ...
///     Ok(())
/// }
///
/// fn main() -> Result<(), AppError> {
///     // Once, at startup (or set REDIS_URL and skip this line).
///     redis_lock::set_default_client(redis_lock::LockClient::open("redis://127.0.0.1/")?)?;
///     settle(&Invoice { id: 42 })
/// }
/// ```
///
/// # Options
///
/// | option | meaning | example | default |
/// |---|---|---|---|
/// | `key` | the lock name, a template of the parameters (see [`key`](#key)) | `key = "invoice:{invoice.id}"` | required (or `keys`) |
/// | `keys` | several lock names taken together, all or none (`LockClient::lock_all`); not reentrant, not with `hold_at_least`, `mode` or `permits` | `keys = ["account:{from}", "account:{to}"]` | instead of `key` |
/// | `ttl` | how long the lock lives unless renewed (the watchdog renews it while the call runs): whole seconds or a duration | `ttl = 10`, `ttl = "500ms"` | the client's (30 s) |
/// | `wait` | how long to wait for a busy lock: seconds or a duration; `"0s"` = one attempt | `wait = "5s"` | the client's (until the lock is free); one attempt with `on_busy = "skip"` |
/// | `retry` | how a waiter spends `wait` (see [`retry`](#retry)): `"notify"`, `"none"`, `"fixed:50ms"`, `"exponential:10ms..1s"` | `retry = "fixed:50ms"` | the client's (`"notify"`) |
/// | `on_busy` | what a busy lock does to the call: `"error"` returns the error, `"skip"` skips the call (see below) | `on_busy = "skip"` | `"error"` |
/// | `hold_at_least` | the lock stays taken at least this long after it was acquired, even when the call ends sooner (ShedLock's `lockAtLeastFor`) | `hold_at_least = "1h"` | none |
/// | `cooldown` | the lock stays taken this long after the call *ended*: at most one run per cool-down, however short each run is (with `hold_at_least`, the later of the two) | `cooldown = "30s"` | none |
/// | `mode` | a side of a read-write lock: `"read"` (a share: many callers at once) or `"write"` (exclusive; waits for the readers, keeps new ones out); see `LockClient::read_lock`. Not with `hold_at_least` | `mode = "read"` | a mutex |
/// | `permits` | a permit of the semaphore `key` of N permits instead of a lock: at most N calls at once (see [`permits`](#permits)) | `permits = 3` | a mutex |
/// | `client` | the client to lock through: an expression yielding `&LockClient` (see [the client](#the-client)) | `client = &self.locks` | the process-wide default client |
/// | `guard` | a name the body can use for the `&LockGuard` (`&MultiGuard` with `keys`) | `guard = lock` | none |
/// | `crate` | the path of the `redis-lock-sync` library, where the Cargo.toml lookup cannot find it (see [the crate](#the-crate)) | `crate = "locks"`, `crate = "::my_app::locks"` | its name in the calling package's Cargo.toml, else `::redis_lock` |
///
/// Each option may appear once. Durations are a whole number and a unit: `ms`, `s`, `m` or
/// `h` (`"500ms"`, `"30s"`, `"2m"`, `"1h"`); a bare integer is whole seconds.
///
/// ## `key`
///
/// `{name}` is replaced by the parameter `name` written with `Display`, `{name.field}` (any
/// depth, tuple indexes too) by one of its fields, and `{self.field}` by a field of the
/// receiver; `{{` and `}}` are literal braces. Different values give independent locks:
/// `settle` above on invoice 1 and on invoice 2 runs concurrently. A name that is not a
/// parameter is a compile error. Locks are shared by name, so processes and machines that
/// use the same key (and namespace) exclude each other.
///
/// ## `retry`
///
/// How a waiter spends `wait` while the lock is busy (see `redis_lock::RetryStrategy`):
/// `"notify"` blocks until the holder's release wakes it; `"none"` makes one attempt;
/// `"fixed:50ms"` polls every 50 ms; `"exponential:10ms..1s"` polls after 10 ms, 20 ms, 40 ms
/// ... up to 1 s between attempts.
///
/// ## `permits`
///
/// `permits = N` takes one permit of the semaphore named by `key`, which has N permits
/// (`LockClient::semaphore`): at most N calls run at once, on any machine, and the permit is
/// given back when the call ends. Every function using the semaphore should give the same
/// N. From 1 to `redis_lock::MAX_PERMITS`; not with `keys`, `mode`, `hold_at_least` or
/// `cooldown` (a permit is given back at once).
///
/// ```no_run
/// # use redis_lock::distributed_lock;
/// /// At most 4 exports at once across the fleet; the others wait up to 30 s for a permit.
/// #[distributed_lock(key = "exports", permits = 4, wait = "30s")]
/// fn export(id: u64) -> redis_lock::Result<()> {
///     Ok(())
/// }
/// ```
///
/// # Lock failures reach the caller
///
/// The function must return `Result<T, E>` with `E: From<redis_lock::Error>` (an alias of one
/// works too): when the lock cannot be taken, the body does not run and the function returns
/// `Err(E::from(error))`, where `error` is `Error::Timeout` after `wait` (or `Error::Busy`
/// with a zero wait: `error.is_busy()` is true for both), or a Redis, pool or invalid-key
/// error. A function that cannot report them (no `Result` and no `on_busy = "skip"`) is a
/// compile error naming the two ways out.
///
/// # `on_busy = "skip"`: run at most once at a time, skip otherwise
///
/// For jobs that must not run twice (ShedLock-style): when the lock is busy the call is
/// skipped, logged with `tracing` at info level (target `redis_lock`), and returns `()` or
/// `None`. Allowed for functions returning `()`, `Option<T>`, and also `Result<(), E>` or
/// `Result<Option<T>, E>` (skipped = `Ok(())` / `Ok(None)`). Without an explicit `wait` a
/// skipping function makes one attempt. Other failures (Redis unreachable) go to the `Err` of
/// a `Result`; a function returning `()` or `Option<T>` cannot carry them, so they are logged
/// at error level and the call is skipped.
///
/// ```no_run
/// # use redis_lock::distributed_lock;
/// /// Runs at most once per hour across all machines, whichever machine ticks first.
/// #[distributed_lock(key = "hourly-report", on_busy = "skip", hold_at_least = "1h", ttl = 60)]
/// fn hourly_report() {
///     // ...
/// }
/// ```
///
/// `hold_at_least` keeps the lock taken for that long after it was acquired, even when the
/// body finishes sooner (ShedLock's `lockAtLeastFor`): other machines whose clocks tick a
/// little later skip instead of running the job again in the same period.
///
/// # A lock lost during the call
///
/// A lock can be lost while the body runs (the process paused past the TTL, Redis lost the
/// key, an operator broke it, another holder took it over). `Err(Error::Lost { .. })` from an
/// annotated function means one thing: **the lock was not held for the whole call**, from the
/// acquisition to the release. When the loss happened decides what the body could know:
///
/// - **Before or during the body**: a change to the key by anybody else reaches the guard
///   within a round trip (Redis's client-side tracking; see `LockClient::loss_detection`),
///   so `guard.ensure_held()` (free) or `guard.check_held()` (one round trip) in the body
///   fails from then on. A body that checks before it commits returns that `Err(Lost)` itself
///   and commits nothing. A body that does not check runs to its end, and the function then
///   returns `Err(Lost)` in place of the body's `Ok`: the work may have overlapped with
///   another holder.
/// - **After the body** (between its end and the release): the release finds the key expired
///   or owned by someone else and the function returns `Err(Lost)` in place of the body's
///   `Ok`, although the body ran under the lock. (Only a pause past the TTL at that moment, or
///   an operator's break, can do this.)
///
/// Then:
///
/// - **`Result` functions**: the body's own `Err` wins; otherwise the function returns
///   `Err(E::from(Error::Lost { .. }))` instead of the body's `Ok` value.
/// - **`()` and `Option<T>` functions** (only with `on_busy = "skip"`): they cannot carry
///   the error, so it is logged at error level and the value is returned as is. Use
///   `Result<(), E>` to be told, or check `guard.check_held()` in the body.
///
/// Finding out at the end costs no round trip: the check is the outcome of the release that
/// ends every call anyway. To write only while the lock is held, commit through the guard:
/// where the data lives in the same Redis, `commit` applies a pipeline only if the lock is
/// still this call's, atomically with that check (a pause before it cannot let a write land
/// after a loss). For a write elsewhere, check just before it (`check_held`, one round trip)
/// and fence it with the token, which also covers a pause between the check and the write:
///
/// ```no_run
/// # use redis_lock::distributed_lock;
/// #[distributed_lock(key = "ledger:{account}", ttl = 5, guard = lock)]
/// fn post(account: u64, amount: i64) -> Result<i64, redis_lock::Error> {
///     // ... compute ...
///     let (balance,): (i64,) =
///         lock.commit(redis_lock::redis::pipe().incr(format!("balance:{account}"), amount))?;
///     Ok(balance) // Err(Lost) and nothing written if the lock was lost meanwhile
/// }
/// ```
///
/// # Release on every exit path
///
/// The lock is released when the call ends: normal return, early `return`, `?`, and panic
/// (the guard is dropped while unwinding). With `hold_at_least`, "released" means "given up":
/// the key stays until the minimum hold has passed.
///
/// # Reentrancy
///
/// A locked function that calls another locked function (or itself) with the same key on the
/// same thread through the same client joins the lock it holds: a hold count, nothing sent to
/// Redis, and only the outermost call releases. The inner call's options (`ttl`,
/// `hold_at_least`, ...) do not change the held lock. Another thread is never an owner: it
/// waits like any other process. Hand-written code gets the same with
/// `LockClient::lock_reentrant` or `LockOptions::reentrant(true)`.
///
/// # The client
///
/// Without `client`, the process-wide default client is used: the one given to
/// `redis_lock::set_default_client` at startup, or else one built from the `REDIS_URL`
/// environment variable on first use. With neither, calls fail with an
/// `Error::InvalidInput` that says so. `client = <expr>` names another: any expression that
/// yields `&LockClient` (or derefs to one), evaluated on every call with the parameters in
/// scope, such as `client = &self.locks`, `client = &LOCKS` (a `static LazyLock`), or
/// `client = locks` for a parameter `locks: &LockClient`.
///
/// ```no_run
/// # use redis_lock::{distributed_lock, LockClient};
/// struct Worker {
///     locks: LockClient,
/// }
///
/// impl Worker {
///     #[distributed_lock(key = "queue:{queue}", client = &self.locks, wait = "2s")]
///     fn drain(&self, queue: &str) -> redis_lock::Result<usize> {
///         Ok(0)
///     }
/// }
/// ```
///
/// # `guard = name`
///
/// Binds `name: &redis_lock::LockGuard` in the body: check `name.check_held()` (asks Redis)
/// or `name.ensure_held()` (local, free) before committing side effects, pass `name.fencing_token()` to the
/// resource you write to, or `name.extend(..)` for a long step.
///
/// # The crate
///
/// The expansion calls into the `redis-lock-sync` library by an absolute path, under the name
/// the calling package gives it. The attribute reads that package's `Cargo.toml` (as the
/// `proc-macro-crate` crate does: `[dependencies]`, `[dev-dependencies]`, target-specific
/// tables, and `workspace = true` entries through `[workspace.dependencies]`), so a renamed
/// dependency needs nothing more:
///
/// ```toml
/// [dependencies]
/// locks = { package = "redis-lock-sync", version = "0.1" }
/// ```
///
/// ```ignore
/// #[locks::distributed_lock(key = "report")] // the expansion calls `::locks::...`
/// fn report() -> locks::Result<()> { Ok(()) }
/// ```
///
/// A dependency under its own name (`redis-lock-sync = "0.1"`) is `::redis_lock`, the
/// library's name, and so is the library within its own package (doctests, binaries,
/// examples, tests). When the manifest does not list `redis-lock-sync` (the library reached
/// through another crate's re-export, a build without Cargo) or cannot be read, the
/// expansion uses `::redis_lock`.
///
/// `crate = "path"` overrides all of this with the path as written: a re-export
/// (`crate = "::my_app::locks"`, `crate = "crate::deps::locks"`), or a dependency renamed
/// to its own package name (`redis_lock_sync = { package = "redis-lock-sync" }`, which the
/// lookup takes for the usual `::redis_lock`: write `crate = "redis_lock_sync"`).
///
/// ```no_run
/// mod deps {
///     pub use redis_lock as locks;
/// }
///
/// #[redis_lock::distributed_lock(key = "report", crate = "crate::deps::locks")]
/// fn report() -> deps::locks::Result<()> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// **If the compiler cannot find the crate** (error E0433, "cannot find `redis_lock`" or
/// the name your Cargo.toml uses, pointing at this attribute), the name the attribute
/// chose is not where the library is in that crate: say where it is with `crate = "..."`.
/// A `crate = "..."` that names nothing is reported at that string (a path that does not
/// start with `::` also where the key and client expressions use it). The attribute cannot
/// tell at expansion time whether a name resolves, so it cannot say more than this itself.
///
/// # The function as written
///
/// Attributes, doc comments, visibility, generics, `where` clauses, `impl Trait` arguments,
/// `self` / `&self` / `&mut self` receivers and trait `impl` methods are kept. The body runs
/// in a closure of its own (so that `return` and `?` come back through the release), with
/// the function's return type. The expansion costs what the same work written by hand with
/// a `LockGuard` costs: one round trip to acquire and one to release.
///
/// # Compile errors
///
/// Rejected with an error at the offending token: `async fn` (redis-lock is blocking),
/// `const fn`, unknown or repeated options, a missing or empty key, an unknown `{name}` in
/// the key, `ttl = 0`, a malformed duration or retry, a return type that cannot carry lock
/// failures without `on_busy = "skip"`, and with it a return type a skipped call cannot
/// produce, `permits = 0` or more than `MAX_PERMITS`, and a `crate = "..."` that is not a
/// path.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    let args = match syn::parse::<args::LockArgs>(args) {
        Ok(args) => args,
        Err(error) => return expand::fallback(item, &error).into(),
    };
    let func = match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(error) => {
            let error = syn::Error::new(
                error.span(),
                format!("`#[distributed_lock]` goes on a function with a body: {error}"),
            );
            return expand::fallback(item, &error).into();
        }
    };
    match validate::check(args, &func) {
        Ok(plan) => expand::wrap(plan, func),
        Err(error) => expand::fallback(item, &error),
    }
    .into()
}
