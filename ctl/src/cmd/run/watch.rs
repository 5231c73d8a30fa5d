//! Finding the command's CUDA processes: the command and its descendants
//! (torchrun's workers, DataLoader workers) that have the GPU's unified
//! memory device open, each handed to prescientd once.

use std::collections::{BTreeMap, BTreeSet};

/// Parent pid of every process (from /proc/PID/stat).
fn parents() -> BTreeMap<i32, i32> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        if let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        {
            if let Ok(ppid) = ppid.parse() {
                out.insert(pid, ppid);
            }
        }
    }
    out
}

/// `root` and every process descending from it.
pub fn descendants(root: i32, parents: &BTreeMap<i32, i32>) -> BTreeSet<i32> {
    let mut set = BTreeSet::from([root]);
    loop {
        let before = set.len();
        for (&pid, ppid) in parents {
            if set.contains(ppid) {
                set.insert(pid);
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

/// True if `pid` has /dev/nvidia-uvm open (CUDA opens it at initialisation).
pub fn uses_gpu(pid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    dir.flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "/dev/nvidia-uvm"))
}

/// True if `pid` has its execution-id page (made by the runtime at its
/// first kernel launch).
pub fn has_exec_page(pid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let name = format!("/memfd:{}", prescient_uapi::execpage::MEMFD_NAME);
    dir.flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with(&name)))
}

/// The command's processes that use the GPU now.
pub fn cuda_processes(root: i32) -> BTreeSet<i32> {
    descendants(root, &parents())
        .into_iter()
        .filter(|&p| uses_gpu(p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_follow_every_generation_and_nothing_else() {
        let p = BTreeMap::from([(10, 1), (11, 10), (12, 11), (13, 1), (14, 12)]);
        assert_eq!(descendants(10, &p), BTreeSet::from([10, 11, 12, 14]));
        assert_eq!(descendants(13, &p), BTreeSet::from([13]));
    }

    #[test]
    fn this_process_is_its_own_descendant_and_uses_no_gpu() {
        let me = std::process::id() as i32;
        assert!(descendants(me, &parents()).contains(&me));
        assert!(!uses_gpu(me));
    }
}
