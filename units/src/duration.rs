//! Durations: humantime's forms, and plain seconds where a flag always took seconds.
//!
//! The grammar is the humantime crate's (systemd's): one or more numbers
//! each with a unit, `30s`, `1m 30s`, `250ms`, `1.5s`, `2h`, `45us`; units
//! `ns`, `us`, `ms`, `s`, `m`, `h`, `d` and their long names (note `m` is a
//! minute and `M` a month, as in systemd). [`parse_duration`] needs a unit;
//! [`parse_seconds`] also reads a plain non-negative number as seconds
//! (`30`, `0.5`), for the flags that took seconds before this grammar
//! (`--duration`, `--attach-wait`), so their old values keep their meaning.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The accepted forms, for refusal messages ("... is not a duration: use ...").
pub const DURATION_FORMS: &str =
    "a number with a unit, e.g. 30s, 1m 30s, 250ms, 1.5s (units ns, us, ms, s, m, h, d)";

/// A duration the grammar refuses: the input, and whether plain seconds were allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurationError {
    input: String,
    seconds_ok: bool,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plain = if self.seconds_ok {
            "seconds (e.g. 30, 0.5) or "
        } else {
            ""
        };
        write!(
            f,
            "{:?} is not a duration: use {plain}{DURATION_FORMS}",
            self.input
        )
    }
}

impl std::error::Error for DurationError {}

/// Parses a duration with units (`30s`, `1m 30s`, `250ms`); a plain number is refused.
///
/// ```
/// use prescient_units::parse_duration;
/// use std::time::Duration;
/// assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
/// assert!(parse_duration("30").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    humantime::parse_duration(s.trim()).map_err(|_| DurationError {
        input: s.to_string(),
        seconds_ok: false,
    })
}

/// Parses a duration with units, or a plain non-negative number of seconds (`30`, `0.5`).
///
/// ```
/// use prescient_units::parse_seconds;
/// use std::time::Duration;
/// assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
/// assert_eq!(parse_seconds("250ms"), Ok(Duration::from_millis(250)));
/// ```
pub fn parse_seconds(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    let plain = !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let parsed = if plain {
        humantime::parse_duration(&format!("{t}s"))
    } else {
        humantime::parse_duration(t)
    };
    parsed.map_err(|_| DurationError {
        input: s.to_string(),
        seconds_ok: true,
    })
}

/// A duration read with [`parse_duration`] and shown as humantime writes it (`1m 30s`).
///
/// For clap flags whose default comes from code (`default_value_t`), which
/// needs `Display`; the text shown reads back to the same value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, DurationError> {
        parse_duration(s).map(HumanDuration)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl From<HumanDuration> for Duration {
    fn from(d: HumanDuration) -> Duration {
        d.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humantime_forms() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("45us"), Ok(Duration::from_micros(45)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration(" 2h "), Ok(Duration::from_secs(7200)));
    }

    #[test]
    fn plain_numbers_are_seconds_only_where_asked() {
        assert!(parse_duration("30").is_err());
        assert_eq!(parse_seconds("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_seconds("0"), Ok(Duration::ZERO));
        assert_eq!(parse_seconds("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_seconds("1m 30s"), Ok(Duration::from_secs(90)));
    }

    #[test]
    fn refusals_name_the_forms_in_one_line() {
        for s in ["", "x", "-1s", "-1", "30 parsecs", "1e3", "s", "1..5"] {
            let e = parse_duration(s).expect_err(s).to_string();
            assert!(
                e.contains("is not a duration: use a number with a unit"),
                "{s}: {e}"
            );
            let e = parse_seconds(s).expect_err(s).to_string();
            assert!(
                e.contains("use seconds (e.g. 30, 0.5) or a number"),
                "{s}: {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn display_reads_back() {
        let d = HumanDuration(Duration::from_millis(1500));
        assert_eq!(d.to_string(), "1s 500ms");
        assert_eq!(d.to_string().parse::<HumanDuration>(), Ok(d));
        assert_eq!(HumanDuration(Duration::ZERO).to_string(), "0s");
    }
}
