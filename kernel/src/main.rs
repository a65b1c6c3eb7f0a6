//! `jobscope-kernel`: the per-node collector daemon (`run`) and its check (`status`).
//! Hidden subcommands, only with the `bench` feature (not in the packaged collector): `workload`
//! (known work for the tests and the benchmark) and `bench` (bench/kernel/run.sh).

use clap::Parser;
use jobscope_common::bpf_maps::{monotonic_ns, KernelMaps};
use jobscope_kernel::cli::{Cli, Cmd};
#[cfg(feature = "bench")]
use jobscope_kernel::{bench, workload};
use jobscope_kernel::{check_support, Collector, Options, SmallIo, Sweeper};
use jobscope_model::kernel_abi::{State, ABI_VERSION, STATE_PAGE_CACHE, STATE_SYSCALLS};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Run {
            syscalls,
            page_cache,
            max_jobs,
            pin_dir,
            spool_dir,
            optional,
        } => {
            let opts = Options {
                syscalls,
                page_cache,
                max_jobs,
                pin_dir,
                bench: false,
            };
            run(&opts, &spool_dir, optional)
        }
        Cmd::Status { json, pin_dir } => status(&pin_dir, json),
        #[cfg(feature = "bench")]
        Cmd::Workload(a) => workload::main(a),
        #[cfg(feature = "bench")]
        Cmd::Bench(a) => bench::main(a),
    }
}

const SWEEP_EVERY: Duration = Duration::from_secs(60);

fn run(opts: &Options, spool_dir: &Path, optional: bool) -> ExitCode {
    let unsupported = |msg: String| {
        eprintln!("jobscope-kernel: {msg}");
        if optional {
            eprintln!("jobscope-kernel: --optional: not collecting kernel counters on this node");
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    };
    if let Err(e) = check_support() {
        return unsupported(e.to_string());
    }
    // Signals are taken synchronously (sigtimedwait) by the one thread, so they are blocked
    // before anything is pinned: a SIGTERM during the load is seen after it and unpins.
    let signals = block_signals();
    let collector = match Collector::start(opts) {
        Ok(c) => c,
        Err(e) => return unsupported(format!("cannot load the BPF programs: {e:#}")),
    };
    eprintln!(
        "jobscope-kernel: counting (system calls {}, small I/O {}, page cache {}), maps pinned \
         under {}",
        if opts.syscalls { "on" } else { "off" },
        match collector.small_io() {
            SmallIo::Fentry => "at vfs_read/vfs_write",
            SmallIo::Syscalls => "at read/write system calls: this kernel refuses fentry",
        },
        if opts.page_cache { "on" } else { "off" },
        collector.pin_dir().display()
    );
    let mut sweeper = Sweeper::new(spool_dir);
    let mut last_sweep = Instant::now();
    let mut catch_up_failed = false;
    loop {
        if let Some(sig) = wait_signal(&signals, Duration::from_secs(1)) {
            eprintln!("jobscope-kernel: signal {sig}, unpinning and exiting");
            break;
        }
        // counters first, then the heartbeat: a fresh heartbeat means figures under 1 s old
        if let Err(e) = collector.catch_up() {
            if !catch_up_failed {
                eprintln!("jobscope-kernel: {e:#} (scheduler figures only at task exit)");
                catch_up_failed = true;
            }
        }
        collector.beat();
        if last_sweep.elapsed() >= SWEEP_EVERY {
            last_sweep = Instant::now();
            let n = collector.sweep(&mut sweeper);
            if n > 0 {
                eprintln!("jobscope-kernel: swept {n} unused job entries");
            }
        }
    }
    drop(collector); // unpins, then detaches
    ExitCode::SUCCESS
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: plain libc signal-set manipulation on a local set; the process has one thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits up to `timeout` for one of the blocked signals.
fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: valid set and timeout; no siginfo wanted.
    let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

/// What `status` found.
struct Found {
    state: State,
    jobs: usize,
}

fn probe(pin_dir: &Path) -> anyhow::Result<Found> {
    let maps =
        KernelMaps::open_any_abi(pin_dir, Path::new("/sys")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let state = maps.state_by_lookup()?;
    let mut keys = Vec::new();
    // the map holds at most max_jobs entries: the walk is bounded by it
    maps.job_keys(
        &mut keys,
        usize::try_from(state.max_jobs).unwrap_or(usize::MAX),
    )?;
    Ok(Found {
        state,
        jobs: keys.len(),
    })
}

fn status(pin_dir: &Path, json: bool) -> ExitCode {
    let found = probe(pin_dir);
    let now = monotonic_ns();
    match (&found, json) {
        (Ok(f), true) => {
            let s = &f.state;
            println!(
                "{{\"pinned\":true,\"pin_dir\":{},\"abi_version\":{},\"abi_supported\":{},\
                 \"heartbeat_age_s\":{:.1},\"syscalls\":{},\"page_cache\":{},\"jobs\":{},\"max_jobs\":{},\
                 \"dropped_events\":{}}}",
                json_str(&pin_dir.display().to_string()),
                s.abi_version,
                s.abi_version == ABI_VERSION,
                now.saturating_sub(s.heartbeat_ns) as f64 / 1e9,
                s.flags & STATE_SYSCALLS != 0,
                s.flags & STATE_PAGE_CACHE != 0,
                f.jobs,
                s.max_jobs,
                s.dropped_events
            );
        }
        (Ok(f), false) => {
            let s = &f.state;
            let age = now.saturating_sub(s.heartbeat_ns) as f64 / 1e9;
            println!("kernel collector: maps pinned under {}", pin_dir.display());
            println!(
                "  abi version     {}{}",
                s.abi_version,
                if s.abi_version == ABI_VERSION {
                    ""
                } else {
                    " (this build reads only 1)"
                }
            );
            println!(
                "  heartbeat       {age:.1} s ago{}",
                if age > 5.0 {
                    " (collector not running?)"
                } else {
                    ""
                }
            );
            println!(
                "  system calls    {}",
                if s.flags & STATE_SYSCALLS != 0 {
                    "counted"
                } else {
                    "not counted"
                }
            );
            println!(
                "  page cache      {}",
                if s.flags & STATE_PAGE_CACHE != 0 {
                    "counted"
                } else {
                    "not counted (--page-cache)"
                }
            );
            println!("  jobs            {} of {}", f.jobs, s.max_jobs);
            println!(
                "  dropped events  {} (accountings of tagged tasks whose job had no entry)",
                s.dropped_events
            );
        }
        (Err(e), true) => println!(
            "{{\"pinned\":false,\"pin_dir\":{},\"error\":{}}}",
            json_str(&pin_dir.display().to_string()),
            json_str(&format!("{e:#}"))
        ),
        (Err(e), false) => {
            println!(
                "kernel collector: no pinned maps under {} ({e:#})",
                pin_dir.display()
            )
        }
    }
    if found.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3) // like `systemctl status` for a unit that is not running
    }
}

/// A JSON string literal (the crate has no JSON dependency; these are paths and messages).
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
