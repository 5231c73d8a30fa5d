//! A launch's argument words: every 8-byte word of each parameter (as
//! `cuFuncGetParamInfo` sizes them) or of the `extra` buffer, struct
//! parameters included: PyTorch passes its tensors' addresses inside
//! structs by value (`at::detail::Array<char*, N>` of the elementwise
//! kernels, the OffsetCalculator-carrying lambdas, the foreach kernels'
//! `TensorListMetadata`, whose `const void* addresses[depth][n]` come
//! first in a struct of up to 4 KB, or 32 KB with large kernel arguments).
//!
//! A pointer member of a struct sits at a multiple of 8 from the struct's
//! start (its alignment), and the driver's parameter pointer points at
//! that start, so the words read at 8-byte steps from each parameter's
//! start hold every pointer argument.

use std::ffi::c_void;

/// Argument words looked at per launch at most: the 144 addresses of a
/// depth-4 foreach launch (Adam) and more; the rest is not scanned and the
/// record says it was truncated.
pub const MAX_WORDS: usize = 1024;

/// Calls `f` with each 8-byte word of a launch's arguments, at most
/// [`MAX_WORDS`]; returns true when words were left out.
///
/// # Safety
/// `params` (with `sizes`, the function's parameter sizes) or `extra` are
/// the launch's own, valid as the driver requires.
pub unsafe fn words(
    sizes: Option<&[u32]>,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    mut f: impl FnMut(u64),
) -> bool {
    let mut left = MAX_WORDS;
    let mut each = |p: *const u8, len: usize| -> bool {
        for k in 0..len / 8 {
            if left == 0 {
                return false;
            }
            left -= 1;
            // SAFETY: within the `len` bytes the driver reads at `p`;
            // unaligned: the caller's buffer need not be 8-aligned.
            f(unsafe { std::ptr::read_unaligned(p.add(8 * k) as *const u64) });
        }
        true
    };
    if !params.is_null() {
        let Some(sizes) = sizes else { return true };
        for (i, &size) in sizes.iter().enumerate() {
            // SAFETY: the driver reads params[i] as `size` bytes: so can we.
            let p = unsafe { *params.add(i) } as *const u8;
            if !p.is_null() && !each(p, size as usize) {
                return true;
            }
        }
        return false;
    }
    if extra.is_null() {
        return false;
    }
    // SAFETY: `extra` is an _END-terminated key/value array (cuda.h).
    let (buf, len) = unsafe { crate::params::extra_buffer(extra) };
    !buf.is_null() && !each(buf, len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver;

    /// `vectorized_elementwise_kernel<4, F, at::detail::Array<char*, 3>>(int
    /// N, F f, Array data)`: three parameters of 4, 1 (an empty functor)
    /// and 24 bytes; the three tensor addresses are the last one's words.
    #[test]
    fn struct_parameters_are_read_word_by_word() {
        let n: i32 = 1 << 20;
        let functor: u8 = 0;
        let data: [u64; 3] = [0x7f00_0000_0000, 0x7f00_0020_0000, 0x7f00_0040_0000];
        let mut params: [*mut c_void; 3] = [
            &n as *const i32 as *mut c_void,
            &functor as *const u8 as *mut c_void,
            data.as_ptr() as *mut c_void,
        ];
        let mut got = vec![];
        // SAFETY: the parameters above, sized as the kernel's.
        let cut = unsafe {
            words(
                Some(&[4, 1, 24]),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
                |w| got.push(w),
            )
        };
        assert!(!cut);
        assert_eq!(got, data);
    }

    #[test]
    fn the_extra_buffer_and_the_word_cap() {
        let buf: Vec<u64> = (0..MAX_WORDS as u64 + 10).collect();
        let size = buf.len() * 8;
        let mut extra: [*mut c_void; 5] = [
            driver::LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
            buf.as_ptr() as *mut c_void,
            driver::LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
            &size as *const usize as *mut c_void,
            driver::LAUNCH_PARAM_END as *mut c_void,
        ];
        let mut n = 0;
        // SAFETY: an _END-terminated array naming a live buffer.
        let cut = unsafe { words(None, std::ptr::null_mut(), extra.as_mut_ptr(), |_| n += 1) };
        assert!(cut);
        assert_eq!(n, MAX_WORDS);
    }
}
