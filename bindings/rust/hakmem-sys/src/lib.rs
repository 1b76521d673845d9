//! Raw bindings to hakmem, a general-purpose memory allocator: its `hak_*`
//! API as declared in `include/hakmem.h`. The C sources are compiled into
//! this crate under those names only, so linking it does not replace the C
//! library's `malloc`. For Rust's global allocator, see the `hakmem` crate.
#![no_std]

use core::ffi::c_void;

extern "C" {
    pub fn hak_malloc(size: usize) -> *mut c_void;
    pub fn hak_free(p: *mut c_void);
    pub fn hak_calloc(count: usize, size: usize) -> *mut c_void;
    pub fn hak_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    pub fn hak_reallocarray(p: *mut c_void, count: usize, size: usize) -> *mut c_void;
    pub fn hak_posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> i32;
    pub fn hak_aligned_alloc(alignment: usize, size: usize) -> *mut c_void;
    pub fn hak_memalign(alignment: usize, size: usize) -> *mut c_void;
    pub fn hak_valloc(size: usize) -> *mut c_void;
    pub fn hak_pvalloc(size: usize) -> *mut c_void;
    pub fn hak_malloc_usable_size(p: *const c_void) -> usize;

    /// The usable size `hak_malloc(size)` would give (a thread's first small
    /// blocks, whole cache lines, may hold more); 0 if it must fail.
    pub fn hak_good_size(size: usize) -> usize;
    /// Free a block allocated with `size` bytes (the size is checked in
    /// debug builds of the C library).
    pub fn hak_free_sized(p: *mut c_void, size: usize);
    /// Free a block from `hak_aligned_alloc(alignment, size)`.
    pub fn hak_free_aligned_sized(p: *mut c_void, alignment: usize, size: usize);

    /// `HAKMEM_VERSION` of the library: major * 10000 + minor * 100 + patch.
    pub fn hak_version() -> i32;
    /// Return free memory to the OS now.
    pub fn hak_collect();
    /// Statistics: the text report on stderr, or one JSON object to `fd`.
    pub fn hak_stats_print();
    pub fn hak_stats_write_json(fd: i32);
}
