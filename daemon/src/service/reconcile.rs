//! The service keeping the backend in the desired state: polls (and what
//! a poll reveals: a module back after an unload, processes gone), scans
//! for processes to attach, SIGHUP reloads, the start and the shutdown.

use super::exit::{EXIT_CONFIG, EXIT_FAILURE, EXIT_NOPERM, EXIT_UNAVAILABLE};
use super::procfs::{cmdline, comm, process_exists, uvm_processes};
use super::state::{module_info, Attachment, Reason, Service, State};
use crate::backend::{attach_error_text, DevError};
use crate::config::{Config, OnMissingModule};
use crate::pidfd::Pidfd;
use prescient_uapi::control::{self, EngineParams, Stats};
use std::sync::Arc;

/// Attach attempts per pid before the daemon stops trying (and says so).
const MAX_ATTACH_TRIES: u32 = 3;

impl Service {
    /// Attaches `pid` for `reason` and records it, holding the service lock
    /// only before and after the attach (the backend's attach makes ioctls
    /// on the target's files; they must not stall polls and prescientctl).
    /// The process is held by pidfd from before the attach to after it: if
    /// it exits meanwhile, what was attached is undone. The error is a sentence.
    pub(super) fn attach_pid(&self, pid: i32, reason: Reason) -> Result<(), String> {
        {
            let mut s = self.lock();
            if s.shutting_down {
                return Err(format!("pid {pid}: prescientd is shutting down"));
            }
            if s.attaching.contains(&pid) {
                return Err(format!("pid {pid} is being attached already"));
            }
            s.attaching.push(pid);
        }
        let r = self.attach_unlocked(pid);
        let mut s = self.lock();
        s.attaching.retain(|p| *p != pid);
        let process = match r {
            Ok(p) => p,
            Err(e) => {
                s.daemon.attach_failures += 1;
                return Err(e);
            }
        };
        if s.shutting_down {
            let _ = self.dev.detach_pid(pid);
            return Err(format!("pid {pid}: prescientd is shutting down"));
        }
        tracing::info!(pid, comm = %comm(pid), reason = reason.as_str(), "attached");
        s.attached.insert(
            pid,
            Attachment {
                comm: comm(pid),
                reason,
                process: Some(Arc::new(process)),
            },
        );
        s.failed.remove(&pid);
        Ok(())
    }

    /// The backend's attach of the process that has `pid` now, by pidfd.
    fn attach_unlocked(&self, pid: i32) -> Result<Pidfd, String> {
        let process = Pidfd::open(pid).map_err(|e| format!("pid {pid}: {e}"))?;
        self.dev
            .attach_pid(pid)
            .map_err(|e| attach_error_text(pid, &e))?;
        if !process.alive() {
            // Whatever has the number now was not what we were asked for.
            let _ = self.dev.detach_pid(pid);
            return Err(format!("pid {pid} exited while being attached"));
        }
        Ok(process)
    }

    /// The module answered after being absent (or for the first time):
    /// bring it to the desired state.
    fn on_module_up(&self, s: &mut State) {
        let v = match self.dev.version() {
            Ok(v) => v,
            Err(_) => return,
        };
        s.module = Some(module_info(&v));
        let current = self.dev.params().map(EngineParams::from);
        if current.as_ref().ok() != Some(&s.desired) {
            match self.dev.set_params(&s.desired.into()) {
                Ok(()) => tracing::info!(params = ?s.desired, "parameters applied"),
                Err(e) => tracing::error!("applying parameters to the module: {e}"),
            }
        }
        if s.seen {
            s.daemon.module_reconnects += 1;
            tracing::info!(
                "{} is back (nvidia-uvm {}); parameters re-applied",
                self.dev.needs(),
                control::driver_version_string(v.driver_version)
            );
        }
        s.seen = true;
        s.up = true;
    }

    /// One statistics poll, and the reconciliation that follows from it.
    pub(super) fn poll(&self) {
        let (again, raw) = {
            let mut s = self.lock();
            if s.shutting_down {
                return;
            }
            s.daemon.polls += 1;
            match self.dev.stats() {
                Ok(raw) => (self.on_stats(&mut s, &raw), Some(raw)),
                Err(e) => {
                    self.on_poll_error(&mut s, e);
                    (Vec::new(), None)
                }
            }
        };
        if let Some(raw) = raw {
            self.dev.assign_gpus(&raw);
        }
        for (pid, reason) in again {
            if let Err(e) = self.attach_pid(pid, reason) {
                tracing::warn!("re-attaching: {e}");
            }
        }
    }

    /// A poll answered: the module (back) up, our attachments reconciled
    /// with the processes it reports. Returns ours to attach again: those
    /// the backend lost (a module reload) whose very process still runs.
    fn on_stats(&self, s: &mut State, raw: &prescient_uapi::Stats) -> Vec<(i32, Reason)> {
        if !s.up {
            self.on_module_up(s);
        }
        s.last_poll_error = None;
        let stats = Stats::from_abi(raw, self.uptime());
        // Ours that the module no longer has: exited, or lost in a reload.
        let lost: Vec<(i32, Attachment)> = s
            .attached
            .iter()
            .filter(|(pid, _)| !stats.processes.iter().any(|p| p.pid == **pid))
            .map(|(pid, a)| (*pid, a.clone()))
            .collect();
        let mut again = Vec::new();
        for (pid, a) in lost {
            s.attached.remove(&pid);
            if a.reason.ours() && a.process.as_ref().is_some_and(|p| p.alive()) {
                again.push((pid, a.reason));
            } else {
                let by = self.dev.title();
                tracing::info!(pid, "process exited; {by} detached it");
            }
        }
        for p in &stats.processes {
            if s.attaching.contains(&p.pid) {
                continue;
            }
            s.attached.entry(p.pid).or_insert_with(|| Attachment {
                comm: comm(p.pid),
                reason: Reason::Other,
                process: None,
            });
        }
        s.stats = stats;
        again
    }

    /// A poll failed: a missing backend is waited for (or ends the
    /// service), a permission problem ends it, anything else is reported.
    #[cold]
    fn on_poll_error(&self, s: &mut State, e: DevError) {
        match e {
            e @ DevError::Missing { .. } => {
                s.daemon.poll_errors += 1;
                if s.up || !s.seen && s.last_poll_error.is_none() {
                    tracing::warn!(
                        "{}: {e}; {}",
                        self.dev.path().display(),
                        match s.cfg.on_missing_module {
                            OnMissingModule::Wait =>
                                "waiting for it (on_missing_module = \"wait\")",
                            OnMissingModule::Exit => "exiting (on_missing_module = \"exit\")",
                        }
                    );
                }
                s.last_poll_error = Some(e.to_string());
                s.up = false;
                s.stats.backend_up = false;
                if s.cfg.on_missing_module == OnMissingModule::Exit {
                    self.shutdown(EXIT_UNAVAILABLE);
                }
            }
            e @ DevError::Permission(_) => {
                tracing::error!("{}: {e}", self.dev.path().display());
                s.up = false;
                self.shutdown(EXIT_NOPERM);
            }
            e => {
                s.daemon.poll_errors += 1;
                let msg = e.to_string();
                if s.last_poll_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!("polling {}: {msg}", self.dev.path().display());
                }
                s.last_poll_error = Some(msg);
            }
        }
    }

    /// Attaches processes found by pattern or because they use the GPU.
    pub(super) fn scan(&self) {
        let (all, patterns, up) = {
            let s = self.lock();
            (s.cfg.attach.all_uvm_processes, s.patterns.clone(), s.up)
        };
        if !up || (!all && patterns.is_empty()) {
            return;
        }
        for pid in uvm_processes() {
            {
                let s = self.lock();
                if s.shutting_down {
                    return;
                }
                if s.attached.contains_key(&pid)
                    || s.failed.get(&pid).copied().unwrap_or(0) >= MAX_ATTACH_TRIES
                {
                    continue;
                }
            }
            let reason = if all {
                Reason::All
            } else {
                match cmdline(pid) {
                    Some(c) if patterns.iter().any(|p| p.is_match(&c)) => Reason::Pattern,
                    _ => continue,
                }
            };
            if let Err(e) = self.attach_pid(pid, reason) {
                let mut s = self.lock();
                let n = s.failed.entry(pid).or_insert(0);
                *n += 1;
                if *n == MAX_ATTACH_TRIES {
                    tracing::warn!("giving up on attaching: {e}");
                } else {
                    tracing::debug!("attach failed, will retry: {e}");
                }
            }
        }
        // Forget failures of processes that are gone.
        self.lock().failed.retain(|pid, _| process_exists(*pid));
    }

    /// Hands the per-GPU sizes of `b` to the backend, checked against the
    /// GPUs NVML sees. One size for every GPU needs nothing more (it is the
    /// parameters' budget), so the module backend is asked only for
    /// per-GPU sizes, which it refuses. The error is the sentence to print
    /// after the key or flag.
    pub(super) fn apply_gpu_budget(&self, b: &prescient_units::GpuBudget) -> Result<(), String> {
        if b.gpus.is_empty() && self.dev.kind() == "module" {
            return Ok(());
        }
        let gpus = crate::gpu::uuid_indices(crate::gpu::NVML_LIBRARY);
        crate::gpu::check_budget(b, &gpus)?;
        self.dev
            .set_gpu_budgets(b, &gpus.unwrap_or_default())
            .map_err(|e| e.to_string())
    }

    /// A reload's per-GPU budgets to the backend; false (counted, said)
    /// when refused.
    fn reload_gpu_budget(&self, s: &mut State, new: &Config) -> bool {
        match self.apply_gpu_budget(&new.engine.residency_budget) {
            Ok(()) => true,
            Err(e) => {
                s.daemon.reloads_failed += 1;
                tracing::error!("config reload refused, keeping the running configuration: engine.residency_budget: {e}");
                false
            }
        }
    }

    /// SIGHUP: the new file replaces the running config only if it is valid
    /// and its parameters are accepted by the module.
    pub(super) fn reload(&self) {
        let new = match Config::load(&self.config_path) {
            Ok(c) => c,
            Err(e) => {
                self.lock().daemon.reloads_failed += 1;
                tracing::error!("config reload refused, keeping the running configuration: {e}");
                return;
            }
        };
        if let Some((i, pid)) = new
            .attach
            .pids
            .iter()
            .enumerate()
            .find(|(_, p)| !process_exists(**p))
        {
            self.lock().daemon.reloads_failed += 1;
            tracing::error!(
                "config reload refused, keeping the running configuration: attach.pids[{i}]: process {pid} does not exist"
            );
            return;
        }
        let mut s = self.lock();
        for (what, changed) in [
            ("device", new.device != s.cfg.device),
            ("control", new.control != s.cfg.control),
            ("metrics", new.metrics != s.cfg.metrics),
        ] {
            if changed {
                tracing::warn!(
                    "config reload: [{what}] changed; it takes effect at the next restart"
                );
            }
        }
        if !self.reload_gpu_budget(&mut s, &new) {
            return;
        }
        let params = super::provenance::engine_params(&new, &self.gpu);
        if params != s.desired && s.up {
            if let Err(e) = self.dev.set_params(&params.into()) {
                s.daemon.reloads_failed += 1;
                tracing::error!("config reload refused by the module, nothing changed: {e}");
                return;
            }
            tracing::info!(?params, "config reload: parameters applied");
        }
        s.desired = params;
        s.patterns = compile(&new);
        // Pids the config no longer names are detached; new ones attached.
        let gone: Vec<i32> = s
            .attached
            .iter()
            .filter(|(pid, a)| a.reason == Reason::Config && !new.attach.pids.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in gone {
            let _ = self.dev.detach_pid(pid);
            s.attached.remove(&pid);
        }
        let pids: Vec<i32> = new
            .attach
            .pids
            .iter()
            .copied()
            .filter(|p| !s.attached.contains_key(p))
            .collect();
        let up = s.up;
        s.cfg = new;
        s.daemon.reloads_ok += 1;
        drop(s);
        if up {
            for pid in pids {
                if let Err(e) = self.attach_pid(pid, Reason::Config) {
                    tracing::error!("config reload: attach.pids: {e}");
                }
            }
        }
        tracing::info!("config reloaded from {}", self.config_path.display());
    }

    /// Starts shutdown: detaches what the daemon attached and stops all
    /// further attaching. The module keeps its parameters.
    pub(super) fn detach_ours(&self) {
        let mut s = self.lock();
        s.shutting_down = true;
        let ours: Vec<i32> = s
            .attached
            .iter()
            .filter(|(_, a)| a.reason.ours())
            .map(|(p, _)| *p)
            .collect();
        for pid in ours {
            match self.dev.detach_pid(pid) {
                Ok(()) => tracing::info!(pid, "detached"),
                Err(e) => tracing::debug!(pid, "detach at shutdown: {e}"),
            }
            s.attached.remove(&pid);
        }
    }
}

/// The config's command-line patterns, compiled.
pub(super) fn compile(c: &Config) -> Vec<regex::Regex> {
    // Validated when the config was loaded.
    c.attach
        .cmdline_patterns
        .iter()
        .filter_map(|p| regex::Regex::new(p).ok())
        .collect()
}

/// Applies the config's parameters and pids; on any failure restores the
/// module's previous parameters and undoes the attachments made.
pub(super) fn apply_at_start(svc: &Service, cfg: &Config) -> Result<(), i32> {
    let s = svc.lock();
    let before = svc.dev.params().ok();
    let want = super::provenance::engine_params(cfg, &svc.gpu);
    let restore = |s: &mut State| {
        let ours: Vec<i32> = s.attached.keys().copied().collect();
        for pid in ours {
            let _ = svc.dev.detach_pid(pid);
        }
        s.attached.clear();
        if let Some(b) = before {
            let _ = svc.dev.set_params(&b);
        }
    };
    if before.map(EngineParams::from) != Some(want) {
        match svc.dev.set_params(&want.into()) {
            Ok(()) => tracing::info!(params = ?want, "parameters applied"),
            Err(e @ DevError::Permission(_)) => {
                tracing::error!("{}: SET_PARAMS: {e}", cfg.device.display());
                return Err(EXIT_NOPERM);
            }
            Err(e) => {
                tracing::error!("[engine]: the module refused the parameters: {e}");
                return Err(EXIT_CONFIG);
            }
        }
    }
    let mut s = s;
    if let Err(e) = svc.apply_gpu_budget(&cfg.engine.residency_budget) {
        tracing::error!("engine.residency_budget: {e}");
        restore(&mut s);
        return Err(EXIT_CONFIG);
    }
    drop(s);
    for (i, pid) in cfg.attach.pids.iter().enumerate() {
        if let Err(e) = svc.attach_pid(*pid, Reason::Config) {
            tracing::error!("config: attach.pids[{i}]: {e}; undoing what was applied");
            restore(&mut svc.lock());
            return Err(EXIT_FAILURE);
        }
    }
    let mut s = svc.lock();
    if let Ok(v) = svc.dev.version() {
        s.module = Some(module_info(&v));
    }
    s.up = true;
    s.seen = true;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{service, Forgetful};
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_lost_attachment_is_reattached_only_if_it_is_the_same_process() {
        // Review finding 14: any process that had the pid was re-attached.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let gone_fd = Pidfd::open(gone.id() as i32).unwrap();
        gone.wait().unwrap();
        let mut live = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let live_pid = live.id() as i32;
        // Our own pid stands for a number reused by another process: it
        // exists, but the process attached under it has exited.
        let reused = std::process::id() as i32;
        let at = |p: Pidfd| Attachment {
            comm: String::new(),
            reason: Reason::Ctl,
            process: Some(Arc::new(p)),
        };
        let dev = Arc::new(Forgetful::default());
        let svc = service(
            dev.clone(),
            BTreeMap::from([
                (reused, at(gone_fd)),
                (live_pid, at(Pidfd::open(live_pid).unwrap())),
            ]),
        );
        svc.poll();
        assert_eq!(*dev.attached.lock().unwrap(), vec![live_pid]);
        let s = svc.lock();
        assert!(s.attached.contains_key(&live_pid));
        assert!(!s.attached.contains_key(&reused));
        drop(s);
        live.kill().unwrap();
        live.wait().unwrap();
    }
}
