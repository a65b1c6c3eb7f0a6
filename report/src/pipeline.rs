//! The one way a report is made: spool directory → [`node`] summary (with GPUs) → [`job`] summary
//! (from the nodes and the scheduler's facts) with its analysis. The Epilog (`run::run_epilog`),
//! `jobscope reap`, `jobscope summarize`, the golden tests (`report/tests/golden.rs`) and the
//! benchmark (`report/benches/summary.rs`) all go through here.

use jobscope_config::Config;
use jobscope_model::gpu::summary::GpuSummaryParams;
use jobscope_model::job::{EndEvidence, JobEnd, JobFacts};
// The one reader of a node's spool (`jobscope_common::spool`), named here beside what reads it.
pub use jobscope_common::spool::read_node_dir;
use jobscope_model::summary::node::summarize_node_spool;
use jobscope_model::summary::node::NodeSpool;
use jobscope_model::summary::{analysis, job, JobSummary, NodeSummary};

pub use crate::GENERATOR;

/// When the job ended on a node.
#[derive(Debug, Clone, Copy)]
pub enum NodeEnd {
    /// At this moment (the Epilog runs right after the job's end on its node).
    At(u64),
    /// At the last thing the spool recorded (collected later: reap, summarize, tests); at `fallback`
    /// when it recorded nothing.
    LastRecord { fallback_ms: u64 },
}

/// One node's summary and what could not be read (for the log; it is in the quality notes too).
#[derive(Debug, Clone)]
pub struct NodeOutput {
    pub summary: NodeSummary,
    pub problems: Vec<String>,
}

/// The GPU thresholds of the site configuration.
pub fn gpu_params(cfg: &Config) -> GpuSummaryParams {
    // One definition, shared with the plugin's live snapshots.
    jobscope_config::gpu_params(cfg)
}

/// Summarises one node's spool (read by [`read_node_dir`]). `node` names the node when no spool
/// file does; `job_id` is the job the caller collects it for; `uid` (the scheduler's) wins over the
/// spool header's.
pub fn node(
    spool: &NodeSpool,
    node: &str,
    job_id: u32,
    end: NodeEnd,
    uid: Option<u32>,
    cfg: &Config,
) -> NodeOutput {
    let end_ms = match end {
        NodeEnd::At(t) => t,
        NodeEnd::LastRecord { fallback_ms } => spool.last_record_ms().unwrap_or(fallback_ms),
    };
    let mut summary = summarize_node_spool(spool, node, end_ms, &gpu_params(cfg));
    summary.job_id = job_id;
    if let Some(uid) = uid {
        summary.uid = uid;
    }
    NodeOutput {
        summary,
        problems: spool.problems.clone(),
    }
}

/// The job's summary with its analysis. `decide` is the scheduler adapter's end-state decision
/// (`crate::slurm::Slurm::decide_end`).
pub fn job(
    facts: &JobFacts,
    nodes: Vec<NodeSummary>,
    expected_nodes: &[String],
    cfg: &Config,
    generator: &str,
    decide: &dyn Fn(&JobFacts, &EndEvidence) -> JobEnd,
) -> JobSummary {
    let mut s = job::assemble(facts, nodes, expected_nodes, generator, decide);
    s.analysis = Some(analysis::analyze(&s, &cfg.report));
    s
}

/// `jobscope summarize`: one spool directory as a report, without SLURM or the archive. The job
/// is taken to have ended normally, on this one node, at the last thing its spool recorded.
pub fn summarize_dir(
    dir: &std::path::Path,
    cfg: &Config,
) -> Result<(JobSummary, Vec<String>), String> {
    let spool = read_node_dir(dir);
    let Some(h) = spool.header().cloned() else {
        let mut why = format!("{}: no readable spool files", dir.display());
        for p in &spool.problems {
            why += &format!("; {p}");
        }
        return Err(why);
    };
    let end = NodeEnd::LastRecord {
        fallback_ms: h.start_unix_ms,
    };
    let node = node(&spool, &h.node, h.job_id, end, Some(h.uid), cfg);
    let facts = JobFacts {
        job_id: h.job_id,
        uid: Some(h.uid),
        gid: Some(h.gid),
        exit_code: Some(0),
        exit_signal: Some(0),
        ..Default::default()
    };
    let decide = crate::slurm::decide_end;
    let s = job(
        &facts,
        vec![node.summary],
        &[h.node],
        cfg,
        GENERATOR,
        &decide,
    );
    Ok((s, node.problems))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobscope_model::gpu::spool::{DeviceBucket, GpuBucket, GpuInfo};
    use jobscope_model::gpu::{GpuDevice, GpuIdentity, GPU_FILE_NAME};
    use jobscope_model::spool::{Bucket, End, Gauge, Header};
    use jobscope_sampler::gpu::spool::{GpuLimits, GpuWriter};
    use jobscope_sampler::spool::writer::{Limits, SeriesWriter};

    fn header(series: &str) -> Header {
        Header {
            uid: 1001,
            alloc_cores: Some(4),
            ..testing::header(31, "g1", series)
        }
    }

    /// `jobscope summarize` once never read `gpu.jsc`; through the pipeline it does, like the Epilog.
    #[test]
    fn summarize_reads_the_gpu_series_too() {
        let d = tempfile::tempdir().unwrap();
        let mut w =
            SeriesWriter::<Bucket>::create(d.path(), "job.jsc", header("job"), Limits::default())
                .unwrap();
        w.end(&End {
            t_ms: 1_700_001_120_000,
            reason: "stopped".into(),
            samples_taken: 0,
            samples_missed: 0,
        })
        .unwrap();
        let mut g = GpuWriter::create(d.path(), GPU_FILE_NAME, header("gpu"), GpuLimits::default())
            .unwrap();
        g.set_info(GpuInfo {
            t_ms: 1_700_001_000_500,
            backends: vec!["nvml".into()],
            selection_source: None,
            devices: vec![GpuDevice {
                identity: GpuIdentity {
                    uuid: Some("GPU-test".into()),
                    ..Default::default()
                },
                ..Default::default()
            }],
            unresolved: vec![],
            notes: vec![],
        })
        .unwrap();
        for (i, util) in [60u64, 80, 100].into_iter().enumerate() {
            let t = 1_700_001_030_000 + i as u64 * 30_000;
            g.push(GpuBucket {
                t_first_ms: t,
                t_last_ms: t,
                n: 1,
                devices: vec![DeviceBucket {
                    slot: 0,
                    samples: 1,
                    util_gpu_pct: Some(Gauge::one(util)),
                    ..Default::default()
                }],
            })
            .unwrap();
        }
        let (s, problems) = summarize_dir(d.path(), &Config::default()).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!((s.job_id, s.uid), (31, Some(1001)));
        assert_eq!(s.elapsed_s, 120.0, "ends at the sampler's end record");
        let gpus = &s.nodes[0].gpus;
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].identity.uuid.as_deref(), Some("GPU-test"));
        assert!(gpus[0].util_max_pct == Some(100.0), "{:?}", gpus[0]);
        assert!(s.analysis.is_some());
    }

    #[test]
    fn summarize_refuses_a_directory_without_spool_files() {
        let d = tempfile::tempdir().unwrap();
        let err = summarize_dir(d.path(), &Config::default()).unwrap_err();
        assert!(err.contains("no readable spool files"), "{err}");
    }
}

/// Spool fixtures as the plugin writes them, for this crate's tests and those of the stages after it
/// (the `testing` feature; no package enables it).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use crate::slurm::v22_05::parse_squeue_json;
    use jobscope_config::Config;
    use jobscope_model::job::JobFacts;
    use jobscope_model::sample::CgroupVersion;
    use jobscope_model::spool::Header;
    use jobscope_model::summary::NodeSummary;
    use std::path::{Path, PathBuf};

    /// A job recorded on the real test cluster (`report/testdata/recorded/<case>`,
    /// `tests/record-spools.sh`): SLURM's facts from its `squeue --json`, and each node's summary
    /// as the Epilog makes it from the node's raw spool directory (`node-<name>/`).
    pub struct Recorded {
        pub dir: PathBuf,
        pub job_id: u32,
        pub facts: JobFacts,
        pub nodes: Vec<NodeSummary>,
        /// The nodes' names, in the order of `nodes`.
        pub names: Vec<String>,
    }

    /// Reads the recorded job `case` with the thresholds `cfg`; panics (these are tests' fixtures)
    /// on a missing file or a spool the pipeline reports a problem with.
    pub fn recorded(case: &str, cfg: &Config) -> Recorded {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/recorded")
            .join(case);
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .unwrap_or_else(|e| panic!("{}/{f}: {e}", dir.display()))
        };
        let job_id: u32 = read("job_id").trim().parse().expect("job_id");
        let facts =
            parse_squeue_json(&read("squeue.json"), job_id).expect("the job in squeue.json");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        let (mut nodes, mut names) = (Vec::new(), Vec::new());
        for d in dirs {
            let name = d.file_name().unwrap().to_string_lossy();
            let name = name
                .strip_prefix("node-")
                .expect("node-<name>/")
                .to_string();
            // The Epilog's "now": right after the last thing the node recorded.
            let out = super::node(
                &super::read_node_dir(&d),
                &name,
                job_id,
                super::NodeEnd::LastRecord { fallback_ms: 0 },
                facts.uid,
                cfg,
            );
            assert!(
                out.problems.is_empty(),
                "{}: {:?}",
                d.display(),
                out.problems
            );
            nodes.push(out.summary);
            names.push(name);
        }
        Recorded {
            dir,
            job_id,
            facts,
            nodes,
            names,
        }
    }

    /// A spool header as the plugin writes it: uid/gid 4242, cgroup v1, 2 cores, 1 GiB.
    pub fn header(job: u32, node: &str, series: &str) -> Header {
        Header {
            uid: 4242,
            gid: 4242,
            cgroup_version: Some(CgroupVersion::V1),
            plugin_version: "t".into(),
            alloc_cores: Some(2),
            alloc_mem_bytes: Some(1 << 30),
            ..Header::new(job, node, series, 1_700_001_000_000)
        }
    }
}
