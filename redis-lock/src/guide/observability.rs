//! Observability: tracing spans, metrics, and what a dashboard should show.
//!
//! # Spans
//!
//! Every acquisition is an `acquire` span and every held lock a `hold` span (target
//! `redis_lock`, level INFO), so a request's time spent waiting for a lock shows in its trace
//! beside its Redis calls. Fields: `lock.name`, `lock.label`, `lock.primitive`,
//! `lock.outcome` (`acquired`, `busy`, `timeout`, `error`), `lock.wait_ms` (the wait budget)
//! or `lock.until_free` (waiting with none), `lock.waited_ms`, `lock.attempts`,
//! `lock.fencing_token`, `lock.ended` (`released`, `late`, `lost`, `expired`,
//! `handed_off`), plus `otel.kind` and `otel.status_code` for OpenTelemetry bridges. No owner
//! token or password is ever in a field.
//!
//! # Metrics (feature `metrics`)
//!
//! The same events feed the [`metrics`](https://docs.rs/metrics) facade, so any exporter
//! works (Prometheus, StatsD, OpenTelemetry); `describe_metrics` registers their
//! descriptions. With no recorder installed the calls cost next to nothing.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `redis_lock_acquire_seconds` | histogram | `outcome` (acquired, busy, timeout, error), `primitive`, `label` |
//! | `redis_lock_hold_seconds` | histogram | `ended` (released, late, lost, expired, handed_off), `primitive`, `label` |
//! | `redis_lock_held`, `redis_lock_waiting` | gauges | `primitive`, `label` (this process) |
//! | `redis_lock_renewals_total`, `redis_lock_renewal_failures_total`, `redis_lock_handoffs_total`, `redis_lock_replica_shortfalls_total` | counters | `primitive`, `label` |
//! | `redis_lock_losses_total` | counter | `reason`, `primitive`, `label` |
//!
//! `label` keeps the number of series bounded: it is the attribute's key *template*
//! (`"invoice:{id}"`, never `"invoice:42"`), or [`LockOptions::label`](crate::LockOptions::label),
//! or `"other"`. The example `examples/examples/metrics.rs` serves them on `/metrics` in the
//! Prometheus format while workers contend
//! (`cargo run -p redis-lock-examples --example metrics`).
//!
//! # A dashboard, per label
//!
//! - **Lock wait p50/p99**: `histogram_quantile(0.99, sum by (le, label)
//!   (rate(redis_lock_acquire_seconds_bucket{outcome="acquired"}[5m])))`. A rise here with
//!   flat Redis latency is contention.
//! - **Busy and timeout rate**:
//!   `rate(redis_lock_acquire_seconds_count{outcome=~"busy|timeout"}[5m])` against the
//!   acquired rate: work skipped or failed because the lock stayed taken.
//! - **Waiting threads**: `sum by (label) (redis_lock_waiting)`: a queue forming.
//! - **Hold time p99**, from `redis_lock_hold_seconds`: what makes everybody else wait.
//! - **Losses** (alert on any): `increase(redis_lock_losses_total[5m]) > 0`, by `reason`; a
//!   lost lock means two holders may have overlapped.
//! - **Renewal failures**: `rate(redis_lock_renewal_failures_total[5m])`: Redis trouble that
//!   turns into losses if it lasts a TTL.
//! - **Handoffs / acquisitions**: how often the lock goes straight from one holder to the
//!   next.
//!
//! # Counting requests
//!
//! [`LockClient::request_count`](crate::LockClient::request_count) counts every request the
//! client sent (scripts, `BLPOP`, renewals); tests and benchmarks use it to check what an
//! operation costs.
