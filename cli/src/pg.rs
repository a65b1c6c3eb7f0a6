//! `jobscope pg …`: the PostgreSQL sink's commands (root only: they read the whole archive and the
//! database password). The subcommand type lives here so cli/src/lib.rs only names it.

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use jobscope_archive::{self as archive, Store};
use jobscope_audit::pg::{connect, schema, sink};
use jobscope_config::Config;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum PgCmd {
    /// Create or upgrade the tables, roles and row-level-security policies (idempotent).
    Init,
    /// Push every archive write since this archive's checkpoint (cron / systemd timer; resumable).
    Sync {
        /// Print what was done as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Push the given archived documents (`YYYY/MM/DD/<file>.json` under the archive, or any path).
    Push {
        files: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Create (or re-password) ROLE, the login of the compute nodes (transport.mode = "postgres"):
    /// it may insert node summaries and nothing else (docs/cluster.md).
    NodeRole {
        role: String,
        /// A file holding the role's password (first line; root only, mode 0600).
        #[arg(long)]
        password_file: PathBuf,
    },
    /// Let database role ROLE see the jobs of UID on CLUSTER (and only those): row-level security.
    MapRole {
        role: String,
        #[arg(long)]
        uid: u32,
        /// The cluster name as archived (default: jobs archived without a cluster).
        #[arg(long, default_value = "")]
        cluster: String,
    },
}

fn require_root() -> Result<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("jobscope pg: only root may push to or set up the database");
    }
    Ok(())
}

pub fn run(cmd: PgCmd, cfg: &Config) -> Result<()> {
    require_root()?;
    let mut client = connect(&cfg.postgres)?;
    match cmd {
        PgCmd::Init => {
            schema::ensure(&mut client)?;
            jobscope_transport::schema::ensure(&mut client)?;
            println!("jobscope schema ready (version {})", schema::SCHEMA_VERSION);
        }
        PgCmd::Sync { json } => {
            let store = Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group);
            let rep = sink::sync(&mut client, &store, &cfg.postgres.source, &cfg.report)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rep)?);
            } else {
                println!(
                    "synced {} of {} day(s): {} manifest line(s), {} job(s) inserted, {} updated, {} unchanged",
                    rep.days_synced,
                    rep.days_seen,
                    rep.lines,
                    rep.pushed.inserted,
                    rep.pushed.updated,
                    rep.pushed.unchanged
                );
                for p in &rep.problems {
                    println!(
                        "  not pushed: {}",
                        jobscope_report::present::clean::clean_line(p, 400)
                    );
                }
            }
            if !rep.problems.is_empty() {
                bail!("{} archive file(s) were not pushed", rep.problems.len());
            }
        }
        PgCmd::Push { files, json } => {
            let mut items = Vec::new();
            for f in &files {
                let bytes = std::fs::read(f).with_context(|| format!("{}", f.display()))?;
                let l = archive::load(&bytes, &cfg.report)
                    .with_context(|| format!("{}", f.display()))?;
                items.push(sink::Item::of(&l.summary, &f.display().to_string())?);
            }
            let p = sink::push(&mut client, &items)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&p)?);
            } else {
                println!(
                    "{} job(s): {} inserted, {} updated, {} unchanged",
                    items.len(),
                    p.inserted,
                    p.updated,
                    p.unchanged
                );
            }
        }
        PgCmd::NodeRole {
            role,
            password_file,
        } => crate::cluster::node_role(&mut client, &role, &password_file)?,
        PgCmd::MapRole { role, uid, cluster } => {
            schema::ensure(&mut client)?;
            schema::map_role(&mut client, &role, &cluster, uid)?;
            println!(
                "role {} now sees the jobs of uid {uid}{}",
                jobscope_report::present::clean::clean_line(&role, 80),
                if cluster.is_empty() {
                    String::new()
                } else {
                    format!(
                        " on cluster {}",
                        jobscope_report::present::clean::clean_line(&cluster, 80)
                    )
                }
            );
        }
    }
    Ok(())
}
