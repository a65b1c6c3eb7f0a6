//! Where `jobscope run` puts its command: a cgroup of its own, or (when none can be had) the
//! launcher's process tree.
//!
//! [`plan`] decides from the text of `/proc/self/cgroup`, the cgroup mount root and what the
//! filesystem shows (through [`Probe`], so fixture trees test every branch); [`Placement::make`]
//! creates the directories, [`Placement::remove`] removes them after the run.
//!
//! The rules, in order:
//! 1. **cgroup v1 or hybrid, as root**: a child named `jobscope-run-<id>` of the launcher's own
//!    cgroup in the `memory` and `cpuacct` hierarchies (what the sampler reads: `sampler/src/cgroup/`).
//!    A child of the launcher's own, not of the root: a run inside a SLURM job or a container
//!    stays inside its limits and accounting.
//! 2. **cgroup v2 (pure, or a hybrid host's unified mount)**, where the launcher's own cgroup is
//!    delegated to it (its directory is the caller's, or the caller is root) and offers the memory
//!    controller: the launcher moves itself into `<own>/jobscope-launcher-<id>` (cgroup v2 lets
//!    only leaves hold processes once controllers are enabled below), enables `+memory +cpu +io
//!    +pids` for its children and runs the command in `<own>/jobscope-run-<id>`. This is how an
//!    ordinary user gets a cgroup under systemd (`systemd-run --user --scope -p Delegate=yes`).
//! 3. Otherwise the **process tree** through /proc (`jobscope_sampler::proctree`), and the report's
//!    data notes say why.
//!
//! No limit is set: `--cores/--mem/--gpus` are what the run is measured against, not enforced
//! (a measuring tool that changed how the command behaves would measure something else).
use jobscope_model::sample::CgroupVersion;
use jobscope_sampler::cgroup::parse::parse_proc_cgroup;
use jobscope_sampler::cgroup::JobCgroup;
use std::path::{Path, PathBuf};

/// What [`plan`] needs to know about a path.
pub trait Probe {
    fn is_dir(&self, p: &Path) -> bool;
    /// The owner's uid.
    fn owner(&self, p: &Path) -> Option<u32>;
    fn read(&self, p: &Path) -> Option<String>;
}

/// The real filesystem.
pub struct RealFs;

impl Probe for RealFs {
    fn is_dir(&self, p: &Path) -> bool {
        p.is_dir()
    }
    fn owner(&self, p: &Path) -> Option<u32> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).ok().map(|m| m.uid())
    }
    fn read(&self, p: &Path) -> Option<String> {
        std::fs::read_to_string(p).ok()
    }
}

/// Where the command will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// v1: the run's cgroup in each hierarchy (memory first, then cpuacct).
    V1 {
        dirs: Vec<PathBuf>,
        cgroup: JobCgroup,
    },
    /// v2: the run's cgroup, the launcher's new cgroup, and the delegated parent.
    V2 {
        run: PathBuf,
        launcher: PathBuf,
        parent: PathBuf,
        cgroup: JobCgroup,
    },
    /// No cgroup: the process tree; the text says why (it goes into the report's data notes).
    ProcTree { why: String },
}

/// The v1 controllers the sampler reads (`sampler/src/cgroup/v1.rs`).
const V1_CONTROLLERS: [&str; 2] = ["memory", "cpuacct"];

/// Decides where a run named `id` goes (see the module docs). `euid` is the caller's.
pub fn plan(
    proc_self_cgroup: &str,
    cgroup_root: &Path,
    id: &str,
    euid: u32,
    fs: &dyn Probe,
) -> Placement {
    let lines = parse_proc_cgroup(proc_self_cgroup);
    let name = format!("jobscope-run-{id}");
    let rel = |p: &str| PathBuf::from(p.trim_start_matches('/'));
    // 1. v1 hierarchies, as root.
    let v1: Vec<PathBuf> = V1_CONTROLLERS
        .iter()
        .filter_map(|c| {
            let line = lines.iter().find(|l| l.has_controller(c))?;
            let dir = cgroup_root.join(c).join(rel(line.path));
            fs.is_dir(&dir).then(|| dir.join(&name))
        })
        .collect();
    let has_v1 = v1.len() == V1_CONTROLLERS.len();
    if has_v1 && euid == 0 {
        let cgroup = JobCgroup {
            version: CgroupVersion::V1,
            memory_dir: v1[0].clone(),
            cpu_dir: v1[1].clone(),
        };
        return Placement::V1 { dirs: v1, cgroup };
    }
    // 2. A delegated v2 cgroup.
    let hybrid = lines.iter().any(|l| !l.is_unified());
    let v2_line = lines.iter().find(|l| l.is_unified());
    let why_not_v2 = match v2_line {
        None => "this host has no cgroup v2 hierarchy".to_string(),
        Some(l) => {
            let base = if hybrid {
                cgroup_root.join("unified")
            } else {
                cgroup_root.to_path_buf()
            };
            let own = base.join(rel(l.path));
            let controllers = fs.read(&own.join("cgroup.controllers"));
            let delegated = euid == 0 || fs.owner(&own) == Some(euid);
            match controllers {
                _ if !fs.is_dir(&own) => format!("{} is not mounted here", own.display()),
                None => format!("{} has no cgroup.controllers", own.display()),
                Some(c) if !c.split_whitespace().any(|x| x == "memory") => {
                    format!("no v2 memory controller in {}", own.display())
                }
                Some(_) if !delegated => {
                    format!("{} is not delegated to uid {euid}", own.display())
                }
                Some(_) => {
                    let run = own.join(&name);
                    return Placement::V2 {
                        launcher: own.join(format!("jobscope-launcher-{id}")),
                        parent: own,
                        cgroup: JobCgroup {
                            version: CgroupVersion::V2,
                            cpu_dir: run.clone(),
                            memory_dir: run.clone(),
                        },
                        run,
                    };
                }
            }
        }
    };
    let why_not_v1 = if has_v1 {
        "the v1 hierarchies are root's"
    } else {
        "no v1 memory and cpuacct hierarchies"
    };
    Placement::ProcTree {
        why: format!(
            "no cgroup of its own ({why_not_v1}; {why_not_v2}): followed through its process \
             tree in /proc, so memory is resident sets only (no page cache)"
        ),
    }
}

impl Placement {
    pub fn cgroup(&self) -> Option<&JobCgroup> {
        match self {
            Placement::V1 { cgroup, .. } | Placement::V2 { cgroup, .. } => Some(cgroup),
            Placement::ProcTree { .. } => None,
        }
    }

    /// Creates the cgroup(s) and returns the `cgroup.procs` files the command's process writes
    /// itself into before `exec` (so it is inside from its first instruction). An error leaves
    /// nothing behind.
    pub fn make(&self) -> std::io::Result<Vec<PathBuf>> {
        match self {
            Placement::ProcTree { .. } => Ok(vec![]),
            Placement::V1 { dirs, .. } => {
                let mut made = Vec::new();
                for d in dirs {
                    if let Err(e) = std::fs::create_dir(d) {
                        for m in made.iter().rev() {
                            let _ = std::fs::remove_dir(m);
                        }
                        return Err(std::io::Error::new(
                            e.kind(),
                            format!("{}: {e}", d.display()),
                        ));
                    }
                    made.push(d.clone());
                }
                Ok(dirs.iter().map(|d| d.join("cgroup.procs")).collect())
            }
            Placement::V2 {
                run,
                launcher,
                parent,
                ..
            } => {
                let ctx = |p: &Path, e: std::io::Error| {
                    std::io::Error::new(e.kind(), format!("{}: {e}", p.display()))
                };
                std::fs::create_dir(launcher).map_err(|e| ctx(launcher, e))?;
                let undo = || {
                    let _ = std::fs::write(parent.join("cgroup.procs"), "0");
                    let _ = std::fs::remove_dir(run);
                    let _ = std::fs::remove_dir(launcher);
                };
                let r = (|| {
                    std::fs::write(launcher.join("cgroup.procs"), "0")
                        .map_err(|e| ctx(launcher, e))?;
                    let sc = parent.join("cgroup.subtree_control");
                    // Each controller on its own: one the parent does not offer must not cost
                    // the others.
                    for c in ["+memory", "+cpu", "+io", "+pids"] {
                        let _ = std::fs::write(&sc, c);
                    }
                    std::fs::create_dir(run).map_err(|e| ctx(run, e))
                })();
                if let Err(e) = r {
                    undo();
                    return Err(e);
                }
                Ok(vec![run.join("cgroup.procs")])
            }
        }
    }

    /// Removes the run's cgroup(s) once the command is gone. A cgroup that still holds processes
    /// (the command left some running) is left, and said so.
    pub fn remove(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut rm = |d: &Path| {
            if let Err(e) = std::fs::remove_dir(d) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    problems.push(format!(
                        "{} not removed ({e}): processes the command left running are still in it",
                        d.display()
                    ));
                }
            }
        };
        match self {
            Placement::ProcTree { .. } => {}
            Placement::V1 { dirs, .. } => dirs.iter().for_each(|d| rm(d)),
            Placement::V2 {
                run,
                launcher,
                parent,
                ..
            } => {
                rm(run);
                let _ = std::fs::write(parent.join("cgroup.procs"), "0");
                rm(launcher);
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A fixture tree: directories with owners, and file contents.
    #[derive(Default)]
    struct Tree {
        dirs: HashMap<PathBuf, u32>,
        files: HashMap<PathBuf, String>,
    }

    impl Tree {
        fn dir(mut self, p: &str, owner: u32) -> Tree {
            self.dirs.insert(PathBuf::from(p), owner);
            self
        }
        fn file(mut self, p: &str, text: &str) -> Tree {
            self.files.insert(PathBuf::from(p), text.into());
            self
        }
    }

    impl Probe for Tree {
        fn is_dir(&self, p: &Path) -> bool {
            self.dirs.contains_key(p)
        }
        fn owner(&self, p: &Path) -> Option<u32> {
            self.dirs.get(p).copied()
        }
        fn read(&self, p: &Path) -> Option<String> {
            self.files.get(p).cloned()
        }
    }

    const HYBRID: &str = "9:name=systemd:/\n4:memory:/box/a\n2:cpuacct:/\n1:cpu:/\n0::/\n";
    const PURE_V2: &str = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run.scope\n";

    fn hybrid_tree() -> Tree {
        Tree::default()
            .dir("/cg/memory/box/a", 0)
            .dir("/cg/cpuacct", 0)
            .dir("/cg/unified", 0)
            .file("/cg/unified/cgroup.controllers", "\n")
    }

    #[test]
    fn root_on_a_hybrid_host_gets_v1_children_of_its_own_cgroups() {
        let p = plan(HYBRID, Path::new("/cg"), "7", 0, &hybrid_tree());
        assert_eq!(
            p,
            Placement::V1 {
                dirs: vec![
                    PathBuf::from("/cg/memory/box/a/jobscope-run-7"),
                    PathBuf::from("/cg/cpuacct/jobscope-run-7"),
                ],
                cgroup: JobCgroup {
                    version: CgroupVersion::V1,
                    cpu_dir: PathBuf::from("/cg/cpuacct/jobscope-run-7"),
                    memory_dir: PathBuf::from("/cg/memory/box/a/jobscope-run-7"),
                },
            }
        );
    }

    #[test]
    fn a_user_on_a_hybrid_host_follows_the_process_tree_and_is_told_why() {
        let p = plan(HYBRID, Path::new("/cg"), "7", 1001, &hybrid_tree());
        let Placement::ProcTree { why } = p else {
            panic!("{p:?}")
        };
        assert!(why.contains("v1 hierarchies are root's"), "{why}");
        assert!(why.contains("no v2 memory controller"), "{why}");
        assert!(why.contains("process tree"), "{why}");
    }

    #[test]
    fn a_delegated_v2_scope_is_used_by_its_owner_only() {
        let own = "/cg/user.slice/user-1000.slice/user@1000.service/app.slice/run.scope";
        let tree = Tree::default()
            .dir(own, 1000)
            .file(&format!("{own}/cgroup.controllers"), "cpu io memory pids\n");
        let p = plan(PURE_V2, Path::new("/cg"), "9", 1000, &tree);
        let run = PathBuf::from(format!("{own}/jobscope-run-9"));
        assert_eq!(
            p,
            Placement::V2 {
                run: run.clone(),
                launcher: PathBuf::from(format!("{own}/jobscope-launcher-9")),
                parent: PathBuf::from(own),
                cgroup: JobCgroup {
                    version: CgroupVersion::V2,
                    cpu_dir: run.clone(),
                    memory_dir: run,
                },
            }
        );
        // Another user: not delegated to them.
        let p = plan(PURE_V2, Path::new("/cg"), "9", 1001, &tree);
        assert!(
            matches!(&p, Placement::ProcTree { why } if why.contains("not delegated to uid 1001")),
            "{p:?}"
        );
        // Root may use any.
        assert!(matches!(
            plan(PURE_V2, Path::new("/cg"), "9", 0, &tree),
            Placement::V2 { .. }
        ));
        // Without the memory controller there would be no memory figures: the tree instead.
        let bare = Tree::default()
            .dir(own, 1000)
            .file(&format!("{own}/cgroup.controllers"), "cpu pids\n");
        assert!(matches!(
            plan(PURE_V2, Path::new("/cg"), "9", 1000, &bare),
            Placement::ProcTree { .. }
        ));
    }

    #[test]
    fn a_host_without_cgroups_follows_the_process_tree() {
        let p = plan("", Path::new("/cg"), "1", 0, &Tree::default());
        assert!(
            matches!(&p, Placement::ProcTree { why } if why.contains("no cgroup v2 hierarchy")),
            "{p:?}"
        );
    }

    /// On this host as root (the test machine: hybrid, v1 controllers): the real directories are
    /// made where the plan says, a process can join them, and they are removed afterwards.
    #[test]
    fn make_and_remove_on_this_host() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let id = format!("test-{}", std::process::id());
        let p = plan(&text, Path::new("/sys/fs/cgroup"), &id, 0, &RealFs);
        let Placement::V1 { dirs, .. } = &p else {
            eprintln!("skipped: this host has no v1 memory+cpuacct hierarchies: {p:?}");
            return;
        };
        let procs = p.make().unwrap();
        assert_eq!(procs.len(), 2);
        assert!(dirs.iter().all(|d| d.is_dir()));
        assert!(p.remove().is_empty());
        assert!(dirs.iter().all(|d| !d.exists()));
    }
}
