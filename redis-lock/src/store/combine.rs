//! Combining: many threads' independent one-request calls to one server (the watchdogs'
//! renewals) sent as one pipeline on one pooled connection, by whichever of those threads
//! gets there first (flat combining: no thread of its own).
//!
//! Why: every held lock has its own renewal thread, and each renewal used to take a pooled
//! connection for its round trip. With thousands of locks held on a busy machine, a thread
//! that got a connection was often descheduled before it could give it back, so the pool
//! (16 connections by default) served far fewer renewals per second than were due, renewals
//! queued for the pool for seconds, and locks ran out while their holders were alive
//! (BENCHMARKS.md, "Many locks held at once"). Combined, a renewal waits for at
//! most the round trip in flight plus its own: the batch grows with the load instead of the
//! queue, and renewals take one connection, not the pool that acquisitions need.
//!
//! A request is queued, then its thread tries to become the combiner. The combiner takes
//! everything queued, sends it as one pipeline, hands every caller its reply, and lets go;
//! if more was queued meanwhile, it wakes the first of those callers to combine next (so no
//! thread serves others for longer than one round trip past its own). A caller that is not the
//! combiner sleeps until its reply is there or it is asked to combine.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use redis::{ConnectionLike, RedisError, Value};

use super::Store;
use crate::error::{Error, Result};
use crate::wire::request::Request;

/// The queue of one store's combined requests.
#[derive(Default)]
pub(crate) struct Combiner {
    queue: Mutex<Vec<Arc<Pending>>>,
    /// Held by the thread that is sending a batch.
    sending: Mutex<()>,
    /// Held by the thread that loads a script the server did not have (see
    /// [`Store::script_loading`]).
    loading: Mutex<()>,
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner")
            .field("queued", &self.queue.lock().len())
            .finish_non_exhaustive()
    }
}

/// One caller's request, and its reply once there.
struct Pending {
    packed: Vec<u8>,
    state: Mutex<Slot>,
    cond: Condvar,
}

#[derive(Default)]
struct Slot {
    reply: Option<Result<Value>>,
    /// Asked to combine the next batch.
    turn: bool,
}

impl Store {
    /// Sends `req` combined with other threads' requests to this server (a one-command
    /// request; anything else on a pooled connection) and decodes its reply. A script the
    /// server lacks (never asked, or restarted) is loaded by one calling thread on the usual
    /// path while the others wait, then they send theirs combined again, instead of every one
    /// taking a connection.
    pub(crate) fn send_combined<T>(&self, req: &Request<T>) -> Result<T> {
        let Some(packed) = req.packed() else {
            return req.on(&mut self.conn()?);
        };
        let mut reply = self.combined(packed.to_vec())?;
        if req.wants_script(&reply) {
            let _loading = self.script_loading();
            // Loaded meanwhile by the thread this one waited for, most likely.
            reply = self.combined(packed.to_vec())?;
            if req.wants_script(&reply) {
                // A `SCRIPT LOAD` writes no key, so the pooled connection's request sends no
                // invalidation to a tracked one (`store/notify/`).
                req.load(&mut self.conn()?)?;
                reply = self.combined(packed.to_vec())?;
            }
        }
        req.decode(reply)
    }

    /// Sends one packed request, combined with other threads' requests to this server into one
    /// pipeline, and returns its reply (a server error is a `Value::ServerError`, as on a
    /// connection). Not for Cluster stores, whose pipelines would have to be split by slot.
    pub(crate) fn combined(&self, packed: Vec<u8>) -> Result<Value> {
        debug_assert!(!self.cluster);
        let me = Arc::new(Pending {
            packed,
            state: Mutex::new(Slot::default()),
            cond: Condvar::new(),
        });
        self.combiner.queue.lock().push(Arc::clone(&me));
        loop {
            if let Some(sending) = self.combiner.sending.try_lock() {
                let batch = std::mem::take(&mut *self.combiner.queue.lock());
                if !batch.is_empty() {
                    self.send_batch(&batch);
                }
                drop(sending);
                // Queued while we sent (their callers found us sending): the first of them
                // combines next. Its own request is in the queue, so it finds work.
                let next = self.combiner.queue.lock().first().cloned();
                if let Some(next) = next {
                    next.state.lock().turn = true;
                    next.cond.notify_one();
                }
            }
            let mut slot = me.state.lock();
            loop {
                if let Some(reply) = slot.reply.take() {
                    return reply;
                }
                if std::mem::take(&mut slot.turn) {
                    break;
                }
                me.cond.wait(&mut slot);
            }
        }
    }

    /// Taken by a caller whose combined request found the script missing on the server: it
    /// sends again, and loads the script if it is still missing, while the callers that
    /// found the same wait here and then find it loaded.
    pub(crate) fn script_loading(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.combiner.loading.lock()
    }

    /// Sends `batch` as one pipeline and hands out the replies; on failure every caller gets
    /// the error (the connection is dropped, as after any failed request).
    fn send_batch(&self, batch: &[Arc<Pending>]) {
        // Should anything below panic, the other callers get an error instead of sleeping
        // forever.
        let unanswered = Unanswered(batch);
        // On the tracked connection where loss notification is on (`notify.rs`): its own
        // writes send no invalidation, and each renewal's read keeps its key tracked.
        if let Some(result) = self
            .notify
            .on_tracked(batch.len(), |conn| send(conn, batch))
        {
            answer(batch, result);
            std::mem::forget(unanswered);
            return;
        }
        let replies = match self.conn() {
            Ok(mut conn) => {
                // Each renewal counts as a request of its own, though they share a round trip
                // (the pipeline counts one).
                conn.count(batch.len() - 1);
                send(&mut conn, batch)
            }
            Err(e) => Err(e),
        };
        answer(batch, replies);
        std::mem::forget(unanswered);
    }
}

/// Sends `batch` on `conn` as one pipeline (one request alone as itself); its replies, one per
/// request.
fn send(conn: &mut dyn ConnectionLike, batch: &[Arc<Pending>]) -> Result<Vec<Value>> {
    let result = if let [one] = batch {
        conn.req_packed_command(&one.packed).map(|v| vec![v])
    } else {
        let packed = batch.iter().flat_map(|p| p.packed.iter().copied());
        conn.req_packed_commands(&packed.collect::<Vec<u8>>(), 0, batch.len())
    };
    match result {
        Ok(values) if values.len() == batch.len() => Ok(values),
        Ok(values) => Err(short_reply(values.len(), batch.len())),
        Err(e) => Err(Error::Redis(e)),
    }
}

/// Hands every caller of `batch` its reply, or the batch's failure.
fn answer(batch: &[Arc<Pending>], replies: Result<Vec<Value>>) {
    let mut replies: Vec<Result<Value>> = match replies {
        Ok(values) => values.into_iter().map(Ok).collect(),
        Err(e) => {
            let first = copy_error(&e);
            std::iter::once(Err(e))
                .chain((1..batch.len()).map(|_| Err(copy_error(&first))))
                .collect()
        }
    };
    for (pending, reply) in batch.iter().zip(replies.drain(..)) {
        pending.state.lock().reply = Some(reply);
        pending.cond.notify_one();
    }
}

/// Answers every caller of a batch whose combiner panicked.
struct Unanswered<'a>(&'a [Arc<Pending>]);

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        for pending in self.0 {
            let mut slot = pending.state.lock();
            if slot.reply.is_none() {
                slot.reply = Some(Err(Error::Redis(RedisError::from((
                    redis::ErrorKind::Client,
                    "the combined request was abandoned",
                )))));
            }
            drop(slot);
            pending.cond.notify_one();
        }
    }
}

fn short_reply(got: usize, sent: usize) -> Error {
    Error::Redis(RedisError::from((
        redis::ErrorKind::Client,
        "a combined request got fewer replies than it sent",
        format!("{got} of {sent}"),
    )))
}

/// The same failure for another caller of the batch (`RedisError` is not `Clone`).
fn copy(e: &RedisError) -> Error {
    Error::Redis(RedisError::from((
        e.kind(),
        "the combined request failed",
        e.to_string(),
    )))
}

fn copy_error(e: &Error) -> Error {
    match e {
        Error::Redis(r) => copy(r),
        other => Error::Redis(RedisError::from((
            redis::ErrorKind::Io,
            "no connection for the combined request",
            other.to_string(),
        ))),
    }
}
