//! What the runtime's integration tests share: where cargo put the cdylib.

use std::path::PathBuf;

/// The runtime's cdylib, built beside this test's binary (in deps/ or the
/// profile folder above it, as cargo lays them out).
pub fn runtime_so() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let so = deps.join("libprescient_runtime.so");
    let so = if so.exists() {
        so
    } else {
        deps.parent().unwrap().join("libprescient_runtime.so")
    };
    assert!(so.exists(), "{} not built", so.display());
    so
}
