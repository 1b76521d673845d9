//! Compiles hakmem's C sources (every src/*.c of the repository, so a new
//! file needs no change here) into a static library, under the hak_* names
//! only: HAKMEM_OVERRIDE=0 keeps malloc, free and the C++ operators the C
//! library's.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let crate_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = crate_dir.join("../../..");
    let src = root.join("src");
    let include = root.join("include");

    let mut sources: Vec<PathBuf> = fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("hakmem-sys: cannot read the C sources in {}: {}", src.display(), e))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().map_or(false, |ext| ext == "c"))
        .collect();
    sources.sort();
    assert!(!sources.is_empty(), "hakmem-sys: no C sources in {}", src.display());

    check_version(&include.join("hakmem.h"));

    // The flags of the C build (CMakeLists.txt). Always optimised: every
    // allocation of the program goes through it, whatever the Rust profile.
    let mut build = cc::Build::new();
    build
        .files(&sources)
        .include(&include)
        .include(&src)
        .define("HAKMEM_OVERRIDE", "0")
        .opt_level(3)
        .warnings(false);
    for flag in [
        "-std=gnu11",
        "-fvisibility=hidden",
        "-fno-builtin-malloc",
        "-fno-builtin-free",
        "-fno-builtin-calloc",
        "-fno-builtin-realloc",
        "-ftls-model=initial-exec",
    ] {
        build.flag(flag);
    }
    build.compile("hakmem");

    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed={}", include.display());
    println!("cargo:include={}", include.display());
}

/// The crate's version must be the C library's (written once, in hakmem.h).
fn check_version(header: &Path) {
    let text = fs::read_to_string(header).unwrap_or_else(|e| panic!("hakmem-sys: {}: {}", header.display(), e));
    let part = |name: &str| -> String {
        let prefix = format!("#define HAKMEM_VERSION_{} ", name);
        let line = text.lines().find(|l| l.starts_with(&prefix));
        let line = line.unwrap_or_else(|| panic!("hakmem-sys: no HAKMEM_VERSION_{} in {}", name, header.display()));
        line[prefix.len()..].trim().to_string()
    };
    let c_version = format!("{}.{}.{}", part("MAJOR"), part("MINOR"), part("PATCH"));
    let crate_version = env::var("CARGO_PKG_VERSION").unwrap();
    assert!(
        crate_version == c_version,
        "hakmem-sys: the crate is version {} but include/hakmem.h says {}: update bindings/rust/Cargo.toml",
        crate_version,
        c_version
    );
}
