//! The CUDA driver API as the runtime sees it: the types and constants of
//! cuda.h (CUDA 13.0) it needs, and the driver's own entry points it calls,
//! resolved once through the driver's real `cuGetProcAddress` at a fixed
//! version so that each pointer has the ABI declared here.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

pub type CuResult = c_int;
pub type CuDevicePtr = u64;
pub type CuStream = *mut c_void;
pub type CuFunction = *mut c_void;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
pub const CUDA_ERROR_NOT_FOUND: CuResult = 500;
pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CuResult = 712;
/// `CU_MEM_ATTACH_GLOBAL`: the allocation is accessible from any stream.
pub const CU_MEM_ATTACH_GLOBAL: c_uint = 1;
/// `CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP`.
pub const HOST_REGISTER_FLAGS: c_uint = 0x1 | 0x2;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const PER_THREAD_FLAG: u64 = 2;
/// `CU_STREAM_LEGACY`.
pub const STREAM_LEGACY: usize = 1;
/// `CU_STREAM_PER_THREAD`.
pub const STREAM_PER_THREAD: usize = 2;
/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `..._SIZE`.
pub const LAUNCH_PARAM_END: usize = 0;
pub const LAUNCH_PARAM_BUFFER_POINTER: usize = 1;
pub const LAUNCH_PARAM_BUFFER_SIZE: usize = 2;
/// The version every entry point is requested at: CUDA 13.0, whose cuda.h
/// the declarations here follow.
pub const API_VERSION: c_int = 13000;

/// `CUlaunchConfig` (cuda.h).
#[repr(C)]
pub struct LaunchConfig {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_mem_bytes: c_uint,
    pub stream: CuStream,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

/// `CUmemLocation` (cuda.h): where memory is or goes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemLocation {
    pub kind: c_int,
    pub id: c_int,
}
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const MEM_LOCATION_TYPE_DEVICE: c_int = 1;
/// `cuMemPrefetchAsync` at CUDA 13.0 (cuMemPrefetchAsync_v2, CUDA 12.2 on):
/// the destination is a location, passed by value, and flags must be 0.
pub type PrefetchV2 =
    unsafe extern "C" fn(CuDevicePtr, usize, MemLocation, c_uint, CuStream) -> CuResult;
/// `cuFuncGetParamInfo` / `cuKernelGetParamInfo`: a handle, a parameter's
/// index, and out-pointers for its offset and size.
pub type ParamInfo = unsafe extern "C" fn(CuFunction, usize, *mut usize, *mut usize) -> CuResult;
/// The CUDA version whose `cuCtxGetDevice` ABI is `(CUdevice *)` (13.0
/// made it `cuCtxGetDevice_v2(CUdevice *, CUcontext)`).
pub const CTX_GET_DEVICE_VERSION: c_int = 2000;

/// `cuGetProcAddress` (CUDA 11.3 to 11.8 ABI).
pub type GetProcAddressV1 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
/// `cuGetProcAddress_v2` (CUDA 12.0 on): one more out-parameter, the symbol status.
pub type GetProcAddressV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;

/// The driver entry points the runtime itself calls.
pub struct Calls {
    pub mem_alloc_managed: unsafe extern "C" fn(*mut CuDevicePtr, usize, c_uint) -> CuResult,
    pub mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult,
    pub host_register: unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CuResult,
    pub host_device_pointer:
        unsafe extern "C" fn(*mut CuDevicePtr, *mut c_void, c_uint) -> CuResult,
    pub write_value64: unsafe extern "C" fn(CuStream, CuDevicePtr, u64, c_uint) -> CuResult,
    pub write_value64_ptsz: unsafe extern "C" fn(CuStream, CuDevicePtr, u64, c_uint) -> CuResult,
    pub stream_is_capturing: unsafe extern "C" fn(CuStream, *mut c_int) -> CuResult,
    pub stream_is_capturing_ptsz: unsafe extern "C" fn(CuStream, *mut c_int) -> CuResult,
    /// `cuFuncGetParamInfo` (CUDA 12.4 on): absent from older drivers.
    pub func_param_info: Option<ParamInfo>,
    /// `cuKernelGetParamInfo` (CUDA 12.4 on): the same question for a
    /// `CUkernel`, which CUDA 12's runtime launches in place of a
    /// `CUfunction` and which `cuFuncGetParamInfo` may refuse.
    pub kernel_param_info: Option<ParamInfo>,
    /// For placing fresh allocations (alloc.rs); absent: not placed.
    pub mem_prefetch: Option<PrefetchV2>,
    pub ctx_get_device: Option<unsafe extern "C" fn(*mut c_int) -> CuResult>,
}

/// The real `cuGetProcAddress_v2`, when the driver has one.
pub static REAL_GPA_V2: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
/// The real `cuGetProcAddress` (v1).
pub static REAL_GPA_V1: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Resolves `name` at [`API_VERSION`] through the real `cuGetProcAddress`
/// (v2 if known, else v1); null when the driver has no such entry point.
pub fn resolve(name: &std::ffi::CStr, flags: u64) -> *mut c_void {
    resolve_at(name, API_VERSION, flags)
}

/// Resolves `name` at the CUDA version `version`: the entry point with
/// that version's ABI (CUDA 13.0 gave `cuCtxGetDevice` a second parameter;
/// asking for it at 2.0 gets the one-parameter function).
pub fn resolve_at(name: &std::ffi::CStr, version: c_int, flags: u64) -> *mut c_void {
    let mut out: *mut c_void = std::ptr::null_mut();
    let v2 = REAL_GPA_V2.load(Ordering::Acquire);
    let v1 = REAL_GPA_V1.load(Ordering::Acquire);
    let rc = if !v2.is_null() {
        // SAFETY: REAL_GPA_V2 holds the driver's cuGetProcAddress_v2 (set
        // from dlsym of that exact name); the arguments follow its ABI.
        unsafe {
            let f: GetProcAddressV2 = std::mem::transmute(v2);
            let mut status: c_int = 0;
            f(name.as_ptr(), &mut out, version, flags, &mut status)
        }
    } else if !v1.is_null() {
        // SAFETY: as above, for the v1 ABI.
        unsafe {
            let f: GetProcAddressV1 = std::mem::transmute(v1);
            f(name.as_ptr(), &mut out, version, flags)
        }
    } else {
        CUDA_ERROR_NOT_FOUND
    };
    if rc == CUDA_SUCCESS {
        out
    } else {
        std::ptr::null_mut()
    }
}

/// An entry point's address as its function type.
///
/// # Safety
/// `p` must be a function whose ABI is `F` (a function pointer type).
pub unsafe fn cast<F: Copy>(p: *mut c_void) -> F {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: the caller's promise; F is pointer-sized.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

macro_rules! required {
    ($name:literal, $flags:expr) => {{
        let p = resolve($name, $flags);
        if p.is_null() {
            return None;
        }
        // SAFETY: the driver returned this entry point for this name at
        // API_VERSION, whose ABI is the field's type.
        unsafe { cast(p) }
    }};
}

impl Calls {
    /// Resolves every call; None if the driver lacks a required one.
    pub fn resolve() -> Option<Calls> {
        let param_info = resolve(c"cuFuncGetParamInfo", 0);
        let kernel_param_info = resolve(c"cuKernelGetParamInfo", 0);
        let prefetch = resolve(c"cuMemPrefetchAsync", 0);
        let get_device = resolve_at(c"cuCtxGetDevice", CTX_GET_DEVICE_VERSION, 0);
        Some(Calls {
            mem_alloc_managed: required!(c"cuMemAllocManaged", 0),
            mem_get_info: required!(c"cuMemGetInfo", 0),
            host_register: required!(c"cuMemHostRegister", 0),
            host_device_pointer: required!(c"cuMemHostGetDevicePointer", 0),
            write_value64: required!(c"cuStreamWriteValue64", 0),
            write_value64_ptsz: required!(c"cuStreamWriteValue64", PER_THREAD_FLAG),
            stream_is_capturing: required!(c"cuStreamIsCapturing", 0),
            stream_is_capturing_ptsz: required!(c"cuStreamIsCapturing", PER_THREAD_FLAG),
            func_param_info: (!param_info.is_null()).then(|| {
                // SAFETY: cuFuncGetParamInfo's ABI at API_VERSION.
                unsafe { cast(param_info) }
            }),
            kernel_param_info: (!kernel_param_info.is_null()).then(|| {
                // SAFETY: cuKernelGetParamInfo's ABI at API_VERSION:
                // `(CUkernel, size_t, size_t *, size_t *)`, a handle as wide
                // as a CUfunction.
                unsafe { cast(kernel_param_info) }
            }),
            mem_prefetch: (!prefetch.is_null()).then(|| {
                // SAFETY: at API_VERSION (13.0) the driver returns
                // cuMemPrefetchAsync_v2, whose ABI PrefetchV2 is.
                unsafe { cast(prefetch) }
            }),
            ctx_get_device: (!get_device.is_null()).then(|| {
                // SAFETY: cuCtxGetDevice asked for at 2.0: `(CUdevice *)`.
                unsafe { cast(get_device) }
            }),
        })
    }
}

static CALLS: std::sync::OnceLock<Option<Calls>> = std::sync::OnceLock::new();

/// The runtime's own driver calls, resolved on first use (after a real
/// `cuGetProcAddress` is known); None if the driver lacks one.
pub fn calls() -> Option<&'static Calls> {
    if REAL_GPA_V2.load(Ordering::Acquire).is_null()
        && REAL_GPA_V1.load(Ordering::Acquire).is_null()
    {
        return None;
    }
    CALLS.get_or_init(Calls::resolve).as_ref()
}
