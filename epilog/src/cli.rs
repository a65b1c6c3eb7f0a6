//! Command-line entry points of `jobscope` and `jobscope-epilog`.

use crate::jobinfo::EpilogEnv;
use crate::{archive, render, run};
use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use jobscope_core::config::{Config, DEFAULT_CONFIG_PATH};
use jobscope_core::summary::JobSummary;
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "jobscope",
    version,
    about = "How well did a SLURM job use what it asked for?"
)]
struct Cli {
    /// Configuration file.
    #[arg(long, global = true, default_value = DEFAULT_CONFIG_PATH)]
    config: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Print a job's report (your own jobs; root and admins: any job).
    Show {
        job_id: u32,
        /// Print the archived JSON summary instead of the text report.
        #[arg(long)]
        json: bool,
        /// List the job id's archived runs (a job id SLURM handed out again is another run).
        #[arg(long)]
        list: bool,
        /// The run that started at this Unix time (seconds; `--list` shows them); default: newest.
        #[arg(long)]
        start: Option<u64>,
        /// The run on this cluster (several clusters sharing one archive).
        #[arg(long)]
        cluster: Option<String>,
    },
    /// Run the epilog by hand for a job on this node (as root), as SLURM's Epilog= would.
    Epilog {
        #[arg(long)]
        job: Option<u32>,
        #[arg(long)]
        node: Option<String>,
        /// Comma-separated nodes of the job (default: this node only).
        #[arg(long)]
        nodelist: Option<String>,
    },
    /// Print the JSON Schema of the archived summary.
    Schema,
    /// The mail queue: `flush` delivers what is due (cron / systemd timer), `list` shows it.
    Mail {
        #[command(subcommand)]
        cmd: MailCmd,
    },
    /// The archive: `verify` checks every day's hash-chained MANIFEST against the files.
    Archive {
        #[command(subcommand)]
        cmd: ArchiveCmd,
    },
    /// Finish what epilogs could not (cron, every few minutes, as root): partial reports for jobs whose
    /// other nodes never reported within archive.node_wait_s, and reports from spools a crash left.
    Reap {
        /// This node's SLURM name (default: the short host name).
        #[arg(long)]
        node: Option<String>,
    },
    /// Summarise a spool directory (`<spool>/<job>.<node>`) without SLURM or the archive.
    Summarize {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum MailCmd {
    /// Deliver queued mail that is due, for at most --budget seconds.
    Flush {
        #[arg(long, default_value_t = 60)]
        budget: u64,
    },
    /// List the queue (queued, sent markers, dead letters).
    List,
    /// Put a dead letter back in the queue.
    Retry { id: String },
}

#[derive(Subcommand, Debug)]
enum ArchiveCmd {
    /// Delete archived days older than archive.retention_days (0 keeps everything).
    Prune,
    /// Report edited, removed or inserted archive records; exit 1 if any.
    Verify {
        #[arg(long)]
        verbose: bool,
    },
}

/// The environment as text. `std::env::vars()` panics on a value that is not UTF-8, and SLURM puts
/// user-chosen bytes into the Epilog's environment (`sbatch --comment` arrives as SLURM_JOB_COMMENT):
/// such a value must not cost the job its report, so it is converted lossily instead.
fn env_vars_lossy() -> std::collections::HashMap<String, String> {
    std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

fn caller_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

fn load_config(path: &std::path::Path) -> Result<Config> {
    Config::load(path).map_err(|e| anyhow::anyhow!("{e}"))
}

fn use_color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn print_summary(s: &JobSummary, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(s)?);
    } else {
        print!("{}", render::render_text(s, use_color())?);
    }
    Ok(())
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Show {
            job_id,
            json,
            list,
            start,
            cluster,
        } => {
            let cfg = load_config(&cli.config)?;
            let store = archive::Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group);
            if list {
                let runs = store.runs(job_id, caller_uid())?;
                if runs.is_empty() {
                    bail!("job {job_id}: no archived run you can see");
                }
                for r in &runs {
                    println!("{}", r.describe());
                }
                return Ok(());
            }
            let shown = store.show(
                job_id,
                caller_uid(),
                &archive::Pick {
                    start_unix_s: start,
                    cluster,
                },
            )?;
            for n in &shown.notes {
                eprintln!("jobscope: {n}");
            }
            let mut s = shown.loaded.summary;
            // Version-1 documents come without their analysis (archive::load): recompute it.
            if s.analysis.is_none() {
                s.analysis = Some(jobscope_core::summary::analysis::analyze(&s, &cfg.report));
            }
            print_summary(&s, json)
        }
        Cmd::Epilog {
            job,
            node,
            nodelist,
        } => {
            let cfg = load_config(&cli.config)?;
            let mut vars = env_vars_lossy();
            if let Some(j) = job {
                vars.insert("SLURM_JOB_ID".into(), j.to_string());
            }
            if let Some(n) = node {
                vars.insert("SLURMD_NODENAME".into(), n);
            }
            if let Some(n) = nodelist {
                vars.insert("SLURM_NODELIST".into(), n);
            }
            let env = EpilogEnv::from_vars(&vars).map_err(anyhow::Error::msg)?;
            let outcome = run::run_epilog(&cfg, &env, &mut |m| eprintln!("jobscope: {m}"))?;
            println!("{outcome:?}");
            Ok(())
        }
        Cmd::Reap { node } => {
            let cfg = load_config(&cli.config)?;
            // Without slurmctld we cannot tell a running job from a dead one: do nothing rather
            // than turn running jobs' spools into early partial reports.
            if crate::jobinfo::run_bounded(
                "/usr/bin/scontrol",
                &["ping"],
                std::time::Duration::from_secs(5),
            )
            .is_none_or(|o| !o.contains("UP"))
            {
                bail!("slurmctld does not answer `scontrol ping`; not reaping now");
            }
            let node = node.unwrap_or_else(crate::jobinfo::short_hostname);
            let running = |job: u32| {
                crate::jobinfo::query(job).is_some_and(|i| {
                    matches!(
                        i.state.as_deref(),
                        Some("RUNNING" | "PENDING" | "COMPLETING" | "SUSPENDED" | "CONFIGURING")
                    )
                })
            };
            let rep = run::reap(
                &cfg,
                &node,
                jobscope_core::sampler::now_unix_ms(),
                &running,
                &crate::jobinfo::query,
                &mut |m| eprintln!("jobscope: {m}"),
            )?;
            println!("{rep:?}");
            Ok(())
        }
        Cmd::Mail { cmd } => {
            let cfg = load_config(&cli.config)?;
            match cmd {
                MailCmd::Flush { budget } => println!(
                    "{}",
                    crate::notify::flush(
                        &cfg,
                        std::time::Duration::from_secs(budget),
                        crate::mail::queue::FlushMode::Full,
                    )?
                ),
                MailCmd::List => {
                    for l in crate::mail::queue::Queue::open(&cfg.mail.queue_dir)?.list() {
                        println!("{l:?}");
                    }
                }
                MailCmd::Retry { id } => {
                    let ok =
                        crate::mail::queue::Queue::open(&cfg.mail.queue_dir)?.retry_dead(&id)?;
                    println!(
                        "{}",
                        if ok {
                            "requeued"
                        } else {
                            "no such dead letter"
                        }
                    );
                }
            }
            Ok(())
        }
        Cmd::Archive {
            cmd: ArchiveCmd::Prune,
        } => {
            let cfg = load_config(&cli.config)?;
            let (days, copies) =
                archive::Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group).prune(
                    cfg.archive.retention_days,
                    jobscope_core::sampler::now_unix_ms(),
                )?;
            println!(
                "removed {days} day directories and {copies} user copies older than {} days",
                cfg.archive.retention_days
            );
            Ok(())
        }
        Cmd::Archive {
            cmd: ArchiveCmd::Verify { verbose },
        } => {
            let cfg = load_config(&cli.config)?;
            let rep =
                archive::Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group).verify();
            print!("{}", rep.render(verbose));
            if !rep.ok() {
                bail!("archive verification found problems");
            }
            Ok(())
        }
        Cmd::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&jobscope_core::summary::json_schema())?
            );
            Ok(())
        }
        Cmd::Summarize { dir, json } => {
            let (series, steps, problems) = run::read_spool_dir(&dir);
            for p in problems {
                eprintln!("jobscope: {p}");
            }
            let Some(h) = series
                .as_ref()
                .map(|s| s.header.clone())
                .or_else(|| steps.first().map(|s| s.header.clone()))
            else {
                bail!("{}: no readable spool files", dir.display());
            };
            let end = [series.as_ref().and_then(|s| s.end.as_ref().map(|e| e.t_ms))]
                .into_iter()
                .flatten()
                .chain(steps.iter().flat_map(|s| s.events.iter().map(|e| e.t_ms)))
                .chain(
                    series
                        .iter()
                        .flat_map(|s| s.buckets.last().map(|b| b.t_last_ms)),
                )
                .max()
                .unwrap_or(h.start_unix_ms);
            let ns =
                jobscope_core::summary::node::summarize_node(series.as_ref(), &steps, &h.node, end);
            let env = EpilogEnv {
                job_id: h.job_id,
                node: h.node.clone(),
                uid: Some(h.uid),
                exit_code2: Some("0:0".into()),
                ..Default::default()
            };
            let cfg = load_config(&cli.config).unwrap_or_default();
            let mut s = crate::assemble::assemble(crate::assemble::Inputs {
                env: &env,
                info: None,
                nodes: vec![ns],
                expected_nodes: vec![h.node.clone()],
                generator: run::GENERATOR.into(),
            });
            s.analysis = Some(jobscope_core::summary::analysis::analyze(&s, &cfg.report));
            print_summary(&s, json)
        }
    }
}

/// The privilege-dropped child of `notify::workdir_report` (same binary, re-executed as the user).
fn write_user_file_mode() -> Option<i32> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    (args.len() == 3 && args[1] == "--write-user-file")
        .then(|| crate::notify::write_user_file(std::path::Path::new(&args[2])))
}

/// `jobscope`: exit 0 on success, 1 with a one-line error otherwise.
pub fn main() -> i32 {
    if let Some(rc) = write_user_file_mode() {
        return rc;
    }
    match real_main() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("jobscope: {e:#}");
            1
        }
    }
}

/// `jobscope-epilog`: always 0 (a non-zero Epilog drains the node); everything goes to the log.
pub fn epilog_main() -> i32 {
    if let Some(rc) = write_user_file_mode() {
        return rc;
    }
    let result = std::panic::catch_unwind(|| {
        let cfg_path = std::env::var_os("JOBSCOPE_CONFIG")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH));
        let cfg = match Config::load(&cfg_path) {
            Ok(c) => c,
            Err(e) => {
                let c = Config::default();
                run::append_log(&c.paths.log_file, &format!("config: {e}; using defaults"));
                c
            }
        };
        let log_path = cfg.paths.log_file.clone();
        let vars = env_vars_lossy();
        let env = match EpilogEnv::from_vars(&vars) {
            Ok(e) => e,
            Err(e) => {
                run::append_log(&log_path, &format!("epilog: {e}"));
                return;
            }
        };
        let t0 = std::time::Instant::now();
        let mut log = |m: &str| run::append_log(&log_path, m);
        match run::run_epilog(&cfg, &env, &mut log) {
            Ok(o) => run::append_log(
                &log_path,
                &format!(
                    "job {} node {}: {o:?} in {} ms",
                    env.job_id,
                    env.node,
                    t0.elapsed().as_millis()
                ),
            ),
            Err(e) => run::append_log(
                &log_path,
                &format!("job {} node {}: epilog failed: {e:#}", env.job_id, env.node),
            ),
        }
    });
    if result.is_err() {
        run::append_log(
            &Config::default().paths.log_file,
            "epilog panicked (caught)",
        );
    }
    0
}
