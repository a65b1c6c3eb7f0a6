//! The collector's sweep of `jobs` entries nobody will delete any more (a job whose sampler died,
//! a `jobscope run` killed before its end). The decision is a pure function of what the
//! collector saw, so it is tested without a kernel.

use jobscope_model::kernel_abi::KEY_RUN;

/// What the collector saw for one key during a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// A `<spool-dir>/<key>.*` directory exists (job keys).
    pub spool_dir: bool,
    /// The process `key & 0xffff_ffff` exists (`jobscope run` keys).
    pub pid_alive: bool,
    /// The key was already an orphan at the previous sweep.
    pub orphan_before: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Still in use.
    Keep,
    /// Looks unused; kept until the next sweep.
    Orphan,
    /// Unused at two sweeps in a row: delete.
    Delete,
}

/// The pid a `jobscope run` key stands for, or None for a SLURM job key.
pub fn run_pid(key: u64) -> Option<u32> {
    (key & KEY_RUN != 0).then_some(key as u32)
}

/// Keep, or delete: a job key without any spool directory, or a run key whose process is gone,
/// is unused. It is deleted only when it was unused at the previous sweep too (a grace of one
/// sweep period): the tagger creates the entry before the job's spool directory exists, and
/// `jobscope run` reads its counters after its child has exited — neither must lose its entry to
/// a sweep that happens to fall in that window.
pub fn verdict(key: u64, seen: Seen) -> Verdict {
    let in_use = match run_pid(key) {
        Some(_) => seen.pid_alive,
        None => seen.spool_dir,
    };
    match (in_use, seen.orphan_before) {
        (true, _) => Verdict::Keep,
        (false, false) => Verdict::Orphan,
        (false, true) => Verdict::Delete,
    }
}

/// The job key a spool directory name `<key>.<anything>` belongs to.
pub fn spool_key(name: &str) -> Option<u64> {
    let (key, _) = name.split_once('.')?;
    key.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Seen = Seen {
        spool_dir: false,
        pid_alive: false,
        orphan_before: false,
    };

    #[test]
    fn job_keys_live_by_their_spool_directories() {
        let with_dir = Seen {
            spool_dir: true,
            ..NONE
        };
        assert_eq!(verdict(1234, with_dir), Verdict::Keep);
        assert_eq!(
            verdict(
                1234,
                Seen {
                    orphan_before: true,
                    ..with_dir
                }
            ),
            Verdict::Keep
        );
        assert_eq!(verdict(1234, NONE), Verdict::Orphan);
        assert_eq!(
            verdict(
                1234,
                Seen {
                    orphan_before: true,
                    ..NONE
                }
            ),
            Verdict::Delete
        );
        // a live process with the job's number means nothing for a job key
        let pid = Seen {
            pid_alive: true,
            orphan_before: true,
            ..NONE
        };
        assert_eq!(verdict(1234, pid), Verdict::Delete);
    }

    #[test]
    fn run_keys_live_by_their_process() {
        let key = KEY_RUN | 4321;
        assert_eq!(run_pid(key), Some(4321));
        assert_eq!(run_pid(4321), None);
        assert_eq!(
            verdict(
                key,
                Seen {
                    pid_alive: true,
                    ..NONE
                }
            ),
            Verdict::Keep
        );
        assert_eq!(verdict(key, NONE), Verdict::Orphan);
        assert_eq!(
            verdict(
                key,
                Seen {
                    orphan_before: true,
                    ..NONE
                }
            ),
            Verdict::Delete
        );
        // a spool directory does not keep a run key whose process is gone
        let dir = Seen {
            spool_dir: true,
            orphan_before: true,
            ..NONE
        };
        assert_eq!(verdict(key, dir), Verdict::Delete);
    }

    #[test]
    fn spool_names() {
        assert_eq!(spool_key("1234.0"), Some(1234));
        assert_eq!(spool_key("1234.batch.tmp"), Some(1234));
        assert_eq!(spool_key("1234"), None);
        assert_eq!(spool_key("abc.0"), None);
        assert_eq!(spool_key(".0"), None);
    }
}
