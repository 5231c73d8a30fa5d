//! The NVIDIA UVM ioctl ABI that prescientd and `prescientctl record` use,
//! as `#[repr(C)]` structs.
//!
//! Layouts follow kernel-open/nvidia-uvm/uvm_ioctl.h and uvm_types.h of the
//! open GPU kernel modules (580 branch; see /work/shared/notes/uvm-facts.md).
//! UVM ioctl numbers are plain numbers (`UVM_IOCTL_BASE(i) = i` on Linux),
//! not `_IOWR` encodings, hence nix's `*_bad` ioctl macros.

use std::os::fd::RawFd;

/// `NV_OK`.
pub const NV_OK: u32 = 0;

pub const UVM_PAGEABLE_MEM_ACCESS: libc::c_ulong = 39;
pub const UVM_SET_PREFERRED_LOCATION: libc::c_ulong = 42;
pub const UVM_UNSET_PREFERRED_LOCATION: libc::c_ulong = 43;
pub const UVM_SET_ACCESSED_BY: libc::c_ulong = 46;
pub const UVM_UNSET_ACCESSED_BY: libc::c_ulong = 47;
pub const UVM_MIGRATE: libc::c_ulong = 51;
pub const UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS: libc::c_ulong = 58;
pub const UVM_TOOLS_EVENT_QUEUE_DISABLE_EVENTS: libc::c_ulong = 59;
pub const UVM_TOOLS_FLUSH_EVENTS: libc::c_ulong = 67;
pub const UVM_TOOLS_INIT_EVENT_TRACKER_V2: libc::c_ulong = 76;
pub const UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2: libc::c_ulong = 77;
/// 580 and later only (`discard_supported`).
pub const UVM_DISCARD: libc::c_ulong = 80;

/// `UVM_MIGRATE_FLAG_ASYNC`.
pub const MIGRATE_FLAG_ASYNC: u32 = 1;

/// `UVM_DISCARD_FLAGS_UNMAP`: the pages lose their residency everywhere and
/// are unmapped; a 2 MB block discarded whole has its GPU chunk put on the
/// driver's "unused" list (reclaimed with no copy). A later write lands
/// normally, a later migration copies nothing. Without it the pages stay
/// resident and mapped, and accessing them is undefined (uvm.h, UvmDiscard).
pub const DISCARD_FLAG_UNMAP: u64 = 1;

/// Event types (`UvmEventType`).
pub const EVENT_MIGRATION: u8 = 2;
pub const EVENT_GPU_FAULT: u8 = 3;
pub const EVENT_THRASHING_DETECTED: u8 = 10;
pub const EVENT_THROTTLING_START: u8 = 11;
pub const EVENT_THROTTLING_END: u8 = 12;
/// The driver's own policy acting on a VA space (thrashing detected,
/// throttling begun and ended): rare, and what explains a burst of faults
/// the driver did not serve.
pub const EVENTS_DRIVER_POLICY: u64 =
    (1 << EVENT_THRASHING_DETECTED) | (1 << EVENT_THROTTLING_START) | (1 << EVENT_THROTTLING_END);
pub const EVENT_EVICTION: u8 = 14;
/// `UvmEventNumTypesAll`: entries of the control block's `dropped` array.
pub const EVENT_NUM_TYPES_ALL: usize = 64;

/// Migration causes (`UvmEventMigrationCause`).
pub const CAUSE_USER: u8 = 1;
pub const CAUSE_COHERENCE: u8 = 2;
pub const CAUSE_PREFETCH: u8 = 3;
pub const CAUSE_EVICTION: u8 = 4;

/// Processor index of the CPU in tools events (`UVM_ID_CPU_VALUE`).
pub const CPU_INDEX: u16 = 0;
/// Entries of the V2 processor UUID table (`UVM_ID_MAX_PROCESSORS` is 257 in
/// 580; we hand the driver a larger buffer to be safe).
pub const UUID_TABLE_ENTRIES: usize = 1024;

/// `NV_PROCESSOR_UUID_CPU_DEFAULT`.
pub const CPU_UUID: [u8; 16] = [
    0xa6, 0x5e, 0x0f, 0x4e, 0xd7, 0xd4, 0x7b, 0xa2, 0x50, 0x47, 0x41, 0x2c, 0x14, 0x2a, 0x77, 0x73,
];

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PageableMemAccessParams {
    pub pageable_mem_access: u8,
    pub rm_status: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MigrateParams {
    pub base: u64,
    pub length: u64,
    pub destination_uuid: [u8; 16],
    pub flags: u32,
    pub semaphore_address: u64,
    pub semaphore_payload: u32,
    pub cpu_numa_node: i32,
    pub user_space_start: u64,
    pub user_space_length: u64,
    pub rm_status: u32,
}

/// `UVM_SET_PREFERRED_LOCATION_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SetPreferredLocationParams {
    pub base: u64,
    pub length: u64,
    pub preferred_location: [u8; 16],
    /// With the CPU as the location: its NUMA node, -1 for none.
    pub preferred_cpu_numa_node: i32,
    pub rm_status: u32,
}

/// `UVM_SET_ACCESSED_BY_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAccessedByParams {
    pub base: u64,
    pub length: u64,
    pub accessed_by_uuid: [u8; 16],
    pub rm_status: u32,
}

/// `UVM_UNSET_PREFERRED_LOCATION_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UnsetPreferredLocationParams {
    pub base: u64,
    pub length: u64,
    pub rm_status: u32,
}

/// `UVM_DISCARD_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DiscardParams {
    pub base: u64,
    pub length: u64,
    pub flags: u64,
    pub rm_status: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InitEventTrackerParams {
    pub queue_buffer: u64,
    /// Entries, a power of two.
    pub queue_buffer_size: u64,
    pub control_buffer: u64,
    pub processor: [u8; 16],
    pub all_processors: u32,
    pub uvm_fd: u32,
    pub rm_status: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct EnableEventsParams {
    pub event_type_flags: u64,
    pub rm_status: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FlushEventsParams {
    pub rm_status: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UuidTableParams {
    pub table_ptr: u64,
    pub rm_status: u32,
}

/// `UvmToolsEventControlData`: the ring's counters (indices, masked).
#[repr(C)]
pub struct ControlData {
    pub get_ahead: u32,
    pub get_behind: u32,
    pub put_ahead: u32,
    pub put_behind: u32,
    pub dropped: [u64; EVENT_NUM_TYPES_ALL],
}

/// `UvmEventGpuFaultInfo_V2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GpuFaultV2 {
    pub event_type: u8,
    pub fault_type: u8,
    pub gpu_index: u16,
    pub gpc_id: u16,
    pub client_id: u16,
    pub address: u64,
    pub time_stamp: u64,
    pub time_stamp_gpu: u64,
    pub batch_id: u32,
    pub client_type: u8,
    pub access_type: u8,
    pub padding16bits: u16,
}

/// `UvmEventMigrationInfo_V2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MigrationV2 {
    pub event_type: u8,
    pub migration_cause: u8,
    pub padding16bits: u16,
    pub src_index: u16,
    pub dst_index: u16,
    pub src_nid: i32,
    pub dst_nid: i32,
    pub address: u64,
    pub migrated_bytes: u64,
    pub begin_time_stamp: u64,
    pub end_time_stamp: u64,
    pub range_group_id: u64,
    pub begin_time_stamp_gpu: u64,
    pub end_time_stamp_gpu: u64,
}

/// `UvmEventThrashingDetectedInfo_V2`, without its trailing processor mask:
/// the driver found pages of `size` bytes at `address` moving between
/// processors too often (uvm_perf_thrashing.c) and will throttle or pin them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThrashingV2 {
    pub event_type: u8,
    pub padding8bits: u8,
    pub padding16bits: u16,
    pub padding32bits: u32,
    pub address: u64,
    pub size: u64,
    pub time_stamp: u64,
}

/// `UvmEventThrottlingStartInfo_V2` (and `..EndInfo_V2`, the same layout):
/// the driver stops (or resumes) servicing processor `processor_index`'s
/// faults on the page at `address` for a while.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThrottlingV2 {
    pub event_type: u8,
    pub padding8bits: u8,
    pub processor_index: u16,
    pub padding32bits: u32,
    pub address: u64,
    pub time_stamp: u64,
}

/// Bytes of one `UvmEventEntry_V2`.
pub const ENTRY_V2_BYTES: usize = 72;

nix::ioctl_readwrite_bad!(
    ioc_pageable_mem_access,
    UVM_PAGEABLE_MEM_ACCESS,
    PageableMemAccessParams
);
nix::ioctl_readwrite_bad!(ioc_migrate, UVM_MIGRATE, MigrateParams);
nix::ioctl_readwrite_bad!(
    ioc_set_preferred_location,
    UVM_SET_PREFERRED_LOCATION,
    SetPreferredLocationParams
);
nix::ioctl_readwrite_bad!(
    ioc_set_accessed_by,
    UVM_SET_ACCESSED_BY,
    SetAccessedByParams
);
nix::ioctl_readwrite_bad!(
    ioc_unset_preferred_location,
    UVM_UNSET_PREFERRED_LOCATION,
    UnsetPreferredLocationParams
);
// UVM_UNSET_ACCESSED_BY_PARAMS has UVM_SET_ACCESSED_BY_PARAMS's layout.
nix::ioctl_readwrite_bad!(
    ioc_unset_accessed_by,
    UVM_UNSET_ACCESSED_BY,
    SetAccessedByParams
);
nix::ioctl_readwrite_bad!(ioc_discard, UVM_DISCARD, DiscardParams);
nix::ioctl_readwrite_bad!(
    ioc_enable_events,
    UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS,
    EnableEventsParams
);
nix::ioctl_readwrite_bad!(
    ioc_disable_events,
    UVM_TOOLS_EVENT_QUEUE_DISABLE_EVENTS,
    EnableEventsParams
);
nix::ioctl_readwrite_bad!(ioc_flush_events, UVM_TOOLS_FLUSH_EVENTS, FlushEventsParams);
nix::ioctl_readwrite_bad!(
    ioc_init_tracker_v2,
    UVM_TOOLS_INIT_EVENT_TRACKER_V2,
    InitEventTrackerParams
);
nix::ioctl_readwrite_bad!(
    ioc_uuid_table_v2,
    UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2,
    UuidTableParams
);

/// An ioctl failed: the syscall itself (errno) or the driver (rmStatus).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoctlError {
    Errno(nix::errno::Errno),
    Rm(u32),
}

impl std::fmt::Display for IoctlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IoctlError::Errno(e) => write!(f, "ioctl failed: {e}"),
            IoctlError::Rm(s) => write!(f, "driver returned rmStatus {s:#x}"),
        }
    }
}

impl std::error::Error for IoctlError {}

fn check(r: nix::Result<libc::c_int>, rm: u32) -> Result<(), IoctlError> {
    r.map_err(IoctlError::Errno)?;
    if rm != NV_OK {
        return Err(IoctlError::Rm(rm));
    }
    Ok(())
}

/// UVM_PAGEABLE_MEM_ACCESS: succeeds (rmStatus 0) only on a VA-space fd.
pub fn pageable_mem_access(fd: RawFd) -> Result<bool, IoctlError> {
    let mut p = PageableMemAccessParams::default();
    // SAFETY: `p` is a live, correctly laid out parameter block for this
    // ioctl; the driver reads and writes only its 8 bytes.
    let r = unsafe { ioc_pageable_mem_access(fd, &mut p) };
    check(r, p.rm_status)?;
    Ok(p.pageable_mem_access != 0)
}

/// UVM_MIGRATE of `[base, base + length)` to the processor `dest`.
pub fn migrate(
    fd: RawFd,
    base: u64,
    length: u64,
    dest: [u8; 16],
    flags: u32,
) -> Result<(), IoctlError> {
    let mut p = MigrateParams {
        base,
        length,
        destination_uuid: dest,
        flags,
        cpu_numa_node: -1,
        ..Default::default()
    };
    // SAFETY: `p` is a live UVM_MIGRATE_PARAMS block (80 bytes, tested below);
    // no semaphore address is passed, so the driver touches nothing else of ours.
    let r = unsafe { ioc_migrate(fd, &mut p) };
    check(r, p.rm_status)
}

/// UVM_SET_PREFERRED_LOCATION of `[base, base + length)` (page-aligned,
/// managed) to the processor `location` (`CPU_UUID`: host memory, any
/// NUMA node). The driver keeps the pages there and, where the faulting
/// processor can reach that memory, maps them instead of migrating.
pub fn set_preferred_location(
    fd: RawFd,
    base: u64,
    length: u64,
    location: [u8; 16],
) -> Result<(), IoctlError> {
    let mut p = SetPreferredLocationParams {
        base,
        length,
        preferred_location: location,
        preferred_cpu_numa_node: -1,
        rm_status: 0,
    };
    // SAFETY: `p` is a live UVM_SET_PREFERRED_LOCATION_PARAMS block (40
    // bytes, tested below); the driver reads and writes only those bytes.
    let r = unsafe { ioc_set_preferred_location(fd, &mut p) };
    check(r, p.rm_status)
}

/// UVM_UNSET_PREFERRED_LOCATION of `[base, base + length)`: the pages
/// have no preferred location again (they stay where they are).
pub fn unset_preferred_location(fd: RawFd, base: u64, length: u64) -> Result<(), IoctlError> {
    let mut p = UnsetPreferredLocationParams {
        base,
        length,
        rm_status: 0,
    };
    // SAFETY: `p` is a live UVM_UNSET_PREFERRED_LOCATION_PARAMS block (24
    // bytes, tested below); the driver reads and writes only those bytes.
    let r = unsafe { ioc_unset_preferred_location(fd, &mut p) };
    check(r, p.rm_status)
}

/// The nix wrapper of UVM_SET_ACCESSED_BY or UVM_UNSET_ACCESSED_BY.
type AccessedByIoctl = unsafe fn(libc::c_int, *mut SetAccessedByParams) -> nix::Result<libc::c_int>;

fn accessed_by(
    ioc: AccessedByIoctl,
    fd: RawFd,
    base: u64,
    length: u64,
    processor: [u8; 16],
) -> Result<(), IoctlError> {
    let mut p = SetAccessedByParams {
        base,
        length,
        accessed_by_uuid: processor,
        rm_status: 0,
    };
    // SAFETY: `p` is a live parameter block of the layout both ioctls take
    // (UVM_SET_ACCESSED_BY_PARAMS, 40 bytes, tested below; the unset's
    // params have the same layout); the driver reads and writes only those.
    let r = unsafe { ioc(fd, &mut p) };
    check(r, p.rm_status)
}

/// UVM_SET_ACCESSED_BY of `[base, base + length)` for the processor
/// `processor`: the driver keeps it mapped to the pages wherever they are,
/// so its accesses do not fault.
pub fn set_accessed_by(
    fd: RawFd,
    base: u64,
    length: u64,
    processor: [u8; 16],
) -> Result<(), IoctlError> {
    accessed_by(ioc_set_accessed_by, fd, base, length, processor)
}

/// UVM_UNSET_ACCESSED_BY of `[base, base + length)` for `processor`.
pub fn unset_accessed_by(
    fd: RawFd,
    base: u64,
    length: u64,
    processor: [u8; 16],
) -> Result<(), IoctlError> {
    accessed_by(ioc_unset_accessed_by, fd, base, length, processor)
}

/// UVM_DISCARD of `[base, base + length)` (page-aligned, one managed range):
/// the data there is dead. Synchronous: the driver waits for its own work
/// before returning, so no discard of ours is in flight once this returns.
pub fn discard(fd: RawFd, base: u64, length: u64, flags: u64) -> Result<(), IoctlError> {
    let mut p = DiscardParams {
        base,
        length,
        flags,
        rm_status: 0,
    };
    // SAFETY: `p` is a live UVM_DISCARD_PARAMS block (32 bytes, tested
    // below); the driver reads and writes only those bytes.
    let r = unsafe { ioc_discard(fd, &mut p) };
    check(r, p.rm_status)
}

/// Whether this driver has UVM_DISCARD (added in the 580 branch).
pub fn discard_supported(version: &str) -> bool {
    driver_major(version).is_some_and(|m| m >= 580)
}

/// The major number of an nvidia_uvm version ("580" of "580.159.04").
fn driver_major(version: &str) -> Option<u32> {
    version.trim().split('.').next()?.parse().ok()
}

/// UVM_TOOLS_INIT_EVENT_TRACKER_V2 on a tools fd.
///
/// # Safety
/// `p.queue_buffer` and `p.control_buffer` must point to page-aligned memory
/// of this process, of `p.queue_buffer_size * ENTRY_V2_BYTES` and of one
/// `ControlData`, that stays mapped for as long as the tools fd is open.
pub unsafe fn init_event_tracker_v2(
    tools_fd: RawFd,
    p: &mut InitEventTrackerParams,
) -> Result<(), IoctlError> {
    // SAFETY: the caller guarantees the buffers; `p` is a live parameter block.
    let r = unsafe { ioc_init_tracker_v2(tools_fd, p) };
    check(r, p.rm_status)
}

/// The nix wrapper of UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS or _DISABLE_EVENTS.
type EventMaskIoctl = unsafe fn(libc::c_int, *mut EnableEventsParams) -> nix::Result<libc::c_int>;

fn event_mask(ioc: EventMaskIoctl, tools_fd: RawFd, flags: u64) -> Result<(), IoctlError> {
    let mut p = EnableEventsParams {
        event_type_flags: flags,
        rm_status: 0,
    };
    // SAFETY: `p` is a live parameter block of the layout both ioctls take.
    let r = unsafe { ioc(tools_fd, &mut p) };
    check(r, p.rm_status)
}

/// UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS: the events of `flags` start arriving.
pub fn enable_events(tools_fd: RawFd, flags: u64) -> Result<(), IoctlError> {
    event_mask(ioc_enable_events, tools_fd, flags)
}

/// UVM_TOOLS_EVENT_QUEUE_DISABLE_EVENTS: same parameter block as enable
/// (`UVM_TOOLS_EVENT_QUEUE_DISABLE_EVENTS_PARAMS` has the same layout).
pub fn disable_events(tools_fd: RawFd, flags: u64) -> Result<(), IoctlError> {
    event_mask(ioc_disable_events, tools_fd, flags)
}

/// UVM_TOOLS_FLUSH_EVENTS: events the driver still holds reach the ring.
pub fn flush_events(tools_fd: RawFd) -> Result<(), IoctlError> {
    let mut p = FlushEventsParams::default();
    // SAFETY: `p` is a live parameter block of the right layout.
    let r = unsafe { ioc_flush_events(tools_fd, &mut p) };
    check(r, p.rm_status)
}

/// UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2 on a VA-space fd: index -> UUID
/// (all zeros where no processor).
pub fn processor_uuid_table(va_fd: RawFd) -> Result<Vec<[u8; 16]>, IoctlError> {
    let mut table = vec![[0u8; 16]; UUID_TABLE_ENTRIES];
    let mut p = UuidTableParams {
        table_ptr: table.as_mut_ptr() as u64,
        rm_status: 0,
    };
    // SAFETY: the table has UUID_TABLE_ENTRIES * 16 writable bytes, more than
    // the driver's UVM_ID_MAX_PROCESSORS entries; `p` is a live block.
    let r = unsafe { ioc_uuid_table_v2(va_fd, &mut p) };
    check(r, p.rm_status)?;
    Ok(table)
}

/// A UUID in nvidia-smi's form, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_string(u: &[u8; 16]) -> String {
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    let h = h.concat();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Driver versions whose ABI (V2 tracker, V2 entries, UVM_MIGRATE_PARAMS)
/// this daemon knows: major 565 (V2 tracker) up to 595.
pub fn abi_known(version: &str) -> bool {
    matches!(driver_major(version), Some(565..=595))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn migrate_params_layout() {
        assert_eq!(size_of::<ThrashingV2>(), 32);
        assert_eq!(offset_of!(ThrashingV2, address), 8);
        assert_eq!(offset_of!(ThrashingV2, size), 16);
        assert_eq!(offset_of!(ThrottlingV2, processor_index), 2);
        assert_eq!(offset_of!(ThrottlingV2, address), 8);
        assert_eq!(offset_of!(ThrottlingV2, time_stamp), 16);
        assert!(size_of::<ThrashingV2>() <= ENTRY_V2_BYTES);
        assert_eq!(size_of::<MigrateParams>(), 80);
        assert_eq!(offset_of!(MigrateParams, base), 0);
        assert_eq!(offset_of!(MigrateParams, length), 8);
        assert_eq!(offset_of!(MigrateParams, destination_uuid), 16);
        assert_eq!(offset_of!(MigrateParams, flags), 32);
        assert_eq!(offset_of!(MigrateParams, semaphore_address), 40);
        assert_eq!(offset_of!(MigrateParams, semaphore_payload), 48);
        assert_eq!(offset_of!(MigrateParams, cpu_numa_node), 52);
        assert_eq!(offset_of!(MigrateParams, user_space_start), 56);
        assert_eq!(offset_of!(MigrateParams, user_space_length), 64);
        assert_eq!(offset_of!(MigrateParams, rm_status), 72);
    }

    /// uvm_ioctl.h: `NvU64 requestedBase NV_ALIGN_BYTES(8)`, `NvU64 length
    /// NV_ALIGN_BYTES(8)`, `NvProcessorUuid` (16 bytes), then
    /// `NvS32 preferredCpuNumaNode` and `NV_STATUS rmStatus` (preferred
    /// location) or `NV_STATUS rmStatus` and the padding to 8 (accessed by).
    #[test]
    fn advice_params_layout() {
        assert_eq!(size_of::<SetPreferredLocationParams>(), 40);
        assert_eq!(offset_of!(SetPreferredLocationParams, base), 0);
        assert_eq!(offset_of!(SetPreferredLocationParams, length), 8);
        assert_eq!(
            offset_of!(SetPreferredLocationParams, preferred_location),
            16
        );
        assert_eq!(
            offset_of!(SetPreferredLocationParams, preferred_cpu_numa_node),
            32
        );
        assert_eq!(offset_of!(SetPreferredLocationParams, rm_status), 36);
        assert_eq!(size_of::<SetAccessedByParams>(), 40);
        assert_eq!(size_of::<UnsetPreferredLocationParams>(), 24);
        assert_eq!(offset_of!(UnsetPreferredLocationParams, rm_status), 16);
        assert_eq!(offset_of!(SetAccessedByParams, accessed_by_uuid), 16);
        assert_eq!(offset_of!(SetAccessedByParams, rm_status), 32);
    }

    #[test]
    fn discard_params_layout() {
        assert_eq!(size_of::<DiscardParams>(), 32);
        assert_eq!(offset_of!(DiscardParams, base), 0);
        assert_eq!(offset_of!(DiscardParams, length), 8);
        assert_eq!(offset_of!(DiscardParams, flags), 16);
        assert_eq!(offset_of!(DiscardParams, rm_status), 24);
        assert!(discard_supported("580.159.04"));
        assert!(!discard_supported("575.57.08"));
        assert!(!discard_supported("garbage"));
    }

    #[test]
    fn tracker_params_layout() {
        assert_eq!(offset_of!(InitEventTrackerParams, queue_buffer), 0);
        assert_eq!(offset_of!(InitEventTrackerParams, queue_buffer_size), 8);
        assert_eq!(offset_of!(InitEventTrackerParams, control_buffer), 16);
        assert_eq!(offset_of!(InitEventTrackerParams, processor), 24);
        assert_eq!(offset_of!(InitEventTrackerParams, all_processors), 40);
        assert_eq!(offset_of!(InitEventTrackerParams, uvm_fd), 44);
        assert_eq!(offset_of!(InitEventTrackerParams, rm_status), 48);
        assert_eq!(size_of::<InitEventTrackerParams>(), 56);
        assert_eq!(size_of::<EnableEventsParams>(), 16);
        assert_eq!(size_of::<PageableMemAccessParams>(), 8);
        assert_eq!(offset_of!(PageableMemAccessParams, rm_status), 4);
        assert_eq!(size_of::<UuidTableParams>(), 16);
    }

    #[test]
    fn control_block_layout() {
        assert_eq!(offset_of!(ControlData, get_ahead), 0);
        assert_eq!(offset_of!(ControlData, get_behind), 4);
        assert_eq!(offset_of!(ControlData, put_ahead), 8);
        assert_eq!(offset_of!(ControlData, put_behind), 12);
        assert_eq!(offset_of!(ControlData, dropped), 16);
        assert!(size_of::<ControlData>() <= 4096);
    }

    #[test]
    fn event_entry_layouts() {
        assert!(size_of::<GpuFaultV2>() <= ENTRY_V2_BYTES);
        assert_eq!(offset_of!(GpuFaultV2, fault_type), 1);
        assert_eq!(offset_of!(GpuFaultV2, gpu_index), 2);
        assert_eq!(offset_of!(GpuFaultV2, gpc_id), 4);
        assert_eq!(offset_of!(GpuFaultV2, client_id), 6);
        assert_eq!(offset_of!(GpuFaultV2, address), 8);
        assert_eq!(offset_of!(GpuFaultV2, time_stamp), 16);
        assert_eq!(offset_of!(GpuFaultV2, time_stamp_gpu), 24);
        assert_eq!(offset_of!(GpuFaultV2, batch_id), 32);
        assert_eq!(offset_of!(GpuFaultV2, client_type), 36);
        assert_eq!(offset_of!(GpuFaultV2, access_type), 37);
        assert_eq!(size_of::<MigrationV2>(), ENTRY_V2_BYTES);
        assert_eq!(offset_of!(MigrationV2, migration_cause), 1);
        assert_eq!(offset_of!(MigrationV2, src_index), 4);
        assert_eq!(offset_of!(MigrationV2, dst_index), 6);
        assert_eq!(offset_of!(MigrationV2, address), 16);
        assert_eq!(offset_of!(MigrationV2, migrated_bytes), 24);
    }

    #[test]
    fn abi_versions() {
        assert!(abi_known("580.159.04\n"));
        assert!(abi_known("565.57.01"));
        assert!(!abi_known("550.54.15"));
        assert!(!abi_known("600.1"));
        assert!(!abi_known("garbage"));
    }

    #[test]
    fn uuid_format() {
        let s = uuid_string(&CPU_UUID);
        assert_eq!(s, "GPU-a65e0f4e-d7d4-7ba2-5047-412c142a7773");
    }
}
