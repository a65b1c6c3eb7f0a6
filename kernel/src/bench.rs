//! The benchmark behind bench/kernel/run.sh (`jobscope-kernel bench`): what the programs cost,
//! measured against themselves in one run, configurations interleaved round by round, medians.
//!
//! 1. ns per system call of a getppid() loop (timed inside the workload), sys_enter holding
//!    (a) nothing, (b) an empty program (the floor of any tp_btf program there), (c) ours — all
//!    three in a tagged process — and (d) ours in an untagged process (what every other process
//!    on the host pays).
//! 2. CPU time (user + system, of the workload and its children, getrusage) of a pipe
//!    ping-pong, a loopback TCP transfer and a small-write dd in a tagged process, with no
//!    program, again with none (A/A: the noise), with what `jobscope-kernel run` attaches by
//!    default, with `--page-cache` too, and (where the kernel refuses fentry) with the small I/O
//!    program on sys_enter too; with `kernel.bpf_stats_enabled=1`, also the run count and run
//!    time of each program during each workload, in rounds of their own.

use crate::{launch, Collector, Options, SmallIo, SysEnter};
use std::collections::HashMap;
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
        c.maps().tag(child.pid() as libc::pid_t, KEY)?;
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
fn prog_stats(since: std::time::Duration) -> HashMap<String, (u64, u64)> {
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

/// The sys_enter configurations of part 1: label, program, whether the workload is tagged.
const SYSCALL_CONFIGS: [(&str, SysEnter, bool); 4] = [
    ("(a) tagged, nothing on sys_enter", SysEnter::None, true),
    ("(b) tagged, empty program", SysEnter::Empty, true),
    ("(c) tagged, our program", SysEnter::Counting, true),
    ("(d) untagged, our program", SysEnter::Counting, false),
];

/// Round `round`'s order of `n` configurations: each once, the first one moving every round, so
/// that none always runs first.
fn rotation(round: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |i| (i + round) % n)
}

/// The whole benchmark, its phases in order: a collector of its own, the system calls (part 1),
/// the other programs (part 2), each measured and then printed.
fn bench(a: Args) -> anyhow::Result<()> {
    let opts = Options {
        syscalls: false,
        page_cache: false,
        max_jobs: 16,
        pin_dir: format!("/sys/fs/bpf/jobscope-bench-{}", std::process::id()).into(),
        bench: true,
    };
    let loaded_after = boottime();
    let mut c = Collector::start(&opts)?;
    c.maps().register(KEY)?;
    let exe = exe();

    let mut ns = measure_syscalls(&mut c, &a, &exe)?;
    print_syscalls(&a, &mut ns);
    let counted = c.maps_mut().read(KEY)?.unwrap_or_default();
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

    let mut other = measure_other_programs(&mut c, &a, &exe, loaded_after)?;
    print_other_programs(&a, c.small_io(), &mut other);
    if other.stats {
        print_program_stats(&a, &other, empty_ns);
    } else {
        println!(
            "  (per-program run time: run with kernel.bpf_stats_enabled=1, \
             e.g. sysctl -w kernel.bpf_stats_enabled=1)"
        );
    }
    let j = c.maps_mut().read(KEY)?.unwrap_or_default();
    println!(
        "  check: job counted {} switches, {} MiB sent, {} MiB dirtied",
        j.ctx_voluntary + j.ctx_involuntary,
        j.net_tx_bytes >> 20,
        j.dirtied_bytes >> 20
    );
    Ok(())
}

/// Part 1, system calls: ns per getppid() of each [`SYSCALL_CONFIGS`] entry, per round. Besides
/// sys_enter, the scheduler, network, block and page-cache programs are attached (the counts
/// move from each task to the job at its exit, js_exit), but not the small I/O ones, which may
/// sit on sys_enter too; a getppid() loop runs none of them but fork and exit, once per run.
fn measure_syscalls(c: &mut Collector, a: &Args, exe: &str) -> anyhow::Result<Vec<Vec<f64>>> {
    let calls = a.calls.to_string();
    c.detach_main();
    c.attach_main_with(false, true)?;
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); SYSCALL_CONFIGS.len()];
    for round in 0..a.rounds {
        for k in rotation(round, SYSCALL_CONFIGS.len()) {
            let (_, prog, tagged) = SYSCALL_CONFIGS[k];
            c.set_sys_enter(prog)?;
            let (out, _) = run(c, tagged, exe, &["workload", "getppid", &calls])?;
            ns[k].push(value(&out, "ns_per_call"));
        }
    }
    c.set_sys_enter(SysEnter::None)?;
    Ok(ns)
}

fn print_syscalls(a: &Args, ns: &mut [Vec<f64>]) {
    let med: Vec<f64> = ns.iter_mut().map(|v| median(v)).collect();
    println!(
        "== system calls: getppid() x {}, {} rounds, median ns per call",
        a.calls, a.rounds
    );
    for (k, (name, _, _)) in SYSCALL_CONFIGS.iter().enumerate() {
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
}

/// Part 2's configurations: label, and what is attached (`None`: nothing; else whether the
/// small I/O programs and the page-cache program are). `default_small_io` is whether
/// `jobscope-kernel run` counts small I/O by default (fentry), so the third entry is what it
/// attaches by default. The first two are the same (nothing): their difference is the noise.
fn other_configs(default_small_io: bool) -> Vec<(&'static str, Option<(bool, bool)>)> {
    let mut v = vec![
        ("off", None),
        ("off again (A/A)", None),
        ("default", Some((default_small_io, false))),
        ("default + --page-cache", Some((default_small_io, true))),
    ];
    if !default_small_io {
        v.push(("+ small I/O at sys_enter", Some((true, true))));
    }
    v
}

/// What part 2 measured, per workload.
struct OtherRuns {
    /// The configurations of [`other_configs`].
    configs: Vec<(&'static str, Option<(bool, bool)>)>,
    /// cpu[work][config]: CPU ns per round.
    cpu: Vec<Vec<Vec<f64>>>,
    /// Whether kernel.bpf_stats_enabled was 1: then `ran` and `ran_cpu` are filled, from rounds
    /// of their own after the timed ones (the kernel's timing of each run is not in those).
    stats: bool,
    /// Per workload, in the stats rounds (every program but the sys_enter ones, page cache
    /// included): each program's runs and run time (ns).
    ran: Vec<HashMap<String, (u64, u64)>>,
    /// Per workload, the CPU ns of those runs.
    ran_cpu: Vec<f64>,
}

/// Adds what each program ran between two [`prog_stats`] readings to `into`.
fn add_runs(
    into: &mut HashMap<String, (u64, u64)>,
    before: &HashMap<String, (u64, u64)>,
    after: HashMap<String, (u64, u64)>,
) {
    for (name, (n, ns)) in after {
        let (n0, ns0) = before.get(&name).copied().unwrap_or_default();
        let e = into.entry(name).or_default();
        e.0 += n.saturating_sub(n0);
        e.1 += ns.saturating_sub(ns0);
    }
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Sets kernel.bpf_stats_enabled for as long as it lives, then back to 1 (the caller found it
/// 1: the user turned it on for this run).
struct StatsOff;

impl StatsOff {
    fn new() -> anyhow::Result<StatsOff> {
        std::fs::write(BPF_STATS, "0")?;
        Ok(StatsOff)
    }
}

impl Drop for StatsOff {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS, "1");
    }
}

/// Part 2, CPU time of other work (a pipe ping-pong, a loopback TCP transfer, a small-write dd)
/// in a tagged process under each of [`other_configs`], interleaved round by round, with
/// kernel.bpf_stats_enabled=0 (the kernel's timing of each program run would add to the
/// programs' cost); where the user set it to 1, also what each program ran, in rounds of their
/// own after those.
fn measure_other_programs(
    c: &mut Collector,
    a: &Args,
    exe: &str,
    loaded_after: std::time::Duration,
) -> anyhow::Result<OtherRuns> {
    let rt = a.round_trips.to_string();
    let tcp = (a.tcp_mib << 20).to_string();
    let dd_file = a
        .dd_dir
        .join(format!("jobscope-bench-{}.dd", std::process::id()));
    let of = format!("of={}", dd_file.display());
    let count = format!("count={}", a.dd_count);
    let works: [(&str, Vec<&str>); 3] = [
        (exe, vec!["workload", "pingpong", &rt]),
        (exe, vec!["workload", "tcp", &tcp]),
        (
            "dd",
            vec!["if=/dev/zero", &of, "bs=512", &count, "status=none"],
        ),
    ];
    let configs = other_configs(c.small_io() == SmallIo::Fentry);
    let stats = bpf_stats_on();
    let mut r = OtherRuns {
        cpu: vec![vec![Vec::new(); configs.len()]; works.len()],
        configs,
        stats,
        ran: vec![Default::default(); works.len()],
        ran_cpu: vec![0.0; works.len()],
    };
    let attach = |c: &mut Collector, what: Option<(bool, bool)>| -> anyhow::Result<()> {
        c.detach_main();
        if let Some((small_io, page_cache)) = what {
            c.attach_main_with(small_io, page_cache)?;
        }
        Ok(())
    };
    {
        let _off = if stats { Some(StatsOff::new()?) } else { None };
        for round in 0..a.rounds {
            for config in rotation(round, r.configs.len()) {
                attach(c, r.configs[config].1)?;
                for (w, (prog, args)) in works.iter().enumerate() {
                    let (_, t) = run(c, true, prog, args)?;
                    r.cpu[w][config].push(t);
                    let _ = std::fs::remove_file(&dd_file);
                }
            }
        }
    }
    if stats {
        let all = r.configs[3].1;
        attach(c, all)?;
        for _ in 0..a.rounds.min(3) {
            for (w, (prog, args)) in works.iter().enumerate() {
                let before = prog_stats(loaded_after);
                let (_, t) = run(c, true, prog, args)?;
                add_runs(&mut r.ran[w], &before, prog_stats(loaded_after));
                r.ran_cpu[w] += t;
                let _ = std::fs::remove_file(&dd_file);
            }
        }
    }
    c.detach_main();
    Ok(r)
}

/// The workloads of part 2, as printed.
fn labels(a: &Args) -> [String; 3] {
    [
        format!("pipe ping-pong, {} round trips", a.round_trips),
        format!("loopback TCP, {} MiB", a.tcp_mib),
        format!("dd bs=512 count={} to {}", a.dd_count, a.dd_dir.display()),
    ]
}

fn print_other_programs(a: &Args, small_io: SmallIo, r: &mut OtherRuns) {
    println!(
        "== other programs (scheduler, fork/exit, vfs, network, block, page cache), tagged \
         workload, {} rounds interleaved, median CPU time (user + system), \
         kernel.bpf_stats_enabled=0",
        a.rounds
    );
    println!(
        "  small I/O counted by default {}",
        match small_io {
            SmallIo::Fentry => "at fentry/vfs_read, vfs_write",
            SmallIo::Syscalls =>
                "nowhere (this kernel refuses fentry: at tp_btf/sys_enter, with --syscalls)",
        }
    );
    println!(
        "  against \"off\"; \"off again\" is the same configuration, so its difference is \
         the noise (target: the default adds < 1 %)"
    );
    for (w, label) in labels(a).iter().enumerate() {
        let off = median(&mut r.cpu[w][0]);
        let cols: Vec<String> = (1..r.configs.len())
            .map(|i| {
                let m = median(&mut r.cpu[w][i]);
                format!("{} {:+.2} %", r.configs[i].0, (m - off) / off * 100.0)
            })
            .collect();
        println!(
            "  {label:<38} off {:>7.1} ms | {}",
            off / 1e6,
            cols.join(" | ")
        );
    }
}

/// With kernel.bpf_stats_enabled=1: what each program ran during each workload of part 2, and
/// the same less the floor `empty_ns` (an empty program's run, measured the same way).
fn print_program_stats(a: &Args, r: &OtherRuns, empty_ns: Option<f64>) {
    println!(
        "== {} ({} rounds of their own, kernel.bpf_stats_enabled=1): what each program ran \
         during the workload (a run's time includes the kernel's own timing of it)",
        r.configs[3].0,
        a.rounds.min(3)
    );
    for (w, label) in labels(a).iter().enumerate() {
        let mut progs: Vec<_> = r.ran[w].iter().filter(|(_, (n, _))| *n > 0).collect();
        progs.sort_by_key(|(_, (_, ns))| std::cmp::Reverse(*ns));
        let total: u64 = progs.iter().map(|(_, (_, ns))| ns).sum();
        let list: Vec<String> = progs
            .iter()
            .map(|(name, (n, ns))| format!("{name} {n} x {:.0} ns", *ns as f64 / *n as f64))
            .collect();
        println!(
            "  {label:<38} BPF {:>7.2} ms of {:>8.1} ms CPU ({:.2} %): {}",
            total as f64 / 1e6,
            r.ran_cpu[w] / 1e6,
            total as f64 / r.ran_cpu[w] * 100.0,
            list.join(", ")
        );
        if let Some(e) = empty_ns {
            let runs: u64 = progs.iter().map(|(_, (n, _))| n).sum();
            let net = total as f64 - e * runs as f64;
            println!(
                "  {:<38} less the floor: {:.2} ms ({:.2} %)",
                "",
                net / 1e6,
                net / r.ran_cpu[w] * 100.0
            );
        }
    }
    if let Some(e) = empty_ns {
        println!(
            "  floor: an empty program (js_sys_enter_empty, section 1) measures {e:.0} ns a run \
             this way"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_runs_every_configuration_once_and_the_first_moves() {
        for round in 0..5 {
            let mut order: Vec<usize> = rotation(round, 4).collect();
            assert_eq!(order[0], round % 4);
            order.sort();
            assert_eq!(order, [0, 1, 2, 3]);
        }
    }

    #[test]
    fn program_runs_add_up_between_readings() {
        let before = HashMap::from([("js_fork".to_string(), (10, 1000))]);
        let after = HashMap::from([
            ("js_fork".to_string(), (15, 1600)),
            ("js_exit".to_string(), (2, 50)),
        ]);
        let mut into = HashMap::from([("js_fork".to_string(), (1, 100))]);
        add_runs(&mut into, &before, after);
        assert_eq!(into["js_fork"], (6, 700));
        // a program first seen after `before` counts from zero
        assert_eq!(into["js_exit"], (2, 50));
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert!(median(&mut []).is_nan());
    }
}
