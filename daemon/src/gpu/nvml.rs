//! A thin binding of the NVIDIA Management Library, loaded at run time.
//!
//! `libnvidia-ml.so.1` ships with the driver, not with CUDA's toolkit, so
//! prescientd opens it with dlopen when it starts: the build, CI and hosts
//! without a GPU need neither the library nor its headers. Only the calls
//! the daemon needs are bound, with the signatures of NVML's documented API
//! (nvml.h): `nvmlInit_v2`, `nvmlShutdown`, `nvmlErrorString`,
//! `nvmlDeviceGetCount_v2`, `nvmlDeviceGetHandleByIndex_v2`,
//! `nvmlDeviceGetMemoryInfo`, `nvmlDeviceGetUUID`, `nvmlDeviceGetName`.

use libloading::{Library, Symbol};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};

/// `nvmlReturn_t`: 0 is NVML_SUCCESS.
type NvmlReturn = c_int;
/// `nvmlDevice_t`: an opaque handle.
type NvmlDevice = *mut c_void;

/// `nvmlMemory_t` (v1): total, free and used bytes of one device.
#[repr(C)]
#[derive(Default)]
struct NvmlMemory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// NVML_DEVICE_UUID_V2_BUFFER_SIZE and NVML_DEVICE_NAME_V2_BUFFER_SIZE.
const BUFFER: usize = 96;

/// What NVML says of one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub index: u32,
    /// "GPU-xxxxxxxx-..." as nvidia-smi prints it.
    pub uuid: String,
    /// "NVIDIA H100 80GB HBM3".
    pub name: String,
    pub memory_bytes: u64,
}

/// Why NVML gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NvmlError {
    /// The library could not be opened (no NVIDIA driver on this host).
    NotInstalled(String),
    /// The library lacks a symbol this binding uses (a very old driver).
    MissingSymbol(&'static str),
    /// A call returned an error: the call, the code, NVML's own text.
    Call {
        call: &'static str,
        code: i32,
        text: String,
    },
    /// The host has `count` GPUs and the config asked for another one.
    NoSuchGpu { index: u32, count: u32 },
    /// No GPU NVML sees has this UUID.
    NoSuchUuid(String),
}

impl std::fmt::Display for NvmlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NvmlError::NotInstalled(e) => write!(f, "NVML is not available ({e})"),
            NvmlError::MissingSymbol(s) => {
                write!(f, "this NVML has no {s} (driver too old)")
            }
            NvmlError::Call { call, code, text } => write!(f, "{call} failed: {text} ({code})"),
            NvmlError::NoSuchUuid(u) => write!(f, "NVML reports no GPU {u}"),
            NvmlError::NoSuchGpu { index, count } => write!(
                f,
                "GPU {index} does not exist: NVML reports {count} GPU(s) (indices 0..{count})"
            ),
        }
    }
}

impl std::error::Error for NvmlError {}

/// Whether this binary links glibc statically (`-C target-feature=+crt-static`).
///
/// A static glibc cannot host a library that links the shared one: loading
/// libnvidia-ml.so.1 into such a binary brings a second libc whose state was
/// never initialised, and the daemon died with SIGFPE right after attaching
/// (seen on an H100). Such a build never loads NVML.
const STATIC_BUILD: bool = cfg!(target_feature = "crt-static");

/// The refusal a static build gives instead of loading NVML.
#[cold]
fn static_build_refusal() -> NvmlError {
    NvmlError::NotInstalled(
        "this prescientd is statically linked and cannot load libnvidia-ml.so.1; \
         set userspace.gpu_memory (or --gpu-memory), or use a dynamically linked build"
            .into(),
    )
}

/// An initialised NVML; shut down on drop.
pub struct Nvml {
    lib: Library,
}

impl Nvml {
    /// Opens `library` (a file name searched as dlopen does, or a path) and
    /// calls `nvmlInit_v2`.
    pub fn open(library: &str) -> Result<Nvml, NvmlError> {
        if STATIC_BUILD {
            return Err(static_build_refusal());
        }
        // SAFETY: loading runs the library's initialisers; libnvidia-ml's
        // only set up its own state. The path comes from the operator's
        // config, which is root's to write.
        let lib =
            unsafe { Library::new(library) }.map_err(|e| NvmlError::NotInstalled(e.to_string()))?;
        let nvml = Nvml { lib };
        let init: Symbol<unsafe extern "C" fn() -> NvmlReturn> = nvml.sym(b"nvmlInit_v2\0")?;
        // SAFETY: nvmlInit_v2 takes no argument.
        let rc = unsafe { init() };
        if rc != 0 {
            let e = nvml.call_error("nvmlInit_v2", rc);
            // No nvmlShutdown after a failed init: forget the library
            // without calling Drop's shutdown.
            std::mem::forget(nvml);
            return Err(e);
        }
        Ok(nvml)
    }

    /// A symbol of the library, typed by the caller.
    fn sym<T>(&self, name: &'static [u8]) -> Result<Symbol<'_, T>, NvmlError> {
        // SAFETY: every caller names a symbol with the type nvml.h gives it.
        unsafe { self.lib.get(name) }.map_err(|_| {
            NvmlError::MissingSymbol(
                std::str::from_utf8(&name[..name.len() - 1]).unwrap_or("a symbol"),
            )
        })
    }

    /// An error of `call`, with NVML's text for `code`.
    #[cold]
    fn call_error(&self, call: &'static str, code: NvmlReturn) -> NvmlError {
        let text = self
            .sym::<unsafe extern "C" fn(NvmlReturn) -> *const c_char>(b"nvmlErrorString\0")
            .ok()
            .and_then(|f| {
                // SAFETY: nvmlErrorString returns a static NUL-terminated
                // string (or NULL) for any code.
                let p = unsafe { f(code) };
                // SAFETY: checked for NULL; the string is static.
                (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "unknown error".into());
        NvmlError::Call { call, code, text }
    }

    /// Turns a return code into a result.
    fn check(&self, call: &'static str, rc: NvmlReturn) -> Result<(), NvmlError> {
        if rc == 0 {
            Ok(())
        } else {
            Err(self.call_error(call, rc))
        }
    }

    /// How many GPUs NVML sees.
    pub fn count(&self) -> Result<u32, NvmlError> {
        let f: Symbol<unsafe extern "C" fn(*mut c_uint) -> NvmlReturn> =
            self.sym(b"nvmlDeviceGetCount_v2\0")?;
        let mut n: c_uint = 0;
        // SAFETY: `n` is a valid out-pointer for the call's duration.
        self.check("nvmlDeviceGetCount_v2", unsafe { f(&mut n) })?;
        Ok(n)
    }

    /// Memory, UUID and name of GPU `index`.
    pub fn device(&self, index: u32) -> Result<Device, NvmlError> {
        let count = self.count()?;
        if index >= count {
            return Err(NvmlError::NoSuchGpu { index, count });
        }
        let by_index: Symbol<unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn> =
            self.sym(b"nvmlDeviceGetHandleByIndex_v2\0")?;
        let mut dev: NvmlDevice = std::ptr::null_mut();
        // SAFETY: `dev` is a valid out-pointer.
        self.check("nvmlDeviceGetHandleByIndex_v2", unsafe {
            by_index(index, &mut dev)
        })?;
        let mem_info: Symbol<unsafe extern "C" fn(NvmlDevice, *mut NvmlMemory) -> NvmlReturn> =
            self.sym(b"nvmlDeviceGetMemoryInfo\0")?;
        let mut mem = NvmlMemory::default();
        // SAFETY: `dev` came from NVML; `mem` is a valid nvmlMemory_t.
        self.check("nvmlDeviceGetMemoryInfo", unsafe {
            mem_info(dev, &mut mem)
        })?;
        Ok(Device {
            index,
            uuid: self.text(b"nvmlDeviceGetUUID\0", "nvmlDeviceGetUUID", dev)?,
            name: self.text(b"nvmlDeviceGetName\0", "nvmlDeviceGetName", dev)?,
            memory_bytes: mem.total,
        })
    }

    /// The GPU whose UUID is `uuid` ("GPU-...", as nvidia-smi and UVM print it).
    pub fn device_by_uuid(&self, uuid: &str) -> Result<Device, NvmlError> {
        let count = self.count()?;
        for i in 0..count {
            let d = self.device(i)?;
            if d.uuid.eq_ignore_ascii_case(uuid) {
                return Ok(d);
            }
        }
        Err(NvmlError::NoSuchUuid(uuid.to_string()))
    }

    /// A string query of the form `f(device, char *buf, unsigned len)`.
    fn text(
        &self,
        sym: &'static [u8],
        call: &'static str,
        dev: NvmlDevice,
    ) -> Result<String, NvmlError> {
        let f: Symbol<unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> NvmlReturn> =
            self.sym(sym)?;
        let mut buf = [0 as c_char; BUFFER];
        // SAFETY: `buf` holds BUFFER bytes, the length passed.
        self.check(call, unsafe { f(dev, buf.as_mut_ptr(), BUFFER as c_uint) })?;
        // NVML NUL-terminates within the length; be safe if it did not.
        buf[BUFFER - 1] = 0;
        // SAFETY: NUL-terminated within `buf` (set just above).
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        if let Ok(f) = self.sym::<unsafe extern "C" fn() -> NvmlReturn>(b"nvmlShutdown\0") {
            // SAFETY: paired with the successful nvmlInit_v2 in `open`.
            let _ = unsafe { f() };
        }
    }
}
