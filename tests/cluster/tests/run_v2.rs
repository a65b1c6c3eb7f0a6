//! `jobscope run` on a pure cgroup v2 machine (issue 20 §5), in the VM test cluster only
//! (slurm-conf/vm/run-suite.sh; tests named `v2_*` are left out of the host's phases, whose
//! controllers are bound to cgroup v1). A systemd scope with `Delegate=yes` gives the run a cgroup
//! subtree of its own: root's from the system manager, alice's from her user manager
//! (`systemd-run --user --scope -p Delegate=yes`, the way cli/src/run/place.rs documents; the guest's
//! user@.service gets its XDG_RUNTIME_DIR as pam_systemd would give it, slurm-conf/vm/guest/suite.sh).
//! There jobscope makes its run's cgroup, and its figures are compared with what the kernel counted
//! (bash's `times` for CPU, the bytes the command allocated for memory).

use anyhow::{anyhow, ensure, Context, Result};
use jobscope_cluster_tests::jobscope::{f64_at, pure_cgroup_v2, str_at, JOBSCOPE};
use jobscope_cluster_tests::user_info;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// 24 × 10 MiB allocated over 2.4 s, then held 1.5 s.
const RAMP: &str = "import time\nx=[]\nfor i in range(24):\n    x.append(bytearray(10<<20))\n    time.sleep(0.1)\ntime.sleep(1.5)\n";

/// The CPU seconds of bash's `times` (its own line, then its children's), user + system.
fn times_cpu_s(stdout: &str) -> Result<f64> {
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() == 2 && w.iter().all(|f| f.ends_with('s') && f.contains('m'))
        })
        .collect();
    ensure!(lines.len() >= 2, "no `times` output in {stdout:?}");
    let mut sum = 0.0;
    for f in lines[lines.len() - 2..]
        .iter()
        .flat_map(|l| l.split_whitespace())
    {
        let (m, s) = f
            .trim_end_matches('s')
            .split_once('m')
            .ok_or_else(|| anyhow!("{f}"))?;
        sum += m.parse::<f64>()? * 60.0 + s.parse::<f64>()?;
    }
    Ok(sum)
}

/// `jobscope run --json -o OUT ARGS -- CMD` inside a new systemd scope with `Delegate=yes`, as
/// `user` (`None`: root). Returns the command's stdout and the report.
fn run_in_scope(
    dir: &Path,
    user: Option<&str>,
    tag: &str,
    args: &[&str],
    cmd: &[&str],
) -> Result<(String, Value)> {
    let out_file = dir.join(format!("{tag}.json"));
    let mut c = match user {
        // root: a scope of the system manager, delegated.
        None => {
            let mut c = Command::new("/usr/bin/systemd-run");
            c.env_clear();
            c
        }
        // A user: a scope of their own user manager (user@UID.service, itself delegated by
        // systemd), which is how an ordinary user gets a cgroup subtree.
        Some(u) => {
            let uid = user_info(u)?.uid;
            let start = Command::new("/usr/bin/systemctl")
                .args(["start", &format!("user@{uid}.service")])
                .output()?;
            ensure!(
                start.status.success(),
                "systemctl start user@{uid}.service: {}",
                String::from_utf8_lossy(&start.stderr)
            );
            let mut c = Command::new("/usr/sbin/runuser");
            c.env_clear()
                .args(["-u", u, "--", "/usr/bin/env"])
                .arg(format!("XDG_RUNTIME_DIR=/run/user/{uid}"))
                .args(["/usr/bin/systemd-run", "--user"]);
            c
        }
    };
    c.args(["--scope", "--quiet", "-p", "Delegate=yes"]);
    c.arg("--")
        .arg(JOBSCOPE)
        .arg("--config")
        .arg(dir.join("jobscope.toml"))
        .args(["run", "--json", "-o"])
        .arg(&out_file)
        .args(args)
        .arg("--")
        .args(cmd)
        .current_dir(dir)
        .env("PATH", "/usr/bin:/bin")
        .env("LANG", "C.UTF-8");
    let out = c.output().context("systemd-run")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "systemd-run … jobscope run ({tag}) failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = std::fs::read_to_string(&out_file)
        .with_context(|| format!("read {}", out_file.display()))?;
    Ok((stdout, serde_json::from_str(&report)?))
}

fn notes(r: &Value) -> String {
    r.pointer("/nodes/0/quality/notes")
        .map(|n| n.to_string())
        .unwrap_or_default()
}

#[test]
fn v2_jobscope_run_in_a_delegated_scope_counts_what_the_kernel_counts() -> Result<()> {
    ensure!(
        pure_cgroup_v2(),
        "this test needs a pure cgroup v2 machine: run it in the VM (slurm-conf/vm/run-suite.sh)"
    );
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))?;
    let cfg = dir.join("jobscope.toml");
    std::fs::write(
        &cfg,
        "[sampler]\ncadence_s = 1\nearly_samples_s = []\n\n[report]\nmin_elapsed_for_advice_s = 2\n",
    )?;
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644))?;
    let burn = "end=$((SECONDS+4)); while [ $SECONDS -lt $end ]; do :; done";
    let script = format!("({burn}) & ({burn}) & wait; times");
    for user in [None, Some("alice")] {
        let who = user.unwrap_or("root");
        let (stdout, r) = run_in_scope(
            dir,
            user,
            &format!("burn-{who}"),
            &["--cores", "2"],
            &["bash", "-c", &script],
        )?;
        ensure!(str_at(&r, "/state")? == "COMPLETED", "{who}: {r:#}");
        ensure!(
            r["nodes"][0]["cgroup_version"] == "v2",
            "{who}: the run had no v2 cgroup of its own: {}",
            notes(&r)
        );
        ensure!(!notes(&r).contains("process tree"), "{who}: {}", notes(&r));
        if let Some(u) = user {
            ensure!(str_at(&r, "/user")? == u, "{who}: user {}", r["user"]);
            ensure!(user_info(u)?.uid > 0);
        }
        // The kernel's count: bash's `times` (the rusage of what it reaped). Same tolerance as
        // cli/tests/run_cmd.rs on the host.
        let kernel = times_cpu_s(&stdout)?;
        let got = f64_at(&r, "/cpu/usage_s")?;
        ensure!(
            kernel > 2.0 && (got - kernel).abs() <= 0.05 * kernel + 0.15,
            "{who}: report {got:.2} CPU-s vs the kernel's {kernel:.2}"
        );
        // Memory from the run's own memory.peak: the 240 MiB allocated plus python itself.
        let (_, r) = run_in_scope(
            dir,
            user,
            &format!("ramp-{who}"),
            &["--mem", "1G"],
            &["python3", "-c", RAMP],
        )?;
        let peak_mib = f64_at(&r, "/mem/peak_bytes")? / f64::from(1 << 20);
        ensure!(
            (240.0..=300.0).contains(&peak_mib),
            "{who}: memory peak {peak_mib:.1} MiB for 240 MiB allocated; notes {}",
            notes(&r)
        );
    }
    Ok(())
}
