//! `jobscope run [--cores N] [--mem SIZE] [--gpus LIST] -- CMD ARGS...`: the same report without
//! SLURM.
//!
//! The run supplies what SLURM supplies to the plugin, a [`Scope`] (its own cgroup, from
//! [`place`], and the allocation from the options or the machine), and from there everything is
//! the plugin's path: the same sampler ([`jobscope_sampler::sampler`]), GPU monitor, spool writers,
//! then the one pipeline ([`jobscope_report::pipeline`]) and the presenter, so the report is the one
//! `jobscope show` prints. The command's end is recorded as a `batch` step (start and exit
//! readings, exit status), which is what gives a SLURM job its final counters.
pub mod child;
pub mod place;

use anyhow::{bail, Context, Result};
use jobscope_archive as archive;
use jobscope_common::now_unix_ms;
use jobscope_config::Config;
use jobscope_model::job::JobFacts;
use jobscope_model::sample::Reading;
use jobscope_model::spool::{
    Event, EventKind, Header, GPU_FILE_BUDGET_BYTES, STEP_FILES_BUDGET_BYTES,
};
use jobscope_model::summary::JobSummary;
use jobscope_report::pipeline::{self, NodeEnd};
use jobscope_report::GENERATOR;
use jobscope_sampler::gpu::assign::{device_ref_from_path, GpuRef, GpuSelection};
use jobscope_sampler::gpu::monitor::{cgroup_pid_source, BackendConfig, GpuMonitor, LogLevel};
use jobscope_sampler::proctree::{ProcTreeReader, Reaped};
use jobscope_sampler::sampler::{self, Sampler, Schedule, Source, Stoppable};
use jobscope_sampler::scope::{short_hostname, Scope};
use jobscope_sampler::spool::writer::{Limits, SeriesWriter, StepWriter};
use place::Placement;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What `jobscope run` was asked.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Cores to measure the run against (default: the cores this process may run on).
    pub cores: Option<u32>,
    /// Memory to measure the run against (default: the machine's).
    pub mem_bytes: Option<u64>,
    /// GPUs, by identity: `all`, UUIDs, PCI bus ids or `/dev/nvidia<N>` (default: all the
    /// NVIDIA GPUs of the machine, if it has any).
    pub gpus: Option<String>,
    /// Seconds between samples after the early ones (default: the configuration's).
    pub cadence_s: Option<u32>,
    /// The job name (default: the command's file name).
    pub name: Option<String>,
    pub archive: bool,
    pub mail: bool,
    pub cmd: Vec<OsString>,
}

/// What a run produced.
#[derive(Debug)]
pub struct RunOutcome {
    pub summary: JobSummary,
    /// The launcher's exit status (the command's; 128 + signal when a signal ended it).
    pub exit_status: i32,
    /// Where the run was archived (`--archive`).
    pub archived: Option<PathBuf>,
    /// What went wrong on the way that the report does not show (for stderr).
    pub problems: Vec<String>,
}

/// Parses `--mem` values: `512M`, `4G`, `1.5GiB`, `1000000` (bytes); K/M/G/T are powers of 1024
/// (SLURM's `--mem` convention).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let mult: u64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return None,
    };
    let v = n * mult as f64;
    (v >= 1.0 && v < u64::MAX as f64).then_some(v as u64)
}

/// `--gpus`: identities only (an ordinal is no identity: see `sampler/src/gpu/assign.rs`).
pub fn parse_gpus(s: &str) -> std::result::Result<Vec<GpuRef>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let r = if item == "all" {
            GpuRef::AllAccessible
        } else if item.starts_with("GPU-") || item.starts_with("MIG-") {
            GpuRef::Uuid(item.to_string())
        } else if item.starts_with('/') {
            device_ref_from_path(Path::new(item))
                .ok_or_else(|| format!("--gpus {item}: not a GPU device path"))?
        } else if item.contains(':') {
            GpuRef::PciBusId(item.to_string())
        } else {
            return Err(format!(
                "--gpus {item:?}: give GPUs by identity (all, a UUID GPU-…/MIG-…, a PCI bus id, \
                 or /dev/nvidia<N>): an index is not the same GPU in every program"
            ));
        };
        out.push(r);
    }
    if out.is_empty() {
        return Err("--gpus: empty list".into());
    }
    Ok(out)
}

/// The cores this process may run on.
fn machine_cores() -> Option<u32> {
    std::thread::available_parallelism()
        .ok()
        .map(|n| n.get() as u32)
}

/// `MemTotal` of /proc/meminfo.
fn machine_mem_bytes() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = t
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

fn machine_has_nvidia() -> bool {
    std::fs::read_dir("/dev").is_ok_and(|rd| {
        rd.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("nvidia"))
                .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
        })
    })
}

/// The next id of an archived run: a counter in the state directory (root's), under a lock,
/// from `run.first_job_id` up.
fn next_archived_id(cfg: &Config) -> Result<u32> {
    use jobscope_common::fsutil::{open_regular, Access};
    use std::io::{Read, Seek, Write};
    let dir = &cfg.paths.state_dir;
    jobscope_common::fsutil::ensure_dir(dir, 0o700, 0, 0)?;
    let path = dir.join("local-run-id");
    let mut f = open_regular(&path, Access::ReadWriteOrCreate(0o600))
        .with_context(|| path.display().to_string())?;
    // SAFETY: flock on a descriptor we own; released when `f` closes.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX) } != 0 {
        bail!("{}: cannot lock", path.display());
    }
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let first = cfg.run.first_job_id;
    let id = match text.trim().parse::<u32>() {
        Ok(last) if last >= first => last
            .checked_add(1)
            .context("local run ids are used up (run.first_job_id)")?,
        _ => first,
    };
    f.rewind()?;
    f.set_len(0)?;
    f.write_all(format!("{id}\n").as_bytes())?;
    f.sync_all()?;
    Ok(id)
}

/// A private spool directory for the run (mode 0700, made new: nothing there can be planted).
fn private_dir(job_id: u32) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    for n in 0..100u32 {
        let d = base.join(format!("jobscope-run-{job_id}-{}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| d.display().to_string()),
        }
    }
    bail!("cannot make a private directory in {}", base.display())
}

/// One reading of the run's processes (job and step readings of the `batch` step events).
fn read_now(placement: &Placement, proc_root: &Path) -> (Option<Reading>, Option<Reading>) {
    let job = match placement.cgroup() {
        Some(cg) => Some(cg.read(proc_root).reading),
        None => {
            let root = std::process::id();
            let pr = proc_root.to_path_buf();
            let mut t =
                ProcTreeReader::new(root, pr.clone(), Box::new(move || Reaped::of_self(&pr)));
            Some(t.sample())
        }
    };
    // What this process reaped: every descendant that ended, exactly (as slurmstepd's, see
    // `plugin/src/steps.rs` `with_reaped_io`).
    let step = jobscope_sampler::procio::reaped_io(proc_root, std::process::id())
        .ok()
        .map(|io| Reading {
            cpu_usage_ns: job.as_ref().and_then(|j| j.cpu_usage_ns),
            mem_peak_bytes: job.as_ref().and_then(|j| j.mem_peak_bytes),
            reaped_read_bytes: Some(io.read_bytes),
            reaped_write_bytes: Some(io.write_bytes),
            reaped_read_ops: Some(io.syscr),
            reaped_write_ops: Some(io.syscw),
            ..Default::default()
        });
    (job, step)
}

fn boot_time_s() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Runs the command and makes its report. Blocks SIGINT/SIGTERM/SIGHUP in the calling thread
/// (they are passed on to the command): call it from the main thread before starting others.
pub fn run(cfg: &Config, o: &RunOptions, log: &mut dyn FnMut(&str)) -> Result<RunOutcome> {
    if o.cmd.is_empty() {
        bail!("no command: jobscope run [options] -- CMD ARGS...");
    }
    // SAFETY: these cannot fail.
    let (euid, uid, gid) = unsafe { (libc::geteuid(), libc::getuid(), libc::getgid()) };
    if (o.archive || o.mail) && euid != 0 {
        bail!("--archive and --mail need root: the archive and the mail queue are root's");
    }
    let proc_root = PathBuf::from("/proc");
    let job_id = if o.archive {
        next_archived_id(cfg)?
    } else {
        cfg.run.first_job_id.saturating_add(std::process::id())
    };
    let node = short_hostname();
    let spool = private_dir(job_id)?;
    let result = run_in(
        cfg,
        o,
        job_id,
        &node,
        &spool,
        (euid, uid, gid),
        &proc_root,
        log,
    );
    let _ = std::fs::remove_dir_all(&spool);
    result
}

/// The name of the step a local run records: the command is what a batch script is to a job.
const RUN_STEP: &str = "batch";

#[allow(clippy::too_many_arguments)]
fn run_in(
    cfg: &Config,
    o: &RunOptions,
    job_id: u32,
    node: &str,
    spool: &Path,
    (euid, uid, gid): (u32, u32, u32),
    proc_root: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<RunOutcome> {
    let mut notes: Vec<String> = Vec::new();
    let mut problems: Vec<String> = Vec::new();

    let (placement, join) = place_run(job_id, euid);
    if let Placement::ProcTree { why } = &placement {
        notes.push(why.clone());
    }
    let cores = o.cores.or_else(machine_cores);
    let mem = o.mem_bytes.or_else(machine_mem_bytes);
    notes.extend(whole_machine_note(o, cores, mem));
    let gpu_refs = match &o.gpus {
        Some(g) => parse_gpus(g).map_err(anyhow::Error::msg)?,
        None if machine_has_nvidia() => vec![GpuRef::AllAccessible],
        None => vec![],
    };
    let scope = Scope {
        cgroup: placement.cgroup().cloned(),
        alloc_cores: cores,
        alloc_mem_bytes: mem,
        node: node.to_string(),
    };
    let cadence_s = o.cadence_s.unwrap_or(cfg.sampler.cadence_s).max(1);
    let start_ms = now_unix_ms();
    let header = |series: &str| {
        let mut h = Header {
            uid,
            gid,
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|s| s.trim().to_string()),
            boot_time_s: boot_time_s(),
            cadence_s,
            plugin_version: GENERATOR.to_string(),
            ..Header::new(job_id, node, series, start_ms)
        };
        scope.describe(&mut h);
        h
    };
    let schedule = run_schedule(&cfg.sampler.early_samples_s, cadence_s);

    child::become_subreaper();
    child::block_forwarded();
    let mut steps = StepWriter::create(spool, &header(RUN_STEP))?;
    let (j0, s0) = read_now(&placement, proc_root);
    steps.event(&step_event(
        EventKind::StepStart,
        now_unix_ms(),
        (j0, s0),
        None,
    ))?;
    let pid = launch(&o.cmd, &join, &placement)?;
    let forwarder = child::Forwarder::start(pid)?;
    let sampler = start_sampler(cfg, spool, header("job"), &placement, proc_root, &schedule)?;
    let gpu = (!gpu_refs.is_empty() && cfg.gpu.enabled)
        .then(|| {
            start_gpu(
                cfg,
                &gpu_refs,
                spool,
                header("gpu"),
                &schedule,
                &placement,
                proc_root,
            )
        })
        .and_then(|started| started.map_err(|e| problems.push(e)).ok());

    // The command runs.
    let status = child::wait(pid);
    let end_ms = now_unix_ms();
    let _orphans_reaped = child::reap_orphans();
    let end_readings = read_now(&placement, proc_root);
    let left = processes_left(&placement, proc_root);
    forwarder.stop();
    let status = status.context("waiting for the command")?;
    steps.event(&step_event(
        EventKind::StepExit,
        end_ms,
        end_readings,
        Some(status.0),
    ))?;
    if left > 0 {
        notes.push(format!(
            "{left} process(es) the command started were still running when it ended: left \
             running, not counted after its end"
        ));
    }
    problems.extend(stop_threads(sampler, gpu));
    problems.extend(placement.remove());

    // The report: the one pipeline.
    let spooled = pipeline::read_node_dir(spool);
    let mut out = pipeline::node(
        &spooled,
        node,
        job_id,
        NodeEnd::At(now_unix_ms()),
        Some(uid),
        cfg,
    );
    for p in &out.problems {
        log(p);
    }
    out.summary.quality.notes.extend(notes);
    let facts = run_facts(
        cfg,
        o,
        (job_id, node),
        (uid, gid),
        (cores, mem),
        (start_ms, end_ms),
        status,
    );
    let decide = jobscope_report::slurm::decide_end;
    let mut summary = pipeline::job(
        &facts,
        vec![out.summary],
        &[node.to_string()],
        cfg,
        GENERATOR,
        &decide,
    );
    if o.mail {
        summary.user_options.insert("mail".into(), "always".into());
    }
    let archived = deliver(cfg, o, &summary, &facts, &mut problems)?;
    Ok(RunOutcome {
        summary,
        exit_status: status.shell_code(),
        archived,
        problems,
    })
}

/// Where the run is measured: its own cgroup when one can be made, else its process tree (and
/// the placement says why). Returns the cgroup directories the command is to join.
fn place_run(job_id: u32, euid: u32) -> (Placement, Vec<PathBuf>) {
    let proc_self = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let placement = place::plan(
        &proc_self,
        Path::new("/sys/fs/cgroup"),
        &format!("{job_id}-{}", std::process::id()),
        euid,
        &place::RealFs,
    );
    match placement.make() {
        Ok(join) => (placement, join),
        Err(e) => (
            Placement::ProcTree {
                why: format!(
                    "its cgroup could not be made ({e}): followed through its process tree in \
                     /proc, so memory is resident sets only (no page cache)"
                ),
            },
            vec![],
        ),
    }
}

/// The note that says what the run was measured against when the options did not say (`cores`
/// and `mem` are what it is measured against); `None` when both were given.
fn whole_machine_note(o: &RunOptions, cores: Option<u32>, mem: Option<u64>) -> Option<String> {
    let mut against = Vec::new();
    if o.cores.is_none() {
        against.push(format!(
            "{} cores",
            cores.map_or("?".into(), |c| c.to_string())
        ));
    }
    if o.mem_bytes.is_none() {
        against.push(format!(
            "{} memory",
            jobscope_report::present::fmt_bytes(mem)
        ));
    }
    (!against.is_empty()).then(|| {
        format!(
            "measured against the whole machine ({}): give --cores/--mem for what the run asked for",
            against.join(", ")
        )
    })
}

/// The sampling schedule: the configured early samples that come before the first regular one,
/// then every `cadence_s`.
fn run_schedule(early_samples_s: &[u32], cadence_s: u32) -> Schedule {
    Schedule {
        early: early_samples_s
            .iter()
            .filter(|&&s| s < cadence_s)
            .map(|&s| Duration::from_secs(s as u64))
            .collect(),
        cadence: Duration::from_secs(cadence_s as u64),
    }
}

/// A start or exit event of the run's step, with its (job, step) readings.
fn step_event(
    kind: EventKind,
    t_ms: u64,
    (job, step_reading): (Option<Reading>, Option<Reading>),
    exit_status: Option<i32>,
) -> Event {
    Event {
        t_ms,
        kind,
        step: Some(RUN_STEP.into()),
        job,
        step_reading,
        exit_status,
        message: None,
    }
}

/// Starts the command in the cgroup directories `join`.
///
/// The kernel view (docs/kernel.md), where a collector runs and this is root: this process tags
/// itself for the run's key just around the fork, so the command inherits the tag from its first
/// instruction and this process's own threads (the sampler) are not counted. When the command
/// cannot start, the key is forgotten and the placement removed.
fn launch(cmd: &[OsString], join: &[PathBuf], placement: &Placement) -> Result<u32> {
    let kernel_key = run_kernel_key();
    let kernel_maps = jobscope_common::bpf_maps::KernelMaps::open(
        Path::new(jobscope_model::kernel_abi::PIN_DIR),
        Path::new("/sys"),
    )
    .ok()
    .filter(|m| {
        matches!(
            m.register(kernel_key),
            Ok(jobscope_common::bpf_maps::Registered::Created)
        )
    });
    let me = std::process::id() as libc::pid_t;
    let tagged = kernel_maps
        .as_ref()
        .is_some_and(|m| m.tag(me, kernel_key).is_ok());
    let spawned = child::spawn(cmd, join);
    if let (true, Some(m)) = (tagged, kernel_maps.as_ref()) {
        let _ = m.untag(me);
    }
    match spawned {
        Ok(p) => Ok(p),
        Err(e) => {
            if let Some(m) = &kernel_maps {
                let _ = m.forget(kernel_key);
            }
            placement.remove();
            bail!("cannot run {:?}: {e}", cmd[0]);
        }
    }
}

/// The run's key in the kernel view.
fn run_kernel_key() -> u64 {
    jobscope_model::kernel_abi::KEY_RUN | u64::from(std::process::id())
}

/// Starts the sampler as the plugin starts it, writing `job.jsc` in `spool` within the budget the
/// step and GPU files leave.
fn start_sampler(
    cfg: &Config,
    spool: &Path,
    header: Header,
    placement: &Placement,
    proc_root: &Path,
    schedule: &Schedule,
) -> Result<sampler::SamplerHandle> {
    let series_budget = cfg
        .sampler
        .max_spool_bytes
        .saturating_sub(STEP_FILES_BUDGET_BYTES + GPU_FILE_BUDGET_BYTES)
        .max(16 * 1024);
    let writer = SeriesWriter::create(
        spool,
        "job.jsc",
        header,
        Limits {
            max_bytes: series_budget,
            max_buckets: 4096,
        },
    )?;
    let source = match placement.cgroup() {
        Some(cg) => Source::Cgroup(Box::new(cg.reader(proc_root))),
        None => {
            let pr = proc_root.to_path_buf();
            Source::ProcTree(ProcTreeReader::new(
                std::process::id(),
                pr.clone(),
                Box::new(move || Reaped::of_self(&pr)),
            ))
        }
    };
    let sampler_log: sampler::LogFn = Box::new(|m: &str| eprintln!("jobscope: {m}"));
    let mut s = Sampler::with_source(source, Some(writer), sampler_log);
    // Registered by `launch` (or not: then the note says why); the sampler removes the entry at
    // its end.
    s.start_kernel_view(
        Path::new(jobscope_model::kernel_abi::PIN_DIR),
        Path::new("/sys"),
        run_kernel_key(),
    );
    Ok(sampler::spawn(
        s,
        schedule.clone(),
        Box::new(|m: &str| eprintln!("jobscope: {m}")),
    )?)
}

/// Starts the GPU monitor as the plugin starts it; the error is the problem to report.
fn start_gpu(
    cfg: &Config,
    gpu_refs: &[GpuRef],
    spool: &Path,
    header: Header,
    schedule: &Schedule,
    placement: &Placement,
    proc_root: &Path,
) -> std::result::Result<GpuMonitor, String> {
    let backend = BackendConfig::from_settings(&cfg.gpu);
    let pids: jobscope_sampler::gpu::monitor::PidSource = match placement.cgroup() {
        Some(cg) => cgroup_pid_source(cg.memory_dir.clone()),
        None => {
            let pr = proc_root.to_path_buf();
            let mut t = ProcTreeReader::new(std::process::id(), pr, Box::new(Reaped::default));
            Box::new(move || t.list().into_iter().map(|(p, _)| p).collect())
        }
    };
    let glog: jobscope_sampler::gpu::monitor::GpuLogFn = Box::new(|level, m: &str| {
        if level != LogLevel::Debug {
            eprintln!("jobscope: gpu: {m}");
        }
    });
    GpuMonitor::start(
        GpuSelection::of(gpu_refs.to_vec()),
        &backend,
        spool,
        header,
        schedule.clone(),
        pids,
        glog,
    )
    .map_err(|e| format!("cannot start the GPU monitor: {e}"))
}

/// How many processes the command started are still running.
fn processes_left(placement: &Placement, proc_root: &Path) -> usize {
    match placement.cgroup() {
        Some(cg) => cg.processes().map(|p| p.len()).unwrap_or(0),
        None => {
            let mut t = ProcTreeReader::new(
                std::process::id(),
                proc_root.to_path_buf(),
                Box::new(Reaped::default),
            );
            t.list().len()
        }
    }
}

/// Stops the sampler and the GPU monitor, waiting 3 s at most; the problems, if any.
fn stop_threads(sampler: sampler::SamplerHandle, gpu: Option<GpuMonitor>) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut threads: Vec<Box<dyn Stoppable>> = vec![Box::new(sampler)];
    if let Some(g) = gpu {
        threads.push(Box::new(g));
    }
    sampler::stop_all(threads, deadline)
        .into_iter()
        .filter(|stopped| !stopped)
        .map(|_| "a sampling thread did not stop in time".to_string())
        .collect()
}

/// The job's name: `--name`, else the command's file name.
fn job_name(o: &RunOptions) -> Option<String> {
    o.name.clone().or_else(|| {
        Path::new(&o.cmd[0])
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
    })
}

/// What SLURM would know of the run: who ran it, what it had, when it ran and how it ended.
fn run_facts(
    cfg: &Config,
    o: &RunOptions,
    (job_id, node): (u32, &str),
    (uid, gid): (u32, u32),
    (cores, mem): (Option<u32>, Option<u64>),
    (start_ms, end_ms): (u64, u64),
    status: child::Status,
) -> JobFacts {
    JobFacts {
        job_id,
        name: job_name(o),
        user: jobscope_common::users::by_uid(uid).map(|u| u.name),
        uid: Some(uid),
        gid: Some(gid),
        group: jobscope_common::users::group_name(gid),
        cluster: Some(cfg.run.cluster.clone()),
        cpus: cores,
        node_count: Some(1),
        nodes: vec![node.to_string()],
        mem_per_node_bytes: mem,
        gpus: o.gpus.clone(),
        start_unix_s: Some(start_ms / 1000),
        end_unix_s: Some(end_ms / 1000),
        exit_code: Some(status.exit_code().unwrap_or(0)),
        exit_signal: Some(status.signal().unwrap_or(0)),
        work_dir: std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string()),
        ..Default::default()
    }
}

/// `--archive` and `--mail`: writes the summary to the archive (returning where) and sends its
/// mail; what went wrong on the way goes to `problems`.
fn deliver(
    cfg: &Config,
    o: &RunOptions,
    summary: &JobSummary,
    facts: &JobFacts,
    problems: &mut Vec<String>,
) -> Result<Option<PathBuf>> {
    let mut archived = None;
    if o.archive {
        let w = archive::Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group)
            .write(summary)
            .context("archive write failed")?;
        problems.extend(w.problems);
        archived = Some(w.path);
    }
    if o.mail {
        jobscope_deliver::notify::notify(cfg, summary, Some(facts), &NoScheduler, &mut |m| {
            problems.push(m.to_string())
        });
    }
    Ok(archived)
}

/// A local run belongs to no array and has no scheduler to ask.
struct NoScheduler;

impl jobscope_report::slurm::Slurm for NoScheduler {
    fn job_facts(&self, _: u32) -> Option<JobFacts> {
        None
    }
    fn array_tasks(&self, _: u32) -> Option<Vec<jobscope_report::slurm::ArrayTask>> {
        None
    }
    fn ping(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_slurm_units() {
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("4G"), Some(4 << 30));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("1000"), Some(1000));
        assert_eq!(parse_size("2 t"), Some(2 << 40));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("-1G"), None);
        assert_eq!(parse_size("1Q"), None);
        assert_eq!(parse_size("0"), None);
    }

    #[test]
    fn gpus_by_identity_only() {
        assert_eq!(parse_gpus("all").unwrap(), vec![GpuRef::AllAccessible]);
        assert_eq!(
            parse_gpus("GPU-abc, 0000:3b:00.0").unwrap(),
            vec![
                GpuRef::Uuid("GPU-abc".into()),
                GpuRef::PciBusId("0000:3b:00.0".into())
            ]
        );
        let e = parse_gpus("0,1").unwrap_err();
        assert!(e.contains("by identity"), "{e}");
        assert!(parse_gpus("").is_err());
    }

    /// Only what the options left out is measured against the machine, and the note says so.
    #[test]
    fn the_note_names_what_was_not_given() {
        let o = RunOptions::default();
        let n = whole_machine_note(&o, Some(8), None).unwrap();
        assert!(
            n.starts_with("measured against the whole machine (8 cores, "),
            "{n}"
        );
        assert!(n.contains(" memory): give --cores/--mem"), "{n}");
        let cores_given = RunOptions {
            cores: Some(2),
            ..Default::default()
        };
        let n = whole_machine_note(&cores_given, Some(2), Some(1 << 30)).unwrap();
        assert!(
            n.starts_with("measured against the whole machine (1"),
            "{n}"
        );
        assert!(!n.contains("2 cores"), "{n}");
        let both = RunOptions {
            cores: Some(2),
            mem_bytes: Some(1 << 30),
            ..Default::default()
        };
        assert_eq!(whole_machine_note(&both, Some(2), Some(1 << 30)), None);
    }

    /// Early samples at or after the first regular one are dropped.
    #[test]
    fn the_schedule_keeps_early_samples_before_the_cadence() {
        let s = run_schedule(&[1, 5, 15], 10);
        assert_eq!(s.early, [Duration::from_secs(1), Duration::from_secs(5)]);
        assert_eq!(s.cadence, Duration::from_secs(10));
    }

    #[test]
    fn the_job_is_named_after_the_command_unless_named() {
        let mut o = RunOptions {
            cmd: vec!["/usr/bin/python3".into(), "x.py".into()],
            ..Default::default()
        };
        assert_eq!(job_name(&o).as_deref(), Some("python3"));
        o.name = Some("train".into());
        assert_eq!(job_name(&o).as_deref(), Some("train"));
    }

    /// The run's step events are written as the plugin writes a batch step's.
    #[test]
    fn step_events_are_the_batch_steps() {
        let e = step_event(EventKind::StepExit, 7, (None, None), Some(0));
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["kind"], "step_exit");
        assert_eq!(json["step"], "batch");
        assert_eq!(json["exit_status"], 0);
    }
}
