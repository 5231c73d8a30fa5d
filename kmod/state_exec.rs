// SPDX-License-Identifier: GPL-2.0
//! The State's part for execution-id pages (SET_EXEC_PAGE): a space with a
//! page runs its engine in execution-id mode while the module's parameters
//! may stay transparent, and the worker polls the pages between faults.
//! A child of state.rs (it reaches the State's fields).

use kernel::prelude::*;

use super::State;
use crate::abi::{self, ParamsAbi};
use crate::feed::FEEDS;
use crate::glue::{self, PinnedPage};
use crate::params::{Mode, Params};
use crate::ring::{Record, RING};
use crate::space::{new_engine, Space, SpaceEngine};

impl State {
    /// The engine parameters of a space in force, by whether it has an
    /// execution-id page.
    pub(crate) fn space_params(&self, exec: bool) -> Result<Params> {
        mode_params(&self.params, exec)
    }

    /// Registers the pinned execution-id `page` for the space `handle`
    /// (its owner or an administrator), with `engine` built for it outside
    /// the lock when the space changes mode (one is built here if the
    /// parameters changed since). EEXIST if the space has a page already.
    pub(crate) fn set_exec_page(
        &mut self,
        handle: u64,
        admin: bool,
        mut page: PinnedPage,
        engine: Option<KBox<SpaceEngine>>,
    ) -> Result {
        let want = self.space_params(true)?;
        let sp = self.owned_space(handle, admin)?;
        if sp.exec.is_some() {
            return Err(EEXIST);
        }
        switch_engine(sp, &want, engine)?;
        page.ask_ids();
        FEEDS.set(sp.slot, &page);
        sp.exec = Some(page);
        // Poll from now on, before the first id or fault.
        self.active_at = glue::jiffies();
        Ok(())
    }

    /// Releases the execution-id page of the space `handle` (ENOENT if it
    /// has none): the space goes back to the mode the parameters say, with
    /// `engine` if it was built for that. The page is returned, so that the
    /// caller unpins it (a grace period) after releasing the lock.
    pub(crate) fn clear_exec_page(
        &mut self,
        handle: u64,
        admin: bool,
        engine: Option<KBox<SpaceEngine>>,
    ) -> Result<PinnedPage> {
        let want = self.space_params(false)?;
        let sp = self.owned_space(handle, admin)?;
        if sp.exec.is_none() {
            return Err(ENOENT);
        }
        switch_engine(sp, &want, engine)?;
        FEEDS.clear(sp.slot);
        sp.exec.take().ok_or(ENOENT)
    }

    /// True if the tables of every space under `p` fit `max_table_mib`,
    /// with the space `flip` (if any) in the other mode and `extra` more
    /// transparent spaces.
    /// (Execution-id tables are sized only when a space needs them: `p`
    /// may be a transparent setting no execution-id engine accepts.)
    pub(crate) fn tables_fit(&self, p: &Params, flip: Option<u64>, extra: usize) -> Result<bool> {
        let plain = p.storage_bytes() as u64;
        let mut exec = None;
        let mut total = plain.saturating_mul(extra as u64);
        for sp in self.spaces.iter().flatten() {
            let bytes = if sp.exec.is_some() != (flip == Some(sp.handle)) {
                match exec {
                    Some(b) => b,
                    None => *exec.insert(mode_params(p, true)?.storage_bytes() as u64),
                }
            } else {
                plain
            };
            total = total.saturating_add(bytes);
        }
        Ok(total <= glue::max_table_bytes_param())
    }

    /// Scans every registered execution-id page once (the fault path scans
    /// too, at each fault): a kernel that started without faulting is
    /// announced here, through the ring, behind the records already in it.
    /// True if one was.
    pub(super) fn poll_pages(&mut self) -> bool {
        let mut any = false;
        for sp in self.spaces.iter().flatten() {
            let Some(page) = sp.exec.as_ref() else {
                continue;
            };
            if let Some(Some(exec_id)) = FEEDS.scan(sp.slot, &page.page()) {
                let va_space = sp.va_space();
                RING.push(Record::KernelStart { va_space, exec_id }, sp.slot);
                any = true;
            }
        }
        any
    }
}

/// The parameters of a space's engine under the module's `p`: `p` itself,
/// or, for a space with an execution-id page while `p` is transparent, the
/// same tables in execution-id mode (what SET_PARAMS with MODE_EXEC_ID
/// would give). EINVAL if the engine refuses them.
pub(crate) fn mode_params(p: &Params, exec: bool) -> Result<Params> {
    if !exec || p.mode == Mode::ExecId {
        return Ok(*p);
    }
    // The ABI fields that are the module's own do not reach the engine.
    let a = ParamsAbi {
        mode: abi::MODE_EXEC_ID,
        ..ParamsAbi::from_engine(p, 1, 100, 0, true)
    };
    Ok(a.to_engine(p)?)
}

/// Gives `sp` an engine for `want` unless it has one: `prebuilt` if it
/// was built for exactly that, else a new one (ENOMEM leaves `sp` as it
/// was).
fn switch_engine(sp: &mut Space, want: &Params, prebuilt: Option<KBox<SpaceEngine>>) -> Result {
    if sp.engine.params() == want {
        return Ok(());
    }
    sp.engine = match prebuilt {
        Some(e) if e.params() == want => e,
        _ => new_engine(want)?,
    };
    sp.pump.restart();
    Ok(())
}
