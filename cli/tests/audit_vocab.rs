//! `jobscope audit` takes a value of a filter in every spelling a person has seen (`cpu-bound` in
//! the report, `cpu_bound` in the archive) and refuses one it does not know with one line listing
//! the valid ones, instead of answering "no such jobs".

use jobscope_archive::Store;
use jobscope_model::summary::analysis::{analyze, JobClass};
use std::path::Path;

mod common;
use common::{am_root as is_root, jobscope};

/// A config whose archive is `dir/archive` (made here, empty).
fn config(dir: &Path) -> std::path::PathBuf {
    common::config(dir, "")
}

/// One line on stderr naming every listed word, nothing on stdout, a non-zero exit.
fn refused(cfg: &Path, args: &[&str], words: &[&str]) {
    let (rc, out, err) = jobscope(cfg, args);
    assert_ne!(rc, 0, "{args:?}: exit 0");
    assert!(out.is_empty(), "{args:?}: printed rows anyway:\n{out}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: {err}");
    for w in words {
        assert!(lines[0].contains(w), "{args:?}: no {w:?} in {err}");
    }
}

#[test]
fn an_unknown_class_or_state_is_one_line_naming_the_valid_ones() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path());
    refused(
        &cfg,
        &["audit", "jobs", "--class", "nope"],
        &[
            "--class",
            "\"nope\"",
            "cpu_bound",
            "memory_bound",
            "io_bound",
            "idle",
            "mixed",
            "gpu_bound",
            "gpu_idle",
        ],
    );
    // One bad value among good ones is still refused: it would silently match nothing.
    refused(
        &cfg,
        &["audit", "usage", "--class", "cpu-bound,cpu_bund"],
        &["\"cpu_bund\"", "cpu_bound"],
    );
    refused(
        &cfg,
        &["audit", "jobs", "--state", "finished"],
        &["--state", "COMPLETED", "OUT_OF_MEMORY", "TIMEOUT"],
    );
}

/// A job from a recorded archive document, given its own id and class.
fn job(file: &str, job_id: u32, class: JobClass) -> jobscope_model::summary::JobSummary {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../report/testdata/archive-v1")
        .join(file);
    let mut s = jobscope_archive::load(
        &std::fs::read(&p).unwrap(),
        &jobscope_model::params::Report::default(),
    )
    .unwrap()
    .summary;
    s.job_id = job_id;
    let mut a = analyze(&s, &jobscope_model::params::Report::default());
    a.classification.class = class;
    s.analysis = Some(a);
    s
}

fn job_ids(json: &str) -> Vec<u64> {
    let rows: Vec<serde_json::Value> = serde_json::from_str(json).expect("a JSON list of rows");
    let mut ids: Vec<u64> = rows
        .iter()
        .map(|r| r["job_id"].as_u64().expect("a job_id"))
        .collect();
    ids.sort_unstable();
    ids
}

#[test]
fn both_spellings_of_a_class_give_the_same_rows() {
    if !is_root() {
        // The archive is root's (its files are chowned to the admin group) and so is the index.
        eprintln!("skipped: writing an archive needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path());
    let store = Store::new(&d.path().join("archive"), "root");
    store
        .write(&job("oom.json", 101, JobClass::CpuBound))
        .unwrap();
    store
        .write(&job("two-node-imbalanced.json", 102, JobClass::Idle))
        .unwrap();
    store
        .write(&job("oom.json", 103, JobClass::MemoryBound))
        .unwrap();

    let rows = |class: &str| {
        let (rc, out, err) = jobscope(
            &cfg,
            &["audit", "jobs", "--class", class, "--format", "json"],
        );
        assert_eq!(rc, 0, "--class {class}: {err}");
        out
    };
    let archived = rows("cpu_bound");
    assert_eq!(job_ids(&archived), [101], "{archived}");
    assert_eq!(rows("cpu-bound"), archived);
    assert_eq!(rows("CPU-Bound"), archived);
    // Two classes, one in each spelling.
    assert_eq!(job_ids(&rows("memory-bound,idle")), [102, 103]);
}
