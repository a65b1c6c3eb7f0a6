//! The kernel collector's pinned maps through plain `bpf(2)` calls: the one implementation of
//! the map operations of jobscope's user space — the SPANK plugin's tagger and the job's sampler
//! (inside slurmstepd), `jobscope run`, the collector's own sweep and status, and the collector's
//! tests. Layout of the values: `jobscope_model::kernel_abi`; the collector that loads the
//! programs and pins the maps is `jobscope-kernel`.
//!
//! Not libbpf: the plugin runs inside slurmstepd on every job, and all it needs is to open four
//! pinned maps and look up, update or delete one entry — a few hundred lines of libbpf and libelf
//! linked into slurmstepd would buy nothing here. Every call is one non-blocking system call;
//! nothing here waits, spawns or allocates per sample beyond the buffer kept in [`KernelMaps`].
//! A sample makes one: the job's entry (the collector's state is read through a read-only
//! mapping of its one page).

use jobscope_model::kernel_abi::{self as abi, Counters, Pod, State, Task};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
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
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
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
    /// Opens the maps pinned under `pin_dir` (`jobscope_model::kernel_abi::PIN_DIR`); `sys_root`
    /// is `/sys` (for the number of possible CPUs). Maps of another ABI version are refused.
    pub fn open(pin_dir: &Path, sys_root: &Path) -> Result<KernelMaps, Unavailable> {
        let m = Self::open_any_abi(pin_dir, sys_root)?;
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

    /// [`KernelMaps::open`] whatever ABI version the state says: for the collector's `status`,
    /// which reports the version it finds. Only [`KernelMaps::state`] and
    /// [`KernelMaps::job_keys`] mean anything on maps of another version.
    pub fn open_any_abi(pin_dir: &Path, sys_root: &Path) -> Result<KernelMaps, Unavailable> {
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
        Ok(KernelMaps {
            jobs,
            tasks,
            state,
            state_mem,
            ncpus,
            buf: vec![0; ncpus * std::mem::size_of::<Counters>()],
        })
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

    /// Replaces `out` with the keys of `jobs` (the collector's sweep and status): a walk with
    /// `BPF_MAP_GET_NEXT_KEY`, at most `max_keys` long however the map changes meanwhile.
    pub fn job_keys(&self, out: &mut Vec<u64>, max_keys: usize) -> io::Result<()> {
        out.clear();
        // a null key starts the walk at the first key
        let mut prev: Option<[u8; 8]> = None;
        while out.len() < max_keys {
            let mut next = [0u8; 8];
            let key = prev.as_ref().map_or(std::ptr::null(), |k| k.as_ptr());
            match elem(BPF_MAP_GET_NEXT_KEY, &self.jobs, key, next.as_mut_ptr(), 0) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
                Err(e) => return Err(e),
            }
            out.push(u64::from_ne_bytes(next));
            prev = Some(next);
        }
        Ok(())
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
