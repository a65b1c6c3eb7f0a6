//! The benchmark behind bench/kernel/run.sh (`jobscope-kernel bench`): what the programs cost,
//! measured against themselves in one run, configurations interleaved round by round, medians.
//!
//! 1. ns per system call of a getppid() loop (timed inside the workload), sys_enter holding
//!    (a) nothing, (b) an empty program (the floor of any tp_btf program there), (c) ours — all
//!    three in a tagged process — and (d) ours in an untagged process (what every other process
//!    on the host pays).
//! 2. CPU time (user + system, of the workload and its children, getrusage) of a pipe
//!    ping-pong, a loopback TCP transfer and a small-write dd, with every other program
//!    attached, none, and all but the small I/O ones (which sit on sys_enter where the kernel
//!    refuses fentry), in a tagged process; with `kernel.bpf_stats_enabled=1`, also the run
//!    count and run time of each program during each workload (what CPU-time differences on a
//!    noisy machine cannot resolve).

use crate::{create_job, launch, tag_task, Collector, Options, SmallIo, SysEnter};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// getppid() calls per run
    #[arg(long, default_value_t = 2_000_000)]
    calls: u64,
    #[arg(long, default_value_t = 200_000)]
    round_trips: u64,
    #[arg(long, default_value_t = 1024)]
    tcp_mib: u64,
    /// 512-byte writes of the dd run
    #[arg(long, default_value_t = 200_000)]
    dd_count: u64,
    /// where dd writes (a real file system: the page cache and the block layer are measured)
    #[arg(long, default_value = "/var/tmp")]
    dd_dir: PathBuf,
}

const KEY: u64 = 0x6a73_6265_6e63; // "jsbenc": any key no SLURM job will have here

fn exe() -> String {
    std::env::current_exe()
        .expect("own path")
        .display()
        .to_string()
}

/// Runs `program args` as a (tagged) job task; returns its stdout and the CPU ns it and its
/// children used.
fn run(c: &Collector, tagged: bool, program: &str, args: &[&str]) -> anyhow::Result<(String, f64)> {
    let before = children_cpu_ns();
    let child = launch::blocked(program, args)?;
    if tagged {
        let pidfd = crate::pidfd_open(child.pid())?;
        use std::os::fd::AsFd;
        tag_task(c.tasks(), pidfd.as_fd(), KEY)?;
    }
    let out = child.release_and_wait()?;
    anyhow::ensure!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        children_cpu_ns() - before,
    ))
}

fn children_cpu_ns() -> f64 {
    // SAFETY: ru is a valid out-pointer.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e9 + t.tv_usec as f64 * 1e3;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Run count and run time (ns) of each of this benchmark's programs, by name: the kernel keeps
/// them while `kernel.bpf_stats_enabled` is 1. Ours are the `js_` programs loaded since `since`
/// (CLOCK_BOOTTIME, which bpf_prog_info's load_time counts in), so a collector running on the
/// host is left out.
fn prog_stats(since: std::time::Duration) -> std::collections::HashMap<String, (u64, u64)> {
    libbpf_rs::query::ProgInfoIter::default()
        .filter(|p| p.load_time >= since && p.name.to_string_lossy().starts_with("js_"))
        .map(|p| {
            (
                p.name.to_string_lossy().into_owned(),
                (p.run_cnt, p.run_time_ns),
            )
        })
        .collect()
}

fn boottime() -> std::time::Duration {
    // SAFETY: ts is a valid out-pointer.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts);
        ts
    };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn bpf_stats_on() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|s| s.trim() == "1")
}

fn value(out: &str, name: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn main(a: Args) -> ExitCode {
    match bench(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jobscope-kernel bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn bench(a: Args) -> anyhow::Result<()> {
    let opts = Options {
        syscalls: false,
        max_jobs: 16,
        pin_dir: format!("/sys/fs/bpf/jobscope-bench-{}", std::process::id()).into(),
        bench: true,
    };
    let loaded_after = boottime();
    let mut c = Collector::start(&opts)?;
    create_job(c.jobs(), KEY)?;
    let exe = exe();
    let calls = a.calls.to_string();

    // 1. system calls. Besides sys_enter, the scheduler, network, block and page-cache programs
    // are attached (the counts move from each task to the job at its exit, js_exit), but not
    // the small I/O ones, which may sit on sys_enter too; a getppid() loop runs none of them
    // but fork and exit, once per run.
    c.detach_main();
    c.attach_main_with(false)?;
    let configs = [
        ("(a) tagged, nothing on sys_enter", SysEnter::None, true),
        ("(b) tagged, empty program", SysEnter::Empty, true),
        ("(c) tagged, our program", SysEnter::Counting, true),
        ("(d) untagged, our program", SysEnter::Counting, false),
    ];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for round in 0..a.rounds {
        // rotate the order every round so that no configuration always runs first
        for i in 0..configs.len() {
            let k = (i + round) % configs.len();
            let (_, prog, tagged) = configs[k];
            c.set_sys_enter(prog)?;
            let (out, _) = run(&c, tagged, &exe, &["workload", "getppid", &calls])?;
            ns[k].push(value(&out, "ns_per_call"));
        }
    }
    c.set_sys_enter(SysEnter::None)?;
    let med: Vec<f64> = ns.iter_mut().map(|v| median(v)).collect();
    println!(
        "== system calls: getppid() x {}, {} rounds, median ns per call",
        a.calls, a.rounds
    );
    for (k, (name, _, _)) in configs.iter().enumerate() {
        let added = if k == 0 {
            String::new()
        } else {
            format!("  added {:+.1} ns", med[k] - med[0])
        };
        println!("  {name:<36} {:>8.1} ns{added}", med[k]);
    }
    println!(
        "  ratio (c-a)/(b-a) = {:.2}  (target <= 1.5)",
        (med[2] - med[0]) / (med[1] - med[0])
    );
    let counted = crate::read_job(c.jobs(), KEY)?.unwrap_or_default();
    println!(
        "  check: system calls counted for the job {} (>= {} expected)",
        counted.syscalls.iter().sum::<u64>(),
        a.calls * a.rounds as u64
    );
    // The empty program's own run time, as bpf_stats measures it: the floor of that measurement
    // (the kernel's timing of each run and the call), for the per-program figures below.
    // (the kernel keeps 15 characters of a program's name)
    let empty_ns = prog_stats(loaded_after)
        .get("js_sys_enter_em")
        .filter(|(n, _)| *n > 0)
        .map(|(n, ns)| *ns as f64 / *n as f64);

    // 2. CPU time of other work, every other program on vs off.
    let rt = a.round_trips.to_string();
    let tcp = (a.tcp_mib << 20).to_string();
    let dd_file = a
        .dd_dir
        .join(format!("jobscope-bench-{}.dd", std::process::id()));
    let of = format!("of={}", dd_file.display());
    let count = format!("count={}", a.dd_count);
    let works: [(&str, &str, Vec<&str>); 3] = [
        ("pipe ping-pong", &exe, vec!["workload", "pingpong", &rt]),
        ("loopback TCP", &exe, vec!["workload", "tcp", &tcp]),
        (
            "dd bs=512",
            "dd",
            vec!["if=/dev/zero", &of, "bs=512", &count, "status=none"],
        ),
    ];
    // cpu[work][config]: 0 off, 1 all on, 2 on but the small I/O programs
    let mut cpu = vec![[Vec::new(), Vec::new(), Vec::new()]; works.len()];
    // with kernel.bpf_stats_enabled=1: per workload, in the runs with what `jobscope-kernel run`
    // attaches by default (everything where fentry counts small I/O; all but the small I/O
    // programs where it sits on sys_enter and comes with --syscalls), each program's runs and
    // run time, and the workload's CPU time in those runs
    let stats = bpf_stats_on();
    let default_config = match c.small_io() {
        SmallIo::Fentry => 1,
        SmallIo::Syscalls => 2,
    };
    let mut ran: Vec<std::collections::HashMap<String, (u64, u64)>> =
        vec![Default::default(); works.len()];
    let mut ran_cpu = vec![0.0; works.len()];
    for round in 0..a.rounds {
        for step in 0..3 {
            let config = (step + round) % 3;
            c.detach_main();
            if config > 0 {
                c.attach_main_with(config == 1)?;
            }
            for (w, (_, prog, args)) in works.iter().enumerate() {
                let before = (stats && config == default_config).then(|| prog_stats(loaded_after));
                let (_, t) = run(&c, true, prog, args)?;
                if let Some(before) = before {
                    for (name, (n, ns)) in prog_stats(loaded_after) {
                        let (n0, ns0) = before.get(&name).copied().unwrap_or_default();
                        let e = ran[w].entry(name).or_default();
                        e.0 += n - n0;
                        e.1 += ns - ns0;
                    }
                    ran_cpu[w] += t;
                }
                cpu[w][config].push(t);
                let _ = std::fs::remove_file(&dd_file);
            }
        }
    }
    c.detach_main();
    println!(
        "== other programs (scheduler, fork/exit, vfs, network, block, page cache), tagged \
         workload, {} rounds, median CPU time",
        a.rounds
    );
    let labels = [
        format!("pipe ping-pong, {} round trips", a.round_trips),
        format!("loopback TCP, {} MiB", a.tcp_mib),
        format!("dd bs=512 count={} to {}", a.dd_count, a.dd_dir.display()),
    ];
    println!(
        "  small I/O counted {}",
        match c.small_io() {
            SmallIo::Fentry => "at fentry/vfs_read, vfs_write",
            SmallIo::Syscalls => "at tp_btf/sys_enter (this kernel refuses fentry)",
        }
    );
    for (w, label) in labels.iter().enumerate() {
        let off = median(&mut cpu[w][0]);
        let on = median(&mut cpu[w][1]);
        let no_io = median(&mut cpu[w][2]);
        println!(
            "  {label:<38} off {:>7.1} ms  on {:>7.1} ms ({:+.2} %)  on without small I/O \
             {:>7.1} ms ({:+.2} %)  (target < 1 %)",
            off / 1e6,
            on / 1e6,
            (on - off) / off * 100.0,
            no_io / 1e6,
            (no_io - off) / off * 100.0
        );
    }
    if stats {
        println!(
            "== the same, as `jobscope-kernel run` attaches them by default ({}): what each \
             program ran during the workload (kernel.bpf_stats_enabled=1; a run's time includes \
             the kernel's own timing of it)",
            if default_config == 1 {
                "all on"
            } else {
                "on without small I/O"
            }
        );
        for (w, label) in labels.iter().enumerate() {
            let mut progs: Vec<_> = ran[w].iter().filter(|(_, (n, _))| *n > 0).collect();
            progs.sort_by_key(|(_, (_, ns))| std::cmp::Reverse(*ns));
            let total: u64 = progs.iter().map(|(_, (_, ns))| ns).sum();
            let list: Vec<String> = progs
                .iter()
                .map(|(name, (n, ns))| format!("{name} {n} x {:.0} ns", *ns as f64 / *n as f64))
                .collect();
            println!(
                "  {label:<38} BPF {:>7.2} ms of {:>8.1} ms CPU ({:.2} %): {}",
                total as f64 / 1e6,
                ran_cpu[w] / 1e6,
                total as f64 / ran_cpu[w] * 100.0,
                list.join(", ")
            );
            if let Some(e) = empty_ns {
                let runs: u64 = progs.iter().map(|(_, (n, _))| n).sum();
                let net = total as f64 - e * runs as f64;
                println!(
                    "  {:<38} less the floor: {:.2} ms ({:.2} %)",
                    "",
                    net / 1e6,
                    net / ran_cpu[w] * 100.0
                );
            }
        }
        if let Some(e) = empty_ns {
            println!(
                "  floor: an empty program (js_sys_enter_empty, section 1) measures {e:.0} ns a run \
                 this way"
            );
        }
    } else {
        println!(
            "  (per-program run time: run with kernel.bpf_stats_enabled=1, \
             e.g. sysctl -w kernel.bpf_stats_enabled=1)"
        );
    }
    let j = crate::read_job(c.jobs(), KEY)?.unwrap_or_default();
    println!(
        "  check: job counted {} switches, {} MiB sent, {} MiB dirtied",
        j.ctx_voluntary + j.ctx_involuntary,
        j.net_tx_bytes >> 20,
        j.dirtied_bytes >> 20
    );
    Ok(())
}
