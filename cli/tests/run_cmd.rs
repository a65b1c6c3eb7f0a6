//! `jobscope run -- CMD` on this machine, end to end: the real binary runs real commands; each
//! report is compared with what the kernel itself counted for the command (bash's `times`, which
//! reads the rusage of the children it reaped) or with what the command did (bytes allocated).
//!
//! As root on this host (hybrid cgroups, v1 controllers) the run gets its own v1 cgroup; as
//! `alice` (a test user that exists once the test cluster is installed: slurm-conf/cluster.sh)
//! it follows the process tree. The GPU run uses the fake NVML (tests/fake-nvml), built because
//! this crate names it as a dev-dependency.
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{am_root, BIN};

/// A world-readable directory with a config: samples every second.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(extra: &str) -> Setup {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let cfg = format!(
            "[sampler]\ncadence_s = 1\nearly_samples_s = []\n\n[report]\nmin_elapsed_for_advice_s = 2\n\n{extra}\n"
        );
        let p = dir.path().join("jobscope.toml");
        std::fs::write(&p, cfg).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        Setup { dir }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("jobscope.toml")
    }

    /// A report file name, new for each run (the run refuses to overwrite), in a directory
    /// every test user may write to (sticky, like /tmp).
    fn out(&self, tag: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let d = self.dir.path().join("out");
        if !d.exists() {
            std::fs::create_dir(&d).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        }
        d.join(format!("{tag}.json"))
    }
}

/// `jobscope run --json -o OUT <args> -- CMD…` (optionally through `runuser -u USER`).
fn run_cmd(s: &Setup, user: Option<&str>, tag: &str, args: &[&str], cmd: &[&str]) -> Command {
    let mut c = match user {
        Some(u) => {
            let mut c = Command::new("/usr/sbin/runuser");
            c.args(["-u", u, "--"]).arg(common::bin_for_anyone());
            c
        }
        None => Command::new(BIN),
    };
    c.arg("--config").arg(s.config());
    c.args(["run", "--json", "-o"]).arg(s.out(tag));
    c.args(args).arg("--").args(cmd);
    c.current_dir(s.dir.path());
    c
}

fn report(s: &Setup, tag: &str, out: &Output) -> Value {
    let text = std::fs::read_to_string(s.out(tag)).unwrap_or_else(|e| {
        panic!(
            "no report ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    serde_json::from_str(&text).unwrap()
}

/// The CPU seconds bash's `times` printed (its own line, then its children's line, e.g.
/// `0m7.950s 0m0.012s`), user + system over both: the kernel's count for the whole command.
fn kernel_cpu_s(stdout: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(stdout);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() == 2 && w.iter().all(|f| f.ends_with('s') && f.contains('m'))
        })
        .collect();
    assert!(lines.len() >= 2, "no `times` output in {text:?}");
    lines[lines.len() - 2..]
        .iter()
        .flat_map(|l| l.split_whitespace())
        .map(|f| {
            let (m, s) = f.trim_end_matches('s').split_once('m').unwrap();
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum()
}

/// One test at a time: they measure CPU, and the machine has few cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn f(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} missing in {v:#}"))
}

fn notes(v: &Value) -> String {
    v.pointer("/nodes/0/quality/notes")
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// A busy loop of `secs` in bash (no forks while it runs).
fn burn(secs: u32) -> String {
    format!("end=$((SECONDS+{secs})); while [ $SECONDS -lt $end ]; do :; done")
}

/// The tolerance of the cluster tests' CPU checks (tests/cluster/tests/counters.rs): jobscope's
/// CPU time within 5 % (and 0.15 s) of the kernel's.
fn assert_cpu_close(report_s: f64, kernel_s: f64) {
    assert!(
        (report_s - kernel_s).abs() <= 0.05 * kernel_s + 0.15,
        "report {report_s:.2} s vs kernel {kernel_s:.2} s"
    );
}

#[test]
fn a_two_core_burn_is_parallel_and_its_cpu_is_the_kernels() {
    let _serial = one_at_a_time();
    let s = Setup::new("");
    let script = format!("({b}) & ({b}) & wait; times", b = burn(4));
    let out = run_cmd(
        &s,
        None,
        "burn",
        &["--cores", "2"],
        &["bash", "-c", &script],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", out);
    let r = report(&s, "burn", &out);
    assert_eq!(r["state"], "COMPLETED");
    assert_eq!(r["cluster"], "local");
    assert_eq!(r["alloc"]["cores"], 2);
    let kernel = kernel_cpu_s(&out.stdout);
    assert_cpu_close(f(&r, "/cpu/usage_s"), kernel);
    // Busy cores on average as the kernel's CPU time over the run's wall time (other work on
    // this machine may leave the burners less than two cores: the figure must say so). The mean
    // is over sampling intervals, which the run's start and end do not fill evenly: on a 2-core
    // guest under software emulation beside another VM it was 15 % above (1.74 against 1.51), so
    // 20 % is allowed; a serial figure (1.0 against 2) still fails.
    let elapsed = f(&r, "/elapsed_s");
    let mean = f(&r, "/analysis/scalability/busy_cores_mean");
    assert!(
        (mean - kernel / elapsed).abs() <= 0.2 * kernel / elapsed + 0.05,
        "busy mean {mean:.2} vs kernel {:.2}",
        kernel / elapsed
    );
    if kernel / elapsed > 1.2 {
        assert_ne!(r["analysis"]["scalability"]["verdict"], "serial", "{r:#}");
    } else {
        eprintln!(
            "the machine was busy: the burners got {:.2} cores",
            kernel / elapsed
        );
    }
    if am_root() {
        // This host's cgroups (v1 controllers; in the VM suites, slurm-conf/vm/, pure v2).
        let v1 = std::path::Path::new("/sys/fs/cgroup/memory").is_dir();
        assert_eq!(
            r["nodes"][0]["cgroup_version"],
            if v1 { "v1" } else { "v2" },
            "{r:#}"
        );
        assert!(!notes(&r).contains("process tree"), "{}", notes(&r));
    }
    assert_eq!(
        r["nodes"][0]["steps"][0]["exit_status"], 0,
        "the command's end is the batch step"
    );
}

#[test]
fn a_serial_program_gets_the_serial_verdict() {
    let _serial = one_at_a_time();
    let s = Setup::new("");
    let script = format!("{}; times", burn(4));
    let out = run_cmd(
        &s,
        None,
        "serial",
        &["--cores", "2"],
        &["bash", "-c", &script],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let r = report(&s, "serial", &out);
    assert_cpu_close(f(&r, "/cpu/usage_s"), kernel_cpu_s(&out.stdout));
    let verdict = r.pointer("/analysis/scalability/verdict").unwrap();
    assert_eq!(verdict, "serial", "{r:#}");
    let eff = f(&r, "/efficiency/cpu_pct");
    let kernel_eff = 100.0 * kernel_cpu_s(&out.stdout) / (2.0 * f(&r, "/elapsed_s"));
    assert!(
        (eff - kernel_eff).abs() <= 5.0,
        "{eff} % vs the kernel's {kernel_eff} % of 2 cores"
    );
    assert!(eff <= 52.0, "one of two cores: {eff} %");
}

const RAMP: &str = "import time\nx=[]\nfor i in range(24):\n    x.append(bytearray(10<<20))\n    time.sleep(0.1)\ntime.sleep(1.5)\n";

#[test]
fn a_memory_ramp_peaks_at_what_it_allocated() {
    let _serial = one_at_a_time();
    let s = Setup::new("");
    let out = run_cmd(&s, None, "ramp", &["--mem", "1G"], &["python3", "-c", RAMP])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let r = report(&s, "ramp", &out);
    let peak = f(&r, "/mem/peak_bytes") / (1 << 20) as f64;
    // 240 MiB allocated and touched, plus the interpreter (~10 MiB).
    assert!((240.0..=290.0).contains(&peak), "peak {peak:.1} MiB");
    let pct = f(&r, "/efficiency/mem_pct");
    assert!(
        (23.0..=29.0).contains(&pct),
        "of the 1 GiB asked for: {pct} %"
    );
    assert_eq!(r["alloc"]["mem_per_node_bytes"], 1u64 << 30);
}

#[test]
fn a_failing_command_passes_its_exit_status_through() {
    let _serial = one_at_a_time();
    let s = Setup::new("");
    let out = run_cmd(&s, None, "fail", &[], &["sh", "-c", "echo partial; exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "partial\n",
        "CMD's own output only"
    );
    let r = report(&s, "fail", &out);
    assert_eq!(r["state"], "FAILED");
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["end_reason"]["kind"], "exit_code");
    // A command that cannot be started: a clear error, no report.
    let out = run_cmd(&s, None, "missing", &[], &["/nonexistent/prog"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot run"),
        "{out:?}"
    );
}

#[test]
fn ctrl_c_mid_run_still_gives_the_report_of_what_ran() {
    let _serial = one_at_a_time();
    let s = Setup::new("");
    let mut c = run_cmd(&s, None, "int", &[], &["sleep", "60"]);
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let t0 = Instant::now();
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "ended at the interrupt, not with the 60 s program: {:?}",
        t0.elapsed()
    );
    assert_eq!(out.status.code(), Some(130), "128 + SIGINT: {out:?}");
    let r = report(&s, "int", &out);
    assert_eq!(r["state"], "CANCELLED");
    assert_eq!(
        r["end_reason"],
        serde_json::json!({"kind": "signal", "signal": 2})
    );
    let elapsed = f(&r, "/elapsed_s");
    assert!((2.0..10.0).contains(&elapsed), "what ran: {elapsed} s");
    assert!(f(&r, "/samples") >= 2.0, "{r:#}");
}

#[test]
fn a_user_without_a_cgroup_is_followed_through_the_process_tree() {
    let _serial = one_at_a_time();
    if !am_root()
        || Command::new("id")
            .arg("alice")
            .output()
            .map_or(true, |o| !o.status.success())
    {
        eprintln!("skipped: needs root and the test user alice (slurm-conf/cluster.sh creates it)");
        return;
    }
    let s = Setup::new("");
    let script = format!("({b}) & ({b}) & wait; times", b = burn(3));
    let out = run_cmd(
        &s,
        Some("alice"),
        "alice",
        &["--cores", "2"],
        &["bash", "-c", &script],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let r = report(&s, "alice", &out);
    assert_eq!(r["user"], "alice");
    assert!(notes(&r).contains("process tree"), "{}", notes(&r));
    assert_eq!(r["nodes"][0]["cgroup_version"], Value::Null);
    assert_cpu_close(f(&r, "/cpu/usage_s"), kernel_cpu_s(&out.stdout));
    // Memory, without a cgroup, is the resident sets'.
    let out = run_cmd(
        &s,
        Some("alice"),
        "alice-ramp",
        &["--mem", "1G"],
        &["python3", "-c", RAMP],
    )
    .output()
    .unwrap();
    let r = report(&s, "alice-ramp", &out);
    let peak = f(&r, "/mem/peak_bytes") / (1 << 20) as f64;
    assert!((240.0..=290.0).contains(&peak), "peak {peak:.1} MiB");
    // And root-only options are refused before anything runs.
    let out = run_cmd(
        &s,
        Some("alice"),
        "alice-archive",
        &["--archive"],
        &["true"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("need root"));
}

/// The fake libnvidia-ml.so cargo built for this test binary (see `sampler/src/gpu/fake_nvml_tests.rs`).
fn fake_nvml() -> PathBuf {
    if let Some(p) = std::env::var_os("JOBSCOPE_FAKE_NVML") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.join("libfake_nvml.so"),
        deps.parent().unwrap().join("libfake_nvml.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max()
    .map(|(_, p)| p)
    .expect("libfake_nvml.so: build it with `cargo build -p fake-nvml`")
}

#[test]
fn a_gpu_run_with_the_fake_nvml_reports_the_gpu_it_was_given() {
    let _serial = one_at_a_time();
    let s = Setup::new("");
    let lib_dir = s.dir.path().join("nvml");
    std::fs::create_dir(&lib_dir).unwrap();
    let lib = lib_dir.join("libnvidia-ml.so.1");
    std::fs::copy(fake_nvml(), &lib).unwrap();
    let dev = |uuid: &str, minor: u32, util: u32| {
        serde_json::json!({
            "uuid": uuid, "name": "Fake GPU", "minor": minor,
            "pci_bus_id": format!("00000000:{:02X}:00.0", 0x10 + minor),
            "memory_total": 16u64 << 30, "memory_used": 1u64 << 30,
            "utilization": [[util, 5]], "power_mw": 70000,
            "energy_mj": (0..500u64).map(|i| 1_000_000 + i * 70_000).collect::<Vec<_>>(),
            "throttle": 0, "processes": [[]]
        })
    };
    let script = serde_json::json!({"driver_version": "550.54.15", "devices": [
        dev("GPU-run-0", 0, 60), dev("GPU-run-1", 1, 0)
    ]});
    std::fs::write(lib_dir.join("fake-nvml.json"), script.to_string()).unwrap();
    let s = Setup {
        dir: {
            // The same directory, with the [gpu] table pointing at the fake.
            let cfg = std::fs::read_to_string(s.config()).unwrap()
                + &format!("[gpu]\nnvml_lib_path = \"{}\"\n", lib.display());
            std::fs::write(s.config(), cfg).unwrap();
            s.dir
        },
    };
    let out = run_cmd(&s, None, "gpu", &["--gpus", "GPU-run-0"], &["sleep", "4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let r = report(&s, "gpu", &out);
    let gpus = r["nodes"][0]["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1, "only the GPU it was given: {gpus:#?}");
    assert_eq!(gpus[0]["uuid"], "GPU-run-0");
    let util = gpus[0]["util_mean_pct"].as_f64().unwrap();
    assert!((55.0..=65.0).contains(&util), "scripted 60 %: {util}");
    assert_eq!(r["alloc"]["gpus"], "GPU-run-0");
    // An index is no identity: refused before anything runs.
    let out = run_cmd(&s, None, "gpu-index", &["--gpus", "0"], &["true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("by identity"));
}

#[test]
fn archived_runs_get_local_ids_and_show_finds_them() {
    let _serial = one_at_a_time();
    if !am_root() {
        eprintln!("skipped: --archive needs root");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let s = Setup::new(&format!(
        "[paths]\narchive_dir = \"{0}/archive\"\nstate_dir = \"{0}/state\"\n\n[run]\ncluster = \"ws1\"\nfirst_job_id = 3000000100\n",
        base.path().display()
    ));
    let mut ids = Vec::new();
    for tag in ["a1", "a2"] {
        let out = run_cmd(&s, None, tag, &["--archive"], &["true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let r = report(&s, tag, &out);
        assert_eq!(r["cluster"], "ws1");
        let id = r["job_id"].as_u64().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("archived as job {id} of cluster ws1")),
            "{err}"
        );
        ids.push(id);
    }
    assert_eq!(
        ids,
        vec![3000000100, 3000000101],
        "a counter from run.first_job_id"
    );
    // `jobscope show` finds the archived run like any job's.
    let out = Command::new(BIN)
        .arg("--config")
        .arg(s.config())
        .args(["show", "--json", &ids[1].to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["job_id"].as_u64(), v["cluster"].as_str()),
        (Some(ids[1]), Some("ws1"))
    );
}
