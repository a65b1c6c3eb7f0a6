//! Node summaries + the scheduler's [`JobFacts`] → one [`JobSummary`]. Pure, and free of SLURM: how
//! the job ended is decided by the caller's `decide` (the scheduler adapter knows its semantics),
//! from the facts and the [`EndEvidence`] computed here.
//!
//! Aggregation rules (the ones other tools get wrong):
//! - memory peak is the largest per-node peak (each node has its own limit), never a sum over steps;
//! - CPU time, I/O and samples are sums over nodes;
//! - CPU efficiency is total CPU time ÷ (cores of the WHOLE allocation × elapsed), so a node whose
//!   data never arrived still counts with its cores.

use super::*;
use crate::job::{EndEvidence, JobEnd, JobFacts, JobState};

/// Addition that cannot wrap: node figures come from files on disk, and a sum over many nodes of
/// large-but-plausible counters must stay large, never become small.
trait SaturatingSum: Copy {
    fn add_sat(self, other: Self) -> Self;
}
impl SaturatingSum for u64 {
    fn add_sat(self, other: Self) -> Self {
        self.saturating_add(other)
    }
}
impl SaturatingSum for f64 {
    fn add_sat(self, other: Self) -> Self {
        self + other
    }
}

fn sum_opt<T: SaturatingSum>(vals: impl Iterator<Item = Option<T>>) -> Option<T> {
    vals.flatten().reduce(T::add_sat)
}

fn max_opt<T: Copy + PartialOrd>(vals: impl Iterator<Item = Option<T>>) -> Option<T> {
    vals.flatten().fold(None, |m, x| match m {
        Some(m) if m >= x => Some(m),
        _ => Some(x),
    })
}

/// The job's stalls: each node's share weighted by its window (node-time stalled ÷ node-time
/// measured), over the nodes that have the figure; `None` when no node has pressure figures.
fn job_pressure(nodes: &[NodeSummary]) -> Option<Pressure> {
    let with: Vec<&Pressure> = nodes.iter().filter_map(|n| n.pressure.as_ref()).collect();
    if with.is_empty() {
        return None;
    }
    let share = |f: fn(&Pressure) -> Option<f64>| {
        let (stalled, window) = with
            .iter()
            .filter_map(|p| f(p).map(|pct| (pct * p.window_s, p.window_s)))
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        (window > 0.0).then(|| stalled / window)
    };
    Some(Pressure {
        window_s: with.iter().map(|p| p.window_s).sum(),
        cpu_some_pct: share(|p| p.cpu_some_pct),
        mem_some_pct: share(|p| p.mem_some_pct),
        mem_full_pct: share(|p| p.mem_full_pct),
        io_some_pct: share(|p| p.io_some_pct),
    })
}

/// How far before SLURM's start second a node's first record may lie and still be the job's start:
/// the controller's and the node's clocks differ by NTP's error, well under a second.
const CLOCK_SKEW_MS: u64 = 1_000;
/// How long after SLURM's start second a node's first record may lie and still be the job's start:
/// the launch (the controller's RPC, a prolog, slurmstepd forking the step) takes milliseconds to
/// a few seconds. A first record later than that means jobscope missed the start (a sampler series
/// lost, only a later step recorded): then SLURM's second is the truer start.
const LAUNCH_SLACK_MS: u64 = 5_000;

/// The job's start, from the best source. SLURM gives whole seconds (truncated: up to 1 s early,
/// which made a 12.0 s job read 12.5-13.1 s); jobscope's nodes stamp their first record in
/// milliseconds when the job's first process exists, on the same clock as the node's end. So the
/// nodes' earliest start wins when it lies within SLURM's start second or just after it
/// ([`CLOCK_SKEW_MS`] before to [`LAUNCH_SLACK_MS`] after); SLURM's second when it does not, or
/// when jobscope has nothing; jobscope's alone when SLURM gave no start.
pub fn best_start_ms(slurm_ms: Option<u64>, measured_ms: Option<u64>) -> Option<u64> {
    match (slurm_ms, measured_ms) {
        (Some(s), Some(m))
            if m.saturating_add(CLOCK_SKEW_MS) >= s
                && m < s.saturating_add(1_000 + LAUNCH_SLACK_MS) =>
        {
            Some(m)
        }
        (Some(s), _) => Some(s),
        (None, m) => m,
    }
}

/// SLURM's start second when it is this run's. The controller's record describes the job's latest
/// run: once a job is requeued, the Epilog of the run that ended (or a late `reap`) is answered
/// with the next run's expected or actual start (`scontrol update StartTime=now`, or the hold-off's
/// begin time), which lies after this run's own first record. Such a start is another run's: it
/// must neither become this run's start nor its identity (the archive's key), or the two runs of
/// one job share a key and one report replaces the other. A start up to [`CLOCK_SKEW_MS`] after
/// the nodes' first record is this run's (the clocks differ); one before it is too (the launch
/// takes time, and the record never describes an earlier run). Without a measured start, SLURM's
/// is all there is.
pub fn this_runs_start_s(slurm_start_s: Option<u64>, measured_ms: Option<u64>) -> Option<u64> {
    slurm_start_s.filter(|&s| {
        measured_ms.is_none_or(|m| s.saturating_mul(1000) <= m.saturating_add(CLOCK_SKEW_MS))
    })
}

/// Assembles the job's summary (without analysis). `expected_nodes` are the allocation's nodes;
/// those without a summary are named as missing and still count in the allocation.
pub fn assemble(
    facts: &JobFacts,
    mut nodes: Vec<NodeSummary>,
    expected_nodes: &[String],
    generator: &str,
    decide: &dyn Fn(&JobFacts, &EndEvidence) -> JobEnd,
) -> JobSummary {
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let missing_nodes: Vec<String> = expected_nodes
        .iter()
        .filter(|e| !nodes.iter().any(|n| &n.node == *e))
        .cloned()
        .collect();
    let span = job_span(facts, &nodes);
    let cpu = job_cpu(&nodes);
    let mem = job_mem(&nodes);
    let io = job_io(&nodes);
    let pressure = job_pressure(&nodes);
    let alloc = job_allocation(facts, &nodes, expected_nodes, mem.limit_bytes);
    let efficiency = job_efficiency(&cpu, &mem, &alloc, span.elapsed_s);
    let end = decide(facts, &end_evidence(facts, &nodes, &span));
    let partial_reasons = partial_reasons(facts, &nodes, &missing_nodes);
    let samples = nodes.iter().map(|n| n.quality.samples).sum();
    let user_options = nodes
        .iter()
        .find(|n| !n.user_options.is_empty())
        .map(|n| n.user_options.clone())
        .unwrap_or_default();
    JobSummary {
        schema_version: SCHEMA_VERSION,
        generator: generator.to_string(),
        cluster: facts.cluster.clone(),
        job_id: facts.job_id,
        array_job_id: facts.array_job_id,
        array_task_id: facts.array_task_id,
        name: facts.name.clone(),
        user: facts.user.clone(),
        uid: facts.uid.or_else(|| nodes.first().map(|n| n.uid)),
        gid: facts.gid,
        group: facts.group.clone(),
        account: facts.account.clone(),
        partition: facts.partition.clone(),
        qos: facts.qos.clone(),
        submit_unix_s: facts.submit_unix_s,
        script_sha256: nodes.iter().find_map(|n| n.script_sha256.clone()),
        state: end.state,
        end_reason: end.reason,
        exit_code: facts.exit_code,
        start_unix_ms: span.start_unix_ms,
        end_unix_ms: span.end_unix_ms,
        elapsed_s: span.elapsed_s,
        scheduler_start_unix_s: span.scheduler_start_s,
        alloc,
        cpu,
        mem,
        io,
        pressure,
        kernel: KernelTotals::sum(nodes.iter().filter_map(|n| n.kernel.as_ref())),
        efficiency,
        nodes,
        partial: !partial_reasons.is_empty(),
        missing_nodes,
        partial_reasons,
        samples,
        user_options,
        analysis: None,
    }
}

/// When the job ran, from the scheduler's facts and the nodes' records.
#[derive(Debug, Clone, Copy, PartialEq)]
struct JobSpan {
    /// SLURM's start second when it is this run's ([`this_runs_start_s`]).
    scheduler_start_s: Option<u64>,
    start_unix_ms: u64,
    end_unix_ms: u64,
    elapsed_s: f64,
}

impl JobSpan {
    /// SLURM's start, in milliseconds.
    fn scheduler_start_ms(&self) -> Option<u64> {
        self.scheduler_start_s.map(|t| t.saturating_mul(1000))
    }
}

/// The job's start ([`best_start_ms`]) and end: a batch job ends when its batch script does (SLURM
/// takes its end time then): the batch step's exit on its node. The other nodes' ends (their
/// extern step's, once SLURM tells them) come a round trip later. Without a batch step (salloc,
/// srun alone) the last node's end is the job's.
fn job_span(facts: &JobFacts, nodes: &[NodeSummary]) -> JobSpan {
    // A node whose spool gave nothing (unreadable, or never written) has no start of its own: its
    // zero must not become the job's start, or a job of minutes reads as decades.
    let measured_start_ms = nodes
        .iter()
        .filter(|n| n.quality.samples > 0 || !n.steps.is_empty())
        .map(|n| n.start_unix_ms)
        .min();
    let scheduler_start_s = this_runs_start_s(facts.start_unix_s, measured_start_ms);
    let slurm_start_ms = scheduler_start_s.map(|t| t.saturating_mul(1000));
    let start_unix_ms = best_start_ms(slurm_start_ms, measured_start_ms)
        .or_else(|| nodes.iter().map(|n| n.start_unix_ms).max())
        .unwrap_or(0);
    let nodes_end_ms = nodes.iter().map(|n| n.end_unix_ms).max();
    let batch_end_ms = nodes
        .iter()
        .flat_map(|n| n.steps.iter())
        .filter(|st| st.step == "batch")
        .filter_map(|st| st.end_unix_ms)
        .max()
        .filter(|&t| t >= start_unix_ms && nodes_end_ms.is_some_and(|e| t <= e));
    let end_unix_ms = batch_end_ms
        .or(nodes_end_ms)
        .unwrap_or(start_unix_ms)
        .max(start_unix_ms);
    JobSpan {
        scheduler_start_s,
        start_unix_ms,
        end_unix_ms,
        elapsed_s: end_unix_ms.saturating_sub(start_unix_ms) as f64 / 1000.0,
    }
}

/// CPU times sum over nodes.
fn job_cpu(nodes: &[NodeSummary]) -> CpuTotals {
    CpuTotals {
        usage_s: sum_opt(nodes.iter().map(|n| n.cpu.usage_s)),
        user_s: sum_opt(nodes.iter().map(|n| n.cpu.user_s)),
        system_s: sum_opt(nodes.iter().map(|n| n.cpu.system_s)),
        throttled_s: sum_opt(nodes.iter().map(|n| n.cpu.throttled_s)),
        throttled_periods: sum_opt(nodes.iter().map(|n| n.cpu.throttled_periods)),
    }
}

/// Memory peaks and limits are the largest node's (each node has its own limit); event counts sum.
fn job_mem(nodes: &[NodeSummary]) -> MemTotals {
    MemTotals {
        peak_bytes: max_opt(nodes.iter().map(|n| n.mem.peak_bytes)),
        limit_bytes: max_opt(nodes.iter().map(|n| n.mem.limit_bytes)),
        rss_peak_bytes: max_opt(nodes.iter().map(|n| n.mem.rss_peak_bytes)),
        cache_peak_bytes: max_opt(nodes.iter().map(|n| n.mem.cache_peak_bytes)),
        shmem_peak_bytes: max_opt(nodes.iter().map(|n| n.mem.shmem_peak_bytes)),
        swap_peak_bytes: max_opt(nodes.iter().map(|n| n.mem.swap_peak_bytes)),
        failcnt: sum_opt(nodes.iter().map(|n| n.mem.failcnt)),
        oom_events: sum_opt(nodes.iter().map(|n| n.mem.oom_events)),
        oom_kill_events: sum_opt(nodes.iter().map(|n| n.mem.oom_kill_events)),
    }
}

/// I/O sums over nodes, but for its peak rate.
fn job_io(nodes: &[NodeSummary]) -> IoTotals {
    IoTotals {
        read_bytes: sum_opt(nodes.iter().map(|n| n.io.read_bytes)),
        write_bytes: sum_opt(nodes.iter().map(|n| n.io.write_bytes)),
        read_ops: sum_opt(nodes.iter().map(|n| n.io.read_ops)),
        write_ops: sum_opt(nodes.iter().map(|n| n.io.write_ops)),
        // Nodes' peaks need not coincide; the sum is an upper bound, the max a lower one. Report the max.
        peak_bytes_per_s: max_opt(nodes.iter().map(|n| n.io.peak_bytes_per_s)),
        source: nodes.iter().find_map(|n| n.io.source.clone()),
    }
}

/// The allocation: at least the nodes expected and the nodes that reported. `mem_limit_bytes`
/// (the largest cgroup limit seen) stands in for the memory per node when nothing else says it.
fn job_allocation(
    facts: &JobFacts,
    nodes: &[NodeSummary],
    expected_nodes: &[String],
    mem_limit_bytes: Option<u64>,
) -> Allocation {
    let n_nodes = facts
        .node_count
        .unwrap_or(0)
        .max(nodes.len() as u32)
        .max(expected_nodes.len() as u32);
    // Cores: the scheduler's count for the whole job; else the per-node allocations seen, with
    // missing nodes assumed like the others, so a missing node does not inflate efficiency.
    let cores = facts.cpus.or_else(|| {
        let seen: Vec<u32> = nodes.iter().filter_map(|n| n.alloc_cores).collect();
        (!seen.is_empty()).then(|| {
            let per = seen.iter().map(|&c| f64::from(c)).sum::<f64>() / seen.len() as f64;
            (per * n_nodes as f64).round() as u32
        })
    });
    Allocation {
        nodes: n_nodes,
        cores,
        mem_per_node_bytes: max_opt(nodes.iter().map(|n| n.alloc_mem_bytes))
            .or(facts.mem_per_node_bytes)
            .or(mem_limit_bytes),
        gpus: facts.gpus.clone(),
        time_limit_s: facts.time_limit_s,
    }
}

/// CPU time ÷ (the whole allocation's cores × elapsed); the memory peak ÷ the memory per node;
/// elapsed ÷ the time limit.
fn job_efficiency(
    cpu: &CpuTotals,
    mem: &MemTotals,
    alloc: &Allocation,
    elapsed_s: f64,
) -> Efficiency {
    Efficiency {
        cpu_pct: match (cpu.usage_s, alloc.cores) {
            (Some(u), Some(c)) if c > 0 && elapsed_s > 0.0 => {
                Some(100.0 * u / (c as f64 * elapsed_s))
            }
            _ => None,
        },
        mem_pct: match (mem.peak_bytes, alloc.mem_per_node_bytes) {
            (Some(p), Some(a)) if a > 0 => Some(100.0 * p as f64 / a as f64),
            _ => None,
        },
        time_pct: alloc
            .time_limit_s
            .filter(|&l| l > 0)
            .map(|l| 100.0 * elapsed_s / l as f64),
    }
}

/// What the scheduler's adapter decides the job's end from.
fn end_evidence(facts: &JobFacts, nodes: &[NodeSummary], span: &JobSpan) -> EndEvidence {
    EndEvidence {
        oom_kills: nodes.iter().filter_map(|n| n.mem.oom_kill_events).sum(),
        failed_step: nodes
            .iter()
            .flat_map(|n| n.steps.iter())
            .find(|st| st.exit_status.is_some_and(|e| e != 0) && st.step != "extern")
            .map(|st| st.step.clone()),
        // The time limit is SLURM's, enforced from its own start second: judge it against that.
        elapsed_s: span.scheduler_start_ms().map_or(span.elapsed_s, |s| {
            span.end_unix_ms.saturating_sub(s) as f64 / 1000.0
        }),
        steps_without_end: {
            let mut names: Vec<String> = unended_steps(nodes, facts)
                .map(|(_, st)| st.step.clone())
                .collect();
            names.sort();
            names.dedup();
            names
        },
    }
}

/// Why a node that had a part in the job has none in its summary.
fn missing_reason(node: &str) -> String {
    format!("node {node}: no data arrived (node failure or epilog not run)")
}

/// With no transport between nodes (`transport.mode = "none"`, docs/cluster.md), a multi-node
/// job is reported by its first node alone: its other nodes did not fail, they were not seen.
/// One reason says so, names them, and says how to see them, in place of "no data arrived".
pub fn unseen_without_transport(s: &mut JobSummary) {
    if s.missing_nodes.is_empty() {
        return;
    }
    let missing: Vec<String> = s.missing_nodes.iter().map(|m| missing_reason(m)).collect();
    s.partial_reasons.retain(|r| !missing.contains(r));
    s.partial_reasons.insert(
        0,
        format!(
            "only node {}'s figures: no transport is configured, so the job's first node reports alone and {} {} not seen (set [transport] in jobscope.toml: docs/cluster.md)",
            s.nodes.first().map_or("?", |n| n.node.as_str()),
            s.missing_nodes.join(", "),
            if s.missing_nodes.len() == 1 { "was" } else { "were" }
        ),
    );
}

/// Why the summary is partial: nodes without data, nodes whose sampling stopped early or lost a
/// record, steps not seen to end. Empty when it is whole.
fn partial_reasons(
    facts: &JobFacts,
    nodes: &[NodeSummary],
    missing_nodes: &[String],
) -> Vec<String> {
    let mut partial_reasons = Vec::new();
    for m in missing_nodes {
        partial_reasons.push(missing_reason(m));
    }
    for n in nodes {
        if n.quality.samples == 0 {
            partial_reasons.push(format!("node {}: no samples", n.node));
        } else if !n.quality.final_counters && !n.quality.sampler_ended_cleanly {
            partial_reasons.push(format!("node {}: sampling stopped early (crash, reboot or killed); counters are a lower bound", n.node));
        }
        if n.quality.torn_records {
            partial_reasons.push(format!("node {}: a torn spool record was dropped", n.node));
        }
    }
    for (n, st) in unended_steps(nodes, facts) {
        partial_reasons.push(format!(
            "node {}: step {} was not seen to end (its slurmstepd died or was killed): its exit status and its last figures are missing",
            n.node, st.step
        ));
    }
    partial_reasons
}

/// The steps (not `extern`) jobscope saw start on each node and never saw end, for a job the
/// scheduler no longer runs (a running job's steps have not ended yet).
fn unended_steps<'a>(
    nodes: &'a [NodeSummary],
    facts: &JobFacts,
) -> impl Iterator<Item = (&'a NodeSummary, &'a StepSummary)> {
    let running = matches!(
        facts.scheduler_state,
        Some(JobState::Running | JobState::Suspended | JobState::Pending)
    );
    nodes
        .iter()
        .filter(move |_| !running)
        .flat_map(|n| n.steps.iter().map(move |st| (n, st)))
        .filter(|(_, st)| st.step != "extern" && st.end_unix_ms.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{EndReason, JobState};

    fn node(name: &str, cpu_s: f64, peak: u64) -> NodeSummary {
        NodeSummary {
            node: name.into(),
            job_id: 5,
            uid: 1001,
            start_unix_ms: 1_000,
            end_unix_ms: 101_000,
            elapsed_s: 100.0,
            alloc_cores: Some(4),
            alloc_mem_bytes: Some(4 << 30),
            cpu: CpuTotals {
                usage_s: Some(cpu_s),
                ..Default::default()
            },
            mem: MemTotals {
                peak_bytes: Some(peak),
                ..Default::default()
            },
            quality: Quality {
                samples: 5,
                sampler_ended_cleanly: true,
                final_counters: true,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn facts() -> JobFacts {
        JobFacts {
            job_id: 5,
            exit_code: Some(0),
            exit_signal: Some(0),
            ..Default::default()
        }
    }

    /// A stand-in for the scheduler's decision that hands back what it was given, so the tests can
    /// see what evidence assembly computed.
    fn completed(_: &JobFacts, _: &EndEvidence) -> JobEnd {
        JobEnd {
            state: JobState::Completed,
            reason: None,
        }
    }

    fn run(nodes: Vec<NodeSummary>, expected: &[&str]) -> JobSummary {
        let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
        assemble(&facts(), nodes, &expected, "t", &completed)
    }

    proptest::proptest! {
        /// The aggregation rules hold for any set of nodes: CPU, I/O and samples sum; the memory
        /// peak is the largest node's; efficiency uses the whole allocation; a missing value stays
        /// missing only when every node lacks it.
        #[test]
        fn aggregation_properties(
            nodes in proptest::collection::vec((0.0f64..1e6, proptest::option::of(0u64..1 << 40), proptest::option::of(0u64..1 << 40), 1u32..128), 1..40),
            elapsed in 1.0f64..1e6,
        ) {
            let ns: Vec<NodeSummary> = nodes.iter().enumerate().map(|(i, (cpu, peak, io, cores))| {
                let mut n = node(&format!("n{i:03}"), *cpu, 0);
                n.mem.peak_bytes = *peak;
                n.io.read_bytes = *io;
                n.alloc_cores = Some(*cores);
                n.start_unix_ms = 0;
                n.end_unix_ms = (elapsed * 1000.0) as u64;
                n
            }).collect();
            let names: Vec<String> = ns.iter().map(|n| n.node.clone()).collect();
            let s = assemble(&facts(), ns.clone(), &names, "t", &completed);
            let cpu: f64 = nodes.iter().map(|n| n.0).sum();
            proptest::prop_assert!((s.cpu.usage_s.unwrap() - cpu).abs() <= 1e-6 * cpu.max(1.0));
            proptest::prop_assert_eq!(s.mem.peak_bytes, nodes.iter().filter_map(|n| n.1).max());
            let io: Vec<u64> = nodes.iter().filter_map(|n| n.2).collect();
            proptest::prop_assert_eq!(s.io.read_bytes, (!io.is_empty()).then(|| io.iter().sum()));
            proptest::prop_assert_eq!(s.samples, 5 * nodes.len() as u64);
            let cores: u32 = nodes.iter().map(|n| n.3).sum();
            proptest::prop_assert_eq!(s.alloc.cores, Some(cores));
            // Expected figures from the inputs alone: every node ran `elapsed` s (to the ms), from 0.
            let elapsed_ms = (elapsed * 1000.0) as u64;
            let elapsed_s = elapsed_ms as f64 / 1000.0;
            proptest::prop_assert_eq!(s.elapsed_s, elapsed_s);
            let eff = s.efficiency.cpu_pct.unwrap();
            let want = 100.0 * cpu / (cores as f64 * elapsed_s);
            proptest::prop_assert!((eff - want).abs() <= 1e-6 * want.max(1.0), "{} vs {}", eff, want);
            proptest::prop_assert!(!s.partial);
        }
    }

    #[test]
    fn aggregation_rules() {
        let s = run(
            vec![node("b", 300.0, 1 << 30), node("a", 100.0, 3 << 30)],
            &["a", "b"],
        );
        assert_eq!(s.cpu.usage_s, Some(400.0), "CPU sums over nodes");
        assert_eq!(
            s.mem.peak_bytes,
            Some(3 << 30),
            "memory peak is the max per node"
        );
        assert_eq!(s.alloc.cores, Some(8));
        // 400 CPU-s / (8 cores × 100 s) = 50 %
        assert_eq!(s.efficiency.cpu_pct, Some(50.0));
        assert_eq!(s.efficiency.mem_pct, Some(75.0));
        assert_eq!(s.nodes[0].node, "a");
        assert!(!s.partial);
        assert_eq!(s.state, JobState::Completed);
    }

    /// A step seen to start and never to end (its slurmstepd killed with -9) is named in the
    /// evidence and makes the record partial; the extern step (no exit of its own) and a running
    /// job's steps do not.
    #[test]
    fn a_step_not_seen_to_end_is_named_and_makes_the_record_partial() {
        let step = |name: &str, end: Option<u64>| StepSummary {
            step: name.into(),
            start_unix_ms: Some(1_000),
            end_unix_ms: end,
            exit_status: end.map(|_| 0),
            elapsed_s: None,
            cpu_s: None,
            mem_peak_bytes: None,
        };
        let mut a = node("a", 100.0, 1 << 30);
        a.steps = vec![
            step("extern", None),
            step("batch", None),
            step("0", Some(9_000)),
        ];
        let mut b = node("b", 100.0, 1 << 30);
        b.steps = vec![step("batch", None)];
        let seen = std::cell::RefCell::new(Vec::new());
        let decide = |_: &JobFacts, e: &EndEvidence| {
            seen.borrow_mut().push(e.steps_without_end.clone());
            completed(&facts(), e)
        };
        let s = assemble(
            &facts(),
            vec![a.clone(), b],
            &["a".into(), "b".into()],
            "t",
            &decide,
        );
        assert_eq!(seen.borrow()[0], vec!["batch".to_string()]);
        assert!(s.partial);
        let named: Vec<&String> = s
            .partial_reasons
            .iter()
            .filter(|r| r.contains("step batch was not seen to end"))
            .collect();
        assert_eq!(named.len(), 2, "{:?}", s.partial_reasons);
        assert!(named[0].starts_with("node a:") && named[1].starts_with("node b:"));

        let running = JobFacts {
            scheduler_state: Some(JobState::Running),
            ..facts()
        };
        let live = assemble(&running, vec![a], &["a".into()], "t", &decide);
        assert!(!live.partial, "{:?}", live.partial_reasons);
        assert_eq!(seen.borrow()[1], Vec::<String>::new());
    }

    #[test]
    fn missing_node_makes_partial_and_still_counts_its_cores() {
        // Two nodes of 4 cores were allocated; only `a` reported, 100 CPU-s over 100 s.
        let s = run(vec![node("a", 100.0, 1)], &["a", "b"]);
        assert!(s.partial);
        assert_eq!(s.missing_nodes, vec!["b"]);
        assert!(s.partial_reasons[0].contains("node b"));
        assert_eq!(
            s.alloc.nodes, 2,
            "the missing node is part of the allocation"
        );
        assert_eq!(s.alloc.cores, Some(8), "its cores count too");
        // 100 CPU-s / (8 cores × 100 s) = 12.5 %, not the 25 % of the reporting node alone.
        assert_eq!(s.efficiency.cpu_pct, Some(12.5));
    }

    #[test]
    fn scheduler_counts_win_and_missing_values_stay_missing() {
        let mut f = facts();
        f.cpus = Some(16);
        f.node_count = Some(3);
        f.time_limit_s = Some(400);
        f.start_unix_s = Some(0);
        let mut n = node("a", 800.0, 1 << 30);
        n.alloc_mem_bytes = None;
        n.start_unix_ms = 0;
        n.end_unix_ms = 200_000;
        let s = assemble(&f, vec![n], &["a".to_string()], "t", &completed);
        assert_eq!((s.alloc.nodes, s.alloc.cores), (3, Some(16)));
        assert_eq!(s.elapsed_s, 200.0, "start and end from the node");
        // 800 / (16 × 200) = 25 %
        assert_eq!(s.efficiency.cpu_pct, Some(25.0));
        assert_eq!(s.efficiency.time_pct, Some(50.0));
        assert_eq!(
            s.efficiency.mem_pct, None,
            "no allocation known: no percentage"
        );
        assert_eq!(s.io.read_bytes, None);
    }

    #[test]
    fn the_start_is_the_nodes_millisecond_record_when_it_fits_slurms_second() {
        let s = 1_700_000_000_000u64;
        // Within SLURM's (truncated) start second, or a launch after it: the node's record.
        assert_eq!(best_start_ms(Some(s), Some(s + 700)), Some(s + 700));
        assert_eq!(best_start_ms(Some(s), Some(s + 4_200)), Some(s + 4_200));
        // The node's clock a little behind the controller's.
        assert_eq!(best_start_ms(Some(s), Some(s - 300)), Some(s - 300));
        // Far after: jobscope missed the start (its first record is a later step): SLURM's second.
        assert_eq!(best_start_ms(Some(s), Some(s + 60_000)), Some(s));
        // Far before: not this job's start.
        assert_eq!(best_start_ms(Some(s), Some(s - 5_000)), Some(s));
        assert_eq!(best_start_ms(Some(s), None), Some(s));
        assert_eq!(best_start_ms(None, Some(s + 1)), Some(s + 1));
        assert_eq!(best_start_ms(None, None), None);
    }

    #[test]
    fn the_batch_steps_exit_ends_the_job_and_the_limit_is_judged_from_slurms_start() {
        // SLURM: started in second 1000, limit 60 s. Node a (batch) ran from 1000.8 s to 1060.6 s;
        // node b's extern step ended 0.3 s later, when SLURM told it.
        let mut f = facts();
        f.start_unix_s = Some(1_000);
        f.time_limit_s = Some(60);
        let mut a = node("a", 1.0, 1);
        a.start_unix_ms = 1_000_800;
        a.end_unix_ms = 1_060_600;
        a.steps = vec![StepSummary {
            step: "batch".into(),
            start_unix_ms: Some(1_000_800),
            end_unix_ms: Some(1_060_600),
            elapsed_s: Some(59.8),
            cpu_s: Some(1.0),
            mem_peak_bytes: None,
            exit_status: Some(0),
        }];
        let mut b = node("b", 1.0, 1);
        b.start_unix_ms = 1_000_850;
        b.end_unix_ms = 1_060_900;
        let seen = std::cell::RefCell::new(None);
        let decide = |_: &JobFacts, e: &EndEvidence| {
            *seen.borrow_mut() = Some(e.clone());
            completed(&facts(), e)
        };
        let names = ["a".to_string(), "b".to_string()];
        let s = assemble(&f, vec![a, b], &names, "t", &decide);
        assert_eq!((s.start_unix_ms, s.end_unix_ms), (1_000_800, 1_060_600));
        assert_eq!(
            s.scheduler_start_unix_s,
            Some(1_000),
            "kept for the archive's key"
        );
        assert!((s.elapsed_s - 59.8).abs() < 1e-9, "{}", s.elapsed_s);
        // SLURM enforces its limit from its own start second: 60.6 s by that clock.
        assert!((seen.borrow().as_ref().unwrap().elapsed_s - 60.6).abs() < 1e-9);
    }

    #[test]
    fn the_decision_sees_the_evidence() {
        let mut a = node("a", 1.0, 1);
        a.mem.oom_kill_events = Some(2);
        let mut b = node("b", 1.0, 1);
        b.mem.oom_kill_events = Some(1);
        let seen = std::cell::RefCell::new(None);
        let decide = |_: &JobFacts, e: &EndEvidence| {
            *seen.borrow_mut() = Some(e.clone());
            JobEnd {
                state: JobState::OutOfMemory,
                reason: Some(EndReason::OomKills { kills: e.oom_kills }),
            }
        };
        let names = ["a".to_string(), "b".to_string()];
        let s = assemble(&facts(), vec![a, b], &names, "t", &decide);
        let e = seen.borrow().clone().unwrap();
        assert_eq!((e.oom_kills, e.elapsed_s), (3, 100.0));
        assert_eq!(s.state, JobState::OutOfMemory);
        assert_eq!(s.end_reason, Some(EndReason::OomKills { kills: 3 }));
    }

    /// Efficiency: CPU time over the whole allocation's core-seconds, the peak over the memory
    /// per node, elapsed over the limit; nothing divides by zero.
    #[test]
    fn efficiency_is_use_over_allocation() {
        let cpu = CpuTotals {
            usage_s: Some(200.0),
            ..Default::default()
        };
        let mem = MemTotals {
            peak_bytes: Some(1 << 30),
            ..Default::default()
        };
        let alloc = Allocation {
            nodes: 2,
            cores: Some(8),
            mem_per_node_bytes: Some(4 << 30),
            gpus: None,
            time_limit_s: Some(400),
        };
        let e = job_efficiency(&cpu, &mem, &alloc, 100.0);
        assert_eq!(e.cpu_pct, Some(25.0));
        assert_eq!(e.mem_pct, Some(25.0));
        assert_eq!(e.time_pct, Some(25.0));
        let none = Allocation {
            cores: Some(0),
            mem_per_node_bytes: Some(0),
            time_limit_s: Some(0),
            ..alloc
        };
        let e = job_efficiency(&cpu, &mem, &none, 100.0);
        assert_eq!((e.cpu_pct, e.mem_pct, e.time_pct), (None, None, None));
    }

    /// Without the scheduler's core count, missing nodes are assumed like the seen ones; the
    /// memory limit stands in for the memory per node only when nothing else gives it.
    #[test]
    fn the_allocation_extrapolates_cores_to_missing_nodes() {
        let mut a = node("a", 1.0, 1);
        a.alloc_mem_bytes = None;
        let expected = ["a".to_string(), "b".to_string(), "c".to_string()];
        let alloc = job_allocation(&facts(), &[a], &expected, Some(7));
        assert_eq!(alloc.nodes, 3);
        assert_eq!(alloc.cores, Some(12));
        assert_eq!(alloc.mem_per_node_bytes, Some(7));
    }

    /// Each reason names its node; a whole job has none.
    #[test]
    fn without_a_transport_the_unseen_nodes_get_one_reason_naming_them_and_the_fix() {
        let f = facts();
        let nodes = vec![node("a", 1.0, 1)];
        let expected = ["a".to_string(), "b".to_string(), "c".to_string()];
        let mut s = assemble(&f, nodes, &expected, "t", &|_, _| JobEnd {
            state: crate::job::JobState::Completed,
            reason: None,
        });
        assert_eq!(s.partial_reasons.len(), 2, "{:?}", s.partial_reasons);
        unseen_without_transport(&mut s);
        assert_eq!(s.missing_nodes, ["b", "c"]);
        assert_eq!(
            s.partial_reasons,
            ["only node a's figures: no transport is configured, so the job's first node reports alone and b, c were not seen (set [transport] in jobscope.toml: docs/cluster.md)"]
        );
    }

    #[test]
    fn partial_reasons_name_the_node() {
        assert!(partial_reasons(&facts(), &[node("a", 1.0, 1)], &[]).is_empty());
        let mut torn = node("b", 1.0, 1);
        torn.quality.torn_records = true;
        let mut empty = node("c", 0.0, 0);
        empty.quality.samples = 0;
        let r = partial_reasons(&facts(), &[torn, empty], &["d".to_string()]);
        assert_eq!(r.len(), 3, "{r:?}");
        assert!(r[0].starts_with("node d: no data arrived"), "{r:?}");
        assert!(r[1].starts_with("node b: a torn spool record"), "{r:?}");
        assert_eq!(r[2], "node c: no samples");
    }
}
