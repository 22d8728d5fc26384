//! Observability: the metrics (feature `metrics`, through a recorder that keeps what was
//! recorded) and the `acquire` and `hold` spans (through a subscriber that keeps every span),
//! against a real redis-server. Every test uses labels of its own: the recorder is global.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use redis_lock::{LockClient, LockOptions, ReleaseOutcome, RetryStrategy};
use redis_lock_tests::{RedisServer, client, wait_until};

// --- metrics ----------------------------------------------------------------------------------

/// Everything recorded so far, by metric kind, name and sorted labels. A snapshot of the
/// debugging recorder drains what it reports (counters and gauges are swapped to zero,
/// histograms emptied), so the totals are kept here: counters and gauges (only ever
/// incremented and decremented by redis-lock) add up, histogram samples accumulate.
#[derive(Default)]
struct Recorded {
    counters: HashMap<MetricId, u64>,
    gauges: HashMap<MetricId, f64>,
    histograms: HashMap<MetricId, Vec<f64>>,
}

/// A metric's name and its labels, sorted.
type MetricId = (String, Vec<(String, String)>);

static SNAPSHOTTER: LazyLock<Snapshotter> = LazyLock::new(|| {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    redis_lock::describe_metrics();
    snapshotter
});
static RECORDED: LazyLock<Mutex<Recorded>> = LazyLock::new(Mutex::default);

fn id(key: &CompositeKey) -> MetricId {
    let mut labels: Vec<(String, String)> = key
        .key()
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort();
    (key.key().name().to_owned(), labels)
}

/// Takes a snapshot into `RECORDED` and runs `f` on the total.
fn recorded<T>(f: impl FnOnce(&Recorded) -> T) -> T {
    let mut all = RECORDED.lock().unwrap();
    for (key, _, _, value) in SNAPSHOTTER.snapshot().into_vec() {
        let k = id(&key);
        match (key.kind(), value) {
            (MetricKind::Counter, DebugValue::Counter(c)) => {
                *all.counters.entry(k).or_default() += c;
            }
            (MetricKind::Gauge, DebugValue::Gauge(g)) => {
                *all.gauges.entry(k).or_default() += g.into_inner();
            }
            (MetricKind::Histogram, DebugValue::Histogram(h)) => all
                .histograms
                .entry(k)
                .or_default()
                .extend(h.into_iter().map(|v| v.into_inner())),
            _ => {}
        }
    }
    f(&all)
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

fn counter(name: &str, pairs: &[(&str, &str)]) -> u64 {
    recorded(|r| {
        r.counters
            .get(&(name.to_owned(), labels(pairs)))
            .copied()
            .unwrap_or(0)
    })
}

fn gauge(name: &str, pairs: &[(&str, &str)]) -> f64 {
    recorded(|r| {
        r.gauges
            .get(&(name.to_owned(), labels(pairs)))
            .copied()
            .unwrap_or(0.0)
    })
}

fn samples(name: &str, pairs: &[(&str, &str)]) -> Vec<f64> {
    recorded(|r| {
        r.histograms
            .get(&(name.to_owned(), labels(pairs)))
            .cloned()
            .unwrap_or_default()
    })
}

fn acquire_samples(label: &str, outcome: &str) -> Vec<f64> {
    samples(
        "redis_lock_acquire_seconds",
        &[
            ("outcome", outcome),
            ("primitive", "mutex"),
            ("label", label),
        ],
    )
}

fn hold_samples(label: &str, ended: &str) -> Vec<f64> {
    samples(
        "redis_lock_hold_seconds",
        &[("ended", ended), ("primitive", "mutex"), ("label", label)],
    )
}

fn by_label(label: &str) -> [(&'static str, &str); 2] {
    [("primitive", "mutex"), ("label", label)]
}

#[test]
fn acquire_outcomes_hold_endings_and_gauges_are_recorded_with_their_labels() {
    LazyLock::force(&SNAPSHOTTER);
    LazyLock::force(&SPANS);
    let server = RedisServer::start();
    let locks = client(&server);
    let other = client(&server);
    const L: &str = "job:{id}";
    let opts = || LockOptions::new().label(L).ttl(Duration::from_secs(5));

    let guard = locks.acquire_with("m-1", &opts()).unwrap();
    assert_eq!(acquire_samples(L, "acquired").len(), 1);
    assert_eq!(gauge("redis_lock_held", &by_label(L)), 1.0, "one lock held");

    // Busy (no wait) and timeout (a wait budget that runs out), from another client.
    assert!(
        other
            .acquire_with("m-1", &opts().wait(Duration::ZERO))
            .unwrap_err()
            .is_busy()
    );
    assert_eq!(acquire_samples(L, "busy").len(), 1);
    assert!(
        other
            .acquire_with("m-1", &opts().wait(Duration::from_millis(150)))
            .unwrap_err()
            .is_busy()
    );
    let timeouts = acquire_samples(L, "timeout");
    assert_eq!(timeouts.len(), 1);
    assert!(timeouts[0] >= 0.15, "waited the whole budget: {timeouts:?}");

    // A waiter is counted while it waits, then receives the lock from the release.
    let waiter = std::thread::spawn({
        move || {
            other
                .acquire_with(
                    "m-1",
                    &opts()
                        .wait(Duration::from_secs(10))
                        .retry(RetryStrategy::notify()),
                )
                .map(|g| g.release())
        }
    });
    assert!(
        wait_until(Duration::from_secs(5), || gauge(
            "redis_lock_waiting",
            &by_label(L)
        ) == 1.0),
        "the waiting thread is counted"
    );
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    assert_eq!(
        waiter.join().unwrap().unwrap().unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(gauge("redis_lock_waiting", &by_label(L)), 0.0);
    assert_eq!(gauge("redis_lock_held", &by_label(L)), 0.0);
    assert_eq!(counter("redis_lock_handoffs_total", &by_label(L)), 1);
    assert_eq!(hold_samples(L, "released").len(), 2);
    assert_eq!(acquire_samples(L, "acquired").len(), 2);
    // Metrics without a label say "other"; they are not this test's.
    assert!(acquire_samples("other", "error").is_empty());
}

#[test]
fn renewals_and_losses_are_counted_and_end_the_hold() {
    LazyLock::force(&SNAPSHOTTER);
    LazyLock::force(&SPANS);
    let server = RedisServer::start();
    let locks = client(&server);
    const L: &str = "renewed";
    let guard = locks
        .options("m-2")
        .label(L)
        // Long enough that a loaded machine renews in time: the loss below must be the
        // deletion, not an expiry.
        .ttl(Duration::from_millis(1500))
        .acquire()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || counter(
            "redis_lock_renewals_total",
            &by_label(L)
        ) >= 2),
        "the watchdog renews every ttl / 3"
    );
    // Somebody deletes the key: the next renewal finds it gone before its TTL ran out.
    let _: () = redis::cmd("DEL")
        .arg("lock:{m-2}")
        .query(&mut server.connection())
        .unwrap();
    assert!(wait_until(Duration::from_secs(3), || guard.is_lost()));
    let losses = [("reason", "deleted"), ("primitive", "mutex"), ("label", L)];
    // Recorded by the watchdog right after it marks the lease lost.
    assert!(wait_until(Duration::from_secs(3), || {
        counter("redis_lock_losses_total", &losses) >= 1 && !hold_samples(L, "lost").is_empty()
    }));
    assert_eq!(counter("redis_lock_losses_total", &losses), 1);
    assert_eq!(hold_samples(L, "lost").len(), 1);
    assert_eq!(gauge("redis_lock_held", &by_label(L)), 0.0);
    // The release afterwards does not count the hold twice.
    assert_ne!(guard.release().unwrap(), ReleaseOutcome::Released);
    assert_eq!(hold_samples(L, "lost").len(), 1);
    assert!(hold_samples(L, "late").is_empty());
    assert_eq!(counter("redis_lock_losses_total", &losses), 1);
}

#[test]
fn a_release_that_finds_the_lock_deleted_counts_a_deletion_not_an_expiry() {
    LazyLock::force(&SNAPSHOTTER);
    let server = RedisServer::start();
    let locks = client(&server);
    const L: &str = "deleted-early";
    // A 10 s TTL: the watchdog's first renewal is 3.3 s away, so the release finds it first.
    let guard = locks
        .options("m-3")
        .label(L)
        .ttl(Duration::from_secs(10))
        .acquire()
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("lock:{m-3}")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Late);
    let by_reason = |reason| {
        counter(
            "redis_lock_losses_total",
            &[("reason", reason), ("primitive", "mutex"), ("label", L)],
        )
    };
    assert_eq!((by_reason("deleted"), by_reason("expired")), (1, 0));
    assert_eq!(hold_samples(L, "late").len(), 1);
}

#[redis_lock::distributed_lock(key = "invoice:{id}", ttl = 5, client = locks)]
fn settle(locks: &LockClient, id: u64) -> redis_lock::Result<u64> {
    Ok(id * 2)
}

#[test]
fn the_macro_labels_by_key_template_never_by_argument_value() {
    LazyLock::force(&SNAPSHOTTER);
    LazyLock::force(&SPANS);
    let server = RedisServer::start();
    let locks = client(&server);
    assert_eq!(settle(&locks, 4242).unwrap(), 8484);
    assert_eq!(acquire_samples("invoice:{id}", "acquired").len(), 1);
    assert_eq!(hold_samples("invoice:{id}", "released").len(), 1);
    recorded(|r| {
        let every_label = r
            .counters
            .keys()
            .chain(r.gauges.keys())
            .chain(r.histograms.keys())
            .flat_map(|(_, labels)| labels.iter().map(|(_, v)| v));
        for value in every_label {
            assert!(
                !value.contains("4242"),
                "an argument value in a label: {value}"
            );
        }
    });
}

// --- spans ------------------------------------------------------------------------------------

#[derive(Debug, Clone, Default)]
struct SpanRec {
    name: String,
    fields: BTreeMap<String, String>,
    parent: Option<u64>,
    handles: usize,
    closed: bool,
    metadata: Option<&'static tracing::Metadata<'static>>,
}

/// Keeps every span (fields as recorded, parent, closed) of the threads it is the default of,
/// and of spans created there wherever they are recorded.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<SpanRec>>>);

thread_local! {
    static ENTERED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

struct Visit<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Visit<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl tracing::Subscriber for Spans {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut rec = SpanRec {
            name: attrs.metadata().name().to_owned(),
            handles: 1,
            metadata: Some(attrs.metadata()),
            ..SpanRec::default()
        };
        attrs.record(&mut Visit(&mut rec.fields));
        rec.parent = if attrs.is_contextual() {
            ENTERED.with(|e| e.borrow().last().copied())
        } else {
            attrs.parent().map(|p| p.into_u64())
        };
        let mut all = self.0.lock().unwrap();
        all.push(rec);
        tracing::span::Id::from_u64(all.len() as u64)
    }
    fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut all = self.0.lock().unwrap();
        values.record(&mut Visit(&mut all[span.into_u64() as usize - 1].fields));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, span: &tracing::span::Id) {
        ENTERED.with(|e| e.borrow_mut().push(span.into_u64()));
    }
    fn exit(&self, _: &tracing::span::Id) {
        ENTERED.with(|e| e.borrow_mut().pop());
    }
    /// What `Span::current()` asks: the innermost span entered on this thread.
    fn current_span(&self) -> tracing_core::span::Current {
        let all = self.0.lock().unwrap();
        match ENTERED.with(|e| e.borrow().last().copied()) {
            Some(id) => match all[id as usize - 1].metadata {
                Some(meta) => {
                    tracing_core::span::Current::new(tracing::span::Id::from_u64(id), meta)
                }
                None => tracing_core::span::Current::none(),
            },
            None => tracing_core::span::Current::none(),
        }
    }
    fn clone_span(&self, span: &tracing::span::Id) -> tracing::span::Id {
        self.0.lock().unwrap()[span.into_u64() as usize - 1].handles += 1;
        span.clone()
    }
    fn try_close(&self, span: tracing::span::Id) -> bool {
        let mut all = self.0.lock().unwrap();
        let rec = &mut all[span.into_u64() as usize - 1];
        rec.handles -= 1;
        rec.closed = rec.handles == 0;
        rec.closed
    }
}

impl Spans {
    /// Spans called `name`, of the lock `lock` (any lock for `None`).
    fn named(&self, name: &str, lock: Option<&str>) -> Vec<(u64, SpanRec)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, s)| s.name == name)
            .filter(|(_, s)| {
                lock.is_none_or(|l| s.fields.get("lock.name").map(String::as_str) == Some(l))
            })
            .map(|(i, s)| (i as u64 + 1, s.clone()))
            .collect()
    }
}

/// The subscriber of this whole test binary. A global one, not `with_default`: tracing caches
/// per call site whether anybody is interested, and a call site first reached by another
/// test's thread while no scoped subscriber existed could be skipped here.
static SPANS: LazyLock<Spans> = LazyLock::new(|| {
    let spans = Spans::default();
    tracing::subscriber::set_global_default(spans.clone()).expect("the only subscriber");
    spans
});

#[test]
fn acquire_and_hold_spans_carry_their_fields_and_no_secret() {
    let server = RedisServer::start();
    let locks = client(&server);
    let other = client(&server);
    let spans = &*SPANS;
    let (token, fence) = {
        let request = tracing::info_span!("request");
        let _entered = request.enter();
        let guard = locks
            .options("s-1")
            .label("report:{day}")
            .acquire()
            .unwrap();
        let token = guard.token().to_owned();
        let fence = guard.fencing_token();
        // Busy, from another client, while held.
        assert!(other.try_lock("s-1").unwrap().is_none());
        assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
        (token, fence)
    };
    let request = spans.named("request", None)[0].0;
    let acquires = spans.named("acquire", Some("s-1"));
    assert_eq!(acquires.len(), 2, "{acquires:#?}");
    let (_, first) = &acquires[0];
    assert_eq!(first.parent, Some(request));
    for (field, value) in [
        ("lock.name", "s-1"),
        ("lock.label", "report:{day}"),
        ("lock.primitive", "mutex"),
        ("lock.outcome", "acquired"),
        ("lock.attempts", "1"),
        ("otel.kind", "internal"),
        ("otel.status_code", "OK"),
    ] {
        assert_eq!(
            first.fields.get(field).map(String::as_str),
            Some(value),
            "{field} in {first:#?}"
        );
    }
    assert_eq!(first.fields["lock.fencing_token"], fence.to_string());
    assert!(first.fields.contains_key("lock.waited_ms"));
    // Waiting until free: said so, not as a budget of a hundred years.
    assert_eq!(
        first.fields.get("lock.until_free").map(String::as_str),
        Some("true")
    );
    assert!(!first.fields.contains_key("lock.wait_ms"), "{first:#?}");
    assert!(first.closed);
    let (_, busy) = &acquires[1];
    assert_eq!(busy.fields["lock.outcome"], "busy");
    assert_eq!(busy.fields["lock.label"], "other", "no label set");
    assert!(!busy.fields.contains_key("lock.fencing_token"));
    assert!(
        !busy.fields.contains_key("lock.wait_ms") && !busy.fields.contains_key("lock.until_free")
    );
    // A budget is the budget.
    drop(
        other
            .options("s-2")
            .wait(Duration::from_millis(1500))
            .acquire()
            .unwrap(),
    );
    let budgeted = spans.named("acquire", Some("s-2"));
    assert_eq!(budgeted[0].1.fields["lock.wait_ms"], "1500");
    assert!(!budgeted[0].1.fields.contains_key("lock.until_free"));

    let holds = spans.named("hold", Some("s-1"));
    assert_eq!(holds.len(), 1, "{holds:#?}");
    let (_, hold) = &holds[0];
    assert_eq!(
        hold.parent,
        Some(request),
        "the hold is the caller's, not the acquisition's"
    );
    assert_eq!(hold.fields["lock.ended"], "released");
    assert_eq!(hold.fields["lock.fencing_token"], fence.to_string());
    assert!(hold.closed, "closed with the guard");

    for rec in spans.0.lock().unwrap().iter() {
        for value in rec.fields.values() {
            assert!(!value.contains(&token), "owner token in {rec:#?}");
        }
    }
}
