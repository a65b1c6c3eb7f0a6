//! Corrupt spools never turn into panics or absurd figures.
//!
//! Seeded mutations of spools recorded on the test cluster (`report/testdata/recorded/`) plus a
//! synthesized `gpu.jsc` go through the whole Epilog pipeline: decoding, node summary (with GPUs),
//! job assembly and analysis, the text report, the HTML mail and the PNG charts. Mutations are bit
//! flips, truncations, frames re-signed with valid CRCs that carry out-of-order times and extreme
//! values, and hostile header fields. Tests run in the dev profile, so arithmetic overflow panics
//! here instead of wrapping silently as it would in a release build.
//!
//! `JOBSCOPE_MUTATIONS=N` sets the number of mutated spool sets (default 400 in CI); the seed is
//! fixed, so a failure names its case number and reproduces.

use jobscope_config::Config;
use jobscope_model::gpu::spool::{
    decode_gpu_bucket, decode_gpu_file, gpu_bucket_frame, gpu_info_frame, DeviceBucket, GpuBucket,
    GpuInfo, KIND_GPU_BUCKET,
};
use jobscope_model::gpu::{GpuDevice, GpuIdentity, GpuKind};
use jobscope_model::spool::codec::{
    bucket_frame, decode_bucket, decode_file, end_frame, file_start, read_prologue, Frames,
};
use jobscope_model::spool::{End, Gauge, Header, KIND_BUCKET};
use jobscope_model::summary::node::NodeSpool;
use jobscope_model::summary::JobSummary;
use jobscope_report::pipeline::{self, NodeEnd};
use jobscope_report::present::{job_view, render_text, Templates};
use jobscope_report::slurm::{decide_end, EpilogEnv};
use std::path::{Path, PathBuf};

/// xorshift64*: small, seeded, good enough to spread mutations.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, one_in: u64) -> bool {
        // (`is_multiple_of` needs Rust 1.87; the workspace builds with 1.85.)
        #[allow(clippy::manual_is_multiple_of)]
        let hit = self.next() % one_in == 0;
        hit
    }
    /// A value from the places arithmetic breaks: zero, small, the bounds of each integer width.
    fn extreme(&mut self) -> u64 {
        const V: [u64; 12] = [
            0,
            1,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            1 << 53,
            (1 << 62) - 1,
            1 << 62,
            1 << 63,
            i64::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
            1_000_000_000_000_000,
        ];
        if self.chance(3) {
            self.next()
        } else {
            V[self.below(V.len())]
        }
    }
}

/// One node's spool files as bytes (name, contents).
type Files = Vec<(String, Vec<u8>)>;

fn recorded_nodes() -> Vec<Files> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/recorded");
    let mut out = Vec::new();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    cases.sort();
    for case in cases {
        let mut nodes: Vec<PathBuf> = std::fs::read_dir(&case)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        nodes.sort();
        for n in nodes {
            let mut files: Files = std::fs::read_dir(&n)
                .unwrap()
                .flatten()
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read(e.path()).unwrap(),
                    )
                })
                .collect();
            files.sort();
            out.push(files);
        }
    }
    assert!(out.len() >= 6, "recorded spools missing");
    out
}

/// A `gpu.jsc` of two GPUs, one busy and one idle, over the job series' time span.
fn synthesized_gpu(job_jsc: &[u8]) -> Vec<u8> {
    let (mut h, _) = read_prologue(job_jsc, Path::new("job.jsc")).unwrap();
    h.series = "gpu".into();
    let t0 = h.start_unix_ms;
    let mut out = file_start(&h);
    let dev = |i: u32| GpuDevice {
        identity: GpuIdentity {
            kind: Some(GpuKind::Nvidia),
            index: Some(i),
            gres_index: Some(i),
            minor: Some(i),
            uuid: Some(format!("GPU-mutation-{i}")),
            ..Default::default()
        },
        ..Default::default()
    };
    out.extend(gpu_info_frame(&GpuInfo {
        t_ms: t0,
        devices: vec![dev(0), dev(1)],
        ..Default::default()
    }));
    for k in 0..12u64 {
        let t = t0 + k * 5_000;
        let d = |slot: u32, util: u64| DeviceBucket {
            slot,
            samples: 1,
            util_gpu_pct: Some(Gauge::one(util)),
            mem_used_bytes: Some(Gauge::one(1 << 30)),
            power_mw: Some(Gauge::one(90_000)),
            energy_mj: Some(450_000),
            energy_counter_mj: Some(1_000_000 + k * 450_000),
            mem_total_bytes: Some(16 << 30),
            ..Default::default()
        };
        out.extend(gpu_bucket_frame(&GpuBucket {
            t_first_ms: t,
            t_last_ms: t,
            n: 1,
            devices: vec![d(0, 40 + k % 50), d(1, 0)],
        }));
    }
    out.extend(end_frame(&End {
        t_ms: t0 + 60_000,
        reason: "stopped".into(),
        samples_taken: 12,
        samples_missed: 0,
    }));
    out
}

/// The frames after the prologue: (offset, kind, payload).
fn frames(buf: &[u8]) -> Vec<(usize, u8, Vec<u8>)> {
    let Ok((_, start)) = read_prologue(buf, Path::new("x")) else {
        return vec![];
    };
    let mut it = Frames::new(buf, start);
    let mut out = Vec::new();
    let mut pos = it.pos();
    while let Some((kind, payload)) = it.next() {
        out.push((pos, kind, payload.to_vec()));
        pos = it.pos();
    }
    out
}

/// Replaces the frame at `offset` (of `old_len` bytes) with `new` (a re-signed frame).
fn splice(buf: &mut Vec<u8>, offset: usize, old_len: usize, new: Vec<u8>) {
    buf.splice(offset..offset + old_len, new);
}

/// One mutation of one file, chosen by the rng.
fn mutate(rng: &mut Rng, name: &str, buf: &mut Vec<u8>) {
    let fr = frames(buf);
    match rng.below(6) {
        // Bit flips anywhere (mostly caught by the CRC).
        0 => {
            for _ in 0..=rng.below(8) {
                if !buf.is_empty() {
                    let i = rng.below(buf.len());
                    buf[i] ^= 1 << rng.below(8);
                }
            }
        }
        // Truncation.
        1 => {
            let n = rng.below(buf.len() + 1);
            buf.truncate(n);
        }
        // A job-series bucket re-signed with a time out of order or an extreme value.
        2 | 3 => {
            let buckets: Vec<_> = fr.iter().filter(|f| f.1 == KIND_BUCKET).collect();
            if let Some((off, _, payload)) = buckets.get(rng.below(buckets.len())) {
                if let Some(mut b) = decode_bucket(payload) {
                    match rng.below(4) {
                        0 => {
                            b.t_first_ms = rng.extreme();
                            b.t_last_ms = b.t_first_ms.saturating_add(rng.extreme() % 100_000);
                        }
                        1 => b.t_first_ms = b.t_first_ms.saturating_sub(rng.next() % 10_000_000),
                        2 => {
                            let mut fields = b.last.fields();
                            let i = rng.below(fields.len());
                            fields[i] = Some(rng.extreme());
                            b.last = jobscope_model::sample::Reading::from_fields(&fields);
                        }
                        _ => {
                            let g = rng.below(b.gauges.len());
                            b.gauges[g] = Some(Gauge {
                                min: rng.extreme(),
                                max: rng.extreme(),
                                sum: rng.extreme(),
                                count: rng.extreme() as u32,
                            });
                        }
                    }
                    b.n = if rng.chance(5) { 0 } else { b.n };
                    let old = 9 + payload.len();
                    splice(buf, *off, old, bucket_frame(&b));
                }
            }
        }
        // A GPU bucket re-signed with extreme values or times.
        4 if name == "gpu.jsc" => {
            let buckets: Vec<_> = fr.iter().filter(|f| f.1 == KIND_GPU_BUCKET).collect();
            if let Some((off, _, payload)) = buckets.get(rng.below(buckets.len())) {
                if let Some(mut b) = decode_gpu_bucket(payload) {
                    if rng.chance(2) {
                        b.t_first_ms = rng.extreme();
                        b.t_last_ms = rng.extreme();
                    }
                    if let Some(d) = b.devices.first_mut() {
                        d.util_gpu_pct = Some(Gauge {
                            min: rng.extreme(),
                            max: rng.extreme(),
                            sum: rng.extreme(),
                            count: rng.extreme() as u32,
                        });
                        d.energy_mj = Some(rng.extreme());
                        d.slot = rng.extreme() as u32;
                        d.samples = rng.extreme() as u32;
                    }
                    let old = 9 + payload.len();
                    splice(buf, *off, old, gpu_bucket_frame(&b));
                }
            }
        }
        // Hostile header fields, re-signed.
        _ => {
            let Ok((mut h, start)) = read_prologue(buf, Path::new("x")) else {
                return;
            };
            match rng.below(6) {
                0 => h.start_unix_ms = rng.extreme(),
                1 => h.node = "../../etc/\u{202e}evil\r\nBcc: x@y".into(),
                2 => h.alloc_cores = Some(rng.extreme() as u32),
                3 => h.alloc_mem_bytes = Some(rng.extreme()),
                4 => h.cadence_s = rng.extreme() as u32,
                _ => h.uid = rng.extreme() as u32,
            }
            let mut out = file_start(&h);
            out.extend_from_slice(&buf[start..]);
            *buf = out;
        }
    }
}

fn decode_node(files: &Files) -> NodeSpool {
    let mut spool = NodeSpool::default();
    for (name, bytes) in files {
        let p = Path::new(name);
        if name == "gpu.jsc" {
            match decode_gpu_file(bytes, p) {
                Ok(g) => spool.gpu = Some(g),
                Err(e) => spool.problems.push(e.to_string()),
            }
        } else {
            match decode_file(bytes, p) {
                Ok(f) if name == "job.jsc" => spool.series = Some(f),
                Ok(f) => spool.steps.push(f),
                Err(e) => spool.problems.push(e.to_string()),
            }
        }
    }
    spool
}

fn header_of(files: &Files) -> Option<Header> {
    files
        .iter()
        .find_map(|(_, b)| read_prologue(b, Path::new("x")).ok().map(|(h, _)| h))
}

/// The figures a person reads must be finite and within what one job can be.
fn check_figures(case: usize, s: &JobSummary) {
    const YEAR_S: f64 = 400.0 * 86_400.0;
    let spans: Vec<(u64, u64)> = s
        .nodes
        .iter()
        .map(|n| (n.start_unix_ms, n.end_unix_ms))
        .collect();
    let ok = |what: &str, v: Option<f64>, max: f64| {
        if let Some(v) = v {
            assert!(
                v.is_finite() && v >= 0.0 && v <= max,
                "case {case}: {what} = {v} (job {}..{}, nodes {spans:?})",
                s.start_unix_ms,
                s.end_unix_ms
            );
        }
    };
    ok("elapsed_s", Some(s.elapsed_s), YEAR_S);
    for n in &s.nodes {
        ok("node elapsed_s", Some(n.elapsed_s), YEAR_S);
        for g in &n.gpus {
            for p in &g.idle_periods {
                ok("GPU idle period", Some(p.duration_s), YEAR_S);
            }
            ok("GPU util mean", g.util_mean_pct, 100.0);
        }
    }
    ok("cpu_pct", s.efficiency.cpu_pct, f64::MAX);
    ok("mem_pct", s.efficiency.mem_pct, f64::MAX);
    ok("time_pct", s.efficiency.time_pct, f64::MAX);
}

#[test]
fn mutated_spools_never_panic_nor_give_absurd_figures() {
    let n: usize = std::env::var("JOBSCOPE_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut nodes = recorded_nodes();
    // Every node also gets GPUs, so GPU decoding and summaries are exercised too.
    for files in &mut nodes {
        let job = files
            .iter()
            .find(|(n, _)| n == "job.jsc")
            .unwrap()
            .1
            .clone();
        files.push(("gpu.jsc".into(), synthesized_gpu(&job)));
    }
    let cfg = Config::default();
    let templates = Templates::builtin();
    let mut rng = Rng(0x6a6f_6273_636f_7065);
    for case in 0..n {
        // One to three nodes per job, each from a recorded spool, with 1–4 mutations.
        let k = 1 + rng.below(3);
        let mut job_nodes: Vec<Files> = (0..k)
            .map(|_| nodes[rng.below(nodes.len())].clone())
            .collect();
        for _ in 0..=rng.below(4) {
            let i = rng.below(job_nodes.len());
            let j = rng.below(job_nodes[i].len());
            let (name, bytes) = &mut job_nodes[i][j];
            let name = name.clone();
            mutate(&mut rng, &name, bytes);
        }
        let mut summaries = Vec::new();
        let mut names = Vec::new();
        for (i, files) in job_nodes.iter().enumerate() {
            let name = format!("n{i}");
            let spool = decode_node(files);
            let uid = header_of(files).map(|h| h.uid);
            let out = pipeline::node(
                &spool,
                &name,
                7,
                NodeEnd::LastRecord { fallback_ms: 0 },
                uid,
                &cfg,
            );
            summaries.push(out.summary);
            names.push(name);
        }
        let env = EpilogEnv {
            job_id: 7,
            node: names[0].clone(),
            nodelist: Some(names.join(",")),
            exit_code2: Some("0:0".into()),
            ..Default::default()
        };
        let facts = env.facts_with(None);
        let s = pipeline::job(&facts, summaries, &names, &cfg, "mutation", &decide_end);
        check_figures(case, &s);
        let text = render_text(&s, false).unwrap_or_else(|e| panic!("case {case}: text: {e}"));
        assert!(
            !text.contains("NaN") && !text.contains("inf "),
            "case {case}:\n{text}"
        );
        let view = job_view(&s);
        let mut warnings = Vec::new();
        templates
            .render_html(&view, &mut warnings)
            .unwrap_or_else(|e| panic!("case {case}: html: {e}"));
        for node in s.nodes.iter().take(2) {
            let _ = jobscope_report::charts::busy_cores_png(node, node.elapsed_s, 240, 100);
            let _ = jobscope_report::charts::memory_png(node, node.elapsed_s, 240, 100);
        }
        let waiting = jobscope_report::charts::cpu_wait_nodes(&s.nodes, 2);
        if !waiting.is_empty() {
            let _ = jobscope_report::charts::cpu_wait_png(&waiting, s.elapsed_s, 240, 100);
        }
    }
}
