//! Durations on the command line (the grammar shared with the attribute macro, in
//! `grammar.rs`) and for people.

use std::time::Duration;

#[path = "grammar.rs"]
mod grammar;

pub(crate) use grammar::parse;

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
}
