//! `jobscope-epilog`, SLURM's `Epilog=` program: on every node of every job, as root, it turns the
//! node's spool into the job's report ([`flow`]), archives it and then mails it, or hands the
//! node's summary to the transport, whose collector ([`collect`]) makes the report on one host.
//! It links the stages up to the transport and nothing of the audit (no arrow or parquet).
pub mod collect;
pub mod flow;

use anyhow::Result;
use jobscope_config::Config;
use jobscope_report::slurm::EpilogEnv;
use std::path::PathBuf;

/// The environment as text. `std::env::vars()` panics on a value that is not UTF-8, and SLURM puts
/// user-chosen bytes into the Epilog's environment (`sbatch --comment` arrives as SLURM_JOB_COMMENT):
/// such a value must not cost the job its report, so it is converted lossily instead.
pub fn env_vars_lossy() -> std::collections::HashMap<String, String> {
    std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// The configuration: `JOBSCOPE_CONFIG` if set (it must exist and parse), else the default path
/// (which may be absent: [`Config::load_given`]).
fn load_config(named: &Option<PathBuf>) -> Result<Config> {
    Config::load_given(named.as_deref()).map_err(|e| anyhow::anyhow!("configuration: {e}"))
}

/// `jobscope-epilog`: always 0 (a non-zero Epilog drains the node); everything goes to the log.
pub fn main() -> i32 {
    if let Some(rc) = jobscope_deliver::notify::user_file_child() {
        return rc;
    }
    // Where a panic is logged: the configured log once the configuration is read (a panic after
    // that point must land in the log the site reads), the default before.
    let mut panic_log = Config::default().paths.log_file;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let named = std::env::var_os("JOBSCOPE_CONFIG").map(PathBuf::from);
        let cfg = match load_config(&named) {
            Ok(c) => c,
            Err(e) => {
                let c = Config::default();
                flow::append_log(&c.paths.log_file, &format!("{e}; using defaults"));
                c
            }
        };
        let log_path = cfg.paths.log_file.clone();
        panic_log.clone_from(&log_path);
        let vars = env_vars_lossy();
        let env = match EpilogEnv::from_vars(&vars) {
            Ok(e) => e,
            Err(e) => {
                flow::append_log(&log_path, &format!("epilog: {e}"));
                return;
            }
        };
        let t0 = std::time::Instant::now();
        let mut log = |m: &str| flow::append_log(&log_path, m);
        match flow::run_epilog(&cfg, &env, &*jobscope_report::slurm::detect(), &mut log) {
            Ok(o) => flow::append_log(
                &log_path,
                // `tests/cluster/src/mail.rs` (`epilog_ms`) reads `job <id> node <n>: … in <ms> ms`.
                &format!(
                    "job {} node {}: {} in {} ms",
                    env.job_id,
                    env.node,
                    o.describe(),
                    t0.elapsed().as_millis()
                ),
            ),
            Err(e) => flow::append_log(
                &log_path,
                &format!("job {} node {}: epilog failed: {e:#}", env.job_id, env.node),
            ),
        }
    }));
    if result.is_err() {
        flow::append_log(&panic_log, "epilog panicked (caught)");
    }
    0
}
