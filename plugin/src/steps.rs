//! Per-process state of the plugin inside one slurmstepd: where the job is, the sampler, the step file.

use crate::args::Args;
use jobscope_common::fsutil::{ensure_dir, free_bytes, write_atomic};
use jobscope_common::now_unix_ms;
use jobscope_config::Config;
use jobscope_model::spool::{
    job_dir, Event, EventKind, Handover, Header, StepsNotRecorded, FORMAT_VERSION,
    GPU_FILE_BUDGET_BYTES, MORE_NOT_LISTED, STEPS_NOT_RECORDED_FILE, STEPS_NOT_RECORDED_MAX_BYTES,
    STEP_FILES_BUDGET_BYTES,
};
use jobscope_sampler::cgroup::JobCgroup;
use jobscope_sampler::gpu::assign::select_for_job;
use jobscope_sampler::gpu::monitor::cgroup_pid_source;
use jobscope_sampler::gpu::{BackendConfig, GpuMonitor, JobGpuEnv, LogLevel as GpuLogLevel};
use jobscope_sampler::sampler::{Sampler, Schedule};
use jobscope_sampler::scope::Scope;
use jobscope_sampler::spool::writer::{Limits, SeriesWriter, StepWriter};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const PLUGIN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the plugin knows about the job in this slurmstepd.
#[derive(Debug, Clone)]
pub struct JobCtx {
    pub job_id: u32,
    pub step: String,
    pub uid: u32,
    pub gid: u32,
    /// Where the job's cgroup is, its allocation, the node name (`crate::scope::slurm_scope`).
    pub scope: Scope,
    pub cfg: Config,
    pub args: Args,
}

impl JobCtx {
    pub fn spool_dir(&self) -> PathBuf {
        self.args
            .spool_dir
            .clone()
            .unwrap_or_else(|| self.cfg.paths.spool_dir.clone())
    }
    pub fn handover_dir(&self) -> PathBuf {
        self.args
            .handover_dir
            .clone()
            .unwrap_or_else(|| self.cfg.paths.handover_dir.clone())
    }
    /// Where the kernel collector (`jobscope-kernel`) pins its maps.
    pub fn kernel_pin_dir(&self) -> PathBuf {
        PathBuf::from(jobscope_model::kernel_abi::PIN_DIR)
    }
    /// The job's key in the collector's maps: its SLURM job id.
    pub fn kernel_key(&self) -> u64 {
        u64::from(self.job_id)
    }
    pub fn proc_root(&self) -> PathBuf {
        self.args
            .proc_root
            .clone()
            .unwrap_or_else(|| PathBuf::from("/proc"))
    }

    fn header(&self, series: &str, handover: Option<Handover>) -> Header {
        let mut h = Header {
            format_version: FORMAT_VERSION,
            job_id: self.job_id,
            node: String::new(),
            series: series.to_string(),
            uid: self.uid,
            gid: self.gid,
            cgroup_version: None,
            cgroup_path: None,
            io_source: None,
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|s| s.trim().to_string()),
            boot_time_s: boot_time_s(),
            start_unix_ms: now_unix_ms(),
            cadence_s: self.args.cadence_s.unwrap_or(self.cfg.sampler.cadence_s),
            plugin_version: PLUGIN_VERSION.into(),
            alloc_cores: None,
            alloc_mem_bytes: None,
            handover,
        };
        self.scope.describe(&mut h);
        h
    }

    pub fn node(&self) -> &str {
        &self.scope.node
    }

    pub fn cgroup(&self) -> Option<&JobCgroup> {
        self.scope.cgroup.as_ref()
    }

    /// Creates (or checks) the root-only spool directories of this job on this node.
    fn ensure_job_dir(&self) -> Result<PathBuf, String> {
        let spool = self.spool_dir();
        ensure_dir(&spool, 0o700, 0, 0).map_err(|e| e.to_string())?;
        let dir = job_dir(&spool, self.job_id, self.node());
        if let Some(free) = free_bytes(&spool) {
            if free < self.cfg.sampler.min_free_bytes {
                let why = format!(
                    "{}: only {free} bytes free, under sampler.min_free_bytes ({}); not spooling",
                    spool.display(),
                    self.cfg.sampler.min_free_bytes
                );
                // One small line, so the report can say why it has no data (the floor leaves
                // room; this is a few hundred bytes). Best effort: the job goes on either way.
                if ensure_dir(&dir, 0o700, 0, 0).is_ok() {
                    let _ = write_atomic(
                        &dir,
                        jobscope_common::spool::NOT_SPOOLED_FILE,
                        format!("{why}\n").as_bytes(),
                        0o600,
                        None,
                    );
                }
                return Err(why);
            }
        }
        ensure_dir(&dir, 0o700, 0, 0).map_err(|e| e.to_string())?;
        Ok(dir)
    }

    /// A `job.jsc` already there belongs to an earlier job with the same id (SLURM's job ids restart
    /// after a state reset) whose spool was never collected, e.g. a node crash. Move that directory
    /// aside (`.stale.<job>.<node>.<ms>`, kept for `jobscope reap`) rather than fail or mix the two.
    fn move_stale_series(&self, dir: PathBuf) -> Result<PathBuf, String> {
        if std::fs::symlink_metadata(dir.join("job.jsc")).is_err() {
            return Ok(dir);
        }
        let aside = self.spool_dir().join(format!(
            ".stale.{}.{}.{}",
            self.job_id,
            self.node(),
            now_unix_ms()
        ));
        std::fs::rename(&dir, &aside)
            .map_err(|e| format!("{}: cannot move stale spool aside: {e}", dir.display()))?;
        crate::log_error(&format!(
            "moved a stale spool of an earlier job {} to {}",
            self.job_id,
            aside.display()
        ));
        self.ensure_job_dir()
    }

    /// Builds the sampler for this job (the writer is optional: without a spool it still runs, and
    /// the failure is logged once).
    pub fn sampler(&self, handover: Option<Handover>) -> Result<(Sampler, Schedule), String> {
        let cg = self
            .cgroup()
            .cloned()
            .ok_or("this step is in no job cgroup; nothing to sample")?;
        let series_budget = self
            .cfg
            .sampler
            .max_spool_bytes
            .saturating_sub(STEP_FILES_BUDGET_BYTES + GPU_FILE_BUDGET_BYTES)
            .max(16 * 1024);
        let writer = match self
            .ensure_job_dir()
            .and_then(|d| self.move_stale_series(d))
        {
            Ok(dir) => match SeriesWriter::create(
                &dir,
                "job.jsc",
                self.header("job", handover),
                Limits {
                    max_bytes: series_budget,
                    max_buckets: 4096,
                },
            ) {
                Ok(w) => Some(w),
                Err(e) => {
                    crate::log_error(&format!("cannot create spool series: {e}"));
                    None
                }
            },
            Err(e) => {
                crate::log_error(&format!("cannot use spool directory: {e}"));
                None
            }
        };
        let sampler = Sampler::new(
            cg,
            self.proc_root(),
            writer,
            Box::new(|m: &str| crate::log_error(m)),
        );
        #[cfg(feature = "fault-injection")]
        let sampler = sampler.with_faults(jobscope_sampler::sampler::Faults {
            panic_after_samples: self.args.injects("sampler_panic").then_some(1),
        });
        let mut sampler = sampler;
        sampler.start_kernel_view(&self.kernel_pin_dir(), Path::new("/sys"), self.kernel_key());
        let schedule = Schedule {
            early: self
                .cfg
                .sampler
                .early_samples_s
                .iter()
                .map(|s| Duration::from_secs(*s as u64))
                .collect(),
            cadence: Duration::from_secs(
                self.args.cadence_s.unwrap_or(self.cfg.sampler.cadence_s) as u64
            ),
        };
        Ok((sampler, schedule))
    }
}

impl JobCtx {
    /// The live snapshot of this node for the job's owner, written after a sample when its
    /// [`Pace`](jobscope_sampler::snapshot::Pace) allows (`sampler/src/snapshot.rs`). Whatever goes wrong
    /// is logged once and never stops sampling.
    pub fn live_snapshot(&self) -> jobscope_sampler::sampler::AfterSample {
        let dir = job_dir(&self.spool_dir(), self.job_id, self.node());
        let live_dir = self.cfg.paths.live_dir.clone();
        let (job_id, node, uid, gid) = (self.job_id, self.node().to_string(), self.uid, self.gid);
        let gpu = jobscope_config::gpu_params(&self.cfg);
        let mut logged = false;
        let mut pace = jobscope_sampler::snapshot::Pace::default();
        Box::new(move || {
            let started = jobscope_common::now_unix_ms();
            if !pace.due(started) {
                return;
            }
            let clock = std::time::Instant::now();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let snap = jobscope_common::live::from_spool(&dir, job_id, &node, uid, &gpu);
                jobscope_common::live::write(&live_dir, &snap, gid)
            }));
            pace.done(started, clock.elapsed().as_millis() as u64);
            let problem = match r {
                Ok(Ok(_)) => return,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "panicked (caught)".to_string(),
            };
            if !logged {
                logged = true;
                crate::log_error(&format!(
                    "live snapshot not written (logged once, sampling continues): {problem}"
                ));
            }
        })
    }

    /// Removes this node's live snapshot (the job ended here).
    pub fn remove_live_snapshot(&self) {
        jobscope_common::live::remove(&self.cfg.paths.live_dir, self.job_id, self.node());
    }

    /// Starts the job's GPU monitor (its own thread and `gpu.jsc`, so a slow driver never stalls the
    /// cgroup sampler). `None` when GPU sampling is off or the job has no GPUs.
    pub fn gpu_monitor(
        &self,
        handover: Option<&Handover>,
        schedule: Schedule,
    ) -> Option<GpuMonitor> {
        let g = &self.cfg.gpu;
        if !g.enabled {
            return None;
        }
        let env = JobGpuEnv {
            slurm_job_gpus: handover.and_then(|h| h.gpus.clone()),
            cuda_visible_devices: handover.and_then(|h| h.cuda_visible_devices.clone()),
            gpu_device_ordinal: handover.and_then(|h| h.gpu_device_ordinal.clone()),
            rocr_visible_devices: handover.and_then(|h| h.rocr_visible_devices.clone()),
        };
        let cg = self.cgroup()?;
        let devices = jobscope_sampler::gpu::assign::v1_devices_dir(
            &self
                .args
                .cgroup_root
                .clone()
                .unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup")),
            &cg.memory_dir,
        );
        let selection = select_for_job(
            &env,
            Some(&g.gres_conf),
            self.node(),
            devices.as_deref(),
            g.constrained_devices,
        );
        if selection.wanted.is_empty() && selection.notes.is_empty() {
            return None;
        }
        let backend = BackendConfig::from_settings(g);
        let dir = self.ensure_job_dir().ok()?;
        // Levels as the monitor means them: a normal state (no NVIDIA driver on a node with
        // AMD GPUs) at debug only, a skipped sample or a driver error as information, a lost GPU
        // or NVML given up as an error (all at SLURM's info level or below: never in job output).
        let log: jobscope_sampler::gpu::monitor::GpuLogFn =
            Box::new(|level, m: &str| match level {
                GpuLogLevel::Debug => slurm_spank::spank_log(
                    slurm_spank::LogLevel::Debug,
                    &format!("jobscope: gpu: {m}"),
                ),
                GpuLogLevel::Info => crate::log_info(&format!("gpu: {m}")),
                GpuLogLevel::Error => crate::log_error(&format!("gpu: {m}")),
            });
        match GpuMonitor::start(
            selection,
            &backend,
            &dir,
            self.header("gpu", handover.cloned()),
            schedule,
            cgroup_pid_source(cg.memory_dir.clone()),
            log,
        ) {
            Ok(m) => Some(m),
            Err(e) => {
                crate::log_error(&format!("cannot start the GPU monitor: {e}"));
                None
            }
        }
    }
}

fn boot_time_s() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The step file of a batch or srun step: readings at start and at exit.
pub struct StepRecorder {
    writer: Option<StepWriter>,
    step_cg: Option<JobCgroup>,
    ctx: JobCtx,
    pub exit_status: Option<i32>,
    /// Tasks of this step on this node, and how many have exited.
    pub local_tasks: u32,
    pub tasks_exited: u32,
    tasks_done_recorded: bool,
    /// The batch step's script being hashed (`crate::script`); taken when recorded.
    pub script: Option<crate::script::ScriptHash>,
    /// The kernel collector's maps, when one runs: this step tags its tasks there, and its
    /// readings carry the job's kernel counters (the last step's exit has the final ones).
    kernel: Option<jobscope_common::bpf_maps::KernelMaps>,
}

impl StepRecorder {
    pub fn start(ctx: &JobCtx) -> StepRecorder {
        let step_cg = ctx.cgroup().map(|c| c.step(&format!("step_{}", ctx.step)));
        let mut rec = StepRecorder {
            writer: None,
            step_cg,
            ctx: ctx.clone(),
            exit_status: None,
            local_tasks: 1,
            tasks_exited: 0,
            tasks_done_recorded: false,
            script: None,
            kernel: jobscope_common::bpf_maps::KernelMaps::open(
                &ctx.kernel_pin_dir(),
                Path::new("/sys"),
            )
            .ok(),
        };
        if let Some(k) = &rec.kernel {
            // Registered here too: a step may fork its tasks before the sampler of the extern
            // step has started.
            if let Err(e) = k.register(ctx.kernel_key()) {
                crate::log_info(&format!("kernel view: cannot register the job: {e}"));
            }
        }
        match ctx.ensure_job_dir() {
            Ok(dir) => {
                // Step files share a fixed part of the 1 MiB budget; past it, steps are not recorded
                // (the batch step, always first, is; it holds the job's final counters).
                if step_files_bytes(&dir) > step_files_cap() {
                    crate::log_info(&format!(
                        "spool of job {} is at its cap; step {} is not recorded",
                        ctx.job_id, ctx.step
                    ));
                    // Its name is listed, so the report can say which steps its table lacks.
                    if let Err(e) = list_step_not_recorded(&dir, &ctx.step) {
                        crate::log_error(&format!(
                            "cannot list step {} as not recorded: {e}",
                            ctx.step
                        ));
                    }
                } else {
                    match StepWriter::create(&dir, &ctx.header(&ctx.step, None)) {
                        Ok(w) => rec.writer = Some(w),
                        Err(e) => crate::log_error(&format!("cannot create step file: {e}")),
                    }
                }
            }
            Err(e) => crate::log_error(&format!("cannot use spool directory: {e}")),
        }
        rec.record(EventKind::StepStart);
        rec
    }

    fn record(&mut self, kind: EventKind) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        let proc_root = self.ctx.proc_root();
        let job = self
            .ctx
            .cgroup()
            .map(|c| c.read(&proc_root))
            .filter(|s| !s.gone)
            .map(|s| s.reading);
        let mut step_reading = self
            .step_cg
            .as_ref()
            .map(|c| c.read(&proc_root))
            .filter(|s| !s.gone)
            .map(|s| s.reading);
        if kind != EventKind::StepTasksDone {
            if let Err(e) = with_reaped_io(&mut step_reading, &proc_root) {
                // No I/O accounting in this kernel, or an odd /proc: the sampler's figure stands.
                crate::log_info(&format!("reaped I/O not read: {e}"));
            }
        }
        // The job's kernel counters (not the step's: the collector counts per job) ride on the
        // step reading, which exists at exit when the cgroups are gone; the Epilog takes the
        // largest of each (`model/src/summary/node.rs`, `kernel_totals`).
        if let Some(k) = self.kernel.as_mut() {
            let mut r = step_reading.take().unwrap_or_default();
            jobscope_sampler::kernel_view::fill(k, self.ctx.kernel_key(), &mut r);
            // no reading made up where there was none and the collector added nothing
            step_reading = (r != Default::default()).then_some(r);
        }
        let e = Event {
            t_ms: now_unix_ms(),
            kind,
            step: Some(self.ctx.step.clone()),
            job,
            step_reading,
            exit_status: self.exit_status,
            message: None,
        };
        if let Err(e) = w.event(&e) {
            crate::log_error(&format!("step record failed: {e}"));
        }
    }

    /// Called from `task_exit`. When the step's last local task has exited, the step cgroup still
    /// exists (slurmstepd removes it before `exit`), so this is where the step's own totals are read.
    pub fn task_exited(&mut self, status: i32) {
        if self.exit_status.is_none_or(|s| s == 0) {
            self.exit_status = Some(status);
        }
        self.tasks_exited += 1;
        if self.tasks_exited >= self.local_tasks && !self.tasks_done_recorded {
            self.tasks_done_recorded = true;
            self.record(EventKind::StepTasksDone);
        }
    }

    /// Tags task `pid` (forked, not yet released by slurmstepd) as the job's in the kernel
    /// collector's maps: it and everything it starts count for the job.
    pub fn tag_task(&mut self, pid: libc::pid_t) {
        if let Some(k) = &self.kernel {
            if let Err(e) = k.tag(pid, self.ctx.kernel_key()) {
                crate::log_info(&format!("kernel view: cannot tag task {pid}: {e}"));
            }
        }
    }

    pub fn exit(&mut self) {
        self.record_script();
        self.record(EventKind::StepExit);
    }

    /// Writes the batch script's hash as an event ([`EventKind::BatchScript`]) if
    /// its thread has finished; never waits for it (a hash not ready by the step's exit is none).
    fn record_script(&mut self) {
        let (Some(w), Some(h)) = (self.writer.as_mut(), self.script.take()) else {
            return;
        };
        let Some(hex) = h.ready() else {
            crate::log_info("batch script not hashed by the step's exit; no script hash");
            return;
        };
        let e = Event {
            t_ms: now_unix_ms(),
            kind: EventKind::BatchScript,
            step: Some(self.ctx.step.clone()),
            job: None,
            step_reading: None,
            exit_status: None,
            message: Some(hex),
        };
        if let Err(e) = w.event(&e) {
            crate::log_error(&format!("script hash record failed: {e}"));
        }
    }
}

/// Adds this slurmstepd's reaped I/O to the step's reading (making one if the step cgroup is
/// gone, as it is at `exit`).
///
/// Why: on cgroup v1 the sampler sums `/proc/<pid>/io` of live processes, so what a process does
/// after the last sample and before it exits is lost once its parent is outside the job, and
/// the task leaders' parent is slurmstepd (issue 9 §2: 2000 short `cat`s at a job's end were
/// reported 28 % low). The kernel adds each reaped child's I/O to its reaper, and this process
/// reaped the step's tasks, which reaped theirs: the step's figure, exit minus start, counts them
/// all exactly. slurmstepd's own threads' I/O is left out (`reaped_io` subtracts the live
/// threads); what remains of its own is that of threads that already exited. Read at the first
/// `task_post_fork` (no task has run yet, so none has been reaped) and at `exit` (every task has
/// been reaped). How the Epilog combines it with the sampler's figure:
/// `model/src/summary/node.rs` (`reaped_step_io`).
fn with_reaped_io(
    reading: &mut Option<jobscope_model::sample::Reading>,
    proc_root: &Path,
) -> Result<(), jobscope_sampler::procio::Error> {
    let io = jobscope_sampler::procio::reaped_io(proc_root, std::process::id())?;
    let r = reading.get_or_insert_with(Default::default);
    r.reaped_read_bytes = Some(io.read_bytes);
    r.reaped_write_bytes = Some(io.write_bytes);
    r.reaped_read_ops = Some(io.syscr);
    r.reaped_write_ops = Some(io.syscw);
    Ok(())
}

/// The step files' share of the spool, less the list of the steps past it (and one step file's
/// worth of slack, as a step file grows after it is created).
fn step_files_cap() -> u64 {
    STEP_FILES_BUDGET_BYTES.saturating_sub(STEPS_NOT_RECORDED_MAX_BYTES + 4096)
}

/// Appends `step` to the job's [`STEPS_NOT_RECORDED_FILE`] (one short line, `O_APPEND`, so the
/// steps of one job, each in its own slurmstepd, do not overwrite each other), or, when the list is
/// full, the [`MORE_NOT_LISTED`] line; never past [`STEPS_NOT_RECORDED_MAX_BYTES`] and one such line.
fn list_step_not_recorded(dir: &Path, step: &str) -> Result<(), String> {
    use jobscope_common::fsutil::{open_regular, Access};
    use std::io::Write;
    let path = dir.join(STEPS_NOT_RECORDED_FILE);
    let line =
        StepsNotRecorded::line(step).ok_or_else(|| format!("{step:?} is not a step name"))?;
    let mut f = open_regular(&path, Access::AppendOrCreate(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let len = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    let more = format!("{MORE_NOT_LISTED}\n");
    let text = if len + (line.len() + more.len()) as u64 <= STEPS_NOT_RECORDED_MAX_BYTES {
        line
    } else if len <= STEPS_NOT_RECORDED_MAX_BYTES {
        // Full: say that more steps came. The few steps after this one still fitting under the
        // bound say it again (the reader counts it once); then the file stops growing.
        more
    } else {
        return Ok(());
    };
    f.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn step_files_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("step_"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19 §3: past the step files' budget every further step is listed, from many
    /// slurmstepds at once, none lost or torn, and the list stops at its bound saying more came.
    #[test]
    fn steps_past_the_budget_are_listed_and_the_list_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    for i in 0..50u32 {
                        list_step_not_recorded(&dir, &(t * 1000 + i).to_string()).unwrap();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let read = || {
            let b = std::fs::read(dir.join(STEPS_NOT_RECORDED_FILE)).unwrap();
            (b.len() as u64, StepsNotRecorded::parse(&b))
        };
        let (_, n) = read();
        assert_eq!(n.steps.len(), 400);
        assert!(!n.more);
        for t in 0..8u32 {
            for i in 0..50u32 {
                assert!(
                    n.steps.contains(&(t * 1000 + i).to_string()),
                    "{t}/{i} lost"
                );
            }
        }
        // Thousands of steps more: the file stops near its bound and says more came.
        for i in 0..5000u32 {
            list_step_not_recorded(&dir, &(100_000 + i).to_string()).unwrap();
        }
        let (len, n) = read();
        assert!(len <= STEPS_NOT_RECORDED_MAX_BYTES + 2, "{len} bytes");
        assert!(
            n.more && n.steps.len() > 2000 && n.steps.len() < 5400,
            "{}",
            n.steps.len()
        );
        // Not a step name: refused, nothing written.
        assert!(list_step_not_recorded(&dir, "../x").is_err());
        // A link planted in its place is not followed.
        let d2 = tempfile::tempdir().unwrap();
        let target = d2.path().join("target");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, d2.path().join(STEPS_NOT_RECORDED_FILE)).unwrap();
        assert!(list_step_not_recorded(d2.path(), "7").is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn reaped_io_is_added_to_the_steps_reading_or_makes_one() {
        // A fake /proc holding this process: 5 MiB read and 1 MiB written in all, of which the
        // live thread did 1 MiB of the reads itself.
        let root = std::env::temp_dir().join(format!("jobscope-reaped-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let me = root.join(std::process::id().to_string());
        let io = |r: u64, w: u64| {
            format!("rchar: 0\nwchar: 0\nsyscr: 7\nsyscw: 3\nread_bytes: {r}\nwrite_bytes: {w}\n")
        };
        std::fs::create_dir_all(me.join("task/1")).unwrap();
        std::fs::write(me.join("io"), io(5 << 20, 1 << 20)).unwrap();
        std::fs::write(me.join("task/1/io"), io(1 << 20, 0)).unwrap();
        // At `exit` the step cgroup is gone: a reading with the reaped figure only.
        let mut r = None;
        with_reaped_io(&mut r, &root).unwrap();
        let r = r.unwrap();
        assert_eq!(r.reaped_read_bytes, Some(4 << 20));
        assert_eq!(r.reaped_write_bytes, Some(1 << 20));
        assert_eq!((r.reaped_read_ops, r.reaped_write_ops), (Some(0), Some(0)));
        assert_eq!(r.cpu_usage_ns, None);
        // At `step_start` the step cgroup's reading keeps its own values.
        let mut r = Some(jobscope_model::sample::Reading {
            cpu_usage_ns: Some(42),
            ..Default::default()
        });
        with_reaped_io(&mut r, &root).unwrap();
        let r = r.unwrap();
        assert_eq!(r.cpu_usage_ns, Some(42));
        assert_eq!(r.reaped_read_bytes, Some(4 << 20));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
