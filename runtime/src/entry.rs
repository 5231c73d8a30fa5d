//! The process's `dlsym`: the one symbol the runtime exports in place of
//! libc's. CUDA's libraries reach the driver only through
//! `dlsym(libcuda, "cuGetProcAddress_v2")` and then that function, so
//! this is where the runtime gets in (runtime-facts.md section 1.1).
//!
//! Every lookup of a name that is not a driver entry point (`cu` then an
//! upper-case letter), and every `RTLD_NEXT` lookup, leaves through a tail
//! jump into the real `dlsym`: glibc then sees the caller's return address,
//! so `RTLD_NEXT` resolves relative to the caller exactly as without the
//! runtime. That is why `dlsym` is a naked function: Rust cannot promise a
//! tail call otherwise.

// The naked `dlsym` is left out of unit tests (they must not replace the
// test binary's dlsym); its helpers stay, tested through the cdylib.
#![cfg_attr(test, allow(dead_code))]

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The real `dlsym`, found with `dlvsym` (which the runtime does not
/// replace). Read by the naked `dlsym` as a plain pointer.
static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

extern "C" {
    fn dlvsym(handle: *mut c_void, name: *const c_char, version: *const c_char) -> *mut c_void;
}

/// The real `dlsym` (glibc 2.34's version first, then the original one).
fn real_dlsym() -> DlsymFn {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p.is_null() {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: dlvsym with RTLD_NEXT and NUL-terminated strings.
            p = unsafe { dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !p.is_null() {
                break;
            }
        }
        assert!(!p.is_null(), "prescient-runtime: libc's dlsym not found");
        REAL_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: p is libc's dlsym.
    unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(p) }
}

/// True for a driver entry point's name: `cu` then an upper-case letter
/// (`cuInit`, `cuMemAlloc_v2`; not `cudaMalloc` or `cublasCreate_v2`).
pub fn is_driver_name(name: &[u8]) -> bool {
    name.len() > 2 && name[0] == b'c' && name[1] == b'u' && name[2].is_ascii_uppercase()
}

/// Decides whether the runtime answers this lookup itself (true) or the
/// naked `dlsym` tail-jumps to the real one; makes sure the real one is
/// known either way.
extern "C" fn classify(handle: *mut c_void, name: *const c_char) -> bool {
    real_dlsym();
    if name.is_null() || handle == libc::RTLD_NEXT {
        return false;
    }
    // SAFETY: dlsym's contract: name is a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(name) };
    is_driver_name(name.to_bytes())
}

/// Answers a driver-name lookup: the real symbol, or the runtime's wrapper
/// of it when it is one the runtime wraps.
extern "C" fn handled(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let real = real_dlsym();
    // SAFETY: forwarding dlsym's own arguments.
    let p = unsafe { real(handle, name) };
    if p.is_null() {
        return p;
    }
    if !crate::wrap::ready() {
        // SAFETY: same handle, NUL-terminated literals.
        let (v2, v1) = unsafe {
            (
                real(handle, c"cuGetProcAddress_v2".as_ptr()),
                real(handle, c"cuGetProcAddress".as_ptr()),
            )
        };
        crate::wrap::init(v2, v1);
    }
    crate::wrap::substitute(p)
}

/// The exported `dlsym` (x86-64): saves the arguments, asks [`classify`],
/// then tail-jumps to [`handled`] or to the real `dlsym`.
///
/// # Safety
/// libc's `dlsym` contract: `name` is NUL-terminated, `handle` a handle,
/// `RTLD_DEFAULT` or `RTLD_NEXT`.
#[cfg(all(target_arch = "x86_64", not(test)))]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {classify}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test al, al",
        "jnz {handled}",
        "jmp qword ptr [rip + {real}]",
        classify = sym classify,
        handled = sym handled,
        real = sym REAL_DLSYM,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_names_are_told_from_runtime_and_library_names() {
        for n in [
            "cuInit",
            "cuGetProcAddress_v2",
            "cuMemAlloc_v2",
            "cuLaunchKernelEx_ptsz",
        ] {
            assert!(is_driver_name(n.as_bytes()), "{n}");
        }
        for n in [
            "cudaMalloc",
            "cublasCreate_v2",
            "cudnnCreate",
            "cu",
            "malloc",
            "",
        ] {
            assert!(!is_driver_name(n.as_bytes()), "{n}");
        }
    }
}
