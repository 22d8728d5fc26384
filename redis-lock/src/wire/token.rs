//! Owner tokens and the little randomness the crate needs.
//!
//! Randomness comes from a per-thread ChaCha12 generator (`rand`'s `StdRng`, a CSPRNG) seeded
//! from the OS random source, rather than from one `getrandom` system call per acquisition:
//! that call was 1-2.5 us of an uncontended cycle of ~100 us. The generator is reseeded from
//! the OS after [`RESEED_AFTER`] draws, and after a `fork` (a child inherits the parent's
//! thread state; without the check both would draw the same tokens). A `fork` is noticed by a
//! `pthread_atfork` handler that counts forks, not by asking the process id on every draw:
//! `getpid` is a system call (glibc does not cache it), one per acquisition.

use std::cell::RefCell;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::{StdRng, SysRng};
use rand::{Rng, SeedableRng};

use crate::error::{Error, Result};

/// Draws from one seed before the generator is reseeded from the OS.
const RESEED_AFTER: u32 = 1024;

struct Seeded {
    rng: StdRng,
    /// [`FORKS`] when the generator was seeded.
    forks: u64,
    draws: u32,
}

/// Forks this process went through (counted in the child, see [`watch_forks`]).
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn forked() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Registers [`forked`] to run in the child of every `fork`, once per process (a child
/// inherits the registration).
fn watch_forks() {
    static WATCH: Once = Once::new();
    WATCH.call_once(|| {
        // SAFETY: `forked` only touches an atomic, which is async-signal-safe and so allowed
        // in a child of a multi-threaded process before `exec`.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(forked)) };
        // Without the handler a fork would go unnoticed: reseed on every draw instead.
        if rc != 0 {
            FORKS.store(u64::MAX, Ordering::Relaxed);
        }
    });
}

thread_local! {
    static RNG: RefCell<Option<Seeded>> = const { RefCell::new(None) };
}

/// Fills `bytes` from this thread's generator, (re)seeding it from the OS first when it is
/// new, worn, or inherited across a `fork`.
fn fill(bytes: &mut [u8]) -> Result<()> {
    RNG.with(|cell| {
        let mut slot = cell.borrow_mut();
        let forks = FORKS.load(Ordering::Relaxed);
        let fresh = match &*slot {
            Some(s) => s.forks != forks || forks == u64::MAX || s.draws >= RESEED_AFTER,
            None => true,
        };
        if fresh {
            watch_forks();
            let rng = StdRng::try_from_rng(&mut SysRng).map_err(|e| {
                Error::System(std::io::Error::other(format!("OS random source: {e}")))
            })?;
            let forks = FORKS.load(Ordering::Relaxed);
            *slot = Some(Seeded {
                rng,
                forks,
                draws: 0,
            });
        }
        let seeded = slot.as_mut().expect("seeded above");
        seeded.draws += 1;
        seeded.rng.fill_bytes(bytes);
        Ok(())
    })
}

/// The random identities of one acquisition, from one draw of the thread's generator.
pub(crate) struct Ids {
    /// Owner token: 128 random bits from a CSPRNG, hex-encoded (32 characters). Only the
    /// holder of the token can renew or release the lock, so it must not be guessable.
    pub(crate) token: String,
    /// 64-bit waiter id (16 hex characters): names the acquisition in the waiter registry and
    /// its wake-up list, so the token itself never appears in a key name.
    pub(crate) waiter: String,
    /// The owner token this acquisition's release hands to the waiter it wakes (128 bits).
    pub(crate) grant: String,
}

pub(crate) fn new_ids() -> Result<Ids> {
    let mut bytes = [0u8; 40];
    fill(&mut bytes)?;
    Ok(Ids {
        token: hex(&bytes[..16]),
        waiter: hex(&bytes[16..24]),
        grant: hex(&bytes[24..]),
    })
}

/// A fresh owner token (for a grant made outside an acquisition: `force_release`, a waiter
/// passing on a grant).
pub(crate) fn new_token() -> Result<String> {
    Ok(new_ids()?.token)
}

/// Whether `s` has the form of an owner token (32 lowercase hex characters), as a lease
/// handle must carry.
pub(crate) fn is_token(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// A random number in `0..bound` for retry jitter (not security relevant).
pub(crate) fn random_below(bound: u64) -> u64 {
    if bound == 0 {
        return 0;
    }
    let mut bytes = [0u8; 8];
    if fill(&mut bytes).is_err() {
        return 0;
    }
    u64::from_le_bytes(bytes) % bound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        let ids = new_ids().unwrap();
        assert_eq!(
            (ids.token.len(), ids.waiter.len(), ids.grant.len()),
            (32, 16, 32)
        );
        assert_ne!(ids.token, ids.grant);
    }

    #[test]
    fn the_generator_is_reseeded_and_never_repeats() {
        // Across more than one reseed, every token is distinct.
        let n = RESEED_AFTER as usize * 2 + 10;
        let tokens: std::collections::HashSet<String> =
            (0..n).map(|_| new_token().unwrap()).collect();
        assert_eq!(tokens.len(), n);
        let draws = RNG.with(|c| c.borrow().as_ref().map(|s| s.draws));
        assert!(draws.is_some_and(|d| d <= RESEED_AFTER), "{draws:?}");
        // A fork counted since the seed (as the child's handler counts it) makes the next
        // draw reseed.
        RNG.with(|c| c.borrow_mut().as_mut().unwrap().forks += 1);
        new_token().unwrap();
        let (forks, draws) = RNG.with(|c| {
            let b = c.borrow();
            let s = b.as_ref().unwrap();
            (s.forks, s.draws)
        });
        assert_eq!((forks, draws), (FORKS.load(Ordering::Relaxed), 1));
    }

    /// A real `fork`: the child's next token is not the parent's, though both start from the
    /// same generator state.
    #[test]
    fn a_forked_child_draws_other_tokens() {
        use std::io::Read;
        use std::os::fd::FromRawFd;
        new_token().unwrap();
        let mut fds = [0; 2];
        // SAFETY: plain POSIX calls; the child only draws a token, writes it and exits.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            match libc::fork() {
                -1 => panic!("fork failed"),
                0 => {
                    let token = new_token().unwrap_or_default();
                    libc::write(fds[1], token.as_ptr().cast(), token.len());
                    libc::_exit(0);
                }
                child => {
                    libc::close(fds[1]);
                    let mut theirs = String::new();
                    std::fs::File::from_raw_fd(fds[0])
                        .read_to_string(&mut theirs)
                        .unwrap();
                    libc::waitpid(child, std::ptr::null_mut(), 0);
                    assert_eq!(theirs.len(), 32, "the child drew a token");
                    assert_ne!(theirs, new_token().unwrap());
                }
            }
        }
    }

    #[test]
    fn random_below_stays_in_range() {
        for _ in 0..1000 {
            assert!(random_below(7) < 7);
        }
        assert_eq!(random_below(0), 0);
    }
}
