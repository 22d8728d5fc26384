//! Duration strings (the grammar shared with the command-line tool, `grammar.rs`) and retry
//! strategies (`"fixed:50ms"`), read at compile time.

/// Milliseconds in `text` (the shared grammar, `grammar.rs`), or why it is not a duration.
/// Sub-millisecond fractions are rounded down: Redis counts whole milliseconds.
pub(crate) fn parse_ms(text: &str) -> Result<u64, String> {
    let d = crate::grammar::parse(text)?;
    u64::try_from(d.as_millis()).map_err(|_| format!("{text:?} is too long"))
}

/// A retry strategy as written in `retry = "..."`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    Notify,
    None,
    Fixed(u64),
    Exponential { initial: u64, max: u64 },
}

/// What `retry` accepts, for error messages.
pub(crate) const RETRY_SYNTAX: &str = "expected \"notify\", \"none\", \"fixed:<duration>\" (such as \"fixed:50ms\") or \"exponential:<initial>..<max>\" (such as \"exponential:10ms..1s\")";

pub(crate) fn parse_retry(text: &str) -> Result<Retry, String> {
    let positive = |d: &str| match parse_ms(d)? {
        0 => Err(format!("retry interval {d:?} must be longer than zero")),
        ms => Ok(ms),
    };
    match text.split_once(':') {
        None if text == "notify" => Ok(Retry::Notify),
        None if text == "none" => Ok(Retry::None),
        Some(("fixed", d)) => positive(d).map(Retry::Fixed),
        Some(("exponential", range)) => {
            let (initial, max) = range
                .split_once("..")
                .ok_or_else(|| format!("malformed retry {text:?}: {RETRY_SYNTAX}"))?;
            let (initial, max) = (positive(initial)?, positive(max)?);
            if max < initial {
                return Err(format!(
                    "retry {text:?}: the maximum interval is shorter than the initial one"
                ));
            }
            Ok(Retry::Exponential { initial, max })
        }
        _ => Err(format!("unknown retry {text:?}: {RETRY_SYNTAX}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_ms("500ms"), Ok(500));
        assert_eq!(parse_ms("30s"), Ok(30_000));
        assert_eq!(parse_ms("2m"), Ok(120_000));
        assert_eq!(parse_ms("1h"), Ok(3_600_000));
        assert_eq!(parse_ms("0s"), Ok(0));
        // The grammar the command-line tool accepts too.
        assert_eq!(parse_ms("1.5s"), Ok(1_500));
        assert_eq!(parse_ms("30"), Ok(30_000));
        assert_eq!(parse_ms("1.5ms"), Ok(1));
        for bad in ["", "s", "5 s", "-1s", "5sec", "5S", "ms5"] {
            assert!(parse_ms(bad).is_err(), "{bad:?}");
        }
        assert!(
            parse_ms("99999999999999999999h")
                .unwrap_err()
                .contains("too long")
        );
    }

    #[test]
    fn retries() {
        assert_eq!(parse_retry("notify"), Ok(Retry::Notify));
        assert_eq!(parse_retry("none"), Ok(Retry::None));
        assert_eq!(parse_retry("fixed:50ms"), Ok(Retry::Fixed(50)));
        assert_eq!(
            parse_retry("exponential:10ms..1s"),
            Ok(Retry::Exponential {
                initial: 10,
                max: 1000
            })
        );
        for bad in [
            "fixed",
            "fixed:0ms",
            "fixed:",
            "exponential:1s",
            "exponential:1s..10ms",
            "poll",
        ] {
            assert!(parse_retry(bad).is_err(), "{bad:?}");
        }
    }
}
