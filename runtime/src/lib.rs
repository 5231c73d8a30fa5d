//! Prescient's CUDA runtime: a library `prescientctl run` preloads
//! (LD_PRELOAD) into an unmodified CUDA job, PyTorch included.
//!
//! - It replaces the process's `dlsym` (entry.rs), because CUDA's
//!   libraries get every driver entry point through
//!   `dlsym(libcuda, "cuGetProcAddress_v2")` and that function; it wraps
//!   `cuGetProcAddress` of every version (wrap.rs) and hands out its own
//!   wrappers for a few entry points, keyed on the real function's address
//!   so that every ABI version and per-thread-stream variant is told apart;
//!   every other name passes through exactly as asked.
//! - Device allocations become managed, and `cuMemGetInfo` reports the
//!   residency budget (alloc.rs): the current context's device's own when
//!   the budget names GPUs by UUID (device.rs).
//! - Every kernel launch gets an execution id (exec_id.rs), written in
//!   stream order into the stream's slot of a shared page the daemon reads
//!   (marker.rs; the format is prescient_uapi::execpage).
//! - While prescientd asks, each launch's id, stream and managed footprint
//!   (the memory its pointer arguments point into) go into a launch ring,
//!   in launch order, before the GPU runs them (footprint/).
//! - PyTorch's caching allocator reports its frees and allocations through
//!   a small helper the launcher loads; they become dead and alive marks
//!   for prescientd, fenced so that no discard hits live memory (marks/).
//!
//! The runtime never changes what a kernel computes: it adds one 8-byte
//! write to pinned host memory per launch, and managed memory holds the
//! same data as device memory.

pub mod advice;
pub mod alloc;
pub mod config;
pub mod device;
pub mod driver;
pub mod entry;
pub mod exec_id;
pub mod footprint;
pub mod launch;
pub mod marker;
pub mod marks;
pub mod page;
pub mod params;
pub mod stats;
pub mod wrap;
