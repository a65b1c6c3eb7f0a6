//! Per-process readers of `/proc/<pid>/{io,stat,status}` (the `/proc` root is a parameter) and
//! [`IoAccumulator`], which turns per-process I/O counters into job-level cumulative counters.
//!
//! Why this exists: SLURM's cgroup/v1 plugin makes no blkio job cgroup (docs/architecture.md,
//! "cgroup paths"), so the only per-job I/O source on v1 is the sum of `/proc/<pid>/io` over the
//! job's processes. proc(5): `read_bytes`/`write_bytes` are bytes that really went to the storage
//! layer; `syscr`/`syscw` count read/write-like system calls.
//!
//! The kernel fact the accumulator is built around (checked on this host with bash + a child
//! `head -c 5000000`): when a parent reaps a child, the child's whole I/O accounting is ADDED to
//! the parent's, and `/proc/<parent>/io` shows it. So "fold the last values of every vanished pid
//! into a base total" double counts every child whose parent is in the job. Instead a vanished
//! process is folded into the base only if its parent is not a live, readable process of the job;
//! otherwise the parent's counters carry (or will carry, once it reaps) the child's final totals,
//! including the I/O done after our last look.
//!
//! Reading a process that exits mid-read is normal (`Error::Gone`), never reported as a problem.
//!
//! This module imports nothing from [`crate::cgroup`]; the error type both use is [`kfile::Error`].
use procfs::process::Process;
use procfs::ProcError;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

pub mod kfile;
pub mod stat;

pub use kfile::Error;
use kfile::{KernelFile, ReadBuf};

/// The counters of one process from `/proc/<pid>/io` that the job totals use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcIo {
    /// Bytes this process caused to be fetched from storage.
    pub read_bytes: u64,
    /// Bytes this process caused to be sent to storage.
    pub write_bytes: u64,
    /// Read-like system calls.
    pub syscr: u64,
    /// Write-like system calls.
    pub syscw: u64,
}

impl ProcIo {
    fn saturating_add(self, o: ProcIo) -> ProcIo {
        ProcIo {
            read_bytes: self.read_bytes.saturating_add(o.read_bytes),
            write_bytes: self.write_bytes.saturating_add(o.write_bytes),
            syscr: self.syscr.saturating_add(o.syscr),
            syscw: self.syscw.saturating_add(o.syscw),
        }
    }
    /// Field-wise maximum: the counters of one process never go backwards.
    fn max_each(self, o: ProcIo) -> ProcIo {
        ProcIo {
            read_bytes: self.read_bytes.max(o.read_bytes),
            write_bytes: self.write_bytes.max(o.write_bytes),
            syscr: self.syscr.max(o.syscr),
            syscw: self.syscw.max(o.syscw),
        }
    }
}

/// Job-level I/O counters. All `None` when no process's `/proc/<pid>/io` was ever readable
/// (e.g. not root and the job belongs to another user).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoTotals {
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
    /// Sum of `syscr`.
    pub read_ops: Option<u64>,
    /// Sum of `syscw`.
    pub write_ops: Option<u64>,
}

impl IoTotals {
    fn known(io: ProcIo) -> Self {
        IoTotals {
            read_bytes: Some(io.read_bytes),
            write_bytes: Some(io.write_bytes),
            read_ops: Some(io.syscr),
            write_ops: Some(io.syscw),
        }
    }
}

/// Identity and I/O of one process, read through one `/proc/<pid>` directory handle so that the
/// values belong to the same process even if the pid is reused meanwhile (the old handle then
/// answers `ESRCH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcSample {
    pub pid: u32,
    /// Parent pid (field 4 of `/proc/<pid>/stat`); 0 if the kernel reports none.
    pub ppid: u32,
    /// Start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`): with the pid, it
    /// identifies a process across pid reuse.
    pub starttime_ticks: u64,
    pub io: ProcIo,
}

/// What the sampler may want to show about one process (`/proc/<pid>/stat` + `status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    pub ppid: u32,
    /// `comm` (at most 15 bytes, may contain spaces and parentheses).
    pub comm: String,
    /// Real uid (`Uid:` first field of `status`).
    pub uid: u32,
    pub starttime_ticks: u64,
    /// User CPU time in clock ticks (field 14 of `stat`).
    pub utime_ticks: u64,
    /// System CPU time in clock ticks (field 15 of `stat`).
    pub stime_ticks: u64,
    /// `Threads:` of `status`.
    pub threads: u64,
    /// `VmRSS:` (absent for kernel threads and zombies).
    pub vm_rss_kib: Option<u64>,
    /// `VmHWM:` peak RSS.
    pub vm_hwm_kib: Option<u64>,
}

fn pid_dir(proc_root: &Path, pid: u32) -> PathBuf {
    proc_root.join(pid.to_string())
}

/// Parses `/proc/<pid>/io`; `None` when one of the four counters is missing or not a number.
pub fn parse_proc_io(text: &str) -> Option<ProcIo> {
    let (mut rb, mut wb, mut cr, mut cw) = (None, None, None, None);
    for line in text.lines() {
        let Some((key, val)) = line.split_once(':') else {
            continue;
        };
        let slot = match key {
            "read_bytes" => &mut rb,
            "write_bytes" => &mut wb,
            "syscr" => &mut cr,
            "syscw" => &mut cw,
            _ => continue,
        };
        *slot = Some(val.trim().parse::<u64>().ok()?);
    }
    Some(ProcIo {
        read_bytes: rb?,
        write_bytes: wb?,
        syscr: cr?,
        syscw: cw?,
    })
}

fn read_io_text(text: Result<&str, Error>, path: &Path) -> Result<ProcIo, Error> {
    let text = text?;
    // An exiting process can give an empty file: that is "gone", not malformed.
    if text.is_empty() {
        return Err(Error::Gone {
            path: path.to_path_buf(),
        });
    }
    parse_proc_io(text).ok_or_else(|| Error::malformed(path, text.lines().next().unwrap_or("")))
}

/// One process opened through its `/proc/<pid>` directory: `stat` read, `io` open.
struct Opened {
    ppid: u32,
    start: u64,
    io_path: PathBuf,
    io_file: File,
}

/// Opens `<proc_root>/<pid>` and, through that one handle, reads `stat` and opens `io`.
fn open_process(proc_root: &Path, pid: u32, buf: &mut ReadBuf) -> Result<Opened, Error> {
    let dir_path = pid_dir(proc_root, pid);
    let dir = kfile::open_dir(&dir_path)?;
    let stat_path = dir_path.join("stat");
    let stat = kfile::open_at(&dir, "stat", &stat_path)?;
    let (st, _comm) = stat::parse_stat_at(buf.read_all_bytes(&stat, &stat_path)?, &stat_path)?;
    let (ppid, start) = (st.ppid, st.starttime_ticks);
    let io_path = dir_path.join("io");
    let io_file = kfile::open_at(&dir, "io", &io_path)?;
    Ok(Opened {
        ppid,
        start,
        io_path,
        io_file,
    })
}

/// Maps a `procfs` error to ours. `Incomplete` (a short or empty file) is what an exiting
/// process gives, so it counts as gone.
fn map_proc_err(dir: &Path, e: ProcError) -> Error {
    let or_dir = |p: Option<PathBuf>| p.unwrap_or_else(|| dir.to_path_buf());
    match e {
        ProcError::NotFound(p) | ProcError::Incomplete(p) => Error::Gone { path: or_dir(p) },
        ProcError::PermissionDenied(p) => Error::Io {
            path: or_dir(p),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        },
        ProcError::Io(source, p) => Error::from_io(or_dir(p), source),
        ProcError::Other(msg) => Error::malformed(dir, &msg),
        other => Error::malformed(dir, &format!("{other:?}")),
    }
}

/// Reads `<proc_root>/<pid>/io`.
pub fn read_proc_io(proc_root: &Path, pid: u32) -> Result<ProcIo, Error> {
    let path = pid_dir(proc_root, pid).join("io");
    let mut buf = ReadBuf::new();
    read_io_text(kfile::read_path(&path, &mut buf), &path)
}

/// Reads `<proc_root>/<pid>/stat` then `io` through one directory handle.
pub fn read_proc_sample(proc_root: &Path, pid: u32) -> Result<ProcSample, Error> {
    let mut buf = ReadBuf::new();
    read_proc_sample_with(proc_root, pid, &mut buf)
}

fn read_proc_sample_with(
    proc_root: &Path,
    pid: u32,
    buf: &mut ReadBuf,
) -> Result<ProcSample, Error> {
    let o = open_process(proc_root, pid, buf)?;
    let io = read_io_text(buf.read_all(&o.io_file, &o.io_path), &o.io_path)?;
    Ok(ProcSample {
        pid,
        ppid: o.ppid,
        starttime_ticks: o.start,
        io,
    })
}

/// Reads `<proc_root>/<pid>/stat` and `status` (the latter is the larger file: ~27 µs).
pub fn read_process_info(proc_root: &Path, pid: u32) -> Result<ProcessInfo, Error> {
    let dir = pid_dir(proc_root, pid);
    let mut buf = ReadBuf::new();
    let (stat, comm) = stat::read_stat(&dir.join("stat"), &mut buf)?;
    let p = Process::new_with_root(dir.clone()).map_err(|e| map_proc_err(&dir, e))?;
    let status = p.status().map_err(|e| map_proc_err(&dir, e))?;
    Ok(ProcessInfo {
        pid,
        ppid: stat.ppid,
        comm: String::from_utf8_lossy(comm).into_owned(),
        uid: status.ruid,
        starttime_ticks: stat.starttime_ticks,
        utime_ticks: stat.utime_ticks,
        stime_ticks: stat.stime_ticks,
        threads: status.threads,
        vm_rss_kib: status.vmrss,
        vm_hwm_kib: status.vmhwm,
    })
}

/// Threads of one process read at most by [`reaped_io`]; past it the figure is not given.
pub const MAX_THREADS_FOR_REAPED: usize = 4096;

/// The I/O of the children `pid` has reaped (with, recursively, everything they reaped), as the
/// kernel accounts it: `/proc/<pid>/io` minus the sum of `/proc/<pid>/task/<tid>/io`.
///
/// Why this is exact: the process-wide file is the process's `signal->ioac` plus each live
/// thread's own counters, and a thread's file is only its own counters (proc(5); checked on this
/// host: a process whose child shell ran 20 `dd iflag=direct` reads and 20 `dd oflag=direct`
/// writes of 1 MiB gained 20.3 MiB `read_bytes` and 20.04 MiB `write_bytes` in this figure, and
/// its own 1 MiB write by its main thread moved the process-wide file by 1 MiB and this figure by
/// 0). `wait()` adds a reaped child's counters and its `signal->ioac` to the reaper's
/// `signal->ioac`, so the difference holds every reaped descendant, whenever its I/O happened,
/// even in its last millisecond. It also holds the own I/O of the process's threads that have
/// exited (small for slurmstepd, see `plugin/src/steps.rs`).
///
/// The threads are read first, the whole process last: a thread that exits in between is then in
/// both (its counters move into `signal->ioac`) and cancels out; a thread started in between has
/// next to nothing of its own yet. `Gone` when the process is gone; more than
/// [`MAX_THREADS_FOR_REAPED`] threads gives a `Malformed` error rather than an unbounded walk.
pub fn reaped_io(proc_root: &Path, pid: u32) -> Result<ProcIo, Error> {
    let dir = pid_dir(proc_root, pid);
    let task_dir = dir.join("task");
    let mut buf = ReadBuf::new();
    let mut threads = ProcIo::default();
    let entries = std::fs::read_dir(&task_dir).map_err(|e| Error::from_io(&task_dir, e))?;
    for (n, entry) in entries.enumerate() {
        if n >= MAX_THREADS_FOR_REAPED {
            return Err(Error::malformed(&task_dir, "too many threads"));
        }
        let Ok(entry) = entry else { continue };
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let path = task_dir.join(tid.to_string()).join("io");
        match read_io_text(kfile::read_path(&path, &mut buf), &path) {
            Ok(io) => threads = threads.saturating_add(io),
            // Exited since the listing: its counters are in the process-wide figure's
            // `signal->ioac` by now, and it is left out here: a small over-count of its own I/O.
            Err(e) if e.is_gone() => {}
            Err(e) => return Err(e),
        }
    }
    let path = dir.join("io");
    let whole = read_io_text(kfile::read_path(&path, &mut buf), &path)?;
    Ok(ProcIo {
        read_bytes: whole.read_bytes.saturating_sub(threads.read_bytes),
        write_bytes: whole.write_bytes.saturating_sub(threads.write_bytes),
        syscr: whole.syscr.saturating_sub(threads.syscr),
        syscw: whole.syscw.saturating_sub(threads.syscw),
    })
}

/// One live process the accumulator follows.
#[derive(Debug)]
struct Tracked {
    ppid: u32,
    start: u64,
    /// Largest counters seen.
    io: ProcIo,
    /// `<pid>/io`, kept open while the descriptor allowance permits; else `stat` and `io` are read
    /// by path each sample, and the start time tells a reused pid.
    io_file: Option<KernelFile>,
    /// Sample generation in which the pid was last listed / last read.
    listed: u64,
    read_ok: u64,
}

/// What is left of a process that went away: enough to fold it into the base total.
#[derive(Debug, Clone, Copy)]
struct Vanished {
    pid: u32,
    ppid: u32,
    start: u64,
    io: ProcIo,
}

/// Turns per-process `/proc/<pid>/io` counters into job-level CUMULATIVE counters that do not
/// drop when processes exit. Call [`IoAccumulator::sample`] once per sampling tick with the job's
/// current pids (e.g. the union of its cgroups' `cgroup.procs`).
///
/// - Each process's `io` file is opened once, through its `/proc/<pid>` directory (whose `stat`
///   gives the parent and start time), and kept open: later samples cost one `pread` per process.
///   A kept descriptor answers `ESRCH` once its process is reaped, also when the pid has been
///   reused meanwhile, so a reused pid is a new process.
/// - A process that vanished is folded (last-seen values) into a base total, unless its parent is
///   still a live, readable process of the job with an earlier start: the kernel then adds the
///   child's final I/O to that parent when it reaps it (see the module docs). The parent pid is
///   read again only for the children of a process that went away (a process is re-parented
///   only when its parent dies).
/// - I/O a process does between its last sample and its exit is lost when its parent is outside
///   the job (e.g. task leaders, reaped by slurmstepd): at most one sampling interval per process.
/// - Bounds: at most `max_tracked` live processes are remembered (default
///   [`IoAccumulator::DEFAULT_MAX_TRACKED`]), and at most [`IoAccumulator::max_kept_fds`]
///   descriptors are kept (a share of `RLIMIT_NOFILE`; past it a process's `stat` and `io` are
///   read by path each sample). Past `max_tracked`, further processes still count while they are
///   alive, but are not remembered, so their I/O can be lost when they exit; the count of such
///   observations is [`IoAccumulator::untracked`]. Because of that (and of a child vanishing just
///   before its parent reaps it), the returned totals are clamped to never go below the previous
///   ones.
/// - A pid that is listed but unreadable (permission) keeps its last-seen values and is not
///   treated as exited.
/// - Steady state (no process started or ended) allocates nothing.
#[derive(Debug)]
pub struct IoAccumulator {
    max_tracked: usize,
    max_kept_fds: usize,
    kept_fds: usize,
    live: HashMap<u32, Tracked>,
    base: ProcIo,
    last: Option<ProcIo>,
    untracked: u64,
    generation: u64,
    /// Whether the last `proc_root` is procfs (else removed files must be noticed by link count).
    root_kind: Option<(PathBuf, bool)>,
    // Scratch reused across samples.
    vanished: Vec<Vanished>,
    buf: ReadBuf,
}

impl Default for IoAccumulator {
    fn default() -> Self {
        Self::new()
    }
}

impl IoAccumulator {
    /// Live processes remembered at most; a job has rarely more than a few hundred.
    pub const DEFAULT_MAX_TRACKED: usize = 8192;
    /// Kept `/proc/<pid>/io` descriptors at most (also at most a quarter of `RLIMIT_NOFILE`).
    pub const DEFAULT_MAX_KEPT_FDS: usize = 1024;

    pub fn new() -> Self {
        Self::with_max_tracked(Self::DEFAULT_MAX_TRACKED)
    }

    pub fn with_max_tracked(max_tracked: usize) -> Self {
        IoAccumulator {
            max_tracked,
            max_kept_fds: kfile::fd_allowance(4, Self::DEFAULT_MAX_KEPT_FDS).min(max_tracked),
            kept_fds: 0,
            live: HashMap::new(),
            base: ProcIo::default(),
            last: None,
            untracked: 0,
            generation: 0,
            root_kind: None,
            vanished: Vec::new(),
            buf: ReadBuf::new(),
        }
    }

    /// Sets how many `io` descriptors may be kept open (tests; the default derives from
    /// `RLIMIT_NOFILE`).
    pub fn with_max_kept_fds(mut self, n: usize) -> Self {
        self.max_kept_fds = n.min(self.max_tracked);
        self
    }

    /// Number of live processes currently remembered.
    pub fn tracked(&self) -> usize {
        self.live.len()
    }

    /// Descriptors kept open now.
    pub fn kept_fds(&self) -> usize {
        self.kept_fds
    }

    /// The most descriptors this accumulator keeps open.
    pub fn max_kept_fds(&self) -> usize {
        self.max_kept_fds
    }

    /// How many (process, sample) observations could not be remembered because of the bound.
    pub fn untracked(&self) -> u64 {
        self.untracked
    }

    /// The paths of the `io` files kept open (for the benchmark's kept-descriptor floor).
    pub fn kept_paths(&self) -> impl Iterator<Item = &Path> {
        self.live
            .values()
            .filter_map(|t| t.io_file.as_ref().map(KernelFile::path))
    }

    fn verify_unlinked(&mut self, proc_root: &Path) -> bool {
        match &self.root_kind {
            Some((p, procfs)) if p == proc_root => !procfs,
            _ => {
                let procfs = kfile::is_procfs(proc_root);
                self.root_kind = Some((proc_root.to_path_buf(), procfs));
                !procfs
            }
        }
    }

    /// Reads `<proc_root>/<pid>/io` for every pid (duplicates ignored; `stat` too for pids not
    /// seen before) and returns the job's cumulative totals.
    pub fn sample(&mut self, proc_root: &Path, pids: &[u32]) -> IoTotals {
        let verify_unlinked = self.verify_unlinked(proc_root);
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        self.vanished.clear();
        let mut overflow = ProcIo::default();
        let mut overflow_seen = false;
        for &pid in pids {
            if let Some(t) = self.live.get_mut(&pid) {
                if t.listed == generation {
                    continue;
                }
                t.listed = generation;
                match read_tracked(t, proc_root, pid, verify_unlinked, &mut self.buf) {
                    Ok(io) => {
                        t.io = t.io.max_each(io);
                        t.read_ok = generation;
                        continue;
                    }
                    Err(e) if e.is_gone() => {
                        // Gone, though still listed: reaped meanwhile, or the pid now names a
                        // new process (opened below).
                        if let Some(t) = self.live.remove(&pid) {
                            self.forget(pid, t);
                        }
                    }
                    // Listed but unreadable: keeps its last-seen values.
                    Err(_) => continue,
                }
            }
            if self.live.len() >= self.max_tracked {
                if let Ok(s) = read_proc_sample_with(proc_root, pid, &mut self.buf) {
                    self.untracked = self.untracked.saturating_add(1);
                    overflow = overflow.saturating_add(s.io);
                    overflow_seen = true;
                }
                continue;
            }
            let keep = self.kept_fds < self.max_kept_fds;
            // Exited between the listing and the read, or unreadable: nothing to remember.
            if let Ok(t) = open_tracked(proc_root, pid, keep, generation, &mut self.buf) {
                if t.io_file.is_some() {
                    self.kept_fds += 1;
                }
                self.live.insert(pid, t);
            }
        }
        // Not listed any more: gone from the job.
        let mut kept_closed = 0usize;
        let vanished = &mut self.vanished;
        self.live.retain(|&pid, t| {
            if t.listed == generation {
                return true;
            }
            kept_closed += usize::from(t.io_file.is_some());
            vanished.push(Vanished {
                pid,
                ppid: t.ppid,
                start: t.start,
                io: t.io,
            });
            false
        });
        self.kept_fds -= kept_closed.min(self.kept_fds);
        self.observe(proc_root, generation, overflow, overflow_seen)
    }

    /// Drops a tracked process that went away (its descriptor is closed) and queues it for folding.
    fn forget(&mut self, pid: u32, t: Tracked) {
        if t.io_file.is_some() {
            self.kept_fds = self.kept_fds.saturating_sub(1);
        }
        self.vanished.push(Vanished {
            pid,
            ppid: t.ppid,
            start: t.start,
            io: t.io,
        });
    }

    /// Folds the vanished processes, refreshes the parents of their orphans, sums up.
    fn observe(
        &mut self,
        proc_root: &Path,
        generation: u64,
        overflow: ProcIo,
        overflow_seen: bool,
    ) -> IoTotals {
        for v in &self.vanished {
            let absorbed_by_parent = self
                .live
                .get(&v.ppid)
                .is_some_and(|p| p.read_ok == generation && p.start <= v.start);
            if !absorbed_by_parent {
                self.base = self.base.saturating_add(v.io);
            }
        }
        // A process whose parent died was re-parented (to a subreaper or init): learn its new
        // parent now, while it is alive, so its own exit is folded right.
        if !self.vanished.is_empty() {
            for (&pid, t) in self.live.iter_mut() {
                if self.vanished.iter().any(|v| v.pid == t.ppid) {
                    let path = pid_dir(proc_root, pid).join("stat");
                    if let Ok((st, _)) = stat::read_stat(&path, &mut self.buf) {
                        if st.starttime_ticks == t.start {
                            t.ppid = st.ppid;
                        }
                    }
                }
            }
        }
        self.buf.shrink();

        let mut total = self.base.saturating_add(overflow);
        for t in self.live.values() {
            total = total.saturating_add(t.io);
        }
        let anything_known = self.last.is_some() || overflow_seen || !self.live.is_empty();
        if !anything_known {
            return IoTotals::default();
        }
        let total = match self.last {
            Some(last) => total.max_each(last),
            None => total,
        };
        self.last = Some(total);
        IoTotals::known(total)
    }
}

/// Reads a tracked process's current counters; `Gone` when it is not the same process any more.
fn read_tracked(
    t: &Tracked,
    proc_root: &Path,
    pid: u32,
    verify_unlinked: bool,
    buf: &mut ReadBuf,
) -> Result<ProcIo, Error> {
    match &t.io_file {
        Some(f) => {
            let io = read_io_text(f.read(buf), f.path())?;
            if verify_unlinked && f.is_unlinked() {
                return Err(Error::Gone {
                    path: f.path().to_path_buf(),
                });
            }
            Ok(io)
        }
        None => {
            let s = read_proc_sample_with(proc_root, pid, buf)?;
            if s.starttime_ticks != t.start {
                return Err(Error::Gone {
                    path: pid_dir(proc_root, pid),
                });
            }
            Ok(s.io)
        }
    }
}

/// Starts following a process: its `stat` (parent, start) and first `io` reading.
fn open_tracked(
    proc_root: &Path,
    pid: u32,
    keep: bool,
    generation: u64,
    buf: &mut ReadBuf,
) -> Result<Tracked, Error> {
    let o = open_process(proc_root, pid, buf)?;
    let io = read_io_text(buf.read_all(&o.io_file, &o.io_path), &o.io_path)?;
    let io_file = keep.then(|| KernelFile::from_open(o.io_path, o.io_file));
    Ok(Tracked {
        ppid: o.ppid,
        start: o.start,
        io,
        io_file,
        listed: generation,
        read_ok: generation,
    })
}

/// Stateless sum over the processes alive now (what a one-shot cgroup read reports): drops when
/// processes exit.
pub fn sum_live(proc_root: &Path, pids: &[u32]) -> IoTotals {
    IoAccumulator::new()
        .with_max_kept_fds(0)
        .sample(proc_root, pids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const FIXTURE_PROC: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/cgroup-v1-debian12-slurm-22.05/proc"
    );

    /// A fake /proc tree: `set(pid, ppid, start, read_bytes)` writes `stat` and `io`.
    struct FakeProc {
        dir: tempfile::TempDir,
    }

    impl FakeProc {
        fn new() -> Self {
            FakeProc {
                dir: tempfile::tempdir().unwrap(),
            }
        }
        fn root(&self) -> &Path {
            self.dir.path()
        }
        fn set(&self, pid: u32, ppid: u32, start: u64, read_bytes: u64) {
            let d = self.root().join(pid.to_string());
            fs::create_dir_all(&d).unwrap();
            // Field 22 (starttime) is the 20th after "(comm)"; see proc(5).
            let stat = format!(
                "{pid} (worker (x)) S {ppid} {pid} {pid} 0 -1 4194560 0 0 0 0 7 3 0 0 20 0 1 0 {start} \
                 1000 10 1000000 0 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
            );
            fs::write(d.join("stat"), stat).unwrap();
            let io = format!(
                "rchar: 1\nwchar: 1\nsyscr: {}\nsyscw: 2\nread_bytes: {read_bytes}\nwrite_bytes: 10\n\
                 cancelled_write_bytes: 0\n",
                read_bytes / 100
            );
            fs::write(d.join("io"), io).unwrap();
        }
        fn remove(&self, pid: u32) {
            fs::remove_dir_all(self.root().join(pid.to_string())).unwrap();
        }
    }

    #[test]
    fn reads_captured_process() {
        let root = Path::new(FIXTURE_PROC);
        // proc/2589/io: read_bytes 7942144, write_bytes 53248, syscr 32, syscw 3.
        let io = read_proc_io(root, 2589).unwrap();
        assert_eq!(
            io,
            ProcIo {
                read_bytes: 7942144,
                write_bytes: 53248,
                syscr: 32,
                syscw: 3
            }
        );
        let s = read_proc_sample(root, 2589).unwrap();
        assert_eq!(s.ppid, 2583); // field(proc/2589/stat, 4)
        assert_eq!(s.starttime_ticks, 14741); // field(proc/2589/stat, 22)
        let info = read_process_info(root, 2589).unwrap();
        assert_eq!(info.comm, "python3"); // field(proc/2589/stat, 2)
        assert_eq!(info.utime_ticks, 301); // field(proc/2589/stat, 14)
        assert_eq!(info.stime_ticks, 27); // field(proc/2589/stat, 15)
        assert_eq!(info.uid, 1001); // proc/2589/status "Uid:"
        assert_eq!(info.threads, 1); // proc/2589/status "Threads:"
        assert_eq!(info.vm_rss_kib, Some(213148)); // proc/2589/status "VmRSS:"
        assert_eq!(info.vm_hwm_kib, Some(213148)); // proc/2589/status "VmHWM:"
    }

    #[test]
    fn missing_process_is_gone_and_garbage_is_malformed() {
        let p = FakeProc::new();
        assert!(read_proc_io(p.root(), 4242).unwrap_err().is_gone());
        fs::create_dir_all(p.root().join("7")).unwrap();
        fs::write(p.root().join("7/io"), "read_bytes: lots\n").unwrap();
        let e = read_proc_io(p.root(), 7).unwrap_err();
        assert!(!e.is_gone(), "{e:?}");
        assert!(e.path().starts_with(p.root()), "{e:?}");
    }

    #[test]
    fn no_readable_process_gives_none() {
        let p = FakeProc::new();
        let mut acc = IoAccumulator::new();
        assert_eq!(acc.sample(p.root(), &[1, 2, 3]), IoTotals::default());
        assert_eq!(sum_live(p.root(), &[]), IoTotals::default());
    }

    #[test]
    fn exit_keeps_totals() {
        let p = FakeProc::new();
        let mut acc = IoAccumulator::new();
        // 100 and 200 are children of 1 (slurmstepd, not in the job): nobody in the job absorbs them.
        p.set(100, 1, 500, 1000);
        p.set(200, 1, 600, 3000);
        assert_eq!(acc.sample(p.root(), &[100, 200]).read_bytes, Some(4000));
        p.set(200, 1, 600, 5000);
        p.remove(100);
        let t = acc.sample(p.root(), &[100, 200]);
        assert_eq!(
            t.read_bytes,
            Some(6000),
            "1000 folded from the exited pid + 5000 live"
        );
        p.remove(200);
        let t = acc.sample(p.root(), &[]);
        assert_eq!(t.read_bytes, Some(6000));
        assert_eq!(t.write_ops, Some(4), "syscw 2 + 2");
        assert_eq!(acc.tracked(), 0);
        // The stateless sum only sees live processes.
        assert_eq!(sum_live(p.root(), &[]).read_bytes, None);
    }

    #[test]
    fn pid_reuse_is_a_new_process() {
        let p = FakeProc::new();
        let mut acc = IoAccumulator::new();
        p.set(100, 1, 500, 1000);
        assert_eq!(acc.sample(p.root(), &[100]).read_bytes, Some(1000));
        // Same pid, later start time, smaller counters: the old process exited, a new one started
        // (a new `/proc/100` directory, as the kernel makes one).
        p.remove(100);
        p.set(100, 1, 900, 10);
        assert_eq!(acc.sample(p.root(), &[100]).read_bytes, Some(1010));
        p.set(100, 1, 900, 20);
        assert_eq!(acc.sample(p.root(), &[100]).read_bytes, Some(1020));
    }

    #[test]
    fn reaped_child_is_not_double_counted() {
        let p = FakeProc::new();
        let mut acc = IoAccumulator::new();
        // 10 = job shell (parent 1 outside the job), 11 = its child.
        p.set(10, 1, 100, 50);
        p.set(11, 10, 200, 1000);
        assert_eq!(acc.sample(p.root(), &[10, 11]).read_bytes, Some(1050));
        // The child did 500 more, exited, and the shell reaped it: the kernel adds the child's
        // final 1500 to the shell's counters.
        p.remove(11);
        p.set(10, 1, 100, 50 + 1500);
        assert_eq!(
            acc.sample(p.root(), &[10]).read_bytes,
            Some(1550),
            "not 2550"
        );
    }

    #[test]
    fn totals_never_drop_before_the_parent_reaps() {
        let p = FakeProc::new();
        let mut acc = IoAccumulator::new();
        p.set(10, 1, 100, 50);
        p.set(11, 10, 200, 1000);
        assert_eq!(acc.sample(p.root(), &[10, 11]).read_bytes, Some(1050));
        // The child is gone from the listing but not reaped yet: its I/O is in neither place.
        p.remove(11);
        assert_eq!(
            acc.sample(p.root(), &[10]).read_bytes,
            Some(1050),
            "clamped"
        );
        p.set(10, 1, 100, 50 + 1000);
        assert_eq!(acc.sample(p.root(), &[10]).read_bytes, Some(1050));
    }

    /// Writes `/proc/<pid>/io` (`whole`) and one `task/<tid>/io` per thread.
    fn fake_reaper(root: &Path, pid: u32, whole: (u64, u64), threads: &[(u32, u64, u64)]) {
        let io = |r: u64, w: u64| {
            format!(
                "rchar: 1\nwchar: 1\nsyscr: {}\nsyscw: {}\nread_bytes: {r}\nwrite_bytes: {w}\n\
                 cancelled_write_bytes: 0\n",
                r / 1000,
                w / 1000
            )
        };
        let d = root.join(pid.to_string());
        fs::create_dir_all(d.join("task")).unwrap();
        fs::write(d.join("io"), io(whole.0, whole.1)).unwrap();
        for &(tid, r, w) in threads {
            let t = d.join("task").join(tid.to_string());
            fs::create_dir_all(&t).unwrap();
            fs::write(t.join("io"), io(r, w)).unwrap();
        }
    }

    #[test]
    fn reaped_io_is_the_process_minus_its_live_threads() {
        let p = FakeProc::new();
        // slurmstepd: main thread wrote 8192 (its log), another thread read 4096; the whole
        // process also holds 3_000_000 read and 2_000_000 written by reaped tasks.
        fake_reaper(
            p.root(),
            700,
            (3_004_096, 2_008_192),
            &[(700, 0, 8192), (701, 4096, 0)],
        );
        let io = reaped_io(p.root(), 700).unwrap();
        assert_eq!(io.read_bytes, 3_000_000);
        assert_eq!(io.write_bytes, 2_000_000);
        assert_eq!(io.syscr, 3004 - 4);
        assert_eq!(io.syscw, 2008 - 8);
        assert!(reaped_io(p.root(), 701).unwrap_err().is_gone());
        // A non-numeric entry in task/ is ignored; a malformed thread file is an error.
        fs::create_dir_all(p.root().join("700/task/x")).unwrap();
        assert!(reaped_io(p.root(), 700).is_ok());
        fs::write(p.root().join("700/task/701/io"), "read_bytes: many\n").unwrap();
        assert!(!reaped_io(p.root(), 700).unwrap_err().is_gone());
    }

    #[test]
    fn reaped_io_of_this_process_grows_by_what_a_reaped_child_wrote() {
        // The kernel fact itself, on the running kernel: a child's writes reach the parent's
        // figure only once it is reaped, and the parent's own writes never do.
        let root = Path::new("/proc");
        let me = std::process::id();
        let Ok(before) = reaped_io(root, me) else {
            return; // no /proc/<pid>/io (kernel without task I/O accounting)
        };
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("child.out");
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "head -c 4194304 /dev/zero > '{}' && sync",
                out.display()
            ))
            .status()
            .unwrap();
        assert!(status.success());
        let after_child = reaped_io(root, me).unwrap();
        fs::write(dir.path().join("mine"), vec![1u8; 4 << 20]).unwrap();
        let after_own = reaped_io(root, me).unwrap();
        let grew = after_child.syscw - before.syscw;
        assert!(
            grew >= 1,
            "the reaped child's write calls are counted: {grew}"
        );
        // On a filesystem that accounts dirtied pages (ext4, xfs; not tmpfs) the 4 MiB are there.
        if after_child.write_bytes > before.write_bytes {
            let mib = (after_child.write_bytes - before.write_bytes) as f64 / 1048576.0;
            assert!((4.0..4.5).contains(&mib), "{mib} MiB");
        }
        // Other test threads that exit meanwhile move their own (small) counters in: a bound,
        // not equality.
        assert!(
            after_own.write_bytes - after_child.write_bytes < 1 << 20,
            "this process's own 4 MiB write is not a reaped child's"
        );
    }

    #[test]
    fn bound_is_respected() {
        let p = FakeProc::new();
        let mut acc = IoAccumulator::with_max_tracked(2);
        for pid in 1..=4 {
            p.set(pid, 999, 10 + pid as u64, 100);
        }
        assert_eq!(
            acc.sample(p.root(), &[1, 2, 3, 4]).read_bytes,
            Some(400),
            "all live ones count"
        );
        assert_eq!(acc.tracked(), 2);
        assert_eq!(acc.untracked(), 2);
    }
}
