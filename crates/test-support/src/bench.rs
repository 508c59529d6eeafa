//! Helpers shared by the benchmarks (`make bench-pv`, `make bench-lb`): the
//! manager binary to run, bounded concurrency, and what `/proc` says about
//! the manager's memory and CPU.

use std::path::PathBuf;
use std::process::Command;

use futures::{StreamExt, TryStreamExt, stream};

/// The release manager binary beside the running example
/// (`target/<profile>/examples/<bench>` → `target/<profile>/protection-manager`),
/// or `$PROTECTION_MANAGER_BIN`. `make_target` names what builds it.
pub fn manager_bin(make_target: &str) -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("PROTECTION_MANAGER_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("locating this executable: {e}"))?;
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .ok_or("locating the target directory")?;
    let p = dir.join("protection-manager");
    if !p.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build --release -p protection-manager`, or run `make {make_target}` (which measures the shipped `--profile dist` build), or set PROTECTION_MANAGER_BIN",
            p.display()
        ));
    }
    Ok(p)
}

/// Refuses a command line with anything but `flags` (each followed by its
/// value) and prints `usage` for `--help`/`-h`: a benchmark that ran its
/// defaults on a mistyped flag would spend half an hour measuring something
/// else. Call it first in `main`; [`arg_value`] then reads the values.
pub fn check_args(usage: &str, flags: &[&str]) -> anyhow::Result<()> {
    check_args_in(std::env::args().skip(1), usage, flags).map(|help| {
        if help {
            println!("{usage}");
            std::process::exit(0);
        }
    })
}

/// [`check_args`] over `args`; `Ok(true)`: help was asked for.
fn check_args_in(
    args: impl IntoIterator<Item = String>,
    usage: &str,
    flags: &[&str],
) -> anyhow::Result<bool> {
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        if a == "--help" || a == "-h" {
            return Ok(true);
        }
        if !flags.contains(&a.as_str()) {
            let hint = match a.split_once('=') {
                Some((flag, _)) if flags.contains(&flag) => format!(" (write `{flag} <value>`)"),
                _ => String::new(),
            };
            anyhow::bail!("unknown argument {a:?}{hint}\n{usage}");
        }
        if args.next().is_none() {
            anyhow::bail!("{a} needs a value\n{usage}");
        }
    }
    Ok(false)
}

/// The value after `flag` on the command line, if the flag is there.
pub fn arg_value(flag: &str) -> anyhow::Result<Option<String>> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == flag) {
        None => Ok(None),
        Some(i) => args
            .get(i + 1)
            .cloned()
            .map(Some)
            .ok_or_else(|| anyhow::anyhow!("{flag} needs a value")),
    }
}

/// Runs `n` futures from `f` with `c` in flight; the first error stops it.
pub async fn concurrently<F, Fut>(n: usize, c: usize, f: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    stream::iter(0..n)
        .map(f)
        .buffer_unordered(c)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Peak resident memory (VmHWM) of process `pid`, in KiB.
pub fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Seconds `pid`'s threads have waited for a core so far (run-queue wait
/// in `/proc/PID/task/*/schedstat`, the second field; threads that have
/// exited are not counted). `None` where the kernel keeps no schedstat.
pub fn run_queue_seconds(pid: u32) -> Option<f64> {
    let mut ns = 0u64;
    let mut any = false;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        if let Some(wait) = text
            .split_whitespace()
            .nth(1)
            .and_then(|w| w.parse::<u64>().ok())
        {
            ns += wait;
            any = true;
        }
    }
    any.then_some(ns as f64 / 1e9)
}

/// Seconds of this machine's CPUs that the hypervisor gave to others so
/// far (`steal` of `/proc/stat`'s `cpu` line, summed over the CPUs; the
/// kernel counts it in USER_HZ ticks, 100 a second on Linux): time this
/// virtual machine's processes were ready to run but its host ran another
/// guest.
pub fn steal_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    Some(ticks as f64 / 100.0)
}

/// CPU seconds (user + system) process `pid` has used so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may
    // hold spaces: utime and stime are the 12th and 13th of them.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let tck = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(100.0);
    Some((utime + stime) / tck)
}

/// The `p`th percentile of `sorted` (NaN when empty).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// `(goal ≤ 7 s) ok` or `(goal ≤ 7 s) MISSED`: a figure's goal (issue 11)
/// beside it, and whether this run met it.
pub fn at_most(value: f64, limit: f64, unit: &str) -> String {
    verdict(value <= limit, &format!("≤ {limit}{unit}"))
}

/// `(goal ≥ 0.8) ok` or `(goal ≥ 0.8) MISSED`.
pub fn at_least(value: f64, limit: f64, unit: &str) -> String {
    verdict(value >= limit, &format!("≥ {limit}{unit}"))
}

/// `(goal G) ok` / `(goal G) MISSED` for a figure whose check is `ok`.
pub fn verdict(ok: bool, goal: &str) -> String {
    format!("(goal {goal}) {}", if ok { "ok" } else { "MISSED" })
}

/// Prints the peak RSS and CPU seconds of the manager `pid`.
pub fn print_manager_usage(pid: u32, wall: std::time::Duration) {
    print_manager_usage_with_goal(pid, wall, None);
}

/// As [`print_manager_usage`], with the peak-RSS goal `(MiB, what it is
/// set for)` printed beside the figure.
pub fn print_manager_usage_with_goal(
    pid: u32,
    wall: std::time::Duration,
    rss_goal: Option<(f64, &str)>,
) {
    match vm_hwm_kib(pid) {
        Some(kib) => {
            let mib = kib as f64 / 1024.0;
            let goal = rss_goal
                .map(|(limit, what)| format!(" {} {what}", at_most(mib, limit, " MiB")))
                .unwrap_or_default();
            println!("== manager peak RSS (VmHWM): {mib:.1} MiB =={goal}");
        }
        None => println!("== manager peak RSS: /proc/{pid}/status not readable =="),
    }
    match cpu_seconds(pid) {
        Some(cpu) => println!(
            "== manager CPU for the whole run: {cpu:.2} s (user + system, over {:.1} s wall) ==",
            wall.as_secs_f64()
        ),
        None => println!("== manager CPU: /proc/{pid}/stat not readable =="),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_cpu() {
        let pid = std::process::id();
        assert!(vm_hwm_kib(pid).unwrap() > 0);
        assert!(cpu_seconds(pid).unwrap() >= 0.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 50.0), 2.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn goals_print_beside_their_figure() {
        assert_eq!(at_most(6.5, 7.0, " s"), "(goal ≤ 7 s) ok");
        assert_eq!(at_most(7.5, 7.0, " s"), "(goal ≤ 7 s) MISSED");
        assert_eq!(at_least(0.8, 0.8, ""), "(goal ≥ 0.8) ok");
        assert_eq!(at_least(0.64, 0.8, ""), "(goal ≥ 0.8) MISSED");
    }

    fn check(args: &[&str]) -> anyhow::Result<bool> {
        let args = args.iter().map(|a| a.to_string());
        check_args_in(
            args,
            "usage: bench [--sizes N]",
            &["--sizes", "--contenders"],
        )
    }

    #[test]
    fn a_mistyped_flag_is_refused_before_anything_runs() {
        assert!(!check(&[]).unwrap());
        assert!(!check(&["--sizes", "2000", "--contenders", "ours"]).unwrap());
        assert!(check(&["--help"]).unwrap());
        assert!(check(&["--sizes", "2000", "-h"]).unwrap());
        let err = check(&["--size", "2000"]).unwrap_err().to_string();
        assert!(err.starts_with("unknown argument \"--size\""), "{err}");
        assert!(err.contains("usage: bench"), "{err}");
        let err = check(&["--sizes=2000"]).unwrap_err().to_string();
        assert!(err.contains("(write `--sizes <value>`)"), "{err}");
        let err = check(&["--sizes"]).unwrap_err().to_string();
        assert!(err.starts_with("--sizes needs a value"), "{err}");
    }
}
