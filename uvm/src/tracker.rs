//! The V2 tools event tracker on /dev/nvidia-uvm-tools: a ring of
//! `UvmEventEntry_V2` that the driver fills and we drain.

use crate::attach::Target;
use crate::ioctl as uvm;
use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

/// An anonymous, populated mapping that the driver writes into.
struct Mapping {
    ptr: NonNull<libc::c_void>,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> Result<Mapping> {
        // SAFETY: anonymous private mapping, no address hint.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!("mmap {len} bytes: {}", std::io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p).ok_or_else(|| anyhow!("mmap returned null"))?,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range and nothing references it any more.
        unsafe { libc::munmap(self.ptr.as_ptr(), self.len) };
    }
}

/// One event read from the ring.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    Fault(uvm::GpuFaultV2),
    Migration(uvm::MigrationV2),
    /// The driver's thrashing detection flagged a region.
    Thrashing(uvm::ThrashingV2),
    /// The driver began (true) or ended (false) throttling a page.
    Throttling(uvm::ThrottlingV2, bool),
    Other,
}

/// One `UvmEventEntry_V2`: its first byte is the event type, the layouts
/// are uvm_types.h's (`*_V2`); types the daemon does not read are `Other`.
pub fn decode(entry: &[u8; uvm::ENTRY_V2_BYTES]) -> Event {
    match entry[0] {
        uvm::EVENT_GPU_FAULT => Event::Fault(read(entry)),
        uvm::EVENT_MIGRATION => Event::Migration(read(entry)),
        uvm::EVENT_THRASHING_DETECTED => Event::Thrashing(read(entry)),
        ty @ (uvm::EVENT_THROTTLING_START | uvm::EVENT_THROTTLING_END) => {
            Event::Throttling(read(entry), ty == uvm::EVENT_THROTTLING_START)
        }
        _ => Event::Other,
    }
}

/// The event struct at the start of `entry`. Only for the `repr(C)` event
/// structs of ioctl.rs: integers only, so every bit pattern is a value.
fn read<T: Copy>(entry: &[u8; uvm::ENTRY_V2_BYTES]) -> T {
    const { assert!(std::mem::size_of::<T>() <= uvm::ENTRY_V2_BYTES) };
    // SAFETY: `T` fits inside `entry` (checked when compiled) and any bit
    // pattern is a valid `T` (above); the read is unaligned.
    unsafe { entry.as_ptr().cast::<T>().read_unaligned() }
}

/// A V2 tools event tracker over the target's VA space.
pub struct Tracker {
    // Field order matters: the tools fd is closed (tracker torn down by the
    // driver) before the buffers it pinned are unmapped.
    tools: File,
    entries: u32,
    /// The events enabled at creation (and by [`Tracker::enable`]).
    flags: u64,
    queue: Mapping,
    control: Mapping,
}

// SAFETY: the mappings are owned exclusively by the Tracker; only the thread
// that owns it reads them.
unsafe impl Send for Tracker {}

impl Tracker {
    /// Creates a tracker of `entries` (a power of two) over the target's
    /// VA space, with the events of `flags` (bit `1 << EVENT_*`) enabled.
    pub fn new(target: &Target, entries: u32, flags: u64) -> Result<Tracker> {
        if !entries.is_power_of_two() {
            bail!("queue entries must be a power of two, got {entries}");
        }
        let tools = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/nvidia-uvm-tools")
            .context("opening /dev/nvidia-uvm-tools")?;
        let page = 4096usize;
        let qlen = (entries as usize * uvm::ENTRY_V2_BYTES).div_ceil(page) * page;
        let queue = Mapping::new(qlen)?;
        let control = Mapping::new(page)?;
        let mut p = uvm::InitEventTrackerParams {
            queue_buffer: queue.ptr.as_ptr() as u64,
            queue_buffer_size: entries as u64,
            control_buffer: control.ptr.as_ptr() as u64,
            processor: [0; 16],
            all_processors: 1,
            uvm_fd: target.va_fd.as_raw_fd() as u32,
            rm_status: 0,
        };
        // SAFETY: both buffers are page-aligned mappings of the right sizes,
        // owned by the returned Tracker, whose fd is closed before they are unmapped.
        unsafe { uvm::init_event_tracker_v2(tools.as_raw_fd(), &mut p) }
            .context("UVM_TOOLS_INIT_EVENT_TRACKER_V2")?;
        uvm::enable_events(tools.as_raw_fd(), flags)
            .context("UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS")?;
        Ok(Tracker {
            tools,
            entries,
            flags,
            queue,
            control,
        })
    }

    fn ctl(&self) -> *mut uvm::ControlData {
        self.control.ptr.as_ptr().cast()
    }

    /// Turns every event of this tracker off: while no tools event is
    /// enabled on the VA space, the driver's CPU fault path skips its tools
    /// flush (see gate.rs).
    pub fn disable(&self) -> Result<(), uvm::IoctlError> {
        uvm::disable_events(self.tools.as_raw_fd(), self.flags)
    }

    /// Turns the tracker's events back on.
    pub fn enable(&self) -> Result<(), uvm::IoctlError> {
        uvm::enable_events(self.tools.as_raw_fd(), self.flags)
    }

    /// Asks the driver to push events it still holds into the ring.
    pub fn flush(&self) {
        let _ = uvm::flush_events(self.tools.as_raw_fd());
    }

    /// Dropped-event counters (all types summed).
    pub fn dropped(&self) -> u64 {
        (0..uvm::EVENT_NUM_TYPES_ALL)
            .map(|i| self.dropped_of(i))
            .sum()
    }

    /// Dropped migration events: each one is a move of residency the
    /// ledger never saw (dropped fault events only cost predictions).
    pub fn dropped_migrations(&self) -> u64 {
        self.dropped_of(usize::from(uvm::EVENT_MIGRATION))
    }

    /// The driver's dropped-event counter of event type `ty`.
    fn dropped_of(&self, ty: usize) -> u64 {
        let c = self.ctl();
        // SAFETY: `c` points into our live control mapping and `ty` is below
        // EVENT_NUM_TYPES_ALL (the array's length, checked by indexing); the
        // driver updates the counters concurrently, hence a volatile read.
        unsafe { std::ptr::addr_of!((*c).dropped[ty]).read_volatile() }
    }

    /// Reads every available event, up to `max`.
    pub fn drain(&self, max: usize, mut f: impl FnMut(Event)) -> usize {
        let c = self.ctl();
        let mask = self.entries - 1;
        // SAFETY: `c` points into our live control mapping; the counters
        // are shared with the driver, hence volatile.
        let mut get = unsafe { std::ptr::addr_of!((*c).get_behind).read_volatile() } & mask;
        // SAFETY: as above.
        let put = unsafe { std::ptr::addr_of!((*c).put_behind).read_volatile() } & mask;
        fence(Ordering::Acquire);
        let mut n = 0;
        while get != put && n < max {
            let off = get as usize * uvm::ENTRY_V2_BYTES;
            // SAFETY: `off + 72` lies inside the queue mapping (get < entries).
            let base = unsafe { self.queue.ptr.as_ptr().cast::<u8>().add(off) };
            // SAFETY: a whole 72-byte entry inside the mapping (checked
            // above); a byte array has no alignment to keep.
            let entry = unsafe { base.cast::<[u8; uvm::ENTRY_V2_BYTES]>().read_volatile() };
            let ev = decode(&entry);
            f(ev);
            get = (get + 1) & mask;
            n += 1;
        }
        fence(Ordering::Release);
        // SAFETY: as above; we are the only consumer.
        unsafe {
            std::ptr::addr_of_mut!((*c).get_ahead).write_volatile(get);
            std::ptr::addr_of_mut!((*c).get_behind).write_volatile(get);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry with `ty` at byte 0 and the little-endian `fields` at their
    /// offsets, as uvm_types.h lays out the `*_V2` event structs.
    fn entry(ty: u8, fields: &[(usize, &[u8])]) -> [u8; uvm::ENTRY_V2_BYTES] {
        let mut e = [0u8; uvm::ENTRY_V2_BYTES];
        e[0] = ty;
        for (at, bytes) in fields {
            e[*at..*at + bytes.len()].copy_from_slice(bytes);
        }
        e
    }

    #[test]
    fn thrashing_and_throttling_entries_decode_at_the_driver_s_offsets() {
        // UvmEventThrashingDetectedInfo_V2: address at 8, size at 16.
        let addr = 0x7f00_0020_0000u64;
        let e = entry(
            10,
            &[(8, &addr.to_le_bytes()), (16, &(4u64 << 20).to_le_bytes())],
        );
        match decode(&e) {
            Event::Thrashing(t) => assert_eq!((t.address, t.size), (addr, 4 << 20)),
            _ => panic!("not a thrashing event"),
        }
        // UvmEventThrottlingStartInfo_V2 / EndInfo: processor index (u16) at
        // 2, address at 8.
        for (ty, start) in [(11u8, true), (12, false)] {
            let e = entry(ty, &[(2, &3u16.to_le_bytes()), (8, &addr.to_le_bytes())]);
            match decode(&e) {
                Event::Throttling(t, s) => {
                    assert_eq!((t.processor_index, t.address, s), (3, addr, start))
                }
                _ => panic!("not a throttling event"),
            }
        }
        // UvmEventGpuFaultInfo_V2: address at 8 (after type, fault type,
        // gpu index, gpc and client ids).
        let e = entry(3, &[(2, &1u16.to_le_bytes()), (8, &addr.to_le_bytes())]);
        match decode(&e) {
            Event::Fault(f) => assert_eq!((f.gpu_index, f.address), (1, addr)),
            _ => panic!("not a fault"),
        }
        assert!(matches!(decode(&entry(14, &[])), Event::Other));
    }
}
