//! The sampler: one thread per job per node (in the extern step's slurmstepd) that reads the job cgroup
//! on a schedule and appends to the spool.
//!
//! It lives here, not in the plugin, so it can be tested and benchmarked without SLURM; the plugin only
//! starts and stops it. Everything it does is bounded: one thread, a fixed-size in-memory series
//! (see [`crate::spool::writer::Limits`]), a capped spool file, and a stop that waits a bounded time.
//! Nothing it does can fail the job: errors are logged (once per kind) and sampling goes on.

use crate::cgroup::{JobCgroup, JobCgroupReader};
use crate::spool::writer::SeriesWriter;
use crate::spool::{Bucket, End, Gauge, GaugeId, N_GAUGES};
use jobscope_common::now_unix_ms;
use jobscope_model::sample::{busy_cores, rate_per_sec, Reading};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub type LogFn = Box<dyn Fn(&str) + Send>;

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

/// Test/fault-injection knobs (set from plugstack arguments in the real-cluster fault tests), only
/// in a build with the `fault-injection` feature ([`Sampler::with_faults`]): the packaged plugin
/// has no deliberate panic to trip.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Panic inside the sampler thread after this many samples.
    pub panic_after_samples: Option<u64>,
}

/// What the sampler reads: the job's cgroup (always under SLURM), or, for a `jobscope run` that
/// could get no cgroup, the launcher's process tree (`crate::proctree`).
pub enum Source {
    /// Keeps the job cgroup's descriptors open from one sample to the next.
    // Boxed: the cgroup reader is the larger by far, and a sampler holds one source for life.
    Cgroup(Box<JobCgroupReader>),
    ProcTree(crate::proctree::ProcTreeReader),
}

/// Called after each sample once its bucket is written (the live snapshot, `jobscope_common::live`).
/// The spool writer writes each frame straight to the file (no user-space buffer), so a reader
/// sees it without a sync; syncing stays on its own schedule (every 4th sample).
pub type AfterSample = Box<dyn FnMut() + Send>;

pub struct Sampler {
    reader: Source,
    /// When set, called after every sample.
    after_sample: Option<AfterSample>,
    pub writer: Option<SeriesWriter>,
    /// The previous sample: time, reading, and whether `prev_percpu_ns` holds its per-CPU times.
    prev: Option<(u64, Reading, bool)>,
    /// Reused for the previous sample's v1 per-CPU times (no allocation per sample).
    prev_percpu_ns: Vec<u64>,
    pub samples_taken: u64,
    pub samples_missed: u64,
    log: LogFn,
    logged_write_error: bool,
    logged_read_problem: bool,
    #[cfg(feature = "fault-injection")]
    faults: Faults,
    /// The kernel view of the job (`crate::kernel_view`), when a collector runs on this node.
    kernel: Option<crate::kernel_view::JobView>,
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
    ) -> Self {
        Self::with_source(
            Source::Cgroup(Box::new(JobCgroupReader::new(cgroup, proc_root))),
            writer,
            log,
        )
    }

    /// A sampler of any [`Source`].
    pub fn with_source(reader: Source, writer: Option<SeriesWriter>, log: LogFn) -> Self {
        Sampler {
            reader,
            after_sample: None,
            writer,
            prev: None,
            prev_percpu_ns: Vec::new(),
            samples_taken: 0,
            samples_missed: 0,
            log,
            logged_write_error: false,
            logged_read_problem: false,
            #[cfg(feature = "fault-injection")]
            faults: Faults::default(),
            kernel: None,
        }
    }

    /// The same sampler with `faults` injected (the fault-injection build only).
    #[cfg(feature = "fault-injection")]
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Counts the job's kernel view from the collector's maps pinned in `pin_dir` under
    /// `job_key` (`jobscope_model::kernel_abi`), registering the job there. Where there is none (no
    /// collector, its job table full), the spool says why (an event the report shows as a
    /// note) and sampling goes on without it.
    pub fn start_kernel_view(
        &mut self,
        pin_dir: &std::path::Path,
        sys_root: &std::path::Path,
        job_key: u64,
    ) {
        match crate::kernel_view::JobView::start(pin_dir, sys_root, job_key) {
            Ok((v, notes)) => {
                self.kernel = Some(v);
                for n in notes {
                    kernel_note(&mut self.writer, &n);
                }
            }
            Err(n) => kernel_note(&mut self.writer, &n),
        }
    }
}

/// Records what the kernel view could not give, as an event the report shows as a note.
fn kernel_note(writer: &mut Option<SeriesWriter>, n: &crate::kernel_view::ViewNote) {
    if let Some(w) = writer.as_mut() {
        let _ = w.event(crate::spool::Event {
            t_ms: now_unix_ms(),
            kind: crate::spool::EventKind::KernelView,
            step: None,
            job: None,
            step_reading: None,
            exit_status: None,
            message: Some(n.message()),
        });
    }
}

impl Sampler {
    /// The job's cgroup; `None` when following a process tree.
    pub fn cgroup(&self) -> Option<&JobCgroup> {
        match &self.reader {
            Source::Cgroup(r) => Some(r.cgroup()),
            Source::ProcTree(_) => None,
        }
    }

    /// Call `f` after every sample (see [`AfterSample`]).
    pub fn set_after_sample(&mut self, f: AfterSample) {
        self.after_sample = Some(f);
    }

    /// Reads the cgroup once and appends one bucket.
    pub fn sample_once(&mut self) -> Outcome {
        #[cfg(feature = "fault-injection")]
        if let Some(n) = self.faults.panic_after_samples {
            if self.samples_taken >= n {
                panic!("jobscope fault injection: sampler panic after {n} samples");
            }
        }
        let t_ms = now_unix_ms();
        let (mut snap, problem, percpu_ns) = match &mut self.reader {
            Source::Cgroup(r) => {
                let snap = r.sample();
                (
                    snap,
                    r.problems().first().map(|e| e.to_string()),
                    r.percpu_ns(),
                )
            }
            Source::ProcTree(t) => {
                let reading = t.sample();
                let problem = t.problems().first().map(|e| e.to_string());
                let snap = crate::cgroup::Snapshot {
                    reading,
                    ..Default::default()
                };
                (snap, problem, None)
            }
        };
        if snap.gone {
            return Outcome::Gone;
        }
        if let Some(n) = self.kernel.as_mut().and_then(|k| k.fill(&mut snap.reading)) {
            kernel_note(&mut self.writer, &n);
        }
        if let (false, Some(e)) = (self.logged_read_problem, problem) {
            (self.log)(&format!(
                "cgroup read problem (logged once, sampling continues): {e}"
            ));
            self.logged_read_problem = true;
        }
        let mut gauges = [None; N_GAUGES];
        if let Some((t0, r0, had_percpu)) = &self.prev {
            let dt = t_ms.saturating_sub(*t0);
            if let (true, Some(b)) = (*had_percpu, percpu_ns) {
                let a = &self.prev_percpu_ns;
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
        self.prev_percpu_ns.clear();
        if let Some(b) = percpu_ns {
            self.prev_percpu_ns.extend_from_slice(b);
        }
        let had_percpu = percpu_ns.is_some();
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
        self.prev = Some((t_ms, snap.reading, had_percpu));
        if let Some(f) = self.after_sample.as_mut() {
            f();
        }
        Outcome::Sampled
    }

    pub fn finish(&mut self, reason: &str) {
        // The job's end on this node: its entry in the collector's map goes (the steps read
        // their final figures at their exits, before this sampler's end).
        if let Some(k) = self.kernel.take() {
            k.finish();
        }
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
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    done: Arc<AtomicBool>,
}

impl SamplerHandle {
    /// Asks the thread to finish (it writes the end record) without waiting. Idempotent.
    pub fn signal_stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// True once the thread has finished (stopped, cgroup gone, or panicked).
    pub fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Signals the thread and waits until `deadline` at most. Returns whether it finished in
    /// time. A thread that does not finish in time is left detached: slurmstepd is never held up
    /// by jobscope.
    pub fn stop_by(mut self, deadline: Instant) -> bool {
        self.signal_stop();
        wait_until(&self.done, deadline) && join_finished(self.thread.take())
    }

    /// [`SamplerHandle::stop_by`] with a wait of `wait` from now.
    pub fn stop(self, wait: Duration) -> bool {
        self.stop_by(Instant::now() + wait)
    }
}

/// Polls `done` until it is set or `deadline` passes; true when it was set.
pub fn wait_until(done: &AtomicBool, deadline: Instant) -> bool {
    loop {
        if done.load(Ordering::Acquire) {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(
            deadline
                .saturating_duration_since(now)
                .min(Duration::from_millis(5)),
        );
    }
}

/// Joins a thread that has set its `done` flag (its last act, so the join is immediate).
/// True when it did not panic.
fn join_finished(thread: Option<JoinHandle<()>>) -> bool {
    thread.is_none_or(|t| t.join().is_ok())
}

/// Something with a thread that can be told to stop and then waited for: the sampler and the
/// GPU monitor. [`stop_all`] stops several against one deadline.
pub trait Stoppable {
    /// Tells the thread to stop; returns at once.
    fn signal_stop(&mut self, deadline: Instant);
    /// Waits for the thread until `deadline` at most; true when it finished in time.
    fn wait_stopped(self: Box<Self>, deadline: Instant) -> bool;
}

impl Stoppable for SamplerHandle {
    fn signal_stop(&mut self, _deadline: Instant) {
        SamplerHandle::signal_stop(self);
    }
    fn wait_stopped(self: Box<Self>, deadline: Instant) -> bool {
        self.stop_by(deadline)
    }
}

/// Signals every stoppable first, then waits for all of them against the one `deadline`, so
/// the total wait is bounded by `deadline` however many there are (not the sum of their bounds).
/// Returns, in order, whether each finished in time.
pub fn stop_all(mut all: Vec<Box<dyn Stoppable>>, deadline: Instant) -> Vec<bool> {
    for s in all.iter_mut() {
        s.signal_stop(deadline);
    }
    all.into_iter().map(|s| s.wait_stopped(deadline)).collect()
}

/// Starts the sampler thread. The body is wrapped in `catch_unwind`: a panic ends sampling (recorded as
/// an event in the spool, when possible) and nothing else.
pub fn spawn(
    mut sampler: Sampler,
    schedule: Schedule,
    log_panic: LogFn,
) -> std::io::Result<SamplerHandle> {
    let (tx, rx) = channel::<()>();
    let done = Arc::new(AtomicBool::new(false));
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
                let msg = panic_message(p.as_ref());
                log_panic(&format!(
                    "sampler thread panicked, sampling stopped for this job: {msg}"
                ));
            }
            done2.store(true, Ordering::Release);
        })?;
    Ok(SamplerHandle {
        stop: Some(tx),
        thread: Some(thread),
        done,
    })
}

/// The text a panic was raised with (`panic!("...")` gives a `&str` or a `String`), for the log
/// line that replaces the panic: a caught panic must still say what went wrong.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_is_the_text_the_panic_was_raised_with() {
        let caught = |f: fn()| panic_message(std::panic::catch_unwind(f).unwrap_err().as_ref());
        assert_eq!(caught(|| panic!("a literal")), "a literal");
        assert_eq!(caught(|| panic!("formatted {}", 42)), "formatted 42");
        assert_eq!(caught(|| std::panic::panic_any(7_u8)), "non-string panic");
    }

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

#[cfg(test)]
mod stop_tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    /// A thread that needs `notice` to finish once told to stop. With `peers`, it also waits,
    /// after its own signal, until every `Slow` sharing the counter was signalled (up to
    /// `PEERS_WAIT`), so it only finishes if `stop_all` signalled them all before waiting.
    /// Every deadline a `wait_stopped` is given is recorded in `deadlines`.
    struct Slow {
        tx: Option<Sender<()>>,
        done: Arc<AtomicBool>,
        signalled: Option<(Arc<AtomicUsize>, usize)>,
        deadlines: Arc<Mutex<Vec<Instant>>>,
    }

    /// Far longer than the tests take when `stop_all` behaves, and shorter than their deadlines.
    const PEERS_WAIT: Duration = Duration::from_secs(10);

    impl Slow {
        fn start_with(
            notice: Duration,
            peers: Option<(Arc<AtomicUsize>, usize)>,
            deadlines: Arc<Mutex<Vec<Instant>>>,
        ) -> Slow {
            let (tx, rx) = channel::<()>();
            let done = Arc::new(AtomicBool::new(false));
            let d = done.clone();
            let p = peers.clone();
            std::thread::spawn(move || {
                let _ = rx.recv();
                if let Some((count, all)) = p {
                    let give_up = Instant::now() + PEERS_WAIT;
                    while count.load(Ordering::Acquire) < all {
                        if Instant::now() >= give_up {
                            return; // never done: the others were not signalled with it
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                std::thread::sleep(notice);
                d.store(true, Ordering::Release);
            });
            Slow {
                tx: Some(tx),
                done,
                signalled: peers,
                deadlines,
            }
        }
    }

    impl Stoppable for Slow {
        fn signal_stop(&mut self, _deadline: Instant) {
            if let Some((count, _)) = &self.signalled {
                count.fetch_add(1, Ordering::AcqRel);
            }
            if let Some(tx) = self.tx.take() {
                let _ = tx.send(());
            }
        }
        fn wait_stopped(self: Box<Self>, deadline: Instant) -> bool {
            self.deadlines.lock().unwrap().push(deadline);
            wait_until(&self.done, deadline)
        }
    }

    /// Each thread finishes only once both were signalled: signalling one and waiting for it
    /// before signalling the next (one wait after the other) leaves the first undone at the
    /// deadline. No upper bound on the time taken: the outcome says it, not the clock.
    #[test]
    fn two_stoppables_signalled_together_finish_within_one_bound() {
        let notice = Duration::from_millis(300);
        let count = Arc::new(AtomicUsize::new(0));
        let peers = || Some((count.clone(), 2));
        let t0 = Instant::now();
        let all: Vec<Box<dyn Stoppable>> = vec![
            Box::new(Slow::start_with(notice, peers(), Arc::default())),
            Box::new(Slow::start_with(notice, peers(), Arc::default())),
        ];
        let done = stop_all(all, t0 + 2 * PEERS_WAIT);
        let took = t0.elapsed();
        assert_eq!(
            done,
            [true, true],
            "both signalled before either was waited for"
        );
        assert!(took >= notice, "{took:?}");
    }

    /// Hung threads are all waited for against the one deadline given, not one wait each: every
    /// `wait_stopped` gets that deadline, and `stop_all` returns with the hung ones undone, long
    /// before they would finish (600 s).
    #[test]
    fn stop_all_returns_at_the_deadline_when_one_hangs() {
        let deadlines: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let slow = |notice| Box::new(Slow::start_with(notice, None, deadlines.clone()));
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_millis(400);
        let all: Vec<Box<dyn Stoppable>> = vec![
            slow(Duration::from_secs(600)),
            slow(Duration::from_millis(10)),
            slow(Duration::from_secs(600)),
        ];
        let done = stop_all(all, deadline);
        let took = t0.elapsed();
        assert_eq!(done, [false, true, false]);
        assert_eq!(
            *deadlines.lock().unwrap(),
            [deadline; 3],
            "one bound for all, not one per hung thread"
        );
        assert!(took >= Duration::from_millis(400), "{took:?}");
        assert!(
            took < Duration::from_secs(300),
            "returned at the deadline, not when the hung threads end: {took:?}"
        );
    }
}
