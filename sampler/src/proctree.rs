//! Following a run through the process tree, for a `jobscope run` that could get no cgroup of
//! its own (a non-root user on a host that delegates no cgroup to users: the v1 hierarchies are
//! root's, and a hybrid host's cgroup2 mount has no controllers, see `cli/src/run/place.rs`).
//!
//! [`ProcTreeReader`] produces the same [`Reading`] a cgroup reader does, from `/proc`: every
//! descendant of one process (the launcher, which makes itself a child subreaper so that orphans
//! stay its descendants). What `/proc` cannot give is `None`, never 0 (no page cache, no OOM
//! counters, no limit). How each field is made:
//! - CPU: over the live descendants, `utime + stime + cutime + cstime` (`cutime`/`cstime` hold the
//!   descendants each one has reaped, so nothing is counted twice), plus the launcher's own
//!   `RUSAGE_CHILDREN`, which holds those it reaped. Clock ticks (normally 10 ms).
//! - Memory: the sum of the descendants' resident sets (`statm`), anonymous part as `mem_rss_bytes`;
//!   shared pages are counted once per process, so this overstates what shared memory costs.
//! - I/O: the descendants' `/proc/<pid>/io` plus the launcher's reaped counters
//!   ([`crate::procio::reaped_io`]), the same split as for CPU.
//!
//! The parsers are pure; [`ProcTreeReader::sample`] is the I/O.
use crate::procio::kfile::ReadBuf;
use crate::procio::stat::{read_stat, ProcStat};
use crate::procio::{self, Error};
use jobscope_model::sample::Reading;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Processes on the whole host that one sample may look at (the walk is bounded).
pub const MAX_SCANNED: usize = 65_536;

/// `/proc/<pid>/statm`: (resident pages, shared pages). Anonymous = resident − shared.
pub fn parse_statm(text: &str) -> Option<(u64, u64)> {
    let mut it = text.split_ascii_whitespace();
    let _size = it.next()?;
    let resident = it.next()?.parse().ok()?;
    let shared = it.next()?.parse().ok()?;
    Some((resident, shared))
}

fn add_io(a: procio::ProcIo, b: procio::ProcIo) -> procio::ProcIo {
    procio::ProcIo {
        read_bytes: a.read_bytes.saturating_add(b.read_bytes),
        write_bytes: a.write_bytes.saturating_add(b.write_bytes),
        syscr: a.syscr.saturating_add(b.syscr),
        syscw: a.syscw.saturating_add(b.syscw),
    }
}

/// Every descendant of `root` (not `root` itself) in a `(pid, ppid)` list, breadth first.
pub fn descendants(root: u32, parents: &[(u32, u32)]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for &(pid, ppid) in parents {
        if pid != ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    let mut i = 0;
    while i < queue.len() {
        if let Some(c) = children.get(&queue[i]) {
            for &p in c {
                if p != root && !out.contains(&p) {
                    out.push(p);
                    queue.push(p);
                }
            }
        }
        i += 1;
    }
    out
}

/// What the launcher itself knows about the descendants it has reaped (`getrusage(RUSAGE_CHILDREN)`
/// and its reaped I/O): supplied by the caller so the reader stays testable on a fake `/proc`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reaped {
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    /// Largest resident set of any one reaped descendant.
    pub maxrss_bytes: u64,
    pub io: Option<procio::ProcIo>,
}

impl Reaped {
    /// This process's own figures: `RUSAGE_CHILDREN` and [`procio::reaped_io`] under `proc_root`.
    pub fn of_self(proc_root: &Path) -> Reaped {
        // SAFETY: getrusage writes one rusage into the zeroed struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let ok = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } == 0;
        let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        let (u, s, m) = if ok {
            (
                tv(ru.ru_utime),
                tv(ru.ru_stime),
                ru.ru_maxrss.max(0) as u64 * 1024,
            )
        } else {
            (0, 0, 0)
        };
        Reaped {
            cpu_user_ns: u,
            cpu_system_ns: s,
            maxrss_bytes: m,
            io: procio::reaped_io(proc_root, std::process::id()).ok(),
        }
    }
}

/// Reads the descendants of one process sample after sample (see the module docs).
pub struct ProcTreeReader {
    root: u32,
    proc_root: PathBuf,
    tick_ns: u64,
    page_bytes: u64,
    /// The launcher's reaped figures, asked at every sample.
    reaped: Box<dyn FnMut() -> Reaped + Send>,
    /// Counters never go backwards (a process reaped between two reads of one sample would
    /// otherwise dip the sum for a moment).
    last_cpu_ns: u64,
    problems: Vec<Error>,
    pids: Vec<u32>,
}

impl std::fmt::Debug for ProcTreeReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcTreeReader")
            .field("root", &self.root)
            .field("proc_root", &self.proc_root)
            .finish()
    }
}

impl ProcTreeReader {
    /// Follows the descendants of `root` (normally this process) under `proc_root`.
    pub fn new(
        root: u32,
        proc_root: PathBuf,
        reaped: Box<dyn FnMut() -> Reaped + Send>,
    ) -> ProcTreeReader {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        ProcTreeReader {
            root,
            proc_root,
            tick_ns: if hz > 0 {
                1_000_000_000 / hz as u64
            } else {
                10_000_000
            },
            page_bytes: if page > 0 { page as u64 } else { 4096 },
            reaped,
            last_cpu_ns: 0,
            problems: Vec::new(),
            pids: Vec::new(),
        }
    }

    /// The descendants seen by the last sample.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Problems of the last sample (unreadable `/proc`).
    pub fn problems(&self) -> &[Error] {
        &self.problems
    }

    /// Lists the descendants of the root now.
    pub fn list(&mut self) -> Vec<(u32, ProcStat)> {
        let mut parents = Vec::new();
        let mut stats = HashMap::new();
        let rd = match std::fs::read_dir(&self.proc_root) {
            Ok(rd) => rd,
            Err(e) => {
                self.problems.push(Error::from_io(&self.proc_root, e));
                return Vec::new();
            }
        };
        let mut buf = ReadBuf::new();
        for e in rd.flatten().take(MAX_SCANNED) {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            // An error is a process that exited meanwhile (or one this user may not read): not
            // in the tree, as before.
            if let Ok((st, _comm)) = read_stat(&e.path().join("stat"), &mut buf) {
                parents.push((pid, st.ppid));
                stats.insert(pid, st);
            }
        }
        descendants(self.root, &parents)
            .into_iter()
            .filter_map(|p| stats.get(&p).map(|s| (p, *s)))
            .collect()
    }

    /// One reading of the tree. Never fails: what cannot be read is `None`.
    pub fn sample(&mut self) -> Reading {
        self.problems.clear();
        // What the launcher reaped first, the live tree after: a child reaped in between is
        // then in neither (this sample is low for a moment; the next has it in the reaped
        // figure), never in both. The other order counted a child that ended right then twice,
        // and the counter, which never goes back, kept the double (seen in the VM suite: 11.6 s
        // reported for 5.8 s of CPU).
        let reaped = (self.reaped)();
        let live = self.list();
        self.pids = live.iter().map(|(p, _)| *p).collect();
        let (mut user, mut sys, mut threads) = (0u64, 0u64, 0u64);
        let (mut rss, mut anon) = (0u64, 0u64);
        let mut io = reaped.io.unwrap_or_default();
        let mut io_ok = reaped.io.is_some();
        for (pid, st) in &live {
            user += (st.utime_ticks + st.cutime_ticks) * self.tick_ns;
            sys += (st.stime_ticks + st.cstime_ticks) * self.tick_ns;
            threads += st.threads;
            let dir = self.proc_root.join(pid.to_string());
            if let Some((res, shared)) = std::fs::read_to_string(dir.join("statm"))
                .ok()
                .and_then(|t| parse_statm(&t))
            {
                rss += res * self.page_bytes;
                anon += res.saturating_sub(shared) * self.page_bytes;
            }
            match procio::read_proc_io(&self.proc_root, *pid) {
                Ok(p) => io = add_io(io, p),
                Err(e) if e.is_gone() => {}
                Err(e) => {
                    io_ok = false;
                    if self.problems.is_empty() {
                        self.problems.push(e);
                    }
                }
            }
        }
        user += reaped.cpu_user_ns;
        sys += reaped.cpu_system_ns;
        self.last_cpu_ns = self.last_cpu_ns.max(user + sys);
        // The largest single reaped process: a lower bound of the peak, which the node summary
        // takes together with the sampled sums (the larger wins).
        let peak = Some(reaped.maxrss_bytes).filter(|&m| m > 0);
        Reading {
            cpu_usage_ns: Some(self.last_cpu_ns),
            cpu_user_ns: Some(user),
            cpu_system_ns: Some(sys),
            mem_current_bytes: Some(rss),
            mem_rss_bytes: Some(anon),
            mem_peak_bytes: peak,
            tasks: Some(live.len() as u64),
            threads: Some(threads),
            io_read_bytes: io_ok.then_some(io.read_bytes),
            io_write_bytes: io_ok.then_some(io.write_bytes),
            io_read_ops: io_ok.then_some(io.syscr),
            io_write_ops: io_ok.then_some(io.syscw),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statm_gives_resident_and_shared_pages() {
        assert_eq!(parse_statm("100 30 10 1 0 20 0\n"), Some((30, 10)));
        assert_eq!(parse_statm("100"), None);
    }

    #[test]
    fn descendants_follow_every_generation_and_nothing_else() {
        let parents = [
            (1, 0),
            (10, 1),
            (11, 10),
            (12, 11),
            (13, 10),
            (20, 1),
            (21, 20),
            (10, 10),
        ];
        let mut d = descendants(10, &parents);
        d.sort();
        assert_eq!(d, vec![11, 12, 13]);
        assert!(descendants(12, &parents).is_empty());
    }

    /// A fake /proc: the root 100 with a child 101 (2 threads) and grandchild 102; 200 is not
    /// theirs.
    #[test]
    fn a_reading_sums_the_live_tree_and_what_the_launcher_reaped() {
        let d = tempfile::tempdir().unwrap();
        let proc = |pid: u32, ppid: u32, ut: u64, st: u64, cut: u64, threads: u64, res: u64| {
            let p = d.path().join(pid.to_string());
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(
                p.join("stat"),
                format!("{pid} (x) S {ppid} 0 0 0 -1 0 0 0 0 0 {ut} {st} {cut} 0 20 0 {threads} 0 1 1 1"),
            )
            .unwrap();
            std::fs::write(p.join("statm"), format!("999 {res} 10 0 0 0 0")).unwrap();
            std::fs::write(
                p.join("io"),
                "rchar: 0\nwchar: 0\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\n",
            )
            .unwrap();
        };
        proc(100, 1, 0, 0, 0, 1, 1);
        proc(101, 100, 100, 50, 10, 2, 110);
        proc(102, 101, 200, 0, 0, 1, 20);
        proc(200, 1, 5000, 0, 0, 1, 999);
        let mut r = ProcTreeReader::new(
            100,
            d.path().to_path_buf(),
            Box::new(|| Reaped {
                cpu_user_ns: 1_000_000_000,
                cpu_system_ns: 0,
                maxrss_bytes: 0,
                io: Some(procio::ProcIo {
                    read_bytes: 1,
                    write_bytes: 2,
                    syscr: 3,
                    syscw: 4,
                }),
            }),
        );
        r.tick_ns = 10_000_000;
        r.page_bytes = 4096;
        let x = r.sample();
        let mut pids = r.pids().to_vec();
        pids.sort();
        assert_eq!(pids, vec![101, 102]);
        // (100+10 + 200) ticks user, 50 system, + 1 s reaped.
        assert_eq!(x.cpu_user_ns, Some(310 * 10_000_000 + 1_000_000_000));
        assert_eq!(x.cpu_system_ns, Some(50 * 10_000_000));
        assert_eq!(x.cpu_usage_ns, Some(4_600_000_000), "user + system");
        assert_eq!(x.mem_current_bytes, Some(130 * 4096));
        assert_eq!(x.mem_rss_bytes, Some(110 * 4096), "resident minus shared");
        assert_eq!((x.tasks, x.threads), (Some(2), Some(3)));
        assert_eq!(x.io_read_bytes, Some(2 * 4096 + 1));
        assert_eq!(x.io_write_ops, Some(2 * 2 + 4));
        assert_eq!(x.mem_limit_bytes, None, "no limit without a cgroup");
        assert_eq!(x.mem_cache_bytes, None, "no page cache without a cgroup");

        // The child exits and is reaped by the launcher: its time moves into RUSAGE_CHILDREN;
        // the total never goes backwards even if the reaped figure lags.
        std::fs::remove_dir_all(d.path().join("101")).unwrap();
        std::fs::remove_dir_all(d.path().join("102")).unwrap();
        let x2 = r.sample();
        assert_eq!(x2.tasks, Some(0));
        assert_eq!(x2.cpu_usage_ns, Some(4_600_000_000), "kept, not dipped");
    }

    /// A child that the launcher reaps while a sample is being taken is counted once: the
    /// launcher's reaped figure is asked first, and a reaped child is gone from /proc.
    #[test]
    fn a_child_reaped_during_a_sample_is_counted_once() {
        let d = tempfile::tempdir().unwrap();
        let child = d.path().join("101");
        std::fs::create_dir_all(&child).unwrap();
        std::fs::write(
            child.join("stat"),
            "101 (x) S 100 0 0 0 -1 0 0 0 0 0 500 80 0 0 20 0 1 0 1 1 1",
        )
        .unwrap();
        std::fs::create_dir_all(d.path().join("100")).unwrap();
        std::fs::write(
            d.path().join("100/stat"),
            "100 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 1 1",
        )
        .unwrap();
        // The reaper runs when asked: the child (5 s user, 0.8 s system) ends and is reaped,
        // its time now in RUSAGE_CHILDREN and its /proc directory gone.
        let dir = child.clone();
        let mut r = ProcTreeReader::new(
            100,
            d.path().to_path_buf(),
            Box::new(move || {
                let _ = std::fs::remove_dir_all(&dir);
                Reaped {
                    cpu_user_ns: 5_000_000_000,
                    cpu_system_ns: 800_000_000,
                    maxrss_bytes: 0,
                    io: None,
                }
            }),
        );
        r.tick_ns = 10_000_000;
        let x = r.sample();
        assert_eq!(x.cpu_usage_ns, Some(5_800_000_000), "once, not twice");
        assert_eq!(x.tasks, Some(0));
    }
}
