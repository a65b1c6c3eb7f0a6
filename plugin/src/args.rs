//! Arguments from the plugstack.conf line, e.g.
//! `optional /usr/local/lib/slurm/jobscope_spank.so config=/etc/jobscope/jobscope.toml cadence=10`.
//! They override the config file. Unknown or malformed arguments are logged and ignored: a typo on the
//! plugstack line must not stop jobs.

use std::path::PathBuf;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Args {
    pub config: Option<PathBuf>,
    pub cadence_s: Option<u32>,
    pub spool_dir: Option<PathBuf>,
    pub handover_dir: Option<PathBuf>,
    pub cgroup_root: Option<PathBuf>,
    pub proc_root: Option<PathBuf>,
    /// `disabled=1`: load but do nothing (a switch for admins).
    pub disabled: bool,
    /// Fault injection for the real-cluster tests: `inject=sampler_panic|init_panic|exit_panic`.
    pub inject: Vec<String>,
    pub problems: Vec<String>,
}

impl Args {
    pub fn parse<'a>(argv: impl IntoIterator<Item = &'a str>) -> Args {
        let mut a = Args::default();
        for arg in argv {
            let (k, v) = arg.split_once('=').unwrap_or((arg, ""));
            let path = |v: &str| -> Option<PathBuf> {
                let p = PathBuf::from(v);
                (p.is_absolute()
                    && !p
                        .components()
                        .any(|c| matches!(c, std::path::Component::ParentDir)))
                .then_some(p)
            };
            let ok = match k {
                "config" => path(v).map(|p| a.config = Some(p)).is_some(),
                "cadence" => v
                    .parse::<u32>()
                    .ok()
                    .filter(|c| (1..=3600).contains(c))
                    .map(|c| a.cadence_s = Some(c))
                    .is_some(),
                "spool_dir" => path(v).map(|p| a.spool_dir = Some(p)).is_some(),
                "handover_dir" => path(v).map(|p| a.handover_dir = Some(p)).is_some(),
                "cgroup_root" => path(v).map(|p| a.cgroup_root = Some(p)).is_some(),
                "proc_root" => path(v).map(|p| a.proc_root = Some(p)).is_some(),
                "disabled" => {
                    a.disabled = v != "0";
                    true
                }
                "inject" => {
                    a.inject.extend(v.split(',').map(str::to_string));
                    true
                }
                _ => false,
            };
            if !ok {
                a.problems
                    .push(format!("ignoring plugstack argument {arg:?}"));
            }
        }
        a
    }

    pub fn injects(&self, what: &str) -> bool {
        self.inject.iter().any(|i| i == what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_and_reports_bad() {
        let a = Args::parse([
            "cadence=10",
            "spool_dir=/tmp/s",
            "bogus=1",
            "cadence=0",
            "spool_dir=rel",
            "inject=sampler_panic",
        ]);
        assert_eq!(a.cadence_s, Some(10));
        assert_eq!(a.spool_dir, Some(PathBuf::from("/tmp/s")));
        assert_eq!(a.problems.len(), 3);
        assert!(a.injects("sampler_panic"));
    }
}
