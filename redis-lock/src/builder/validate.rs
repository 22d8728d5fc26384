//! The checks of a builder's settings that need no connection and no target: `build` runs
//! them before anything is started (`validate`); the Sentinel-only ones run as a target is
//! chosen, in the order they always have, so each error stays the one reported first.

use crate::error::{Error, Result};
use crate::options::{MAX_TTL, validate_ttl};
use crate::wire::keys::validate_namespace;

use super::Builder;
use super::source::Source;

/// The most connections a pool may have: far above what one Redis accepts by default
/// (`maxclients` 10,000); r2d2 reserves room for all of them when the pool is built.
const MAX_POOL_SIZE: u32 = 65_536;

impl Builder {
    /// Every setting checked before anything is started or sent (`build`'s errors).
    pub(super) fn validate(&self) -> Result<()> {
        validate_namespace(&self.namespace)?;
        validate_ttl(self.default_ttl)?;
        for (what, size) in [
            ("pool_size", self.pool_size),
            ("waiter_pool_size", self.waiter_pool_size),
        ] {
            if size == 0 {
                return Err(Error::invalid(what, "must be at least 1"));
            }
            // r2d2 reserves room for the whole pool up front: an absurd size aborts the
            // process on the allocation instead of failing.
            if size > MAX_POOL_SIZE {
                return Err(Error::invalid(
                    what,
                    format!("{size} connections; the limit is {MAX_POOL_SIZE}"),
                ));
            }
        }
        for (what, t) in [
            ("connect_timeout", self.connect_timeout),
            ("pool_timeout", self.pool_timeout),
            ("io_timeout", self.io_timeout),
        ] {
            if t.is_zero() {
                return Err(Error::invalid(what, "must be longer than zero"));
            }
            // Added together and to the clock when connecting and waiting.
            if t > MAX_TTL {
                return Err(Error::invalid(what, format!("longer than {MAX_TTL:?}")));
            }
        }
        // A wait is added to the clock by every acquisition that uses it.
        if let Some(wait) = self.default_wait
            && std::time::Instant::now().checked_add(wait).is_none()
        {
            return Err(Error::invalid(
                "default_wait",
                format!("{wait:?} overflows the clock; `None` waits until the lock is free"),
            ));
        }
        if matches!(self.source, Source::Redlock(_)) {
            crate::deploy::quorum::check_ttl(self.default_ttl, "default_ttl")?;
        }
        Ok(())
    }

    /// `InvalidInput` for the Sentinel-only settings on any other client (Redlock included).
    pub(super) fn sentinel_only(&self) -> Result<()> {
        let not_sentinel = |what: &'static str| {
            Err(Error::invalid(
                what,
                "only applies to a client built with `sentinel_builder`",
            ))
        };
        if !matches!(self.source, Source::Sentinel { .. }) {
            if self.sentinel_check_interval.is_some() {
                return not_sentinel("sentinel_check_interval");
            }
            if self.master_auth.is_some() {
                return not_sentinel("master_auth");
            }
        }
        Ok(())
    }

    /// A Sentinel client's own settings: a master name, at least one sentinel, and a check
    /// interval the clock can schedule.
    pub(super) fn check_sentinel_settings(&self, master: &str, sentinels: &[String]) -> Result<()> {
        if master.is_empty() {
            return Err(Error::invalid("master_name", "it is empty"));
        }
        if sentinels.is_empty() {
            return Err(Error::invalid("sentinels", "no sentinel given"));
        }
        if self.sentinel_check_interval.is_some_and(|i| i.is_zero()) {
            return Err(Error::invalid(
                "sentinel_check_interval",
                "must be longer than zero",
            ));
        }
        // The check is scheduled on the clock: a period past it would panic there.
        if self.sentinel_check_interval.is_some_and(|i| i > MAX_TTL) {
            return Err(Error::invalid(
                "sentinel_check_interval",
                format!("longer than {MAX_TTL:?}"),
            ));
        }
        Ok(())
    }
}
