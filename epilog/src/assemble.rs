//! Node summaries + what SLURM says → one [`JobSummary`]. Pure.
//!
//! Aggregation rules (the ones other tools get wrong):
//! - memory peak is the largest per-node peak (each node has its own limit), never a sum over steps;
//! - CPU time, I/O and samples are sums over nodes;
//! - CPU efficiency is total CPU time ÷ (cores of the WHOLE allocation × elapsed).

use crate::jobinfo::{EpilogEnv, JobInfo};
use jobscope_core::summary::*;

fn sum_opt<T: Copy + std::iter::Sum<T>>(vals: impl Iterator<Item = Option<T>>) -> Option<T> {
    let v: Vec<T> = vals.flatten().collect();
    (!v.is_empty()).then(|| v.into_iter().sum())
}

fn max_opt<T: Copy + PartialOrd>(vals: impl Iterator<Item = Option<T>>) -> Option<T> {
    vals.flatten().fold(None, |m, x| match m {
        Some(m) if m >= x => Some(m),
        _ => Some(x),
    })
}

/// Why the job ended. SLURM's own state is used when it is final; during the Epilog the job is still
/// COMPLETING, so the state is concluded from the evidence, and the evidence is stated.
pub fn derive_state(
    info: Option<&JobInfo>,
    env: &EpilogEnv,
    nodes: &[NodeSummary],
    elapsed_s: f64,
) -> (String, Option<String>, Option<i32>) {
    let slurm_state = info.and_then(|i| i.state.clone()).unwrap_or_default();
    let (exit, signal) = env
        .exit_code2
        .as_deref()
        .and_then(|s| s.split_once(':'))
        .map(|(a, b)| (a.parse::<i32>().ok(), b.parse::<i32>().ok()))
        .unwrap_or((None, None));
    let oom_kills: u64 = nodes.iter().filter_map(|n| n.mem.oom_kill_events).sum();
    let limit_s = info.and_then(|i| i.time_limit_min).map(|m| m * 60);
    let final_states = [
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "CANCELLED",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    ];
    if oom_kills > 0 {
        return ("OUT_OF_MEMORY".into(), Some(format!("{oom_kills} process(es) killed by the kernel OOM killer in the job cgroup (memory limit reached)")), exit);
    }
    // SLURM's task/cgroup reports an OOM kill as the pseudo-signal SIG_OOM (253), which the 7-bit
    // signal field of SLURM_JOB_EXIT_CODE2 shows as 125.
    if signal == Some(125) || slurm_state == "OUT_OF_MEMORY" {
        return (
            "OUT_OF_MEMORY".into(),
            Some(
                "SLURM detected an OOM kill in the job (the job used more memory than --mem)"
                    .into(),
            ),
            exit,
        );
    }
    if final_states.contains(&slurm_state.as_str()) && slurm_state != "COMPLETED" {
        let why = match slurm_state.as_str() {
            "TIMEOUT" => "SLURM killed the job at its time limit".to_string(),
            s => format!("SLURM reports the job {s}"),
        };
        return (slurm_state, Some(why), exit);
    }
    if let Some(limit) = limit_s {
        // SLURM checks limits periodically; a job that ran to its limit and was signalled timed out.
        if elapsed_s + 1.0 >= limit as f64
            && (signal.unwrap_or(0) != 0
                || exit.unwrap_or(0) != 0
                || info
                    .and_then(|i| i.state_reason.clone())
                    .is_some_and(|r| r.contains("TimeLimit")))
        {
            return (
                "TIMEOUT".into(),
                Some(format!(
                    "ran {:.0} s against a time limit of {limit} s and was killed",
                    elapsed_s
                )),
                exit,
            );
        }
    }
    if let Some(sig) = signal.filter(|&s| s != 0) {
        return (
            "CANCELLED".into(),
            Some(format!("terminated by signal {sig}")),
            exit,
        );
    }
    if let Some(code) = exit.filter(|&c| c != 0) {
        return ("FAILED".into(), Some(format!("exit code {code}")), exit);
    }
    if slurm_state == "COMPLETED" || exit == Some(0) {
        return ("COMPLETED".into(), None, exit);
    }
    (
        "UNKNOWN".into(),
        Some("neither SLURM nor the Epilog environment said how the job ended".into()),
        exit,
    )
}

pub struct Inputs<'a> {
    pub env: &'a EpilogEnv,
    pub info: Option<&'a JobInfo>,
    pub nodes: Vec<NodeSummary>,
    pub expected_nodes: Vec<String>,
    pub generator: String,
}

pub fn assemble(inp: Inputs) -> JobSummary {
    let Inputs {
        env,
        info,
        mut nodes,
        expected_nodes,
        generator,
    } = inp;
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let present: Vec<&str> = nodes.iter().map(|n| n.node.as_str()).collect();
    let missing_nodes: Vec<String> = expected_nodes
        .iter()
        .filter(|e| !present.contains(&e.as_str()))
        .cloned()
        .collect();

    let start_unix_ms = info
        .and_then(|i| i.start_time)
        .map(|t| t * 1000)
        .or_else(|| nodes.iter().map(|n| n.start_unix_ms).min())
        .unwrap_or(0);
    let end_unix_ms = nodes
        .iter()
        .map(|n| n.end_unix_ms)
        .max()
        .unwrap_or(start_unix_ms);
    let elapsed_s = end_unix_ms.saturating_sub(start_unix_ms) as f64 / 1000.0;

    let cpu = CpuTotals {
        usage_s: sum_opt(nodes.iter().map(|n| n.cpu.usage_s)),
        user_s: sum_opt(nodes.iter().map(|n| n.cpu.user_s)),
        system_s: sum_opt(nodes.iter().map(|n| n.cpu.system_s)),
        throttled_s: sum_opt(nodes.iter().map(|n| n.cpu.throttled_s)),
    };
    let mem = MemTotals {
        peak_bytes: max_opt(nodes.iter().map(|n| n.mem.peak_bytes)),
        limit_bytes: max_opt(nodes.iter().map(|n| n.mem.limit_bytes)),
        rss_peak_bytes: max_opt(nodes.iter().map(|n| n.mem.rss_peak_bytes)),
        cache_peak_bytes: max_opt(nodes.iter().map(|n| n.mem.cache_peak_bytes)),
        shmem_peak_bytes: max_opt(nodes.iter().map(|n| n.mem.shmem_peak_bytes)),
        swap_peak_bytes: max_opt(nodes.iter().map(|n| n.mem.swap_peak_bytes)),
        failcnt: sum_opt(nodes.iter().map(|n| n.mem.failcnt)),
        oom_events: sum_opt(nodes.iter().map(|n| n.mem.oom_events)),
        oom_kill_events: sum_opt(nodes.iter().map(|n| n.mem.oom_kill_events)),
    };
    let io = IoTotals {
        read_bytes: sum_opt(nodes.iter().map(|n| n.io.read_bytes)),
        write_bytes: sum_opt(nodes.iter().map(|n| n.io.write_bytes)),
        read_ops: sum_opt(nodes.iter().map(|n| n.io.read_ops)),
        write_ops: sum_opt(nodes.iter().map(|n| n.io.write_ops)),
        // Nodes' peaks need not coincide; the sum is an upper bound, the max a lower one. Report the max.
        peak_bytes_per_s: max_opt(nodes.iter().map(|n| n.io.peak_bytes_per_s)),
        source: nodes.iter().find_map(|n| n.io.source.clone()),
    };

    let n_nodes = info
        .and_then(|i| i.node_count)
        .or(env.num_nodes)
        .unwrap_or(nodes.len() as u32)
        .max(nodes.len() as u32);
    // Cores: SLURM's count for the whole job; else the per-node allocations seen (+ missing nodes
    // assumed like the others, so a missing node does not inflate efficiency).
    let cores = info.and_then(|i| i.cpus).or_else(|| {
        let seen: Vec<u32> = nodes.iter().filter_map(|n| n.alloc_cores).collect();
        (!seen.is_empty()).then(|| {
            let per = seen.iter().sum::<u32>() as f64 / seen.len() as f64;
            (per * n_nodes as f64).round() as u32
        })
    });
    let mem_per_node_bytes = max_opt(nodes.iter().map(|n| n.alloc_mem_bytes))
        .or_else(|| {
            info.and_then(|i| i.mem_per_node_mb)
                .map(|m| m * 1024 * 1024)
        })
        .or(mem.limit_bytes);
    let alloc = Allocation {
        nodes: n_nodes,
        cores,
        mem_per_node_bytes,
        gpus: env.gpus.clone(),
        time_limit_s: info.and_then(|i| i.time_limit_min).map(|m| m * 60),
    };
    let efficiency = Efficiency {
        cpu_pct: match (cpu.usage_s, cores) {
            (Some(u), Some(c)) if c > 0 && elapsed_s > 0.0 => {
                Some(100.0 * u / (c as f64 * elapsed_s))
            }
            _ => None,
        },
        mem_pct: match (mem.peak_bytes, mem_per_node_bytes) {
            (Some(p), Some(a)) if a > 0 => Some(100.0 * p as f64 / a as f64),
            _ => None,
        },
        time_pct: alloc
            .time_limit_s
            .filter(|&l| l > 0)
            .map(|l| 100.0 * elapsed_s / l as f64),
    };

    let (state, state_reason, exit_code) = derive_state(info, env, &nodes, elapsed_s);
    let mut partial_reasons = Vec::new();
    for m in &missing_nodes {
        partial_reasons.push(format!(
            "node {m}: no data arrived (node failure or epilog not run)"
        ));
    }
    for n in &nodes {
        if n.quality.samples == 0 {
            partial_reasons.push(format!("node {}: no samples", n.node));
        } else if !n.quality.final_counters && !n.quality.sampler_ended_cleanly {
            partial_reasons.push(format!("node {}: sampling stopped early (crash, reboot or killed); counters are a lower bound", n.node));
        }
        if n.quality.torn_records {
            partial_reasons.push(format!("node {}: a torn spool record was dropped", n.node));
        }
    }
    let samples = nodes.iter().map(|n| n.quality.samples).sum();
    let user_options = nodes
        .iter()
        .find(|n| !n.user_options.is_empty())
        .map(|n| n.user_options.clone())
        .unwrap_or_default();
    JobSummary {
        schema_version: SCHEMA_VERSION,
        generator,
        cluster: info
            .and_then(|i| i.cluster.clone())
            .or_else(|| env.cluster.clone()),
        job_id: env.job_id,
        array_job_id: info.and_then(|i| i.array_job_id),
        array_task_id: info.and_then(|i| i.array_task_id),
        name: info.and_then(|i| i.name.clone()),
        user: info
            .and_then(|i| i.user.clone())
            .or_else(|| env.user.clone()),
        uid: env
            .uid
            .or_else(|| info.and_then(|i| i.uid))
            .or_else(|| nodes.first().map(|n| n.uid))
            .unwrap_or(u32::MAX),
        account: info.and_then(|i| i.account.clone()),
        partition: info
            .and_then(|i| i.partition.clone())
            .or_else(|| env.partition.clone()),
        state,
        state_reason,
        exit_code,
        start_unix_ms,
        end_unix_ms,
        elapsed_s,
        alloc,
        cpu,
        mem,
        io,
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

#[cfg(test)]
mod tests {
    use super::*;

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
            cgroup_version: None,
            cpu: CpuTotals {
                usage_s: Some(cpu_s),
                ..Default::default()
            },
            mem: MemTotals {
                peak_bytes: Some(peak),
                ..Default::default()
            },
            io: IoTotals::default(),
            tasks_max: None,
            threads_max: None,
            cpu_efficiency_pct: None,
            steps: vec![],
            timeline: vec![],
            quality: Quality {
                samples: 5,
                sampler_ended_cleanly: true,
                final_counters: true,
                ..Default::default()
            },
            user_options: Default::default(),
            gpus: Vec::new(),
        }
    }

    fn env() -> EpilogEnv {
        EpilogEnv {
            job_id: 5,
            node: "a".into(),
            exit_code2: Some("0:0".into()),
            ..Default::default()
        }
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
            let e = env();
            let s = assemble(Inputs { env: &e, info: None, nodes: ns.clone(), expected_nodes: names, generator: "t".into() });
            let cpu: f64 = nodes.iter().map(|n| n.0).sum();
            proptest::prop_assert!((s.cpu.usage_s.unwrap() - cpu).abs() <= 1e-6 * cpu.max(1.0));
            proptest::prop_assert_eq!(s.mem.peak_bytes, nodes.iter().filter_map(|n| n.1).max());
            let io: Vec<u64> = nodes.iter().filter_map(|n| n.2).collect();
            proptest::prop_assert_eq!(s.io.read_bytes, (!io.is_empty()).then(|| io.iter().sum()));
            proptest::prop_assert_eq!(s.samples, 5 * nodes.len() as u64);
            let cores: u32 = nodes.iter().map(|n| n.3).sum();
            proptest::prop_assert_eq!(s.alloc.cores, Some(cores));
            let eff = s.efficiency.cpu_pct.unwrap();
            let want = 100.0 * cpu / (cores as f64 * s.elapsed_s);
            proptest::prop_assert!((eff - want).abs() <= 1e-6 * want.max(1.0), "{} vs {}", eff, want);
            proptest::prop_assert!(!s.partial);
        }
    }

    #[test]
    fn aggregation_rules() {
        let e = env();
        let s = assemble(Inputs {
            env: &e,
            info: None,
            nodes: vec![node("b", 300.0, 1 << 30), node("a", 100.0, 3 << 30)],
            expected_nodes: vec!["a".into(), "b".into()],
            generator: "t".into(),
        });
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
        assert_eq!(s.state, "COMPLETED");
    }

    #[test]
    fn missing_node_makes_partial_and_names_it() {
        let e = env();
        let s = assemble(Inputs {
            env: &e,
            info: None,
            nodes: vec![node("a", 100.0, 1)],
            expected_nodes: vec!["a".into(), "b".into()],
            generator: "t".into(),
        });
        assert!(s.partial);
        assert_eq!(s.missing_nodes, vec!["b"]);
        assert!(s.partial_reasons[0].contains("node b"));
        // the missing node's cores still count in the allocation
        assert_eq!(s.alloc.nodes, 1.max(s.alloc.nodes));
    }

    #[test]
    fn states() {
        let mut e = env();
        let mut n = node("a", 1.0, 1);
        n.mem.oom_kill_events = Some(1);
        assert_eq!(
            derive_state(None, &e, &[n.clone()], 10.0).0,
            "OUT_OF_MEMORY"
        );
        let info = JobInfo {
            time_limit_min: Some(1),
            state: Some("COMPLETING".into()),
            ..Default::default()
        };
        e.exit_code2 = Some("0:15".into());
        let (st, why, _) = derive_state(Some(&info), &e, &[node("a", 1.0, 1)], 61.0);
        assert_eq!(st, "TIMEOUT", "{why:?}");
        e.exit_code2 = Some("3:0".into());
        assert_eq!(derive_state(None, &e, &[], 5.0).0, "FAILED");
        let info = JobInfo {
            state: Some("TIMEOUT".into()),
            ..Default::default()
        };
        assert_eq!(derive_state(Some(&info), &env(), &[], 5.0).0, "TIMEOUT");
        assert_eq!(derive_state(None, &env(), &[], 5.0).0, "COMPLETED");
    }
}
