// SPDX-License-Identifier: GPL-2.0
//! prescient.ko: prefetching and pre-eviction of CUDA Unified Memory 2 MB
//! blocks, bound to nvidia-uvm (driver 580) by name.
//!
//! The prediction engine is prescient-core's source and the ioctl ABI is
//! prescient-uapi's source, both included by path (the list below); the C
//! side holds only what the 6.12 `kernel` crate lacks: glue.c (kprobe,
//! irq_work, worker kthread, misc device) and one file per driver branch
//! with that branch's layouts (uvm580.c).
//!
//! Flow: the driver's fault path calls uvm_perf_event_notify(FAULT) -> our
//! kprobe (glue.c, decoded by uvm580.c) -> `ring::prescient_rs_fault`, which
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
//! lock of ours: it only touches the ring (lock-free) and wakes the worker.
//! So the driver's locks are never held while waiting for 1.

use kernel::prelude::*;

mod glue;
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
    description: "Prefetch and pre-evict CUDA UM 2 MB blocks (DeepUM design), bound to nvidia-uvm 580",
    license: "GPL",
}

/// Driver versions whose layouts (uvm580.c) are known: the 580 branch, read
/// in source from 580.65.06 and measured on 580.159.04.
const KNOWN_LO: u64 = 580 << 32 | 65 << 16 | 6;
const KNOWN_HI: u64 = 580 << 32 | 159 << 16 | 4;

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
        let v = abi::parse_driver_version(driver.version());
        let known = matches!(v, Some(v) if (KNOWN_LO..=KNOWN_HI).contains(&v));
        if !known {
            pr_err!(
                "nvidia-uvm version '{}' is not one whose layouts this module knows (580.65.06 to 580.159.04): refusing to bind\n",
                text
            );
            return Err(glue::eopnotsupp());
        }
        let gpu = glue::gpu_blocks_param().clamp(1, params::Params::MAX_RESIDENT_BLOCKS);
        let st = state::State::new(v.unwrap_or(0), gpu, glue::enable_param());
        let p = *st.params();
        let running = state::start(st)?;
        pr_info!(
            "bound to nvidia-uvm {}, gpu {} blocks, rows {} assoc {} succs {} lookahead {}, {} bytes of tables per space\n",
            text,
            gpu,
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
            "unloaded (faults seen {}, prefetched {}, queue drops {}, unattached faults {}, driver evictions followed {})\n",
            t.faults,
            t.prefetched,
            t.queue_drops,
            t.unattached_faults,
            t.driver_evictions
        );
    }
}
