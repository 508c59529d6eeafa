//! Link settings for the protection-manager binary.
//!
//! On Linux with glibc, relative relocations are packed (`DT_RELR`, GNU ld
//! ≥ 2.38 / lld ≥ 15, glibc ≥ 2.36 at run time, as in the image's
//! distroless debian12 base). A position-independent binary carries one
//! relocation per pointer in its read-only data; unpacked they were 1.4 MB
//! (`.rela.dyn`), read in full by the loader at every start and so resident
//! for the process's life. Packed they are ~16 kB: about 1.3 MiB less peak
//! RSS (issue 11; crates/pv-protection/README.md has the figures). Set
//! `PROTECTION_MANAGER_NO_RELR=1` to link without it, for an older glibc.

fn main() {
    println!("cargo:rerun-if-env-changed=PROTECTION_MANAGER_NO_RELR");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" && std::env::var_os("PROTECTION_MANAGER_NO_RELR").is_none() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
