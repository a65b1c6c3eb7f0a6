//! The command line of `jobscope-kernel`, here in the library so that its man page
//! (jobscope-kernel(8), packaging/xtask) is written from the same definition.

#[cfg(feature = "bench")]
use crate::{bench, workload};
use clap::{Parser, Subcommand};
use jobscope_model::kernel_abi::PIN_DIR;
use std::path::PathBuf;

/// jobscope's per-node kernel collector.
///
/// Loads jobscope's BPF programs once per node and keeps their maps pinned, so that the SPANK
/// plugin's sampler (in every job's slurmstepd) and `jobscope run` read, per job, the time its
/// threads waited for a CPU, its context switches, network and block bytes, with --page-cache
/// the page cache its writes dirtied and, with --syscalls, its system calls by class. Nothing else about a job is recorded.
/// The jobscope-kernel service runs `jobscope-kernel run --optional` on every node; where the
/// kernel lacks BTF or BPF, reports say that the kernel view is missing.
#[derive(Parser)]
#[command(name = "jobscope-kernel", version)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Load the BPF programs, pin their maps and keep them fed until SIGTERM/SIGINT.
    Run {
        /// Count system calls by class (off by default: a program on sys_enter costs every
        /// process of the node, in a job or not, on each system call; docs/kernel.md has the
        /// figures). On kernels that refuse fentry, small reads and writes are counted only
        /// with this switch too.
        #[arg(long)]
        syscalls: bool,
        /// Count the page cache each job's buffered writes dirty (off by default: its program
        /// runs at every page such a write dirties, which costs a program writing in small
        /// pieces about 1 % of its CPU time; docs/kernel.md has the figures). The block devices' bytes,
        /// and the cgroup's and processes' own write figures, are there without it.
        #[arg(long)]
        page_cache: bool,
        /// Entries of the jobs map (jobs counted at once on this node).
        #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
        max_jobs: u32,
        /// Where the maps are pinned (a directory on bpffs, created 0700 root).
        #[arg(long, default_value = PIN_DIR)]
        pin_dir: PathBuf,
        /// Where the job samplers keep `<job>.*` directories (the sweep's sign of a live job).
        #[arg(long, default_value = "/var/spool/jobscope")]
        spool_dir: PathBuf,
        /// Exit 0, not 1, where the kernel cannot run BPF (no BTF, not root, load failure).
        #[arg(long)]
        optional: bool,
    },
    /// Whether the collector runs, and how full its jobs map is.
    Status {
        /// One JSON object, for scripts and monitoring.
        #[arg(long)]
        json: bool,
        /// Where the collector pins its maps.
        #[arg(long, default_value = PIN_DIR)]
        pin_dir: PathBuf,
    },
    /// Known work for the tests and the benchmark (the `bench` feature only).
    #[cfg(feature = "bench")]
    #[command(hide = true)]
    Workload(workload::Args),
    /// bench/kernel/run.sh (the `bench` feature only).
    #[cfg(feature = "bench")]
    #[command(hide = true)]
    Bench(bench::Args),
}

/// The definition, for the man page.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
