//! Byte sizes: a number of bytes, or a number with a binary unit.
//!
//! The grammar, for flags and config keys alike:
//!
//! * a plain whole number is bytes: `4294967296`, `0`;
//! * a whole or decimal number followed, with at most one space, by `K`,
//!   `M`, `G` or `T`, optionally followed by `i` and/or `B`, in any case:
//!   `4G`, `1.5G`, `512MiB`, `2 GB`, `1t`;
//! * every unit is binary, as systemd and `free` read them: `K` = `KiB` =
//!   `KB` = 2^10 bytes, `M` = 2^20, `G` = 2^30, `T` = 2^40. `GB` is GiB too:
//!   GPU and kernel memory sizes are binary, and one meaning for the letters
//!   is what keeps "40GB" from being two sizes (it was 10^9 bytes in the
//!   simulator and 2^30 in prescientd's config before this crate);
//! * a fraction rounds to the nearest byte (`0.1K` = 102) and needs a unit
//!   (`1.5` bytes is refused); exponents, signs and digit separators are
//!   refused.
//!
//! The arithmetic (exact decimal fractions, rounding, overflow) is the
//! parse-size crate's; this module fixes which spellings reach it.

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The accepted forms, for refusal messages ("... is not a size: use ...").
pub const SIZE_FORMS: &str = "bytes, or a number with K, M, G or T (binary: 1G = 1GiB = 1GB = 1024M), e.g. 4294967296, 4G, 1.5G, 512MiB";

/// A size the grammar refuses: the input and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeError {
    input: String,
    overflow: bool,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.overflow {
            write!(f, "{:?} does not fit in 64 bits of bytes", self.input)
        } else {
            write!(f, "{:?} is not a size: use {SIZE_FORMS}", self.input)
        }
    }
}

impl std::error::Error for SizeError {}

/// Parses a size in the grammar of this module's doc into bytes.
///
/// ```
/// use prescient_units::parse_size;
/// assert_eq!(parse_size("1.5G"), Ok(1536 << 20));
/// assert_eq!(parse_size("2GiB"), parse_size("2GB"));
/// assert!(parse_size("-1").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let refuse = |overflow| SizeError {
        input: s.to_string(),
        overflow,
    };
    let t = s.trim();
    if !well_formed(t) {
        return Err(refuse(false));
    }
    parse_size::Config::new()
        .with_binary()
        .parse_size(t)
        .map_err(|e| refuse(e == parse_size::Error::PosOverflow))
}

/// Whether `t` is `DIGITS[.DIGITS][ ]UNIT` with the units of the grammar.
fn well_formed(t: &str) -> bool {
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(num_end);
    let (whole, frac) = match num.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (num, None),
    };
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || frac.is_some_and(|f| !digits(f)) {
        return false;
    }
    let unit = unit.strip_prefix(' ').unwrap_or(unit).to_ascii_uppercase();
    let scaled = match unit.as_bytes() {
        [] if num_end == t.len() => false,
        [b'B'] => false,
        [p, rest @ ..] if b"KMGT".contains(p) => matches!(rest, [] | b"B" | b"I" | b"IB"),
        _ => return false,
    };
    // A fraction of a byte is no size: fractions need a unit.
    scaled || frac.is_none()
}

/// A number of bytes, read with [`parse_size`] and shown in the largest exact binary unit.
///
/// `FromStr` makes it a clap value (`--budget 1.5G`); serde reads it from an
/// integer (bytes) or a string in the grammar, and writes it as an integer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = SizeError;
    fn from_str(s: &str) -> Result<Self, SizeError> {
        parse_size(s).map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    /// Writes `4GiB`, `1536MiB`, `1000`: exact, and read back by [`parse_size`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
        let b = self.0;
        match UNITS
            .iter()
            .find(|(shift, _)| b != 0 && b.is_multiple_of(1u64 << shift))
        {
            Some((shift, unit)) => write!(f, "{}{unit}", b >> shift),
            None => write!(f, "{b}"),
        }
    }
}

impl From<ByteSize> for u64 {
    fn from(b: ByteSize) -> u64 {
        b.0
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ByteSizeVisitor)
    }
}

/// Takes an integer (bytes) or a string in the grammar.
struct ByteSizeVisitor;

impl Visitor<'_> for ByteSizeVisitor {
    type Value = ByteSize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a size: {SIZE_FORMS} (write units in a string)")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
        Ok(ByteSize(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
        u64::try_from(v)
            .map(ByteSize)
            .map_err(|_| E::custom(format!("{v} is not a size: use {SIZE_FORMS}")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
        parse_size(v).map(ByteSize).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_size_in_every_spelling() {
        let g15 = 1536u64 << 20;
        for s in [
            "1.5G",
            "1536M",
            "1.5GiB",
            "1.5GB",
            "1.5 G",
            "1.5g",
            "1610612736",
            "1572864K",
        ] {
            assert_eq!(parse_size(s), Ok(g15), "{s}");
        }
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("40GB"), Ok(40 << 30));
        assert_eq!(parse_size("4Gi"), Ok(4 << 30));
        assert_eq!(parse_size("7B"), Ok(7));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size(" 4G "), Ok(4 << 30));
        assert_eq!(parse_size("0.1K"), Ok(102));
    }

    #[test]
    fn odd_forms_are_refused() {
        for s in [
            "", " ", "x", "-1", "+1", "1.5", "1.5B", "1e3", "1_000", "1 000", "4X", "4GiBs",
            "4  G", "4P", "4E", ".5G", "5.G", "G", "4 BB", "1,5G", "0x10", "NaN", "inf",
        ] {
            let e = parse_size(s).expect_err(s);
            assert!(
                e.to_string().contains("is not a size: use bytes"),
                "{s}: {e}"
            );
        }
    }

    #[test]
    fn overflow_is_refused_as_such() {
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        for s in ["18446744073709551616", "16777216T", "99999999999T"] {
            let e = parse_size(s).expect_err(s);
            assert!(e.to_string().contains("does not fit"), "{s}: {e}");
        }
    }

    #[test]
    fn display_is_exact_and_in_the_largest_unit() {
        assert_eq!(ByteSize(0).to_string(), "0");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        assert_eq!(ByteSize(4 << 30).to_string(), "4GiB");
        assert_eq!(ByteSize(1536 << 20).to_string(), "1536MiB");
        assert_eq!(ByteSize(3 << 40).to_string(), "3TiB");
        assert_eq!(ByteSize(2048).to_string(), "2KiB");
    }

    #[test]
    fn the_error_message_is_one_line() {
        let e = parse_size("4X").unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.starts_with("\"4X\" is not a size"), "{e}");
    }
}
