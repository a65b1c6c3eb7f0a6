//! `jobscope watch`: the site's rules over the jobs running on this node (docs/watch.md); the
//! pass itself is `jobscope_admin::watch`.
use anyhow::{bail, Result};
use jobscope_config::Config;
use std::time::Duration;

/// `jobscope watch [--once] [--dry-run] [--json] [--node N]`: a pass every `watch.interval_s`
/// (the jobscope-watch service), or one. A dry run (`--dry-run`, or `watch.dry_run` in the
/// configuration) lists what would be done and does nothing; it may run as any user who can
/// read the spool (root), and needs no `watch.enabled`.
pub fn watch_cmd(
    cfg: &Config,
    once: bool,
    dry_run: bool,
    json: bool,
    node: Option<String>,
) -> Result<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("jobscope watch: only root may run it (it reads every job's spool)");
    }
    let dry_run = dry_run || cfg.watch.dry_run;
    if !dry_run && !cfg.watch.enabled {
        bail!("jobscope watch: watch.enabled is false; nothing acts on running jobs (`jobscope watch --once --dry-run` shows what would be done; docs/watch.md)");
    }
    if cfg.watch.rules.is_empty() {
        bail!("jobscope watch: no [[watch.rule]] in the configuration (docs/watch.md)");
    }
    let node = node.unwrap_or_else(jobscope_report::slurm::short_hostname);
    let slurm = jobscope_report::slurm::detect();
    loop {
        let now = jobscope_common::now_unix_ms();
        match jobscope_admin::watch::pass(cfg, &*slurm, &node, now, dry_run) {
            Ok(rep) if once => {
                if json {
                    println!("{}", serde_json::to_string_pretty(&rep)?);
                } else {
                    print!("{}", rep.describe());
                }
                return Ok(());
            }
            Ok(rep) => {
                for a in &rep.actions {
                    eprintln!(
                        "jobscope: watch: job {} rule {}: {:?} {} [{}]",
                        a.job_id, a.rule, a.action, a.what, a.outcome
                    );
                }
                for n in &rep.notes {
                    eprintln!("jobscope: watch: {n}");
                }
            }
            Err(e) if once => return Err(e),
            Err(e) => eprintln!("jobscope: watch: {e:#} (trying again)"),
        }
        std::thread::sleep(Duration::from_secs(cfg.watch.interval_s));
    }
}
