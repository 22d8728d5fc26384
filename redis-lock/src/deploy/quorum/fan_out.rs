//! Asking several servers of a quorum at once: the one fan-out every quorum operation goes
//! through. It sends, waits until the answers so far decide (or every server answered, or the
//! bound passed), hands back the answers sorted by server, and leaves the answers still to
//! come to a handler the caller names afterwards (`Call::settle`).
//!
//! A one-request operation (`Ask::Request`: an attempt, renewal or release) is written by the
//! calling thread itself on every server with an idle plain connection, and its replies are
//! read as they arrive (`poll(2)`, `store/direct.rs`), so an uncontended call wakes no other
//! thread. Everything else, and every server the direct path cannot serve (no idle
//! connection, TLS, Cluster, Sentinel, an operation of several requests), is asked
//! on the server's lane (`lanes.rs`), whose answers wake a polling caller through the call's
//! wake socket. Once the call has decided, a lane thread reads each direct reply still to
//! come, so late answers are handled the same way wherever they were asked.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Quorum;
use super::rules::Answers;
use crate::deploy::lanes::Job;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::direct::{self, Sent};
use crate::wire::request::Request;
use parking_lot::{Condvar, Mutex};

/// A question asked on a server's lane, with its store.
type OnStore<T> = Arc<dyn Fn(&Store) -> Result<T> + Send + Sync>;

/// A question that is one request, the same to every server.
type OnConn<T> = Arc<Request<T>>;

/// How each server is asked.
pub(super) enum Ask<T> {
    /// On the server's lane, which is given the store: an operation of several requests (an
    /// attempt followed by `WAIT`), or one that is not on the latency path.
    Lane(OnStore<T>),
    /// One request, the calling thread's to send where the server has an idle plain
    /// connection. A reply `NOSCRIPT` (the script is not cached there yet) is handed to a
    /// lane, which loads the script and sends the request again: two more round trips.
    Request(OnConn<T>),
}

impl<T> Ask<T> {
    pub(super) fn lane(f: impl Fn(&Store) -> Result<T> + Send + Sync + 'static) -> Ask<T> {
        Ask::Lane(Arc::new(f))
    }

    pub(super) fn request(r: Request<T>) -> Ask<T> {
        Ask::Request(Arc::new(r))
    }

    /// The question, asked on a lane.
    fn on_store(&self, store: &Store) -> Result<T> {
        match self {
            Ask::Lane(f) => f(store),
            Ask::Request(r) => {
                let mut conn = store.conn()?;
                r.on(&mut conn)
            }
        }
    }
}

impl<T> Clone for Ask<T> {
    fn clone(&self) -> Ask<T> {
        match self {
            Ask::Lane(f) => Ask::Lane(Arc::clone(f)),
            Ask::Request(g) => Ask::Request(Arc::clone(g)),
        }
    }
}

/// What happens to an answer that arrives after its call has decided.
pub(super) type Late<T> = Box<dyn FnMut(usize, Result<T>) + Send>;

/// One call fanned out to several servers: the answers so far, and once the caller has
/// decided, what to do with the answers that are still to come.
pub(super) struct Call<T> {
    state: Mutex<CallState<T>>,
    arrived: Condvar,
}

struct CallState<T> {
    answers: Answers<T>,
    /// Servers asked that have not answered.
    pending: Vec<usize>,
    /// The caller took the answers: later ones are late.
    decided: bool,
    /// Late answers that came before the caller said what to do with them.
    late: Vec<(usize, Result<T>)>,
    handler: Option<Late<T>>,
    /// A caller that polls its direct servers' sockets also polls the other end of this, so a
    /// lane thread's answer wakes it.
    #[cfg(unix)]
    wake: Option<std::os::unix::net::UnixStream>,
    #[cfg(not(unix))]
    wake: Option<std::convert::Infallible>,
}

impl<T> Call<T> {
    fn new(servers: &[usize]) -> Call<T> {
        Call {
            state: Mutex::new(CallState {
                answers: Answers {
                    ok: Vec::with_capacity(servers.len()),
                    failed: Vec::new(),
                },
                pending: servers.to_vec(),
                decided: false,
                late: Vec::new(),
                handler: None,
                wake: None,
            }),
            arrived: Condvar::new(),
        }
    }

    /// A server answered.
    fn answer(&self, i: usize, r: Result<T>) {
        let mut st = self.state.lock();
        st.pending.retain(|p| *p != i);
        if !st.decided {
            match r {
                Ok(v) => st.answers.ok.push((i, v)),
                Err(e) => st.answers.failed.push((i, e)),
            }
            if let Some(w) = &st.wake {
                // The caller polls sockets and this: one byte says "look at the answers".
                let _ = (&mut &*w).write(&[1]);
            }
            drop(st);
            self.arrived.notify_one();
            return;
        }
        match st.handler.as_mut() {
            Some(handle) => handle(i, r),
            None => st.late.push((i, r)),
        }
    }

    /// What to do with late answers, those already in and those still to come.
    pub(super) fn settle(&self, mut handler: Late<T>) {
        let mut st = self.state.lock();
        for (i, r) in std::mem::take(&mut st.late) {
            handler(i, r);
        }
        st.handler = Some(handler);
    }

    /// Whether the answers so far decide (or nobody is left to answer).
    fn decided_by(&self, enough: &impl Fn(&Answers<T>) -> bool) -> bool {
        let st = self.state.lock();
        st.pending.is_empty() || enough(&st.answers)
    }
}

/// The caller's end of a call's wake socket (see `CallState::wake`).
#[cfg(unix)]
struct WakeReader(std::os::unix::net::UnixStream);

#[cfg(unix)]
impl WakeReader {
    /// `None` when the system has no socket to spare: the caller then sees lane answers only
    /// after its own sockets (bounded by the deadline), never a wrong answer.
    fn attach<T>(call: &Call<T>) -> Option<WakeReader> {
        let (r, w) = std::os::unix::net::UnixStream::pair().ok()?;
        r.set_nonblocking(true).ok()?;
        w.set_nonblocking(true).ok()?;
        call.state.lock().wake = Some(w);
        Some(WakeReader(r))
    }

    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.0.as_raw_fd()
    }

    fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!((&mut &self.0).read(&mut buf), Ok(n) if n > 0) {}
    }
}

#[cfg(not(unix))]
struct WakeReader(std::convert::Infallible);

#[cfg(not(unix))]
impl WakeReader {
    fn attach<T>(_: &Call<T>) -> Option<WakeReader> {
        None
    }

    fn fd(&self) -> i32 {
        match self.0 {}
    }

    fn drain(&self) {}
}

/// The answers a fanned-out call decided on, and the call, for its late answers.
pub(super) struct Fanned<T> {
    pub(super) answers: Answers<T>,
    pub(super) call: Arc<Call<T>>,
}

impl<T> Fanned<T> {
    /// Late answers change nothing.
    pub(super) fn ignore_late(self) -> Answers<T> {
        self.call.settle(Box::new(|_, _| {}));
        self.answers
    }
}

/// One fan-out in progress: the call, what is asked, and the caller's end of the wake socket
/// (made when a server of a polling caller goes to its lane).
struct Round<'a, T> {
    call: Arc<Call<T>>,
    ask: &'a Ask<T>,
    woken: Option<WakeReader>,
}

impl Quorum {
    /// Asks `servers` at once and waits until `enough` holds for the answers so far, every
    /// server answered, or `bound` passed (the servers still pending then count as failed).
    /// The answers come sorted by server.
    pub(super) fn fan_out<T: Send + 'static>(
        &self,
        servers: &[usize],
        ask: Ask<T>,
        enough: impl Fn(&Answers<T>) -> bool,
        bound: Duration,
    ) -> Fanned<T> {
        let deadline = Instant::now() + bound;
        let mut round = Round {
            call: Arc::new(Call::new(servers)),
            ask: &ask,
            woken: None,
        };
        let mut sent = self.send(servers, &mut round);
        if let Ask::Request(g) = &ask {
            self.read_direct(g, &mut sent, &mut round, &enough, deadline);
        }
        // With replies still to come on our own sockets (the deadline passed, or the answers
        // decided), they are not waited for here: a lane reads them below.
        let answers = self.decide(&round.call, &enough, deadline, sent.is_empty());
        if let Ask::Request(g) = &ask {
            self.read_late(g, sent, &round.call, deadline);
        }
        Fanned {
            answers,
            call: round.call,
        }
    }

    /// Every server, every answer (within the bound), each asked on its lane.
    pub(super) fn each<T: Send + 'static>(
        &self,
        f: impl Fn(&Store) -> Result<T> + Send + Sync + 'static,
    ) -> Answers<T> {
        self.fan_out(&self.all(), Ask::lane(f), |_| false, self.bound)
            .ignore_late()
    }

    /// Sends the question to every server: written on an idle plain connection where it is
    /// one request, else given to the server's lane. A server skipped after a recent failure
    /// answers at once. Returns the requests written here, whose replies are to be read.
    fn send<T: Send + 'static>(
        &self,
        servers: &[usize],
        round: &mut Round<'_, T>,
    ) -> Vec<(usize, Sent)> {
        let packed = match &round.ask {
            Ask::Request(r) => r.packed(),
            Ask::Lane(_) => None,
        };
        let mut sent = Vec::with_capacity(servers.len());
        for &i in servers {
            let member = &self.members[i];
            if let Some(e) = member.skip_error() {
                round.call.answer(i, Err(e));
                continue;
            }
            match packed.and_then(|p| member.store.send_direct(p)) {
                Some(Ok(s)) => sent.push((i, s)),
                Some(Err(e)) => {
                    let r = Err(Error::Redis(e));
                    member.note(&r);
                    round.call.answer(i, r);
                }
                None => {
                    let (member, call, ask) = (
                        Arc::clone(member),
                        Arc::clone(&round.call),
                        round.ask.clone(),
                    );
                    self.on_lane(i, round, move || {
                        let r = member.call(|s| ask.on_store(s));
                        call.answer(i, r);
                    });
                }
            }
        }
        sent
    }

    /// Reads the replies to the requests this thread wrote as they arrive, until the answers
    /// decide or the deadline passes; then one look that does not wait (replies already in
    /// are taken here, so no lane thread is woken to read them).
    fn read_direct<T: Send + 'static>(
        &self,
        g: &OnConn<T>,
        sent: &mut Vec<(usize, Sent)>,
        round: &mut Round<'_, T>,
        enough: &impl Fn(&Answers<T>) -> bool,
        deadline: Instant,
    ) {
        let mut sweep = false;
        while !sweep && !sent.is_empty() {
            sweep = round.call.decided_by(enough);
            if !sweep && Instant::now() >= deadline {
                break;
            }
            let ready = {
                let mut socks: Vec<&mut Sent> = sent.iter_mut().map(|(_, s)| s).collect();
                let until = if sweep { Instant::now() } else { deadline };
                direct::readable(&mut socks, round.woken.as_ref().map(WakeReader::fd), until)
            };
            if let Some(w) = &round.woken {
                w.drain();
            }
            let Ok(mut ready) = ready else {
                // `poll` itself failed: the lanes read the rest.
                break;
            };
            ready.sort_unstable_by(|a, b| b.cmp(a));
            for at in ready {
                let (i, s) = sent.swap_remove(at);
                self.take_reply(g, i, s, sent, round);
            }
        }
    }

    /// One direct request whose socket is readable: its answer, or back to `sent` when the
    /// reply is not whole yet. A `NOSCRIPT` reply goes to the lane, which loads the script.
    fn take_reply<T: Send + 'static>(
        &self,
        g: &OnConn<T>,
        i: usize,
        mut s: Sent,
        sent: &mut Vec<(usize, Sent)>,
        round: &mut Round<'_, T>,
    ) {
        let member = &self.members[i];
        match s.read_ready() {
            Ok(None) => sent.push((i, s)),
            Ok(Some(v)) if g.wants_script(&v) => {
                let (g, call) = (Arc::clone(g), Arc::clone(&round.call));
                let member = Arc::clone(member);
                self.on_lane(i, round, move || {
                    let r = g.load(&mut s.conn).and_then(|()| g.on(&mut s.conn));
                    member.note(&r);
                    // The connection goes back to the pool first: a late answer's handler (an
                    // undo) then finds it idle, as on the lanes.
                    drop(s);
                    call.answer(i, r);
                });
            }
            Ok(Some(v)) => {
                let r = g.decode(v);
                member.note(&r);
                round.call.answer(i, r);
            }
            Err(e) => {
                let r = Err(Error::Redis(e));
                member.note(&r);
                round.call.answer(i, r);
            }
        }
    }

    /// The decision: waits (with `wait`) for lane answers until `enough` holds, every server
    /// answered or the deadline passed, then takes the answers; from here on answers are late.
    /// A server still silent when the answers in do not decide counts as failed.
    fn decide<T>(
        &self,
        call: &Call<T>,
        enough: &impl Fn(&Answers<T>) -> bool,
        deadline: Instant,
        wait: bool,
    ) -> Answers<T> {
        let mut st = call.state.lock();
        if wait {
            while !st.pending.is_empty()
                && !enough(&st.answers)
                && !call.arrived.wait_until(&mut st, deadline).timed_out()
            {}
        }
        st.decided = true;
        st.wake = None;
        let mut answers = std::mem::take(&mut st.answers);
        if !enough(&answers) {
            for &i in &st.pending {
                answers.failed.push((i, self.timed_out(i)));
            }
        }
        drop(st);
        answers.ok.sort_by_key(|(i, _)| *i);
        answers.failed.sort_by_key(|(i, _)| *i);
        answers
    }

    /// Replies still to come on requests this thread wrote: a lane thread reads each (until
    /// the deadline) and hands it to the call's late handler.
    fn read_late<T: Send + 'static>(
        &self,
        g: &OnConn<T>,
        sent: Vec<(usize, Sent)>,
        call: &Arc<Call<T>>,
        deadline: Instant,
    ) {
        for (i, mut s) in sent {
            let (g, call) = (Arc::clone(g), Arc::clone(call));
            let member = Arc::clone(&self.members[i]);
            let job: Job = Box::new(move || {
                let r = match s.finish(deadline) {
                    Ok(v) if g.wants_script(&v) => {
                        g.load(&mut s.conn).and_then(|()| g.on(&mut s.conn))
                    }
                    Ok(v) => g.decode(v),
                    Err(e) => Err(Error::Redis(e)),
                };
                member.note(&r);
                // Back to the pool before the late handler runs (it may release here).
                drop(s);
                call.answer(i, r);
            });
            if let Err(job) = self.lanes[i].submit(job) {
                job();
            }
        }
    }

    /// Runs `job` (which answers for server `i`) on its lane; for a caller that polls its own
    /// sockets, the answer then wakes it.
    fn on_lane<T>(&self, i: usize, round: &mut Round<'_, T>, job: impl FnOnce() + Send + 'static) {
        if matches!(round.ask, Ask::Request(_)) && round.woken.is_none() {
            round.woken = WakeReader::attach(&round.call);
        }
        if let Err(job) = self.lanes[i].submit(Box::new(job)) {
            // No thread could be started: ask this server from here.
            job();
        }
    }

    fn timed_out(&self, i: usize) -> Error {
        Error::Redis(redis::RedisError::from((
            redis::ErrorKind::Io,
            "no answer within the server's timeouts",
            self.members[i].store.label.clone(),
        )))
    }
}
