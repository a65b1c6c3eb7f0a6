//! cgroup discovery and readers (v1, v2, hybrid).
//!
//! - [`locate`] finds a job's cgroup directories from the text of `/proc/<pid>/cgroup` and a
//!   cgroup mount root (a parameter, so fixture trees work). Which path component is the job's
//!   directory is the caller's to say (the scheduler's naming; the plugin's is in
//!   `plugin/src/scope.rs`), so nothing here knows a scheduler's conventions.
//! - [`JobCgroupReader`] reads a job cgroup sample after sample through descriptors it keeps
//!   open (the sampler's reader); [`JobCgroup::read`] / [`JobCgroup::read_detailed`] are one
//!   read through a reader made for it. Both assemble a [`Snapshot`] ([`jobscope_model::sample::Reading`]).
//! - [`v1`] and [`v2`] hold one typed read function per control file (one open + read each); [`parse`]
//!   the pure parsers.
//!
//! Rules every reader follows: a value the kernel does not give is `None`, never 0; "file or
//! cgroup gone" (`ENOENT`/`ENODEV`) is [`Error::Gone`], not a failure; malformed content is
//! [`Error::Malformed`] with the path; nothing panics on any file content.
//!
//! Dependencies point one way: this module uses [`crate::procio`] (the per-process I/O sums and
//! the error type), never the reverse.
use crate::procio::kfile::{self, ReadBuf};
use jobscope_model::sample::Reading;
use std::cell::RefCell;
use std::path::{Component, Path, PathBuf};

pub mod parse;
mod reader;
#[cfg(test)]
mod tests;
pub mod v1;
pub mod v2;

pub use crate::procio::Error;
pub use parse::{CpuStatV2, IoStatV2, MemEventsV2, MemStatV1, MemStatV2, OomControlV1, Pressure};
pub use reader::{JobCgroupReader, MAX_KEPT_CGROUP_FDS, MAX_WALK_CGROUPS, MAX_WALK_DEPTH};

pub(crate) use jobscope_model::sample::{CgroupVersion, IoSource};

/// Where one job's (or step's) cgroup lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCgroup {
    pub version: CgroupVersion,
    /// v1: `<root>/cpuacct/<rel>`; v2: `<root>/<rel>` (or `<root>/unified/<rel>` on hybrid).
    pub cpu_dir: PathBuf,
    /// v1: `<root>/memory/<rel>`; v2 same as `cpu_dir`.
    pub memory_dir: PathBuf,
}

/// The result of reading one cgroup.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub reading: Reading,
    /// v1 `cpuacct.usage_percpu` (ns per CPU), for `cpus_active`. Filled by the one-shot reads;
    /// a [`JobCgroupReader`] keeps it in place instead ([`JobCgroupReader::percpu_ns`]).
    pub percpu_ns: Option<Vec<u64>>,
    /// The cgroup directory is gone (ENOENT/ENODEV on its core file).
    pub gone: bool,
}

/// v1 controllers whose `/proc/<pid>/cgroup` line locates the job, in order of preference.
/// A job's supervising process may sit in the memory/cpuset cgroup of one of the job's
/// sub-cgroups and in the freezer cgroup of the job, but at `/` in cpuacct (SLURM 22.05's
/// slurmstepd does), so the cpuacct line is the last resort.
pub const V1_LOCATING_CONTROLLERS: [&str; 4] = ["memory", "freezer", "cpuset", "cpuacct"];

/// Finds a job's cgroup from the text of `/proc/<pid>/cgroup` of a process inside it, under
/// `cgroup_root` (normally `/sys/fs/cgroup`). `is_scope_dir` says which path component names
/// the job's directory (a scheduler's job directory); the path is cut right after the first
/// component it accepts, so any prefix above it and any sub-cgroups below it work. Returns
/// `None` when no line's path has such a component.
///
/// v1: the relative path comes from the memory line (or freezer, cpuset, cpuacct, see
/// [`V1_LOCATING_CONTROLLERS`]); `cpu_dir` is `<root>/cpuacct/<rel>` with the cpuacct line's own
/// path when it names the job, else the same `<rel>`.
///
/// v2: from the `0::` line. Pure v2 mounts the hierarchy at `<root>`; a hybrid host (v1 lines
/// present too, e.g. `1:name=systemd:`) at `<root>/unified`. When only the other of the two
/// candidate directories exists, that one is used.
///
/// A path with a `.` or `..` component before the job's directory is refused (`None`): the text
/// should come from the kernel, but a path must never climb out of the cgroup root.
pub fn locate(
    proc_cgroup: &str,
    cgroup_root: &Path,
    is_scope_dir: &dyn Fn(&str) -> bool,
) -> Option<JobCgroup> {
    let lines = parse::parse_proc_cgroup(proc_cgroup);
    let rel_for = |controller: &str| {
        lines
            .iter()
            .filter(|l| l.has_controller(controller))
            .find_map(|l| scope_rel(l.path, is_scope_dir))
    };

    if let Some(rel) = V1_LOCATING_CONTROLLERS.iter().find_map(|c| rel_for(c)) {
        let cpu_rel = rel_for("cpuacct").unwrap_or_else(|| rel.clone());
        return Some(JobCgroup {
            version: CgroupVersion::V1,
            cpu_dir: cgroup_root.join("cpuacct").join(&cpu_rel),
            memory_dir: cgroup_root.join("memory").join(&rel),
        });
    }

    let rel = lines
        .iter()
        .filter(|l| l.is_unified())
        .find_map(|l| scope_rel(l.path, is_scope_dir))?;
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
    })
}

/// `"/a/b/J/c/d"` with `J` accepted → `"a/b/J"`. `None` if no component is accepted, or if a
/// component before it is `.`/`..`.
fn scope_rel(path: &str, is_scope_dir: &dyn Fn(&str) -> bool) -> Option<String> {
    let mut rel = PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            Component::RootDir => {}
            Component::Normal(n) => {
                rel.push(n);
                if n.to_str().is_some_and(is_scope_dir) {
                    return rel.into_os_string().into_string().ok();
                }
            }
            _ => return None,
        }
    }
    None
}

impl JobCgroup {
    /// The child cgroup named `dir_name` (one step of the job, for instance).
    pub fn step(&self, dir_name: &str) -> JobCgroup {
        JobCgroup {
            version: self.version,
            cpu_dir: self.cpu_dir.join(dir_name),
            memory_dir: self.memory_dir.join(dir_name),
        }
    }

    /// Where this cgroup's readers take I/O from: `io.stat` on v2 when the io controller is
    /// enabled for it (the file exists; its parent's `cgroup.subtree_control` decides, when the
    /// cgroup is made), else the sum of `/proc/<pid>/io` (always on v1). The reader makes the same
    /// choice at every sample (an absent `io.stat` falls back to `/proc`).
    pub fn io_source(&self) -> IoSource {
        match self.version {
            CgroupVersion::V2 if self.cpu_dir.join(v2::IO_STAT).is_file() => IoSource::IoStat,
            _ => IoSource::Proc,
        }
    }

    /// A reader that keeps this cgroup's descriptors open across samples; `proc_root` is
    /// normally `/proc`.
    pub fn reader(&self, proc_root: &Path) -> JobCgroupReader {
        JobCgroupReader::new(self.clone(), proc_root.to_path_buf())
    }

    /// Reads every file once into a [`Snapshot`]; I/O of processes is summed from `proc_root`
    /// (normally `/proc`) on v1. Never panics; unreadable values are `None`.
    ///
    /// Stateless: on v1 the I/O counters are the sum over the processes alive now, so they drop
    /// when a process exits. The sampler uses one [`JobCgroupReader`] per cgroup it follows.
    pub fn read(&self, proc_root: &Path) -> Snapshot {
        self.read_detailed(proc_root).0
    }

    /// Like [`JobCgroup::read`], also returning the problems met (malformed files,
    /// permission errors) so the caller can log them. Absent files and vanished
    /// cgroups/processes are not problems.
    pub fn read_detailed(&self, proc_root: &Path) -> (Snapshot, Vec<Error>) {
        let mut r = self.reader(proc_root);
        let mut snap = r.sample();
        snap.percpu_ns = r.percpu_ns().map(<[u64]>::to_vec);
        (snap, r.take_problems())
    }

    /// The pids of every process in the cgroup and its descendants (v1: the cpuacct tree when it
    /// exists, where processes are counted, see [`JobCgroupReader`]).
    pub fn processes(&self) -> Result<Vec<u32>, Error> {
        let tree = match self.version {
            CgroupVersion::V1 if !self.cpu_dir.is_dir() => &self.memory_dir,
            _ => &self.cpu_dir,
        };
        reader::tree_pids(tree, self.version)
    }

    pub fn exists(&self) -> bool {
        self.memory_dir.is_dir() || self.cpu_dir.is_dir()
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

thread_local! {
    static SCRATCH: RefCell<ReadBuf> = RefCell::new(ReadBuf::new());
}

/// Reads the whole file (open, read, close) and hands its text to `f`, reusing a per-thread
/// buffer: it is taken out while in use, so a nested call (or one during thread teardown) just
/// gets a fresh one.
fn with_text<R>(path: &Path, f: impl FnOnce(Result<&str, Error>) -> R) -> R {
    let mut buf = SCRATCH.try_with(RefCell::take).unwrap_or_default();
    let out = f(kfile::read_path(path, &mut buf));
    buf.shrink();
    let _ = SCRATCH.try_with(|c| c.replace(buf));
    out
}

/// Reads a single-value file with `parse`.
pub(crate) fn read_single<T>(
    path: &Path,
    parse: fn(&str) -> Result<T, parse::BadLine>,
) -> Result<T, Error> {
    with_text(path, |t| reader::single(t, path, parse))
}

/// Reads a keyed file with `parse`, keeping the fields that parsed.
pub(crate) fn read_keyed<T>(
    path: &Path,
    parse: fn(&str) -> parse::Parsed<T>,
) -> Result<Lenient<T>, Error> {
    with_text(path, |t| reader::keyed(t, path, parse))
}

/// Appends the ids of an id-per-line file to `out`; returns how many were appended.
pub(crate) fn read_ids_into(path: &Path, out: &mut Vec<u32>) -> Result<usize, Error> {
    let before = out.len();
    with_text(path, |t| {
        parse::parse_id_list(t?, out).map_err(|b| Error::malformed(path, &b.0))
    })?;
    Ok(out.len() - before)
}

/// `cgroup.procs` (v1 and v2): process ids in this cgroup only (not descendants).
pub fn read_cgroup_procs(dir: &Path) -> Result<Vec<u32>, Error> {
    let mut v = Vec::new();
    read_ids_into(&dir.join(CGROUP_PROCS), &mut v)?;
    Ok(v)
}

pub const CGROUP_PROCS: &str = "cgroup.procs";
