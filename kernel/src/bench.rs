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
//!    refuses fentry), in a tagged process.

use jobscope_kernel::{create_job, launch, tag_task, Collector, Options, SmallIo, SysEnter};
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
        let pidfd = jobscope_kernel::pidfd_open(child.pid())?;
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
    let mut c = Collector::start(&opts)?;
    create_job(c.jobs(), KEY)?;
    let exe = exe();
    let calls = a.calls.to_string();

    // 1. system calls. Only sys_enter is attached here: the rest would add noise, not cost.
    c.detach_main();
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
    let counted = jobscope_kernel::read_job(c.jobs(), KEY)?.unwrap_or_default();
    println!(
        "  check: system calls counted for the job {} (>= {} expected)",
        counted.syscalls.iter().sum::<u64>(),
        a.calls * a.rounds as u64
    );

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
    for round in 0..a.rounds {
        for step in 0..3 {
            let config = (step + round) % 3;
            c.detach_main();
            if config > 0 {
                c.attach_main_with(config == 1)?;
            }
            for (w, (_, prog, args)) in works.iter().enumerate() {
                let (_, t) = run(&c, true, prog, args)?;
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
    let j = jobscope_kernel::read_job(c.jobs(), KEY)?.unwrap_or_default();
    println!(
        "  check: job counted {} switches, {} MiB sent, {} MiB dirtied",
        j.ctx_voluntary + j.ctx_involuntary,
        j.net_tx_bytes >> 20,
        j.dirtied_bytes >> 20
    );
    Ok(())
}
