//! Tests of the cgroup readers: one success and one failure test per file reader (macro
//! generated), `locate` on every supported layout, full reads of the captured v1 tree and the
//! v2 fixture tree, "gone", the reader's kept descriptors across samples, and parsers under
//! proptest.
use super::parse::*;
use super::*;
use std::fs;
use std::path::PathBuf;

const V1_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/testdata/cgroup-v1-debian12-slurm-22.05"
);
const V2_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/testdata/cgroup-v2-slurm-layout"
);

/// A throwaway cgroup directory; `file(name, content)` creates a file (and its parents).
struct TestCgroup {
    dir: tempfile::TempDir,
}

impl TestCgroup {
    fn new() -> Self {
        TestCgroup {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn file(&self, name: &str, content: &str) {
        let p = self.path().join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
}

/// The reader returns `expected` for `content`.
macro_rules! test_success {
    ($name:ident, $reader:path, $file:expr, $content:expr, $expected:expr) => {
        #[test]
        fn $name() {
            let cg = TestCgroup::new();
            cg.file($file, $content);
            assert_eq!($reader(cg.path()).unwrap(), $expected);
        }
    };
}

/// The reader says `Gone` (with the path) when the file is missing, and `Malformed` (with the
/// path) for `bad`.
macro_rules! test_failure {
    ($name:ident, $reader:path, $file:expr, $bad:expr) => {
        #[test]
        fn $name() {
            let cg = TestCgroup::new();
            let want = cg.path().join($file);
            match $reader(cg.path()) {
                Err(Error::Gone { path }) => assert_eq!(path, want),
                r => panic!("missing {}: {r:?}", $file),
            }
            cg.file($file, $bad);
            match $reader(cg.path()) {
                Err(Error::Malformed { path, .. }) => assert_eq!(path, want),
                r => panic!("malformed {}: {r:?}", $file),
            }
        }
    };
}

// ---- v1 ----
test_success!(
    v1_cpuacct_usage,
    v1::read_cpuacct_usage_ns,
    "cpuacct.usage",
    "3327871162\n",
    3327871162
);
test_failure!(
    v1_cpuacct_usage_bad,
    v1::read_cpuacct_usage_ns,
    "cpuacct.usage",
    "-5\n"
);
test_success!(
    v1_cpuacct_usage_user,
    v1::read_cpuacct_usage_user_ns,
    "cpuacct.usage_user",
    "3023945568\n",
    3023945568
);
test_failure!(
    v1_cpuacct_usage_user_bad,
    v1::read_cpuacct_usage_user_ns,
    "cpuacct.usage_user",
    "\n"
);
test_success!(
    v1_cpuacct_usage_sys,
    v1::read_cpuacct_usage_sys_ns,
    "cpuacct.usage_sys",
    "303950845\n",
    303950845
);
test_failure!(
    v1_cpuacct_usage_sys_bad,
    v1::read_cpuacct_usage_sys_ns,
    "cpuacct.usage_sys",
    "1 2\n3\n"
);
test_success!(
    v1_cpuacct_usage_percpu,
    v1::read_cpuacct_usage_percpu_ns,
    "cpuacct.usage_percpu",
    "17730021 3310141141 \n",
    vec![17730021, 3310141141]
);
test_failure!(
    v1_cpuacct_usage_percpu_bad,
    v1::read_cpuacct_usage_percpu_ns,
    "cpuacct.usage_percpu",
    "1 x 3\n"
);
test_success!(
    v1_memory_usage,
    v1::read_memory_usage_in_bytes,
    "memory.usage_in_bytes",
    "248438784\n",
    248438784
);
test_failure!(
    v1_memory_usage_bad,
    v1::read_memory_usage_in_bytes,
    "memory.usage_in_bytes",
    "lots\n"
);
test_success!(
    v1_memory_max_usage,
    v1::read_memory_max_usage_in_bytes,
    "memory.max_usage_in_bytes",
    "250380288\n",
    250380288
);
test_failure!(
    v1_memory_max_usage_bad,
    v1::read_memory_max_usage_in_bytes,
    "memory.max_usage_in_bytes",
    "2.5e8\n"
);
test_success!(
    v1_memory_limit,
    v1::read_memory_limit_in_bytes,
    "memory.limit_in_bytes",
    "1048576000\n",
    Some(1048576000)
);
test_success!(
    v1_memory_limit_unlimited,
    v1::read_memory_limit_in_bytes,
    "memory.limit_in_bytes",
    "9223372036854771712\n",
    None
);
test_failure!(
    v1_memory_limit_bad,
    v1::read_memory_limit_in_bytes,
    "memory.limit_in_bytes",
    "max\n"
);
test_success!(
    v1_memory_stat,
    v1::read_memory_stat_v1,
    "memory.stat",
    "cache 0\nrss 0\ntotal_cache 26906624\ntotal_rss 217255936\ntotal_rss_huge 4\ntotal_shmem 0\n\
     total_mapped_file 3563520\ntotal_swap 0\ntotal_inactive_file 26099712\ntotal_pgmajfault 7\n",
    MemStatV1 {
        total_rss_bytes: Some(217255936),
        total_cache_bytes: Some(26906624),
        total_shmem_bytes: Some(0),
        total_mapped_file_bytes: Some(3563520),
        total_swap_bytes: Some(0),
        total_inactive_file_bytes: Some(26099712),
        total_pgmajfault: Some(7),
    }
);
test_failure!(
    v1_memory_stat_bad,
    v1::read_memory_stat_v1,
    "memory.stat",
    "total_rss 1\ntotal_cache 12ab\n"
);
test_success!(
    v1_memory_failcnt,
    v1::read_memory_failcnt,
    "memory.failcnt",
    "3\n",
    3
);
test_failure!(
    v1_memory_failcnt_bad,
    v1::read_memory_failcnt,
    "memory.failcnt",
    "three\n"
);
test_success!(
    v1_memory_oom_control,
    v1::read_memory_oom_control,
    "memory.oom_control",
    "oom_kill_disable 0\nunder_oom 1\noom_kill 2\n",
    OomControlV1 {
        oom_kill_disable: Some(0),
        under_oom: Some(1),
        oom_kill: Some(2)
    }
);
test_success!(
    v1_memory_oom_control_old_kernel,
    v1::read_memory_oom_control,
    "memory.oom_control",
    "oom_kill_disable 0\nunder_oom 0\n",
    OomControlV1 {
        oom_kill_disable: Some(0),
        under_oom: Some(0),
        oom_kill: None
    }
);
test_failure!(
    v1_memory_oom_control_bad,
    v1::read_memory_oom_control,
    "memory.oom_control",
    "oom_kill\n"
);
test_success!(
    v1_tasks,
    v1::read_tasks,
    "tasks",
    "2571\n2572\n2576\n",
    vec![2571, 2572, 2576]
);
test_success!(
    v1_tasks_empty,
    v1::read_tasks,
    "tasks",
    "",
    Vec::<u32>::new()
);
test_failure!(v1_tasks_bad, v1::read_tasks, "tasks", "2571\nabc\n");

// ---- common ----
test_success!(
    cgroup_procs,
    read_cgroup_procs,
    "cgroup.procs",
    "2589\n",
    vec![2589]
);
test_failure!(cgroup_procs_bad, read_cgroup_procs, "cgroup.procs", "-1\n");

// ---- v2 ----
test_success!(
    v2_cpu_stat,
    v2::read_cpu_stat,
    "cpu.stat",
    "usage_usec 100\nuser_usec 70\nsystem_usec 30\ncore_sched.force_idle_usec 0\nnr_periods 9\nnr_throttled 4\n\
     throttled_usec 5000\nnr_bursts 0\nburst_usec 0\n",
    CpuStatV2 {
        usage_usec: Some(100),
        user_usec: Some(70),
        system_usec: Some(30),
        nr_periods: Some(9),
        nr_throttled: Some(4),
        throttled_usec: Some(5000),
    }
);
test_success!(
    v2_cpu_stat_no_controller,
    v2::read_cpu_stat,
    "cpu.stat",
    "usage_usec 100\nuser_usec 70\nsystem_usec 30\n",
    CpuStatV2 {
        usage_usec: Some(100),
        user_usec: Some(70),
        system_usec: Some(30),
        ..Default::default()
    }
);
test_failure!(
    v2_cpu_stat_bad,
    v2::read_cpu_stat,
    "cpu.stat",
    "usage_usec 1 2\n"
);
test_success!(
    v2_memory_current,
    v2::read_memory_current_bytes,
    "memory.current",
    "3221553152\n",
    3221553152
);
test_failure!(
    v2_memory_current_bad,
    v2::read_memory_current_bytes,
    "memory.current",
    "3 GiB\n"
);
test_success!(
    v2_memory_peak,
    v2::read_memory_peak_bytes,
    "memory.peak",
    "4294905856\n",
    4294905856
);
test_failure!(
    v2_memory_peak_bad,
    v2::read_memory_peak_bytes,
    "memory.peak",
    "\n"
);
test_success!(
    v2_memory_max,
    v2::read_memory_max_bytes,
    "memory.max",
    "8589934592\n",
    Some(8589934592)
);
test_success!(
    v2_memory_max_unlimited,
    v2::read_memory_max_bytes,
    "memory.max",
    "max\n",
    None
);
test_failure!(
    v2_memory_max_bad,
    v2::read_memory_max_bytes,
    "memory.max",
    "maximum\n"
);
test_success!(
    v2_memory_stat,
    v2::read_memory_stat_v2,
    "memory.stat",
    "anon 10\nfile 20\nkernel 5\nshmem 3\nfile_mapped 4\ninactive_file 6\npgmajfault 7\n",
    MemStatV2 {
        anon_bytes: Some(10),
        file_bytes: Some(20),
        shmem_bytes: Some(3),
        file_mapped_bytes: Some(4),
        inactive_file_bytes: Some(6),
        pgmajfault: Some(7),
    }
);
test_failure!(
    v2_memory_stat_bad,
    v2::read_memory_stat_v2,
    "memory.stat",
    "anon\nfile 20\n"
);
test_success!(
    v2_memory_swap_current,
    v2::read_memory_swap_current_bytes,
    "memory.swap.current",
    "4096\n",
    4096
);
test_failure!(
    v2_memory_swap_current_bad,
    v2::read_memory_swap_current_bytes,
    "memory.swap.current",
    "max\n"
);
test_success!(
    v2_memory_events,
    v2::read_memory_events,
    "memory.events",
    "low 0\nhigh 1\nmax 17\noom 2\noom_kill 3\noom_group_kill 0\n",
    MemEventsV2 {
        low: Some(0),
        high: Some(1),
        max: Some(17),
        oom: Some(2),
        oom_kill: Some(3),
        oom_group_kill: Some(0)
    }
);
test_failure!(
    v2_memory_events_bad,
    v2::read_memory_events,
    "memory.events",
    "oom_kill -1\n"
);
test_success!(
    v2_io_stat,
    v2::read_io_stat,
    "io.stat",
    "259:0 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n\
     8:0 rbytes=90112 wbytes=0 rios=22 wios=0 dbytes=0 dios=0\n",
    IoStatV2 {
        rbytes: Some(1549312),
        wbytes: Some(314773504),
        rios: Some(214),
        wios: Some(353)
    }
);
test_success!(
    v2_io_stat_truncated,
    v2::read_io_stat,
    "io.stat",
    "259:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n8:0 rbytes=90112 wbytes=0 ri",
    IoStatV2 {
        rbytes: Some(1),
        wbytes: Some(2),
        rios: Some(3),
        wios: Some(4)
    }
);
test_failure!(
    v2_io_stat_bad,
    v2::read_io_stat,
    "io.stat",
    "259:0 rbytes=1x wbytes=2 rios=3 wios=4\n"
);
test_success!(
    v2_pids_current,
    v2::read_pids_current,
    "pids.current",
    "24\n",
    24
);
test_failure!(
    v2_pids_current_bad,
    v2::read_pids_current,
    "pids.current",
    "max\n"
);
test_success!(
    v2_cgroup_threads,
    v2::read_cgroup_threads,
    "cgroup.threads",
    "3139\n3140\n",
    vec![3139, 3140]
);
test_failure!(
    v2_cgroup_threads_bad,
    v2::read_cgroup_threads,
    "cgroup.threads",
    "3139 3140\n"
);
const PSI: &str = "some avg10=0.00 avg60=0.12 avg300=0.03 total=413077\nfull avg10=0.00 avg60=0.10 avg300=0.02 total=395810\n";
const PSI_VALUE: Pressure = Pressure {
    some_total_usec: Some(413077),
    full_total_usec: Some(395810),
};
test_success!(
    v2_cpu_pressure,
    v2::read_cpu_pressure,
    "cpu.pressure",
    PSI,
    PSI_VALUE
);
test_failure!(
    v2_cpu_pressure_bad,
    v2::read_cpu_pressure,
    "cpu.pressure",
    "some avg10=0.00 total=\n"
);
test_success!(
    v2_memory_pressure,
    v2::read_memory_pressure,
    "memory.pressure",
    PSI,
    PSI_VALUE
);
test_failure!(
    v2_memory_pressure_bad,
    v2::read_memory_pressure,
    "memory.pressure",
    "full total=x\n"
);
test_success!(
    v2_io_pressure,
    v2::read_io_pressure,
    "io.pressure",
    PSI,
    PSI_VALUE
);
test_failure!(
    v2_io_pressure_bad,
    v2::read_io_pressure,
    "io.pressure",
    "some avg10=0.00\n"
);

#[test]
fn reader_error_kinds_are_distinct() {
    let cg = TestCgroup::new();
    // A directory where a file is expected: EISDIR on read, an I/O error that is not "gone".
    fs::create_dir(cg.path().join("memory.current")).unwrap();
    let e = v2::read_memory_current_bytes(cg.path()).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    cg.file("memory.peak", "\u{0}\u{1}\n");
    assert!(matches!(
        v2::read_memory_peak_bytes(cg.path()),
        Err(Error::Malformed { .. })
    ));
    fs::write(cg.path().join("pids.current"), [0xff, 0xfe, b'\n']).unwrap();
    assert!(
        matches!(
            v2::read_pids_current(cg.path()),
            Err(Error::Malformed { .. })
        ),
        "not UTF-8"
    );
}

// ---- locate ----

fn fixture_text(root: &str, name: &str) -> String {
    fs::read_to_string(Path::new(root).join(name)).unwrap()
}

/// Accepts the one directory name `name` (the fixtures' job directories).
fn named(name: &'static str) -> impl Fn(&str) -> bool {
    move |c| c == name
}

/// The job cgroup of a fixture tree, as captured from a process inside it.
fn fixture_job(root: &Path, text_root: &str, text: &str, job_dir: &'static str) -> JobCgroup {
    locate(&fixture_text(text_root, text), root, &named(job_dir)).unwrap()
}

fn is_run(c: &str) -> bool {
    c.starts_with("run_")
}

#[test]
fn locate_v1_cuts_after_the_first_accepted_component() {
    let root = Path::new("/r");
    // Any prefix above, any sub-cgroups below; cpuacct's own line when it names the job.
    let text = "7:freezer:/\n\
                4:memory:/site/run_7/part/a\n\
                2:cpuacct:/other/run_7/part\n\
                1:name=systemd:/system.slice/x.service\n";
    let cg = locate(text, root, &is_run).unwrap();
    assert_eq!(
        cg,
        JobCgroup {
            version: CgroupVersion::V1,
            cpu_dir: root.join("cpuacct/other/run_7"),
            memory_dir: root.join("memory/site/run_7"),
        }
    );
    // The first accepted component wins (a nested directory with a matching name is inside).
    let cg = locate("4:memory:/run_1/run_2/x\n", root, &is_run).unwrap();
    assert_eq!(cg.memory_dir, root.join("memory/run_1"));
    // cpuacct at `/` (the supervisor is not in the job there): the memory path is used.
    let cg = locate("4:memory:/a/run_3/s\n2:cpuacct:/\n", root, &is_run).unwrap();
    assert_eq!(cg.cpu_dir, root.join("cpuacct/a/run_3"));
    let step = cg.step("s");
    assert_eq!(step.memory_dir, root.join("memory/a/run_3/s"));
    assert_eq!(step.cpu_dir, root.join("cpuacct/a/run_3/s"));
}

#[test]
fn locate_v1_controller_preference() {
    let root = Path::new("/r");
    // Only freezer names the job (the memory line is at `/`): freezer's path is used.
    let text = "6:freezer:/x/run_9\n4:memory:/\n2:cpuacct:/\n";
    let cg = locate(text, root, &is_run).unwrap();
    assert_eq!(cg.memory_dir, root.join("memory/x/run_9"));
    // Memory is preferred over freezer, cpuset and cpuacct.
    let text = "6:freezer:/f/run_1\n5:cpuset:/c/run_1\n4:memory:/m/run_1/s\n2:cpuacct:/a/run_1\n";
    let cg = locate(text, root, &is_run).unwrap();
    assert_eq!(cg.memory_dir, root.join("memory/m/run_1"));
    assert_eq!(cg.cpu_dir, root.join("cpuacct/a/run_1"));
    // Only cpuacct names it: the last resort.
    let cg = locate("4:memory:/\n3:cpu,cpuacct:/a/run_2\n", root, &is_run).unwrap();
    assert_eq!(cg.memory_dir, root.join("memory/a/run_2"));
    assert_eq!(cg.cpu_dir, root.join("cpuacct/a/run_2"));
    // A v1 controller not used for locating (pids) does not locate.
    assert_eq!(locate("8:pids:/run_4\n4:memory:/\n", root, &is_run), None);
}

#[test]
fn locate_v1_captured_fixture() {
    let root = Path::new(V1_FIXTURE);
    let cg = fixture_job(root, V1_FIXTURE, "proc-self-cgroup.extern.txt", "job_1");
    assert_eq!(cg.cpu_dir, root.join("cpuacct/slurm_vm/uid_1001/job_1"));
    assert_eq!(cg.memory_dir, root.join("memory/slurm_vm/uid_1001/job_1"));
    assert!(cg.exists());
    assert_eq!(
        fixture_job(root, V1_FIXTURE, "proc-self-cgroup.batch.txt", "job_1"),
        cg
    );
}

#[test]
fn locate_v2_pure_and_deleted() {
    let root = Path::new(V2_FIXTURE);
    let dir = root.join("system.slice/slurmstepd.scope/job_4242");
    for name in ["proc-self-cgroup.extern.txt", "proc-self-cgroup.task.txt"] {
        assert_eq!(
            fixture_job(root, V2_FIXTURE, name, "job_4242"),
            JobCgroup {
                version: CgroupVersion::V2,
                cpu_dir: dir.clone(),
                memory_dir: dir.clone(),
            }
        );
    }
    let c = Path::new("/c");
    let cg = locate("0::/a.slice/run_5/w/x\n", c, &is_run).unwrap();
    assert_eq!(cg.cpu_dir, c.join("a.slice/run_5"));
    // A removed cgroup shows as "(deleted)" on v2.
    let cg = locate("0::/a.slice/run_5 (deleted)\n", c, &is_run).unwrap();
    assert_eq!(cg.cpu_dir, c.join("a.slice/run_5"));
}

#[test]
fn locate_v2_hybrid_unified() {
    let text = "12:memory:/system.slice/x.service\n\
                1:name=systemd:/system.slice/y.scope\n\
                0::/system.slice/y.scope/run_7/s/t\n";
    let cg = TestCgroup::new();
    // Nothing on disk: v1 lines present, so cgroup2 is the hybrid `unified` mount.
    let job = locate(text, cg.path(), &is_run).unwrap();
    assert_eq!(job.version, CgroupVersion::V2);
    assert_eq!(
        job.cpu_dir,
        cg.path().join("unified/system.slice/y.scope/run_7")
    );
    assert_eq!(job.memory_dir, job.cpu_dir);
    // Pure v2 text but the directory only exists below `unified`: the existing one wins.
    let pure = "0::/system.slice/y.scope/run_7/s\n";
    assert_eq!(
        locate(pure, cg.path(), &is_run).unwrap().cpu_dir,
        cg.path().join("system.slice/y.scope/run_7")
    );
    fs::create_dir_all(cg.path().join("unified/system.slice/y.scope/run_7")).unwrap();
    assert_eq!(
        locate(pure, cg.path(), &is_run).unwrap().cpu_dir,
        job.cpu_dir
    );
}

#[test]
fn locate_none_outside_a_job_and_never_above_the_root() {
    let root = Path::new("/sys/fs/cgroup");
    let run7 = named("run_7");
    let session = "0::/user.slice/user-1000.slice/session-3.scope\n";
    assert_eq!(locate(session, root, &run7), None);
    assert_eq!(locate("4:memory:/\n2:cpuacct:/\n0::/\n", root, &run7), None);
    // The predicate sees whole components only: run_77 and xrun_7 are not run_7.
    assert_eq!(
        locate("4:memory:/a/run_77/s\n0::/xrun_7\n", root, &run7),
        None
    );
    assert_eq!(locate("", root, &run7), None);
    // A path that climbs out of the root is refused, on v1 and v2.
    assert_eq!(locate("0::/../../etc/run_7\n", root, &run7), None);
    assert_eq!(locate("4:memory:/a/../run_7\n", root, &run7), None);
    // After the job's directory nothing is looked at.
    let below = locate("0::/a/run_7/../../x\n", root, &run7).unwrap();
    assert_eq!(below.cpu_dir, root.join("a/run_7"));
}

// ---- full reads ----

#[test]
fn read_v1_captured_job() {
    let root = Path::new(V1_FIXTURE);
    let cg = locate(
        &fixture_text(V1_FIXTURE, "proc-self-cgroup.extern.txt"),
        root,
        &named("job_1"),
    )
    .unwrap();
    let (snap, problems) = cg.read_detailed(&root.join("proc"));
    assert!(problems.is_empty(), "{problems:?}");
    assert!(!snap.gone);
    // Job directories: C = cpuacct/slurm_vm/uid_1001/job_1, M = memory/slurm_vm/uid_1001/job_1.
    let expected = Reading {
        cpu_usage_ns: Some(3327871162),       // C/cpuacct.usage
        cpu_user_ns: Some(3023945568),        // C/cpuacct.usage_user
        cpu_system_ns: Some(303950845),       // C/cpuacct.usage_sys
        cpus_active: None,                    // derived by the sampler from two percpu readings
        cpu_throttled_usec: None,             // no cpu job cgroup on v1
        cpu_nr_throttled: None,               // idem
        mem_current_bytes: Some(248438784),   // M/memory.usage_in_bytes
        mem_peak_bytes: Some(250380288),      // M/memory.max_usage_in_bytes
        mem_limit_bytes: Some(1048576000),    // M/memory.limit_in_bytes
        mem_rss_bytes: Some(217255936),       // M/memory.stat total_rss (local rss is 0)
        mem_cache_bytes: Some(26906624),      // M/memory.stat total_cache
        mem_shmem_bytes: Some(0),             // M/memory.stat total_shmem
        mem_mapped_file_bytes: Some(3563520), // M/memory.stat total_mapped_file
        mem_swap_bytes: Some(0),              // M/memory.stat total_swap
        mem_failcnt: Some(0),                 // M/memory.failcnt
        mem_oom_events: None,                 // v1 has no such counter
        mem_oom_kill_events: Some(0),         // M/memory.oom_control oom_kill
        mem_high_events: None,
        mem_max_events: None,
        // C/**/cgroup.procs: step_extern/task_0 {2564}, step_batch/task_0 {2571,2572,2576,2584},
        // step_0/task_0 {2589}; the slurmstepds (2560, 2567, 2583) are only in the memory tree.
        tasks: Some(6),
        // C/**/tasks: 1 + 7 + 1 lines.
        threads: Some(9),
        // proc/2589/io (the only process captured; the other pids read as gone).
        io_read_bytes: Some(7942144), // read_bytes
        io_write_bytes: Some(53248),  // write_bytes
        io_read_ops: Some(32),        // syscr
        io_write_ops: Some(3),        // syscw
        psi_cpu_some_usec: None,
        psi_mem_some_usec: None,
        psi_mem_full_usec: None,
        psi_io_some_usec: None,
        // slurmstepd's reaped I/O: step readings only (plugin/src/steps.rs), never a cgroup's.
        reaped_read_bytes: None,
        reaped_write_bytes: None,
        reaped_read_ops: None,
        reaped_write_ops: None,
        ..Reading::default() // the kernel_* fields: not from the cgroup (sampler/src/kernel_view.rs)
    };
    assert_eq!(snap.reading, expected);
    assert_eq!(snap.percpu_ns, Some(vec![17730021, 3310141141])); // C/cpuacct.usage_percpu

    // Through a reader keeping its descriptors, every sample gives the same reading.
    let mut reader = cg.reader(&root.join("proc"));
    for _ in 0..3 {
        assert_eq!(reader.sample().reading, expected);
        assert_eq!(reader.percpu_ns(), Some(&[17730021, 3310141141][..]));
        assert!(reader.problems().is_empty(), "{:?}", reader.problems());
    }
    assert_eq!(cg.read(&root.join("proc")).reading, expected);

    let mut pids = cg.processes().unwrap();
    pids.sort_unstable();
    assert_eq!(pids, [2564, 2571, 2572, 2576, 2584, 2589]);
}

#[test]
fn read_v1_step() {
    let root = Path::new(V1_FIXTURE);
    let cg = locate(
        &fixture_text(V1_FIXTURE, "proc-self-cgroup.batch.txt"),
        root,
        &named("job_1"),
    )
    .unwrap();
    let snap = cg.step("step_0").read(&root.join("proc"));
    let cpu_usage: u64 =
        fs::read_to_string(root.join("cpuacct/slurm_vm/uid_1001/job_1/step_0/cpuacct.usage"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    assert_eq!(snap.reading.cpu_usage_ns, Some(cpu_usage));
    assert_eq!(snap.reading.tasks, Some(1)); // step_0/task_0/cgroup.procs {2589}
    assert_eq!(snap.reading.io_read_bytes, Some(7942144)); // proc/2589/io read_bytes
}

#[test]
fn read_v2_fixture_job() {
    let root = Path::new(V2_FIXTURE);
    let cg = locate(
        &fixture_text(V2_FIXTURE, "proc-self-cgroup.task.txt"),
        root,
        &named("job_4242"),
    )
    .unwrap();
    let no_proc = TestCgroup::new();
    let (snap, problems) = cg.read_detailed(no_proc.path());
    assert!(problems.is_empty(), "{problems:?}");
    assert!(!snap.gone);
    assert_eq!(snap.percpu_ns, None);
    // All files in system.slice/slurmstepd.scope/job_4242/.
    let expected = Reading {
        cpu_usage_ns: Some(1843219507 * 1000), // cpu.stat usage_usec
        cpu_user_ns: Some(1790513220 * 1000),  // cpu.stat user_usec
        cpu_system_ns: Some(52706287 * 1000),  // cpu.stat system_usec
        cpus_active: None,
        cpu_throttled_usec: Some(0),           // cpu.stat throttled_usec
        cpu_nr_throttled: Some(0),             // cpu.stat nr_throttled
        mem_current_bytes: Some(3221553152),   // memory.current
        mem_peak_bytes: Some(4294905856),      // memory.peak
        mem_limit_bytes: Some(8589934592),     // memory.max
        mem_rss_bytes: Some(2981388288),       // memory.stat anon
        mem_cache_bytes: Some(214695936),      // memory.stat file
        mem_shmem_bytes: Some(4096),           // memory.stat shmem
        mem_mapped_file_bytes: Some(45056000), // memory.stat file_mapped
        mem_swap_bytes: Some(0),               // memory.swap.current
        mem_failcnt: None,                     // v1 only
        mem_oom_events: Some(0),               // memory.events oom
        mem_oom_kill_events: Some(0),          // memory.events oom_kill
        mem_high_events: Some(0),              // memory.events high
        mem_max_events: Some(17),              // memory.events max
        tasks: Some(7),                        // **/cgroup.procs lines: 1+1+1+2+1+1
        threads: Some(24),                     // pids.current
        io_read_bytes: Some(1459200 + 90112),  // io.stat rbytes, 259:0 + 8:0
        io_write_bytes: Some(314773504),       // io.stat wbytes
        io_read_ops: Some(192 + 22),           // io.stat rios
        io_write_ops: Some(353),               // io.stat wios
        psi_cpu_some_usec: Some(2818361),      // cpu.pressure some total
        psi_mem_some_usec: Some(413077),       // memory.pressure some total
        psi_mem_full_usec: Some(395810),       // memory.pressure full total
        psi_io_some_usec: Some(95874),         // io.pressure some total
        // slurmstepd's reaped I/O: step readings only (plugin/src/steps.rs), never a cgroup's.
        reaped_read_bytes: None,
        reaped_write_bytes: None,
        reaped_read_ops: None,
        reaped_write_ops: None,
        ..Reading::default() // the kernel_* fields: not from the cgroup (sampler/src/kernel_view.rs)
    };
    assert_eq!(snap.reading, expected);
}

#[test]
fn read_v2_step_and_thread_fallback() {
    let root = Path::new(V2_FIXTURE);
    let cg = locate(
        &fixture_text(V2_FIXTURE, "proc-self-cgroup.extern.txt"),
        root,
        &named("job_4242"),
    )
    .unwrap();
    let no_proc = TestCgroup::new();
    // step_0 has cpu.stat, memory.current and memory.max ("max") only.
    let (snap, problems) = cg.step("step_0").read_detailed(no_proc.path());
    assert!(problems.is_empty(), "{problems:?}");
    let r = &snap.reading;
    assert_eq!(r.cpu_usage_ns, Some(1801442893 * 1000)); // step_0/cpu.stat usage_usec
    assert_eq!(r.mem_current_bytes, Some(3103784960)); // step_0/memory.current
    assert_eq!(r.mem_limit_bytes, None, "memory.max is 'max'");
    assert_eq!(r.mem_peak_bytes, None, "no memory.peak: None, not 0");
    assert_eq!(r.tasks, Some(2)); // step_0/{slurm,user/task_0}/cgroup.procs
                                  // No pids.current: threads counted from cgroup.threads (6 + 3).
    assert_eq!(r.threads, Some(9));
    // No io.stat: falls back to /proc/<pid>/io, and no process is readable here.
    assert_eq!(r.io_read_bytes, None);
    assert_eq!(r.psi_cpu_some_usec, None);
}

/// Copies a fixture tree into a temp dir (so tests may break it).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for ent in fs::read_dir(from).unwrap() {
        let ent = ent.unwrap();
        let dst = to.join(ent.file_name());
        if ent.file_type().unwrap().is_dir() {
            copy_tree(&ent.path(), &dst);
        } else {
            fs::copy(ent.path(), dst).unwrap();
        }
    }
}

#[test]
fn gone_v1_and_v2() {
    let tmp = TestCgroup::new();
    copy_tree(Path::new(V1_FIXTURE), &tmp.path().join("v1"));
    let root = tmp.path().join("v1");
    let cg = locate(
        &fixture_text(V1_FIXTURE, "proc-self-cgroup.extern.txt"),
        &root,
        &named("job_1"),
    )
    .unwrap();
    assert!(!cg.read(&root.join("proc")).gone);
    // The removal order seen on SLURM: cpuacct (and memory) first. With cpuacct gone but memory
    // still there, this is not "gone" and the memory values are still read.
    fs::remove_dir_all(&cg.cpu_dir).unwrap();
    let snap = cg.read(&root.join("proc"));
    assert!(!snap.gone);
    assert_eq!(snap.reading.cpu_usage_ns, None);
    assert_eq!(snap.reading.mem_current_bytes, Some(248438784));
    // Members are counted in the memory tree then (slurmstepds included): 3 + 6 processes.
    assert_eq!(snap.reading.tasks, Some(9));
    fs::remove_dir_all(&cg.memory_dir).unwrap();
    let (snap, problems) = cg.read_detailed(&root.join("proc"));
    assert!(snap.gone);
    assert_eq!(snap.reading, Reading::default());
    assert!(problems.is_empty(), "{problems:?}");
    assert!(!cg.exists());

    copy_tree(Path::new(V2_FIXTURE), &tmp.path().join("v2"));
    let root = tmp.path().join("v2");
    let cg = locate(
        &fixture_text(V2_FIXTURE, "proc-self-cgroup.task.txt"),
        &root,
        &named("job_4242"),
    )
    .unwrap();
    let mut reader = cg.reader(&root);
    assert!(!reader.sample().gone);
    fs::remove_dir_all(&cg.cpu_dir).unwrap();
    let snap = reader.sample();
    assert!(snap.gone);
    assert!(cg.read(&root).gone);
    assert!(cg.processes().unwrap_err().is_gone());
}

#[test]
fn malformed_file_in_full_read_loses_only_its_field() {
    let tmp = TestCgroup::new();
    copy_tree(Path::new(V1_FIXTURE), tmp.path());
    let cg = locate(
        &fixture_text(V1_FIXTURE, "proc-self-cgroup.extern.txt"),
        tmp.path(),
        &named("job_1"),
    )
    .unwrap();
    let stat = cg.memory_dir.join("memory.stat");
    let text = fs::read_to_string(&stat)
        .unwrap()
        .replace("total_rss 217255936", "total_rss 2172x5936");
    fs::write(&stat, text).unwrap();
    fs::write(cg.memory_dir.join("memory.failcnt"), "zero\n").unwrap();
    let (snap, problems) = cg.read_detailed(&tmp.path().join("proc"));
    assert_eq!(snap.reading.mem_rss_bytes, None);
    assert_eq!(
        snap.reading.mem_cache_bytes,
        Some(26906624),
        "other memory.stat fields survive"
    );
    assert_eq!(snap.reading.mem_failcnt, None);
    assert_eq!(snap.reading.cpu_usage_ns, Some(3327871162));
    let mut paths: Vec<_> = problems
        .iter()
        .map(|e| (matches!(e, Error::Malformed { .. }), e.path().to_path_buf()))
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [(true, cg.memory_dir.join("memory.failcnt")), (true, stat)]
    );
}

// ---- parsers never panic ----

mod never_panic {
    use super::*;
    use proptest::prelude::*;

    fn all_parsers(s: &str) {
        let _ = parse_u64(s);
        let _ = parse_limit_v1(s);
        let _ = parse_max_or_u64(s);
        let _ = parse_u64_list(s);
        let _ = parse_id_list(s, &mut Vec::new());
        let _ = parse_memory_stat_v1(s);
        let _ = parse_oom_control_v1(s);
        let _ = parse_cpu_stat_v2(s);
        let _ = parse_memory_stat_v2(s);
        let _ = parse_memory_events_v2(s);
        let _ = parse_io_stat_v2(s);
        let _ = parse_pressure(s);
        let _ = parse_proc_cgroup(s);
        let _ = locate(s, Path::new("/nonexistent-cgroup-root"), &named("job_1"));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn on_arbitrary_text(s in any::<String>()) {
            all_parsers(&s);
        }

        #[test]
        fn on_cgroup_like_text(s in "([a-z_.]{0,12}( |=|:)?[0-9]{0,22}( |\n|/|,)?){0,40}") {
            all_parsers(&s);
        }

        #[test]
        fn on_huge_numbers(a in any::<u64>(), b in any::<u64>()) {
            let io = format!("8:0 rbytes={a} wbytes={b} rios={a} wios={b}\n8:1 rbytes={b} wbytes={a} rios=1 wios=1\n");
            let p = parse_io_stat_v2(&io);
            prop_assert_eq!(p.value.rbytes, a.checked_add(b));
            all_parsers(&io);
        }
    }
}

// ---- the reader keeps its descriptors ----

#[test]
fn reader_v2_fixture_gives_the_one_shot_reading_every_sample() {
    let root = Path::new(V2_FIXTURE);
    let cg = locate(
        &fixture_text(V2_FIXTURE, "proc-self-cgroup.task.txt"),
        root,
        &named("job_4242"),
    )
    .unwrap();
    let no_proc = TestCgroup::new();
    let (once, _) = cg.read_detailed(no_proc.path());
    let mut reader = cg.reader(no_proc.path());
    for _ in 0..3 {
        let snap = reader.sample();
        assert!(!snap.gone);
        assert_eq!(snap.reading, once.reading);
        assert!(reader.problems().is_empty(), "{:?}", reader.problems());
    }
    assert_eq!(reader.percpu_ns(), None, "v2 has no per-CPU times");
}

#[test]
fn reader_reads_kept_descriptors_not_paths() {
    let tmp = TestCgroup::new();
    copy_tree(Path::new(V2_FIXTURE), tmp.path());
    let cg = locate(
        &fixture_text(V2_FIXTURE, "proc-self-cgroup.task.txt"),
        tmp.path(),
        &named("job_4242"),
    )
    .unwrap();
    let mut reader = cg.reader(tmp.path());
    assert_eq!(reader.sample().reading.mem_current_bytes, Some(3221553152));
    // Rewritten in place (as the kernel's values change): the kept descriptor sees it.
    fs::write(cg.cpu_dir.join("memory.current"), "1000\n").unwrap();
    assert_eq!(reader.sample().reading.mem_current_bytes, Some(1000));
    // Replaced by another file under the same name: the reader still reads the file it opened,
    // so the path is not looked up again per sample.
    let new = cg.cpu_dir.join("memory.current.new");
    fs::write(&new, "2000\n").unwrap();
    fs::rename(&new, cg.cpu_dir.join("memory.current")).unwrap();
    assert_eq!(reader.sample().reading.mem_current_bytes, Some(1000));
    assert_eq!(cg.read(tmp.path()).reading.mem_current_bytes, Some(2000));
    assert!(reader.files().contains(&cg.cpu_dir.join("memory.current")));
}

#[test]
fn reader_v1_gone_after_both_controllers_are_removed() {
    let tmp = TestCgroup::new();
    copy_tree(Path::new(V1_FIXTURE), tmp.path());
    let cg = locate(
        &fixture_text(V1_FIXTURE, "proc-self-cgroup.extern.txt"),
        tmp.path(),
        &named("job_1"),
    )
    .unwrap();
    let mut reader = cg.reader(&tmp.path().join("proc"));
    let first = reader.sample();
    assert!(!first.gone);
    assert_eq!(first.reading.tasks, Some(6));
    // cpuacct removed first (as SLURM does): not gone, memory still read, members counted in
    // the memory tree, exactly as a fresh one-shot read says.
    fs::remove_dir_all(&cg.cpu_dir).unwrap();
    let snap = reader.sample();
    assert!(!snap.gone);
    assert_eq!(snap.reading, cg.read(&tmp.path().join("proc")).reading);
    assert_eq!(snap.reading.cpu_usage_ns, None);
    assert_eq!(snap.reading.mem_current_bytes, Some(248438784));
    assert_eq!(snap.reading.tasks, Some(9));
    fs::remove_dir_all(&cg.memory_dir).unwrap();
    let snap = reader.sample();
    assert!(snap.gone);
    assert_eq!(snap.reading, Reading::default());
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
}

#[test]
fn reader_follows_steps_and_processes_that_come_and_go() {
    let tmp = TestCgroup::new();
    copy_tree(Path::new(V1_FIXTURE), tmp.path());
    let proc_root = tmp.path().join("proc");
    let cg = locate(
        &fixture_text(V1_FIXTURE, "proc-self-cgroup.extern.txt"),
        tmp.path(),
        &named("job_1"),
    )
    .unwrap();
    let mut reader = cg.reader(&proc_root);
    let r = reader.sample().reading;
    assert_eq!((r.tasks, r.threads), (Some(6), Some(9)));
    assert_eq!(r.io_read_bytes, Some(7942144)); // proc/2589/io read_bytes
    assert_eq!(
        reader.io().kept_fds(),
        1,
        "one readable process: one kept io file"
    );

    // A new step cgroup with a process appears: seen at the next sample.
    let step1 = cg.cpu_dir.join("step_1/task_0");
    fs::create_dir_all(&step1).unwrap();
    fs::write(step1.join("cgroup.procs"), "3000\n").unwrap();
    fs::write(step1.join("tasks"), "3000\n3001\n").unwrap();
    let pid_dir = proc_root.join("3000");
    fs::create_dir_all(&pid_dir).unwrap();
    let stat_2589 = fs::read_to_string(proc_root.join("2589/stat")).unwrap();
    fs::write(pid_dir.join("stat"), stat_2589.replacen("2589", "3000", 1)).unwrap();
    fs::write(
        pid_dir.join("io"),
        "rchar: 0\nwchar: 0\nsyscr: 1\nsyscw: 1\nread_bytes: 100\nwrite_bytes: 0\ncancelled_write_bytes: 0\n",
    )
    .unwrap();
    let r = reader.sample().reading;
    assert_eq!((r.tasks, r.threads), (Some(7), Some(11)));
    assert_eq!(r.io_read_bytes, Some(7942144 + 100));
    assert_eq!(reader.io().kept_fds(), 2);

    // Process 2589 exits (its /proc directory goes, its pid leaves step_0's cgroup.procs) between
    // two samples: its I/O stays counted, its descriptor is closed.
    fs::remove_dir_all(proc_root.join("2589")).unwrap();
    fs::write(cg.cpu_dir.join("step_0/task_0/cgroup.procs"), "").unwrap();
    fs::write(cg.cpu_dir.join("step_0/task_0/tasks"), "").unwrap();
    let r = reader.sample().reading;
    assert_eq!((r.tasks, r.threads), (Some(6), Some(10)));
    assert_eq!(r.io_read_bytes, Some(7942144 + 100), "cumulative");
    assert_eq!(reader.io().kept_fds(), 1);

    // Pid 3000 is reused by another process (a new /proc/3000): counted as a new process.
    fs::remove_dir_all(&pid_dir).unwrap();
    fs::create_dir_all(&pid_dir).unwrap();
    fs::write(
        pid_dir.join("stat"),
        stat_2589
            .replacen("2589", "3000", 1)
            .replace(" 14741 ", " 99999 "),
    )
    .unwrap();
    fs::write(
        pid_dir.join("io"),
        "rchar: 0\nwchar: 0\nsyscr: 1\nsyscw: 1\nread_bytes: 7\nwrite_bytes: 0\ncancelled_write_bytes: 0\n",
    )
    .unwrap();
    let r = reader.sample().reading;
    assert_eq!(r.io_read_bytes, Some(7942144 + 100 + 7));

    // The step ends: its cgroup goes, and the tree is listed again.
    fs::remove_dir_all(cg.cpu_dir.join("step_1")).unwrap();
    let r = reader.sample().reading;
    assert_eq!((r.tasks, r.threads), (Some(5), Some(8)));
    assert_eq!(r.io_read_bytes, Some(7942144 + 100 + 7));
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
}

/// A cgroup made in the host's real cgroup v1 cpuacct and memory hierarchies (root only), with
/// `sleep` processes; all killed and removed on drop.
struct RealV1Job {
    dirs: Vec<PathBuf>,
    children: Vec<std::process::Child>,
    cgroup: JobCgroup,
}

impl RealV1Job {
    /// `None` (the test is skipped) unless running as root on a host with v1 cpuacct and memory.
    fn create() -> Option<RealV1Job> {
        let root = Path::new("/sys/fs/cgroup");
        // SAFETY: geteuid has no preconditions.
        let is_root = unsafe { libc::geteuid() } == 0;
        let v1 = |c: &str| {
            crate::procio::kfile::CgroupFs::of_path(&root.join(c))
                == crate::procio::kfile::CgroupFs::V1
        };
        if !is_root || !v1("cpuacct") || !v1("memory") {
            eprintln!("skipped: needs root and the cgroup v1 cpuacct and memory hierarchies");
            return None;
        }
        let name = format!("jobscope_test_{}_{}", std::process::id(), line!());
        let mut job = RealV1Job {
            dirs: Vec::new(),
            children: Vec::new(),
            cgroup: JobCgroup {
                version: CgroupVersion::V1,
                cpu_dir: root.join("cpuacct").join(&name),
                memory_dir: root.join("memory").join(&name),
            },
        };
        for base in [&job.cgroup.cpu_dir, &job.cgroup.memory_dir] {
            let step = base.join("step_0");
            fs::create_dir_all(&step).unwrap();
            job.dirs.push(step);
            job.dirs.push(base.clone());
        }
        Some(job)
    }

    /// Starts a process in the step cgroup of both hierarchies; returns its pid.
    fn add_process(&mut self) -> u32 {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id();
        self.children.push(child);
        for base in [&self.cgroup.cpu_dir, &self.cgroup.memory_dir] {
            fs::write(base.join("step_0/cgroup.procs"), pid.to_string()).unwrap();
        }
        pid
    }
}

impl Drop for RealV1Job {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for d in &self.dirs {
            // A killed process leaves its cgroup shortly after it is reaped.
            for _ in 0..50 {
                if fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// On real cgroup v1 the kernel serves pid lists from a cache kept until 1 s after the last read
/// (see `sampler/src/cgroup/reader.rs`): a process added between two samples must be seen both when
/// the samples are closer than `PIDLIST_REUSE_AFTER` (the pid lists are opened afresh) and when
/// they are 1.6 s apart (read through the kept descriptors, none reopened).
#[test]
fn reader_v1_pid_lists_see_new_processes_at_both_paces() {
    use std::time::{Duration, Instant};
    let Some(mut job) = RealV1Job::create() else {
        return;
    };
    job.add_process();
    let mut reader = job.cgroup.reader(Path::new("/proc"));
    let r = reader.sample().reading;
    assert_eq!((r.tasks, r.threads), (Some(1), Some(1)));
    assert_eq!(
        reader.pid_list_reopens(),
        0,
        "first read: opened once, kept"
    );

    // Soon after (within the kernel's 1 s): the kept descriptors would show the cached list of
    // one process.
    let last = Instant::now();
    job.add_process();
    let r = reader.sample().reading;
    if last.elapsed() >= Duration::from_millis(900) {
        // A precondition, not a bound on jobscope: on a machine this loaded the kernel's cache may
        // already be gone, so what follows would prove nothing. Say so instead of failing.
        eprintln!(
            "SKIPPED: two samples {:?} apart, not within the kernel's 1 s pid-list cache",
            last.elapsed()
        );
        return;
    }
    assert_eq!(
        (r.tasks, r.threads),
        (Some(2), Some(2)),
        "seen within 1.5 s"
    );
    // cgroup.procs and tasks of the job and of step_0, in the cpuacct tree.
    assert_eq!(reader.pid_list_reopens(), 4);

    // Twice at the kept pace: the new process is seen, nothing is opened afresh.
    for n in [3, 4] {
        job.add_process();
        std::thread::sleep(Duration::from_millis(1600));
        let r = reader.sample().reading;
        assert_eq!((r.tasks, r.threads), (Some(n), Some(n)), "seen after 1.6 s");
        assert_eq!(
            reader.pid_list_reopens(),
            4,
            "read through the kept descriptors"
        );
    }

    // A process that exits leaves the list at the kept pace too.
    let mut gone = job.children.remove(0);
    gone.kill().unwrap();
    gone.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1600));
    let r = reader.sample().reading;
    assert_eq!((r.tasks, r.threads), (Some(3), Some(3)));
    assert_eq!(reader.pid_list_reopens(), 4);
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
}

/// A fixture tree is on a plain filesystem, which has no pid-list cache: the v1 reader keeps its
/// pid lists open even when samples follow each other at once, and still sees them change.
#[test]
fn reader_v1_fixture_keeps_pid_lists_open() {
    let tmp = TestCgroup::new();
    copy_tree(Path::new(V1_FIXTURE), tmp.path());
    let cg = locate(
        &fixture_text(V1_FIXTURE, "proc-self-cgroup.extern.txt"),
        tmp.path(),
        &named("job_1"),
    )
    .unwrap();
    let mut reader = cg.reader(&tmp.path().join("proc"));
    assert_eq!(reader.sample().reading.tasks, Some(6));
    fs::write(cg.cpu_dir.join("step_0/task_0/cgroup.procs"), "").unwrap();
    assert_eq!(reader.sample().reading.tasks, Some(5));
    assert_eq!(reader.pid_list_reopens(), 0);
}
