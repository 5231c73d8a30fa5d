//! The device of the calling thread's current context, by UUID: what a
//! per-GPU budget names (`cuMemGetInfo` answers for that device, so the
//! budget it reports must be that device's).

use crate::driver::{self, CuResult, CUDA_SUCCESS};
use crate::marks::fence::CTX_GET_DEVICE_VERSION;
use std::ffi::c_int;
use std::sync::OnceLock;

/// The version whose `cuDeviceGetUuid` is `cuDeviceGetUuid_v2` (CUDA
/// 11.4; the driver API reference: for a device in MIG mode, the MIG
/// instance's UUID, which a budget names as `MIG-...`). Same ABI as the
/// first version.
const DEVICE_GET_UUID_VERSION: c_int = 11040;

struct Calls {
    /// `cuCtxGetDevice(CUdevice *)`, asked for at 2.0: at 13.0 the driver
    /// hands out `cuCtxGetDevice_v2`, which takes a context as well.
    ctx_get_device: unsafe extern "C" fn(*mut c_int) -> CuResult,
    /// `cuDeviceGetUuid_v2(CUuuid *, CUdevice)`; `CUuuid` is 16 bytes.
    device_get_uuid: unsafe extern "C" fn(*mut [u8; 16], c_int) -> CuResult,
}

fn resolve() -> Option<Calls> {
    let ctx = driver::resolve_at(c"cuCtxGetDevice", CTX_GET_DEVICE_VERSION, 0);
    let uuid = driver::resolve_at(c"cuDeviceGetUuid", DEVICE_GET_UUID_VERSION, 0);
    if ctx.is_null() || uuid.is_null() {
        return None;
    }
    // SAFETY: the driver's entry points for these names at these versions,
    // whose ABIs are the fields' types (cuda.h).
    unsafe {
        Some(Calls {
            ctx_get_device: driver::cast(ctx),
            device_get_uuid: driver::cast(uuid),
        })
    }
}

static CALLS: OnceLock<Option<Calls>> = OnceLock::new();

/// The UUID of the current context's device; None with no current
/// context, or a driver that cannot say.
pub fn current_uuid() -> Option<[u8; 16]> {
    driver::calls()?;
    let c = CALLS.get_or_init(resolve).as_ref()?;
    let mut dev: c_int = -1;
    // SAFETY: a local out-parameter.
    if unsafe { (c.ctx_get_device)(&mut dev) } != CUDA_SUCCESS {
        return None;
    }
    let mut uuid = [0u8; 16];
    // SAFETY: a local 16-byte out-parameter (CUuuid) and the device the
    // driver just named.
    (unsafe { (c.device_get_uuid)(&mut uuid, dev) } == CUDA_SUCCESS).then_some(uuid)
}
