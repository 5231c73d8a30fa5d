//! The simulator's view of one training iteration: kernels in launch order,
//! each with the address ranges it reads and writes and the ranges that die
//! after it. Both trace formats parse into this; the native format is its
//! serialisation.

/// One kernel launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    pub name: String,
    /// What DeepUM's runtime would report: a hash of the name and arguments.
    pub exec_id: u32,
    /// Compute time with every operand resident.
    pub duration_ns: u64,
    pub touches: Vec<Touch>,
    /// Ranges the application declares dead once this kernel is done
    /// (PyTorch's inactive blocks, G10's end of a tensor's lifetime).
    pub dead_after: Vec<Range>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Range {
    pub addr: u64,
    pub len: u64,
}

impl Range {
    pub fn end(&self) -> u64 {
        self.addr + self.len
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touch {
    pub range: Range,
    pub write: bool,
}

/// One iteration of a training loop; the simulator repeats it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub name: String,
    pub kernels: Vec<Kernel>,
}

impl Workload {
    pub fn ideal_ns(&self) -> u64 {
        self.kernels.iter().map(|k| k.duration_ns).sum()
    }

    /// Highest address touched, exclusive.
    pub fn address_limit(&self) -> u64 {
        self.kernels
            .iter()
            .flat_map(|k| k.touches.iter().map(|t| t.range.end()))
            .max()
            .unwrap_or(0)
    }
}

/// FNV-1a, for execution ids: stable across runs and platforms.
pub fn fnv1a(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// DeepUM's execution id: the kernel name and its arguments (here, the
/// operand ranges), hashed. The same launch in the next iteration gets the
/// same id; with a caching allocator two launches of one kernel on the same
/// buffers share one id, as they do under DeepUM.
pub fn exec_id(name: &str, touches: &[Touch]) -> u32 {
    let mut h = fnv1a(name.as_bytes(), FNV_OFFSET);
    for t in touches {
        h = fnv1a(&t.range.addr.to_le_bytes(), h);
        h = fnv1a(&t.range.len.to_le_bytes(), h);
        h = fnv1a(&[t.write as u8], h);
    }
    // Keep clear of the engine's "no execution id" (u32::MAX).
    ((h >> 32) as u32 ^ h as u32) & 0x7fff_ffff
}
