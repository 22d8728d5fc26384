//! Sending a primitive's requests to one store: which transport each operation takes (a
//! pooled connection, the batch combined with other threads' renewals, a Cluster master's
//! tracked connection), and the operations that are a short sequence of requests rather than
//! one: the native fast path's attempt (then the script when the lock was busy), the native
//! release (then the script when it did not delete), an acquisition undone when too few
//! replicas acknowledged it. The requests themselves are `wire/`'s; the quorum's direct path
//! is `quorum/fan_out.rs`.

use std::time::Duration;

use super::again_after_failover;
use crate::error::{Error, Result};
use crate::store::connection::PooledConn;
use crate::store::{Ack, Store};
use crate::wire::request::Request;
use crate::wire::seam::Primitive;
use crate::wire::token::new_token;
use crate::wire::{
    Attempt, AttemptArgs, Claim, ClaimArgs, Con, Form, LockKeys, NativeTry, OwnedTtl, Release,
    ReleaseArgs, Renewal,
};

/// One attempt on one store; with replica acknowledgement asked for, an acquisition that too
/// few replicas acknowledge is undone on the same connection and fails.
pub(crate) fn attempt_on(
    store: &Store,
    p: &dyn Primitive,
    args: &AttemptArgs<'_>,
    ack: Option<Ack>,
) -> Result<Attempt> {
    let mut conn = store.conn()?;
    let attempt = attempt_with(&mut conn, p, args)?;
    if let (Attempt::Acquired { .. }, Some(ack)) = (&attempt, ack) {
        acknowledged(store, conn, p, args.keys, args.token, ack)?;
    }
    Ok(attempt)
}

/// An attempt on `con`: with `args.native`, the primitive's native fast path first; only a
/// busy lock then costs the script's round trip as well, which gives back the fencing number
/// the native attempt used up.
pub(crate) fn attempt_with(
    con: &mut Con<'_>,
    p: &dyn Primitive,
    args: &AttemptArgs<'_>,
) -> Result<Attempt> {
    let (Some(value), Some(native)) = (args.native, p.native()) else {
        return p.attempt(args).on(con);
    };
    let burned = match native
        .attempt_native(args, value, con.supports_pipelining())
        .on(con)?
    {
        NativeTry::Acquired(fence) => return Ok(Attempt::Acquired { fence }),
        NativeTry::Busy(burned) => burned,
        NativeTry::FenceType { took } => {
            if took {
                // Give back what the `SET` took: Redis is left as it was.
                p.release(&undo_args(args.keys, args.token, "")).on(con)?;
            }
            return Err(Error::WrongType {
                redis_key: args.keys.fence.clone(),
            });
        }
    };
    p.attempt(&AttemptArgs { burned, ..*args }).on(con)
}

/// What undoing an acquisition of `token` sends: no minimum hold or cool-down applies, and
/// the lock goes to a waiter under `grant` if one is registered.
fn undo_args<'a>(keys: &'a LockKeys, token: &'a str, grant: &'a str) -> ReleaseArgs<'a> {
    ReleaseArgs {
        keys,
        token,
        grant,
        registration: "",
        cooldown: Duration::ZERO,
        undo: true,
        form: Form::String,
        routed: false,
    }
}

/// A claim on one store, with replica acknowledgement as for an attempt; `None` for a
/// primitive without grants.
pub(crate) fn claim_on(
    store: &Store,
    p: &dyn Primitive,
    c: &ClaimArgs<'_>,
    ack: Option<Ack>,
) -> Result<Option<Claim>> {
    let Some(grants) = p.grants() else {
        return Ok(None);
    };
    let mut conn = store.conn()?;
    let claim = grants.claim(c).on(&mut conn)?;
    if let (Claim::Claimed { .. }, Some(ack)) = (claim, ack) {
        acknowledged(store, conn, p, c.keys, c.grant, ack)?;
    }
    Ok(Some(claim))
}

/// Waits for `ack`; on a shortfall (or a failed wait) deletes the lock this call wrote
/// (ignoring any minimum hold, handing it to a waiter if one is registered) and fails. Uses
/// the same connection when it still works, so a pool of one needs no second connection.
fn acknowledged(
    store: &Store,
    mut conn: PooledConn,
    p: &dyn Primitive,
    keys: &LockKeys,
    token: &str,
    ack: Ack,
) -> Result<()> {
    let error = match store.await_replicas(&mut conn, ack) {
        Ok(acked) if acked >= ack.count => return Ok(()),
        Ok(acked) => Error::ReplicaAck {
            key: keys.name().to_owned(),
            required: ack.count,
            acked,
        },
        Err(e) => e,
    };
    let grant = new_token()?;
    let undo = p.release(&ReleaseArgs {
        routed: store.cluster,
        ..undo_args(keys, token, &grant)
    });
    let undone = if redis::ConnectionLike::is_open(&conn) {
        undo.on(&mut conn)
    } else {
        // The connection broke (the WAIT timed out or was cut): it goes back to be dropped.
        drop(conn);
        store.conn().and_then(|mut fresh| undo.on(&mut fresh))
    };
    match undone {
        Ok(_) => {
            tracing::debug!(target: "redis_lock", key = keys.name(), "acquisition undone: replicas did not acknowledge it")
        }
        Err(error) => {
            tracing::warn!(target: "redis_lock", key = keys.name(), %error, "undoing an unacknowledged acquisition failed; the lock expires with its ttl")
        }
    }
    Err(error)
}

pub(crate) fn renew_on(
    store: &Store,
    p: &dyn Primitive,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
) -> Result<Renewal> {
    again_after_failover(store, || renew_once(store, p, keys, token, ttl))
}

/// One renewal on the store's current master.
pub(crate) fn renew_once(
    store: &Store,
    p: &dyn Primitive,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
) -> Result<Renewal> {
    combined_on(store, &keys.lock, &p.renew(keys, token, ttl))
}

/// The owned-TTL check of a watched lock on the store's current master: sent as a renewal is
/// (combined, on the tracked connection where loss notification is on), so the read keeps the
/// key tracked.
pub(crate) fn check_once(
    store: &Store,
    p: &dyn Primitive,
    keys: &LockKeys,
    token: &str,
) -> Result<OwnedTtl> {
    combined_on(store, &keys.lock, &p.owned_ttl(keys, token))
}

/// Request `req` about `key` sent combined with other threads' (`store/combine.rs`); on a
/// Cluster on the tracked connection of the key's master where it notifies (else, or when
/// that fails, through the cluster's routing).
pub(crate) fn combined_on<T>(store: &Store, key: &str, req: &Request<T>) -> Result<T> {
    if !store.cluster {
        return store.send_combined(req);
    }
    match store
        .notifier(key)
        .and_then(|n| n.on_tracked(1, |conn| req.on(conn)))
    {
        Some(Ok(answer)) => return Ok(answer),
        Some(Err(error)) => {
            // A slot that moved (`MOVED`), or a broken connection: asked again through the
            // cluster's routing (renewals and checks are safe to repeat).
            store.slots_moved();
            tracing::debug!(target: "redis_lock", %error, "a request on a master's tracked connection failed");
        }
        None => {}
    }
    let mut conn = store.conn()?;
    req.on(&mut conn)
}

/// A release on the store's current master (see `on_master`).
pub(crate) fn release_on(store: &Store, p: &dyn Primitive, r: &ReleaseArgs<'_>) -> Result<Release> {
    super::on_master(store, |conn| release_with(store, conn, p, r))
}

/// A release on `conn` of `store`: the primitive's native release first where it may take
/// one and the server is not known to lack it (what the server answers is remembered in the
/// store's capabilities); else, or when it did not delete, the script, which tells why.
pub(crate) fn release_with(
    store: &Store,
    conn: &mut PooledConn,
    p: &dyn Primitive,
    r: &ReleaseArgs<'_>,
) -> Result<Release> {
    // Asked of the server first: the request is built only where it may be sent.
    let native = store.caps.delifeq.may_try().then(|| p.native()).flatten();
    if let Some(native) = native.and_then(|n| n.release_native(r)) {
        match native.on(conn)? {
            Some(true) => {
                store.caps.delifeq.has();
                return Ok(Release::Released);
            }
            Some(false) => store.caps.delifeq.has(),
            None => {
                store.caps.delifeq.lacks();
            }
        }
    }
    p.release(&ReleaseArgs {
        routed: store.cluster,
        ..*r
    })
    .on(conn)
}

pub(crate) fn leave_on(store: &Store, p: &dyn Primitive, keys: &LockKeys, waiter: &str) {
    let r = store
        .conn()
        .and_then(|mut conn| p.leave(keys, waiter, &new_token()?).on(&mut conn));
    if let Err(error) = r {
        // The registration lapses by itself within the waiter margin.
        tracing::debug!(target: "redis_lock", %error, "leaving the waiter registry failed");
    }
}
