//! cgroup discovery and readers (v1, v2, hybrid).
//!
//! - [`locate_job`] finds a job's cgroup directories from the text of `/proc/<pid>/cgroup` and a
//!   cgroup mount root (a parameter, so fixture trees work).
//! - [`v1`] and [`v2`] hold one typed read function per control file; [`parse`] the pure parsers.
//! - [`JobCgroup::read`] / [`JobCgroup::read_with`] / [`JobCgroup::read_detailed`] assemble a
//!   [`Snapshot`] ([`crate::sample::Reading`]) from them.
//!
//! Rules every reader follows: a value the kernel does not give is `None`, never 0; "file or
//! cgroup gone" (`ENOENT`/`ENODEV`) is [`Error::Gone`], not a failure; malformed content is
//! [`Error::Malformed`] with the path; nothing panics on any file content.
//!
//! Each file is re-opened for every read rather than kept open: at a 30 s period the ~45 µs
//! difference does not matter, and it avoids the stale-fd/`ENODEV` class of bugs (notes/crates.md
//! A.4). The read buffer is reused per thread.
use crate::procio::{IoAccumulator, IoTotals};
use crate::sample::Reading;
use std::cell::RefCell;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Component, Path, PathBuf};

mod error;
pub mod parse;
#[cfg(test)]
mod tests;
pub mod v1;
pub mod v2;

pub use error::Error;
pub use parse::{CpuStatV2, IoStatV2, MemEventsV2, MemStatV1, MemStatV2, OomControlV1, Pressure};

pub use jobscope_model::sample::CgroupVersion;

/// Where one job's (or step's) cgroup lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCgroup {
    pub version: CgroupVersion,
    /// v1: `<root>/cpuacct/<rel>`; v2: `<root>/<rel>` (or `<root>/unified/<rel>` on hybrid).
    pub cpu_dir: PathBuf,
    /// v1: `<root>/memory/<rel>`; v2 same as `cpu_dir`.
    pub memory_dir: PathBuf,
    /// SLURM node name taken from a `slurm_<node>` path component (multiple-slurmd), if present.
    pub node_from_path: Option<String>,
}

/// The result of reading one cgroup.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub reading: Reading,
    /// v1 `cpuacct.usage_percpu` (ns per CPU), used by the sampler for `cpus_active`.
    pub percpu_ns: Option<Vec<u64>>,
    /// The cgroup directory is gone (ENOENT/ENODEV on its core file).
    pub gone: bool,
}

/// v1 controllers whose `/proc/<pid>/cgroup` line locates the job, in order of preference.
/// slurmstepd sits in the memory/cpuset *step* cgroup and the freezer *job* cgroup, but in cpuacct
/// at `/` (measured on SLURM 22.05), so the cpuacct line is the last resort.
pub const V1_LOCATING_CONTROLLERS: [&str; 4] = ["memory", "freezer", "cpuset", "cpuacct"];

/// Finds the job cgroup of `job_id` from the text of `/proc/<pid>/cgroup`, under `cgroup_root`
/// (normally `/sys/fs/cgroup`). Returns `None` when the process is in no job cgroup.
///
/// The job directory is the path cut right after its `job_<id>` component, so any prefix works:
/// `slurm/uid_U/` (v1), `slurm_<node>/uid_U/` (v1, Debian's multiple-slurmd build),
/// `system.slice/slurmstepd.scope/` (v2), and any extra level a newer SLURM puts above the job.
///
/// v1: the relative path comes from the memory line (or freezer, cpuset, cpuacct, see
/// [`V1_LOCATING_CONTROLLERS`]); `cpu_dir` is `<root>/cpuacct/<rel>` with the cpuacct line's own
/// path when it names the job, else the same `<rel>`.
///
/// v2: from the `0::` line. Pure v2 mounts the hierarchy at `<root>`; a hybrid host (v1 lines
/// present too, e.g. `1:name=systemd:`) at `<root>/unified`. When only the other of the two
/// candidate directories exists, that one is used.
///
/// SLUID assumption (SLURM 26.05): we assume the per-job directory is still named `job_<id>` with
/// the numeric job id, possibly below a SLUID-named directory (which is just part of the prefix).
/// A job directory named only by its SLUID cannot be matched from a numeric id: `None`.
pub fn locate_job(proc_cgroup: &str, cgroup_root: &Path, job_id: u32) -> Option<JobCgroup> {
    let lines = parse::parse_proc_cgroup(proc_cgroup);
    let job = format!("job_{job_id}");
    let rel_for = |controller: &str| {
        lines
            .iter()
            .filter(|l| l.has_controller(controller))
            .find_map(|l| job_rel(l.path, &job))
    };

    if let Some(rel) = V1_LOCATING_CONTROLLERS.iter().find_map(|c| rel_for(c)) {
        let cpu_rel = rel_for("cpuacct").unwrap_or_else(|| rel.clone());
        return Some(JobCgroup {
            version: CgroupVersion::V1,
            cpu_dir: cgroup_root.join("cpuacct").join(&cpu_rel),
            memory_dir: cgroup_root.join("memory").join(&rel),
            node_from_path: node_from_rel(&rel),
        });
    }

    let rel = lines
        .iter()
        .filter(|l| l.is_unified())
        .find_map(|l| job_rel(l.path, &job))?;
    let hybrid = lines.iter().any(|l| !l.is_unified());
    let unified = cgroup_root.join("unified");
    let (preferred, other) = if hybrid {
        (unified, cgroup_root.to_path_buf())
    } else {
        (cgroup_root.to_path_buf(), unified)
    };
    let base = if !preferred.join(&rel).is_dir() && other.join(&rel).is_dir() {
        other
    } else {
        preferred
    };
    let dir = base.join(&rel);
    Some(JobCgroup {
        version: CgroupVersion::V2,
        cpu_dir: dir.clone(),
        memory_dir: dir,
        node_from_path: node_from_rel(&rel),
    })
}

/// `"/slurm_vm/uid_1001/job_1/step_0/task_0"` → `"slurm_vm/uid_1001/job_1"`. `None` if no
/// component is `job`, or if a component before it is `.`/`..` (the text should come from the
/// kernel, but a path must never climb out of the cgroup root).
fn job_rel(path: &str, job: &str) -> Option<String> {
    let mut rel = PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            Component::RootDir => {}
            Component::Normal(n) => {
                rel.push(n);
                if n == job {
                    return rel.into_os_string().into_string().ok();
                }
            }
            _ => return None,
        }
    }
    None
}

/// The SLURM node name in a job path: v1 `slurm_<node>/...` (multiple-slurmd build), v2
/// `<node>_slurmstepd.scope` (SLURM's scope name with multiple slurmd).
fn node_from_rel(rel: &str) -> Option<String> {
    let comps = || rel.split('/').filter(|c| !c.is_empty());
    comps()
        .find_map(|c| c.strip_prefix("slurm_"))
        .or_else(|| comps().find_map(|c| c.strip_suffix("_slurmstepd.scope")))
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
}

impl JobCgroup {
    /// The child cgroup of one step (`step_batch`, `step_extern`, `step_0` ...).
    pub fn step(&self, step_dir_name: &str) -> JobCgroup {
        JobCgroup {
            version: self.version,
            cpu_dir: self.cpu_dir.join(step_dir_name),
            memory_dir: self.memory_dir.join(step_dir_name),
            node_from_path: self.node_from_path.clone(),
        }
    }

    /// Reads every file into a [`Snapshot`]; I/O of processes is summed from `proc_root`
    /// (normally `/proc`) on v1. Never panics; unreadable values are `None`.
    ///
    /// Stateless: on v1 the I/O counters are the sum over the processes alive now, so they drop
    /// when a process exits. The sampler should use [`JobCgroup::read_with`] and one
    /// [`IoAccumulator`] per cgroup it follows.
    pub fn read(&self, proc_root: &Path) -> Snapshot {
        self.read_with(proc_root, None)
    }

    /// Like [`JobCgroup::read`], with cumulative per-process I/O through `io` when given.
    pub fn read_with(&self, proc_root: &Path, io: Option<&mut IoAccumulator>) -> Snapshot {
        self.read_detailed(proc_root, io).0
    }

    /// Like [`JobCgroup::read_with`], also returning the problems met (malformed files,
    /// permission errors) so the caller can log them once. Absent files and vanished
    /// cgroups/processes are not problems.
    pub fn read_detailed(
        &self,
        proc_root: &Path,
        io: Option<&mut IoAccumulator>,
    ) -> (Snapshot, Vec<Error>) {
        let mut problems = Problems::default();
        let snap = match self.version {
            CgroupVersion::V1 => self.read_v1(proc_root, io, &mut problems),
            CgroupVersion::V2 => self.read_v2(proc_root, io, &mut problems),
        };
        (snap, problems.0)
    }

    /// The pids of every process in the cgroup and its descendants (v1: the cpuacct tree when it
    /// exists, see [`JobCgroup::read_detailed`]'s member counting).
    pub fn processes(&self) -> Result<Vec<u32>, Error> {
        let tree = self.members_tree();
        walk_members(tree, None, &mut Problems::default()).map(|m| m.pids)
    }

    pub fn exists(&self) -> bool {
        self.memory_dir.is_dir() || self.cpu_dir.is_dir()
    }

    /// Where processes and threads are counted on v1: the cpuacct tree, because there (unlike in
    /// memory/cpuset) SLURM 22.05's slurmstepd is not a member, so the counts and the summed
    /// `/proc/<pid>/io` are those of the job's own processes. Falls back to the memory tree when
    /// the site has no cpuacct job cgroup (e.g. `JobAcctGatherType=jobacct_gather/linux`).
    fn members_tree(&self) -> &Path {
        match self.version {
            CgroupVersion::V1 if !self.cpu_dir.is_dir() => &self.memory_dir,
            _ => &self.cpu_dir,
        }
    }

    fn read_v1(
        &self,
        proc_root: &Path,
        io: Option<&mut IoAccumulator>,
        p: &mut Problems,
    ) -> Snapshot {
        let (cpu, mem) = (&self.cpu_dir, &self.memory_dir);
        // Core files: the cgroup is gone only when both controllers' directories are, since a
        // site may have no cpuacct job cgroup at all.
        let usage = v1::read_cpuacct_usage_ns(cpu);
        let mem_usage = v1::read_memory_usage_in_bytes(mem);
        if is_gone(&usage) && is_gone(&mem_usage) {
            return Snapshot {
                gone: true,
                ..Snapshot::default()
            };
        }
        let mut r = Reading {
            cpu_usage_ns: p.val(usage),
            cpu_user_ns: p.val(v1::read_cpuacct_usage_user_ns(cpu)),
            cpu_system_ns: p.val(v1::read_cpuacct_usage_sys_ns(cpu)),
            mem_current_bytes: p.val(mem_usage),
            mem_peak_bytes: p.val(v1::read_memory_max_usage_in_bytes(mem)),
            mem_limit_bytes: p.val(v1::read_memory_limit_in_bytes(mem)).flatten(),
            mem_failcnt: p.val(v1::read_memory_failcnt(mem)),
            ..Reading::default()
        };
        let percpu_ns = p.val(v1::read_cpuacct_usage_percpu_ns(cpu));

        let ms = p.keyed(v1::memory_stat_v1(mem));
        r.mem_rss_bytes = ms.total_rss_bytes;
        r.mem_cache_bytes = ms.total_cache_bytes;
        r.mem_shmem_bytes = ms.total_shmem_bytes;
        r.mem_mapped_file_bytes = ms.total_mapped_file_bytes;
        r.mem_swap_bytes = ms.total_swap_bytes;
        // v1's oom_kill counter is NOT hierarchical: SLURM sets the same limit on the job and step
        // cgroups, and the kill is counted in the step's (or task's) memcg that hit it. Sum the subtree.
        r.mem_oom_kill_events = p
            .keyed(v1::memory_oom_control(mem))
            .oom_kill
            .map(|own| own + v1_descendant_oom_kills(mem));

        let members = walk_members(self.members_tree(), Some(v1::TASKS), p).unwrap_or_default();
        r.tasks = members.processes;
        r.threads = members.threads;
        set_io(&mut r, process_io(proc_root, &members.pids, io));
        Snapshot {
            reading: r,
            percpu_ns,
            gone: false,
        }
    }

    fn read_v2(
        &self,
        proc_root: &Path,
        io: Option<&mut IoAccumulator>,
        p: &mut Problems,
    ) -> Snapshot {
        let dir = &self.cpu_dir;
        // cpu.stat exists in every non-root v2 cgroup, controller enabled or not.
        let cpu_stat = v2::cpu_stat(dir);
        if matches!(&cpu_stat, Err(e) if e.is_gone()) {
            return Snapshot {
                gone: true,
                ..Snapshot::default()
            };
        }
        let cs = p.keyed(cpu_stat);
        let ms = p.keyed(v2::memory_stat_v2(dir));
        let ev = p.keyed(v2::memory_events(dir));
        let mut r = Reading {
            cpu_usage_ns: cs.usage_usec.and_then(|u| u.checked_mul(1000)),
            cpu_user_ns: cs.user_usec.and_then(|u| u.checked_mul(1000)),
            cpu_system_ns: cs.system_usec.and_then(|u| u.checked_mul(1000)),
            cpu_throttled_usec: cs.throttled_usec,
            cpu_nr_throttled: cs.nr_throttled,
            mem_current_bytes: p.val(v2::read_memory_current_bytes(dir)),
            mem_peak_bytes: p.val(v2::read_memory_peak_bytes(dir)),
            mem_limit_bytes: p.val(v2::read_memory_max_bytes(dir)).flatten(),
            mem_rss_bytes: ms.anon_bytes,
            mem_cache_bytes: ms.file_bytes,
            mem_shmem_bytes: ms.shmem_bytes,
            mem_mapped_file_bytes: ms.file_mapped_bytes,
            mem_swap_bytes: p.val(v2::read_memory_swap_current_bytes(dir)),
            mem_oom_events: ev.oom,
            mem_oom_kill_events: ev.oom_kill,
            mem_high_events: ev.high,
            mem_max_events: ev.max,
            ..Reading::default()
        };
        let cpu_psi = p.keyed(v2::pressure(dir, v2::CPU_PRESSURE));
        let mem_psi = p.keyed(v2::pressure(dir, v2::MEMORY_PRESSURE));
        let io_psi = p.keyed(v2::pressure(dir, v2::IO_PRESSURE));
        r.psi_cpu_some_usec = cpu_psi.some_total_usec;
        r.psi_mem_some_usec = mem_psi.some_total_usec;
        r.psi_mem_full_usec = mem_psi.full_total_usec;
        r.psi_io_some_usec = io_psi.some_total_usec;

        // pids.current counts threads (the pids controller limits tasks); without the pids
        // controller, count cgroup.threads over the subtree instead.
        let pids_current = p.val(v2::read_pids_current(dir));
        let threads_file = if pids_current.is_some() {
            None
        } else {
            Some(v2::CGROUP_THREADS)
        };
        let members = walk_members(dir, threads_file, p).unwrap_or_default();
        r.tasks = members.processes;
        r.threads = pids_current.or(members.threads);

        match v2::io_stat(dir) {
            // Without the io controller there is no io.stat: fall back to /proc/<pid>/io, as on v1.
            Err(e) if e.is_absent() => set_io(&mut r, process_io(proc_root, &members.pids, io)),
            res => {
                let st = p.keyed(res);
                r.io_read_bytes = st.rbytes;
                r.io_write_bytes = st.wbytes;
                r.io_read_ops = st.rios;
                r.io_write_ops = st.wios;
            }
        }
        Snapshot {
            reading: r,
            percpu_ns: None,
            gone: false,
        }
    }
}

fn is_gone<T>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(e) if e.is_gone())
}

fn process_io(proc_root: &Path, pids: &[u32], acc: Option<&mut IoAccumulator>) -> IoTotals {
    match acc {
        Some(acc) => acc.sample(proc_root, pids),
        None => crate::procio::sum_live(proc_root, pids),
    }
}

fn set_io(r: &mut Reading, t: IoTotals) {
    r.io_read_bytes = t.read_bytes;
    r.io_write_bytes = t.write_bytes;
    r.io_read_ops = t.read_ops;
    r.io_write_ops = t.write_ops;
}

/// Problems met while assembling a snapshot. Absent values (gone, unsupported) are not problems.
#[derive(Debug, Default)]
struct Problems(Vec<Error>);

impl Problems {
    fn record(&mut self, e: Error) {
        if !e.is_absent() {
            self.0.push(e);
        }
    }
    fn val<T>(&mut self, r: Result<T, Error>) -> Option<T> {
        r.map_err(|e| self.record(e)).ok()
    }
    /// The fields of a keyed file that parsed (all `None` if the file could not be read).
    fn keyed<T: Default>(&mut self, r: Result<Lenient<T>, Error>) -> T {
        match r {
            Ok(l) => {
                if let Some(e) = l.malformed {
                    self.record(e);
                }
                l.value
            }
            Err(e) => {
                self.record(e);
                T::default()
            }
        }
    }
}

/// A keyed file read leniently: every field that parsed, plus the malformed-line error if any.
#[derive(Debug)]
pub struct Lenient<T> {
    pub value: T,
    pub malformed: Option<Error>,
}

impl<T> Lenient<T> {
    /// The value only if the whole file parsed.
    pub fn strict(self) -> Result<T, Error> {
        match self.malformed {
            None => Ok(self.value),
            Some(e) => Err(e),
        }
    }
}

/// Buffers above this size are dropped after use rather than kept for the thread's lifetime.
const MAX_KEPT_BUFFER: usize = 1 << 20;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Reads the whole file and hands its text to `f`, reusing a per-thread buffer. `read_to_end`
/// loops until `read` returns 0, which matters on kernfs: a short read is not EOF (below's
/// `read_kern_file_to_internal_buffer` explains why).
fn with_text<R>(path: &Path, f: impl FnOnce(&str) -> R) -> Result<R, Error> {
    fn read_into<R>(path: &Path, buf: &mut Vec<u8>, f: impl FnOnce(&str) -> R) -> Result<R, Error> {
        buf.clear();
        let res = File::open(path).and_then(|mut file| file.read_to_end(buf));
        let out = match res {
            Err(e) => Err(Error::from_io(path, e)),
            Ok(_) => match std::str::from_utf8(buf) {
                Ok(text) => Ok(f(text)),
                Err(_) => Err(Error::malformed(path, "<not UTF-8>")),
            },
        };
        if buf.capacity() > MAX_KEPT_BUFFER {
            *buf = Vec::new();
        }
        out
    }
    let mut f = Some(f);
    let shared = SCRATCH.try_with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => f.take().map(|f| read_into(path, &mut buf, f)),
        Err(_) => None,
    });
    match (shared, f) {
        (Ok(Some(out)), _) => out,
        // Thread-local unavailable (thread teardown) or already borrowed: use a fresh buffer.
        (_, Some(f)) => read_into(path, &mut Vec::new(), f),
        (_, None) => Err(Error::malformed(path, "<internal: reader lost>")),
    }
}

/// Reads a single-value file with `parse`.
pub(crate) fn read_single<T>(
    path: &Path,
    parse: fn(&str) -> Result<T, parse::BadLine>,
) -> Result<T, Error> {
    with_text(path, parse)?.map_err(|b| Error::malformed(path, &b.0))
}

/// Reads a keyed file with `parse`, keeping the fields that parsed.
pub(crate) fn read_keyed<T>(
    path: &Path,
    parse: fn(&str) -> parse::Parsed<T>,
) -> Result<Lenient<T>, Error> {
    let parsed = with_text(path, parse)?;
    Ok(Lenient {
        value: parsed.value,
        malformed: parsed.bad_line.map(|b| Error::malformed(path, &b.0)),
    })
}

/// Appends the ids of an id-per-line file to `out`; returns how many were appended.
pub(crate) fn read_ids_into(path: &Path, out: &mut Vec<u32>) -> Result<usize, Error> {
    let before = out.len();
    with_text(path, |t| parse::parse_id_list(t, out))?.map_err(|b| Error::malformed(path, &b.0))?;
    Ok(out.len() - before)
}

/// `cgroup.procs` (v1 and v2): process ids in this cgroup only (not descendants).
pub fn read_cgroup_procs(dir: &Path) -> Result<Vec<u32>, Error> {
    let mut v = Vec::new();
    read_ids_into(&dir.join(CGROUP_PROCS), &mut v)?;
    Ok(v)
}

pub const CGROUP_PROCS: &str = "cgroup.procs";

/// Sum of `oom_kill` in the `memory.oom_control` of every descendant of `dir` (not `dir` itself),
/// bounded like [`walk_members`]. Unreadable or vanished sub-cgroups count as 0.
fn v1_descendant_oom_kills(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    let mut visited = 0usize;
    while let Some((d, depth)) = stack.pop() {
        if depth > 0 {
            if let Ok(oc) = v1::memory_oom_control(&d) {
                total = total.saturating_add(oc.value.oom_kill.unwrap_or(0));
            }
        }
        visited += 1;
        if depth >= MAX_WALK_DEPTH || visited >= MAX_WALK_CGROUPS {
            continue;
        }
        if let Ok(rd) = fs::read_dir(&d) {
            for ent in rd.flatten() {
                if ent.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((ent.path(), depth + 1));
                }
            }
        }
    }
    total
}

/// Deepest descendant level walked (SLURM uses at most 3 below the job: `step/user/task_N`).
pub const MAX_WALK_DEPTH: usize = 8;
/// Most cgroups visited per walk. Past it the counts are lower bounds (a job with thousands of
/// sub-cgroups is not something SLURM creates).
pub const MAX_WALK_CGROUPS: usize = 4096;

/// Processes and threads of a cgroup subtree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Members {
    pids: Vec<u32>,
    /// Sum of `cgroup.procs` lines; `None` if some sub-cgroup's file could not be read.
    processes: Option<u64>,
    /// Sum of the thread-file lines when one was asked for.
    threads: Option<u64>,
}

/// Walks `dir` and its descendants (bounded by [`MAX_WALK_DEPTH`] and [`MAX_WALK_CGROUPS`]),
/// collecting `cgroup.procs` and counting `threads_file` lines. A sub-cgroup removed during the
/// walk (a step ending) is skipped; `dir` itself being gone is an error.
fn walk_members(
    dir: &Path,
    threads_file: Option<&str>,
    p: &mut Problems,
) -> Result<Members, Error> {
    let mut m = Members {
        pids: Vec::new(),
        processes: Some(0),
        threads: threads_file.map(|_| 0),
    };
    let mut scratch = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    let mut visited = 0usize;
    while let Some((d, depth)) = stack.pop() {
        visited += 1;
        match read_ids_into(&d.join(CGROUP_PROCS), &mut m.pids) {
            Ok(n) => m.processes = m.processes.and_then(|c| c.checked_add(n as u64)),
            Err(e) if depth == 0 && e.is_absent() => return Err(e),
            Err(e) if e.is_absent() => continue,
            Err(e) => {
                p.record(e);
                m.processes = None;
            }
        }
        if let Some(file) = threads_file {
            scratch.clear();
            match read_ids_into(&d.join(file), &mut scratch) {
                Ok(n) => m.threads = m.threads.and_then(|c| c.checked_add(n as u64)),
                Err(e) if e.is_absent() => {}
                Err(e) => {
                    p.record(e);
                    m.threads = None;
                }
            }
        }
        if depth >= MAX_WALK_DEPTH {
            continue;
        }
        let entries = match fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) => {
                p.record(Error::from_io(&d, e));
                continue;
            }
        };
        for ent in entries.flatten() {
            if visited + stack.len() >= MAX_WALK_CGROUPS {
                break;
            }
            if ent.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((ent.path(), depth + 1));
            }
        }
    }
    Ok(m)
}
