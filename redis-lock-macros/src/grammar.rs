//! The one duration grammar of redis-lock, shared by the `#[distributed_lock]` attribute (at
//! compile time) and the `redis-lock` command-line tool, so both accept the same text and say
//! the same thing about bad text: `500ms`, `30s`, `2m`, `1h`, fractions (`1.5s`) and bare
//! seconds (`30`, `0.25`). The tool compiles this very file (a symlink in its source folder).

use std::time::Duration;

const UNITS: [(&str, u128); 4] = [
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses `500ms`, `30s`, `2m`, `1h`, `1.5s` or a bare number of seconds (`30`, `0.25`).
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = if unit.is_empty() {
        1_000_000_000
    } else {
        UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, scale)| *scale)
            .ok_or_else(|| {
                format!(
                    "unknown unit {unit:?} in {text:?} (use ms, s, m or h, e.g. 500ms, 30s, 2m)"
                )
            })?
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(format!(
            "{text:?} is not a duration (e.g. 500ms, 30s, 2m, 1h, or seconds)"
        ));
    }
    if fraction.contains('.') || fraction.len() > 9 {
        return Err(format!("{text:?} is not a number the tool understands"));
    }
    let too_long = || format!("{text:?} is too long");
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_long())?
    };
    // The fraction as nanounits: "25" -> 250_000_000 (of 10^9).
    let fraction_nanos: u128 = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<9}").parse().map_err(|_| too_long())?
    };
    let nanos = whole
        .checked_mul(scale)
        .and_then(|n| n.checked_add(fraction_nanos * scale / 1_000_000_000))
        .ok_or_else(too_long)?;
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| too_long())?;
    let sub = u32::try_from(nanos % 1_000_000_000).map_err(|_| too_long())?;
    Ok(Duration::new(secs, sub))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_fractions_and_bare_seconds() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse(".5m"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1.5ms"), Ok(Duration::from_micros(1500)));
    }

    #[test]
    fn nonsense_is_rejected_with_a_reason() {
        for bad in [
            "", "s", "abc", "5x", "5 s", "-1s", "1.2.3", "1e3", "5sec", ".",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(parse("5x").unwrap_err().contains("unknown unit"));
        assert!(
            parse("99999999999999999999999h")
                .unwrap_err()
                .contains("too long")
        );
    }
}
