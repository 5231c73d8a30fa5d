// SPDX-License-Identifier: GPL-2.0
//! prescient.ko: prefetching and pre-eviction of CUDA Unified Memory 2 MB
//! blocks, bound to nvidia-uvm (driver branches 550 and 580) by name.
//!
//! The prediction engine is prescient-core's source and the ioctl ABI is
//! prescient-uapi's source, both included by path (the list below); the C
//! side holds only what the 6.12 `kernel` crate lacks: glue.c (kprobe,
//! irq_work, worker kthread, misc device) and uvm.c (binding and calls into
//! the driver), which reads every offset from the layout of the bound
//! branch (kmod/layout/uvm<branch>.h, generated from the driver's headers).
//!
//! Flow: the driver's fault path calls uvm_perf_event_notify(FAULT) -> our
//! kprobe (glue.c, decoded by uvm.c; CPU faults only counted) -> `ring::prescient_rs_fault`, which
//! only pushes a record into the bounded lock-free ring ([`ring`]) and kicks
//! the worker. The worker kthread (`state::prescient_rs_work`) drains the
//! ring first (faults take priority), feeds the engines, then runs prefetch
//! rounds ([`round`]): pre-evict to stay under the residency limit, then
//! issue the engine's prefetches with uvm_api_migrate (ASYNC), at most
//! `inflight_limit` per round, through a reference on the target's
//! /dev/nvidia-uvm file. The ioctls are in [`ioctl`]; every call into C,
//! and every `unsafe` block, is in [`glue`].
//!
//! # Lock order
//! 1. `State` mutex ([`state`]; taken by the worker and by ioctls, never on
//!    the fault path), then
//! 2. nvidia-uvm's own locks (va_space lock, block locks), taken inside
//!    uvm_api_migrate / uvm_api_discard while we hold 1.
//!
//! The fault path (kprobe, called under the driver's va_space lock) takes no
//! lock of ours: it only reads the attached-slot table (atomics, written
//! under 1), touches the ring (lock-free) and wakes the worker. MARK_* and
//! SET_PARAMS' allocations release 1 between chunks / before they allocate.
//! So the driver's locks are never held while waiting for 1.
//!
//! Execution-id pages ([`feed`]): SET_EXEC_PAGE pins the page (shmem's own
//! locks, taken and released inside the pin) before it takes 1. The fault
//! path reads a pinned page inside an RCU read-side section (the kprobe
//! runs with preemption off); unpinning waits for a grace period after the
//! address is unpublished, sometimes while holding 1 (detach, unload).
//! That never deadlocks: no RCU reader of ours waits for 1 or for anything
//! else.

use kernel::prelude::*;

mod discarded;
mod feed;
mod glue;
mod gpus;
mod ioctl;
mod ring;
mod round;
mod space;
mod state;

// ----- the shared sources, included by path (the one list to update) -----
//
// They are the crates' own modules, so they name each other `crate::...`;
// the items their lib.rs defines at the root follow below. Each file expects
// exactly the lints that fire in it (a stale one then warns, as
// unfulfilled_lint_expectations, when the file changes):
// - unreachable_pub: their items are `pub`, their crates' API, which the
//   kernel's -Wunreachable_pub flags in a private module;
// - dead_code: the module uses only part of that API;
// - clippy::incompatible_msrv (CLIPPY=1 only): the kernel's clippy.toml says
//   1.78, the kernel's minimum, but the module is only ever built by the
//   tree's own rustc (the pinned 1.95), like the crates;
// - clippy::wrong_self_convention (abi.rs, CLIPPY=1 only): `to_bytes(&self)`
//   is the ABI crate's API, clean under the workspace's clippy.

// The engine (no_std, no allocation, no unsafe).
#[expect(unreachable_pub, dead_code)]
#[path = "../core/src/block.rs"]
mod block;
#[expect(unreachable_pub, dead_code)]
#[path = "../core/src/block_table.rs"]
mod block_table;
#[expect(unreachable_pub, dead_code, clippy::incompatible_msrv)]
#[path = "../core/src/engine/mod.rs"]
mod engine;
#[expect(unreachable_pub, clippy::incompatible_msrv)]
#[path = "../core/src/exec_table.rs"]
mod exec_table;
#[expect(unreachable_pub, dead_code, clippy::incompatible_msrv)]
#[path = "../core/src/history.rs"]
mod history;
#[expect(unreachable_pub)]
#[path = "../core/src/layout.rs"]
mod layout;
#[expect(unreachable_pub, dead_code)]
#[path = "../core/src/ledger.rs"]
mod ledger;
#[expect(unreachable_pub, dead_code)]
#[path = "../core/src/params.rs"]
mod params;
#[expect(unreachable_pub, dead_code)]
#[path = "../core/src/pump.rs"]
mod pump;
#[expect(unreachable_pub)]
#[path = "../core/src/recent.rs"]
mod recent;
#[expect(unreachable_pub, dead_code)]
#[path = "../core/src/window.rs"]
mod window;
// The ioctl ABI, shared with user space.
#[expect(
    unreachable_pub,
    dead_code,
    clippy::incompatible_msrv,
    clippy::wrong_self_convention
)]
#[path = "../uapi/src/abi.rs"]
mod abi;
// The execution-id page format, shared with the runtime and the daemon.
#[expect(unreachable_pub, dead_code)]
#[path = "../uapi/src/execpage.rs"]
mod execpage;

/// What prescient-core's lib.rs re-exports at its root (the engine files
/// name them `crate::...`).
use block::{Block, BLOCK_BYTES, BLOCK_SHIFT};

/// The engine items abi.rs needs (it names them `crate::pcore::...`).
mod pcore {
    pub(crate) use crate::params::{Mode, ParamError, Params};
    pub(crate) use crate::BLOCK_BYTES;
}

// ----- the module -----

module! {
    type: PrescientModule,
    name: "prescient",
    author: "Prescient",
    description: "Prefetch and pre-evict CUDA UM 2 MB blocks (DeepUM design), bound to nvidia-uvm 550 or 580",
    license: "GPL",
}

/// The GPU size for the bind line: blocks, or "unknown" (0).
struct GpuSize(u32);

impl core::fmt::Display for GpuSize {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.0 == 0 {
            f.write_str(
                "size unknown (no prefetch or pre-eviction until a residency budget is set)",
            )
        } else {
            write!(f, "{} blocks", self.0)
        }
    }
}

/// The loaded module. Fields drop in order: first everything that runs
/// (hook, device, worker) stops and the state is freed, then the driver is
/// released.
struct PrescientModule {
    running: glue::Running<kernel::sync::Mutex<state::State>>,
    _driver: glue::Driver,
}

impl kernel::Module for PrescientModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let driver = glue::Driver::find()?;
        let text = core::str::from_utf8(driver.version()).unwrap_or("?");
        let v = abi::parse_driver_version(driver.version()).unwrap_or(0);
        let Some(branch) = abi::driver_branch(v) else {
            pr_err!(
                "nvidia-uvm version '{}' is not one whose layouts this module knows ({}): refusing to bind\n",
                text,
                abi::DRIVER_BRANCHES_TEXT
            );
            return Err(glue::eopnotsupp());
        };
        // 0 = unknown: the module then neither prefetches nor pre-evicts.
        let gpu = glue::gpu_blocks_param().min(params::Params::MAX_RESIDENT_BLOCKS);
        let default_gpu = glue::default_gpu_param()?;
        let st = state::State::new(v, gpu, glue::enable_param(), branch == 580, default_gpu)?;
        let p = *st.params();
        let running = state::start(st, branch)?;
        pr_info!(
            "bound to nvidia-uvm {} (branch {}, discard {}), gpu {}, rows {} assoc {} succs {} lookahead {}, {} bytes of tables per space\n",
            text,
            branch,
            if glue::has_discard() { "on" } else { "off" },
            GpuSize(gpu),
            p.rows,
            p.assoc,
            p.succs,
            p.lookahead,
            p.storage_bytes()
        );
        Ok(PrescientModule {
            running,
            _driver: driver,
        })
    }
}

impl Drop for PrescientModule {
    fn drop(&mut self) {
        // After this no hook, ioctl or worker runs.
        self.running.stop();
        let t = self.running.value().lock().shut_down();
        pr_info!(
            "unloaded (faults seen {}, prefetched {}, queue drops {}, unattached faults {}, cpu faults {}, driver evictions followed {})\n",
            t.faults,
            t.prefetched,
            t.queue_drops,
            t.unattached_faults,
            t.cpu_faults,
            t.driver_evictions
        );
    }
}
