//! What the daemon knows of its GPU, and where each fact came from.
//!
//! The GPU's memory, UUID and model are read from NVML (nvml.rs) when the
//! service starts, so nobody types them in. An operator's config value wins
//! over detection; without either, the module backend enforces no residency
//! budget (it pre-evicts nothing until told the GPU's size) and the
//! user-space backend sizes its ledger from [`FALLBACK_GPU_MEMORY`], the one
//! default every entry point shares.

pub mod nvml;

use prescient_uapi::control::GpuInfo;

pub use nvml::{Device, Nvml, NvmlError};

/// GPU memory assumed when neither the config nor NVML gives it: an 80 GB
/// H100/A100. Only sizes the user-space engine's ledger and window; it
/// limits nothing.
pub const FALLBACK_GPU_MEMORY: u64 = 80 << 30;

/// The library NVML is loaded from (it ships with the NVIDIA driver).
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// The result of detection: the device, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detected {
    Gpu(Device),
    /// No answer; the message says why, in an operator's words.
    None(String),
}

impl Detected {
    /// Asks NVML (loaded from `library`) for GPU `index`.
    pub fn probe(library: &str, index: u32) -> Detected {
        match Nvml::open(library).and_then(|n| n.device(index)) {
            Ok(d) => Detected::Gpu(d),
            Err(e) => Detected::None(e.to_string()),
        }
    }

    /// Asks NVML for the GPU whose UUID is `uuid` (the one UVM attached).
    pub fn probe_uuid(library: &str, uuid: &str) -> Detected {
        match Nvml::open(library).and_then(|n| n.device_by_uuid(uuid)) {
            Ok(d) => Detected::Gpu(d),
            Err(e) => Detected::None(e.to_string()),
        }
    }

    /// The device, when one was found.
    pub fn device(&self) -> Option<&Device> {
        match self {
            Detected::Gpu(d) => Some(d),
            Detected::None(_) => None,
        }
    }

    /// The GPU's memory rounded down to whole 2 MB blocks, when known.
    pub fn memory_bytes(&self) -> Option<u64> {
        self.device()
            .map(|d| d.memory_bytes & !(prescient_core::BLOCK_BYTES - 1))
    }
}

/// A size in force, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sourced {
    pub bytes: u64,
    pub source: String,
}

/// The GPU memory that sizes the user-space engine: the config's
/// `userspace.gpu_memory` when set (non-zero), else NVML's, else the
/// fallback.
pub fn gpu_memory(configured: u64, detected: &Detected) -> Sourced {
    if configured > 0 {
        return Sourced {
            bytes: configured,
            source: "config".into(),
        };
    }
    match (detected.memory_bytes(), detected) {
        (Some(b), _) => Sourced {
            bytes: b,
            source: "detected (NVML)".into(),
        },
        (None, Detected::None(why)) => Sourced {
            bytes: FALLBACK_GPU_MEMORY,
            source: format!("default, not detected: {why}"),
        },
        (None, Detected::Gpu(_)) => unreachable!("a device always has a size"),
    }
}

/// The residency budget the daemon applies: the config's when set, else
/// the GPU's detected size (the module pre-evicts above its watermark of
/// it), else 0, which tells the module it knows no size and must not
/// pre-evict.
pub fn residency_budget(configured: u64, detected: &Detected) -> Sourced {
    if configured > 0 {
        return Sourced {
            bytes: configured,
            source: "config".into(),
        };
    }
    match detected.memory_bytes() {
        Some(b) => Sourced {
            bytes: b,
            source: "detected GPU size (NVML)".into(),
        },
        None => Sourced {
            bytes: 0,
            source: "none: GPU size unknown, no pre-eviction".into(),
        },
    }
}

/// Every GPU NVML sees, by nvidia-smi index; the error says why there
/// are none.
pub fn devices(library: &str) -> Result<Vec<Device>, NvmlError> {
    let n = Nvml::open(library)?;
    (0..n.count()?).map(|i| n.device(i)).collect()
}

/// Every GPU NVML sees, as (UUID, nvidia-smi index) pairs, for budgets
/// that name a GPU by its index; the error says why there are none.
pub fn uuid_indices(library: &str) -> Result<Vec<(String, u32)>, NvmlError> {
    Ok(devices(library)?
        .into_iter()
        .map(|d| (d.uuid, d.index))
        .collect())
}

/// The memory of each GPU (`devices`: NVML's answer), by UUID, rounded
/// down to whole 2 MB blocks: each GPU's engine and ledger are sized from
/// its own GPU, so that a node of mixed GPUs (an 80 GB and a 141 GB one)
/// sizes neither from the other. Empty when the operator gave one size
/// (`configured`, non-zero: `--gpu-memory`, `userspace.gpu_memory`), which
/// then sizes every GPU, or when NVML did not answer (the fallback does).
pub fn memory_by_uuid(
    configured: u64,
    devices: &Result<Vec<Device>, NvmlError>,
) -> Vec<(String, u64)> {
    match devices {
        Ok(d) if configured == 0 => d
            .iter()
            .map(|d| {
                (
                    d.uuid.clone(),
                    d.memory_bytes & !(prescient_core::BLOCK_BYTES - 1),
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Checks a per-GPU budget against the GPUs NVML sees (`gpus`, or why it
/// saw none): every index and UUID it names must be a GPU of this host.
/// Without NVML, UUIDs pass unchecked and an index is refused (nothing
/// tells which GPU it is). The error is the sentence to print after the
/// flag or key.
pub fn check_budget(
    b: &prescient_units::GpuBudget,
    gpus: &Result<Vec<(String, u32)>, NvmlError>,
) -> Result<(), String> {
    use prescient_units::GpuKey;
    for (k, _) in &b.gpus {
        let found = match (k, gpus) {
            (GpuKey::Index(i), Err(e)) => {
                return Err(format!(
                    "GPU index {i} cannot be matched to a GPU: {e}; name the GPU by its UUID (nvidia-smi -L)"
                ))
            }
            (GpuKey::Uuid(_), Err(_)) => true,
            (GpuKey::Index(i), Ok(g)) => g.iter().any(|(_, x)| x == i),
            (GpuKey::Uuid(u), Ok(g)) => g.iter().any(|(x, _)| x.eq_ignore_ascii_case(u)),
        };
        if !found {
            let have: Vec<String> = gpus
                .as_ref()
                .map(|g| g.iter().map(|(u, i)| format!("{i}={u}")).collect())
                .unwrap_or_default();
            return Err(format!(
                "no GPU {k} on this host (NVML sees {})",
                if have.is_empty() {
                    "none".into()
                } else {
                    have.join(", ")
                }
            ));
        }
    }
    Ok(())
}

/// What the control protocol and /metrics say of the GPU.
pub fn info(d: &Device) -> GpuInfo {
    GpuInfo {
        index: d.index,
        uuid: d.uuid.clone(),
        model: d.name.clone(),
        memory_bytes: d.memory_bytes,
    }
}

#[cfg(test)]
mod tests;
