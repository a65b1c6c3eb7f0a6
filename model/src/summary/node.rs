//! From one node's spool files to its [`NodeSummary`]. Pure: the epilog reads the files, this computes.

use super::*;
use crate::sample::{busy_cores, cpu_wait_between, rate_per_sec, IoSource, Reading};
use crate::spool::{EventKind, GaugeId, SpoolFile};

/// Points kept per node in the archived timeline (a 30-day job has 86 400 samples; the archive keeps
/// a chart's worth, with every peak: see [`downsample_timeline`]).
pub const MAX_TIMELINE_POINTS: usize = 240;

/// Merges adjacent points so at most `max` remain: means are time-weighted, maxima are kept, so a
/// peak seen by the sampler survives into the archive.
pub fn downsample_timeline(points: Vec<Point>, max: usize) -> Vec<Point> {
    if points.len() <= max || max == 0 {
        return points;
    }
    let per = points.len().div_ceil(max);
    let mut out = Vec::with_capacity(max);
    let mut prev_t = 0.0;
    for chunk in points.chunks(per) {
        let last = chunk.last().expect("chunks are non-empty");
        let (mut wsum, mut busy, mut mem, mut io) = (0.0, (0.0, 0.0), (0.0, 0.0), (0.0, 0.0));
        let (mut runnable, mut wait_s, mut runnable_s) = ((0.0, 0.0), 0.0, 0.0);
        let mut t0 = prev_t;
        for p in chunk {
            let w = (p.t_s - t0).max(0.0);
            t0 = p.t_s;
            wsum += w;
            if let Some(b) = p.busy_cores {
                busy = (busy.0 + b * w, busy.1 + w);
            }
            if let Some(m) = p.mem_bytes {
                mem = (mem.0 + m as f64 * w, mem.1 + w);
            }
            if let Some(r) = p.io_bytes_per_s {
                io = (io.0 + r * w, io.1 + w);
            }
            if let Some(r) = p.runnable_threads {
                runnable = (runnable.0 + r * w, runnable.1 + w);
                // The wait share is of runnable time, not of wall time: weighting it by time
                // would let an interval with 1 thread runnable count as much as one with 64.
                // runnable threads × interval is the interval's runnable time, so the sums are
                // the chunk's waiting and runnable times, and their ratio is exactly the share
                // the counters give over the whole chunk.
                if let Some(pct) = p.cpu_wait_pct {
                    wait_s += pct / 100.0 * r * w;
                    runnable_s += r * w;
                }
            }
        }
        let mean = |(s, w): (f64, f64), any: bool| {
            if w > 0.0 {
                Some(s / w)
            } else if any {
                Some(0.0)
            } else {
                None
            }
        };
        let fmax = |f: fn(&Point) -> Option<f64>| {
            chunk
                .iter()
                .filter_map(f)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        };
        let umax = |f: fn(&Point) -> Option<u64>| chunk.iter().filter_map(f).max();
        let _ = wsum;
        out.push(Point {
            t_s: last.t_s,
            busy_cores: mean(busy, chunk.iter().any(|p| p.busy_cores.is_some())),
            busy_cores_max: fmax(|p| p.busy_cores_max.or(p.busy_cores)),
            mem_bytes: mean(mem, chunk.iter().any(|p| p.mem_bytes.is_some())).map(|m| m as u64),
            mem_bytes_max: umax(|p| p.mem_bytes_max.or(p.mem_bytes)),
            io_bytes_per_s: mean(io, chunk.iter().any(|p| p.io_bytes_per_s.is_some())),
            tasks: umax(|p| p.tasks),
            cpu_wait_pct: (runnable_s > 0.0).then(|| 100.0 * wait_s / runnable_s),
            runnable_threads: mean(runnable, chunk.iter().any(|p| p.runnable_threads.is_some())),
        });
        prev_t = last.t_s;
    }
    out
}

/// Timestamped job-cgroup readings from every source, in time order.
fn job_readings<'a>(
    series: Option<&'a SpoolFile>,
    steps: &'a [SpoolFile],
) -> Vec<(u64, &'a Reading)> {
    let mut v: Vec<(u64, &Reading)> = Vec::new();
    if let Some(s) = series {
        v.extend(s.buckets.iter().map(|b| (b.t_last_ms, &b.last)));
        v.extend(
            s.events
                .iter()
                .filter_map(|e| e.job.as_ref().map(|r| (e.t_ms, r))),
        );
    }
    for f in steps {
        v.extend(
            f.events
                .iter()
                .filter_map(|e| e.job.as_ref().map(|r| (e.t_ms, r))),
        );
    }
    v.sort_by_key(|(t, _)| *t);
    v
}

fn max_of(rs: &[(u64, &Reading)], f: impl Fn(&Reading) -> Option<u64>) -> Option<u64> {
    rs.iter().filter_map(|(_, r)| f(r)).max()
}

fn last_of(rs: &[(u64, &Reading)], f: impl Fn(&Reading) -> Option<u64>) -> Option<u64> {
    rs.iter().rev().find_map(|(_, r)| f(r))
}

/// The kernel view's counters are cumulative per job and node, read by the sampler and at each
/// step's start and exit: the largest of each is its final value. Absent when no reading had any.
fn kernel_totals(rs: &[(u64, &Reading)]) -> Option<KernelTotals> {
    if !rs.iter().any(|(_, r)| r.kernel_run_ns.is_some()) {
        return None;
    }
    let m = |f: fn(&Reading) -> Option<u64>| max_of(rs, f);
    let syscalls = match (
        m(|r| r.kernel_syscalls_file),
        m(|r| r.kernel_syscalls_net),
        m(|r| r.kernel_syscalls_mem),
        m(|r| r.kernel_syscalls_proc),
        m(|r| r.kernel_syscalls_sync),
        m(|r| r.kernel_syscalls_other),
    ) {
        (Some(file), Some(network), Some(memory), Some(process), Some(sync), Some(other)) => {
            Some(SyscallCounts {
                file,
                network,
                memory,
                process,
                sync,
                other,
            })
        }
        _ => None,
    };
    Some(KernelTotals {
        syscalls,
        small_reads: m(|r| r.kernel_small_reads),
        small_writes: m(|r| r.kernel_small_writes),
        ctx_switches_voluntary: m(|r| r.kernel_ctx_voluntary),
        ctx_switches_involuntary: m(|r| r.kernel_ctx_involuntary),
        run_s: secs(m(|r| r.kernel_run_ns)),
        cpu_wait_s: secs(m(|r| r.kernel_runq_wait_ns)),
        net_sent_bytes: m(|r| r.kernel_net_tx_bytes),
        net_received_bytes: m(|r| r.kernel_net_rx_bytes),
        net_sends: m(|r| r.kernel_net_tx_calls),
        net_receives: m(|r| r.kernel_net_rx_calls),
        block_read_bytes: m(|r| r.kernel_blk_read_bytes),
        block_write_bytes: m(|r| r.kernel_blk_write_bytes),
        dirtied_bytes: m(|r| r.kernel_dirtied_bytes),
    })
}

/// The I/O (read bytes, write bytes, read ops, write ops) of this node's batch and srun steps as
/// their slurmstepds' reaped counters give it: for each step file with both, the `step_exit`
/// reading's `reaped_*` minus the `step_start` reading's (`plugin/src/steps.rs`,
/// `with_reaped_io`), summed over the steps. A field is `None` when no step has it at both ends
/// (a plugin before these fields, a step whose slurmstepd died before `exit`, a kernel without
/// I/O accounting); a step whose figure runs backwards is not believed.
fn reaped_step_io(steps: &[SpoolFile]) -> [Option<u64>; 4] {
    let fields = |r: &Reading| {
        [
            r.reaped_read_bytes,
            r.reaped_write_bytes,
            r.reaped_read_ops,
            r.reaped_write_ops,
        ]
    };
    let mut total = [None; 4];
    for f in steps {
        let start = f
            .events
            .iter()
            .find(|e| e.kind == EventKind::StepStart)
            .and_then(|e| e.step_reading.as_ref());
        let exit = f
            .events
            .iter()
            .rev()
            .find(|e| e.kind == EventKind::StepExit)
            .and_then(|e| e.step_reading.as_ref());
        let (Some(start), Some(exit)) = (start, exit) else {
            continue;
        };
        for (i, (a, b)) in fields(start).into_iter().zip(fields(exit)).enumerate() {
            if let Some(d) = a.zip(b).and_then(|(a, b)| b.checked_sub(a)) {
                total[i] = Some(total[i].unwrap_or(0u64).saturating_add(d));
            }
        }
    }
    total
}

/// One cgroup v1 I/O figure of the node: the sampler's and the steps' reaped figure combined.
///
/// Both are lower bounds of the job's I/O on this node, and they overlap:
/// - `sampled`, the sampler's accumulator (`jobscope_sampler::procio::IoAccumulator`), sees every
///   process of the job while it lives, but loses what a process does after the last sample when
///   its parent is outside the job, as the task leaders' parent, slurmstepd, is: 2000 short `cat`s
///   at the very end of a job were reported 28 % low (issue 9 §2).
/// - `reaped`, the steps' slurmstepds' reaped counters ([`reaped_step_io`]), is exact for every
///   process reaped within a step's tree (the tasks, and every descendant whose parents all waited
///   for it), however short its life and however late its I/O. It misses processes re-parented
///   away (daemonised orphans, reaped by init), processes adopted into the extern step (ssh
///   sessions) and the extern step's own; it adds slurmstepd's own threads that exited (a few KiB).
///
/// Their sum would count twice what the sampler saw of the step trees, and nothing in the spool
/// tells that share apart, so the larger is the figure. It is exact whenever the job's I/O is done
/// within its steps' trees, whatever its timing; it is never below the sampler's figure (today's);
/// and when I/O is split between step trees and orphans or adopted processes, it is at least the
/// larger part. `None` only when both are.
fn final_io(sampled: Option<u64>, reaped: Option<u64>) -> Option<u64> {
    sampled.max(reaped)
}

/// The share of wall time (percent) a cumulative PSI counter (µs) grew by, from the first to the
/// last reading that has it, and that window in seconds. `None` without two readings apart in time
/// (v1, no PSI) or when the counter went backwards (a recreated cgroup). At most 100 %: a stall
/// read a little after its reading's timestamp could otherwise show as 100.1 %.
fn stall_share(rs: &[(u64, &Reading)], f: impl Fn(&Reading) -> Option<u64>) -> Option<(f64, f64)> {
    let mut with = rs.iter().filter_map(|(t, r)| f(r).map(|v| (*t, v)));
    let (t0, v0) = with.next()?;
    let (t1, v1) = with.last()?;
    if t1 <= t0 || v1 < v0 {
        return None;
    }
    let window_ms = (t1 - t0) as f64;
    let pct = (100.0 * (v1 - v0) as f64 / 1000.0 / window_ms).min(100.0);
    Some((pct, window_ms / 1000.0))
}

/// The node's stalls from its PSI counters; `None` when the kernel gave none.
fn pressure(rs: &[(u64, &Reading)]) -> Option<Pressure> {
    let cpu = stall_share(rs, |r| r.psi_cpu_some_usec);
    let mem = stall_share(rs, |r| r.psi_mem_some_usec);
    let mem_full = stall_share(rs, |r| r.psi_mem_full_usec);
    let io = stall_share(rs, |r| r.psi_io_some_usec);
    let all = [cpu, mem, mem_full, io];
    let window_s = all.iter().flatten().map(|(_, w)| *w).reduce(f64::max)?;
    Some(Pressure {
        window_s,
        cpu_some_pct: cpu.map(|x| x.0),
        mem_some_pct: mem.map(|x| x.0),
        mem_full_pct: mem_full.map(|x| x.0),
        io_some_pct: io.map(|x| x.0),
    })
}

fn secs(ns: Option<u64>) -> Option<f64> {
    ns.map(|v| v as f64 / 1e9)
}

/// When the job ended on this node as its own records tell, to the millisecond:
/// - the batch step's exit (`step_exit`, written by its slurmstepd once the batch script and its
///   tasks are gone: the moment SLURM's own end time is taken for a batch job);
/// - else the sampler's end record when the plugin stopped it (`stopped`: the extern step's exit,
///   i.e. the end of the allocation on this node; or the batch step's when there is no extern step).
///
/// A sampler that ended on its own (`cgroup_gone`) noticed the end only at its next scheduled
/// sample, up to one cadence late: that is no end time. `None`: the caller's bound is all there is.
fn recorded_end_ms(series: Option<&SpoolFile>, steps: &[SpoolFile]) -> Option<u64> {
    let batch_exit = steps
        .iter()
        .filter(|f| f.header.series == "batch")
        .flat_map(|f| f.events.iter())
        .filter(|e| e.kind == EventKind::StepExit)
        .map(|e| e.t_ms)
        .max();
    batch_exit.or_else(|| {
        series
            .and_then(|s| s.end.as_ref())
            .filter(|e| e.reason == "stopped")
            .map(|e| e.t_ms)
    })
}

/// Builds the node summary. `node` is used when no spool file names it.
///
/// Start and end come from the node's own millisecond clock, so the two are read on one clock:
/// - start: the earliest spool header (each is stamped in the plugin's first `task_post_fork` of its
///   step, when the step's first process exists: the extern step's at the allocation's start);
/// - end: [`recorded_end_ms`] when the spool has it, never after `end_unix_ms`, the latest the job
///   can have ended (the Epilog's "now", which runs a few ms, or with a slow Epilog seconds, after
///   the job; or, collected later, the spool's last record). Without a recorded end, `end_unix_ms`.
pub fn summarize_node(
    series: Option<&SpoolFile>,
    steps: &[SpoolFile],
    node: &str,
    end_unix_ms: u64,
) -> NodeSummary {
    let bound_ms = end_unix_ms;
    let headers: Vec<&crate::spool::Header> = series
        .iter()
        .map(|s| &s.header)
        .chain(steps.iter().map(|s| &s.header))
        .collect();
    let start_unix_ms = earliest_start_ms(headers.iter().copied()).unwrap_or(bound_ms);
    let end_unix_ms = recorded_end_ms(series, steps)
        .filter(|&t| t >= start_unix_ms && t <= bound_ms)
        .unwrap_or(bound_ms);
    let first = headers.first();
    let rs = job_readings(series, steps);
    let cpu = cpu_totals(&rs);
    let mem = mem_totals(series, &rs);
    let krs = kernel_readings(&rs, steps);
    let (timeline, io_peak) = match series {
        Some(s) => node_timeline(s, &rs, &krs, start_unix_ms),
        None => (Vec::new(), None),
    };
    let timeline = downsample_timeline(timeline, MAX_TIMELINE_POINTS);
    let io_source = first.and_then(|h| io_source_of(h));
    // Summed from `/proc/<pid>/io` (v1, or v2 without the io controller): see `final_io` for how
    // the steps' reaped counters complete the sampler's figure. `io.stat` is left alone.
    let per_process = io_source == Some(IoSource::Proc);
    let io = io_totals(&rs, steps, io_source, io_peak);
    let kernel = kernel_totals(&krs);
    let step_summaries = step_summaries(steps);
    let v2 = first.and_then(|h| h.cgroup_version) == Some(crate::sample::CgroupVersion::V2);
    let quality = node_quality(series, steps, per_process && v2);

    let elapsed_s = end_unix_ms.saturating_sub(start_unix_ms) as f64 / 1000.0;
    let alloc_cores = first.and_then(|h| h.alloc_cores);
    let cpu_efficiency_pct = match (cpu.usage_s, alloc_cores) {
        (Some(u), Some(c)) if c > 0 && elapsed_s > 0.0 => Some(100.0 * u / (c as f64 * elapsed_s)),
        _ => None,
    };
    NodeSummary {
        node: first
            .map(|h| h.node.clone())
            .unwrap_or_else(|| node.to_string()),
        job_id: first.map(|h| h.job_id).unwrap_or(0),
        uid: first.map(|h| h.uid).unwrap_or(u32::MAX),
        start_unix_ms,
        end_unix_ms,
        elapsed_s,
        alloc_cores,
        alloc_mem_bytes: first.and_then(|h| h.alloc_mem_bytes),
        cgroup_version: first.and_then(|h| h.cgroup_version),
        tasks_max: [
            series_gauge_max(series, GaugeId::Tasks),
            max_of(&rs, |r| r.tasks),
        ]
        .into_iter()
        .flatten()
        .max(),
        threads_max: max_of(&rs, |r| r.threads),
        cpu,
        mem,
        io,
        cpu_efficiency_pct,
        steps: step_summaries,
        timeline,
        quality,
        user_options: headers
            .iter()
            .find_map(|h| h.handover.as_ref().map(|x| x.options.clone()))
            .unwrap_or_default(),
        gpus: Vec::new(),
        pressure: pressure(&rs),
        script_sha256: script_sha256(steps),
        kernel,
        steps_not_recorded: None,
        interventions: Vec::new(),
    }
}

/// The largest value of a gauge over the sampler's buckets.
fn series_gauge_max(series: Option<&SpoolFile>, g: GaugeId) -> Option<u64> {
    series.and_then(|s| {
        s.buckets
            .iter()
            .filter_map(|b| b.gauge(g))
            .map(|g| g.max)
            .max()
    })
}

/// The node's CPU counters. Counters are cumulative and monotone: the largest value seen is the
/// final one, whichever process (sampler or a step's exit) read it last.
fn cpu_totals(rs: &[(u64, &Reading)]) -> CpuTotals {
    CpuTotals {
        usage_s: secs(max_of(rs, |r| r.cpu_usage_ns)),
        user_s: secs(max_of(rs, |r| r.cpu_user_ns)),
        system_s: secs(max_of(rs, |r| r.cpu_system_ns)),
        throttled_s: max_of(rs, |r| r.cpu_throttled_usec).map(|u| u as f64 / 1e6),
        throttled_periods: max_of(rs, |r| r.cpu_nr_throttled),
    }
}

/// The node's memory: peaks over every reading and the sampler's gauge, the last limit.
fn mem_totals(series: Option<&SpoolFile>, rs: &[(u64, &Reading)]) -> MemTotals {
    MemTotals {
        peak_bytes: [
            max_of(rs, |r| r.mem_peak_bytes),
            series_gauge_max(series, GaugeId::MemCurrentBytes),
            max_of(rs, |r| r.mem_current_bytes),
        ]
        .into_iter()
        .flatten()
        .max(),
        limit_bytes: last_of(rs, |r| r.mem_limit_bytes),
        rss_peak_bytes: max_of(rs, |r| r.mem_rss_bytes),
        cache_peak_bytes: max_of(rs, |r| r.mem_cache_bytes),
        shmem_peak_bytes: max_of(rs, |r| r.mem_shmem_bytes),
        swap_peak_bytes: max_of(rs, |r| r.mem_swap_bytes),
        failcnt: max_of(rs, |r| r.mem_failcnt),
        oom_events: max_of(rs, |r| r.mem_oom_events),
        oom_kill_events: max_of(rs, |r| r.mem_oom_kill_events),
    }
}

/// The job's readings with the steps' own readings added, in time order: the steps put the job's
/// kernel counters on their own readings (`plugin/src/steps.rs`: at exit the job's cgroup may be
/// gone, the step reading is made anyway).
fn kernel_readings<'a>(
    rs: &[(u64, &'a Reading)],
    steps: &'a [SpoolFile],
) -> Vec<(u64, &'a Reading)> {
    let mut krs = rs.to_vec();
    for f in steps {
        krs.extend(
            f.events
                .iter()
                .filter_map(|e| e.step_reading.as_ref().map(|r| (e.t_ms, r))),
        );
    }
    krs.sort_by_key(|(t, _)| *t);
    krs
}

/// The node's timeline, one point per bucket of the sampler's series (mean busy cores from
/// consecutive counter pairs), closed by the final step reading; and the peak I/O rate seen.
fn node_timeline(
    s: &SpoolFile,
    rs: &[(u64, &Reading)],
    krs: &[(u64, &Reading)],
    start_unix_ms: u64,
) -> (Vec<Point>, Option<f64>) {
    let mut timeline = Vec::new();
    let mut io_peak: Option<f64> = None;
    let mut prev: Option<(u64, &Reading)> = None;
    for b in &s.buckets {
        let (busy, io_rate, (cpu_wait_pct, runnable_threads)) = match prev {
            Some((t0, r0)) => {
                let dt = b.t_last_ms.saturating_sub(t0);
                let io = match (
                    rate_per_sec(r0.io_read_bytes, b.last.io_read_bytes, dt),
                    rate_per_sec(r0.io_write_bytes, b.last.io_write_bytes, dt),
                ) {
                    (Some(a), Some(w)) => Some(a + w),
                    (a, w) => a.or(w),
                };
                (
                    busy_cores(r0.cpu_usage_ns, b.last.cpu_usage_ns, dt),
                    io,
                    cpu_wait_between(r0, &b.last, dt),
                )
            }
            None => (None, None, (None, None)),
        };
        let io_max = b
            .gauge(GaugeId::IoBytesPerSec)
            .map(|g| g.max as f64)
            .or(io_rate);
        if let Some(v) = io_max {
            io_peak = Some(io_peak.map_or(v, |p: f64| p.max(v)));
        }
        timeline.push(Point {
            t_s: b.t_last_ms.saturating_sub(start_unix_ms) as f64 / 1000.0,
            busy_cores: busy,
            busy_cores_max: b
                .gauge(GaugeId::BusyMilliCores)
                .map(|g| g.max as f64 / 1000.0)
                .or(busy),
            mem_bytes: b
                .gauge(GaugeId::MemCurrentBytes)
                .map(|g| g.mean() as u64)
                .or(b.last.mem_current_bytes),
            mem_bytes_max: b
                .gauge(GaugeId::MemCurrentBytes)
                .map(|g| g.max)
                .or(b.last.mem_current_bytes),
            io_bytes_per_s: io_rate,
            tasks: b.gauge(GaugeId::Tasks).map(|g| g.max).or(b.last.tasks),
            cpu_wait_pct,
            runnable_threads,
        });
        prev = Some((b.t_last_ms, &b.last));
    }
    // The final step reading closes the timeline (the sampler may be up to one cadence behind).
    if let (Some((t0, r0)), Some((t1, r1))) = (prev, rs.last().copied()) {
        if t1 > t0 {
            let busy = busy_cores(r0.cpu_usage_ns, r1.cpu_usage_ns, t1 - t0);
            // The kernel counters of the end ride on the step readings (above), taken with
            // the job's reading at a step's exit: the latest one after the last bucket, over
            // its own interval (the same as this point's when it comes from that exit).
            let (cpu_wait_pct, runnable_threads) = krs
                .iter()
                .rev()
                .take_while(|(t, _)| *t > t0)
                .find(|(t, r)| *t <= t1 && r.kernel_run_ns.is_some())
                .map_or((None, None), |(t, r)| cpu_wait_between(r0, r, t - t0));
            timeline.push(Point {
                t_s: t1.saturating_sub(start_unix_ms) as f64 / 1000.0,
                busy_cores: busy,
                busy_cores_max: busy,
                // Memory at step exit is what is left once the processes are gone: not a sample of the
                // job's use (it would fake a drop at the end and spoil trend detection).
                mem_bytes: None,
                mem_bytes_max: None,
                io_bytes_per_s: None,
                tasks: r1.tasks,
                cpu_wait_pct,
                runnable_threads,
            });
        }
    }
    (timeline, io_peak)
}

/// Where the sampler took the job's I/O from: its header says; spools from writers before it
/// did not (v2 meant io.stat, v1 /proc).
fn io_source_of(h: &crate::spool::Header) -> Option<IoSource> {
    h.io_source.or(match h.cgroup_version {
        Some(crate::sample::CgroupVersion::V2) => Some(IoSource::IoStat),
        Some(crate::sample::CgroupVersion::V1) => Some(IoSource::Proc),
        None => None,
    })
}

/// The node's I/O: per-process figures (`/proc`) are completed by the steps' reaped counters
/// ([`final_io`]); `io.stat` figures are taken as read.
fn io_totals(
    rs: &[(u64, &Reading)],
    steps: &[SpoolFile],
    io_source: Option<IoSource>,
    io_peak: Option<f64>,
) -> IoTotals {
    let per_process = io_source == Some(IoSource::Proc);
    let reaped = reaped_step_io(steps);
    let final_io = |sampled: Option<u64>, reaped: Option<u64>| {
        if per_process {
            final_io(sampled, reaped)
        } else {
            sampled
        }
    };
    IoTotals {
        read_bytes: final_io(max_of(rs, |r| r.io_read_bytes), reaped[0]),
        write_bytes: final_io(max_of(rs, |r| r.io_write_bytes), reaped[1]),
        read_ops: final_io(max_of(rs, |r| r.io_read_ops), reaped[2]),
        write_ops: final_io(max_of(rs, |r| r.io_write_ops), reaped[3]),
        peak_bytes_per_s: io_peak,
        source: io_source.map(|s| s.name().to_string()),
    }
}

/// One step from its file: start and exit from its events (start falls back to the header), CPU
/// and memory from its own cgroup, read when its last task exits (it is gone by `exit`).
fn step_summary(f: &SpoolFile) -> StepSummary {
    let exit = f
        .events
        .iter()
        .rev()
        .find(|e| e.kind == EventKind::StepExit);
    let start = f.events.iter().find(|e| e.kind == EventKind::StepStart);
    let start_ms = start.map(|e| e.t_ms).unwrap_or(f.header.start_unix_ms);
    let end_ms = exit.map(|e| e.t_ms);
    let cpu_start = start
        .and_then(|e| e.step_reading.as_ref())
        .and_then(|r| r.cpu_usage_ns)
        .unwrap_or(0);
    let last_step_reading = f
        .events
        .iter()
        .rev()
        .filter(|e| e.kind != EventKind::StepStart)
        .find_map(|e| e.step_reading.as_ref().filter(|r| r.cpu_usage_ns.is_some()));
    StepSummary {
        step: f.header.series.clone(),
        start_unix_ms: Some(start_ms),
        end_unix_ms: end_ms,
        elapsed_s: end_ms.map(|e| e.saturating_sub(start_ms) as f64 / 1000.0),
        cpu_s: last_step_reading
            .and_then(|r| r.cpu_usage_ns)
            .map(|c| c.saturating_sub(cpu_start) as f64 / 1e9),
        mem_peak_bytes: last_step_reading.and_then(|r| r.mem_peak_bytes),
        exit_status: exit.and_then(|e| e.exit_status),
    }
}

/// The node's steps, by start time then name.
fn step_summaries(steps: &[SpoolFile]) -> Vec<StepSummary> {
    let mut v: Vec<StepSummary> = steps.iter().map(step_summary).collect();
    v.sort_by(|a, b| {
        a.start_unix_ms
            .cmp(&b.start_unix_ms)
            .then(a.step.cmp(&b.step))
    });
    v
}

/// How well the node was observed: samples taken, whether the sampler ended cleanly and the final
/// counters were read, and the notes that explain gaps. `io_per_process_on_v2`: the I/O was summed
/// per process on a cgroup v2 node (see [`IO_PER_PROCESS_ON_V2_NOTE`]).
fn node_quality(
    series: Option<&SpoolFile>,
    steps: &[SpoolFile],
    io_per_process_on_v2: bool,
) -> Quality {
    let samples_series: u64 = series
        .map(|s| s.buckets.iter().map(|b| b.n as u64).sum())
        .unwrap_or(0);
    let final_readings = steps
        .iter()
        .flat_map(|f| f.events.iter())
        .filter(|e| {
            e.kind != EventKind::StepStart
                && e.job.as_ref().is_some_and(|r| r.cpu_usage_ns.is_some())
        })
        .count() as u64;
    let mut notes = Vec::new();
    if series.is_none() {
        notes.push(
            "no sampler series on this node (sampler not started or its spool was lost)"
                .to_string(),
        );
    }
    if let Some(s) = series {
        for e in s
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::SamplerError | EventKind::KernelView))
        {
            if let Some(m) = &e.message {
                notes.push(match e.kind {
                    EventKind::KernelView => m.clone(),
                    _ => format!("sampler: {m}"),
                });
            }
        }
    }
    if io_per_process_on_v2 {
        notes.push(IO_PER_PROCESS_ON_V2_NOTE.to_string());
    }
    Quality {
        samples: samples_series + final_readings,
        sampler_ended_cleanly: series.is_some_and(|s| s.end.is_some()),
        torn_records: series.is_some_and(|s| s.torn) || steps.iter().any(|s| s.torn),
        final_counters: final_readings > 0,
        thinned: series.is_some_and(|s| s.buckets.iter().any(|b| b.n > 1)),
        notes,
    }
}

/// The batch script's hash as the batch step recorded it (an event of kind
/// [`EventKind::BatchScript`] in `step_batch.jsc`, written by `plugin/src/steps.rs`).
/// Spool files are untrusted input: anything but 64 hex digits is no hash.
fn script_sha256(steps: &[SpoolFile]) -> Option<String> {
    steps
        .iter()
        .filter(|f| f.header.series == "batch")
        .flat_map(|f| f.events.iter())
        .filter(|e| e.kind == EventKind::BatchScript)
        .filter_map(|e| e.message.as_deref())
        .find(|m| m.len() == 64 && m.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase)
}

/// One node's spool directory as read by `jobscope_common::spool::read_node_dir`: the sampler's
/// series (`job.jsc`), the steps' files, the GPU series (`gpu.jsc`) and what could not be read.
#[derive(Debug, Clone, Default)]
pub struct NodeSpool {
    pub series: Option<SpoolFile>,
    pub steps: Vec<SpoolFile>,
    pub gpu: Option<crate::gpu::GpuSeries>,
    /// The steps past the step files' budget ([`crate::spool::STEPS_NOT_RECORDED_FILE`]).
    pub steps_not_recorded: Option<crate::spool::StepsNotRecorded>,
    /// Files that could not be read or decoded (reported, not fatal).
    pub problems: Vec<String>,
    /// What the rules over running jobs did ([`crate::watch::WATCH_FILE`]).
    pub interventions: Vec<crate::watch::Intervention>,
}

/// When the node's spool began: the earliest of its headers' starts (the series' and the steps').
fn earliest_start_ms<'a>(headers: impl Iterator<Item = &'a crate::spool::Header>) -> Option<u64> {
    headers.map(|h| h.start_unix_ms).min()
}

impl NodeSpool {
    /// When this spool began, as its node summary's `start_unix_ms` says ([`earliest_start_ms`]).
    pub fn start_unix_ms(&self) -> Option<u64> {
        earliest_start_ms(
            self.series
                .iter()
                .map(|s| &s.header)
                .chain(self.steps.iter().map(|s| &s.header)),
        )
    }

    /// The first header found (the series', else a step's): which job, node and user the spool is of.
    pub fn header(&self) -> Option<&crate::spool::Header> {
        self.series
            .as_ref()
            .map(|s| &s.header)
            .or_else(|| self.steps.first().map(|s| &s.header))
    }

    /// When the job ended on this node as far as its spool tells: the last thing recorded (the
    /// sampler's end record, its last bucket or event, a step's last event). `None` for a spool with
    /// nothing in it.
    pub fn last_record_ms(&self) -> Option<u64> {
        let series = self.series.iter().flat_map(|s| {
            s.end
                .iter()
                .map(|e| e.t_ms)
                .chain(s.buckets.last().map(|b| b.t_last_ms))
                .chain(s.events.iter().map(|e| e.t_ms))
        });
        let steps = self
            .steps
            .iter()
            .flat_map(|s| s.events.iter().map(|e| e.t_ms));
        series.chain(steps).max()
    }
}

/// The data note of a v2 job whose cgroup has no io controller, so no `io.stat`.
pub const IO_PER_PROCESS_ON_V2_NOTE: &str =
    "I/O is the sum over the job's processes (/proc/<pid>/io), not the cgroup's io.stat: the io \
     controller is not enabled for this job's cgroup (SLURM's default; a site enables it with \
     EnableExtraControllers=io on SLURM 26.05, or +io in slurmstepd's scope)";

/// The data note for steps without a step file: how many, which (the first and last few), and what
/// the figures still cover.
pub fn steps_not_recorded_note(n: &crate::spool::StepsNotRecorded) -> String {
    let count = if n.more {
        format!("more than {}", n.steps.len())
    } else {
        n.steps.len().to_string()
    };
    let names = if n.steps.len() <= 6 {
        n.steps.join(", ")
    } else {
        let (head, tail) = (&n.steps[..3], &n.steps[n.steps.len() - 2..]);
        format!("{}, …, {}", head.join(", "), tail.join(", "))
    };
    let names = if names.is_empty() {
        String::new()
    } else {
        format!(": {names}{}", if n.more { ", …" } else { "" })
    };
    format!(
        "{count} step(s) not recorded, the spool's share for steps being full{names}; \
         the step table lacks them, the node's CPU, memory and I/O totals (the job's cgroup) include them"
    )
}

/// The node summary of a spool, with its GPUs. `end_unix_ms` is when the job ended on this node (the
/// Epilog: now; afterwards: [`NodeSpool::last_record_ms`]). What could not be read, and what the GPU
/// series says about its own quality, become the node's quality notes.
pub fn summarize_node_spool(
    spool: &NodeSpool,
    node: &str,
    end_unix_ms: u64,
    gpu: &crate::gpu::summary::GpuSummaryParams,
) -> NodeSummary {
    let mut ns = summarize_node(spool.series.as_ref(), &spool.steps, node, end_unix_ms);
    ns.quality.notes.extend(spool.problems.iter().cloned());
    if let Some(n) = spool
        .steps_not_recorded
        .as_ref()
        .filter(|n| !n.steps.is_empty() || n.more)
    {
        ns.quality.notes.push(steps_not_recorded_note(n));
        ns.steps_not_recorded = Some(n.clone());
    }
    ns.interventions = spool.interventions.clone();
    if let Some(series) = &spool.gpu {
        ns.quality
            .notes
            .extend(crate::gpu::summary::gpu_quality_notes(series));
        ns.gpus = crate::gpu::summary::summarize_gpus_with(series, ns.elapsed_s, gpu);
    }
    ns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::{Bucket, End, Event, Gauge, Header, N_GAUGES};

    fn header(series: &str, start: u64) -> Header {
        Header {
            uid: 1001,
            gid: 1001,
            cgroup_version: Some(CgroupVersion::V1),
            plugin_version: "t".into(),
            alloc_cores: Some(2),
            alloc_mem_bytes: Some(2 << 30),
            ..Header::new(9, "vm", series, start)
        }
    }

    fn bucket(t: u64, cpu_s: u64, mem: u64) -> Bucket {
        let mut gauges = [None; N_GAUGES];
        gauges[GaugeId::MemCurrentBytes as usize] = Some(Gauge::one(mem));
        Bucket {
            t_first_ms: t,
            t_last_ms: t,
            n: 1,
            last: Reading {
                cpu_usage_ns: Some(cpu_s * 1_000_000_000),
                mem_current_bytes: Some(mem),
                mem_peak_bytes: Some(mem),
                ..Default::default()
            },
            gauges,
        }
    }

    fn step_event(t_ms: u64, kind: EventKind) -> Event {
        Event {
            t_ms,
            kind,
            step: Some("batch".into()),
            job: None,
            step_reading: None,
            exit_status: None,
            message: None,
        }
    }

    fn step_file(series: &str, events: Vec<Event>) -> SpoolFile {
        SpoolFile {
            header: header(series, 5),
            buckets: vec![],
            events,
            end: None,
            torn: false,
            valid_bytes: 0,
        }
    }

    fn with_step_cpu(mut e: Event, cpu_ns: u64, mem: Option<u64>) -> Event {
        e.step_reading = Some(Reading {
            cpu_usage_ns: Some(cpu_ns),
            mem_peak_bytes: mem,
            ..Default::default()
        });
        e
    }

    /// A step's CPU is its own cgroup's growth from start to its last reading; its elapsed time
    /// from its start event to its exit event; without a start event the header's start counts.
    #[test]
    fn a_step_is_summarized_from_its_start_and_exit_events() {
        let f = step_file(
            "0",
            vec![
                with_step_cpu(step_event(1_000, EventKind::StepStart), 2_000_000_000, None),
                with_step_cpu(
                    step_event(4_500, EventKind::StepExit),
                    5_000_000_000,
                    Some(77),
                ),
            ],
        );
        let mut exited = f.events[1].clone();
        exited.exit_status = Some(3);
        let f = SpoolFile {
            events: vec![f.events[0].clone(), exited],
            ..f
        };
        let s = step_summary(&f);
        assert_eq!(s.step, "0");
        assert_eq!(s.start_unix_ms, Some(1_000));
        assert_eq!(s.end_unix_ms, Some(4_500));
        assert_eq!(s.elapsed_s, Some(3.5));
        assert_eq!(s.cpu_s, Some(3.0));
        assert_eq!(s.mem_peak_bytes, Some(77));
        assert_eq!(s.exit_status, Some(3));

        let running = step_summary(&step_file("1", vec![]));
        assert_eq!(running.start_unix_ms, Some(5));
        assert_eq!((running.end_unix_ms, running.elapsed_s), (None, None));
        assert_eq!(running.cpu_s, None);
    }

    #[test]
    fn steps_are_ordered_by_start_then_name() {
        let at = |name: &str, t| step_file(name, vec![step_event(t, EventKind::StepStart)]);
        let v = step_summaries(&[at("b", 20), at("z", 10), at("a", 20)]);
        let names: Vec<&str> = v.iter().map(|s| s.step.as_str()).collect();
        assert_eq!(names, ["z", "a", "b"]);
    }

    /// Old spools name no I/O source: v2 meant io.stat, v1 the per-process counters.
    #[test]
    fn the_io_source_falls_back_on_the_cgroup_version() {
        let mut h = header("job", 0);
        assert_eq!(io_source_of(&h), Some(IoSource::Proc));
        h.cgroup_version = Some(CgroupVersion::V2);
        assert_eq!(io_source_of(&h), Some(IoSource::IoStat));
        h.io_source = Some(IoSource::Proc);
        assert_eq!(io_source_of(&h), Some(IoSource::Proc));
        h.io_source = None;
        h.cgroup_version = None;
        assert_eq!(io_source_of(&h), None);
    }

    /// The steps' reaped I/O completes the per-process figure, never the io.stat one.
    #[test]
    fn reaped_io_counts_only_for_per_process_sources() {
        let reading = |read| Reading {
            reaped_read_bytes: Some(read),
            ..Default::default()
        };
        let mut start = step_event(10, EventKind::StepStart);
        start.step_reading = Some(reading(100));
        let mut exit = step_event(20, EventKind::StepExit);
        exit.step_reading = Some(reading(900));
        let steps = [step_file("batch", vec![start, exit])];
        let sampled = Reading {
            io_read_bytes: Some(500),
            ..Default::default()
        };
        let rs = [(15, &sampled)];
        let proc_io = io_totals(&rs, &steps, Some(IoSource::Proc), Some(4.0));
        assert_eq!(proc_io.read_bytes, Some(800));
        assert_eq!(proc_io.peak_bytes_per_s, Some(4.0));
        assert_eq!(proc_io.source.as_deref(), Some(IoSource::Proc.name()));
        let stat_io = io_totals(&rs, &steps, Some(IoSource::IoStat), None);
        assert_eq!(stat_io.read_bytes, Some(500));
    }

    /// The memory peak is the largest of the peak counter, the sampler's gauge and any current
    /// reading; the limit is the last one read.
    #[test]
    fn the_memory_peak_is_the_largest_of_every_source() {
        let a = Reading {
            mem_peak_bytes: Some(300),
            mem_limit_bytes: Some(1_000),
            ..Default::default()
        };
        let b = Reading {
            mem_current_bytes: Some(400),
            mem_limit_bytes: Some(2_000),
            ..Default::default()
        };
        let rs = [(1, &a), (2, &b)];
        let m = mem_totals(None, &rs);
        assert_eq!(m.peak_bytes, Some(400));
        assert_eq!(m.limit_bytes, Some(2_000));
        let series = SpoolFile {
            buckets: vec![bucket(0, 0, 900)],
            ..step_file("job", vec![])
        };
        assert_eq!(mem_totals(Some(&series), &rs).peak_bytes, Some(900));
    }

    /// Without a series the node says so; a sampler error and a kernel-view message become notes
    /// (the latter as written); a step's exit reading is a final counter.
    #[test]
    fn quality_notes_say_what_was_missing() {
        let mut exit = step_event(20, EventKind::StepExit);
        exit.job = Some(Reading {
            cpu_usage_ns: Some(1),
            ..Default::default()
        });
        let steps = [step_file("batch", vec![exit])];
        let q = node_quality(None, &steps, false);
        assert_eq!(q.samples, 1);
        assert!(q.final_counters);
        assert!(!q.sampler_ended_cleanly);
        assert_eq!(q.notes.len(), 1);
        assert!(q.notes[0].starts_with("no sampler series"), "{:?}", q.notes);

        let mut err = step_event(1, EventKind::SamplerError);
        err.message = Some("read failed".into());
        let mut kv = step_event(2, EventKind::KernelView);
        kv.message = Some("kernel view off".into());
        let series = SpoolFile {
            buckets: vec![bucket(0, 0, 1)],
            ..step_file("job", vec![err, kv])
        };
        let q = node_quality(Some(&series), &[], true);
        assert_eq!(q.samples, 1);
        assert!(!q.final_counters);
        assert_eq!(
            q.notes,
            [
                "sampler: read failed".to_string(),
                "kernel view off".to_string(),
                IO_PER_PROCESS_ON_V2_NOTE.to_string()
            ]
        );
    }

    #[test]
    fn a_spools_end_is_its_last_record_from_any_file() {
        let series = |end: Option<u64>| SpoolFile {
            header: header("job", 0),
            buckets: vec![bucket(0, 0, 1), bucket(30_000, 1, 1)],
            events: vec![step_event(31_000, EventKind::SamplerError)],
            end: end.map(|t_ms| End {
                t_ms,
                reason: "stopped".into(),
                samples_taken: 2,
                samples_missed: 0,
            }),
            torn: false,
            valid_bytes: 0,
        };
        let step = |t| SpoolFile {
            header: header("batch", 10),
            buckets: vec![],
            events: vec![
                step_event(10, EventKind::StepStart),
                step_event(t, EventKind::StepExit),
            ],
            end: None,
            torn: false,
            valid_bytes: 0,
        };
        let spool = |series, steps| NodeSpool {
            series,
            steps,
            ..Default::default()
        };
        assert_eq!(spool(None, vec![]).last_record_ms(), None);
        // The sampler died: its last event is the end.
        assert_eq!(
            spool(Some(series(None)), vec![]).last_record_ms(),
            Some(31_000)
        );
        assert_eq!(
            spool(Some(series(Some(40_000))), vec![]).last_record_ms(),
            Some(40_000)
        );
        // A step's exit after the sampler stopped.
        assert_eq!(
            spool(Some(series(Some(40_000))), vec![step(45_000)]).last_record_ms(),
            Some(45_000)
        );
        // Steps only (no extern step, no sampler).
        let only_steps = spool(None, vec![step(45_000)]);
        assert_eq!(only_steps.last_record_ms(), Some(45_000));
        assert_eq!(
            only_steps.header().map(|h| h.series.as_str()),
            Some("batch")
        );
    }

    /// The batch step's `batch_script` event names the node's script hash; a malformed message,
    /// or the same event in another step's file, does not.
    #[test]
    fn the_batch_steps_script_event_is_the_nodes_script_hash() {
        let hex = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08";
        let step = |series: &str, messages: &[&str]| SpoolFile {
            header: header(series, 10),
            buckets: vec![],
            events: messages
                .iter()
                .map(|m| Event {
                    message: Some(m.to_string()),
                    ..step_event(20, EventKind::BatchScript)
                })
                .collect(),
            end: None,
            torn: false,
            valid_bytes: 0,
        };
        let of = |steps: Vec<SpoolFile>| summarize_node(None, &steps, "vm", 30).script_sha256;
        assert_eq!(
            of(vec![step("batch", &[hex])]).as_deref(),
            Some(hex.to_ascii_lowercase().as_str())
        );
        assert_eq!(of(vec![step("0", &[hex])]), None, "not the batch step");
        assert_eq!(of(vec![step("batch", &["../../etc/passwd"])]), None);
        assert_eq!(of(vec![step("batch", &[&hex[1..]])]), None, "63 digits");
        assert_eq!(of(vec![step("batch", &[])]), None);
    }

    /// A 12.000 s job on 2 cores keeping one busy, whose SLURM start second (truncated) lies 0.7 s
    /// before its first record, and whose Epilog runs 90 ms after the batch step's exit.
    #[test]
    fn a_12_s_job_reads_12_s_and_50_pct_from_its_own_millisecond_records() {
        let slurm_s = 1_700_000_000u64;
        let t0 = slurm_s * 1000 + 700;
        let job_reading = |cpu_ms: u64| Reading {
            cpu_usage_ns: Some(cpu_ms * 1_000_000),
            ..Default::default()
        };
        let mut b0 = bucket(t0, 0, 1 << 20);
        b0.last.cpu_usage_ns = Some(0);
        let mut b1 = bucket(t0 + 10_000, 10, 1 << 20);
        b1.last.cpu_usage_ns = Some(10_000_000_000);
        let series = SpoolFile {
            header: header("job", t0),
            buckets: vec![b0, b1],
            events: vec![],
            end: Some(End {
                t_ms: t0 + 12_060,
                reason: "stopped".into(),
                samples_taken: 2,
                samples_missed: 0,
            }),
            torn: false,
            valid_bytes: 0,
        };
        let mut start = step_event(t0 + 20, EventKind::StepStart);
        start.step_reading = Some(job_reading(0));
        let mut exit = step_event(t0 + 12_000, EventKind::StepExit);
        exit.job = Some(job_reading(12_000));
        exit.exit_status = Some(0);
        let batch = SpoolFile {
            header: header("batch", t0 + 20),
            buckets: vec![],
            events: vec![start, exit],
            end: None,
            torn: false,
            valid_bytes: 0,
        };
        let epilog_now = t0 + 12_090;
        let n = summarize_node(Some(&series), &[batch], "vm", epilog_now);
        assert_eq!((n.start_unix_ms, n.end_unix_ms), (t0, t0 + 12_000));
        assert!((n.cpu_efficiency_pct.unwrap() - 50.0).abs() < 0.5);

        let facts = crate::job::JobFacts {
            job_id: 9,
            start_unix_s: Some(slurm_s),
            cpus: Some(2),
            ..Default::default()
        };
        let decide = |_: &crate::job::JobFacts, _: &crate::job::EndEvidence| crate::job::JobEnd {
            state: crate::job::JobState::Completed,
            reason: None,
        };
        let s = crate::summary::job::assemble(&facts, vec![n], &["vm".into()], "t", &decide);
        assert!((s.elapsed_s - 12.0).abs() <= 0.05, "{}", s.elapsed_s);
        let eff = s.efficiency.cpu_pct.unwrap();
        assert!((eff - 50.0).abs() <= 0.5, "{eff}");
    }

    #[test]
    fn without_a_recorded_end_the_callers_bound_is_the_end() {
        // The sampler ended on its own (it noticed the cgroup gone at a later sample): no end time.
        let series = SpoolFile {
            header: header("job", 1_000),
            buckets: vec![bucket(1_000, 0, 1), bucket(31_000, 1, 1)],
            events: vec![],
            end: Some(End {
                t_ms: 61_000,
                reason: "cgroup_gone".into(),
                samples_taken: 2,
                samples_missed: 0,
            }),
            torn: false,
            valid_bytes: 0,
        };
        let n = summarize_node(Some(&series), &[], "vm", 45_000);
        assert_eq!((n.start_unix_ms, n.end_unix_ms), (1_000, 45_000));
        // A plugin-stopped sampler's end is the end; a record past the bound is not believed.
        let mut stopped = series.clone();
        stopped.end.as_mut().unwrap().reason = "stopped".into();
        assert_eq!(
            summarize_node(Some(&stopped), &[], "vm", 70_000).end_unix_ms,
            61_000
        );
        assert_eq!(
            summarize_node(Some(&stopped), &[], "vm", 45_000).end_unix_ms,
            45_000
        );
    }

    /// A v2 node over 100 s whose PSI counters rose by 41 s on I/O, 2 s on CPU and not on memory;
    /// the same job on v1 (no PSI, no cpu.stat throttling).
    #[test]
    fn pressure_is_the_share_of_wall_time_stalled_and_absent_on_v1() {
        let psi = |t: u64, io_s: u64, cpu_ms: u64| {
            let mut b = bucket(t, t / 1000, 1 << 20);
            b.last.psi_io_some_usec = Some(io_s * 1_000_000);
            b.last.psi_cpu_some_usec = Some(cpu_ms * 1000);
            b.last.psi_mem_some_usec = Some(7);
            b.last.psi_mem_full_usec = Some(7);
            b.last.cpu_throttled_usec = Some(0);
            b.last.cpu_nr_throttled = Some(0);
            b
        };
        let mut h = header("job", 0);
        h.cgroup_version = Some(CgroupVersion::V2);
        let v2 = SpoolFile {
            header: h,
            // The counters start where the cgroup's life began: only the rise counts.
            buckets: vec![
                psi(0, 3, 500),
                psi(30_000, 15, 1_100),
                psi(60_000, 30, 2_000),
                psi(100_000, 44, 2_500),
            ],
            events: vec![],
            end: None,
            torn: false,
            valid_bytes: 0,
        };
        let n = summarize_node(Some(&v2), &[], "vm", 100_000);
        let p = n.pressure.clone().expect("v2 gives pressure");
        assert_eq!(p.window_s, 100.0);
        assert!((p.io_some_pct.unwrap() - 41.0).abs() < 1e-9, "{p:?}");
        assert!((p.cpu_some_pct.unwrap() - 2.0).abs() < 1e-9, "{p:?}");
        assert_eq!((p.mem_some_pct, p.mem_full_pct), (Some(0.0), Some(0.0)));
        assert_eq!(
            (n.cpu.throttled_s, n.cpu.throttled_periods),
            (Some(0.0), Some(0))
        );
        let decide = |_: &crate::job::JobFacts, _: &crate::job::EndEvidence| crate::job::JobEnd {
            state: crate::job::JobState::Completed,
            reason: None,
        };
        let facts = crate::job::JobFacts::default();
        let job = crate::summary::job::assemble(&facts, vec![n], &["vm".into()], "t", &decide);
        assert_eq!(job.pressure, Some(p));
        let a = crate::summary::analysis::analyze(&job, &Default::default());
        let stalls: Vec<_> = a
            .anomalies
            .iter()
            .filter_map(|f| match &f.what {
                crate::summary::analysis::FindingKind::Stalled { resource, pct, .. } => {
                    Some((*resource, *pct))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            stalls,
            vec![(crate::summary::analysis::StallResource::Io, 41.0)],
            "I/O over the 20 % threshold, CPU (2 %) and memory (0 %) under it"
        );

        let v1 = SpoolFile {
            buckets: vec![bucket(0, 0, 1), bucket(30_000, 1, 1), bucket(60_000, 2, 1)],
            ..v2
        };
        let n1 = summarize_node(Some(&v1), &[], "vm", 60_000);
        assert_eq!(n1.pressure, None, "no PSI: absent, not 0");
        assert_eq!((n1.cpu.throttled_s, n1.cpu.throttled_periods), (None, None));
        let job1 = crate::summary::job::assemble(&facts, vec![n1], &["vm".into()], "t", &decide);
        assert_eq!(job1.pressure, None);
    }

    /// Issue 19 §3: steps without a file are counted in the node's summary and said in its notes:
    /// how many, which, and what the totals still cover.
    #[test]
    fn steps_without_a_file_are_counted_and_said() {
        let names: Vec<String> = (67..300).map(|i| i.to_string()).collect();
        let spool = NodeSpool {
            steps_not_recorded: Some(crate::spool::StepsNotRecorded {
                steps: names.clone(),
                more: false,
            }),
            ..Default::default()
        };
        let ns = summarize_node_spool(&spool, "n1", 0, &Default::default());
        assert_eq!(
            ns.steps_not_recorded.as_ref().map(|n| n.steps.len()),
            Some(233)
        );
        let note = ns
            .quality
            .notes
            .iter()
            .find(|n| n.contains("not recorded"))
            .expect("a note");
        assert!(note.starts_with("233 step(s) not recorded"), "{note}");
        assert!(
            note.contains("67, 68, 69, …, 298, 299") && note.contains("include them"),
            "{note}"
        );
        // More than the list holds: a floor, said as one.
        let spool = NodeSpool {
            steps_not_recorded: Some(crate::spool::StepsNotRecorded {
                steps: names,
                more: true,
            }),
            ..Default::default()
        };
        let ns = summarize_node_spool(&spool, "n1", 0, &Default::default());
        assert!(ns
            .quality
            .notes
            .iter()
            .any(|n| n.starts_with("more than 233 step(s)")));
        // An empty list says nothing.
        let spool = NodeSpool {
            steps_not_recorded: Some(Default::default()),
            ..Default::default()
        };
        let ns = summarize_node_spool(&spool, "n1", 0, &Default::default());
        assert!(ns.steps_not_recorded.is_none());
        assert!(!ns.quality.notes.iter().any(|n| n.contains("not recorded")));
    }

    #[test]
    fn read_problems_become_quality_notes() {
        let spool = NodeSpool {
            problems: vec!["step_0.jsc: bad magic".into()],
            ..Default::default()
        };
        let ns = summarize_node_spool(&spool, "vm", 0, &Default::default());
        assert!(ns
            .quality
            .notes
            .iter()
            .any(|n| n == "step_0.jsc: bad magic"));
        assert!(ns.gpus.is_empty());
    }

    #[test]
    fn final_step_reading_wins_and_efficiency_uses_allocation() {
        // Sampler: 0 s, 10 s (10 CPU-s), job ends at 20 s; batch exit reads 38 CPU-s and peak 700 MiB.
        let series = SpoolFile {
            header: header("job", 0),
            buckets: vec![bucket(0, 0, 1 << 20), bucket(10_000, 10, 600 << 20)],
            events: vec![],
            end: Some(End {
                t_ms: 20_100,
                reason: "exit".into(),
                samples_taken: 2,
                samples_missed: 0,
            }),
            torn: false,
            valid_bytes: 0,
        };
        let batch = SpoolFile {
            header: header("batch", 50),
            buckets: vec![],
            events: vec![
                Event {
                    t_ms: 50,
                    kind: EventKind::StepStart,
                    step: Some("batch".into()),
                    job: None,
                    step_reading: Some(Reading {
                        cpu_usage_ns: Some(0),
                        ..Default::default()
                    }),
                    exit_status: None,
                    message: None,
                },
                Event {
                    t_ms: 20_000,
                    kind: EventKind::StepExit,
                    step: Some("batch".into()),
                    job: Some(Reading {
                        cpu_usage_ns: Some(38_000_000_000),
                        mem_peak_bytes: Some(700 << 20),
                        ..Default::default()
                    }),
                    step_reading: Some(Reading {
                        cpu_usage_ns: Some(37_000_000_000),
                        mem_peak_bytes: Some(690 << 20),
                        ..Default::default()
                    }),
                    exit_status: Some(0),
                    message: None,
                },
            ],
            end: None,
            torn: false,
            valid_bytes: 0,
        };
        let s = summarize_node(Some(&series), &[batch], "vm", 20_000);
        assert_eq!(s.cpu.usage_s, Some(38.0));
        assert_eq!(s.mem.peak_bytes, Some(700 << 20));
        assert_eq!(s.elapsed_s, 20.0);
        // 38 CPU-s / (2 cores × 20 s) = 95 %
        assert!((s.cpu_efficiency_pct.unwrap() - 95.0).abs() < 1e-9);
        assert_eq!(s.quality.samples, 3);
        assert!(s.quality.final_counters && s.quality.sampler_ended_cleanly);
        assert_eq!(s.steps.len(), 1);
        assert_eq!(s.steps[0].cpu_s, Some(37.0));
        assert_eq!(s.steps[0].elapsed_s, Some(19.95));
        // timeline: 2 buckets + the closing point from the batch exit; 10 CPU-s over 10 s = 1 core
        assert_eq!(s.timeline.len(), 3);
        assert_eq!(s.timeline[1].busy_cores, Some(1.0));
        assert_eq!(s.timeline[2].busy_cores, Some(2.8));
        // absent, not zero
        assert_eq!(s.io.read_bytes, None);
        assert_eq!(s.mem.oom_kill_events, None);
    }

    #[test]
    fn downsampled_timeline_keeps_peaks_and_means() {
        let pts: Vec<Point> = (1..=1000)
            .map(|i| Point {
                t_s: i as f64,
                busy_cores: Some(if i == 500 { 8.0 } else { 1.0 }),
                busy_cores_max: Some(if i == 500 { 8.0 } else { 1.0 }),
                mem_bytes: Some(if i == 700 { 9 << 30 } else { 1 << 30 }),
                mem_bytes_max: Some(if i == 700 { 9 << 30 } else { 1 << 30 }),
                io_bytes_per_s: None,
                tasks: Some(1),
                cpu_wait_pct: None,
                runnable_threads: None,
            })
            .collect();
        let d = downsample_timeline(pts, 100);
        assert!(d.len() <= 100);
        assert_eq!(
            d.iter()
                .filter_map(|p| p.busy_cores_max)
                .fold(0.0, f64::max),
            8.0
        );
        assert_eq!(
            d.iter().filter_map(|p| p.mem_bytes_max).max(),
            Some(9 << 30)
        );
        // time-weighted mean busy cores is preserved: (999 × 1 + 8) / 1000
        let total: f64 = d
            .iter()
            .zip(std::iter::once(0.0).chain(d.iter().map(|p| p.t_s)))
            .map(|(p, t0)| p.busy_cores.unwrap() * (p.t_s - t0))
            .sum();
        assert!((total / 1000.0 - 1.007).abs() < 1e-9, "{total}");
        assert_eq!(d.last().unwrap().t_s, 1000.0);
        assert_eq!(d[0].io_bytes_per_s, None);
        assert_eq!((d[0].cpu_wait_pct, d[0].runnable_threads), (None, None));
    }

    /// Points at `t_s` with the kernel view's (wait share, runnable threads) over the interval.
    fn wait_point(t_s: f64, pct: Option<f64>, threads: Option<f64>) -> Point {
        Point {
            t_s,
            busy_cores: Some(1.0),
            busy_cores_max: Some(1.0),
            mem_bytes: None,
            mem_bytes_max: None,
            io_bytes_per_s: None,
            tasks: None,
            cpu_wait_pct: pct,
            runnable_threads: threads,
        }
    }

    #[test]
    fn thinning_merges_the_cpu_wait_share_by_runnable_time() {
        // 0-10 s: 1 thread runnable, waiting 10 % of it (10 s runnable, 1 s waiting);
        // 10-20 s: 9 threads, waiting 90 % (90 s runnable, 81 s waiting);
        // 20-30 s: nothing runnable (0 threads, no share); 30-40 s: no kernel view.
        let pts = vec![
            wait_point(10.0, Some(10.0), Some(1.0)),
            wait_point(20.0, Some(90.0), Some(9.0)),
            wait_point(30.0, None, Some(0.0)),
            wait_point(40.0, None, None),
        ];
        let d = downsample_timeline(pts, 1);
        assert_eq!(d.len(), 1);
        // (1 + 81) s waiting of (10 + 90) s runnable: 82 %, not the 50 % of a mean by time.
        assert!(
            (d[0].cpu_wait_pct.unwrap() - 82.0).abs() < 1e-9,
            "{:?}",
            d[0].cpu_wait_pct
        );
        // 100 s runnable over the 30 s the view saw: 3.33 threads on average.
        assert!(
            (d[0].runnable_threads.unwrap() - 100.0 / 30.0).abs() < 1e-9,
            "{:?}",
            d[0].runnable_threads
        );
        // Nothing runnable at all in a merged chunk: a count of 0 threads and no share.
        let d = downsample_timeline(
            vec![
                wait_point(10.0, None, Some(0.0)),
                wait_point(20.0, None, Some(0.0)),
            ],
            1,
        );
        assert_eq!(
            (d[0].cpu_wait_pct, d[0].runnable_threads),
            (None, Some(0.0))
        );
        // Without a kernel view: absent, not 0.
        let d = downsample_timeline(
            vec![wait_point(10.0, None, None), wait_point(20.0, None, None)],
            1,
        );
        assert_eq!((d[0].cpu_wait_pct, d[0].runnable_threads), (None, None));
    }

    /// A sampler bucket at `t` ms whose reading has the kernel view's run and wait times (s).
    fn kernel_bucket(t: u64, kernel: Option<(u64, u64)>) -> Bucket {
        let mut b = bucket(t, t / 1000, MIB);
        if let Some((run_s, wait_s)) = kernel {
            b.last.kernel_run_ns = Some(run_s * 1_000_000_000);
            b.last.kernel_runq_wait_ns = Some(wait_s * 1_000_000_000);
        }
        b
    }

    /// The batch step's exit at `t` ms, the job's kernel counters (run, wait, s) on its reading.
    fn kernel_exit(t: u64, run_s: u64, wait_s: u64) -> SpoolFile {
        let mut e = step_event(t, EventKind::StepExit);
        e.job = Some(Reading {
            cpu_usage_ns: Some(t * 1_000_000),
            ..Default::default()
        });
        e.step_reading = Some(Reading {
            kernel_run_ns: Some(run_s * 1_000_000_000),
            kernel_runq_wait_ns: Some(wait_s * 1_000_000_000),
            ..Default::default()
        });
        SpoolFile {
            header: header("batch", 50),
            buckets: vec![],
            events: vec![e],
            end: None,
            torn: false,
            valid_bytes: 0,
        }
    }

    fn wait_timeline(buckets: Vec<Bucket>, exit: SpoolFile) -> Vec<(Option<f64>, Option<f64>)> {
        let series = SpoolFile {
            header: header("job", 0),
            buckets,
            events: vec![],
            end: None,
            torn: false,
            valid_bytes: 0,
        };
        summarize_node(Some(&series), &[exit], "vm", 40_000)
            .timeline
            .iter()
            .map(|p| (p.cpu_wait_pct, p.runnable_threads))
            .collect()
    }

    #[test]
    fn the_timeline_has_the_cpu_wait_share_of_each_interval() {
        // 0-10 s: 2 threads on the 2 cores (20 s running, no wait); 10-20 s: 8 threads (20 s
        // running, 60 s waiting); 20-30 s: 20 s running, 5 s waiting; 30-40 s (the batch step's
        // exit): 10 s running, no wait.
        let tl = wait_timeline(
            vec![
                kernel_bucket(0, Some((0, 0))),
                kernel_bucket(10_000, Some((20, 0))),
                kernel_bucket(20_000, Some((40, 60))),
                kernel_bucket(30_000, Some((60, 65))),
            ],
            kernel_exit(40_000, 70, 65),
        );
        assert_eq!(
            tl,
            vec![
                (None, None),
                (Some(0.0), Some(2.0)),
                // 60 / (20 + 60)
                (Some(75.0), Some(8.0)),
                // 5 / (20 + 5); 25 s runnable in 10 s
                (Some(20.0), Some(2.5)),
                (Some(0.0), Some(1.0)),
            ]
        );
    }

    #[test]
    fn no_cpu_wait_share_across_a_missing_reading_or_a_reset_counter() {
        // The collector stopped before 30 s: the interval to 30 s and the one after have none.
        let tl = wait_timeline(
            vec![
                kernel_bucket(0, Some((0, 0))),
                kernel_bucket(10_000, Some((20, 0))),
                kernel_bucket(20_000, Some((40, 60))),
                kernel_bucket(30_000, None),
            ],
            kernel_exit(40_000, 70, 65),
        );
        assert_eq!(tl[3], (None, None));
        assert_eq!(tl[4], (None, None));
        // The counters start again at 20 s (the job's entry was made anew): nothing for 10-20 s,
        // the next interval from the new values (10 s running, 10 s waiting: 50 %, 2 threads).
        let tl = wait_timeline(
            vec![
                kernel_bucket(0, Some((0, 0))),
                kernel_bucket(10_000, Some((20, 30))),
                kernel_bucket(20_000, Some((5, 1))),
                kernel_bucket(30_000, Some((15, 11))),
            ],
            kernel_exit(40_000, 25, 11),
        );
        assert_eq!(tl[1], (Some(60.0), Some(5.0)));
        assert_eq!(tl[2], (None, None));
        assert_eq!(tl[3], (Some(50.0), Some(2.0)));
        // No collector at all: nothing anywhere.
        let tl = wait_timeline(
            (0..4).map(|i| kernel_bucket(i * 10_000, None)).collect(),
            reaped_step("batch", None, None),
        );
        assert!(tl.iter().all(|p| *p == (None, None)), "{tl:?}");
    }

    const MIB: u64 = 1 << 20;

    /// The sampler's series, whose last bucket (at 10 s) saw `read` bytes read and `write` written.
    fn io_series(read: u64, write: u64) -> SpoolFile {
        let mut b = bucket(10_000, 1, MIB);
        b.last.io_read_bytes = Some(read);
        b.last.io_write_bytes = Some(write);
        b.last.io_read_ops = Some(read / MIB);
        b.last.io_write_ops = Some(write / MIB);
        SpoolFile {
            header: header("job", 0),
            buckets: vec![bucket(0, 0, MIB), b],
            events: vec![],
            end: None,
            torn: false,
            valid_bytes: 0,
        }
    }

    #[test]
    fn the_kernel_view_is_the_largest_reading_the_steps_exit_included_and_absent_without_one() {
        let counters = |run_s: u64, wait_s: u64, syscalls: bool| {
            let mut r = Reading::default();
            let mut c = crate::kernel_abi::Counters {
                run_ns: run_s * 1_000_000_000,
                runq_wait_ns: wait_s * 1_000_000_000,
                small_reads: 5,
                ..Default::default()
            };
            c.syscalls[crate::kernel_abi::SysClass::Sync as usize] = 60;
            c.syscalls[crate::kernel_abi::SysClass::File as usize] = 40;
            let flags = crate::kernel_abi::STATE_SMALL_IO
                | if syscalls {
                    crate::kernel_abi::STATE_SYSCALLS
                } else {
                    0
                };
            r.set_kernel(&c, flags);
            r
        };
        // The sampler saw 3 s running and 1 s waiting; the batch step's exit, later, 6 and 2.
        let mut series = io_series(0, 0);
        series.buckets[1].last = Reading {
            cpu_usage_ns: Some(1_000_000_000),
            ..counters(3, 1, true)
        };
        let mut step = reaped_step("batch", None, None);
        step.events.push(Event {
            step_reading: Some(counters(6, 2, true)),
            ..step_event(20_000, EventKind::StepExit)
        });
        let k = summarize_node(Some(&series), &[step], "vm", 30_000)
            .kernel
            .expect("a kernel view");
        assert_eq!((k.run_s, k.cpu_wait_s), (Some(6.0), Some(2.0)));
        assert_eq!(k.cpu_wait_pct(), Some(25.0));
        assert_eq!(k.small_reads, Some(5));
        assert_eq!(
            k.syscalls.as_ref().map(|s| (s.sync, s.total())),
            Some((60, 100))
        );
        // Without system-call counting the classes are unseen, not zero.
        let mut series = io_series(0, 0);
        series.buckets[1].last = counters(3, 1, false);
        let k = summarize_node(Some(&series), &[], "vm", 30_000)
            .kernel
            .unwrap();
        assert_eq!(k.syscalls, None);
        // No collector: no view at all.
        assert_eq!(
            summarize_node(Some(&io_series(1, 1)), &[], "vm", 30_000).kernel,
            None
        );
    }

    /// A step file whose slurmstepd's reaped counters were `start` at `step_start` and `exit` at
    /// `step_exit` (read bytes, write bytes); `None`: the plugin recorded none.
    fn reaped_step(name: &str, start: Option<(u64, u64)>, exit: Option<(u64, u64)>) -> SpoolFile {
        let reading = |v: Option<(u64, u64)>| {
            v.map(|(r, w)| Reading {
                reaped_read_bytes: Some(r),
                reaped_write_bytes: Some(w),
                reaped_read_ops: Some(r / MIB),
                reaped_write_ops: Some(w / MIB),
                ..Default::default()
            })
        };
        let mut s = step_event(50, EventKind::StepStart);
        s.step_reading = reading(start).map(|r| Reading {
            cpu_usage_ns: Some(0),
            ..r
        });
        let mut e = step_event(20_000, EventKind::StepExit);
        e.step_reading = reading(exit);
        e.job = Some(Reading {
            cpu_usage_ns: Some(3_000_000_000),
            ..Default::default()
        });
        SpoolFile {
            header: header(name, 50),
            buckets: vec![],
            events: vec![s, e],
            end: None,
            torn: false,
            valid_bytes: 0,
        }
    }

    #[test]
    fn io_done_after_the_last_sample_is_counted_once_from_the_reaped_figure() {
        // The sampler saw 300 MiB read by the batch script's children; by the step's exit they had
        // read 2000 MiB (the rest after the last sample) and written 10 MiB. slurmstepd had reaped
        // 4 KiB before the step (nothing of the job's).
        let series = io_series(300 * MIB, 2 * MIB);
        let batch = reaped_step(
            "batch",
            Some((4096, 0)),
            Some((4096 + 2000 * MIB, 10 * MIB)),
        );
        let n = summarize_node(Some(&series), &[batch], "vm", 20_000);
        assert_eq!(
            n.io.read_bytes,
            Some(2000 * MIB),
            "not 300 MiB, not 2300 MiB"
        );
        assert_eq!(n.io.write_bytes, Some(10 * MIB));
        assert_eq!(n.io.read_ops, Some(2000));
        assert_eq!(n.io.write_ops, Some(10));
        assert_eq!(n.io.source.as_deref(), Some("proc"));
    }

    #[test]
    fn every_steps_reaped_figure_adds_up() {
        // The batch script wrote 100 MiB, `srun` step 0 on this node read 700 MiB; the sampler saw
        // a part of each.
        let series = io_series(400 * MIB, 60 * MIB);
        let batch = reaped_step("batch", Some((0, 0)), Some((0, 100 * MIB)));
        let step0 = reaped_step("0", Some((MIB, 0)), Some((701 * MIB, 0)));
        let n = summarize_node(Some(&series), &[batch, step0], "vm", 20_000);
        assert_eq!(n.io.read_bytes, Some(700 * MIB));
        assert_eq!(n.io.write_bytes, Some(100 * MIB));
    }

    #[test]
    fn io_of_orphans_the_steps_never_reaped_keeps_the_sampled_figure() {
        // A daemonised process (re-parented to init, so never reaped into slurmstepd) read 500 MiB,
        // all seen by the sampler; the batch script itself did 1 MiB.
        let series = io_series(501 * MIB, 0);
        let batch = reaped_step("batch", Some((0, 0)), Some((MIB, 0)));
        let n = summarize_node(Some(&series), &[batch], "vm", 20_000);
        assert_eq!(n.io.read_bytes, Some(501 * MIB), "the sampler's, not 1 MiB");
        assert_eq!(n.io.write_bytes, Some(0));
        // Split between an orphan (500 MiB, seen) and the step tree (1000 MiB, 200 seen): at least
        // the larger part, never the 1700 MiB sum with its 200 MiB counted twice.
        let series = io_series(700 * MIB, 0);
        let batch = reaped_step("batch", Some((0, 0)), Some((1000 * MIB, 0)));
        let n = summarize_node(Some(&series), &[batch], "vm", 20_000);
        assert_eq!(n.io.read_bytes, Some(1000 * MIB));
    }

    #[test]
    fn without_both_reaped_readings_the_sampled_figure_stands() {
        let series = io_series(300 * MIB, 2 * MIB);
        // A plugin from before the reaped counters; a step whose slurmstepd died before `exit`;
        // one whose figure runs backwards (not believed).
        for batch in [
            reaped_step("batch", None, None),
            reaped_step("batch", Some((0, 0)), None),
            reaped_step("batch", None, Some((2000 * MIB, 0))),
            reaped_step("batch", Some((5000 * MIB, 0)), Some((2000 * MIB, 0))),
        ] {
            let n = summarize_node(Some(&series), &[batch], "vm", 20_000);
            assert_eq!(n.io.read_bytes, Some(300 * MIB));
            assert_eq!(n.io.write_bytes, Some(2 * MIB));
        }
        // No sampler and no live process read at the step's exit: the reaped figure alone.
        let batch = reaped_step("batch", Some((0, 0)), Some((20 * MIB, 0)));
        let n = summarize_node(None, &[batch], "vm", 20_000);
        assert_eq!(n.io.read_bytes, Some(20 * MIB));
        // Nothing anywhere: absent, not 0.
        let n = summarize_node(None, &[reaped_step("batch", None, None)], "vm", 20_000);
        assert_eq!(n.io.read_bytes, None);
    }

    #[test]
    fn on_cgroup_v2_io_stat_is_not_mixed_with_reaped_counters() {
        // io.stat counts block I/O charged to the cgroup, a different measure: left alone.
        let mut series = io_series(300 * MIB, 0);
        series.header.cgroup_version = Some(CgroupVersion::V2);
        let mut batch = reaped_step("batch", Some((0, 0)), Some((2000 * MIB, 0)));
        batch.header.cgroup_version = Some(CgroupVersion::V2);
        let n = summarize_node(Some(&series), &[batch.clone()], "vm", 20_000);
        assert_eq!(n.io.read_bytes, Some(300 * MIB));
        assert_eq!(n.io.source.as_deref(), Some("io.stat"));
        assert!(!n.quality.notes.iter().any(|m| m.contains("/proc/<pid>/io")));
        // The same spool from a writer that says so: the same.
        series.header.io_source = Some(IoSource::IoStat);
        let n = summarize_node(Some(&series), &[batch], "vm", 20_000);
        assert_eq!(n.io.read_bytes, Some(300 * MIB));
    }

    #[test]
    fn on_cgroup_v2_without_the_io_controller_io_is_per_process_and_said() {
        // Issue 20 §3: SLURM leaves the io controller off, the sampler sums /proc/<pid>/io and
        // says so in the header; the steps' reaped counters complete it as on v1.
        let mut series = io_series(300 * MIB, 2 * MIB);
        series.header.cgroup_version = Some(CgroupVersion::V2);
        series.header.io_source = Some(IoSource::Proc);
        let mut batch = reaped_step("batch", Some((0, 0)), Some((2000 * MIB, 0)));
        batch.header.cgroup_version = Some(CgroupVersion::V2);
        batch.header.io_source = Some(IoSource::Proc);
        let n = summarize_node(Some(&series), &[batch], "vm", 20_000);
        assert_eq!(n.io.read_bytes, Some(2000 * MIB));
        assert_eq!(n.io.source.as_deref(), Some("proc"));
        assert!(
            n.quality
                .notes
                .iter()
                .any(|m| m.contains("/proc/<pid>/io") && m.contains("io controller")),
            "{:?}",
            n.quality.notes
        );
    }

    #[test]
    fn no_series_is_partial_not_a_crash() {
        let s = summarize_node(None, &[], "n1", 5_000);
        assert_eq!(s.node, "n1");
        assert_eq!(s.cpu.usage_s, None);
        assert_eq!(s.quality.samples, 0);
        assert!(!s.quality.sampler_ended_cleanly);
        assert!(!s.quality.notes.is_empty());
    }
}
