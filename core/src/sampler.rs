//! The sampler: one thread per job per node (in the extern step's slurmstepd) that reads the job cgroup
//! on a schedule and appends to the spool.
//!
//! It lives here, not in the plugin, so it can be tested and benchmarked without SLURM; the plugin only
//! starts and stops it. Everything it does is bounded: one thread, a fixed-size in-memory series
//! (see [`crate::spool::writer::Limits`]), a capped spool file, and a stop that waits a bounded time.
//! Nothing it does can fail the job: errors are logged (once per kind) and sampling goes on.

use crate::cgroup::JobCgroup;
use crate::procio::IoAccumulator;
use crate::sample::{busy_cores, rate_per_sec, Reading};
use crate::spool::writer::SeriesWriter;
use crate::spool::{Bucket, End, Gauge, GaugeId, N_GAUGES};
use std::path::PathBuf;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub type LogFn = Box<dyn Fn(&str) + Send>;

pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[derive(Debug, Clone)]
pub struct Schedule {
    /// Offsets from the start at which to sample before the regular cadence takes over.
    pub early: Vec<Duration>,
    pub cadence: Duration,
}

impl Schedule {
    /// The offset of sample number `i` (0 = immediately at start).
    pub fn offset(&self, i: u64) -> Duration {
        if i == 0 {
            return Duration::ZERO;
        }
        let early = self.early.len() as u64;
        if i <= early {
            return self.early[(i - 1) as usize];
        }
        let base = self.early.last().copied().unwrap_or(Duration::ZERO);
        // Regular samples sit on the cadence grid (multiples of the cadence), starting with the first
        // grid point after the last early sample, so the offsets only ever increase.
        let cadence_ms = self.cadence.as_millis().max(1) as u64;
        let first = base.as_millis() as u64 / cadence_ms + 1;
        Duration::from_millis(cadence_ms * (first + (i - early) - 1))
    }
}

/// Test/fault-injection knobs (set from plugstack arguments in the real-cluster fault tests).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Panic inside the sampler thread after this many samples.
    pub panic_after_samples: Option<u64>,
}

pub struct Sampler {
    pub cgroup: JobCgroup,
    pub proc_root: PathBuf,
    pub writer: Option<SeriesWriter>,
    io: IoAccumulator,
    prev: Option<(u64, Reading, Option<Vec<u64>>)>,
    pub samples_taken: u64,
    pub samples_missed: u64,
    log: LogFn,
    logged_write_error: bool,
    faults: Faults,
}

pub enum Outcome {
    Sampled,
    /// The job cgroup is gone: the job is over on this node.
    Gone,
}

impl Sampler {
    pub fn new(
        cgroup: JobCgroup,
        proc_root: PathBuf,
        writer: Option<SeriesWriter>,
        log: LogFn,
        faults: Faults,
    ) -> Self {
        Sampler {
            cgroup,
            proc_root,
            writer,
            io: IoAccumulator::default(),
            prev: None,
            samples_taken: 0,
            samples_missed: 0,
            log,
            logged_write_error: false,
            faults,
        }
    }

    /// Reads the cgroup once and appends one bucket.
    pub fn sample_once(&mut self) -> Outcome {
        if let Some(n) = self.faults.panic_after_samples {
            if self.samples_taken >= n {
                panic!("jobscope fault injection: sampler panic after {n} samples");
            }
        }
        let t_ms = now_unix_ms();
        let mut snap = self.cgroup.read_with(&self.proc_root, Some(&mut self.io));
        if snap.gone {
            return Outcome::Gone;
        }
        let mut gauges = [None; N_GAUGES];
        if let Some((t0, r0, percpu0)) = &self.prev {
            let dt = t_ms.saturating_sub(*t0);
            if let (Some(a), Some(b)) = (percpu0, &snap.percpu_ns) {
                if a.len() == b.len() {
                    snap.reading.cpus_active =
                        Some(a.iter().zip(b).filter(|(x, y)| y > x).count() as u64);
                }
            }
            if let Some(b) = busy_cores(r0.cpu_usage_ns, snap.reading.cpu_usage_ns, dt) {
                gauges[GaugeId::BusyMilliCores as usize] =
                    Some(Gauge::one((b * 1000.0).round() as u64));
            }
            let io = [
                rate_per_sec(r0.io_read_bytes, snap.reading.io_read_bytes, dt),
                rate_per_sec(r0.io_write_bytes, snap.reading.io_write_bytes, dt),
            ];
            if io.iter().any(|x| x.is_some()) {
                let v: f64 = io.iter().flatten().sum();
                gauges[GaugeId::IoBytesPerSec as usize] = Some(Gauge::one(v.round() as u64));
            }
        }
        let r = &snap.reading;
        gauges[GaugeId::MemCurrentBytes as usize] = r.mem_current_bytes.map(Gauge::one);
        gauges[GaugeId::CpusActive as usize] = r.cpus_active.map(Gauge::one);
        gauges[GaugeId::Tasks as usize] = r.tasks.map(Gauge::one);
        let bucket = Bucket {
            t_first_ms: t_ms,
            t_last_ms: t_ms,
            n: 1,
            last: snap.reading.clone(),
            gauges,
        };
        self.samples_taken += 1;
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = w.push(bucket) {
                if !self.logged_write_error {
                    (self.log)(&format!(
                        "spool write failed, sampling continues in memory: {e}"
                    ));
                    self.logged_write_error = true;
                }
            } else if self.samples_taken % 4 == 0 {
                let _ = w.flush();
            }
        }
        self.prev = Some((t_ms, snap.reading, snap.percpu_ns));
        Outcome::Sampled
    }

    pub fn finish(&mut self, reason: &str) {
        let end = End {
            t_ms: now_unix_ms(),
            reason: reason.into(),
            samples_taken: self.samples_taken,
            samples_missed: self.samples_missed,
        };
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = w.end(&end) {
                (self.log)(&format!("could not write spool end record: {e}"));
            }
        }
    }
}

/// A running sampler thread.
pub struct SamplerHandle {
    stop: Sender<()>,
    thread: Option<JoinHandle<()>>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SamplerHandle {
    /// Asks the thread to finish (it writes the end record) and waits at most `wait`. A thread that does
    /// not finish in time is left detached: slurmstepd is never held up by jobscope.
    pub fn stop(mut self, wait: Duration) -> bool {
        let _ = self.stop.send(());
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if self.done.load(std::sync::atomic::Ordering::Acquire) {
                if let Some(t) = self.thread.take() {
                    return t.join().is_ok();
                }
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }
}

/// Starts the sampler thread. The body is wrapped in `catch_unwind`: a panic ends sampling (recorded as
/// an event in the spool, when possible) and nothing else.
pub fn spawn(
    mut sampler: Sampler,
    schedule: Schedule,
    log_panic: LogFn,
) -> std::io::Result<SamplerHandle> {
    let (tx, rx) = channel::<()>();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done2 = done.clone();
    let thread = std::thread::Builder::new()
        .name("jobscope-sampler".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let start = Instant::now();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut i = 0u64;
                let reason = loop {
                    if let Outcome::Gone = sampler.sample_once() {
                        break "cgroup_gone";
                    }
                    i += 1;
                    // Skip schedule slots that already passed (a slow read): count them as missed.
                    let mut next = schedule.offset(i);
                    while start + next < Instant::now() {
                        sampler.samples_missed += 1;
                        i += 1;
                        next = schedule.offset(i);
                    }
                    match rx.recv_timeout((start + next).saturating_duration_since(Instant::now()))
                    {
                        Err(RecvTimeoutError::Timeout) => continue,
                        _ => break "stopped",
                    }
                };
                sampler.finish(reason);
            }));
            if let Err(p) = result {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic".into());
                log_panic(&format!(
                    "sampler thread panicked, sampling stopped for this job: {msg}"
                ));
            }
            done2.store(true, std::sync::atomic::Ordering::Release);
        })?;
    Ok(SamplerHandle {
        stop: tx,
        thread: Some(thread),
        done,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_has_early_samples_then_cadence() {
        let s = Schedule {
            early: vec![
                Duration::from_secs(1),
                Duration::from_secs(5),
                Duration::from_secs(15),
            ],
            cadence: Duration::from_secs(30),
        };
        let offs: Vec<u64> = (0..6).map(|i| s.offset(i).as_secs()).collect();
        assert_eq!(offs, vec![0, 1, 5, 15, 30, 60]);
        let s = Schedule {
            early: vec![],
            cadence: Duration::from_secs(10),
        };
        assert_eq!(
            (0..3).map(|i| s.offset(i).as_secs()).collect::<Vec<_>>(),
            vec![0, 10, 20]
        );
        let s = Schedule {
            early: vec![Duration::from_secs(1), Duration::from_secs(15)],
            cadence: Duration::from_secs(10),
        };
        assert_eq!(
            (0..5).map(|i| s.offset(i).as_secs()).collect::<Vec<_>>(),
            vec![0, 1, 15, 20, 30]
        );
    }
}
