//! Wall-clock times as RFC 3339 text (UTC, through `humantime`) and as Unix milliseconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `2024-05-01T12:34:56.789Z`. Times before 1970 print as the epoch (Redis never stores them).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let t = t.max(UNIX_EPOCH);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        let at = |ms: u64| rfc3339(UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        // `date -u -d @951782400` = 2000-02-29 00:00:00 (a leap day in a century year).
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        // `date -u -d @1714566896` = 2024-05-01 12:34:56.
        assert_eq!(at(1_714_566_896_789), "2024-05-01T12:34:56.789Z");
        assert_eq!(at(4_102_444_799_000), "2099-12-31T23:59:59.000Z");
    }
}
