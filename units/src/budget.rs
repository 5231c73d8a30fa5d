//! Residency budgets per GPU: one size for every GPU, sizes for named
//! GPUs, or both.
//!
//! The grammar, for `prescientd attach --budget`, `prescientctl run
//! --budget`, `prescientctl set --budget` and the config file's
//! `engine.residency_budget` alike:
//!
//! * a size in [`crate::size`]'s grammar is the budget of each GPU:
//!   `40G` (every GPU a process computes on gets 40 GiB);
//! * `GPU=SIZE` gives one GPU its own budget, where GPU is its UUID as
//!   nvidia-smi prints it (`GPU-4f3c...`, `MIG-...`) or its nvidia-smi
//!   index (`1`);
//! * items are separated by commas, at most one bare size, each GPU named
//!   once: `GPU-4f3c...=40G,1=20G`, `30G,1=20G` (GPU 1 gets 20 GiB, every
//!   other GPU 30 GiB).
//!
//! An index is nvidia-smi's (NVML's), never the job's CUDA ordinal: a job's
//! `CUDA_VISIBLE_DEVICES` renumbers its devices, prescientd's view does not
//! change with it. A GPU no item names and no bare size covers has no
//! budget.

use crate::size::{parse_size, SizeError, SIZE_FORMS};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The accepted forms, for refusal messages.
pub const BUDGET_FORMS: &str = "a size for each GPU (40G), GPU=SIZE items for named GPUs (GPU-<uuid>=40G or an nvidia-smi index, 1=20G), or both, separated by commas (30G,1=20G)";

/// A GPU named in a budget.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuKey {
    /// nvidia-smi's UUID, `GPU-...` or `MIG-...`, kept lowercase after the
    /// prefix (nvidia-smi prints lowercase hex; a typed one may not be).
    Uuid(String),
    /// nvidia-smi's (NVML's) index.
    Index(u32),
}

impl fmt::Display for GpuKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuKey::Uuid(u) => f.write_str(u),
            GpuKey::Index(i) => write!(f, "{i}"),
        }
    }
}

/// A budget the grammar refuses: the input and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetError {
    input: String,
    why: String,
}

impl fmt::Display for BudgetError {
    /// Names the input once: a size error already starts with it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let input = format!("{:?}", self.input);
        if self.why.starts_with(&input) {
            f.write_str(&self.why)
        } else {
            write!(f, "{input}: {}", self.why)
        }
    }
}

impl std::error::Error for BudgetError {}

/// Residency budgets: one for each GPU, and GPUs' own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GpuBudget {
    /// The budget of every GPU that has none of its own.
    pub each: Option<u64>,
    /// GPUs' own budgets, in the order written.
    pub gpus: Vec<(GpuKey, u64)>,
}

impl GpuBudget {
    /// One size for every GPU.
    pub fn each(bytes: u64) -> GpuBudget {
        GpuBudget {
            each: Some(bytes),
            gpus: Vec::new(),
        }
    }

    /// The budget of the GPU of nvidia-smi UUID `uuid` and index `index`
    /// (None when unknown): its own by UUID, else by index, else the
    /// each-GPU size.
    pub fn of(&self, uuid: &str, index: Option<u32>) -> Option<u64> {
        let by_uuid = self
            .gpus
            .iter()
            .find(|(k, _)| matches!(k, GpuKey::Uuid(u) if u.eq_ignore_ascii_case(uuid)));
        let by_index = || {
            let i = index?;
            self.gpus.iter().find(|(k, _)| *k == GpuKey::Index(i))
        };
        by_uuid.or_else(by_index).map(|(_, b)| *b).or(self.each)
    }

    /// The each-GPU size in bytes, 0 when there is none (the wire's and
    /// the module's "no budget").
    pub fn each_bytes(&self) -> u64 {
        self.each.unwrap_or(0)
    }

    /// `bytes` for every GPU; 0 is no budget.
    pub fn of_bytes(bytes: u64) -> GpuBudget {
        if bytes == 0 {
            GpuBudget::default()
        } else {
            GpuBudget::each(bytes)
        }
    }

    /// Whether any GPU is named by its index (which needs NVML to match).
    pub fn names_indices(&self) -> bool {
        self.gpus.iter().any(|(k, _)| matches!(k, GpuKey::Index(_)))
    }

    /// Every size written, for the callers' own checks (whole blocks).
    pub fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.each
            .into_iter()
            .chain(self.gpus.iter().map(|(_, b)| *b))
    }

    /// No budget at all.
    pub fn is_empty(&self) -> bool {
        self.each.is_none() && self.gpus.is_empty()
    }
}

/// Parses a GPU key: a UUID with its nvidia-smi prefix, or an index.
fn parse_key(k: &str) -> Result<GpuKey, String> {
    let up = k.to_ascii_uppercase();
    for prefix in ["GPU-", "MIG-"] {
        if let Some(rest) = up.strip_prefix(prefix) {
            // Old MIG names read MIG-GPU-<uuid>/gi/ci: letters there.
            let mig = prefix == "MIG-";
            let ok = !rest.is_empty()
                && rest.bytes().all(|b| {
                    b.is_ascii_hexdigit()
                        || b == b'-'
                        || (mig && (b == b'/' || b.is_ascii_alphanumeric()))
                });
            if !ok {
                return Err(format!(
                    "{k:?} is not a GPU UUID (nvidia-smi -L prints them: GPU-4f3c...)"
                ));
            }
            let rest = if mig {
                k[4..].to_string()
            } else {
                rest.to_ascii_lowercase()
            };
            return Ok(GpuKey::Uuid(format!("{prefix}{rest}")));
        }
    }
    if !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) {
        return k
            .parse()
            .map(GpuKey::Index)
            .map_err(|_| format!("{k:?} is too large for a GPU index"));
    }
    Err(format!(
        "{k:?} names no GPU: use its UUID (GPU-...) or its nvidia-smi index"
    ))
}

/// Parses a budget in the grammar of this module's doc.
///
/// ```
/// use prescient_units::{parse_budget, GpuKey};
/// let b = parse_budget("30G,1=20G").unwrap();
/// assert_eq!(b.each, Some(30 << 30));
/// assert_eq!(b.gpus, vec![(GpuKey::Index(1), 20 << 30)]);
/// assert!(parse_budget("1=2G,1=3G").is_err());
/// ```
pub fn parse_budget(s: &str) -> Result<GpuBudget, BudgetError> {
    let refuse = |why: String| BudgetError {
        input: s.to_string(),
        why,
    };
    let size = |v: &str| parse_size(v).map_err(|e: SizeError| refuse(e.to_string()));
    let mut b = GpuBudget::default();
    if s.trim().is_empty() {
        return Err(refuse(format!("empty: use {BUDGET_FORMS}")));
    }
    for item in s.split(',').map(str::trim) {
        match item.split_once('=') {
            None if b.each.is_some() => {
                return Err(refuse(format!(
                    "two sizes for each GPU ({item:?}): give one, and GPU=SIZE for the others"
                )))
            }
            None => b.each = Some(size(item)?),
            Some((k, v)) => {
                let key = parse_key(k.trim()).map_err(refuse)?;
                if b.gpus.iter().any(|(x, _)| *x == key) {
                    return Err(refuse(format!("GPU {key} named twice")));
                }
                b.gpus.push((key, size(v.trim())?));
            }
        }
    }
    Ok(b)
}

impl FromStr for GpuBudget {
    type Err = BudgetError;
    fn from_str(s: &str) -> Result<Self, BudgetError> {
        parse_budget(s)
    }
}

impl fmt::Display for GpuBudget {
    /// Writes the grammar back (`30GiB,1=20GiB`); no budget is `0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = |b: u64| crate::ByteSize(b).to_string();
        let mut items: Vec<String> = self.each.map(size).into_iter().collect();
        items.extend(self.gpus.iter().map(|(k, b)| format!("{k}={}", size(*b))));
        if items.is_empty() {
            return f.write_str("0");
        }
        f.write_str(&items.join(","))
    }
}

impl Serialize for GpuBudget {
    /// One size for each GPU is an integer, as the config file always had
    /// it; anything else the grammar's string.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self.each, self.gpus.is_empty()) {
            (Some(b), true) => s.serialize_u64(b),
            (None, true) => s.serialize_u64(0),
            _ => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for GpuBudget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(GpuBudgetVisitor)
    }
}

/// Takes an integer (bytes for each GPU) or a string in the grammar.
struct GpuBudgetVisitor;

impl Visitor<'_> for GpuBudgetVisitor {
    type Value = GpuBudget;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a budget: {BUDGET_FORMS}; sizes are {SIZE_FORMS}")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<GpuBudget, E> {
        Ok(if v == 0 {
            GpuBudget::default()
        } else {
            GpuBudget::each(v)
        })
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<GpuBudget, E> {
        u64::try_from(v)
            .map_err(|_| E::custom(format!("{v} is not a size: use {SIZE_FORMS}")))
            .and_then(|v| self.visit_u64(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<GpuBudget, E> {
        let b = parse_budget(v).map_err(E::custom)?;
        // "0" is no budget, as the integer 0 is.
        Ok(if b.each == Some(0) && b.gpus.is_empty() {
            GpuBudget::default()
        } else {
            b
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U0: &str = "GPU-40ece162-0000-1111-2222-333344445555";

    #[test]
    fn each_gpu_named_gpus_or_both() {
        assert_eq!(parse_budget("40G").unwrap(), GpuBudget::each(40 << 30));
        let b = parse_budget(&format!("{U0}=40G, 1=20G")).unwrap();
        assert_eq!(b.each, None);
        assert_eq!(b.of(U0, Some(0)), Some(40 << 30));
        assert_eq!(b.of(&U0.to_uppercase(), None), Some(40 << 30));
        assert_eq!(b.of("GPU-other", Some(1)), Some(20 << 30));
        assert_eq!(b.of("GPU-other", Some(2)), None, "no budget for GPU 2");
        assert_eq!(b.of("GPU-other", None), None);
        let b = parse_budget("30G,1=1.5G").unwrap();
        assert_eq!(b.of("GPU-x", Some(1)), Some(1536 << 20));
        assert_eq!(b.of("GPU-x", Some(0)), Some(30 << 30));
        assert!(b.names_indices());
        // A UUID typed in capitals matches nvidia-smi's lowercase one.
        let b = parse_budget("GPU-ABCDEF=2G").unwrap();
        assert_eq!(b.gpus[0].0, GpuKey::Uuid("GPU-abcdef".into()));
        assert_eq!(b.of("GPU-abcdef", None), Some(2 << 30));
    }

    #[test]
    fn bad_budgets_say_what_is_wrong() {
        for (s, says) in [
            ("", "empty"),
            ("40G,30G", "two sizes"),
            ("1=2G,1=3G", "named twice"),
            ("cuda:1=2G", "names no GPU"),
            ("GPU-=2G", "not a GPU UUID"),
            ("GPU-xyz=2G", "not a GPU UUID"),
            ("1=lots", "is not a size"),
            ("4X", "is not a size"),
            ("99999999999=1G", "too large"),
            ("1=", "is not a size"),
        ] {
            let e = parse_budget(s).expect_err(s).to_string();
            assert!(e.contains(says), "{s}: {e}");
        }
    }

    #[test]
    fn display_reads_back_and_serde_takes_integers_and_strings() {
        for s in ["40GiB", "30GiB,1=20GiB", "GPU-ab12=4GiB,MIG-cd/1=2GiB"] {
            let b = parse_budget(s).unwrap();
            assert_eq!(b.to_string(), s);
            assert_eq!(parse_budget(&b.to_string()).unwrap(), b);
        }
        #[derive(Deserialize, Serialize, PartialEq, Debug)]
        struct C {
            b: GpuBudget,
        }
        let c: C = toml::from_str("b = 4294967296").unwrap();
        assert_eq!(c.b, GpuBudget::each(4 << 30));
        let c: C = toml::from_str("b = \"2G,0=1G\"").unwrap();
        assert_eq!(c.b.of("GPU-x", Some(0)), Some(1 << 30));
        let c: C = toml::from_str("b = 0").unwrap();
        assert!(c.b.is_empty());
        assert!(toml::from_str::<C>("b = -1").is_err());
        let e = toml::from_str::<C>("b = \"1=2X\"").unwrap_err().to_string();
        assert!(e.contains("is not a size"), "{e}");
        // An each-GPU budget stays an integer in the file.
        assert_eq!(
            toml::to_string(&C {
                b: GpuBudget::each(7)
            })
            .unwrap(),
            "b = 7\n"
        );
    }

    #[test]
    fn a_bad_single_size_is_named_once() {
        let e = parse_budget("4X").unwrap_err().to_string();
        assert_eq!(e, parse_size("4X").unwrap_err().to_string());
        let e = parse_budget("1=4X").unwrap_err().to_string();
        assert!(e.starts_with("\"1=4X\": \"4X\" is not a size"), "{e}");
    }
}
