//! The kernel view's reader and tagger: what runs in slurmstepd (and in `jobscope run`) against the
//! maps the collector `jobscope-kernel` pins (layout: `jobscope_model::kernel`).
//!
//! Plain `bpf(2)` calls, not libbpf: the plugin runs inside slurmstepd on every job, and all it
//! needs is to open four pinned maps and look up, update or delete one entry — a few hundred
//! lines of libbpf and libelf linked into slurmstepd would buy nothing here. Every call is one
//! non-blocking system call; nothing here waits, spawns or allocates per sample beyond the
//! buffer kept in [`KernelMaps`]. A sample makes one: the job's entry (the collector's state
//! is read through a read-only mapping of its one page).

use jobscope_model::kernel::{self as abi, Counters, Pod, State, Task};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_ANY: u64 = 0;
const BPF_NOEXIST: u64 = 1;

/// `union bpf_attr` for the map element commands (`map_fd, key, value, flags`).
#[repr(C, align(8))]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_OBJ_GET` (`pathname, bpf_fd, file_flags`).
#[repr(C, align(8))]
#[derive(Default)]
struct ObjAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
    path_fd: i32,
    _pad: u32,
}

fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialised `bpf_attr` prefix of the size passed; the kernel
    // reads (and for lookups writes through the pointers in) it only for the call's duration.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    let mut a = ObjAttr {
        pathname: c.as_ptr() as u64,
        ..Default::default()
    };
    let fd = sys_bpf(BPF_OBJ_GET, &mut a)?;
    // SAFETY: BPF_OBJ_GET returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn elem(
    cmd: libc::c_long,
    map: &OwnedFd,
    key: *const u8,
    value: *mut u8,
    flags: u64,
) -> io::Result<()> {
    let mut a = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key as u64,
        value: value as u64,
        flags,
        ..Default::default()
    };
    sys_bpf(cmd, &mut a).map(|_| ())
}

/// Number of possible CPUs: a per-CPU map's lookup fills one value for each.
fn possible_cpus(sys_root: &Path) -> io::Result<usize> {
    let p = sys_root.join("devices/system/cpu/possible");
    let s = std::fs::read_to_string(&p).map_err(|e| with_path(e, &p))?;
    jobscope_model::slurm::cpulist_count(s.trim())
        .map(|n| n as usize)
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            with_path(
                io::Error::new(io::ErrorKind::InvalidData, format!("cannot parse {s:?}")),
                &p,
            )
        })
}

/// A descriptor of process `pid`: the key of the task storage map from user space.
fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn with_path(e: io::Error, p: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

/// What registering a job found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// This call created the job's entry.
    Created,
    /// Another step (or the sampler) had created it.
    Existed,
    /// The collector's job table is full (`max_jobs`): the job is not counted.
    Full,
}

/// The collector's maps, opened once from their pins.
pub struct KernelMaps {
    jobs: OwnedFd,
    tasks: OwnedFd,
    state: OwnedFd,
    /// The `state` value mapped read-only (the map is `BPF_F_MMAPABLE`): a sample checks the
    /// heartbeat with a memory load instead of a `bpf(2)` call, which costs 1–5 µs on the
    /// project's machine (`cargo bench -p jobscope-sampler --bench kernel_read`). `None` where
    /// the mapping failed: then the state is read with a lookup.
    state_mem: Option<StateMapping>,
    ncpus: usize,
    /// Per-CPU lookup buffer, kept: no allocation per sample.
    buf: Vec<u8>,
}

/// One page of the `state` map, mapped read-only, unmapped on drop.
struct StateMapping {
    ptr: std::ptr::NonNull<libc::c_void>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone; reading it from another thread is reading
// shared memory through atomics (see StateMapping::load).
unsafe impl Send for StateMapping {}

impl StateMapping {
    fn new(fd: &OwnedFd) -> Option<StateMapping> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let len = usize::try_from(page)
            .ok()
            .filter(|&p| p >= std::mem::size_of::<State>())?;
        // SAFETY: a new read-only shared mapping of the map's value area; the kernel checks
        // that the map is mmapable and the length within it, and fails the call otherwise.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        std::ptr::NonNull::new(p).map(|ptr| StateMapping { ptr, len })
    }

    /// The value as it is now. Word by word: the collector stores single words into it and
    /// the programs add atomically to one; each word is read whole (an aligned 8-byte atomic
    /// load), never torn, which is all a reader of the heartbeat and flags needs.
    fn load(&self) -> State {
        use std::sync::atomic::{AtomicU64, Ordering};
        let mut bytes = [0u8; std::mem::size_of::<State>()];
        for (i, out) in bytes.chunks_exact_mut(8).enumerate() {
            // SAFETY: the mapping is at least one page, page-aligned, and holds the State
            // value at offset 0; word i lies inside it and is 8-byte aligned.
            let w = unsafe { &*(self.ptr.as_ptr().cast::<AtomicU64>().add(i)) };
            out.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        State::from_bytes(&bytes)
    }
}

impl Drop for StateMapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are the mapping mmap returned, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr(), self.len) };
    }
}

/// Why there is no kernel view.
#[derive(Debug)]
pub enum Unavailable {
    /// No collector: the pins do not exist (not installed, not running, no BTF on this kernel).
    NoCollector(PathBuf),
    /// The pins are there but cannot be used (permissions, another ABI version, a bad file).
    Broken(String),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::NoCollector(p) => write!(f, "no kernel collector on this node ({} absent: jobscope-kernel.service not running, or this kernel lacks BPF or BTF)", p.display()),
            Unavailable::Broken(m) => write!(f, "the kernel collector's maps cannot be used: {m}"),
        }
    }
}

impl KernelMaps {
    /// Opens the maps pinned under `pin_dir` (`jobscope_model::kernel::PIN_DIR`); `sys_root` is
    /// `/sys` (for the number of possible CPUs).
    pub fn open(pin_dir: &Path, sys_root: &Path) -> Result<KernelMaps, Unavailable> {
        let get = |name: &str| {
            let p = pin_dir.join(name);
            obj_get(&p).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => Unavailable::NoCollector(p.clone()),
                io::ErrorKind::PermissionDenied => Unavailable::Broken(
                    "only root reads the kernel collector's maps (run as root for the kernel view)"
                        .into(),
                ),
                _ => Unavailable::Broken(format!("{}: {e}", p.display())),
            })
        };
        let state = get("state")?;
        let jobs = get("jobs")?;
        let tasks = get("tasks")?;
        let ncpus = possible_cpus(sys_root).map_err(|e| Unavailable::Broken(e.to_string()))?;
        let state_mem = StateMapping::new(&state);
        let m = KernelMaps {
            jobs,
            tasks,
            state,
            state_mem,
            ncpus,
            buf: vec![0; ncpus * std::mem::size_of::<Counters>()],
        };
        let st = m
            .state()
            .map_err(|e| Unavailable::Broken(format!("{}/state: {e}", pin_dir.display())))?;
        if st.abi_version != abi::ABI_VERSION {
            return Err(Unavailable::Broken(format!(
                "the collector speaks version {} of the map layout, this build {}",
                st.abi_version,
                abi::ABI_VERSION
            )));
        }
        Ok(m)
    }

    /// The collector's state entry (from the mapping when there is one).
    pub fn state(&self) -> io::Result<State> {
        if let Some(m) = &self.state_mem {
            return Ok(m.load());
        }
        self.state_by_lookup()
    }

    /// The state entry through a `bpf(2)` lookup (the benchmark's floor; the fallback).
    pub fn state_by_lookup(&self) -> io::Result<State> {
        let key = 0u32.to_ne_bytes();
        let mut v = vec![0u8; std::mem::size_of::<State>()];
        elem(
            BPF_MAP_LOOKUP_ELEM,
            &self.state,
            key.as_ptr(),
            v.as_mut_ptr(),
            0,
        )?;
        Ok(State::from_bytes(&v))
    }

    /// Creates the job's zeroed entry unless it exists.
    pub fn register(&self, job_key: u64) -> io::Result<Registered> {
        let key = job_key.to_ne_bytes();
        let mut zero = vec![0u8; self.ncpus * std::mem::size_of::<Counters>()];
        match elem(
            BPF_MAP_UPDATE_ELEM,
            &self.jobs,
            key.as_ptr(),
            zero.as_mut_ptr(),
            BPF_NOEXIST,
        ) {
            Ok(()) => Ok(Registered::Created),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(Registered::Existed),
            Err(e) if e.raw_os_error() == Some(libc::E2BIG) => Ok(Registered::Full),
            Err(e) => Err(e),
        }
    }

    /// Tags process `pid` (a task freshly forked for the job, before it runs the job's code) as
    /// the job's: it and everything it starts from then on count for `job_key`.
    pub fn tag(&self, pid: libc::pid_t, job_key: u64) -> io::Result<()> {
        let pidfd = pidfd_open(pid)?;
        let key = (pidfd.as_raw_fd() as u32).to_ne_bytes();
        let mut v = Task {
            job_key,
            ..Default::default()
        }
        .to_bytes();
        elem(
            BPF_MAP_UPDATE_ELEM,
            &self.tasks,
            key.as_ptr(),
            v.as_mut_ptr(),
            BPF_ANY,
        )
    }

    /// Removes process `pid`'s tag (its children forked since keep theirs).
    pub fn untag(&self, pid: libc::pid_t) -> io::Result<()> {
        let pidfd = pidfd_open(pid)?;
        let key = (pidfd.as_raw_fd() as u32).to_ne_bytes();
        match elem(
            BPF_MAP_DELETE_ELEM,
            &self.tasks,
            key.as_ptr(),
            std::ptr::null_mut(),
            0,
        ) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
            _ => Ok(()),
        }
    }

    /// The job's counters summed over the CPUs; `None` when the job has no entry.
    pub fn read(&mut self, job_key: u64) -> io::Result<Option<Counters>> {
        let key = job_key.to_ne_bytes();
        match elem(
            BPF_MAP_LOOKUP_ELEM,
            &self.jobs,
            key.as_ptr(),
            self.buf.as_mut_ptr(),
            0,
        ) {
            Ok(()) => Ok(Some(Counters::sum(&abi::decode_each::<Counters>(
                &self.buf,
            )))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Adds the job's counters to `r` if the collector is alive (the one read of a sample: the
    /// state, then the job's entry).
    pub fn fill(&mut self, job_key: u64, r: &mut jobscope_model::sample::Reading) -> Fill {
        let st = match self.state() {
            Ok(s) if alive(&s, monotonic_ns()) => s,
            _ => return Fill::Stopped,
        };
        match self.read(job_key) {
            Ok(Some(c)) => {
                r.set_kernel(&c, st.flags);
                Fill::Filled
            }
            Ok(None) | Err(_) => Fill::Lost,
        }
    }

    /// Removes the job's entry (its end); false when there was none.
    pub fn forget(&self, job_key: u64) -> io::Result<bool> {
        let key = job_key.to_ne_bytes();
        match elem(
            BPF_MAP_DELETE_ELEM,
            &self.jobs,
            key.as_ptr(),
            std::ptr::null_mut(),
            0,
        ) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// What [`KernelMaps::fill`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    Filled,
    /// No heartbeat for [`HEARTBEAT_STALE_NS`], or the state unreadable.
    Stopped,
    /// The job's entry is gone (the collector restarted with new maps, or swept it).
    Lost,
}

/// How long without a heartbeat before the collector counts as stopped (it beats every second).
pub const HEARTBEAT_STALE_NS: u64 = 10_000_000_000;

/// `CLOCK_MONOTONIC` now, in ns: the clock of [`State::heartbeat_ns`].
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// Whether a state read at `now_ns` shows a collector that is alive. Pure.
pub fn alive(st: &State, now_ns: u64) -> bool {
    st.heartbeat_ns != 0 && now_ns.saturating_sub(st.heartbeat_ns) <= HEARTBEAT_STALE_NS
}

/// What a job's sampler says about its kernel view, as it goes: each at most once per job, as
/// an event in the spool (`EventKind::KernelView`) that the report turns into a data note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewNote {
    Unavailable(String),
    Full { max_jobs: u64 },
    SyscallsOff,
    Stopped,
    Lost,
}

impl ViewNote {
    /// The sentence the report shows.
    pub fn message(&self) -> String {
        match self {
            ViewNote::Unavailable(why) => format!("kernel view off: {why}"),
            ViewNote::Full { max_jobs } => format!(
                "kernel view off for this job: the collector's job table was full ({max_jobs} jobs; kernel.max_jobs)"
            ),
            ViewNote::SyscallsOff => "system calls not counted: the collector runs without system-call counting".into(),
            ViewNote::Stopped => "the kernel collector stopped during the job: the kernel figures end at its last heartbeat".into(),
            ViewNote::Lost => "the job's kernel counters disappeared during the job (collector restarted): the kernel figures end there".into(),
        }
    }
}

/// One job's kernel view for its sampler: the maps, the key, and what was already said.
pub struct JobView {
    maps: KernelMaps,
    key: u64,
    dead: bool,
}

impl JobView {
    /// Opens the maps and registers the job. `Err` carries the note to record (no view).
    pub fn start(
        pin_dir: &Path,
        sys_root: &Path,
        key: u64,
    ) -> Result<(JobView, Vec<ViewNote>), ViewNote> {
        let maps = KernelMaps::open(pin_dir, sys_root)
            .map_err(|u| ViewNote::Unavailable(u.to_string()))?;
        let st = maps
            .state()
            .map_err(|e| ViewNote::Unavailable(e.to_string()))?;
        if !alive(&st, monotonic_ns()) {
            return Err(ViewNote::Unavailable(
                "the kernel collector is not running (its heartbeat is stale)".into(),
            ));
        }
        match maps.register(key) {
            Ok(Registered::Full) => {
                return Err(ViewNote::Full {
                    max_jobs: st.max_jobs,
                })
            }
            Ok(_) => {}
            Err(e) => {
                return Err(ViewNote::Unavailable(format!(
                    "cannot register the job: {e}"
                )))
            }
        }
        let mut notes = Vec::new();
        if st.flags & abi::STATE_SYSCALLS == 0 {
            notes.push(ViewNote::SyscallsOff);
        }
        Ok((
            JobView {
                maps,
                key,
                dead: false,
            },
            notes,
        ))
    }

    /// Adds the job's kernel counters to `r` (nothing once the collector stopped or the entry is
    /// gone, with the note to record the first time).
    pub fn fill(&mut self, r: &mut jobscope_model::sample::Reading) -> Option<ViewNote> {
        if self.dead {
            return None;
        }
        let note = match self.maps.fill(self.key, r) {
            Fill::Filled => return None,
            Fill::Stopped => ViewNote::Stopped,
            Fill::Lost => ViewNote::Lost,
        };
        self.dead = true;
        Some(note)
    }

    /// The job's end on this node: its entry is removed.
    pub fn finish(self) {
        let _ = self.maps.forget(self.key);
    }

    /// The maps, for a read outside [`JobView::fill`] (the benchmark's parts of a read).
    pub fn maps_mut(&mut self) -> &mut KernelMaps {
        &mut self.maps
    }

    pub fn maps(&self) -> &KernelMaps {
        &self.maps
    }
}
