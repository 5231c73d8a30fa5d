//! The Kubernetes pod of a host process, read from /proc, for the `pod`,
//! `namespace` and `container` labels of /metrics (dcgm-exporter's names).
//!
//! The kubelet puts each container in a cgroup whose path holds the pod's
//! UID and the container's ID (`.../kubepods-burstable-pod<UID>.slice/
//! cri-containerd-<ID>.scope` with the systemd driver, `/kubepods/burstable/
//! pod<UID>/<ID>` with cgroupfs). The pod's name is the container's
//! hostname (`HOSTNAME` in its environment, which the kubelet sets to the
//! pod name unless the spec overrides it) and its namespace is the service
//! account file mounted into it. Where a piece cannot be read the label is
//! empty, which Prometheus treats as absent. The container's *name* is not
//! in /proc: `container` carries the container ID's first 12 characters, as
//! `crictl ps` prints it.

use std::path::Path;

/// A process's pod, as far as /proc shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pod {
    pub pod: String,
    pub namespace: String,
    pub container: String,
}

/// The pod of `pid` under `proc_root` (normally "/proc"); None outside
/// Kubernetes.
pub fn pod_of(proc_root: &Path, pid: i32) -> Option<Pod> {
    let dir = proc_root.join(pid.to_string());
    let cgroup = std::fs::read_to_string(dir.join("cgroup")).ok()?;
    let container = container_id(&cgroup)?;
    let pod = std::fs::read(dir.join("environ"))
        .ok()
        .and_then(|env| {
            env.split(|b| *b == 0)
                .find_map(|kv| kv.strip_prefix(b"HOSTNAME="))
                .map(|v| String::from_utf8_lossy(v).into_owned())
        })
        .unwrap_or_default();
    let namespace = std::fs::read_to_string(
        dir.join("root/var/run/secrets/kubernetes.io/serviceaccount/namespace"),
    )
    .map(|s| s.trim().to_string())
    .unwrap_or_default();
    Some(Pod {
        pod,
        namespace,
        container,
    })
}

/// The container ID (12 characters) of a kubepods cgroup, if the process
/// is in one.
fn container_id(cgroup: &str) -> Option<String> {
    let path = cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find(|p| p.contains("kubepods"))?;
    let last = path.rsplit('/').next()?;
    // cri-containerd-<id>.scope, crio-<id>.scope, docker-<id>.scope, or <id>.
    let id = last
        .trim_end_matches(".scope")
        .rsplit('-')
        .next()
        .unwrap_or(last);
    (id.len() >= 12 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id[..12].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_from_both_cgroup_drivers() {
        let systemd = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_5e6f.slice/cri-containerd-0123456789abcdef0123456789abcdef.scope\n";
        assert_eq!(container_id(systemd).as_deref(), Some("0123456789ab"));
        let cgroupfs = "12:memory:/kubepods/besteffort/pod1a2b/fedcba9876543210fedcba\n0::/\n";
        assert_eq!(container_id(cgroupfs).as_deref(), Some("fedcba987654"));
        assert_eq!(
            container_id("0::/user.slice/user-1000.slice/session-2.scope\n"),
            None
        );
    }

    #[test]
    fn a_pod_read_from_a_proc_tree() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("77");
        std::fs::create_dir_all(p.join("root/var/run/secrets/kubernetes.io/serviceaccount"))
            .unwrap();
        std::fs::write(
            p.join("cgroup"),
            "0::/kubepods.slice/kubepods-pod9.slice/cri-containerd-aaaabbbbccccddddeeee.scope\n",
        )
        .unwrap();
        std::fs::write(p.join("environ"), b"PATH=/bin\0HOSTNAME=train-0\0").unwrap();
        std::fs::write(
            p.join("root/var/run/secrets/kubernetes.io/serviceaccount/namespace"),
            "ml\n",
        )
        .unwrap();
        assert_eq!(
            pod_of(d.path(), 77),
            Some(Pod {
                pod: "train-0".into(),
                namespace: "ml".into(),
                container: "aaaabbbbcccc".into()
            })
        );
        // Not in Kubernetes: no labels at all.
        std::fs::write(p.join("cgroup"), "0::/system.slice/x.service\n").unwrap();
        assert_eq!(pod_of(d.path(), 77), None);
        assert_eq!(pod_of(d.path(), 78), None);
    }
}
