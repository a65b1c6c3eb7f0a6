//! The kernel view of a job for its sampler (in slurmstepd, and in `jobscope run`): the job's
//! entry in the collector's maps registered at its start, its counters added to each reading, what
//! to say when there is no view, and the entry removed at its end. The map operations themselves
//! are `jobscope_common::bpf_maps` (plain `bpf(2)`); the layout is `jobscope_model::kernel_abi`.

use jobscope_common::bpf_maps::{monotonic_ns, KernelMaps, Registered};
use jobscope_model::kernel_abi::{self as abi, State};
use std::path::Path;

/// Adds the job's counters to `r` if the collector is alive (the one read of a sample: the
/// state, then the job's entry).
pub fn fill(maps: &mut KernelMaps, job_key: u64, r: &mut jobscope_model::sample::Reading) -> Fill {
    let st = match maps.state() {
        Ok(s) if alive(&s, monotonic_ns()) => s,
        _ => return Fill::Stopped,
    };
    match maps.read(job_key) {
        Ok(Some(c)) => {
            r.set_kernel(&c, st.flags);
            Fill::Filled
        }
        Ok(None) | Err(_) => Fill::Lost,
    }
}

/// What [`fill`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    Filled,
    /// No heartbeat for [`HEARTBEAT_STALE_NS`], or the state unreadable.
    Stopped,
    /// The job's entry is gone (the collector restarted with new maps, or swept it).
    Lost,
}

/// How long without a heartbeat before the collector counts as stopped (it beats every second).
pub const HEARTBEAT_STALE_NS: u64 = 10_000_000_000;

/// Whether a state read at `now_ns` shows a collector that is alive. Pure.
pub fn alive(st: &State, now_ns: u64) -> bool {
    st.heartbeat_ns != 0 && now_ns.saturating_sub(st.heartbeat_ns) <= HEARTBEAT_STALE_NS
}

/// What a job's sampler says about its kernel view, as it goes: each at most once per job, as
/// an event in the spool (`EventKind::KernelView`) that the report turns into a data note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewNote {
    Unavailable(String),
    Full { max_jobs: u64 },
    SyscallsOff,
    Stopped,
    Lost,
}

impl ViewNote {
    /// The sentence the report shows.
    pub fn message(&self) -> String {
        match self {
            ViewNote::Unavailable(why) => format!("kernel view off: {why}"),
            ViewNote::Full { max_jobs } => format!(
                "kernel view off for this job: the collector's job table was full ({max_jobs} jobs; kernel.max_jobs)"
            ),
            ViewNote::SyscallsOff => "system calls not counted: the collector runs without system-call counting".into(),
            ViewNote::Stopped => "the kernel collector stopped during the job: the kernel figures end at its last heartbeat".into(),
            ViewNote::Lost => "the job's kernel counters disappeared during the job (collector restarted): the kernel figures end there".into(),
        }
    }
}

/// One job's kernel view for its sampler: the maps, the key, and what was already said.
pub struct JobView {
    maps: KernelMaps,
    key: u64,
    dead: bool,
}

impl JobView {
    /// Opens the maps and registers the job. `Err` carries the note to record (no view).
    pub fn start(
        pin_dir: &Path,
        sys_root: &Path,
        key: u64,
    ) -> Result<(JobView, Vec<ViewNote>), ViewNote> {
        let maps = KernelMaps::open(pin_dir, sys_root)
            .map_err(|u| ViewNote::Unavailable(u.to_string()))?;
        let st = maps
            .state()
            .map_err(|e| ViewNote::Unavailable(e.to_string()))?;
        if !alive(&st, monotonic_ns()) {
            return Err(ViewNote::Unavailable(
                "the kernel collector is not running (its heartbeat is stale)".into(),
            ));
        }
        match maps.register(key) {
            Ok(Registered::Full) => {
                return Err(ViewNote::Full {
                    max_jobs: st.max_jobs,
                })
            }
            Ok(_) => {}
            Err(e) => {
                return Err(ViewNote::Unavailable(format!(
                    "cannot register the job: {e}"
                )))
            }
        }
        let mut notes = Vec::new();
        if st.flags & abi::STATE_SYSCALLS == 0 {
            notes.push(ViewNote::SyscallsOff);
        }
        Ok((
            JobView {
                maps,
                key,
                dead: false,
            },
            notes,
        ))
    }

    /// Adds the job's kernel counters to `r` (nothing once the collector stopped or the entry is
    /// gone, with the note to record the first time).
    pub fn fill(&mut self, r: &mut jobscope_model::sample::Reading) -> Option<ViewNote> {
        if self.dead {
            return None;
        }
        let note = match fill(&mut self.maps, self.key, r) {
            Fill::Filled => return None,
            Fill::Stopped => ViewNote::Stopped,
            Fill::Lost => ViewNote::Lost,
        };
        self.dead = true;
        Some(note)
    }

    /// The job's end on this node: its entry is removed.
    pub fn finish(self) {
        let _ = self.maps.forget(self.key);
    }

    /// The maps, for a read outside [`JobView::fill`] (the benchmark's parts of a read).
    pub fn maps_mut(&mut self) -> &mut KernelMaps {
        &mut self.maps
    }

    pub fn maps(&self) -> &KernelMaps {
        &self.maps
    }
}
