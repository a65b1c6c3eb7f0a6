//! [`Scope`]: what jobscope is told about the one job it samples on this node: where the job's
//! cgroup is, what it was allocated, and the node's name. Whoever starts the sampler supplies it
//! (the SPANK plugin from SLURM's answers and SLURM's cgroup naming, `plugin/src/scope.rs`; a
//! standalone launcher from its own), so the sampler, the GPU monitor and the spool headers are
//! set up from this one value and know no scheduler's conventions.
use crate::cgroup::{CgroupVersion, JobCgroup};
use crate::spool::Header;

/// The job as seen on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The job's cgroup; `None` when the process that set up sampling is in none (then there is
    /// nothing to sample, and step files hold no readings).
    pub cgroup: Option<JobCgroup>,
    /// CPU cores allocated to the job on this node, if the scheduler said.
    pub alloc_cores: Option<u32>,
    /// Memory allocated to the job on this node, if the scheduler said.
    pub alloc_mem_bytes: Option<u64>,
    /// The node's name as the scheduler knows it (spool directory and report key).
    pub node: String,
}

impl Scope {
    /// Writes what the scope knows into a spool header: node, cgroup version and path (the
    /// memory directory, which is the job's directory on v2 too), allocation.
    pub fn describe(&self, h: &mut Header) {
        h.node.clone_from(&self.node);
        h.cgroup_version = self.cgroup_version();
        h.cgroup_path = self
            .cgroup
            .as_ref()
            .map(|c| c.memory_dir.display().to_string());
        h.io_source = self.cgroup.as_ref().map(JobCgroup::io_source);
        h.alloc_cores = self.alloc_cores;
        h.alloc_mem_bytes = self.alloc_mem_bytes;
    }

    pub fn cgroup_version(&self) -> Option<CgroupVersion> {
        self.cgroup.as_ref().map(|c| c.version)
    }
}

/// This host's short name (up to the first dot), `"unknown"` if it has none: the node name when
/// nothing better is known.
pub fn short_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname NUL-terminates on success.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let host = if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    match host.split('.').next() {
        Some(h) if !h.is_empty() => h.to_string(),
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::IoSource;
    use std::path::PathBuf;

    fn header() -> Header {
        Header {
            uid: 1,
            gid: 1,
            plugin_version: "t".into(),
            ..Header::new(9, "before", "job", 0)
        }
    }

    #[test]
    fn describe_fills_the_header_from_the_scope() {
        let scope = Scope {
            cgroup: Some(JobCgroup {
                version: CgroupVersion::V1,
                cpu_dir: PathBuf::from("/c/cpuacct/a/run_1"),
                memory_dir: PathBuf::from("/c/memory/a/run_1"),
            }),
            alloc_cores: Some(4),
            alloc_mem_bytes: Some(8 << 30),
            node: "n1".into(),
        };
        let mut h = header();
        scope.describe(&mut h);
        assert_eq!(h.node, "n1");
        assert_eq!(h.cgroup_version, Some(CgroupVersion::V1));
        assert_eq!(h.cgroup_path.as_deref(), Some("/c/memory/a/run_1"));
        assert_eq!((h.alloc_cores, h.alloc_mem_bytes), (Some(4), Some(8 << 30)));
        assert_eq!(h.job_id, 9, "other fields untouched");

        // Nothing known stays unknown (None), never 0.
        let bare = Scope {
            cgroup: None,
            alloc_cores: None,
            alloc_mem_bytes: None,
            node: "n2".into(),
        };
        let mut h = header();
        h.alloc_cores = Some(1);
        bare.describe(&mut h);
        assert_eq!(h.cgroup_version, None);
        assert_eq!(h.cgroup_path, None);
        assert_eq!((h.alloc_cores, h.alloc_mem_bytes), (None, None));
        assert_eq!(h.node, "n2");
    }

    #[test]
    fn describe_says_where_io_comes_from() {
        // Issue 20 §3: on v2 the job's io.stat exists only where the io controller is enabled
        // for it (captured under SLURM 24.11 and 26.05: slurm-conf/vm/captured/*/io-{on,off}/cg-job.txt).
        let tmp = tempfile::tempdir().unwrap();
        let job = tmp.path().join("job_1");
        std::fs::create_dir(&job).unwrap();
        let scope = |version| Scope {
            cgroup: Some(JobCgroup {
                version,
                cpu_dir: job.clone(),
                memory_dir: job.clone(),
            }),
            alloc_cores: None,
            alloc_mem_bytes: None,
            node: "vm".into(),
        };
        let source = |version| {
            let mut h = header();
            scope(version).describe(&mut h);
            h.io_source
        };
        assert_eq!(source(CgroupVersion::V2), Some(IoSource::Proc), "io off");
        assert_eq!(source(CgroupVersion::V1), Some(IoSource::Proc));
        std::fs::write(
            job.join("io.stat"),
            "254:0 rbytes=1 wbytes=2 rios=1 wios=1\n",
        )
        .unwrap();
        assert_eq!(source(CgroupVersion::V2), Some(IoSource::IoStat), "io on");
        assert_eq!(
            source(CgroupVersion::V1),
            Some(IoSource::Proc),
            "v1 never has io.stat"
        );
    }

    #[test]
    fn short_hostname_is_the_first_label() {
        let n = short_hostname();
        assert!(!n.is_empty() && !n.contains('.'), "{n}");
        let full = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        if let Some(first) = full.trim().split('.').next().filter(|f| !f.is_empty()) {
            assert_eq!(n, first);
        }
    }
}
