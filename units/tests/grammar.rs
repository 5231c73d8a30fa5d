//! Property tests of the size and duration grammars, and the config helper through TOML.

use prescient_units::{parse_duration, parse_seconds, parse_size, ByteSize, HumanDuration};
use proptest::prelude::*;
use serde::Deserialize;
use std::time::Duration;

/// Spellings of each binary unit, with its shift.
const UNITS: &[(&str, u32)] = &[
    ("K", 10),
    ("k", 10),
    ("KB", 10),
    ("KiB", 10),
    ("kib", 10),
    ("M", 20),
    ("MB", 20),
    ("MiB", 20),
    ("Mi", 20),
    ("G", 30),
    ("g", 30),
    ("GB", 30),
    ("GiB", 30),
    ("T", 40),
    ("TB", 40),
    ("TiB", 40),
];

proptest! {
    #[test]
    fn display_reads_back(b in any::<u64>()) {
        prop_assert_eq!(parse_size(&ByteSize(b).to_string()), Ok(b));
    }

    #[test]
    fn whole_numbers_with_any_unit_spelling(n in 0u64..(1 << 23), u in 0..UNITS.len(), space in any::<bool>()) {
        let (unit, shift) = UNITS[u];
        let s = format!("{n}{}{unit}", if space { " " } else { "" });
        prop_assert_eq!(parse_size(&s), Ok(n << shift));
    }

    /// A decimal with a unit is the exact product, rounded to the nearest byte.
    #[test]
    fn decimals_round_to_the_nearest_byte(whole in 0u64..100_000, frac in 0u64..1000, u in 0..UNITS.len()) {
        let (unit, shift) = UNITS[u];
        let s = format!("{whole}.{frac:03}{unit}");
        let exact_x1000 = ((whole * 1000 + frac) as u128) << shift;
        let rounded = ((exact_x1000 + 500) / 1000) as u64;
        prop_assert_eq!(parse_size(&s), Ok(rounded));
    }

    #[test]
    fn plain_numbers_are_bytes(n in any::<u64>()) {
        prop_assert_eq!(parse_size(&n.to_string()), Ok(n));
    }

    /// Nothing panics, and whatever is accepted is digits, one dot, one space and a unit.
    #[test]
    fn arbitrary_text_is_accepted_only_in_the_grammar(s in "[0-9 .,+eEa-zA-Z_-]{0,12}") {
        if parse_size(&s).is_ok() {
            let t = s.trim();
            let allowed = |c: char| c.is_ascii_digit() || ".KMGTBIkmgtbi ".contains(c);
            prop_assert!(t.chars().all(allowed), "{:?} accepted", s);
            prop_assert!(t.matches('.').count() <= 1 && t.matches(' ').count() <= 1, "{:?} accepted", s);
        }
        let _ = parse_duration(&s);
        let _ = parse_seconds(&s);
    }

    #[test]
    fn durations_display_and_read_back(secs in 0u64..10_000_000, nanos in 0u32..1_000_000_000) {
        let d = HumanDuration(Duration::new(secs, nanos));
        prop_assert_eq!(d.to_string().parse::<HumanDuration>(), Ok(d));
    }

    #[test]
    fn plain_seconds_are_seconds(secs in 0u64..10_000_000, millis in 0u64..1000) {
        prop_assert_eq!(parse_seconds(&secs.to_string()), Ok(Duration::from_secs(secs)));
        prop_assert_eq!(
            parse_seconds(&format!("{secs}.{millis:03}")),
            Ok(Duration::from_millis(secs * 1000 + millis))
        );
        prop_assert!(parse_duration(&secs.to_string()).is_err());
    }

    /// The config helper reads an integer and the same size as a string alike.
    #[test]
    fn toml_integer_and_string_agree(n in 0u64..(1 << 20), u in 0..UNITS.len()) {
        let (unit, shift) = UNITS[u];
        let from_str: Key = toml::from_str(&format!("size = \"{n}{unit}\"")).unwrap();
        let from_int: Key = toml::from_str(&format!("size = {}", n << shift)).unwrap();
        prop_assert_eq!(from_str.size, ByteSize(n << shift));
        prop_assert_eq!(from_int.size, ByteSize(n << shift));
    }
}

/// One config key holding a size.
#[derive(Debug, Deserialize)]
struct Key {
    size: ByteSize,
}

#[test]
fn toml_refusals_say_what_a_size_is() {
    for (text, want) in [
        ("size = \"4X\"", "\"4X\" is not a size: use bytes"),
        ("size = -1", "-1 is not a size: use bytes"),
        ("size = 1.5", "expected a size: bytes"),
        ("size = true", "expected a size: bytes"),
    ] {
        let e = toml::from_str::<Key>(text).unwrap_err();
        assert!(e.message().contains(want), "{text}: {}", e.message());
    }
}

#[test]
fn serialized_as_bytes() {
    #[derive(serde::Serialize)]
    struct Out {
        size: ByteSize,
    }
    let t = toml::to_string(&Out {
        size: ByteSize(4 << 30),
    })
    .unwrap();
    assert_eq!(t.trim(), "size = 4294967296");
}
