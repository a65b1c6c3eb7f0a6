//! Arguments from the plugstack.conf line, e.g.
//! `optional /usr/local/lib/slurm/jobscope_spank.so config=/etc/jobscope/jobscope.toml cadence=10`.
//! They override the config file. Unknown or malformed arguments are logged and ignored: a typo on the
//! plugstack line must not stop jobs.

use jobscope_config::{AbsPath, ECHO_CHARS};
use jobscope_model::text::quoted;
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
    /// Only a plugin built with the `fault-injection` feature takes it (the cluster tests install
    /// such a build as `jobscope_spank_faults.so`); the packaged plugin logs it and ignores it,
    /// so a stray `inject=` on a production plugstack line can never panic on purpose.
    pub inject: Vec<String>,
    pub problems: Vec<String>,
}

impl Args {
    pub fn parse<'a>(argv: impl IntoIterator<Item = &'a str>) -> Args {
        let mut a = Args::default();
        for arg in argv {
            let (k, v) = arg.split_once('=').unwrap_or((arg, ""));
            let mut why = None;
            let mut path = |v: &str| -> Option<PathBuf> {
                AbsPath::new(v)
                    .map_err(|e| why = Some(e.to_string()))
                    .ok()
                    .map(AbsPath::into_path_buf)
            };
            let ok = match k {
                "config" => path(v).map(|p| a.config = Some(p)).is_some(),
                "cadence" => v
                    .parse::<u32>()
                    .ok()
                    .filter(|c| jobscope_config::CADENCE_S.contains(c))
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
                "inject" if cfg!(feature = "fault-injection") => {
                    a.inject.extend(v.split(',').map(str::to_string));
                    true
                }
                "inject" => {
                    a.problems.push(format!(
                        "ignoring plugstack argument {}: this plugin is built without the fault-injection feature",
                        quoted(arg, ECHO_CHARS)
                    ));
                    continue;
                }
                _ => false,
            };
            if !ok {
                // The argument as written, escaped: the log line stays one line (`quoted`).
                let arg = quoted(arg, ECHO_CHARS);
                a.problems.push(match why {
                    Some(why) => format!("ignoring plugstack argument {arg}: {why}"),
                    None => format!("ignoring plugstack argument {arg}"),
                });
            }
        }
        a
    }

    /// Always false without the `fault-injection` feature (`inject` then stays empty).
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
        ]);
        assert_eq!(a.cadence_s, Some(10));
        assert_eq!(a.spool_dir, Some(PathBuf::from("/tmp/s")));
        assert_eq!(a.problems.len(), 3);
    }

    /// The packaged plugin (no `fault-injection` feature) ignores `inject=` with one log line:
    /// nothing is injected, and the other arguments still apply.
    #[cfg(not(feature = "fault-injection"))]
    #[test]
    fn inject_is_ignored_with_a_log_line_without_the_feature() {
        let a = Args::parse(["inject=sampler_panic,init_panic,exit_panic", "cadence=10"]);
        for what in ["sampler_panic", "init_panic", "exit_panic"] {
            assert!(!a.injects(what), "{what} injected");
        }
        assert_eq!(a.cadence_s, Some(10));
        assert_eq!(a.problems.len(), 1, "{:?}", a.problems);
        assert!(
            a.problems[0].contains("\"inject=sampler_panic,init_panic,exit_panic\"")
                && a.problems[0].contains("without the fault-injection feature"),
            "{:?}",
            a.problems
        );
    }

    /// The cluster tests' build (`--features fault-injection`) takes `inject=`.
    #[cfg(feature = "fault-injection")]
    #[test]
    fn inject_is_taken_with_the_feature() {
        let a = Args::parse(["inject=sampler_panic,exit_panic"]);
        assert!(a.injects("sampler_panic") && a.injects("exit_panic"));
        assert!(!a.injects("init_panic"));
        assert!(a.problems.is_empty(), "{:?}", a.problems);
    }

    #[test]
    fn paths_must_be_absolute_without_dot_dot_and_say_so() {
        let a = Args::parse([
            "config=/etc/jobscope/j.toml",
            "proc_root=/proc/./",
            "spool_dir=/var/spool/../../etc",
            "handover_dir=relative/h",
            "cgroup_root=",
        ]);
        assert_eq!(a.config, Some(PathBuf::from("/etc/jobscope/j.toml")));
        assert_eq!(a.proc_root, Some(PathBuf::from("/proc/./")));
        assert_eq!(
            (&a.spool_dir, &a.handover_dir, &a.cgroup_root),
            (&None, &None, &None)
        );
        assert_eq!(a.problems.len(), 3, "{:?}", a.problems);
        for p in &a.problems {
            assert!(p.contains("must be an absolute path without '..'"), "{p}");
            assert!(!p.contains('\n'), "one line: {p}");
        }
    }

    /// A refused argument holding CR, LF, ESC or a bidi override is logged on one line, escaped.
    #[test]
    fn refused_arguments_are_logged_escaped_on_one_line() {
        let a = Args::parse([
            "spool_dir=rel\r\nFAKE: line",
            "cgroup_root=/x/../\u{1b}[31mred",
            "bogus\u{202E}=1",
            "cadence=1\u{3164}",
        ]);
        assert_eq!(a.problems.len(), 4, "{:?}", a.problems);
        for p in &a.problems {
            assert!(
                !p.chars().any(jobscope_model::text::is_hidden),
                "a raw control, bidi or invisible character: {p:?}"
            );
        }
        assert!(a.problems[0].contains("rel\\r\\nFAKE"), "{:?}", a.problems);
        assert!(a.problems[1].contains("\\u{1b}[31mred"), "{:?}", a.problems);
        assert!(a.problems[2].contains("bogus\\u{202e}"), "{:?}", a.problems);
    }
}
