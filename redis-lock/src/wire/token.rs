//! Owner tokens and the little randomness the crate needs.

use crate::error::{Error, Result};

/// The random identities of one acquisition, from one read of the OS random source.
pub(crate) struct Ids {
    /// Owner token: 128 random bits from the OS CSPRNG, hex-encoded (32 characters). Only the
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
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::System(std::io::Error::other(format!("OS random source: {e}"))))?;
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
    if getrandom::fill(&mut bytes).is_err() {
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
    fn random_below_stays_in_range() {
        for _ in 0..1000 {
            assert!(random_below(7) < 7);
        }
        assert_eq!(random_below(0), 0);
    }
}
