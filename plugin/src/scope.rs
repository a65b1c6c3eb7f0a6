//! SLURM's side of the job's [`Scope`]: which cgroup directory is the job's, the node name SLURM
//! puts in cgroup paths, and the allocation slurmstepd reports. The generic locator
//! ([`jobscope_sampler::cgroup::locate`]) knows none of SLURM's names; they are all here.
//!
//! SLURM's layouts (measured on 22.05 for v1; v2 from SLURM's cgroup/v2 plugin, tested against
//! the hand-built fixture `sampler/testdata/cgroup-v2-slurm-layout/`):
//! - v1: `<mnt>/{memory,cpuacct,freezer,…}/slurm/uid_<uid>/job_<id>/step_<s>/task_<n>`, or
//!   `slurm_<node>/uid_<uid>/…` with Debian's multiple-slurmd build.
//! - v2: `<mnt>/system.slice/slurmstepd.scope/job_<id>/step_<s>/{slurm,user/task_<n>}`, or
//!   `<node>_slurmstepd.scope` with multiple slurmd.
//!
//! The job's directory is the first path component named `job_<id>`, so any prefix works,
//! including an extra level a newer SLURM puts above the job.
//!
//! SLURM 26.05 names the job's v2 directory after the job's SLUID by default
//! (`<node>_slurmstepd.scope/s8CHM89JJ8SM00/step_batch/user/task_0`; `job_<id>` again only with
//! `CgroupJobIdPaths=yes`), captured in `slurm-conf/vm/captured/sid/io-off/main-task-cgroup-path.txt`.
//! SPANK gives no SLUID item, so where no component is `job_<id>`, the job's directory is found by
//! SLURM's structure instead: the one component between `slurmstepd.scope` and a `step_*`
//! directory. slurmstepd sits in its own step's cgroup, which the job's user cannot move it out
//! of, so this is the job the plugin is running for.
use jobscope_sampler::cgroup::parse::parse_proc_cgroup;
use jobscope_sampler::cgroup::{locate, JobCgroup};
use jobscope_sampler::scope::{short_hostname, Scope};
use std::path::Path;

/// What slurmstepd tells about the job on this node (SPANK items), already checked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Allocation {
    pub cores: Option<u32>,
    pub mem_bytes: Option<u64>,
}

/// The scope of SLURM job `job_id` seen from a process inside its cgroups, whose
/// `/proc/<pid>/cgroup` text is `proc_cgroup` (`None`: unreadable, so no cgroup).
pub fn slurm_scope(
    proc_cgroup: Option<&str>,
    cgroup_root: &Path,
    job_id: u32,
    alloc: Allocation,
) -> Scope {
    let cgroup = proc_cgroup.and_then(|t| locate_job(t, cgroup_root, job_id));
    Scope {
        node: node_name(cgroup.as_ref(), cgroup_root),
        cgroup,
        alloc_cores: alloc.cores,
        alloc_mem_bytes: alloc.mem_bytes,
    }
}

/// The cgroup of SLURM job `job_id`: the path cut right after its `job_<id>` component, or on
/// cgroup v2 after the SLUID-named directory of SLURM 26.05 ([`sluid_dir`]).
pub fn locate_job(proc_cgroup: &str, cgroup_root: &Path, job_id: u32) -> Option<JobCgroup> {
    let job = format!("job_{job_id}");
    locate(proc_cgroup, cgroup_root, &|c| c == job).or_else(|| {
        let sluid = sluid_dir(proc_cgroup)?;
        locate(proc_cgroup, cgroup_root, &|c| c == sluid)
    })
}

/// The name of the job's directory on a v2 line of `/proc/<pid>/cgroup` whose path is
/// `…/[<node>_]slurmstepd.scope/<D>/step_<s>[/…]`: `D`, when it is not `job_<n>` (which
/// [`locate_job`] matches by id) and looks like a SLUID (letters and digits). `None` for any
/// other path.
pub fn sluid_dir(proc_cgroup: &str) -> Option<String> {
    // Only the v2 line: v1 lines name controllers and keep `job_<id>`.
    parse_proc_cgroup(proc_cgroup)
        .iter()
        .filter(|l| l.is_unified())
        .find_map(|l| {
            let comps: Vec<&str> = l.path.split('/').filter(|c| !c.is_empty()).collect();
            let scope = comps
                .iter()
                .position(|c| *c == "slurmstepd.scope" || c.ends_with("_slurmstepd.scope"))?;
            let (dir, step) = (comps.get(scope + 1)?, comps.get(scope + 2)?);
            let sluid_like = !dir.starts_with("job_")
                && !dir.is_empty()
                && dir.len() <= 64
                && dir.bytes().all(|b| b.is_ascii_alphanumeric());
            (sluid_like && step.starts_with("step_")).then(|| dir.to_string())
        })
}

/// The node name: from the job's cgroup path (multiple-slurmd builds name it there), else the
/// short host name.
pub fn node_name(cg: Option<&JobCgroup>, cgroup_root: &Path) -> String {
    cg.and_then(|c| node_from_path(c, cgroup_root))
        .unwrap_or_else(short_hostname)
}

/// The SLURM node name in a job's cgroup path below `cgroup_root`: v1 `slurm_<node>/...`
/// (multiple-slurmd build), v2 `<node>_slurmstepd.scope` (SLURM's scope name with multiple
/// slurmd). Only the part below the root is looked at, so a mount point's own name never counts.
pub fn node_from_path(cg: &JobCgroup, cgroup_root: &Path) -> Option<String> {
    let rel = cg.memory_dir.strip_prefix(cgroup_root).ok()?;
    let comps = || rel.iter().filter_map(|c| c.to_str());
    comps()
        .find_map(|c| c.strip_prefix("slurm_"))
        .or_else(|| comps().find_map(|c| c.strip_suffix("_slurmstepd.scope")))
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
}

/// This process's `/proc/self/cgroup`, if readable.
pub fn own_proc_cgroup() -> Option<String> {
    std::fs::read_to_string("/proc/self/cgroup").ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobscope_model::sample::CgroupVersion;
    use std::fs;
    use std::path::PathBuf;

    const V1_FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sampler/testdata/cgroup-v1-debian12-slurm-22.05"
    );
    const V2_FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sampler/testdata/cgroup-v2-slurm-layout"
    );

    fn fixture_text(root: &str, name: &str) -> String {
        fs::read_to_string(Path::new(root).join(name)).unwrap()
    }

    fn node(cg: &JobCgroup, root: &Path) -> Option<String> {
        node_from_path(cg, root)
    }

    #[test]
    fn v1_multiple_slurmd_from_captured_extern_stepd() {
        let root = Path::new(V1_FIXTURE);
        // proc-self-cgroup.extern.txt: "4:memory:/slurm_vm/uid_1001/job_1/step_extern", "2:cpuacct:/".
        let text = fixture_text(V1_FIXTURE, "proc-self-cgroup.extern.txt");
        let cg = locate_job(&text, root, 1).unwrap();
        assert_eq!(
            cg,
            JobCgroup {
                version: CgroupVersion::V1,
                cpu_dir: root.join("cpuacct/slurm_vm/uid_1001/job_1"),
                memory_dir: root.join("memory/slurm_vm/uid_1001/job_1"),
            }
        );
        assert!(cg.exists());
        assert_eq!(node(&cg, root).as_deref(), Some("vm"));
        // The batch slurmstepd gives the same job directory.
        let batch = fixture_text(V1_FIXTURE, "proc-self-cgroup.batch.txt");
        assert_eq!(locate_job(&batch, root, 1).unwrap(), cg);
        // Another job id: not this process's job.
        assert_eq!(locate_job(&text, root, 11), None);

        let scope = slurm_scope(
            Some(&text),
            root,
            1,
            Allocation {
                cores: Some(2),
                mem_bytes: Some(1 << 30),
            },
        );
        assert_eq!(
            scope,
            Scope {
                cgroup: Some(cg),
                alloc_cores: Some(2),
                alloc_mem_bytes: Some(1 << 30),
                node: "vm".into(),
            }
        );
    }

    #[test]
    fn v1_plain_slurm_prefix() {
        let text = "11:freezer:/slurm/uid_1000/job_55/step_0\n\
                    6:memory:/slurm/uid_1000/job_55/step_0/task_1\n\
                    3:cpu,cpuacct:/slurm/uid_1000/job_55/step_0/task_1\n\
                    1:name=systemd:/system.slice/slurmd.service\n";
        let root = Path::new("/sys/fs/cgroup");
        let cg = locate_job(text, root, 55).unwrap();
        assert_eq!(cg.version, CgroupVersion::V1);
        assert_eq!(cg.memory_dir, root.join("memory/slurm/uid_1000/job_55"));
        assert_eq!(cg.cpu_dir, root.join("cpuacct/slurm/uid_1000/job_55"));
        assert_eq!(node(&cg, root), None, "plain `slurm/` names no node");
        let step = cg.step("step_0");
        assert_eq!(
            step.memory_dir,
            root.join("memory/slurm/uid_1000/job_55/step_0")
        );
        assert_eq!(
            step.cpu_dir,
            root.join("cpuacct/slurm/uid_1000/job_55/step_0")
        );
    }

    #[test]
    fn v1_from_freezer_only() {
        // slurmstepd after moving itself to the memory root: only freezer still names the job.
        let text = "6:freezer:/slurm_n3/uid_5/job_9\n4:memory:/\n2:cpuacct:/\n";
        let root = Path::new("/r");
        let cg = locate_job(text, root, 9).unwrap();
        assert_eq!(cg.memory_dir, Path::new("/r/memory/slurm_n3/uid_5/job_9"));
        assert_eq!(node(&cg, root).as_deref(), Some("n3"));
    }

    #[test]
    fn v2_slurmstepd_scope() {
        let root = Path::new(V2_FIXTURE);
        let dir = root.join("system.slice/slurmstepd.scope/job_4242");
        for name in ["proc-self-cgroup.extern.txt", "proc-self-cgroup.task.txt"] {
            let cg = locate_job(&fixture_text(V2_FIXTURE, name), root, 4242).unwrap();
            assert_eq!(
                cg,
                JobCgroup {
                    version: CgroupVersion::V2,
                    cpu_dir: dir.clone(),
                    memory_dir: dir.clone(),
                }
            );
            assert_eq!(node(&cg, root), None);
        }
        let c = Path::new("/c");
        let cg = locate_job(
            "0::/system.slice/slurmstepd.scope/job_77/step_extern\n",
            c,
            77,
        )
        .unwrap();
        assert_eq!(cg.cpu_dir, c.join("system.slice/slurmstepd.scope/job_77"));
        let cg = locate_job(
            "0::/system.slice/n7_slurmstepd.scope/job_77/step_0/user/task_0\n",
            c,
            77,
        )
        .unwrap();
        assert_eq!(
            node(&cg, c).as_deref(),
            Some("n7"),
            "multiple-slurmd scope name"
        );
        // A removed cgroup shows as "(deleted)" on v2.
        let cg = locate_job(
            "0::/system.slice/slurmstepd.scope/job_77 (deleted)\n",
            c,
            77,
        )
        .unwrap();
        assert_eq!(cg.cpu_dir, c.join("system.slice/slurmstepd.scope/job_77"));
    }

    #[test]
    fn v2_hybrid_unified() {
        let text = "12:memory:/system.slice/slurmd.service\n\
                    1:name=systemd:/system.slice/slurmstepd.scope\n\
                    0::/system.slice/n2_slurmstepd.scope/job_7/step_batch/user/task_0\n";
        // Nothing on disk: v1 lines present, so cgroup2 is the hybrid `unified` mount.
        let root = Path::new("/nonexistent-jobscope-root");
        let job = locate_job(text, root, 7).unwrap();
        assert_eq!(job.version, CgroupVersion::V2);
        assert_eq!(
            job.cpu_dir,
            root.join("unified/system.slice/n2_slurmstepd.scope/job_7")
        );
        // The `unified` mount level is below the root and is not a node name.
        assert_eq!(node(&job, root).as_deref(), Some("n2"));
    }

    #[test]
    fn slurm_26_05_sluid_job_directory() {
        // Captured from SLURM 26.05.5 on cgroup v2 (sid VM, default CgroupJobIdPaths=no):
        // slurm-conf/vm/captured/sid/io-off/main-task-cgroup-path.txt.
        let path = fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../slurm-conf/vm/captured/sid/io-off/main-task-cgroup-path.txt"
        ))
        .unwrap();
        let captured = format!("0::{}\n", path.trim());
        let c = Path::new("/c");
        let cg = locate_job(&captured, c, 1).unwrap();
        let dir = cg
            .cpu_dir
            .strip_prefix(c)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let comps: Vec<&str> = dir.split('/').collect();
        assert_eq!(comps.len(), 3, "{dir}");
        assert_eq!(comps[..2], ["system.slice", "vm_slurmstepd.scope"]);
        assert!(comps[2].starts_with('s') && comps[2].len() == 14, "{dir}");
        assert_eq!(cg.version, CgroupVersion::V2);
        assert_eq!(node(&cg, c).as_deref(), Some("vm"));
        // Every step's slurmstepd and task finds the same directory.
        for tail in [
            "step_extern/slurm",
            "step_batch/slurm",
            "step_0/user/task_3",
            "step_batch",
        ] {
            let line = format!("0::/system.slice/vm_slurmstepd.scope/sF5XM89JVR1Z00/{tail}\n");
            let cg = locate_job(&line, c, 17).unwrap();
            assert_eq!(
                cg.cpu_dir,
                c.join("system.slice/vm_slurmstepd.scope/sF5XM89JVR1Z00"),
                "{tail}"
            );
        }
        // With CgroupJobIdPaths=yes the directory is job_<id> again, matched by id.
        let line = "0::/system.slice/vm_slurmstepd.scope/job_1/step_batch/user/task_0\n";
        assert_eq!(
            locate_job(line, c, 1).unwrap().cpu_dir,
            c.join("system.slice/vm_slurmstepd.scope/job_1")
        );
        // …and another job's directory never stands in for this one's.
        assert_eq!(locate_job(line, c, 2), None);
        // Not below slurmstepd's scope, no step level, or not a SLUID's shape: nothing.
        for path in [
            "0::/user.slice/user-1001.slice/s8CHM89JJ8SM00/step_batch\n",
            "0::/system.slice/vm_slurmstepd.scope/s8CHM89JJ8SM00\n",
            "0::/system.slice/vm_slurmstepd.scope/system\n",
            "0::/system.slice/vm_slurmstepd.scope/a.b/step_0\n",
            "0::/system.slice/vm_slurmstepd.scope/../step_0\n",
            "4:memory:/system.slice/vm_slurmstepd.scope/s8CHM89JJ8SM00/step_0\n",
        ] {
            assert_eq!(locate_job(path, c, 1), None, "{path}");
        }
    }

    #[test]
    fn sluid_parent_directory() {
        // SLUID assumption: a SLUID-named level above `job_<id>` is just part of the prefix.
        let text = "0::/system.slice/slurmstepd.scope/sluid_s0a1b2c3/job_123/step_0/user/task_0\n";
        let cg = locate_job(text, Path::new("/c"), 123).unwrap();
        assert_eq!(
            cg.cpu_dir,
            Path::new("/c/system.slice/slurmstepd.scope/sluid_s0a1b2c3/job_123")
        );
    }

    #[test]
    fn none_outside_a_job() {
        let root = Path::new("/sys/fs/cgroup");
        assert_eq!(
            locate_job("0::/user.slice/user-1000.slice/session-3.scope\n", root, 1),
            None
        );
        assert_eq!(locate_job("4:memory:/\n2:cpuacct:/\n0::/\n", root, 1), None);
        // job_12 must not match job_1, nor job_1x.
        assert_eq!(
            locate_job("4:memory:/slurm/uid_1/job_12/step_0\n0::/\n", root, 1),
            None
        );
        assert_eq!(locate_job("0::/slurm/job_1x\n", root, 1), None);
        assert_eq!(locate_job("", root, 1), None);
        // A path that climbs out of the root is refused.
        assert_eq!(locate_job("0::/../../etc/job_1\n", root, 1), None);
        // Unreadable /proc/self/cgroup: no cgroup, the host name as node.
        let scope = slurm_scope(None, root, 1, Allocation::default());
        assert_eq!(scope.cgroup, None);
        assert_eq!(scope.node, short_hostname());
        assert_eq!((scope.alloc_cores, scope.alloc_mem_bytes), (None, None));
    }

    #[test]
    fn node_name_ignores_the_root_and_empty_names() {
        // A root whose own path holds `slurm_x` does not name the node.
        let root = PathBuf::from("/tmp/slurm_x/cg");
        let cg = locate_job("4:memory:/slurm/uid_0/job_3\n", &root, 3).unwrap();
        assert_eq!(node_from_path(&cg, &root), None);
        assert_eq!(node_name(Some(&cg), &root), short_hostname());
        // `slurm_` with nothing after it names nothing.
        let cg = locate_job("4:memory:/slurm_/uid_0/job_3\n", &root, 3).unwrap();
        assert_eq!(node_from_path(&cg, &root), None);
    }
}
