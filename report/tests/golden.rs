//! Golden (snapshot) tests of the text report, from spools RECORDED on the real test cluster
//! (`tests/record-spools.sh`): serial, parallel, memory-leaking, idle-after-work, OOM and a 2-node
//! imbalanced job. Each case directory holds the nodes' raw spool directories (`node-<name>/`), the
//! job's `squeue --json` record and its `ExitCode`. The report is rebuilt exactly as the epilog
//! builds it and compared with `report/testdata/golden/<case>.txt`.
//!
//! After an intended change of the report: `JOBSCOPE_BLESS=1 cargo test -p jobscope-report --test golden`,
//! then review the diff of the golden files (and of README.md, whose example report is the serial
//! case's golden file: `readme_example_is_the_serial_golden_report`).

use jobscope_config::Config;
use jobscope_report::pipeline;
use jobscope_report::present::render_text;
use jobscope_report::slurm::{decide_end, EpilogEnv};
use std::path::{Path, PathBuf};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

/// The thresholds of the test cluster the spools were recorded on (slurm-conf/jobscope.toml).
fn config() -> Config {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../slurm-conf/jobscope.toml");
    Config::parse(&std::fs::read_to_string(&p).unwrap(), &p).unwrap()
}

fn report(case: &str) -> String {
    let cfg = config();
    let r = pipeline::testing::recorded(case, &cfg);
    let (dir, job_id, info, nodes, names) = (r.dir, r.job_id, r.facts, r.nodes, r.names);
    let env = EpilogEnv {
        job_id,
        node: names[0].clone(),
        uid: info.uid,
        user: info.user.clone(),
        nodelist: Some(names.join(",")),
        num_nodes: Some(names.len() as u32),
        exit_code2: std::fs::read_to_string(dir.join("exit_code2"))
            .ok()
            .map(|s| s.trim().to_string()),
        ..Default::default()
    };
    let facts = env.facts_with(Some(info));
    let s = pipeline::job(&facts, nodes, &names, &cfg, "golden", &decide_end);
    render_text(&s, false).unwrap()
}

fn check(case: &str) {
    let got = report(case);
    let path = testdata().join("golden").join(format!("{case}.txt"));
    if std::env::var_os("JOBSCOPE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with JOBSCOPE_BLESS=1)", path.display()));
    assert_eq!(
        got,
        want,
        "report for {case} differs from {}",
        path.display()
    );
    // The text report is mailed as text/plain: an MTA delivering to an mbox rewrites a body line
    // that starts with "From " as ">From ", and the user reads the mangled line.
    for line in got.lines() {
        assert!(
            !line.starts_with("From "),
            "report for {case}: a line an mbox would rewrite as '>From': {line:?}"
        );
        // Durations are spelled one way: seconds with their space (`20.1 s`, as CPU time reads),
        // or one compound token (`1m05s`); never `20.1s` beside `19.9 s`.
        let unspaced: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || "(),;:".contains(c))
            .filter(|w| {
                w.strip_suffix('s').is_some_and(|n| {
                    !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.')
                })
            })
            .collect();
        assert!(
            unspaced.is_empty(),
            "report for {case}: seconds without their space {unspaced:?}: {line:?}"
        );
        // A count says its noun as the count asks: `1 core`, `2 cores`; no hedged `core(s)`.
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || "(),;:".contains(c))
            .filter(|w| !w.is_empty())
            .collect();
        for pair in words.windows(2) {
            let plural = ["cores", "nodes", "samples"].contains(&pair[1]);
            assert!(
                !(pair[0] == "1" && plural),
                "report for {case}: '1 {}': {line:?}",
                pair[1]
            );
        }
        assert!(
            !line.contains("core(s)") && !line.contains("node(s)"),
            "report for {case}: a hedged plural: {line:?}"
        );
    }
}

#[test]
fn serial() {
    check("serial");
    let r = report("serial");
    assert!(
        r.contains("Verdict            serial") && r.contains("#SBATCH --cpus-per-task=1"),
        "{r}"
    );
}

/// The README's "Example report" says it is rendered by this test: its block is the serial
/// golden file, line for line. Blessing rewrites the block after the golden file.
#[test]
fn readme_example_is_the_serial_golden_report() {
    const OPEN: &str = "```text\n$ jobscope show 64\n";
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let start = readme
        .find(OPEN)
        .map(|i| i + OPEN.len())
        .unwrap_or_else(|| panic!("README.md: no example block opening with {OPEN:?}"));
    let end = start
        + readme[start..]
            .find("\n```")
            .expect("README.md: the example block is not closed");
    let golden_path = testdata().join("golden/serial.txt");
    if std::env::var_os("JOBSCOPE_BLESS").is_some() {
        // the report itself, which `serial` writes to the golden file (tests run in any order)
        let fresh = report("serial");
        let blessed = format!("{}{}{}", &readme[..start], fresh.trim_end(), &readme[end..]);
        std::fs::write(&readme_path, blessed).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&golden_path).unwrap();
    assert_eq!(
        &readme[start..end],
        golden.trim_end(),
        "README.md's example report differs from {} (bless: JOBSCOPE_BLESS=1 cargo test -p jobscope-report --test golden)",
        golden_path.display()
    );
}

#[test]
fn parallel() {
    check("parallel");
    assert!(!report("parallel").contains("--cpus-per-task"));
}

#[test]
fn memory_leak() {
    check("leak");
    assert!(report("leak").contains("memory grew steadily"));
}

#[test]
fn idle_after_work() {
    check("idle");
    assert!(report("idle").contains("then idle for the remaining"));
}

#[test]
fn oom() {
    check("oom");
    let r = report("oom");
    assert!(
        r.contains("State: OUT_OF_MEMORY") && r.contains("--mem="),
        "{r}"
    );
}

#[test]
fn two_node_imbalanced() {
    check("two-node-imbalanced");
    let r = report("two-node-imbalanced");
    assert!(r.contains("Imbalance") && r.contains("--nodes=1"), "{r}");
}

/// Seconds of a figure as `fmt_secs` writes it: `18.6 s`, or `1h02m05s (3725 s)`.
fn secs(figure: &str) -> f64 {
    let f = figure.trim().trim_end_matches(')');
    let n = f.rsplit_once('(').map_or(f, |(_, n)| n);
    n.trim_end_matches(" s")
        .parse()
        .unwrap_or_else(|e| panic!("{figure:?}: {e}"))
}

/// No part larger than the whole: in every recorded job's report, user and system CPU time are
/// each at most the CPU time, and add up to it. The 2-node job, recorded on cgroup v1, counted
/// 19.0 s of user time in 18.6 s of CPU time (the split counts ticks, the total nanoseconds).
#[test]
fn the_user_and_system_split_never_exceeds_the_cpu_time() {
    for case in [
        "serial",
        "parallel",
        "leak",
        "idle",
        "oom",
        "two-node-imbalanced",
    ] {
        let r = report(case);
        let line = r
            .lines()
            .find(|l| l.trim_start().starts_with("CPU time ") && l.contains("(user "))
            .unwrap_or_else(|| panic!("{case}: no CPU time line\n{r}"));
        let rest = line.trim_start().trim_start_matches("CPU time").trim();
        let (total, split) = rest.split_once("(user ").unwrap();
        let (user, system) = split.trim_end_matches(')').split_once(", system ").unwrap();
        let (total, user, system) = (secs(total), secs(user), secs(system));
        assert!(
            user <= total && system <= total,
            "{case}: a part larger than the whole: {line}"
        );
        // One decimal each: the parts add up to the total within their rounding.
        assert!(
            (user + system - total).abs() <= 0.1 + 1e-9,
            "{case}: {line}"
        );
    }
}
