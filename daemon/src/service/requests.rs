//! The control socket's requests, one function each (as the misc-device
//! sample has one method per ioctl); `handle` only checks the peer and
//! dispatches.

use super::procfs::{comm, process_exists};
use super::state::{load_hint, module_info, Reason, Service, State, VERSION};
use crate::backend::{DevError, MarkFrom};
use crate::socket::{error, Connection, Peer};
use crate::userspace::marks::Owner;
use prescient_uapi::control::{
    self, EngineParams, ModuleInfo, ParamChanges, Reply, Request, Response, Stats, UserspaceInfo,
    VersionInfo,
};
use std::sync::Arc;

/// A backend error as the reply class prescientctl acts on.
fn dev_error(e: &DevError) -> Response {
    match e {
        DevError::Missing { .. } => error("unavailable", e.to_string()),
        DevError::Permission(_) => error("permission", e.to_string()),
        DevError::Refused { .. } | DevError::Declined { .. } => error("invalid", e.to_string()),
    }
}

/// One prescientctl (or allocator) connection to the control socket: its
/// peer, and the dead marks it holds (revoked when it closes).
pub(super) struct ControlConnection {
    pub(super) svc: Arc<Service>,
    pub(super) peer: Peer,
    pub(super) owner: Arc<Owner>,
}

impl Connection for ControlConnection {
    fn handle(&self, req: Request) -> Response {
        self.svc.handle(req, &self.peer, &self.owner)
    }

    /// A job (`prescientctl run`'s runtime) whose dead marks this
    /// connection holds is quiet whenever it frees nothing (an evaluation
    /// phase, a checkpoint): closing it for that would revoke them.
    fn may_stay_quiet(&self) -> bool {
        self.owner.holds_dead()
    }

    fn closed(&self) {
        let n = self.owner.close();
        if n > 0 {
            tracing::info!(
                pid = ?self.peer.pid,
                ranges = n,
                "control connection closed holding dead marks: revoked (alive again)"
            );
        }
    }
}

impl Service {
    /// Answers one request from `peer` on the connection `owner`.
    pub(super) fn handle(&self, req: Request, peer: &Peer, owner: &Arc<Owner>) -> Response {
        if let Request::Mark {
            dead,
            ranges,
            no_populate,
        } = req
        {
            // Not under the service lock: an alive mark waits for the
            // process's backend thread.
            return self.mark(peer, owner, dead, &ranges, !no_populate);
        }
        if req.mutates() && peer.uid != Some(0) {
            return error(
                "permission",
                format!(
                    "this request changes prescient's state and needs root (your uid is {})",
                    peer.uid
                        .map(|u| u.to_string())
                        .unwrap_or_else(|| "unknown".into())
                ),
            );
        }
        if let Request::Attach { pid } = req {
            // Not under the service lock (attach_pid takes it around the attach).
            return self.attach(pid);
        }
        let mut s = self.lock();
        match req {
            Request::Version => self.version(),
            Request::Status => self.status(&s),
            Request::Stats => self.stats(),
            Request::GetParams => self.get_params(&s),
            Request::SetParams { changes } => self.set_params(&mut s, &changes),
            Request::SetGpuBudget { budget } => self.set_gpu_budget(&mut s, &budget),
            Request::Reset => self.reset(),
            Request::Attach { .. } => error("internal", "attach handled above"),
            Request::Mark { .. } => error("internal", "mark handled above"),
            Request::Detach { pid } => self.detach(&mut s, pid),
        }
    }

    fn version(&self) -> Response {
        let (module, userspace) =
            self.backend_info(self.dev.version().ok().map(|v| module_info(&v)));
        Response::Ok(Reply::Version(VersionInfo {
            daemon: VERSION.into(),
            protocol: control::PROTOCOL_VERSION,
            module,
            backend: self.dev.kind().into(),
            userspace,
        }))
    }

    /// The backend's versions as the reply names them: under the
    /// user-space backend there is no module to report, only the driver it
    /// drives.
    fn backend_info(
        &self,
        info: Option<ModuleInfo>,
    ) -> (Option<ModuleInfo>, Option<UserspaceInfo>) {
        match (self.dev.kind(), info) {
            ("userspace", Some(m)) => (
                None,
                Some(UserspaceInfo {
                    driver_version: m.driver_version,
                    enabled: m.enabled,
                    max_processes: m.max_processes,
                }),
            ),
            ("userspace", None) => (None, None),
            (_, m) => (m, None),
        }
    }

    fn status(&self, s: &State) -> Response {
        let (module, userspace) = self.backend_info(if s.up { s.module.clone() } else { None });
        Response::Ok(Reply::Status(control::Status {
            daemon_version: VERSION.into(),
            backend: self.dev.kind().into(),
            backend_up: s.up,
            module,
            userspace,
            params: s.desired,
            module_params: self.dev.params().ok().map(EngineParams::from),
            config_path: self.config_path.display().to_string(),
            uptime_s: self.uptime(),
            attached: s.process_infos(),
            gpu: self.gpu.device().map(crate::gpu::info),
            settings: super::provenance::settings(&s.cfg, &s.desired, &self.gpu),
            gpu_budget: match &s.cfg.engine.residency_budget.gpus {
                g if g.is_empty() => String::new(),
                g => prescient_units::GpuBudget {
                    each: None,
                    gpus: g.clone(),
                }
                .to_string(),
            },
            gpus: self.dev.gpu_lanes(),
        }))
    }

    /// The backend's counters; a backend that is not loaded is a state
    /// (as `status` and /metrics show it), not a failure: the reply says
    /// why there are no counters and what to do.
    fn stats(&self) -> Response {
        let backend = self.dev.kind().to_string();
        match self.dev.stats() {
            Ok(raw) => Response::Ok(Reply::Stats(Stats {
                backend,
                gpus: self.dev.gpu_lanes(),
                ..Stats::from_abi(&raw, self.uptime())
            })),
            Err(e @ DevError::Missing { .. }) => Response::Ok(Reply::Stats(Stats {
                at_s: self.uptime(),
                unavailable: Some(format!(
                    "{e}: no counters yet. {}",
                    load_hint(self.dev.kind(), &self.config_path)
                )),
                backend,
                ..Stats::default()
            })),
            Err(e) => dev_error(&e),
        }
    }

    fn get_params(&self, s: &State) -> Response {
        match self.dev.params() {
            Ok(p) => Response::Ok(Reply::Params(EngineParams::from(p))),
            Err(DevError::Missing { .. }) => Response::Ok(Reply::Params(s.desired)),
            Err(e) => dev_error(&e),
        }
    }

    fn set_params(&self, s: &mut State, changes: &ParamChanges) -> Response {
        if changes.is_empty() {
            return error("invalid", "nothing to set");
        }
        let old = self
            .dev
            .params()
            .map(EngineParams::from)
            .unwrap_or(s.desired);
        let new = changes.apply(&old);
        if let Err((key, msg)) = new.check() {
            return error("invalid", format!("{key}: {msg}"));
        }
        if !s.up {
            return error(
                "unavailable",
                format!("{} is not loaded: nothing changed (the daemon applies its config when it appears)", self.dev.needs()),
            );
        }
        match self.dev.set_params(&new.into()) {
            Ok(()) => {
                tracing::info!(?old, ?new, "parameters set by prescientctl");
                s.desired = new;
                Response::Ok(Reply::ParamsChanged { old, new })
            }
            Err(e) => dev_error(&e),
        }
    }

    /// A budget in the budget grammar: its per-GPU sizes to the backend
    /// (for processes attached from now on), its each-GPU size as
    /// `set-params` sets the budget.
    fn set_gpu_budget(&self, s: &mut State, text: &str) -> Response {
        let b = match prescient_units::parse_budget(text) {
            Ok(b) => b,
            Err(e) => return error("invalid", format!("budget: {e}")),
        };
        if let Err(e) = self.apply_gpu_budget(&b) {
            return error("invalid", format!("budget: {e}"));
        }
        tracing::info!(budget = %b, "per-GPU budgets set by prescientctl");
        s.cfg.engine.residency_budget.gpus = b.gpus.clone();
        match b.each {
            Some(each) => self.set_params(
                s,
                &ParamChanges {
                    residency_budget_bytes: Some(each),
                    ..Default::default()
                },
            ),
            None => Response::Ok(Reply::Done {
                message: format!("per-GPU budgets {b} (processes attached from now on)"),
            }),
        }
    }

    fn reset(&self) -> Response {
        match self.dev.reset_tables() {
            Ok(()) => {
                tracing::info!("tables reset by prescientctl");
                Response::Ok(Reply::Done {
                    message: "correlation tables cleared".into(),
                })
            }
            Err(e) => dev_error(&e),
        }
    }

    fn attach(&self, pid: i32) -> Response {
        if pid <= 0 || !process_exists(pid) {
            return error("not-found", format!("pid {pid}: no such process"));
        }
        if !self.lock().up {
            return error("unavailable", format!("{} is not loaded", self.dev.needs()));
        }
        match self.attach_pid(pid, Reason::Ctl) {
            Ok(()) => Response::Ok(Reply::Done {
                message: format!("attached pid {pid} ({})", comm(pid)),
            }),
            Err(m) => error("invalid", m),
        }
    }

    fn detach(&self, s: &mut State, pid: i32) -> Response {
        if pid <= 0 {
            return error("not-found", format!("pid {pid}: no such process"));
        }
        match self.dev.detach_pid(pid) {
            Ok(()) => {
                s.attached.remove(&pid);
                tracing::info!(pid, "detached by prescientctl");
                Response::Ok(Reply::Done {
                    message: format!("detached pid {pid}"),
                })
            }
            Err(e) if matches!(e.errno(), Some(libc::ENOENT | libc::ESRCH)) => {
                s.attached.remove(&pid);
                error("not-found", format!("pid {pid} is not attached"))
            }
            Err(e) => dev_error(&e),
        }
    }

    /// A process's own dead/alive marks (marks.rs): `peer` must be the
    /// process they are about, by pidfd (a connection outliving its process
    /// marks nothing), and own it.
    fn mark(
        &self,
        peer: &Peer,
        owner: &Arc<Owner>,
        dead: bool,
        ranges: &[[u64; 2]],
        populate: bool,
    ) -> Response {
        if peer.live_process().is_none() {
            let m = crate::userspace::marks::no_process(peer);
            tracing::warn!(pid = ?peer.pid, uid = ?peer.uid, "{m}");
            return error("permission", m);
        }
        let blocks = match crate::userspace::marks::block_ranges(dead, ranges) {
            Ok(b) => b,
            Err(m) => return error("invalid", format!("mark: {m}")),
        };
        let m = MarkFrom {
            peer,
            owner,
            dead,
            blocks,
            populate,
        };
        match self.dev.mark(m) {
            Ok(a) => Response::Ok(Reply::Marked(a)),
            // The module is not loaded: nothing can discard (not "not-found",
            // which says the process is not attached).
            Err(e @ DevError::Missing { .. }) => dev_error(&e),
            Err(e) if e.errno() == Some(libc::EBUSY) => error("busy", format!("mark: {e}")),
            Err(e) if e.errno() == Some(libc::EPERM) => {
                tracing::warn!(pid = ?peer.pid, uid = ?peer.uid, "{e}");
                error("permission", format!("{e}"))
            }
            Err(e) if e.errno() == Some(libc::ENOENT) => error("not-found", format!("mark: {e}")),
            Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => {
                error("unavailable", format!("mark: {e}"))
            }
            Err(e) => dev_error(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{service, Forgetful};
    use super::*;
    use std::collections::BTreeMap;

    /// The service of `dev` after its first poll (the path that records
    /// the backend's versions).
    fn polled(dev: Forgetful) -> Service {
        let svc = service(Arc::new(dev), BTreeMap::new());
        svc.lock().up = false;
        svc.poll();
        svc
    }

    fn status(svc: &Service) -> control::Status {
        match svc.status(&svc.lock()) {
            Response::Ok(Reply::Status(s)) => s,
            r => panic!("{r:?}"),
        }
    }

    /// Issue 18: under the user-space backend, status and version named a
    /// prescient.ko with ABI 2 that was never loaded.
    #[test]
    fn the_userspace_backend_reports_its_driver_and_no_module() {
        let svc = polled(Forgetful {
            userspace: true,
            ..Default::default()
        });
        let s = status(&svc);
        assert_eq!((s.backend.as_str(), s.backend_up), ("userspace", true));
        assert_eq!(s.module, None);
        let u = s.userspace.expect("the driver the backend runs on");
        assert_eq!((u.driver_version.as_str(), u.enabled), ("580.95.05", true));
        let Response::Ok(Reply::Version(v)) = svc.version() else {
            panic!()
        };
        assert_eq!((v.module, v.backend.as_str()), (None, "userspace"));
        assert_eq!(
            v.userspace.map(|u| u.driver_version).as_deref(),
            Some("580.95.05")
        );
    }

    #[test]
    fn the_module_backend_reports_the_module_and_no_userspace_driver() {
        let svc = polled(Forgetful::default());
        let s = status(&svc);
        assert_eq!((s.backend.as_str(), s.backend_up), ("module", true));
        let m = s.module.expect("the module's versions");
        assert_eq!(
            (m.abi_version, m.driver_version.as_str()),
            (prescient_uapi::ABI_VERSION, "580.95.05")
        );
        assert_eq!(s.userspace, None);
        let Response::Ok(Reply::Stats(st)) = svc.stats() else {
            panic!()
        };
        assert_eq!((st.backend.as_str(), st.unavailable), ("module", None));
    }

    /// A process's mark while prescient.ko is unloaded is "unavailable",
    /// the reply the runtime pauses its dead marks on and sends again
    /// after (runtime/src/marks/pause.rs; its tests read this very line).
    #[test]
    fn a_mark_while_the_module_is_gone_is_unavailable() {
        let svc = polled(Forgetful {
            missing: true,
            ..Default::default()
        });
        let me = std::process::id() as i32;
        let peer = Peer {
            uid: Some(0),
            pid: Some(me),
            process: Some(Arc::new(crate::pidfd::Pidfd::open(me).unwrap())),
        };
        let r = svc.mark(&peer, &Arc::default(), true, &[[0, 2 << 20]], true);
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(
            line,
            r#"{"error":{"kind":"unavailable","message":"prescient.ko is not loaded (No such file or directory (os error 2))"}}"#
        );
    }

    /// Issue 18: `stats` without the backend was an "unavailable" error
    /// (prescientctl exit 69) while `status` answered. Now a reply saying
    /// why and what to do, in the backend's own terms.
    #[test]
    fn stats_without_the_backend_say_why_and_what_to_do() {
        for (userspace, says) in [
            (
                false,
                [
                    "prescient.ko is not loaded",
                    "modprobe prescient",
                    "backend = \"userspace\" in /etc/prescient/prescientd.toml",
                ],
            ),
            (
                true,
                [
                    "nvidia_uvm is not loaded",
                    "modprobe nvidia-uvm",
                    "no counters yet",
                ],
            ),
        ] {
            let svc = polled(Forgetful {
                userspace,
                missing: true,
                ..Default::default()
            });
            let s = status(&svc);
            assert!(
                !s.backend_up && s.module.is_none() && s.userspace.is_none(),
                "{s:?}"
            );
            let Response::Ok(Reply::Stats(st)) = svc.stats() else {
                panic!()
            };
            assert!(!st.backend_up);
            let why = st.unavailable.expect("a reason");
            assert!(!why.contains('\n'), "{why}");
            for w in says {
                assert!(why.contains(w), "{w:?} not in {why}");
            }
        }
    }
}
