//! Durations on the command line (the grammar shared with the attribute macro, in
//! `grammar.rs`, and the bounds of the options that take one) and for people.

use std::time::Duration;

#[path = "grammar.rs"]
mod grammar;

pub(crate) use grammar::parse;

/// `text` as a duration of at least `min` and at most `max`: options whose value feeds clock
/// arithmetic (`Instant + grace`) or the library's own bounds are refused on the command line,
/// exit 64, rather than overflowing or failing later.
pub(crate) fn parse_within(text: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = parse(text)?;
    if d < min {
        return Err(format!("{} is shorter than {}", text.trim(), limit(min)));
    }
    if d > max {
        return Err(format!(
            "{} is longer than the limit of {}",
            text.trim(),
            limit(max)
        ));
    }
    Ok(d)
}

/// A bound in words: `365 days`, `10ms`.
fn limit(d: Duration) -> String {
    const DAY: u64 = 24 * 3600;
    if d.as_secs() >= DAY && d.as_secs().is_multiple_of(DAY) && d.subsec_nanos() == 0 {
        format!("{} days", d.as_secs() / DAY)
    } else {
        human(d)
    }
}

/// A short human form: `850ms`, `12.3s`, `4m 05s`, `2h 03m`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
    } else if ms < 3_600_000 {
        format!("{}m {:02}s", ms / 60_000, (ms % 60_000) / 1000)
    } else {
        format!("{}h {:02}m", ms / 3_600_000, (ms % 3_600_000) / 60_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_forms() {
        assert_eq!(human(Duration::from_millis(850)), "850ms");
        assert_eq!(human(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(human(Duration::from_secs(245)), "4m 05s");
        assert_eq!(human(Duration::from_secs(7380)), "2h 03m");
    }

    #[test]
    fn bounds() {
        let (min, max) = (Duration::from_millis(10), redis_lock::MAX_TTL);
        assert_eq!(parse_within("1s", min, max), Ok(Duration::from_secs(1)));
        assert_eq!(parse_within("8760h", min, max), Ok(max));
        let long = parse_within("18446744073709551615.999999999", min, max).unwrap_err();
        assert!(long.contains("longer than the limit of 365 days"), "{long}");
        assert!(
            parse_within("5ms", min, max)
                .unwrap_err()
                .contains("shorter than 10ms")
        );
        assert!(
            parse_within("5x", min, max)
                .unwrap_err()
                .contains("unknown unit")
        );
    }
}
