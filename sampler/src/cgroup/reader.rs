//! [`JobCgroupReader`]: reads one job cgroup sample after sample through descriptors kept open.
//!
//! Created once per job (the sampler's) or for one read ([`JobCgroup::read`]). It opens the
//! job's control files once and reads them with `pread` into one reused buffer, parses them with
//! the pure parsers of [`super::parse`], keeps the sub-cgroup tree (steps, tasks) and each
//! process's `/proc/<pid>/io` open too, and allocates nothing per sample while no process and no
//! sub-cgroup comes or goes.
//!
//! - **Gone.** A kept cgroupfs descriptor of a removed cgroup answers `ENODEV`, which
//!   [`Error::from_io`] calls `Gone`, as it does `ENOENT`/`ESRCH`. On plain files (fixture trees)
//!   the job directory's link count drops to 0 instead; both mean "the cgroup is gone".
//! - **Sub-cgroups.** A directory's link count is 2 + its subdirectories (on cgroupfs too), so
//!   one `fstat` per kept directory tells whether a step or task cgroup came or went; only then
//!   is the tree listed again. A sub-cgroup removed between two samples also answers `ENODEV`.
//! - **v1 pid lists: kept once the kernel's cached list has expired.** cgroup v1 serves
//!   `cgroup.procs`/`tasks` from a pid list built at the first read after an open and kept,
//!   per cgroup and file type, until 1 s after the last read of it (`CGROUP_PIDLIST_DESTROY_DELAY`
//!   in the kernel's cgroup-v1 code). A kept descriptor read again within that second shows the
//!   old list; read again later it finds the list destroyed and builds a new one. So on a real
//!   v1 hierarchy ([`CgroupFs::V1`], asked once per directory with `fstatfs`) a pid list read
//!   less than [`PIDLIST_REUSE_AFTER`] after the previous read of the same descriptor is opened
//!   afresh (relative to the kept directory descriptor; the new descriptor is kept in place of the
//!   old), and read through the kept descriptor otherwise. At the sampler's cadence (4 s and more
//!   after the first second) every read is a kept-descriptor `pread`. Checked on this project's
//!   test host (kernel 6.18, cgroup v1) by `reader_v1_pid_lists_see_new_processes_at_both_paces`
//!   in `sampler/src/cgroup/tests.rs`. One caveat: the cached list is shared by every reader of the
//!   same file, so another program re-reading it through its own kept descriptor more often than
//!   once a second would keep an old list alive; opening it afresh (as the reopen path and the
//!   one-shot reads do) rebuilds it for everyone. v2 restarts its process iterator at offset 0 on
//!   every read, and plain files (fixture trees) have no cache: there pid lists are always kept.
//! - **Bounded.** Descriptors kept: at most [`MAX_KEPT_CGROUP_FDS`] and an eighth of
//!   `RLIMIT_NOFILE` (the per-process `io` files have their own bound, see [`IoAccumulator`]).
//!   Past it, files are opened for each read. The tree walk stops at [`MAX_WALK_DEPTH`] levels
//!   and [`MAX_WALK_CGROUPS`] cgroups.
use super::parse::{self, BadLine, Parsed};
use super::{v1, v2, CgroupVersion, JobCgroup, Lenient, Snapshot, CGROUP_PROCS};
use crate::procio::kfile::{self, CgroupFs, KernelFile, ReadBuf};
use crate::procio::{Error, IoAccumulator, IoTotals};
use jobscope_model::sample::Reading;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// On cgroup v1, a pid list is read through its kept descriptor only when the previous read of
/// that descriptor ended at least this long ago: the kernel destroys its cached list 1 s after
/// the last read, so the kept descriptor then gets a list built afresh (see the module docs).
pub const PIDLIST_REUSE_AFTER: Duration = Duration::from_millis(1500);

/// Deepest descendant level walked (SLURM uses at most 3 below the job: `step/user/task_N`).
pub const MAX_WALK_DEPTH: usize = 8;
/// Most cgroups visited per walk. Past it the counts are lower bounds (a job with thousands of
/// sub-cgroups is not something SLURM creates).
pub const MAX_WALK_CGROUPS: usize = 4096;
/// Most cgroupfs descriptors one reader keeps open.
pub const MAX_KEPT_CGROUP_FDS: usize = 512;

/// How many descriptors a reader may still keep.
#[derive(Debug, Clone, Copy)]
struct Allowance(usize);

impl Allowance {
    fn take(&mut self) -> bool {
        if self.0 == 0 {
            return false;
        }
        self.0 -= 1;
        true
    }
}

/// One control file of the job directory.
#[derive(Debug)]
enum Slot {
    Open(KernelFile),
    /// Not there (older kernel, controller off) or refused (`EOPNOTSUPP`): `None`, no problem,
    /// not asked again until the tree is listed again.
    Absent(PathBuf),
    /// Could not be opened for another reason: tried again, and reported, at each sample.
    Failed(PathBuf),
}

impl Slot {
    fn open(path: PathBuf, fds: &mut Allowance) -> Slot {
        match KernelFile::open(path.clone(), fds.0 > 0) {
            Ok(f) => {
                if f.is_kept() {
                    fds.take();
                }
                Slot::Open(f)
            }
            Err(e) if e.is_absent() => Slot::Absent(path),
            Err(_) => Slot::Failed(path),
        }
    }

    fn path(&self) -> &Path {
        match self {
            Slot::Open(f) => f.path(),
            Slot::Absent(p) | Slot::Failed(p) => p,
        }
    }

    /// Reads the file; `Ok(None)` when absent.
    fn read<'b>(&mut self, buf: &'b mut ReadBuf) -> Result<Option<&'b str>, Error> {
        if let Slot::Failed(p) = self {
            // Not kept: the allowance is not at hand here, and this is the rare case.
            *self = Slot::Open(KernelFile::open(p.clone(), false)?);
        }
        match self {
            Slot::Open(f) => match f.read(buf) {
                Ok(t) => Ok(Some(t)),
                Err(Error::Unsupported { .. }) => {
                    *self = Slot::Absent(f.path().to_path_buf());
                    Ok(None)
                }
                Err(e) => Err(e),
            },
            _ => Ok(None),
        }
    }
}

/// Maps a single-value file's text to its value (the path goes into the error).
pub(crate) fn single<T>(
    text: Result<&str, Error>,
    path: &Path,
    parse: fn(&str) -> Result<T, BadLine>,
) -> Result<T, Error> {
    parse(text?).map_err(|b| Error::malformed(path, &b.0))
}

/// Maps a keyed file's text to the fields that parsed, plus the malformed line if any.
pub(crate) fn keyed<T>(
    text: Result<&str, Error>,
    path: &Path,
    parse: fn(&str) -> Parsed<T>,
) -> Result<Lenient<T>, Error> {
    let parsed = parse(text?);
    Ok(Lenient {
        value: parsed.value,
        malformed: parsed.bad_line.map(|b| Error::malformed(path, &b.0)),
    })
}

/// Problems met in one sample. Absent values (gone, unsupported) are not problems.
#[derive(Debug, Default)]
struct Problems(Vec<Error>);

impl Problems {
    fn record(&mut self, e: Error) {
        if !e.is_absent() {
            self.0.push(e);
        }
    }
    fn val<T>(&mut self, r: Result<Option<T>, Error>) -> Option<T> {
        r.map_err(|e| self.record(e)).ok().flatten()
    }
    fn keyed<T: Default>(&mut self, r: Result<Option<Lenient<T>>, Error>) -> T {
        match r {
            Ok(Some(l)) => {
                if let Some(e) = l.malformed {
                    self.record(e);
                }
                l.value
            }
            Ok(None) => T::default(),
            Err(e) => {
                self.record(e);
                T::default()
            }
        }
    }
}

/// Reads a slot and parses a single value: `Ok(None)` when the file is absent.
fn read_single<T>(
    slot: &mut Slot,
    buf: &mut ReadBuf,
    parse: fn(&str) -> Result<T, BadLine>,
) -> Result<Option<T>, Error> {
    match slot.read(buf)? {
        Some(t) => single(Ok(t), slot.path(), parse).map(Some),
        None => Ok(None),
    }
}

/// Reads a slot and parses a keyed file.
fn read_keyed<T>(
    slot: &mut Slot,
    buf: &mut ReadBuf,
    parse: fn(&str) -> Parsed<T>,
) -> Result<Option<Lenient<T>>, Error> {
    match slot.read(buf)? {
        Some(t) => keyed(Ok(t), slot.path(), parse).map(Some),
        None => Ok(None),
    }
}

/// One file of a sub-cgroup (`cgroup.procs`, `tasks`/`cgroup.threads`, `memory.oom_control`).
#[derive(Debug)]
struct NodeFile {
    name: &'static str,
    path: PathBuf,
    kept: Option<File>,
    opened: bool,
    /// Read in the last sample (for [`JobCgroupReader::files`]).
    used: bool,
    /// Times a kept descriptor was replaced by a fresh open (cgroup v1 pid lists read again
    /// sooner than [`PIDLIST_REUSE_AFTER`]).
    reopened: u64,
    /// When the last read through `kept` ended (cgroup v1 pid lists only).
    last_read: Option<Instant>,
}

impl NodeFile {
    fn new(dir: &Path, name: &'static str) -> NodeFile {
        NodeFile {
            name,
            path: dir.join(name),
            kept: None,
            opened: false,
            used: false,
            reopened: 0,
            last_read: None,
        }
    }

    /// Opens the file, relative to `dir` when the directory is kept.
    fn open(&self, dir: Option<&File>) -> Result<File, Error> {
        match dir {
            Some(d) => kfile::open_at(d, self.name, &self.path),
            None => kfile::open_file(&self.path),
        }
    }

    /// Reads the file through a descriptor kept from the first read when the allowance permits
    /// (else opened for this read). `cached`: a cgroup v1 pid list, whose kept descriptor is
    /// only read again [`PIDLIST_REUSE_AFTER`] after its previous read; sooner, the file is
    /// opened afresh and the new descriptor kept instead.
    fn read<'b>(
        &mut self,
        dir: Option<&File>,
        cached: bool,
        fds: &mut Allowance,
        kept: &mut usize,
        buf: &'b mut ReadBuf,
    ) -> Result<&'b str, Error> {
        self.used = true;
        if !self.opened && fds.0 > 0 {
            let f = self.open(dir)?;
            fds.take();
            *kept += 1;
            self.kept = Some(f);
            self.opened = true;
        } else if cached
            && self.kept.is_some()
            && self
                .last_read
                .is_none_or(|t| t.elapsed() < PIDLIST_REUSE_AFTER)
        {
            // Replaced in place: the allowance and the tree's count stay as they are.
            self.kept = Some(self.open(dir)?);
            self.reopened += 1;
        }
        let text = match &self.kept {
            Some(f) => buf.read_all(f, &self.path),
            None => kfile::read_path(&self.path, buf),
        };
        if cached && self.kept.is_some() {
            // Taken after the read, so the pause counted is never longer than the real one.
            self.last_read = Some(Instant::now());
        }
        text
    }
}

/// One cgroup of a job's tree (the job directory is node 0).
#[derive(Debug)]
struct Node {
    path: PathBuf,
    depth: usize,
    dir: Option<File>,
    nlink: u64,
    /// A real cgroup v1 directory: its pid lists come from the kernel's cache.
    pidlist_cache: bool,
    procs: NodeFile,
    threads: NodeFile,
    oom: NodeFile,
}

/// What a tree read collects.
#[derive(Debug, Clone, Copy)]
struct Want {
    procs: bool,
    /// `tasks` (v1) or `cgroup.threads` (v2): lines counted as threads.
    threads: bool,
    /// v1 `memory.oom_control` `oom_kill` of every descendant (not the root).
    oom: bool,
}

/// What a tree read found.
#[derive(Debug, Clone, Copy)]
struct Members {
    /// Sum of `cgroup.procs` lines; `None` if some sub-cgroup's file could not be read.
    processes: Option<u64>,
    /// Sum of the thread-file lines.
    threads: Option<u64>,
    /// Sum of descendants' `oom_kill` (unreadable ones count 0).
    oom_kills_below: u64,
}

/// A job cgroup directory and its descendants, listed once and again only when a directory's
/// link count says that a child came or went.
#[derive(Debug)]
struct Tree {
    root: PathBuf,
    version: CgroupVersion,
    nodes: Vec<Node>,
    /// Descriptors this tree keeps open.
    kept: usize,
    /// List the directories again before the next read.
    stale: bool,
    /// The root directory is gone.
    root_gone: bool,
    /// Pid-list reopens of the nodes dropped by earlier listings.
    reopened_before: u64,
}

impl Tree {
    fn new(root: PathBuf, version: CgroupVersion) -> Tree {
        Tree {
            root,
            version,
            nodes: Vec::new(),
            kept: 0,
            stale: true,
            root_gone: false,
            reopened_before: 0,
        }
    }

    /// One `fstat` per directory: marks the tree stale when a directory's link count changed
    /// (a child cgroup came or went, or the filesystem does not count subdirectories), and
    /// `root_gone` when the root was removed.
    fn check(&mut self) {
        for (i, n) in self.nodes.iter().enumerate() {
            let nlink = match &n.dir {
                Some(d) => kfile::link_count(d, &n.path),
                None => std::fs::metadata(&n.path)
                    .map(|m| std::os::unix::fs::MetadataExt::nlink(&m))
                    .map_err(|e| Error::from_io(&n.path, e)),
            };
            match nlink {
                Ok(0) => {
                    if i == 0 {
                        self.root_gone = true;
                    }
                    self.stale = true;
                }
                Err(e) if e.is_gone() => {
                    if i == 0 {
                        self.root_gone = true;
                    }
                    self.stale = true;
                }
                Ok(c) if c != n.nlink || c < 2 => self.stale = true,
                _ => {}
            }
        }
    }

    /// Lists the tree again (bounded by [`MAX_WALK_DEPTH`] and [`MAX_WALK_CGROUPS`]); the
    /// descriptors it kept go back to `fds`.
    fn build(&mut self, fds: &mut Allowance, p: &mut Problems) {
        fds.0 += self.kept;
        self.kept = 0;
        self.reopened_before = self.pid_list_reopens();
        self.nodes.clear();
        self.stale = false;
        if self.root_gone {
            return;
        }
        let mut stack = vec![(self.root.clone(), 0usize)];
        while let Some((path, depth)) = stack.pop() {
            let dir = if fds.0 > 0 {
                match kfile::open_dir(&path) {
                    Ok(d) => {
                        fds.take();
                        self.kept += 1;
                        Some(d)
                    }
                    Err(e) if e.is_absent() => {
                        if depth == 0 {
                            self.root_gone = true;
                            return;
                        }
                        continue;
                    }
                    Err(e) => {
                        p.record(e);
                        None
                    }
                }
            } else {
                None
            };
            let nlink = match &dir {
                Some(d) => kfile::link_count(d, &path),
                None => std::fs::metadata(&path)
                    .map(|m| std::os::unix::fs::MetadataExt::nlink(&m))
                    .map_err(|e| Error::from_io(&path, e)),
            };
            let nlink = match nlink {
                Ok(n) => n,
                Err(e) if e.is_absent() => {
                    if depth == 0 {
                        self.root_gone = true;
                        return;
                    }
                    continue;
                }
                Err(_) => 0,
            };
            if depth < MAX_WALK_DEPTH {
                match std::fs::read_dir(&path) {
                    Ok(rd) => {
                        for ent in rd.flatten() {
                            if self.nodes.len() + 1 + stack.len() >= MAX_WALK_CGROUPS {
                                break;
                            }
                            if ent.file_type().is_ok_and(|t| t.is_dir()) {
                                stack.push((ent.path(), depth + 1));
                            }
                        }
                    }
                    Err(e) => p.record(Error::from_io(&path, e)),
                }
            }
            let fs = match &dir {
                Some(d) => CgroupFs::of_file(d),
                None => CgroupFs::of_path(&path),
            };
            let (procs, threads, oom) = match self.version {
                CgroupVersion::V1 => (CGROUP_PROCS, v1::TASKS, v1::MEMORY_OOM_CONTROL),
                CgroupVersion::V2 => (CGROUP_PROCS, v2::CGROUP_THREADS, v1::MEMORY_OOM_CONTROL),
            };
            self.nodes.push(Node {
                procs: NodeFile::new(&path, procs),
                threads: NodeFile::new(&path, threads),
                oom: NodeFile::new(&path, oom),
                path,
                depth,
                dir,
                nlink,
                pidlist_cache: fs == CgroupFs::V1,
            });
        }
    }

    /// Reads what `want` asks for from every node, appending the pids to `pids`. `Err(Gone)`
    /// when the root is gone; a sub-cgroup that went away is skipped (and the tree listed
    /// again next time).
    #[allow(clippy::too_many_arguments)]
    fn read(
        &mut self,
        want: Want,
        fds: &mut Allowance,
        buf: &mut ReadBuf,
        pids: &mut Vec<u32>,
        scratch: &mut Vec<u32>,
        p: &mut Problems,
    ) -> Result<Members, Error> {
        if self.root_gone || self.nodes.is_empty() {
            return Err(Error::Gone {
                path: self.root.clone(),
            });
        }
        let mut m = Members {
            processes: want.procs.then_some(0),
            threads: want.threads.then_some(0),
            oom_kills_below: 0,
        };
        let kept = &mut self.kept;
        for n in self.nodes.iter_mut() {
            let dir = n.dir.as_ref();
            // Real cgroup v1 serves pid lists from a cache (see the module docs).
            let cached = n.pidlist_cache;
            if want.procs {
                let before = pids.len();
                let res = n.procs.read(dir, cached, fds, kept, buf).and_then(|t| {
                    parse::parse_id_list(t, pids).map_err(|b| Error::malformed(&n.procs.path, &b.0))
                });
                match res {
                    Ok(()) => {
                        let added = (pids.len() - before) as u64;
                        m.processes = m.processes.and_then(|c| c.checked_add(added));
                    }
                    Err(e) if e.is_absent() && n.depth == 0 => return Err(e),
                    Err(e) if e.is_absent() => {
                        self.stale = true;
                        continue;
                    }
                    Err(e) => {
                        p.record(e);
                        m.processes = None;
                    }
                }
            }
            if want.threads {
                scratch.clear();
                let res = n.threads.read(dir, cached, fds, kept, buf).and_then(|t| {
                    parse::parse_id_list(t, scratch)
                        .map_err(|b| Error::malformed(&n.threads.path, &b.0))
                });
                match res {
                    Ok(()) => {
                        m.threads = m.threads.and_then(|c| c.checked_add(scratch.len() as u64))
                    }
                    Err(e) if e.is_absent() => {}
                    Err(e) => {
                        p.record(e);
                        m.threads = None;
                    }
                }
            }
            if want.oom && n.depth > 0 {
                let oom = n
                    .oom
                    .read(dir, false, fds, kept, buf)
                    .map(parse::parse_oom_control_v1);
                if let Ok(parsed) = oom {
                    m.oom_kills_below = m
                        .oom_kills_below
                        .saturating_add(parsed.value.oom_kill.unwrap_or(0));
                }
            }
        }
        Ok(m)
    }

    /// Marks every node file unused (before a sample).
    fn clear_used(&mut self) {
        for n in &mut self.nodes {
            n.procs.used = false;
            n.threads.used = false;
            n.oom.used = false;
        }
    }

    /// Pid-list reopens of this tree, those of nodes listed before included.
    fn pid_list_reopens(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.procs.reopened + n.threads.reopened)
            .fold(self.reopened_before, u64::saturating_add)
    }

    fn used_files(&self, out: &mut Vec<PathBuf>) {
        for n in &self.nodes {
            for f in [&n.procs, &n.threads, &n.oom] {
                if f.used {
                    out.push(f.path.clone());
                }
            }
        }
    }
}

/// The job directory's control files, in a fixed order per version.
const V1_CPU_FILES: [&str; 4] = [
    v1::CPUACCT_USAGE,
    v1::CPUACCT_USAGE_USER,
    v1::CPUACCT_USAGE_SYS,
    v1::CPUACCT_USAGE_PERCPU,
];
const V1_MEM_FILES: [&str; 6] = [
    v1::MEMORY_USAGE_IN_BYTES,
    v1::MEMORY_MAX_USAGE_IN_BYTES,
    v1::MEMORY_LIMIT_IN_BYTES,
    v1::MEMORY_FAILCNT,
    v1::MEMORY_STAT,
    v1::MEMORY_OOM_CONTROL,
];
const V2_FILES: [&str; 12] = [
    v2::CPU_STAT,
    v2::MEMORY_CURRENT,
    v2::MEMORY_PEAK,
    v2::MEMORY_MAX,
    v2::MEMORY_STAT,
    v2::MEMORY_SWAP_CURRENT,
    v2::MEMORY_EVENTS,
    v2::CPU_PRESSURE,
    v2::MEMORY_PRESSURE,
    v2::IO_PRESSURE,
    v2::PIDS_CURRENT,
    v2::IO_STAT,
];

/// Reads one job cgroup sample after sample (see the module docs). Never panics; a value the
/// kernel does not give is `None`.
#[derive(Debug)]
pub struct JobCgroupReader {
    cgroup: JobCgroup,
    proc_root: PathBuf,
    /// Descriptors still allowed (the trees give theirs back when listed again).
    fds: Allowance,
    /// v1: [`V1_CPU_FILES`] then [`V1_MEM_FILES`]; v2: [`V2_FILES`].
    slots: Vec<Slot>,
    /// v1: the cpuacct tree (processes are counted there); v2: the job tree.
    cpu_tree: Tree,
    /// v1: the memory tree (`oom_kill` of the descendants; processes when cpuacct is gone).
    mem_tree: Option<Tree>,
    io: IoAccumulator,
    // Reused across samples.
    buf: ReadBuf,
    pids: Vec<u32>,
    scratch: Vec<u32>,
    percpu_ns: Vec<u64>,
    percpu_ok: bool,
    problems: Problems,
}

impl JobCgroupReader {
    /// Opens the job cgroup's control files; `proc_root` is normally `/proc`. Files that are
    /// absent now are `None` in every sample until a sub-cgroup comes or goes.
    pub fn new(cgroup: JobCgroup, proc_root: PathBuf) -> JobCgroupReader {
        let mut fds = Allowance(kfile::fd_allowance(8, MAX_KEPT_CGROUP_FDS));
        let slots = Self::open_slots(&cgroup, &mut fds);
        let (cpu_tree, mem_tree) = match cgroup.version {
            CgroupVersion::V1 => (
                Tree::new(cgroup.cpu_dir.clone(), CgroupVersion::V1),
                Some(Tree::new(cgroup.memory_dir.clone(), CgroupVersion::V1)),
            ),
            CgroupVersion::V2 => (Tree::new(cgroup.cpu_dir.clone(), CgroupVersion::V2), None),
        };
        JobCgroupReader {
            cgroup,
            proc_root,
            fds,
            slots,
            cpu_tree,
            mem_tree,
            io: IoAccumulator::new(),
            buf: ReadBuf::new(),
            pids: Vec::new(),
            scratch: Vec::new(),
            percpu_ns: Vec::new(),
            percpu_ok: false,
            problems: Problems::default(),
        }
    }

    fn open_slots(cg: &JobCgroup, fds: &mut Allowance) -> Vec<Slot> {
        let mut slots = Vec::with_capacity(V2_FILES.len());
        match cg.version {
            CgroupVersion::V1 => {
                for f in V1_CPU_FILES {
                    slots.push(Slot::open(cg.cpu_dir.join(f), fds));
                }
                for f in V1_MEM_FILES {
                    slots.push(Slot::open(cg.memory_dir.join(f), fds));
                }
            }
            CgroupVersion::V2 => {
                for f in V2_FILES {
                    slots.push(Slot::open(cg.cpu_dir.join(f), fds));
                }
            }
        }
        slots
    }

    pub fn cgroup(&self) -> &JobCgroup {
        &self.cgroup
    }

    /// v1 `cpuacct.usage_percpu` of the last sample (ns per CPU).
    pub fn percpu_ns(&self) -> Option<&[u64]> {
        self.percpu_ok.then_some(self.percpu_ns.as_slice())
    }

    /// The problems met in the last sample (malformed files, permission errors). Absent files
    /// and vanished cgroups/processes are not problems.
    pub fn problems(&self) -> &[Error] {
        &self.problems.0
    }

    /// Takes the problems of the last sample.
    pub fn take_problems(&mut self) -> Vec<Error> {
        std::mem::take(&mut self.problems.0)
    }

    /// The I/O accumulator (how many processes it follows, descriptors kept).
    pub fn io(&self) -> &IoAccumulator {
        &self.io
    }

    /// How many times, since the reader was made, a kept pid-list descriptor was replaced by a
    /// fresh open because the previous read was too recent (real cgroup v1 only; see the module
    /// docs).
    pub fn pid_list_reopens(&self) -> u64 {
        self.cpu_tree.pid_list_reopens() + self.mem_tree.as_ref().map_or(0, Tree::pid_list_reopens)
    }

    /// Every file the last sample read, `/proc/<pid>/io` included (the benchmark reads the same
    /// files raw to measure the floor).
    pub fn files(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .slots
            .iter()
            .filter_map(|s| match s {
                Slot::Open(f) => Some(f.path().to_path_buf()),
                _ => None,
            })
            .collect();
        self.cpu_tree.used_files(&mut out);
        if let Some(t) = &self.mem_tree {
            t.used_files(&mut out);
        }
        out.extend(self.io.kept_paths().map(Path::to_path_buf));
        out
    }

    /// Reads the cgroup once. Steady state allocates nothing: no process or sub-cgroup came or
    /// went, and no problem was met.
    pub fn sample(&mut self) -> Snapshot {
        self.problems.0.clear();
        self.pids.clear();
        self.percpu_ok = false;
        self.refresh();
        let snap = match self.cgroup.version {
            CgroupVersion::V1 => self.sample_v1(),
            CgroupVersion::V2 => self.sample_v2(),
        };
        self.buf.shrink();
        snap
    }

    /// Checks the trees and lists again those that changed; absent files are looked for again
    /// then too (a controller may have been enabled meanwhile).
    fn refresh(&mut self) {
        let mut listed = false;
        for t in std::iter::once(&mut self.cpu_tree).chain(self.mem_tree.as_mut()) {
            t.check();
            if t.stale {
                t.build(&mut self.fds, &mut self.problems);
                t.clear_used();
                listed = true;
            } else {
                t.clear_used();
            }
        }
        if listed {
            let fds = &mut self.fds;
            for s in self.slots.iter_mut() {
                if let Slot::Absent(p) = s {
                    *s = Slot::open(p.clone(), fds);
                }
            }
        }
    }

    fn gone() -> Snapshot {
        Snapshot {
            gone: true,
            ..Snapshot::default()
        }
    }

    fn sample_v1(&mut self) -> Snapshot {
        let (buf, p) = (&mut self.buf, &mut self.problems);
        let [usage, user, sys, percpu, mem_usage, max_usage, limit, failcnt, stat, oom] =
            &mut self.slots[..]
        else {
            return Self::gone();
        };
        let Some(mem_tree) = self.mem_tree.as_mut() else {
            return Self::gone();
        };
        // A directory found removed (on plain files its kept descriptors would still read)
        // gives no values; on cgroupfs its files answer ENODEV anyway.
        let (cpu_dir_gone, mem_dir_gone) = (self.cpu_tree.root_gone, mem_tree.root_gone);
        let usage = unless(cpu_dir_gone, || read_single(usage, buf, parse::parse_u64));
        let mem_usage = unless(mem_dir_gone, || {
            read_single(mem_usage, buf, parse::parse_u64)
        });
        // The cgroup is gone only when both controllers' directories are, since a site may
        // have no cpuacct job cgroup at all (and SLURM removes cpuacct first).
        let cpu_gone = cpu_dir_gone || is_gone(&usage);
        let mem_gone = mem_dir_gone || is_gone(&mem_usage);
        if cpu_gone && mem_gone {
            return Self::gone();
        }
        let mut r = Reading {
            cpu_usage_ns: p.val(usage),
            cpu_user_ns: p.val(unless(cpu_gone, || {
                read_single(user, buf, parse::parse_u64)
            })),
            cpu_system_ns: p.val(unless(cpu_gone, || read_single(sys, buf, parse::parse_u64))),
            mem_current_bytes: p.val(mem_usage),
            mem_peak_bytes: p.val(unless(mem_gone, || {
                read_single(max_usage, buf, parse::parse_u64)
            })),
            mem_limit_bytes: p
                .val(unless(mem_gone, || {
                    read_single(limit, buf, parse::parse_limit_v1)
                }))
                .flatten(),
            mem_failcnt: p.val(unless(mem_gone, || {
                read_single(failcnt, buf, parse::parse_u64)
            })),
            ..Reading::default()
        };
        self.percpu_ns.clear();
        let percpu_ns = &mut self.percpu_ns;
        let percpu = unless(cpu_gone, || match percpu.read(buf) {
            Ok(Some(t)) => parse::parse_u64_list_into(t, percpu_ns)
                .map(Some)
                .map_err(|b| Error::malformed(percpu.path(), &b.0)),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        });
        self.percpu_ok = p.val(percpu).is_some();

        let ms = p.keyed(unless(mem_gone, || {
            read_keyed(stat, buf, parse::parse_memory_stat_v1)
        }));
        r.mem_rss_bytes = ms.total_rss_bytes;
        r.mem_cache_bytes = ms.total_cache_bytes;
        r.mem_shmem_bytes = ms.total_shmem_bytes;
        r.mem_mapped_file_bytes = ms.total_mapped_file_bytes;
        r.mem_swap_bytes = ms.total_swap_bytes;
        let own_oom_kills = p
            .keyed(unless(mem_gone, || {
                read_keyed(oom, buf, parse::parse_oom_control_v1)
            }))
            .oom_kill;

        // Processes and threads are counted in the cpuacct tree, where SLURM 22.05's slurmstepd is
        // not a member, so the counts and the summed `/proc/<pid>/io` are the job's own. The
        // memory tree stands in when there is no cpuacct job cgroup (e.g.
        // `JobAcctGatherType=jobacct_gather/linux`, or cpuacct already removed).
        let (pids, scratch, fds) = (&mut self.pids, &mut self.scratch, &mut self.fds);
        let members_want = Want {
            procs: true,
            threads: true,
            oom: false,
        };
        let oom_want = Want {
            procs: false,
            threads: false,
            oom: true,
        };
        let (members, below) = if cpu_gone {
            let m = mem_tree.read(
                Want {
                    oom: true,
                    ..members_want
                },
                fds,
                buf,
                pids,
                scratch,
                p,
            );
            let below = m.as_ref().map(|m| m.oom_kills_below).unwrap_or(0);
            (m, below)
        } else {
            let m = self.cpu_tree.read(members_want, fds, buf, pids, scratch, p);
            let below = mem_tree
                .read(oom_want, fds, buf, pids, scratch, p)
                .map(|m| m.oom_kills_below)
                .unwrap_or(0);
            (m, below)
        };
        // v1's oom_kill counter is NOT hierarchical: SLURM sets the same limit on the job and
        // step cgroups, and the kill is counted in the step's (or task's) memcg that hit it.
        r.mem_oom_kill_events = own_oom_kills.map(|own| own.saturating_add(below));
        if let Ok(m) = members {
            r.tasks = m.processes;
            r.threads = m.threads;
        }
        set_io(&mut r, self.io.sample(&self.proc_root, &self.pids));
        Snapshot {
            reading: r,
            percpu_ns: None,
            gone: false,
        }
    }

    fn sample_v2(&mut self) -> Snapshot {
        let (buf, p) = (&mut self.buf, &mut self.problems);
        let [cpu_stat, current, peak, max, stat, swap, events, cpu_psi, mem_psi, io_psi, pids_current, io_stat] =
            &mut self.slots[..]
        else {
            return Self::gone();
        };
        // cpu.stat exists in every non-root v2 cgroup, controller enabled or not.
        let cs = read_keyed(cpu_stat, buf, parse::parse_cpu_stat_v2);
        if self.cpu_tree.root_gone || is_gone(&cs) {
            return Self::gone();
        }
        let cs = p.keyed(cs);
        let ms = p.keyed(read_keyed(stat, buf, parse::parse_memory_stat_v2));
        let ev = p.keyed(read_keyed(events, buf, parse::parse_memory_events_v2));
        let mut r = Reading {
            cpu_usage_ns: cs.usage_usec.and_then(|u| u.checked_mul(1000)),
            cpu_user_ns: cs.user_usec.and_then(|u| u.checked_mul(1000)),
            cpu_system_ns: cs.system_usec.and_then(|u| u.checked_mul(1000)),
            cpu_throttled_usec: cs.throttled_usec,
            cpu_nr_throttled: cs.nr_throttled,
            mem_current_bytes: p.val(read_single(current, buf, parse::parse_u64)),
            mem_peak_bytes: p.val(read_single(peak, buf, parse::parse_u64)),
            mem_limit_bytes: p
                .val(read_single(max, buf, parse::parse_max_or_u64))
                .flatten(),
            mem_rss_bytes: ms.anon_bytes,
            mem_cache_bytes: ms.file_bytes,
            mem_shmem_bytes: ms.shmem_bytes,
            mem_mapped_file_bytes: ms.file_mapped_bytes,
            mem_swap_bytes: p.val(read_single(swap, buf, parse::parse_u64)),
            mem_oom_events: ev.oom,
            mem_oom_kill_events: ev.oom_kill,
            mem_high_events: ev.high,
            mem_max_events: ev.max,
            ..Reading::default()
        };
        let cpu_psi = p.keyed(read_keyed(cpu_psi, buf, parse::parse_pressure));
        let mem_psi = p.keyed(read_keyed(mem_psi, buf, parse::parse_pressure));
        let io_psi = p.keyed(read_keyed(io_psi, buf, parse::parse_pressure));
        r.psi_cpu_some_usec = cpu_psi.some_total_usec;
        r.psi_mem_some_usec = mem_psi.some_total_usec;
        r.psi_mem_full_usec = mem_psi.full_total_usec;
        r.psi_io_some_usec = io_psi.some_total_usec;

        // pids.current counts threads (the pids controller limits tasks); without the pids
        // controller, count cgroup.threads over the subtree instead.
        let pids_current = p.val(read_single(pids_current, buf, parse::parse_u64));
        let want = Want {
            procs: true,
            threads: pids_current.is_none(),
            oom: false,
        };
        let (pids, scratch, fds) = (&mut self.pids, &mut self.scratch, &mut self.fds);
        let members = self.cpu_tree.read(want, fds, buf, pids, scratch, p);
        if let Ok(m) = &members {
            r.tasks = m.processes;
            r.threads = m.threads;
        }
        r.threads = pids_current.or(r.threads);

        match read_keyed(io_stat, buf, parse::parse_io_stat_v2) {
            // Without the io controller there is no io.stat: fall back to /proc/<pid>/io, as on v1.
            Ok(None) => set_io(&mut r, self.io.sample(&self.proc_root, &self.pids)),
            Err(e) if e.is_absent() => set_io(&mut r, self.io.sample(&self.proc_root, &self.pids)),
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

/// `Ok(None)` (absent) when `skip`, else `read()`.
fn unless<T>(
    skip: bool,
    read: impl FnOnce() -> Result<Option<T>, Error>,
) -> Result<Option<T>, Error> {
    if skip {
        Ok(None)
    } else {
        read()
    }
}

fn is_gone<T>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(e) if e.is_gone())
}

fn set_io(r: &mut Reading, t: IoTotals) {
    r.io_read_bytes = t.read_bytes;
    r.io_write_bytes = t.write_bytes;
    r.io_read_ops = t.read_ops;
    r.io_write_ops = t.write_ops;
}

/// The pids of every process in `root` and its descendants, read once (no descriptor kept).
pub(super) fn tree_pids(root: &Path, version: CgroupVersion) -> Result<Vec<u32>, Error> {
    let mut tree = Tree::new(root.to_path_buf(), version);
    let (mut fds, mut p) = (Allowance(0), Problems::default());
    tree.build(&mut fds, &mut p);
    let mut pids = Vec::new();
    let want = Want {
        procs: true,
        threads: false,
        oom: false,
    };
    tree.read(
        want,
        &mut fds,
        &mut ReadBuf::new(),
        &mut pids,
        &mut Vec::new(),
        &mut p,
    )?;
    Ok(pids)
}
