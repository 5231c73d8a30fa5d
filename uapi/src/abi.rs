// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
//! Prescient's ioctl ABI (shared verbatim by user space and `prescient.ko`).
//!
//! Rules of this file: no crate-level attributes, no unsafe, no allocation;
//! it names the engine only through `crate::pcore`. Structs are `#[repr(C)]`
//! with u32/u64 fields only and explicit padding, so their layout is the same
//! for every compiler; `include/prescient.h` declares them for C and a test
//! compares the two. Requests are decoded from bytes (`from_bytes`) and
//! responses encoded to bytes (`to_bytes`) without unsafe code: the kernel
//! copies the user's bytes, decodes, validates, and never casts pointers.

use crate::pcore::{Mode, ParamError, Params, BLOCK_BYTES};

/// Version of this ABI. Bump on any incompatible change.
pub const ABI_VERSION: u32 = 4;
/// ioctl type ("magic") byte.
pub const IOC_MAGIC: u8 = b'P';
/// Most address spaces attached at once (and entries in [`Stats::spaces`]).
pub const MAX_SPACES: usize = 8;
/// Upper bound of [`ParamsAbi::inflight_limit`].
pub const MAX_INFLIGHT: u32 = 1024;
/// Highest user address a range may reach (57-bit user space, page aligned).
pub const USER_ADDR_END: u64 = 1 << 56;
/// Alignment that ranges given to MARK_DEAD / MARK_ALIVE must have.
pub const RANGE_ALIGN: u64 = 4096;
/// Longest range MARK_DEAD / MARK_ALIVE accept (1 TiB: bounds the work per call).
pub const MAX_RANGE_LEN: u64 = 1 << 40;

// Linux's asm-generic ioctl encoding (x86, arm64, riscv).
const IOC_NRBITS: u32 = 8;
const IOC_TYPEBITS: u32 = 8;
const IOC_SIZEBITS: u32 = 14;
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;
/// No data transferred.
pub const IOC_NONE: u32 = 0;
/// User space writes, the kernel reads.
pub const IOC_WRITE: u32 = 1;
/// The kernel writes, user space reads.
pub const IOC_READ: u32 = 2;

/// `_IOC(dir, type, nr, size)`.
pub const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << IOC_DIRSHIFT)
        | ((ty as u32) << IOC_TYPESHIFT)
        | ((nr as u32) << IOC_NRSHIFT)
        | ((size as u32) << IOC_SIZESHIFT)
}
/// `_IOC_DIR(cmd)`.
pub const fn ioc_dir(cmd: u32) -> u32 {
    cmd >> IOC_DIRSHIFT
}
/// `_IOC_TYPE(cmd)`.
pub const fn ioc_type(cmd: u32) -> u8 {
    (cmd >> IOC_TYPESHIFT) as u8
}
/// `_IOC_NR(cmd)`.
pub const fn ioc_nr(cmd: u32) -> u8 {
    (cmd >> IOC_NRSHIFT) as u8
}
/// `_IOC_SIZE(cmd)`.
pub const fn ioc_size(cmd: u32) -> usize {
    ((cmd >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1)) as usize
}

/// Errors of the ABI layer, each with the errno the kernel returns for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Not one of Prescient's ioctl numbers (wrong magic, number, direction
    /// or size): ENOTTY, as for any unknown ioctl.
    UnknownCommand(u32),
    /// A buffer of the wrong length was handed to a decoder: EINVAL.
    BadLength { want: usize, got: usize },
    /// The engine rejected a parameter (its own validation): EINVAL.
    Param(ParamError),
    /// A field outside what the ABI accepts: EINVAL.
    Field { field: Field, value: u64 },
    /// A reserved field is not zero: EINVAL.
    Reserved { field: Field, value: u64 },
    /// A range that is empty, unaligned, overflowing or beyond user space.
    BadRange { addr: u64, len: u64 },
}

/// Named fields, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    InflightLimit,
    PreEvictWatermarkPct,
    ResidencyBudgetBytes,
    Enabled,
    Mode,
    Kind,
    Id,
    Handle,
    Uuid,
    Fd,
    Reserved,
}

impl Field {
    /// The name as in the C header.
    pub fn name(self) -> &'static str {
        match self {
            Field::InflightLimit => "inflight_limit",
            Field::PreEvictWatermarkPct => "pre_evict_watermark_pct",
            Field::ResidencyBudgetBytes => "residency_budget_bytes",
            Field::Enabled => "enabled",
            Field::Mode => "mode",
            Field::Kind => "kind",
            Field::Id => "id",
            Field::Handle => "handle",
            Field::Uuid => "uuid",
            Field::Fd => "fd",
            Field::Reserved => "reserved",
        }
    }
}

/// errno values (Linux, all architectures this ABI targets).
pub mod errno {
    pub const EPERM: i32 = 1;
    pub const ESRCH: i32 = 3;
    pub const EBADF: i32 = 9;
    pub const ENOMEM: i32 = 12;
    pub const EFAULT: i32 = 14;
    pub const EBUSY: i32 = 16;
    pub const EEXIST: i32 = 17;
    pub const ENODEV: i32 = 19;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const ENOTTY: i32 = 25;
    pub const ENOENT: i32 = 2;
}

impl Error {
    /// The positive errno for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::UnknownCommand(_) => errno::ENOTTY,
            _ => errno::EINVAL,
        }
    }
}

impl From<ParamError> for Error {
    fn from(e: ParamError) -> Self {
        Error::Param(e)
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::UnknownCommand(c) => write!(f, "unknown ioctl {c:#x}"),
            Error::BadLength { want, got } => write!(f, "argument is {got} bytes, want {want}"),
            Error::Param(e) => write!(f, "{e}"),
            Error::Field { field, value } => {
                write!(f, "field {} = {value} is out of range", field.name())
            }
            Error::Reserved { field, value } => {
                write!(f, "reserved field {} = {value} must be 0", field.name())
            }
            Error::BadRange { addr, len } => write!(
                f,
                "range {addr:#x}+{len:#x} must be non-empty, 4 KiB aligned and inside user space"
            ),
        }
    }
}

/// Reads the `i`-th native-endian u32 / u64 at byte offset `off`.
fn rd32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(a)
}
fn rd64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}
fn wr32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}
fn wr64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}
fn check_len(want: usize, got: usize) -> Result<(), Error> {
    if want == got {
        Ok(())
    } else {
        Err(Error::BadLength { want, got })
    }
}

/// Declares a `#[repr(C)]` struct of u32/u64 fields with byte codecs.
/// Field offsets come from `offset_of!`, so the codec follows the layout.
macro_rules! abi_struct {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ident,)* }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name { $($(#[$fm])* pub $f: $t,)* }
        impl $name {
            /// Size in bytes (the ioctl's size field).
            pub const SIZE: usize = core::mem::size_of::<$name>();
            /// Decodes from exactly [`Self::SIZE`] bytes (no validation).
            pub fn from_bytes(b: &[u8]) -> Result<Self, Error> {
                check_len(Self::SIZE, b.len())?;
                Ok(Self { $($f: abi_struct!(@rd $t, b, core::mem::offset_of!($name, $f)),)* })
            }
            /// Encodes into exactly [`Self::SIZE`] bytes.
            pub fn to_bytes(&self) -> [u8; core::mem::size_of::<$name>()] {
                let mut b = [0u8; core::mem::size_of::<$name>()];
                $(abi_struct!(@wr $t, &mut b, core::mem::offset_of!($name, $f), self.$f);)*
                b
            }
            /// (name, offset, size) of every field, for the header check.
            pub const FIELDS: &'static [(&'static str, usize, usize)] = &[
                $((stringify!($f), core::mem::offset_of!($name, $f), core::mem::size_of::<$t>()),)*
            ];
        }
    };
    (@rd u32, $b:expr, $o:expr) => { rd32($b, $o) };
    (@rd u64, $b:expr, $o:expr) => { rd64($b, $o) };
    (@wr u32, $b:expr, $o:expr, $v:expr) => { wr32($b, $o, $v) };
    (@wr u64, $b:expr, $o:expr, $v:expr) => { wr64($b, $o, $v) };
}

/// `flags` of [`Version`]: bound to nvidia-uvm.
pub const VERSION_FLAG_BOUND: u32 = 1;
/// `flags` of [`Version`]: prefetching enabled.
pub const VERSION_FLAG_ENABLED: u32 = 2;
/// `flags` of [`Version`]: the GPU's size is known (the `gpu_blocks`
/// parameter or a SET_PARAMS residency budget); without it the module
/// neither prefetches nor pre-evicts.
pub const VERSION_FLAG_GPU_SIZE_KNOWN: u32 = 4;
/// `flags` of [`Version`]: the bound driver branch has uvm_api_discard (580);
/// without it dead blocks are migrated to the CPU instead.
pub const VERSION_FLAG_DISCARD: u32 = 8;

abi_struct! {
    /// GET_VERSION response.
    pub struct Version {
        pub abi_version: u32,
        /// `VERSION_FLAG_*`.
        pub flags: u32,
        /// [`MAX_SPACES`].
        pub max_spaces: u32,
        pub reserved0: u32,
        /// nvidia-uvm version bound to: major << 32 | minor << 16 | patch; 0 if none.
        pub driver_version: u64,
    }
}

abi_struct! {
    /// GET_PARAMS response and SET_PARAMS request.
    pub struct ParamsAbi {
        /// Rows per correlation table (power of two).
        pub rows: u32,
        /// Ways per row.
        pub assoc: u32,
        /// Successors per entry.
        pub succs: u32,
        /// Kernels predicted ahead.
        pub lookahead: u32,
        /// Most migrations in flight at once, 1..=MAX_INFLIGHT.
        pub inflight_limit: u32,
        /// Pre-evict when resident bytes exceed this percentage of the budget, 1..=100.
        pub pre_evict_watermark_pct: u32,
        /// GPU-resident bytes Prescient keeps below (multiple of 2 MiB); 0 = the GPU's size.
        pub residency_budget_bytes: u64,
        /// 0 = observe only, 1 = prefetch and pre-evict.
        pub enabled: u32,
        /// [`MODE_TRANSPARENT`] (unmodified jobs) or [`MODE_EXEC_ID`] (a
        /// runtime reports execution ids with SET_EXEC_ID, DeepUM's design).
        pub mode: u32,
        pub reserved1: u64,
    }
}

/// [`ParamsAbi::mode`]: one global table learnt from faults alone.
pub const MODE_TRANSPARENT: u32 = 0;
/// [`ParamsAbi::mode`]: one table per execution id (SET_EXEC_ID before each kernel).
pub const MODE_EXEC_ID: u32 = 1;

/// The [`ParamsAbi::mode`] value of an engine mode: the one mapping from
/// the engine's mode to the ABI's.
pub const fn mode_to_abi(mode: Mode) -> u32 {
    match mode {
        Mode::Transparent => MODE_TRANSPARENT,
        Mode::ExecId => MODE_EXEC_ID,
    }
}

/// The engine mode of a [`ParamsAbi::mode`] value; `None` for a value the
/// ABI does not define.
pub const fn mode_from_abi(mode: u32) -> Option<Mode> {
    match mode {
        MODE_TRANSPARENT => Some(Mode::Transparent),
        MODE_EXEC_ID => Some(Mode::ExecId),
        _ => None,
    }
}
/// Execution-id mode: block tables in the pool.
pub const EXEC_MODE_TABLES: u32 = 2048;
/// Execution-id mode: execution ids the id table holds.
pub const EXEC_MODE_IDS: u32 = 4096;
/// Execution-id mode: records per execution id.
pub const EXEC_MODE_RECORDS: u32 = 4;

impl ParamsAbi {
    /// Checks the fields that are the ABI's own and builds engine parameters
    /// on top of `base` (which supplies what the ABI does not expose); the
    /// engine's fields are checked by `Params::validate`, the one place of
    /// truth.
    pub fn to_engine(&self, base: &Params) -> Result<Params, Error> {
        if self.inflight_limit == 0 || self.inflight_limit > MAX_INFLIGHT {
            return Err(Error::Field {
                field: Field::InflightLimit,
                value: self.inflight_limit as u64,
            });
        }
        if self.pre_evict_watermark_pct == 0 || self.pre_evict_watermark_pct > 100 {
            return Err(Error::Field {
                field: Field::PreEvictWatermarkPct,
                value: self.pre_evict_watermark_pct as u64,
            });
        }
        if self.enabled > 1 {
            return Err(Error::Field {
                field: Field::Enabled,
                value: self.enabled as u64,
            });
        }
        let Some(mode) = mode_from_abi(self.mode) else {
            return Err(Error::Field {
                field: Field::Mode,
                value: self.mode as u64,
            });
        };
        if self.reserved1 != 0 {
            return Err(Error::Reserved {
                field: Field::Reserved,
                value: self.reserved1,
            });
        }
        let budget = self.residency_budget_bytes;
        let max_budget = Params::MAX_RESIDENT_BLOCKS as u64 * BLOCK_BYTES;
        if !budget.is_multiple_of(BLOCK_BYTES) || budget > max_budget {
            return Err(Error::Field {
                field: Field::ResidencyBudgetBytes,
                value: budget,
            });
        }
        let (max_tables, exec_ids, exec_records) = match mode {
            Mode::ExecId => (EXEC_MODE_TABLES, EXEC_MODE_IDS, EXEC_MODE_RECORDS),
            Mode::Transparent => (1, 8, 1),
        };
        let p = Params {
            rows: self.rows,
            assoc: self.assoc,
            succs: self.succs,
            lookahead: self.lookahead,
            mode,
            max_tables,
            exec_ids,
            exec_records,
            ..*base
        };
        p.validate()?;
        Ok(p)
    }

    /// The ABI view of engine parameters plus the module's own settings.
    pub fn from_engine(
        p: &Params,
        inflight_limit: u32,
        watermark_pct: u32,
        budget: u64,
        enabled: bool,
    ) -> Self {
        ParamsAbi {
            rows: p.rows,
            assoc: p.assoc,
            succs: p.succs,
            lookahead: p.lookahead,
            inflight_limit,
            pre_evict_watermark_pct: watermark_pct,
            residency_budget_bytes: budget,
            enabled: enabled as u32,
            mode: mode_to_abi(p.mode),
            reserved1: 0,
        }
    }

    /// Decodes and validates a SET_PARAMS argument in one step.
    pub fn decode_valid(b: &[u8], base: &Params) -> Result<(Self, Params), Error> {
        let a = Self::from_bytes(b)?;
        let p = a.to_engine(base)?;
        Ok((a, p))
    }
}

/// The engine parameters the module starts from: transparent mode (one
/// global table, unmodified jobs), small tables, a ledger as large as
/// `gpu_blocks` (the GPU's memory in 2 MB blocks).
pub fn kernel_default_params(gpu_blocks: u32) -> Params {
    let resident = gpu_blocks.clamp(1, Params::MAX_RESIDENT_BLOCKS);
    Params {
        rows: 512,
        assoc: 2,
        succs: 4,
        lookahead: 4,
        max_tables: 1,
        exec_ids: 8,
        exec_records: 1,
        max_resident_blocks: resident,
        window_blocks: 256,
        free_min: resident / 40,
        free_max: resident / 2,
        mode: Mode::Transparent,
    }
}

abi_struct! {
    /// One attached address space in [`Stats`].
    pub struct SpaceStats {
        /// Handle returned by ATTACH; 0 = unused entry.
        pub handle: u64,
        /// Process id that owned the fd when attached.
        pub pid: u64,
        pub faults: u64,
        pub prefetched: u64,
        pub resident_blocks: u64,
        pub pre_evictions: u64,
        pub discards: u64,
        pub migrate_errors: u64,
        /// `GPU_*`: the fallback destination (SET_GPU or the module's
        /// `gpu_uuid` parameter), for blocks no GPU fault named.
        pub gpu: u64,
        /// GPUs whose faults the module attributed in this space (each
        /// block's prefetches go to the GPU that last faulted on it).
        pub fault_gpus: u64,
        /// `EXEC_PAGE_*`: whether an execution-id page is registered
        /// (SET_EXEC_PAGE); while one is, the space's engine runs in
        /// execution-id mode.
        pub exec_page: u64,
        /// Execution ids read from the page and fed to the engine (a slot's
        /// value changed to a valid id).
        pub exec_ids: u64,
        /// Faults of the space that the page attributed to an id.
        pub exec_faults: u64,
        /// Blocks the module had discarded that MARK_ALIVE brought back
        /// to the GPU before it returned (UVM_MIGRATE of discarded pages:
        /// no copy; ABI 4).
        pub populated: u64,
    }
}

/// [`SpaceStats::exec_page`]: no execution-id page.
pub const EXEC_PAGE_NONE: u64 = 0;
/// [`SpaceStats::exec_page`]: a page is registered and read at each fault.
pub const EXEC_PAGE_SET: u64 = 1;

/// [`SpaceStats::gpu`]: no GPU UUID given (SET_GPU): no prefetch.
pub const GPU_UNKNOWN: u64 = 0;
/// [`SpaceStats::gpu`]: prefetches go to the UUID SET_GPU gave.
pub const GPU_SET: u64 = 1;
/// [`SpaceStats::gpu`]: the driver refused that UUID (NV_ERR_INVALID_DEVICE:
/// not a GPU of this address space): no prefetch until SET_GPU again.
pub const GPU_REJECTED: u64 = 2;

abi_struct! {
    /// GET_STATS response, without the per-space array (see [`Stats`]).
    pub struct StatsHead {
        pub faults_seen: u64,
        pub blocks_prefetched: u64,
        /// Prefetched blocks that were used (faulted on or hit) before leaving the GPU.
        pub prefetches_used: u64,
        /// Faults on a block whose prefetch was still in flight.
        pub late_prefetches: u64,
        pub pre_evictions: u64,
        pub discards: u64,
        pub table_bytes: u64,
        /// Fault records dropped because the ring was full.
        pub queue_drops: u64,
        pub inflight: u64,
        pub migrate_errors: u64,
        /// CPU faults on managed memory (counted only: the engine predicts
        /// the GPU's faults).
        pub cpu_faults: u64,
        /// GPU faults of address spaces nobody attached (not queued).
        pub unattached_faults: u64,
        /// Discarded blocks MARK_ALIVE brought back to the GPU (ABI 4).
        pub populated: u64,
        pub n_spaces: u32,
        /// Execution-id pages the module holds pinned now (one per space
        /// with SET_EXEC_PAGE at most; 0 once every space is gone).
        pub exec_pages: u32,
    }
}

/// GET_STATS response: the head and [`MAX_SPACES`] space entries.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub head: StatsHead,
    pub spaces: [SpaceStats; MAX_SPACES],
}

impl Stats {
    pub const SIZE: usize = core::mem::size_of::<Stats>();
    /// Encodes into exactly [`Self::SIZE`] bytes.
    pub fn to_bytes(&self) -> [u8; core::mem::size_of::<Stats>()] {
        let mut b = [0u8; core::mem::size_of::<Stats>()];
        b[..StatsHead::SIZE].copy_from_slice(&self.head.to_bytes());
        for (i, s) in self.spaces.iter().enumerate() {
            let o = core::mem::offset_of!(Stats, spaces) + i * SpaceStats::SIZE;
            b[o..o + SpaceStats::SIZE].copy_from_slice(&s.to_bytes());
        }
        b
    }
    /// Decodes from exactly [`Self::SIZE`] bytes.
    pub fn from_bytes(b: &[u8]) -> Result<Self, Error> {
        check_len(Self::SIZE, b.len())?;
        let mut s = Stats {
            head: StatsHead::from_bytes(&b[..StatsHead::SIZE])?,
            ..Stats::default()
        };
        for (i, e) in s.spaces.iter_mut().enumerate() {
            let o = core::mem::offset_of!(Stats, spaces) + i * SpaceStats::SIZE;
            *e = SpaceStats::from_bytes(&b[o..o + SpaceStats::SIZE])?;
        }
        Ok(s)
    }
}

/// [`Target::kind`]: `id` is a file descriptor of /dev/nvidia-uvm in the caller.
pub const TARGET_FD: u32 = 0;
/// [`Target::kind`]: `id` is a process id; its VA-space fd is found.
pub const TARGET_PID: u32 = 1;
/// [`Target::kind`]: `handle` names an attached space (DETACH only).
pub const TARGET_HANDLE: u32 = 2;

abi_struct! {
    /// ATTACH (in: kind, id; out: handle) and DETACH (in) argument.
    pub struct Target {
        pub kind: u32,
        pub id: u32,
        pub handle: u64,
    }
}

impl Target {
    /// Validates an ATTACH request.
    pub fn check_attach(&self) -> Result<(), Error> {
        match self.kind {
            TARGET_FD | TARGET_PID => {}
            k => {
                return Err(Error::Field {
                    field: Field::Kind,
                    value: k as u64,
                })
            }
        }
        if self.kind == TARGET_PID && (self.id == 0 || self.id > i32::MAX as u32) {
            return Err(Error::Field {
                field: Field::Id,
                value: self.id as u64,
            });
        }
        if self.kind == TARGET_FD && self.id > i32::MAX as u32 {
            return Err(Error::Field {
                field: Field::Id,
                value: self.id as u64,
            });
        }
        if self.handle != 0 {
            return Err(Error::Reserved {
                field: Field::Handle,
                value: self.handle,
            });
        }
        Ok(())
    }
    /// Validates a DETACH request.
    pub fn check_detach(&self) -> Result<(), Error> {
        match self.kind {
            TARGET_HANDLE if self.handle != 0 => Ok(()),
            TARGET_HANDLE => Err(Error::Field {
                field: Field::Handle,
                value: 0,
            }),
            _ => {
                let mut t = *self;
                t.handle = 0;
                t.check_attach()
            }
        }
    }
}

abi_struct! {
    /// SET_EXEC_ID argument.
    pub struct ExecIdAbi {
        /// Attached space (ATTACH's handle).
        pub handle: u64,
        pub exec_id: u32,
        pub reserved0: u32,
    }
}

impl ExecIdAbi {
    pub fn check(&self) -> Result<(), Error> {
        if self.handle == 0 {
            return Err(Error::Field {
                field: Field::Handle,
                value: 0,
            });
        }
        if self.reserved0 != 0 {
            return Err(Error::Reserved {
                field: Field::Reserved,
                value: self.reserved0 as u64,
            });
        }
        Ok(())
    }
}

abi_struct! {
    /// MARK_DEAD / MARK_ALIVE argument.
    pub struct RangeAbi {
        /// Attached space (ATTACH's handle).
        pub handle: u64,
        pub addr: u64,
        pub len: u64,
        /// `MARK_*` bits (ABI 4); others are refused.
        pub flags: u64,
    }
}

/// [`RangeAbi::flags`], MARK_ALIVE: the blocks are alive again but nobody
/// is about to use them (a revocation: the connection that marked them
/// dead has closed), so the module does not populate the ones it
/// discarded; they come back when used, or at the next MARK_ALIVE.
pub const MARK_NO_POPULATE: u64 = 1;

impl RangeAbi {
    /// Non-empty, at most [`MAX_RANGE_LEN`], [`RANGE_ALIGN`]-aligned, not
    /// overflowing, inside user space; no flag but [`MARK_NO_POPULATE`].
    pub fn check(&self) -> Result<(), Error> {
        if self.handle == 0 {
            return Err(Error::Field {
                field: Field::Handle,
                value: 0,
            });
        }
        if self.flags & !MARK_NO_POPULATE != 0 {
            return Err(Error::Reserved {
                field: Field::Reserved,
                value: self.flags,
            });
        }
        let bad = Error::BadRange {
            addr: self.addr,
            len: self.len,
        };
        if self.len == 0
            || self.len > MAX_RANGE_LEN
            || !self.addr.is_multiple_of(RANGE_ALIGN)
            || !self.len.is_multiple_of(RANGE_ALIGN)
        {
            return Err(bad);
        }
        match self.addr.checked_add(self.len) {
            Some(end) if end <= USER_ADDR_END => Ok(()),
            _ => Err(bad),
        }
    }
    /// The 2 MB blocks wholly inside the range (dead-marking rounds inward).
    pub fn whole_blocks(&self) -> core::ops::Range<u64> {
        let first = self.addr.div_ceil(BLOCK_BYTES);
        let last = self.addr.saturating_add(self.len) / BLOCK_BYTES;
        if first >= last {
            0..0
        } else {
            first..last
        }
    }
    /// Every 2 MB block the range touches (alive-marking rounds outward: a
    /// block part of which is live again must not stay dead).
    pub fn touched_blocks(&self) -> core::ops::Range<u64> {
        let first = self.addr / BLOCK_BYTES;
        let last = self.addr.saturating_add(self.len).div_ceil(BLOCK_BYTES);
        if self.len == 0 {
            0..0
        } else {
            first..last
        }
    }
}

abi_struct! {
    /// SET_GPU argument: the GPU that prefetches of an attached space go to,
    /// as the driver names it (its processor UUID, 16 bytes: bytes 0-7 in
    /// `uuid_lo`, 8-15 in `uuid_hi`, each little-endian).
    pub struct GpuAbi {
        /// Attached space (ATTACH's handle).
        pub handle: u64,
        pub uuid_lo: u64,
        pub uuid_hi: u64,
    }
}

/// The CPU's processor UUID in UVM_MIGRATE_PARAMS (not a GPU).
pub const UUID_CPU: [u8; 16] = [
    0xa6, 0x5e, 0x0f, 0x4e, 0xd7, 0xd4, 0x7b, 0xa2, 0x50, 0x47, 0x41, 0x2c, 0x14, 0x2a, 0x77, 0x73,
];

impl GpuAbi {
    /// The argument for `uuid`.
    pub fn new(handle: u64, uuid: [u8; 16]) -> Self {
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        lo.copy_from_slice(&uuid[..8]);
        hi.copy_from_slice(&uuid[8..]);
        GpuAbi {
            handle,
            uuid_lo: u64::from_le_bytes(lo),
            uuid_hi: u64::from_le_bytes(hi),
        }
    }
    /// The UUID's 16 bytes.
    pub fn uuid(&self) -> [u8; 16] {
        let mut u = [0u8; 16];
        u[..8].copy_from_slice(&self.uuid_lo.to_le_bytes());
        u[8..].copy_from_slice(&self.uuid_hi.to_le_bytes());
        u
    }
    /// A handle, and a UUID that is neither all zero nor the CPU's.
    pub fn check(&self) -> Result<(), Error> {
        if self.handle == 0 {
            return Err(Error::Field {
                field: Field::Handle,
                value: 0,
            });
        }
        let u = self.uuid();
        if u == [0; 16] || u == UUID_CPU {
            return Err(Error::Field {
                field: Field::Uuid,
                value: self.uuid_lo,
            });
        }
        Ok(())
    }
}

abi_struct! {
    /// SET_EXEC_PAGE argument: the execution-id page (uapi's `execpage`
    /// format, a memfd the runtime writes) of an attached space, as a file
    /// descriptor of the caller.
    pub struct ExecPageAbi {
        /// Attached space (ATTACH's handle).
        pub handle: u64,
        /// The caller's descriptor of the page's memfd.
        pub fd: u32,
        /// Must be 0.
        pub flags: u32,
    }
}

impl ExecPageAbi {
    /// A handle, a descriptor within i32, no flags.
    pub fn check(&self) -> Result<(), Error> {
        if self.handle == 0 {
            return Err(Error::Field {
                field: Field::Handle,
                value: 0,
            });
        }
        if self.fd > i32::MAX as u32 {
            return Err(Error::Field {
                field: Field::Fd,
                value: self.fd as u64,
            });
        }
        if self.flags != 0 {
            return Err(Error::Reserved {
                field: Field::Reserved,
                value: self.flags as u64,
            });
        }
        Ok(())
    }
}

abi_struct! {
    /// CLEAR_EXEC_PAGE argument: the space whose page is released.
    pub struct HandleAbi {
        /// Attached space (ATTACH's handle).
        pub handle: u64,
    }
}

impl HandleAbi {
    /// A handle.
    pub fn check(&self) -> Result<(), Error> {
        if self.handle == 0 {
            return Err(Error::Field {
                field: Field::Handle,
                value: 0,
            });
        }
        Ok(())
    }
}

pub const NR_GET_VERSION: u8 = 0x00;
pub const NR_GET_PARAMS: u8 = 0x01;
pub const NR_SET_PARAMS: u8 = 0x02;
pub const NR_GET_STATS: u8 = 0x03;
pub const NR_RESET_TABLES: u8 = 0x04;
pub const NR_ATTACH: u8 = 0x05;
pub const NR_DETACH: u8 = 0x06;
pub const NR_SET_EXEC_ID: u8 = 0x07;
pub const NR_MARK_DEAD: u8 = 0x08;
pub const NR_MARK_ALIVE: u8 = 0x09;
pub const NR_SET_GPU: u8 = 0x0a;
pub const NR_SET_EXEC_PAGE: u8 = 0x0b;
pub const NR_CLEAR_EXEC_PAGE: u8 = 0x0c;

pub const PRESCIENT_IOC_GET_VERSION: u32 = ioc(IOC_READ, IOC_MAGIC, NR_GET_VERSION, Version::SIZE);
pub const PRESCIENT_IOC_GET_PARAMS: u32 = ioc(IOC_READ, IOC_MAGIC, NR_GET_PARAMS, ParamsAbi::SIZE);
pub const PRESCIENT_IOC_SET_PARAMS: u32 = ioc(IOC_WRITE, IOC_MAGIC, NR_SET_PARAMS, ParamsAbi::SIZE);
pub const PRESCIENT_IOC_GET_STATS: u32 = ioc(IOC_READ, IOC_MAGIC, NR_GET_STATS, Stats::SIZE);
pub const PRESCIENT_IOC_RESET_TABLES: u32 = ioc(IOC_NONE, IOC_MAGIC, NR_RESET_TABLES, 0);
pub const PRESCIENT_IOC_ATTACH: u32 = ioc(IOC_READ | IOC_WRITE, IOC_MAGIC, NR_ATTACH, Target::SIZE);
pub const PRESCIENT_IOC_DETACH: u32 = ioc(IOC_WRITE, IOC_MAGIC, NR_DETACH, Target::SIZE);
pub const PRESCIENT_IOC_SET_EXEC_ID: u32 =
    ioc(IOC_WRITE, IOC_MAGIC, NR_SET_EXEC_ID, ExecIdAbi::SIZE);
pub const PRESCIENT_IOC_MARK_DEAD: u32 = ioc(IOC_WRITE, IOC_MAGIC, NR_MARK_DEAD, RangeAbi::SIZE);
pub const PRESCIENT_IOC_MARK_ALIVE: u32 = ioc(IOC_WRITE, IOC_MAGIC, NR_MARK_ALIVE, RangeAbi::SIZE);
pub const PRESCIENT_IOC_SET_GPU: u32 = ioc(IOC_WRITE, IOC_MAGIC, NR_SET_GPU, GpuAbi::SIZE);
pub const PRESCIENT_IOC_SET_EXEC_PAGE: u32 =
    ioc(IOC_WRITE, IOC_MAGIC, NR_SET_EXEC_PAGE, ExecPageAbi::SIZE);
pub const PRESCIENT_IOC_CLEAR_EXEC_PAGE: u32 =
    ioc(IOC_WRITE, IOC_MAGIC, NR_CLEAR_EXEC_PAGE, HandleAbi::SIZE);

/// A decoded ioctl command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    GetVersion,
    GetParams,
    SetParams,
    GetStats,
    ResetTables,
    Attach,
    Detach,
    SetExecId,
    MarkDead,
    MarkAlive,
    SetGpu,
    SetExecPage,
    ClearExecPage,
}

/// Every command with its number, for tables and tests.
pub const COMMANDS: [(Cmd, u32, &str); 13] = [
    (
        Cmd::GetVersion,
        PRESCIENT_IOC_GET_VERSION,
        "PRESCIENT_IOC_GET_VERSION",
    ),
    (
        Cmd::GetParams,
        PRESCIENT_IOC_GET_PARAMS,
        "PRESCIENT_IOC_GET_PARAMS",
    ),
    (
        Cmd::SetParams,
        PRESCIENT_IOC_SET_PARAMS,
        "PRESCIENT_IOC_SET_PARAMS",
    ),
    (
        Cmd::GetStats,
        PRESCIENT_IOC_GET_STATS,
        "PRESCIENT_IOC_GET_STATS",
    ),
    (
        Cmd::ResetTables,
        PRESCIENT_IOC_RESET_TABLES,
        "PRESCIENT_IOC_RESET_TABLES",
    ),
    (Cmd::Attach, PRESCIENT_IOC_ATTACH, "PRESCIENT_IOC_ATTACH"),
    (Cmd::Detach, PRESCIENT_IOC_DETACH, "PRESCIENT_IOC_DETACH"),
    (
        Cmd::SetExecId,
        PRESCIENT_IOC_SET_EXEC_ID,
        "PRESCIENT_IOC_SET_EXEC_ID",
    ),
    (
        Cmd::MarkDead,
        PRESCIENT_IOC_MARK_DEAD,
        "PRESCIENT_IOC_MARK_DEAD",
    ),
    (
        Cmd::MarkAlive,
        PRESCIENT_IOC_MARK_ALIVE,
        "PRESCIENT_IOC_MARK_ALIVE",
    ),
    (Cmd::SetGpu, PRESCIENT_IOC_SET_GPU, "PRESCIENT_IOC_SET_GPU"),
    (
        Cmd::SetExecPage,
        PRESCIENT_IOC_SET_EXEC_PAGE,
        "PRESCIENT_IOC_SET_EXEC_PAGE",
    ),
    (
        Cmd::ClearExecPage,
        PRESCIENT_IOC_CLEAR_EXEC_PAGE,
        "PRESCIENT_IOC_CLEAR_EXEC_PAGE",
    ),
];

impl Cmd {
    /// Decodes an ioctl number: only the exact numbers above are accepted
    /// (same magic, number, direction and size), anything else is ENOTTY.
    pub fn decode(cmd: u32) -> Result<Cmd, Error> {
        for (c, n, _) in COMMANDS {
            if n == cmd {
                return Ok(c);
            }
        }
        Err(Error::UnknownCommand(cmd))
    }
    /// Bytes copied in from user space.
    pub fn in_size(self) -> usize {
        let n = self.number();
        if ioc_dir(n) & IOC_WRITE != 0 {
            ioc_size(n)
        } else {
            0
        }
    }
    /// Bytes copied out to user space.
    pub fn out_size(self) -> usize {
        let n = self.number();
        if ioc_dir(n) & IOC_READ != 0 {
            ioc_size(n)
        } else {
            0
        }
    }
    /// The ioctl number.
    pub fn number(self) -> u32 {
        let mut r = 0;
        for (c, n, _) in COMMANDS {
            if c == self {
                r = n;
            }
        }
        r
    }
    /// Needs CAP_SYS_ADMIN (changes global state or reaches another process).
    pub fn needs_admin(self) -> bool {
        matches!(
            self,
            Cmd::SetParams | Cmd::ResetTables | Cmd::Attach | Cmd::Detach
        )
    }
}

/// Packs a driver version "580.159.04" as major << 32 | minor << 16 | patch.
/// NVIDIA also ships two-component versions ("580.142", "575.64"): patch 0.
/// None if it is not two or three dot-separated decimal numbers that fit.
pub fn parse_driver_version(s: &[u8]) -> Option<u64> {
    let mut parts = [0u64; 3];
    let mut n = 0;
    let mut digits = 0;
    let mut end = s.len();
    while end > 0 && (s[end - 1] == b'\n' || s[end - 1] == 0 || s[end - 1] == b' ') {
        end -= 1;
    }
    for &c in &s[..end] {
        match c {
            b'0'..=b'9' => {
                parts[n] = parts[n] * 10 + (c - b'0') as u64;
                digits += 1;
                if parts[n] > 0xffff {
                    return None;
                }
            }
            b'.' => {
                if digits == 0 || n == 2 {
                    return None;
                }
                n += 1;
                digits = 0;
            }
            _ => return None,
        }
    }
    if n == 0 || digits == 0 {
        return None;
    }
    Some(parts[0] << 32 | parts[1] << 16 | parts[2])
}

/// The driver branches whose layouts the module carries
/// (kmod/layout/uvm<branch>.h), each with the versions it covers
/// (packed as [`parse_driver_version`] does, both ends inclusive).
pub const DRIVER_BRANCHES: [(u32, u64, u64); 2] = [
    // Debian trixie's nvidia-open-kernel-source; no uvm_api_discard.
    (550, 550 << 32, 550 << 32 | 0xffff << 16 | 0xffff),
    // fault.space removed and UVM_DISCARD added in 580.65.06, the first 580 tag.
    (
        580,
        580 << 32 | 65 << 16 | 6,
        580 << 32 | 0xffff << 16 | 0xffff,
    ),
];

/// The supported ranges, for the refusal line.
pub const DRIVER_BRANCHES_TEXT: &str = "550.x, 580.65.06 to 580.x";

/// The branch (550, 580) whose layout serves the packed driver version `v`;
/// None for any other version.
pub fn driver_branch(v: u64) -> Option<u32> {
    DRIVER_BRANCHES
        .iter()
        .find(|(_, lo, hi)| (*lo..=*hi).contains(&v))
        .map(|(b, _, _)| *b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_distinct_and_decode() {
        for (i, (c, n, _)) in COMMANDS.iter().enumerate() {
            assert_eq!(Cmd::decode(*n), Ok(*c));
            assert_eq!(c.number(), *n);
            assert_eq!(ioc_type(*n), IOC_MAGIC);
            for (_, m, _) in &COMMANDS[i + 1..] {
                assert_ne!(n, m);
            }
        }
        assert_eq!(PRESCIENT_IOC_GET_VERSION, 0x8018_5000);
        assert_eq!(Cmd::decode(0x5000), Err(Error::UnknownCommand(0x5000)));
        assert_eq!(Error::UnknownCommand(1).errno(), errno::ENOTTY);
    }

    #[test]
    fn params_roundtrip_and_validate() {
        let base = kernel_default_params(64);
        let a = ParamsAbi::from_engine(&base, 16, 90, 0, true);
        let b = a.to_bytes();
        let (d, p) = ParamsAbi::decode_valid(&b, &base).unwrap();
        assert_eq!(d, a);
        assert_eq!(p, base);
        let bad = ParamsAbi { rows: 1000, ..a };
        assert!(matches!(bad.to_engine(&base), Err(Error::Param(_))));
        let bad = ParamsAbi {
            inflight_limit: 0,
            ..a
        };
        assert_eq!(bad.to_engine(&base).unwrap_err().errno(), errno::EINVAL);
        let bad = ParamsAbi {
            residency_budget_bytes: 4096,
            ..a
        };
        assert!(bad.to_engine(&base).is_err());
        let bad = ParamsAbi { reserved1: 1, ..a };
        assert!(bad.to_engine(&base).is_err());
        let bad = ParamsAbi { mode: 2, ..a };
        assert!(bad.to_engine(&base).is_err());
        let exec = ParamsAbi {
            mode: MODE_EXEC_ID,
            rows: 16,
            ..a
        }
        .to_engine(&base)
        .unwrap();
        assert_eq!(exec.mode, Mode::ExecId);
        assert_eq!(exec.max_tables, EXEC_MODE_TABLES);
        let back = ParamsAbi::from_engine(&exec, 16, 90, 0, true);
        assert_eq!(back.mode, MODE_EXEC_ID);
        assert_eq!(back.to_engine(&base).unwrap(), exec);
        assert!(ParamsAbi::decode_valid(&b[1..], &base).is_err());
    }

    #[test]
    fn ranges() {
        let r = RangeAbi {
            handle: 1,
            addr: 0x20_0000,
            len: 0x40_0000,
            flags: 0,
        };
        r.check().unwrap();
        RangeAbi {
            flags: MARK_NO_POPULATE,
            ..r
        }
        .check()
        .unwrap();
        assert!(RangeAbi { flags: 2, ..r }.check().is_err());
        assert_eq!(r.whole_blocks(), 1..3);
        assert_eq!(r.touched_blocks(), 1..3);
        let part = RangeAbi {
            addr: 0x30_0000,
            len: 0x20_0000,
            ..r
        };
        assert_eq!(part.whole_blocks(), 0..0);
        assert_eq!(part.touched_blocks(), 1..3);
        assert!(RangeAbi { len: 0, ..r }.check().is_err());
        assert!(RangeAbi { addr: 1, ..r }.check().is_err());
        assert!(RangeAbi {
            addr: u64::MAX - 4095,
            ..r
        }
        .check()
        .is_err());
        assert!(RangeAbi { handle: 0, ..r }.check().is_err());
    }

    #[test]
    fn driver_version() {
        assert_eq!(
            parse_driver_version(b"580.159.04\n"),
            Some(580 << 32 | 159 << 16 | 4)
        );
        assert_eq!(
            parse_driver_version(b"580.142"),
            Some(580 << 32 | 142 << 16)
        );
        assert_eq!(
            parse_driver_version(b"575.64\n"),
            Some(575 << 32 | 64 << 16)
        );
        assert_eq!(parse_driver_version(b"580"), None);
        assert_eq!(parse_driver_version(b"580."), None);
        assert_eq!(parse_driver_version(b".580"), None);
        assert_eq!(parse_driver_version(b"580..4"), None);
        assert_eq!(parse_driver_version(b"a.b.c"), None);
        assert_eq!(parse_driver_version(b"1.2.3.4"), None);
    }

    #[test]
    fn driver_branches() {
        let v = |s: &str| parse_driver_version(s.as_bytes()).unwrap();
        assert_eq!(driver_branch(v("580.142")), Some(580));
        assert_eq!(driver_branch(v("580.159.04")), Some(580));
        assert_eq!(driver_branch(v("580.65.06")), Some(580));
        assert_eq!(driver_branch(v("580.65.05")), None);
        assert_eq!(driver_branch(v("550.163.01")), Some(550));
        assert_eq!(driver_branch(v("550.54")), Some(550));
        assert_eq!(driver_branch(v("575.64")), None);
        assert_eq!(driver_branch(v("535.261.03")), None);
        assert_eq!(driver_branch(v("999.1.2")), None);
    }

    #[test]
    fn gpu_uuid() {
        let u: [u8; 16] = core::array::from_fn(|i| i as u8 + 1);
        let g = GpuAbi::new(3, u);
        assert_eq!(g.uuid(), u);
        assert_eq!(GpuAbi::from_bytes(&g.to_bytes()).unwrap(), g);
        g.check().unwrap();
        assert!(GpuAbi::new(0, u).check().is_err());
        assert!(GpuAbi::new(3, [0; 16]).check().is_err());
        assert_eq!(
            GpuAbi::new(3, UUID_CPU).check().unwrap_err().errno(),
            errno::EINVAL
        );
        assert_eq!(Cmd::decode(PRESCIENT_IOC_SET_GPU), Ok(Cmd::SetGpu));
        assert!(!Cmd::SetGpu.needs_admin());
    }

    #[test]
    fn exec_page_args() {
        let a = ExecPageAbi {
            handle: 4,
            fd: 3,
            flags: 0,
        };
        a.check().unwrap();
        assert_eq!(ExecPageAbi::from_bytes(&a.to_bytes()).unwrap(), a);
        assert!(ExecPageAbi { handle: 0, ..a }.check().is_err());
        assert!(ExecPageAbi { fd: u32::MAX, ..a }.check().is_err());
        assert!(ExecPageAbi { flags: 1, ..a }.check().is_err());
        assert!(HandleAbi { handle: 0 }.check().is_err());
        HandleAbi { handle: 9 }.check().unwrap();
        assert_eq!(
            Cmd::decode(PRESCIENT_IOC_SET_EXEC_PAGE),
            Ok(Cmd::SetExecPage)
        );
        assert_eq!(Cmd::SetExecPage.in_size(), 16);
        assert_eq!(Cmd::ClearExecPage.in_size(), 8);
        assert!(!Cmd::SetExecPage.needs_admin() && !Cmd::ClearExecPage.needs_admin());
    }

    #[test]
    fn stats_roundtrip() {
        let mut s = Stats::default();
        s.head.faults_seen = 7;
        s.spaces[3].pid = 99;
        assert_eq!(Stats::from_bytes(&s.to_bytes()).unwrap(), s);
    }
}
