//! jobscope's per-node kernel collector: loads the BPF programs of `bpf/jobscope.bpf.c` once per
//! node, pins their maps under [`jobscope_model::kernel_abi::PIN_DIR`] and keeps them alive
//! (heartbeat, sweep of unused `jobs` entries). The contract with the readers is `bpf/jobscope_abi.h`, declared once in Rust
//! by [`jobscope_model::kernel_abi`].
//!
//! libbpf loads, attaches and pins here; every operation on a map's entries (create, tag, read,
//! delete, walk) goes through `jobscope_common::bpf_maps`, the plain `bpf(2)` code the SPANK
//! plugin runs inside slurmstepd: the collector's sweep and status and this crate's tests use
//! that same code ([`Collector::maps`]).
//!
//! The `bench` feature (off in the packaged collector) adds the benchmark, the known workloads
//! and the [`launch`] helper, as hidden subcommands of the binary (bench/kernel/run.sh).

#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod bench;
pub mod cli;
pub mod sweep;
pub mod sysclass;
#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod workload;

/// The generated skeleton (libbpf-cargo, from the object's BTF).
#[allow(
    clippy::all,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unused_imports
)]
pub mod skel {
    include!(concat!(env!("OUT_DIR"), "/jobscope.skel.rs"));
}

use anyhow::{bail, Context, Result};
use jobscope_common::bpf_maps::{monotonic_ns, KernelMaps};
use jobscope_model::kernel_abi::{
    Pod, State, ABI_VERSION, STATE_PAGE_CACHE, STATE_SMALL_IO, STATE_SYSCALLS,
};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};
use skel::{JobscopeSkel, JobscopeSkelBuilder};
use std::fs;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The maps the collector pins, by their file name under the pin directory.
pub const PINNED_MAPS: [&str; 4] = ["jobs", "tasks", "state", "sysclass"];
/// Where the kernel exposes its BTF; no BTF, no CO-RE and no tp_btf/fentry.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// How the collector is set up (the `run` options).
#[derive(Debug, Clone)]
pub struct Options {
    /// Attach the sys_enter program (counts system calls by class; the only program whose cost
    /// every process on the host pays at every system call).
    pub syscalls: bool,
    /// Attach the writeback_dirty_folio program (page cache dirtied by the job's tasks; it runs
    /// at every folio a buffered write dirties: docs/kernel.md has what that costs).
    pub page_cache: bool,
    /// max_entries of `jobs`.
    pub max_jobs: u32,
    pub pin_dir: PathBuf,
    /// Also load the empty sys_enter program (the benchmark's floor).
    pub bench: bool,
}

/// The program on the sys_enter tracepoint, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SysEnter {
    None,
    /// Ours: counts tagged tasks' system calls.
    Counting,
    /// The benchmark's floor: the same attach point, an empty program.
    Empty,
}

/// The loaded programs and their pinned maps. Dropping it detaches everything and unpins.
pub struct Collector {
    skel: JobscopeSkel<'static>,
    /// Links of every program but sys_enter (dropping a link detaches its program).
    links: Vec<Link>,
    /// The task iterator's link ([`Collector::catch_up`]).
    catch_up: Option<Link>,
    sys_enter: Option<Link>,
    sys_enter_kind: SysEnter,
    pin_dir: PathBuf,
    /// `state` mapped into our memory (the map is BPF_F_MMAPABLE): value 0 starts at offset 0.
    state_mem: *mut libc::c_void,
    state_len: usize,
    max_jobs: u32,
    small_io: SmallIo,
    /// Whether attach_main attached the small I/O programs (fentry, or js_sys_enter_io).
    small_io_attached: bool,
    /// Whether attach_main attached js_dirty_folio.
    page_cache_attached: bool,
    /// The pinned maps opened as every reader opens them (`jobscope_common::bpf_maps`): the
    /// one implementation of the entry operations. Set once pinned.
    maps: Option<KernelMaps>,
}

/// Where small reads and writes are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmallIo {
    /// fentry on vfs_read/vfs_write: every call, whichever system call led there.
    Fentry,
    /// This kernel refuses fentry: read/pread64/write/pwrite64 at sys_enter, by their count
    /// argument (the same calls for user-space I/O, readv/writev excepted as at vfs_read).
    Syscalls,
}

/// Opens and loads the object: with the fentry programs, or with the sys_enter stand-in.
fn load(opts: &Options, fentry: bool) -> Result<JobscopeSkel<'static>> {
    // The skeleton borrows its open object for its whole life; the collector lives as long as
    // the process in the daemon, so one small allocation per load is leaked on purpose (the
    // tests start a few collectors).
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = JobscopeSkelBuilder::default()
        .open(storage)
        .context("opening the BPF object")?;
    open.maps
        .jobs
        .set_max_entries(opts.max_jobs)
        .context("setting the jobs map size")?;
    let ro = open
        .maps
        .rodata_data
        .as_mut()
        .context("the object has no .rodata")?;
    ro.page_size = page_size();
    ro.small_io_from_syscalls = !fentry;
    ro.nr_read = libc::SYS_read;
    ro.nr_pread64 = libc::SYS_pread64;
    ro.nr_write = libc::SYS_write;
    ro.nr_pwrite64 = libc::SYS_pwrite64;
    // Load (verify) only what may run: the sys_enter counter not at all without --syscalls,
    // its empty twin only for the benchmark.
    let p = &mut open.progs;
    p.js_sys_enter.set_autoload(opts.syscalls || opts.bench);
    p.js_sys_enter_empty.set_autoload(opts.bench);
    p.js_sys_enter_io.set_autoload(!fentry);
    p.js_vfs_read.set_autoload(fentry);
    p.js_vfs_write.set_autoload(fentry);
    open.load().context("loading the BPF programs (verifier)")
}

impl Collector {
    /// Opens, loads, fills `sysclass`, attaches and pins; writes `state`.
    pub fn start(opts: &Options) -> Result<Collector> {
        check_support()?;
        // fentry needs ftrace direct calls, and some kernels refuse it (EPERM even for root):
        // try with it, quietly, then without it (small I/O counted at sys_enter instead).
        let saved = libbpf_rs::get_print();
        libbpf_rs::set_print(None);
        let first = load(opts, true);
        libbpf_rs::set_print(saved);
        let (skel, small_io) = match first {
            Ok(skel) => (skel, SmallIo::Fentry),
            Err(_) => (load(opts, false)?, SmallIo::Syscalls),
        };
        let (state_mem, state_len) = mmap_state(&skel.maps.state)?;
        let mut c = Collector {
            skel,
            links: Vec::new(),
            catch_up: None,
            sys_enter: None,
            sys_enter_kind: SysEnter::None,
            pin_dir: opts.pin_dir.clone(),
            state_mem,
            state_len,
            max_jobs: opts.max_jobs,
            small_io,
            small_io_attached: false,
            page_cache_attached: false,
            maps: None,
        };
        // The class table goes in before sys_enter can run.
        for (nr, class) in sysclass::table().iter().enumerate() {
            c.skel
                .maps
                .sysclass
                .update(
                    &(nr as u32).to_ne_bytes(),
                    &class.to_ne_bytes(),
                    MapFlags::ANY,
                )
                .context("filling sysclass")?;
        }
        // state before the pins appear, so that a reader never sees a pinned state without
        // an ABI version; nothing else writes it yet (no program is attached).
        // Small reads and writes: at vfs_read/vfs_write where the kernel allows fentry (cheap:
        // only those calls pay); otherwise only with system-call counting, on the same
        // sys_enter program, because a sys_enter program is what every process pays for.
        let small_io = opts.syscalls || c.small_io == SmallIo::Fentry;
        c.write_state_header(opts.syscalls, small_io, opts.page_cache)?;
        // sys_enter first: attach_main picks the small I/O program by what is on sys_enter
        if opts.syscalls {
            c.set_sys_enter(SysEnter::Counting)?;
        }
        c.attach_main_with(small_io, opts.page_cache)?;
        c.pin()?;
        c.beat();
        c.maps = Some(
            KernelMaps::open(&c.pin_dir, Path::new("/sys"))
                .map_err(|e| anyhow::anyhow!("{e}"))
                .context("opening the pinned maps")?,
        );
        Ok(c)
    }

    fn write_state_header(&self, syscalls: bool, small_io: bool, page_cache: bool) -> Result<()> {
        let s = State {
            abi_version: ABI_VERSION,
            heartbeat_ns: monotonic_ns(),
            flags: if syscalls { STATE_SYSCALLS } else { 0 }
                | if small_io { STATE_SMALL_IO } else { 0 }
                | if page_cache { STATE_PAGE_CACHE } else { 0 },
            max_jobs: u64::from(self.max_jobs),
            dropped_events: 0,
        };
        self.skel
            .maps
            .state
            .update(&0u32.to_ne_bytes(), &s.to_bytes(), MapFlags::ANY)
            .context("writing state")
    }

    /// Attaches every program but the sys_enter ones (scheduler, fork/exit, vfs, network,
    /// block, page cache).
    pub fn attach_main(&mut self) -> Result<()> {
        self.attach_main_with(true, true)
    }

    /// [`Collector::attach_main`], optionally without the small I/O programs or the page-cache
    /// one (the collector's switches; the benchmark tells their costs apart).
    pub fn attach_main_with(&mut self, small_io: bool, page_cache: bool) -> Result<()> {
        if !self.links.is_empty() {
            return Ok(());
        }
        let p = &self.skel.progs;
        for (name, prog) in [
            ("sched_process_fork", &p.js_fork),
            ("sched_process_exit", &p.js_exit),
            ("sock_send_length", &p.js_sock_send),
            ("sock_recv_length", &p.js_sock_recv),
            ("block_bio_queue", &p.js_bio_queue),
        ] {
            let link = prog
                .attach()
                .with_context(|| format!("attaching to {name}"))?;
            self.links.push(link);
        }
        if page_cache {
            let link = p
                .js_dirty_folio
                .attach()
                .context("attaching to writeback_dirty_folio")?;
            self.links.push(link);
        }
        self.page_cache_attached = page_cache;
        // Small I/O: at vfs_read/vfs_write, or at sys_enter — by js_sys_enter itself while
        // system calls are counted, else by js_sys_enter_io.
        let small_io: &[(&str, &libbpf_rs::ProgramMut<'static>)] = match self.small_io {
            _ if !small_io => &[],
            SmallIo::Fentry => &[("vfs_read", &p.js_vfs_read), ("vfs_write", &p.js_vfs_write)],
            SmallIo::Syscalls if self.sys_enter_kind == SysEnter::Counting => &[],
            SmallIo::Syscalls => &[("sys_enter", &p.js_sys_enter_io)],
        };
        for (name, prog) in small_io {
            let link = prog
                .attach()
                .with_context(|| format!("attaching to {name}"))?;
            self.links.push(link);
        }
        self.small_io_attached = !small_io.is_empty();
        // an iterator link runs nothing by itself: catch_up runs it
        self.catch_up = Some(
            p.js_catch_up
                .attach()
                .context("attaching the task iterator")?,
        );
        self.store_flags();
        Ok(())
    }

    /// Brings every job's scheduler counters (context switches, run time, time waiting for a
    /// CPU) up to now: one pass of the task iterator over the node's tasks (js_catch_up in
    /// bpf/jobscope.bpf.c says why these are not counted at each context switch). The
    /// collector runs it once a second, before the heartbeat.
    pub fn catch_up(&self) -> Result<()> {
        let Some(link) = &self.catch_up else {
            return Ok(());
        };
        let mut it = libbpf_rs::Iter::new(link).context("starting the task iterator")?;
        // the program prints nothing: the read returns at the end of the pass
        std::io::copy(&mut it, &mut std::io::sink()).context("running the task iterator")?;
        Ok(())
    }

    /// What is counted now, as `state.flags` says it to the readers.
    fn flags(&self) -> u64 {
        let counting = self.sys_enter_kind == SysEnter::Counting;
        let small_io = match self.small_io {
            SmallIo::Fentry => self.small_io_attached,
            // js_sys_enter counts small I/O itself while it counts system calls
            SmallIo::Syscalls => counting || self.small_io_attached,
        };
        (if counting { STATE_SYSCALLS } else { 0 })
            | if small_io { STATE_SMALL_IO } else { 0 }
            | if self.page_cache_attached {
                STATE_PAGE_CACHE
            } else {
                0
            }
    }

    /// `state.flags` is only ever written by user space, so this single word store races with
    /// nothing but a reader, which sees the old or the new value.
    fn store_flags(&self) {
        self.state_word(std::mem::offset_of!(State, flags))
            .store(self.flags(), Ordering::Relaxed);
    }

    /// Detaches what [`Collector::attach_main`] attached (the benchmark's "off").
    pub fn detach_main(&mut self) {
        self.links.clear();
        self.catch_up = None;
        self.page_cache_attached = false;
    }

    /// Puts `kind` on the sys_enter tracepoint (replacing what was there) and says so in
    /// state.flags.
    pub fn set_sys_enter(&mut self, kind: SysEnter) -> Result<()> {
        if kind == self.sys_enter_kind {
            return Ok(());
        }
        self.sys_enter = None;
        self.sys_enter_kind = SysEnter::None;
        let prog = match kind {
            SysEnter::None => None,
            SysEnter::Counting => Some(&self.skel.progs.js_sys_enter),
            SysEnter::Empty => Some(&self.skel.progs.js_sys_enter_empty),
        };
        if let Some(prog) = prog {
            self.sys_enter = Some(prog.attach().context("attaching to sys_enter")?);
        }
        self.sys_enter_kind = kind;
        self.store_flags();
        Ok(())
    }

    fn pin(&mut self) -> Result<()> {
        ensure_bpffs(&self.pin_dir)?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.pin_dir)
            .with_context(|| format!("creating {}", self.pin_dir.display()))?;
        // an existing directory keeps its mode: make it 0700 (readers run as root)
        fs::set_permissions(&self.pin_dir, fs::Permissions::from_mode(0o700))?;
        remove_pins(&self.pin_dir)?;
        let m = &mut self.skel.maps;
        for (name, map) in [
            ("jobs", &mut m.jobs),
            ("tasks", &mut m.tasks),
            ("state", &mut m.state),
            ("sysclass", &mut m.sysclass),
        ] {
            let path = self.pin_dir.join(name);
            map.pin(&path)
                .with_context(|| format!("pinning {}", path.display()))?;
        }
        Ok(())
    }

    /// One 8-byte word of the mapped state value.
    fn state_word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset + 8 <= std::mem::size_of::<State>() && offset % 8 == 0);
        // SAFETY: state_mem maps at least one page holding the value at offset 0 for as long
        // as self lives; the offset is an aligned u64 field inside it, and every access to
        // the value (ours, the programs' atomic adds, bpf() lookups) is per aligned word.
        unsafe { &*(self.state_mem.cast::<u8>().add(offset).cast::<AtomicU64>()) }
    }

    /// state.heartbeat_ns = CLOCK_MONOTONIC now. Only this word is stored (through the
    /// mapping, a single aligned 8-byte store): the programs' atomic adds to dropped_events are
    /// never overwritten, which a whole-value BPF_MAP_UPDATE_ELEM could do.
    pub fn beat(&self) {
        self.state_word(std::mem::offset_of!(State, heartbeat_ns))
            .store(monotonic_ns(), Ordering::Relaxed);
    }

    pub fn small_io(&self) -> SmallIo {
        self.small_io
    }

    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// The pinned maps, through the same `bpf(2)` code the plugin and `jobscope run` use.
    pub fn maps(&self) -> &KernelMaps {
        self.maps.as_ref().expect("opened in Collector::start")
    }

    /// [`Collector::maps`], for a read (its per-CPU buffer).
    pub fn maps_mut(&mut self) -> &mut KernelMaps {
        self.maps.as_mut().expect("opened in Collector::start")
    }

    /// The state entry, by a `bpf(2)` lookup.
    pub fn state(&self) -> Result<State> {
        Ok(self.maps().state_by_lookup()?)
    }

    /// One sweep of `jobs`, see [`Sweeper`].
    pub fn sweep(&self, sweeper: &mut Sweeper) -> usize {
        sweeper.run(self.maps(), self.max_jobs as usize)
    }
}

/// The collector's periodic sweep of unused `jobs` entries (decisions: [`sweep::verdict`]).
/// Its buffers are reused from one sweep to the next and never hold more than max_jobs keys
/// (plus the spool directory's entries).
pub struct Sweeper {
    spool_dir: PathBuf,
    /// keys found unused at the previous sweep, sorted
    orphans: Vec<u64>,
    next: Vec<u64>,
    spool: Vec<u64>,
    keys: Vec<u64>,
}

impl Sweeper {
    pub fn new(spool_dir: &Path) -> Sweeper {
        Sweeper {
            spool_dir: spool_dir.to_owned(),
            orphans: Vec::new(),
            next: Vec::new(),
            spool: Vec::new(),
            keys: Vec::new(),
        }
    }

    /// Deletes the keys unused at this sweep and the previous one; returns how many. Walks at
    /// most `max_keys` keys (the map's size).
    pub fn run(&mut self, maps: &KernelMaps, max_keys: usize) -> usize {
        self.spool.clear();
        if let Ok(dir) = fs::read_dir(&self.spool_dir) {
            self.spool.extend(
                dir.flatten()
                    .filter_map(|e| e.file_name().to_str().and_then(sweep::spool_key)),
            );
        }
        self.spool.sort_unstable();
        // collect first: deleting while walking with get_next_key may restart the walk
        if maps.job_keys(&mut self.keys, max_keys).is_err() {
            return 0;
        }
        self.next.clear();
        let mut deleted = 0;
        for &key in &self.keys {
            let seen = sweep::Seen {
                spool_dir: self.spool.binary_search(&key).is_ok(),
                pid_alive: sweep::run_pid(key).is_some_and(pid_alive),
                orphan_before: self.orphans.binary_search(&key).is_ok(),
            };
            match sweep::verdict(key, seen) {
                sweep::Verdict::Keep => {}
                sweep::Verdict::Orphan => self.next.push(key),
                sweep::Verdict::Delete => deleted += usize::from(maps.forget(key).is_ok()),
            }
        }
        self.next.sort_unstable();
        std::mem::swap(&mut self.orphans, &mut self.next);
        deleted
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        // Unpin first: a reader must not find pins of maps nobody fills any more. The
        // programs detach when the links (and the skeleton) drop right after.
        let _ = remove_pins(&self.pin_dir);
        let _ = fs::remove_dir(&self.pin_dir);
        // SAFETY: mapped in mmap_state with this length, unmapped once.
        unsafe { libc::munmap(self.state_mem, self.state_len) };
    }
}

fn mmap_state(map: &impl MapCore) -> Result<(*mut libc::c_void, usize)> {
    let len = (page_size() as usize).max(std::mem::size_of::<State>());
    // SAFETY: a shared read-write mapping of an mmapable BPF array; no Rust memory aliases it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            map.as_fd().as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error()).context("mapping the state map");
    }
    Ok((p, len))
}

/// Removes our pins under `dir` (a previous run's, or our own at exit); missing ones are fine.
pub fn remove_pins(dir: &Path) -> Result<()> {
    for name in PINNED_MAPS {
        match fs::remove_file(dir.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", dir.join(name).display()))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Why the collector cannot run here, in one sentence, or Ok.
pub fn check_support() -> Result<()> {
    if !Path::new(VMLINUX_BTF).exists() {
        bail!("the kernel has no BTF ({VMLINUX_BTF} is missing), so jobscope's BPF programs cannot load");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("loading BPF programs needs root");
    }
    Ok(())
}

/// Pins need a bpffs. systemd mounts one on /sys/fs/bpf at boot; on a host without it (a
/// container, a minimal VM) the collector mounts it there itself. Any other pin location must
/// already be on a bpffs.
fn ensure_bpffs(pin_dir: &Path) -> Result<()> {
    let parent = pin_dir.parent().unwrap_or(Path::new("/"));
    if fs_type(parent)? == BPF_FS_MAGIC {
        return Ok(());
    }
    if parent != Path::new("/sys/fs/bpf") {
        bail!("{} is not on a bpf filesystem", parent.display());
    }
    let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
    let (src, target, fstype, data) = (c("bpf"), c("/sys/fs/bpf"), c("bpf"), c("mode=0700"));
    // SAFETY: valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error()).context("mounting bpffs on /sys/fs/bpf");
    }
    Ok(())
}

fn fs_type(path: &Path) -> Result<i64> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    let mut st = MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: p is a valid C string, st a buffer statfs fills on success.
    if unsafe { libc::statfs(p.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("statfs {}", path.display()));
    }
    // SAFETY: statfs returned 0, so st is initialized.
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between libc targets
    Ok(unsafe { st.assume_init() }.f_type as i64)
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).unwrap_or(4096)
}

/// Whether process `pid` exists (kill(pid, 0): EPERM still means it exists).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

#[cfg(feature = "bench")]
/// Starting a workload as a job's first task, the way slurmstepd's task_post_fork sees it: the
/// child exists but has not started the workload until it is released, so it can be tagged
/// before it does anything. For the tests and the benchmark.
pub mod launch {
    use std::io::Write;
    use std::process::{Child, Command, Output, Stdio};

    /// A child blocked in `read` on its stdin before exec'ing the workload.
    pub struct Blocked {
        child: Child,
    }

    /// `sh -c 'read _; exec "$@"' sh PROGRAM ARGS...`: Command::spawn returns once sh runs
    /// (std waits for the exec), and sh waits for one line before it becomes the workload —
    /// the same task, so the tag stays. LD_LIBRARY_PATH is dropped: `cargo test` sets a long
    /// one, and the loader's search through it would add hundreds of system calls to the work.
    pub fn blocked(program: &str, args: &[&str]) -> std::io::Result<Blocked> {
        let child = Command::new("/bin/sh")
            .args(["-c", "read _x; exec \"$@\"", "sh", program])
            .args(args)
            .env_remove("LD_LIBRARY_PATH")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        Ok(Blocked { child })
    }

    impl Blocked {
        pub fn pid(&self) -> u32 {
            self.child.id()
        }

        /// Lets the workload start and waits for its end.
        pub fn release_and_wait(mut self) -> std::io::Result<Output> {
            if let Some(mut stdin) = self.child.stdin.take() {
                stdin.write_all(b"\n")?;
            }
            self.child.wait_with_output()
        }
    }
}
