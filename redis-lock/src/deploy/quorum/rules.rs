//! Redlock's rules, as pure functions of the servers' answers: how long a lock is valid
//! (`drift`, `in_time`), what a majority is, and how each operation's answers combine into
//! one verdict (`tally` and `fence_plan` for an attempt, `until_free` for its wait,
//! `busy_holder` for its busy error, `combine_*` for the rest). No I/O: unit-tested below without a server; `Quorum` (the
//! module above) asks the servers and carries out what these decide.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::wire::{Attempt, BusyHolder, Holder, OwnedTtl, Release, Renewal};

/// Clock drift allowance for a lock with `ttl`: 1 % plus 2 ms (the Redlock description's
/// figures; redsync and node-redlock use the same).
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// `InvalidInput` for a TTL no longer than its drift allowance (1 or 2 ms): no acquisition or
/// renewal could ever be in time (`in_time`), so a free lock would look busy forever.
pub(crate) fn check_ttl(ttl: Duration, what: &'static str) -> Result<()> {
    if drift(ttl) >= ttl {
        return Err(Error::invalid(
            what,
            format!(
                "{ttl:?} is not longer than Redlock's clock-drift allowance ({:?}: 1 % + 2 ms), \
                 so no acquisition could be in time; use at least 3 ms",
                drift(ttl)
            ),
        ));
    }
    Ok(())
}

/// The smallest majority of `n` servers.
pub(super) fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// An acquisition or renewal that took `elapsed` still leaves validity: `ttl - elapsed - drift
/// > 0`.
pub(super) fn in_time(elapsed: Duration, ttl: Duration) -> bool {
    elapsed + drift(ttl) < ttl
}

/// Answers of all servers to one operation, by server index.
#[derive(Debug)]
pub(super) struct Answers<T> {
    pub(super) ok: Vec<(usize, T)>,
    pub(super) failed: Vec<(usize, Error)>,
}

impl<T> Default for Answers<T> {
    fn default() -> Answers<T> {
        Answers {
            ok: Vec::new(),
            failed: Vec::new(),
        }
    }
}

impl<T> Answers<T> {
    /// Whether a hard error (bad key type, bad input) is among the failures: it is the same on
    /// every server and not a quorum matter, so it is reported as is.
    pub(super) fn has_hard_error(&self) -> bool {
        self.failed.iter().any(|(_, e)| is_hard(e))
    }
}

pub(super) fn is_hard(e: &Error) -> bool {
    matches!(e, Error::WrongType { .. } | Error::InvalidInput { .. })
}

/// What the combining rules decide.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict<T> {
    Decided(T),
    /// Report the hard error among the answers.
    Hard,
    /// Too few servers answered to decide.
    NoQuorum,
}

/// An attempt's answers, sorted: `(server, fence)` where acquired, `(server, holder ttl)`
/// where busy, and the shortest `block` any busy server announced (come back before the
/// first registration lapses).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Tally {
    pub(super) acquired: Vec<(usize, u64)>,
    pub(super) busy: Vec<(usize, Option<Duration>)>,
    pub(super) block: Option<Duration>,
}

pub(super) fn tally(ok: &[(usize, Attempt)]) -> Tally {
    let mut t = Tally::default();
    for (i, a) in ok {
        match *a {
            Attempt::Acquired { fence } => t.acquired.push((*i, fence)),
            Attempt::Busy {
                holder_ttl, block, ..
            } => {
                t.busy.push((*i, holder_ttl));
                t.block = match (t.block, block) {
                    (Some(x), Some(y)) => Some(x.min(y)),
                    (x, y) => x.or(y),
                };
            }
        }
    }
    t
}

/// The fencing token of an acquisition held on `acquired` (server, counter) pairs: the
/// highest counter; and the servers whose counter must be raised to it. It counts once a
/// majority of `n` is at the token.
pub(super) fn fence_plan(acquired: &[(usize, u64)]) -> Option<(u64, Vec<usize>)> {
    let fence = acquired.iter().map(|(_, f)| *f).max()?;
    let behind = acquired
        .iter()
        .filter(|(_, f)| *f < fence)
        .map(|(i, _)| *i)
        .collect();
    Some((fence, behind))
}

/// Who holds a lock an attempt found busy, for its busy error: the holder a majority of the
/// `n` servers reported in their busy answers (the same stored information), with the q-th
/// longest remaining TTL, as `combine_inspect` decides for `inspect`; `None` when no holder
/// is on a majority (a split between attempts, or the lock half taken): nobody holds it then,
/// as `inspect` would say. No server is asked again.
pub(super) fn busy_holder(n: usize, ok: &[(usize, Attempt)]) -> Option<BusyHolder> {
    let q = majority(n);
    let holders: Vec<&BusyHolder> = ok
        .iter()
        .filter_map(|(_, a)| match a {
            Attempt::Busy { holder, .. } => holder.as_deref(),
            Attempt::Acquired { .. } => None,
        })
        .collect();
    holders.iter().find_map(|candidate| {
        let mut ttls: Vec<Duration> = holders
            .iter()
            .filter(|h| h.info == candidate.info)
            .map(|h| h.ttl.unwrap_or(Duration::MAX))
            .collect();
        if ttls.len() < q {
            return None;
        }
        ttls.sort_unstable_by(|a, b| b.cmp(a));
        Some(BusyHolder {
            info: candidate.info.clone(),
            ttl: Some(ttls[q - 1]).filter(|t| *t != Duration::MAX),
        })
    })
}

/// How long until a majority could be free: the servers we just released are free; of the
/// busy ones, the `need`-th to expire decides. When the busy servers are fewer than a
/// majority, nobody holds the lock: another client is half-way through (or out of) an
/// attempt, so try again after `jitter` (1 ms at least).
pub(super) fn until_free(
    q: usize,
    free: usize,
    busy: &mut [(usize, Option<Duration>)],
    jitter: Duration,
) -> Duration {
    if busy.len() < q {
        return Duration::from_millis(1) + jitter;
    }
    let need = q.saturating_sub(free).max(1);
    // No expiry sorts last: it never frees by itself.
    busy.sort_by_key(|(_, ttl)| ttl.unwrap_or(Duration::MAX));
    busy.get(need - 1)
        .and_then(|(_, ttl)| *ttl)
        .unwrap_or(Duration::MAX)
}

/// Renewal: renewed on a majority within the validity. Fewer, with the rest unreachable, is
/// undecided (the watchdog retries); fewer with the rest answering is a loss.
pub(super) fn combine_renew(n: usize, a: &Answers<Renewal>, in_time: bool) -> Verdict<Renewal> {
    let q = majority(n);
    let renewed = a.ok.iter().filter(|(_, r)| *r == Renewal::Renewed).count();
    if renewed >= q && in_time {
        return Verdict::Decided(Renewal::Renewed);
    }
    if a.has_hard_error() {
        return Verdict::Hard;
    }
    if renewed + a.failed.len() >= q {
        // The servers that did not answer may still hold it: undecided, try again.
        return Verdict::NoQuorum;
    }
    let taken = a.ok.iter().any(|(_, r)| *r == Renewal::NotOurs);
    Verdict::Decided(if taken {
        Renewal::NotOurs
    } else {
        Renewal::Gone
    })
}

/// Release: `Released` when a majority released it; otherwise `Lost` if anyone else holds it
/// somewhere, else `Late`.
pub(super) fn combine_release(n: usize, a: &Answers<Release>) -> Verdict<Release> {
    let q = majority(n);
    let released =
        a.ok.iter()
            .filter(|(_, r)| matches!(r, Release::Released | Release::Kept))
            .count();
    if released >= q {
        return Verdict::Decided(Release::Released);
    }
    if a.has_hard_error() {
        return Verdict::Hard;
    }
    if a.ok.len() < q {
        return Verdict::NoQuorum;
    }
    let lost = a.ok.iter().any(|(_, r)| *r == Release::Lost);
    Verdict::Decided(if lost { Release::Lost } else { Release::Late })
}

/// Held while a majority holds it: until the q-th longest remaining TTL runs out, less the
/// drift allowance.
pub(super) fn combine_owned_ttl(n: usize, a: &Answers<OwnedTtl>) -> Verdict<OwnedTtl> {
    let q = majority(n);
    let mut ours: Vec<Duration> =
        a.ok.iter()
            .filter_map(|(_, t)| match t {
                OwnedTtl::Left(d) => Some(*d),
                OwnedTtl::NoExpiry => Some(Duration::MAX),
                _ => None,
            })
            .collect();
    if ours.len() >= q {
        ours.sort_unstable_by(|a, b| b.cmp(a));
        let left = ours[q - 1];
        return Verdict::Decided(if left == Duration::MAX {
            OwnedTtl::NoExpiry
        } else {
            OwnedTtl::Left(left.saturating_sub(drift(left)))
        });
    }
    if a.has_hard_error() {
        return Verdict::Hard;
    }
    if ours.len() + a.failed.len() >= q {
        return Verdict::NoQuorum;
    }
    let taken = a.ok.iter().any(|(_, t)| *t == OwnedTtl::NotOurs);
    Verdict::Decided(if taken {
        OwnedTtl::NotOurs
    } else {
        OwnedTtl::Gone
    })
}

/// The holder a majority of the servers agree on (same host, pid, fencing token and
/// ownership), with the q-th longest remaining TTL.
pub(super) fn combine_inspect(n: usize, a: &Answers<Option<Holder>>) -> Verdict<Option<Holder>> {
    if a.has_hard_error() {
        return Verdict::Hard;
    }
    let q = majority(n);
    if a.ok.len() < q {
        return Verdict::NoQuorum;
    }
    let holders: Vec<&Holder> = a.ok.iter().filter_map(|(_, h)| h.as_ref()).collect();
    for candidate in &holders {
        let same: Vec<&&Holder> = holders
            .iter()
            .filter(|h| {
                h.host == candidate.host
                    && h.pid == candidate.pid
                    && h.fence == candidate.fence
                    && h.owned == candidate.owned
            })
            .collect();
        if same.len() >= q {
            let mut ttls: Vec<Duration> = same
                .iter()
                .map(|h| h.remaining_ttl.unwrap_or(Duration::MAX))
                .collect();
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let mut holder = (*candidate).clone();
            holder.remaining_ttl = Some(ttls[q - 1]).filter(|t| *t != Duration::MAX);
            // A waiter registers on every server it finds the lock busy on: the most any
            // server counts.
            holder.waiters = same.iter().map(|h| h.waiters).max().unwrap_or(0);
            holder.queued = same.iter().map(|h| h.queued).max().unwrap_or(0);
            return Verdict::Decided(Some(holder));
        }
    }
    Verdict::Decided(None)
}

/// Enough servers answered for an operation that needs a majority to have looked.
pub(super) fn combine_reached(n: usize, answered: usize) -> Verdict<()> {
    if answered >= majority(n) {
        Verdict::Decided(())
    } else {
        Verdict::NoQuorum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn down() -> Error {
        Error::Redis(redis::RedisError::from((redis::ErrorKind::Io, "down")))
    }

    fn hard() -> Error {
        Error::WrongType {
            redis_key: "k".into(),
        }
    }

    fn answers<T>(ok: Vec<T>, failed: Vec<Error>) -> Answers<T> {
        let n = ok.len();
        Answers {
            ok: ok.into_iter().enumerate().collect(),
            failed: failed
                .into_iter()
                .enumerate()
                .map(|(i, e)| (n + i, e))
                .collect(),
        }
    }

    #[test]
    fn a_ttl_must_outlast_its_drift_allowance() {
        for short in [MS, 2 * MS] {
            assert!(!in_time(Duration::ZERO, short), "never in time");
            assert!(matches!(
                check_ttl(short, "ttl"),
                Err(Error::InvalidInput { what: "ttl", .. })
            ));
        }
        assert!(in_time(Duration::ZERO, 3 * MS));
        assert!(check_ttl(3 * MS, "ttl").is_ok());
        assert!(check_ttl(Duration::from_secs(30), "ttl").is_ok());
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), 102 * MS);
        assert_eq!(drift(100 * MS), 3 * MS);
        assert!(in_time(90 * MS, 100 * MS));
        assert!(!in_time(97 * MS, 100 * MS));
        assert_eq!((majority(3), majority(4), majority(5)), (2, 3, 3));
    }

    #[test]
    fn a_majority_must_free_up() {
        // 3 servers, none free, held with 100/300/200 ms left: free once two have expired.
        let mut busy = [
            (0, Some(100 * MS)),
            (1, Some(300 * MS)),
            (2, Some(200 * MS)),
        ];
        assert_eq!(until_free(2, 0, &mut busy, MS), 200 * MS);
        // One is free already: the first to expire is enough.
        let mut busy = [(1, Some(300 * MS)), (2, Some(200 * MS))];
        assert_eq!(until_free(2, 1, &mut busy, MS), 200 * MS);
        // Only one busy server of three: nobody holds a majority, retry soon.
        let mut busy = [(1, Some(30_000 * MS))];
        assert_eq!(until_free(2, 1, &mut busy, 7 * MS), 8 * MS);
        // Held without expiry on a majority: never frees by itself.
        let mut busy = [(0, None), (1, None)];
        assert_eq!(until_free(2, 0, &mut busy, MS), Duration::MAX);
    }

    #[test]
    fn attempts_are_tallied() {
        let ok = vec![
            (0, Attempt::Acquired { fence: 4 }),
            (
                1,
                Attempt::Busy {
                    holder_ttl: Some(50 * MS),
                    block: Some(51 * MS),
                    fresh: true,
                    server_ms: 1,
                    holder: None,
                },
            ),
            (
                2,
                Attempt::Busy {
                    holder_ttl: None,
                    block: Some(20 * MS),
                    fresh: true,
                    server_ms: 1,
                    holder: None,
                },
            ),
        ];
        let t = tally(&ok);
        assert_eq!(t.acquired, vec![(0, 4)]);
        assert_eq!(t.busy, vec![(1, Some(50 * MS)), (2, None)]);
        assert_eq!(t.block, Some(20 * MS), "come back before the first lapses");
    }

    #[test]
    fn a_busy_error_names_the_holder_a_majority_reported() {
        let info = |host: &str| crate::wire::Info::parse(&format!("{host}\n7\n1700\nmeta"));
        let busy = |host: Option<&str>, ttl: u32| Attempt::Busy {
            holder_ttl: Some(ttl * MS),
            block: None,
            fresh: false,
            server_ms: 0,
            holder: host.map(|h| {
                Box::new(BusyHolder {
                    info: info(h),
                    ttl: Some(ttl * MS),
                })
            }),
        };
        // Two of three agree: their information, the second-longest TTL of the two (a
        // majority holds it that long at least).
        let ok = [
            (0, busy(Some("b"), 900)),
            (1, busy(Some("a"), 300)),
            (2, busy(Some("a"), 500)),
        ];
        let h = busy_holder(3, &ok).unwrap();
        assert_eq!((h.info, h.ttl), (info("a"), Some(300 * MS)));
        // A split, a server with nothing stored, an acquisition: no majority, no holder.
        let ok = [
            (0, busy(Some("b"), 900)),
            (1, busy(Some("a"), 300)),
            (2, busy(None, 500)),
        ];
        assert_eq!(busy_holder(3, &ok), None);
        let ok = [
            (0, Attempt::Acquired { fence: 3 }),
            (1, busy(Some("a"), 300)),
        ];
        assert_eq!(busy_holder(3, &ok), None);
        // Five servers, three agree.
        let ok = [
            (0, busy(Some("a"), 100)),
            (1, busy(Some("a"), 400)),
            (3, busy(Some("a"), 200)),
            (4, busy(Some("c"), 900)),
        ];
        assert_eq!(busy_holder(5, &ok).unwrap().ttl, Some(100 * MS));
    }

    #[test]
    fn the_fence_is_the_highest_counter_and_laggards_are_raised() {
        assert_eq!(fence_plan(&[]), None);
        assert_eq!(fence_plan(&[(0, 5), (2, 5)]), Some((5, vec![])));
        assert_eq!(fence_plan(&[(0, 5), (1, 9), (2, 7)]), Some((9, vec![0, 2])));
    }

    #[test]
    fn renewal_needs_a_majority_in_time() {
        use Renewal::*;
        let v = |a: &Answers<Renewal>, t| combine_renew(3, a, t);
        assert_eq!(
            v(&answers(vec![Renewed, Renewed, Gone], vec![]), true),
            Verdict::Decided(Renewed)
        );
        // Renewed on a majority but too late to count: undecided, the watchdog tries again
        // (until the local expiry).
        assert_eq!(
            v(&answers(vec![Renewed, Renewed, Gone], vec![]), false),
            Verdict::NoQuorum
        );
        // One renewed, one unreachable: undecided, the watchdog retries.
        assert_eq!(
            v(&answers(vec![Renewed, Gone], vec![down()]), true),
            Verdict::NoQuorum
        );
        assert_eq!(
            v(&answers(vec![Renewed, NotOurs, Gone], vec![]), true),
            Verdict::Decided(NotOurs)
        );
        assert_eq!(
            v(&answers(vec![Gone, Gone], vec![hard()]), true),
            Verdict::Hard
        );
    }

    #[test]
    fn release_counts_a_majority() {
        use Release::*;
        assert_eq!(
            combine_release(3, &answers(vec![Released, Kept, Late], vec![])),
            Verdict::Decided(Released)
        );
        assert_eq!(
            combine_release(3, &answers(vec![Released, Late, Lost], vec![])),
            Verdict::Decided(Lost)
        );
        assert_eq!(
            combine_release(3, &answers(vec![Late, Late, Released], vec![])),
            Verdict::Decided(Late)
        );
        assert_eq!(
            combine_release(3, &answers(vec![Late], vec![down(), down()])),
            Verdict::NoQuorum
        );
        assert_eq!(
            combine_release(3, &answers(vec![Late, Late], vec![hard()])),
            Verdict::Hard
        );
    }

    #[test]
    fn owned_ttl_is_the_majoritys_shortest_less_drift() {
        use OwnedTtl::*;
        let s = Duration::from_secs(1);
        assert_eq!(
            combine_owned_ttl(3, &answers(vec![Left(3 * s), Left(s), Gone], vec![])),
            Verdict::Decided(Left(s - drift(s)))
        );
        assert_eq!(
            combine_owned_ttl(3, &answers(vec![NoExpiry, NoExpiry, Gone], vec![])),
            Verdict::Decided(NoExpiry)
        );
        assert_eq!(
            combine_owned_ttl(3, &answers(vec![Left(s)], vec![down(), down()])),
            Verdict::NoQuorum
        );
        assert_eq!(
            combine_owned_ttl(3, &answers(vec![Left(s), NotOurs, Gone], vec![])),
            Verdict::Decided(NotOurs)
        );
        assert_eq!(
            combine_owned_ttl(3, &answers(vec![Left(s), Gone, Gone], vec![])),
            Verdict::Decided(Gone)
        );
    }

    fn holder(pid: u32, ttl: u32) -> Holder {
        Holder {
            remaining_ttl: Some(ttl * MS),
            host: "h".into(),
            pid,
            since_ms: 1,
            fence: 3,
            meta: None,
            hold_until_ms: None,
            owned: true,
            cool_until_ms: None,
            waiters: 0,
            queued: 0,
            queue_head: None,
            rw: None,
            fence_is_counter: false,
        }
    }

    #[test]
    fn inspect_reports_the_holder_a_majority_agrees_on() {
        let a = answers(
            vec![
                Some(holder(1, 900)),
                Some(holder(1, 500)),
                Some(holder(2, 800)),
            ],
            vec![],
        );
        let Verdict::Decided(Some(h)) = combine_inspect(3, &a) else {
            panic!("a majority agrees on pid 1");
        };
        assert_eq!((h.pid, h.remaining_ttl), (1, Some(500 * MS)));
        let a = answers(
            vec![Some(holder(1, 900)), Some(holder(2, 500)), None],
            vec![],
        );
        assert_eq!(combine_inspect(3, &a), Verdict::Decided(None));
        let a = answers(vec![Some(holder(1, 900))], vec![down(), down()]);
        assert_eq!(combine_inspect(3, &a), Verdict::NoQuorum);
    }

    #[test]
    fn reaching_a_majority() {
        assert_eq!(combine_reached(3, 2), Verdict::Decided(()));
        assert_eq!(combine_reached(3, 1), Verdict::NoQuorum);
        assert_eq!(combine_reached(5, 3), Verdict::Decided(()));
    }
}
