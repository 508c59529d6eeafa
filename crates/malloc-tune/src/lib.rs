//! glibc malloc settings for a long-running controller (issue 11, memory).
//!
//! glibc's defaults suit short programs and many-threaded servers, not a
//! controller that holds a cache and streams list pages through it:
//!
//! * **one arena** (`M_ARENA_MAX=1`): glibc gives each thread that contends
//!   for the heap its own arena, and the tokio workers each filled one with
//!   the same cache, fragmented apart;
//! * **large blocks from mmap** (`M_MMAP_THRESHOLD=128 KiB`, fixed): by default
//!   the threshold rises to the largest block freed, so after the first list
//!   page (hundreds of kB of JSON) every later page was carved out of the
//!   heap and left holes there; fixed, a page goes back to the kernel when it
//!   is freed;
//! * **trim at 256 KiB** (`M_TRIM_THRESHOLD`): free memory at the top of the
//!   heap is returned beyond this.
//!
//! Measured with `make bench-pv` (2,000 PVs + 2,000 PVCs + 2,000 pods), all
//! three together lowered the manager's peak RSS by 2-4 MiB and made it
//! steady from run to run; see crates/pv-protection/README.md. Threads
//! allocate through their own tcache first, so the single arena's lock is
//! rarely taken.
//!
//! Each setting is skipped when its environment variable
//! (`MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`) or
//! its `GLIBC_TUNABLES` entry (`glibc.malloc.arena_max`, `…mmap_threshold`,
//! `…trim_threshold`) is set: what the operator sets wins. [`tune`] belongs
//! first in `main`, before any thread starts (the manager's `main` does so).
//! With another C library, or on another platform, it does nothing.

/// The settings applied: `(mallopt parameter, value, environment variable,
/// GLIBC_TUNABLES name)`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const SETTINGS: [(libc::c_int, libc::c_int, &str, &str); 3] = [
    (
        libc::M_ARENA_MAX,
        1,
        "MALLOC_ARENA_MAX",
        "glibc.malloc.arena_max",
    ),
    (
        libc::M_MMAP_THRESHOLD,
        128 * 1024,
        "MALLOC_MMAP_THRESHOLD_",
        "glibc.malloc.mmap_threshold",
    ),
    (
        libc::M_TRIM_THRESHOLD,
        256 * 1024,
        "MALLOC_TRIM_THRESHOLD_",
        "glibc.malloc.trim_threshold",
    ),
];

/// Whether the operator set this malloc parameter through the environment.
fn set_by_operator(
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    var: &str,
    tunable: &str,
) -> bool {
    env(var).is_some()
        || env("GLIBC_TUNABLES").is_some_and(|t| {
            t.to_string_lossy()
                .split(':')
                .any(|kv| kv.split('=').next() == Some(tunable))
        })
}

static APPLIED: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();

/// The settings [`tune`] applied, by environment variable name (for the
/// start-up log line).
pub fn applied() -> &'static [&'static str] {
    APPLIED.get().map(Vec::as_slice).unwrap_or_default()
}

/// Applies the settings not set by the operator, once; [`applied`] names
/// them.
pub fn tune() {
    APPLIED.get_or_init(apply);
}

fn apply() -> Vec<&'static str> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let env = |k: &str| std::env::var_os(k);
        SETTINGS
            .iter()
            .filter(|(_, _, var, tunable)| !set_by_operator(&env, var, tunable))
            .filter(|(param, value, _, _)| {
                // SAFETY: mallopt(3) takes two integers and only sets
                // allocator parameters; `tune` runs first in `main`, before
                // any other thread exists.
                #[allow(unsafe_code)]
                let ok = unsafe { libc::mallopt(*param, *value) } == 1;
                ok
            })
            .map(|(_, _, var, _)| *var)
            .collect()
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_operators_environment_wins() {
        let none = env_of(&[]);
        assert!(!set_by_operator(
            &none,
            "MALLOC_ARENA_MAX",
            "glibc.malloc.arena_max"
        ));
        let var = env_of(&[("MALLOC_ARENA_MAX", "4")]);
        assert!(set_by_operator(
            &var,
            "MALLOC_ARENA_MAX",
            "glibc.malloc.arena_max"
        ));
        let tunables = env_of(&[(
            "GLIBC_TUNABLES",
            "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=2",
        )]);
        assert!(set_by_operator(
            &tunables,
            "MALLOC_ARENA_MAX",
            "glibc.malloc.arena_max"
        ));
        assert!(!set_by_operator(
            &tunables,
            "MALLOC_TRIM_THRESHOLD_",
            "glibc.malloc.trim_threshold"
        ));
    }

    #[test]
    fn tuning_applies_every_setting_on_glibc() {
        tune();
        let applied = applied();
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            for var in [
                "MALLOC_ARENA_MAX",
                "MALLOC_MMAP_THRESHOLD_",
                "MALLOC_TRIM_THRESHOLD_",
            ] {
                assert_eq!(
                    applied.contains(&var),
                    std::env::var_os(var).is_none(),
                    "{var}: {applied:?}"
                );
            }
        } else {
            assert!(applied.is_empty());
        }
    }
}
