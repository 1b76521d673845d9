//! hakmem, a general-purpose memory allocator, as Rust's global allocator:
//!
//! ```no_run
//! use hakmem::HakMem;
//!
//! #[global_allocator]
//! static GLOBAL: HakMem = HakMem;
//!
//! fn main() {
//!     let v: Vec<u64> = (0..1000).collect();
//!     assert_eq!(v.iter().sum::<u64>(), 499500);
//! }
//! ```
//!
//! The allocator is compiled into the program (by `hakmem-sys`) under its
//! own `hak_*` names: the C library's `malloc`, which C code linked into the
//! same program uses, stays as it was.
#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;
use core::ptr;

pub use hakmem_sys as sys;

/// Every hakmem block is aligned to 16 bytes; larger alignments go through
/// `hak_aligned_alloc`.
const MIN_ALIGN: usize = 16;

/// hakmem as a [`GlobalAlloc`]; see the crate documentation.
#[derive(Clone, Copy, Debug, Default)]
pub struct HakMem;

unsafe impl GlobalAlloc for HakMem {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            sys::hak_malloc(layout.size()) as *mut u8
        } else {
            sys::hak_aligned_alloc(layout.align(), layout.size()) as *mut u8
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            // calloc skips the clearing where the memory is known to be zero.
            return sys::hak_calloc(1, layout.size()) as *mut u8;
        }
        let p = self.alloc(layout);
        if !p.is_null() {
            ptr::write_bytes(p, 0, layout.size());
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if layout.align() <= MIN_ALIGN {
            sys::hak_free_sized(p as *mut c_void, layout.size());
        } else {
            sys::hak_free_aligned_sized(p as *mut c_void, layout.align(), layout.size());
        }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            return sys::hak_realloc(p as *mut c_void, new_size) as *mut u8;
        }
        // hak_realloc would keep only 16-byte alignment if it moved the
        // block: move it here instead, to a block with the same alignment.
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let q = self.alloc(new_layout);
        if !q.is_null() {
            ptr::copy_nonoverlapping(p, q, core::cmp::min(layout.size(), new_size));
            self.dealloc(p, layout);
        }
        q
    }
}

impl HakMem {
    /// The usable size an allocation of `size` bytes (alignment at most 16)
    /// gets at least: `size` or more, and the block may hold more still
    /// (a thread heap's classes of 1 to 4 KiB, a thread's first small
    /// blocks, which are whole cache lines); 0 if it cannot be allocated.
    pub fn good_size(size: usize) -> usize {
        unsafe { sys::hak_good_size(size) }
    }

    /// The usable bytes from `p` to the end of its block.
    ///
    /// # Safety
    /// `p` must be a live allocation from hakmem (it stops the program with
    /// a message otherwise).
    pub unsafe fn usable_size(p: *const u8) -> usize {
        sys::hak_malloc_usable_size(p as *const c_void)
    }

    /// Return free memory to the OS now (as `malloc_trim(0)` does).
    pub fn collect() {
        unsafe { sys::hak_collect() }
    }

    /// Print hakmem's statistics on stderr.
    pub fn print_stats() {
        unsafe { sys::hak_stats_print() }
    }

    /// The library's version: (major, minor, patch).
    pub fn version() -> (u32, u32, u32) {
        let v = unsafe { sys::hak_version() } as u32;
        (v / 10000, v / 100 % 100, v % 100)
    }
}
