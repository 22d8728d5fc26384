//! Owner tokens and the little randomness the crate needs.
//!
//! Randomness comes from a per-thread ChaCha12 generator (`rand`'s `StdRng`, a CSPRNG) seeded
//! from the OS random source, rather than from one `getrandom` system call per acquisition:
//! that call was 1-2.5 us of an uncontended cycle of ~100 us. The generator is reseeded from
//! the OS after [`RESEED_AFTER`] draws, and whenever the process id changed (a child made by
//! `fork` inherits the parent's thread state; without the check both would draw the same
//! tokens).

use std::cell::RefCell;

use rand::rngs::{StdRng, SysRng};
use rand::{Rng, SeedableRng};

use crate::error::{Error, Result};

/// Draws from one seed before the generator is reseeded from the OS.
const RESEED_AFTER: u32 = 1024;

struct Seeded {
    rng: StdRng,
    pid: u32,
    draws: u32,
}

thread_local! {
    static RNG: RefCell<Option<Seeded>> = const { RefCell::new(None) };
}

/// Fills `bytes` from this thread's generator, (re)seeding it from the OS first when it is
/// new, worn, or inherited across a `fork`.
fn fill(bytes: &mut [u8]) -> Result<()> {
    RNG.with(|cell| {
        let mut slot = cell.borrow_mut();
        let pid = std::process::id();
        let fresh = match &*slot {
            Some(s) => s.pid != pid || s.draws >= RESEED_AFTER,
            None => true,
        };
        if fresh {
            let rng = StdRng::try_from_rng(&mut SysRng).map_err(|e| {
                Error::System(std::io::Error::other(format!("OS random source: {e}")))
            })?;
            *slot = Some(Seeded { rng, pid, draws: 0 });
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
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        s.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
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
        // A changed process id (as after `fork`) makes the next draw reseed.
        RNG.with(|c| c.borrow_mut().as_mut().unwrap().pid = 0);
        new_token().unwrap();
        let (pid, draws) = RNG.with(|c| {
            let b = c.borrow();
            let s = b.as_ref().unwrap();
            (s.pid, s.draws)
        });
        assert_eq!((pid, draws), (std::process::id(), 1));
    }

    #[test]
    fn random_below_stays_in_range() {
        for _ in 0..1000 {
            assert!(random_below(7) < 7);
        }
        assert_eq!(random_below(0), 0);
    }
}
