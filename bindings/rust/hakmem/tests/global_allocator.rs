//! hakmem as this test program's #[global_allocator]: every Box, Vec,
//! String and map below, in every thread, comes from it (and the test
//! checks that it does). Contents are checked after every move.
use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::thread;

use hakmem::HakMem;

#[global_allocator]
static GLOBAL: HakMem = HakMem;

/// A pattern byte keyed by a seed and an offset.
fn pattern(seed: usize, i: usize) -> u8 {
    (seed.wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) % 251) as u8
}

fn fill(p: *mut u8, len: usize, seed: usize) {
    for i in 0..len {
        unsafe { *p.add(i) = pattern(seed, i) };
    }
}

fn verify(p: *const u8, len: usize, seed: usize, what: &str) {
    for i in 0..len {
        let got = unsafe { *p.add(i) };
        assert_eq!(got, pattern(seed, i), "{}: byte {} of {}", what, i, len);
    }
}

#[test]
fn allocations_come_from_hakmem() {
    // hak_malloc_usable_size stops the program for a block that is not
    // hakmem's, and hakmem's blocks hold at least hak_good_size bytes, and
    // of a small size at most what it says of the size rounded up to 256
    // (a thread heap's classes from 1 to 4 KiB are up to 256 bytes apart,
    // and a thread's first small blocks are whole cache lines). (The huge
    // size is one no other test frees: a huge block reused from hakmem's
    // cache may be a little larger.)
    let fits = |usable: usize, n: usize| {
        let most = if n <= 8192 { HakMem::good_size((n + 255) / 256 * 256) } else { HakMem::good_size(n) };
        usable >= HakMem::good_size(n) && usable <= most
    };
    for &n in &[1usize, 24, 100, 1000, 5000, 70_000, 1 << 20, (3 << 20) + 5, (48 << 20) + 5] {
        let v: Vec<u8> = Vec::with_capacity(n);
        let usable = unsafe { HakMem::usable_size(v.as_ptr()) };
        assert!(fits(usable, n), "Vec::with_capacity({}): usable {}, good_size {}", n, usable, HakMem::good_size(n));
    }
    let b = Box::new(7u64);
    let usable = unsafe { HakMem::usable_size(&*b as *const u64 as *const u8) };
    assert!(fits(usable, 8), "Box<u64>: usable {}", usable);
    let (major, minor, patch) = HakMem::version();
    assert_eq!(format!("{}.{}.{}", major, minor, patch), env!("CARGO_PKG_VERSION"));
}

#[test]
fn threads_allocate_and_free_each_others_blocks() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 2000;
    let (tx, rx) = mpsc::channel::<(usize, Box<[u8]>)>();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let tx = tx.clone();
            thread::spawn(move || {
                let mut words: HashMap<String, usize> = HashMap::new();
                let mut tree = BTreeMap::new();
                for r in 0..ROUNDS {
                    let seed = t * ROUNDS + r;
                    // Blocks that another thread frees: small to large.
                    let len = 1 + (seed * 7919) % 20_000;
                    let mut block = vec![0u8; len].into_boxed_slice();
                    fill(block.as_mut_ptr(), len, seed);
                    tx.send((seed, block)).unwrap();
                    // Churn freed by this thread.
                    *words.entry(format!("w{}", seed % 97)).or_insert(0) += 1;
                    tree.insert(seed, vec![seed as u32; seed % 50]);
                    if r % 3 == 0 {
                        tree.remove(&(seed - r / 2));
                    }
                }
                assert_eq!(words.values().sum::<usize>(), ROUNDS);
                for (k, v) in &tree {
                    assert!(v.iter().all(|x| *x == *k as u32));
                }
                tree.len()
            })
        })
        .collect();
    drop(tx);
    let mut received = 0;
    for (seed, block) in rx {
        verify(block.as_ptr(), block.len(), seed, "block sent across threads");
        received += 1;
    }
    for w in workers {
        assert!(w.join().unwrap() > 0);
    }
    assert_eq!(received, THREADS * ROUNDS);
}

#[test]
fn alignment_up_to_4k() {
    let sizes = [1usize, 7, 16, 100, 1000, 4096, 5000, 70_000, (1 << 20) + 3];
    let mut align = 1;
    while align <= 4096 {
        for (k, &size) in sizes.iter().enumerate() {
            let layout = Layout::from_size_align(size, align).unwrap();
            let seed = align + k;
            unsafe {
                let p = alloc(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "alloc(size {}, align {})", size, align);
                assert!(HakMem::usable_size(p) >= size);
                fill(p, size, seed);
                // Grow, then shrink: aligned and with the contents.
                let q = realloc(p, layout, size * 3);
                assert_eq!(q as usize % align, 0, "realloc(size {} -> {}, align {})", size, size * 3, align);
                verify(q, size, seed, "aligned block grown");
                fill(q, size * 3, seed + 1);
                let grown = Layout::from_size_align(size * 3, align).unwrap();
                let r = realloc(q, grown, size / 2 + 1);
                assert_eq!(r as usize % align, 0, "realloc(size {} -> {}, align {})", size * 3, size / 2 + 1, align);
                verify(r, size / 2 + 1, seed + 1, "aligned block shrunk");
                dealloc(r, Layout::from_size_align(size / 2 + 1, align).unwrap());

                // Zeroed, also where a dirty block was just freed.
                let d = alloc(layout);
                std::ptr::write_bytes(d, 0xab, size);
                dealloc(d, layout);
                let z = alloc_zeroed(layout);
                assert_eq!(z as usize % align, 0);
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0), "alloc_zeroed({}, {})", size, align);
                dealloc(z, layout);
            }
        }
        align *= 2;
    }

    #[repr(align(4096))]
    struct Page([u8; 4096]);
    let pages: Vec<Box<Page>> = (0..64).map(|i| Box::new(Page([i as u8; 4096]))).collect();
    for (i, page) in pages.iter().enumerate() {
        assert_eq!(&**page as *const Page as usize % 4096, 0);
        assert!(page.0.iter().all(|&b| b == i as u8));
    }
}

#[test]
fn realloc_keeps_contents_through_every_tier() {
    // Vec growth: doubling from a few bytes to 32 MiB (every class, large
    // blocks, a huge block), contents checked at the end.
    let mut v: Vec<u64> = Vec::new();
    for i in 0..(4u64 << 20) {
        v.push(i * 3 + 1);
    }
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 3 + 1));
    v.truncate(1000);
    v.shrink_to_fit();
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 3 + 1));

    let mut s = String::new();
    for i in 0..100_000 {
        s.push_str(&i.to_string());
    }
    assert!(s.starts_with("0123456789101112"));
    assert!(s.ends_with("99999"));

    // realloc by hand, up and down through the tiers.
    let sizes = [10usize, 200, 3000, 50_000, 900_000, 3 << 20, 40 << 20, 100, 1 << 20, 17];
    unsafe {
        let mut layout = Layout::from_size_align(5, 8).unwrap();
        let mut p = alloc(layout);
        fill(p, 5, 99);
        let mut valid = 5;
        for &n in &sizes {
            p = realloc(p, layout, n);
            assert!(!p.is_null());
            let kept = valid.min(n);
            verify(p, kept, 99, "realloc");
            fill(p, n, 99);
            valid = n;
            layout = Layout::from_size_align(n, 8).unwrap();
        }
        dealloc(p, layout);
    }
    HakMem::collect();
}
