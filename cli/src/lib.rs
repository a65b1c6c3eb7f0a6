//! `jobscope`, the command: reports (`show`, `top`), `run -- CMD`, the archive, the mail queue, the
//! index, the audit and PostgreSQL. Each command is a thin layer over the stage crates.
//!
//! - [`run`]: `jobscope run -- CMD`, the same report without SLURM;
//! - [`live`]: `show` and `top` on a running job;
//! - [`audit`]: `jobscope index` and `jobscope audit`, and who may see what;
//! - [`pg`]: `jobscope pg`;
//! - [`alerts`]: `jobscope alerts`.

// Every `print!`/`println!` of this crate goes through [`out::write`]: a reader that went away
// (`jobscope … | head`) ends the output quietly with exit status 0, where std's macros panic.
// Declared before the modules so that their textual scope covers them.
macro_rules! print {
    ($($t:tt)*) => { $crate::out::write(format_args!($($t)*), false) };
}
macro_rules! println {
    () => { $crate::out::write(format_args!(""), true) };
    ($($t:tt)*) => { $crate::out::write(format_args!($($t)*), true) };
}

pub mod out;
mod watch;

pub mod alerts;
pub mod audit;
pub mod cluster;
pub mod live;
pub mod pg;
pub mod run;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use jobscope_archive as archive;
use jobscope_epilog::flow;
use jobscope_model::summary::JobSummary;
use jobscope_report::pipeline;
use jobscope_report::present;
use jobscope_report::slurm::{EpilogEnv, Slurm};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "jobscope",
    version,
    about = "How well did a SLURM job use what it asked for?"
)]
struct Cli {
    /// Configuration file [default: /etc/jobscope/jobscope.toml, which may be absent]. A file
    /// named here must exist and parse.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
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
        /// Print what happened as JSON.
        #[arg(long)]
        json: bool,
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
        /// Print what was done as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Summarise a spool directory (`<spool>/<job>.<node>`) without SLURM or the archive.
    Summarize {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The Parquet index of the archive that `audit` reads (docs/audit.md): `update`, `rebuild`.
    Index {
        #[command(subcommand)]
        cmd: crate::audit::IndexCmd,
    },
    /// Usage, waste and job reports over the archive: root and the admin group see every job,
    /// anyone else their own (docs/audit.md).
    Audit {
        // Boxed: the audit's many filters would make every other command as large.
        #[command(subcommand)]
        cmd: Box<crate::audit::AuditCmd>,
    },
    /// Alerts to users across their jobs ([alerts] rules): `check` (default) prints who would be
    /// mailed and why, `send` (root) mails them once per period (docs/audit.md).
    Alerts(crate::alerts::AlertsArgs),
    /// PostgreSQL (root): `sync` pushes what the archive gained since the last sync, `init` sets
    /// up tables, roles and row-level security, `map-role` lets a database role see one user's jobs.
    Pg {
        #[command(subcommand)]
        cmd: crate::pg::PgCmd,
    },
    /// Run CMD in a cgroup of its own, sample it like a SLURM job and print its report (to
    /// stderr, or --output) when it ends; exit with CMD's status (128+signal if killed).
    Run {
        /// Cores the run asked for (efficiency is measured against them), 1 to 1048576
        /// [default: this machine's].
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
        cores: Option<u32>,
        /// Memory the run asked for: 512M, 4G… (powers of 1024) [default: this machine's].
        #[arg(long, value_parser = parse_mem)]
        mem: Option<u64>,
        /// GPUs by identity: all, UUIDs (GPU-…), PCI bus ids, /dev/nvidia<N> [default: all
        /// NVIDIA GPUs of the machine, if any].
        #[arg(long)]
        gpus: Option<String>,
        /// Seconds between samples after the early ones, 1 to 3600 (sampler.cadence_s's range)
        /// [default: sampler.cadence_s].
        #[arg(long, value_parser = clap::value_parser!(u32).range(cadence_s_range()))]
        cadence: Option<u32>,
        /// The job name in the report [default: CMD's file name].
        #[arg(long)]
        name: Option<String>,
        /// Add the run to the archive (root), as a job of cluster run.cluster ("local").
        #[arg(long)]
        archive: bool,
        /// Mail the report to the user (root; the site's mail settings).
        #[arg(long)]
        mail: bool,
        /// Print the JSON summary instead of the text report.
        #[arg(long)]
        json: bool,
        /// Write the report to this file instead of stderr. It must be new: a file, symlink or
        /// FIFO already at the path is refused (nothing is overwritten), and a symlink on the way
        /// is followed only if root or you own it.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// The command and its arguments (after `--`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true, num_args = 1..)]
        cmd: Vec<std::ffi::OsString>,
    },
    /// The collector (transport.mode = "postgres", as root on one service host; the
    /// jobscope-collector service): makes every job's one report from the node summaries in
    /// PostgreSQL, archives it here and mails it (docs/cluster.md).
    Collect {
        /// One pass, then exit (default: a pass every transport.collect_interval_s, forever).
        #[arg(long)]
        once: bool,
        /// With --once: print what was done as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The site's rules over running jobs on this node (as root; the jobscope-watch service):
    /// warn the users of jobs that hold GPUs idle, use few of their cores or near their memory
    /// limit, and cancel where the site enabled it (docs/watch.md).
    Watch {
        /// One pass, then exit (default: a pass every watch.interval_s, forever).
        #[arg(long)]
        once: bool,
        /// List what would be done; mail nothing, cancel nothing, record nothing.
        #[arg(long)]
        dry_run: bool,
        /// With --once: print the pass as JSON.
        #[arg(long)]
        json: bool,
        /// This node's SLURM name (default: the short host name).
        #[arg(long)]
        node: Option<String>,
    },
    /// The configuration: `check` says which transport mode this node is in and whether it can
    /// work here.
    Config {
        #[command(subcommand)]
        cmd: crate::cluster::ConfigCmd,
    },
    /// A running job's verdict so far in one line, written into its AdminComment in slurmctld's
    /// record (root; --print: your own jobs, writes nothing). The plugin runs it at the batch
    /// script's end where [report] admin_comment is on (docs/slurm-versions.md).
    AdminComment {
        job_id: u32,
        /// The batch script's wait status (as waitpid gives it): the line says how the job ends.
        #[arg(long, allow_negative_numbers = true)]
        batch_exit: Option<i32>,
        /// Print the line; write nothing.
        #[arg(long)]
        print: bool,
    },
    /// A running job's figures per node, refreshed in place on a terminal (your own jobs; root:
    /// any). One screen when not on a terminal, or with --once.
    Top {
        job_id: u32,
        #[arg(long)]
        once: bool,
        /// Seconds between refreshes, 1 to 3600.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
        interval: u64,
    },
}

#[derive(Subcommand, Debug)]
enum MailCmd {
    /// Deliver queued mail that is due, for at most --budget seconds.
    Flush {
        /// Seconds, 0 to 86400 (a day; a larger budget would overflow a deadline).
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=86_400))]
        budget: u64,
    },
    /// List the queue (queued, sent markers, dead letters).
    List {
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
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

/// The `jobscope` command line as clap defines it, for the man page and shell completions
/// (`packaging/xtask`).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// `--cadence`: [`jobscope_config::CADENCE_S`], as clap takes a range.
fn cadence_s_range() -> std::ops::RangeInclusive<i64> {
    let r = jobscope_config::CADENCE_S;
    i64::from(*r.start())..=i64::from(*r.end())
}

fn parse_mem(s: &str) -> std::result::Result<u64, String> {
    crate::run::parse_size(s).ok_or_else(|| format!("{s:?}: a size like 512M or 4G"))
}

fn caller_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

fn use_color() -> bool {
    std::io::stdout().is_terminal() && no_color_unset()
}

fn no_color_unset() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn print_summary(s: &JobSummary, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(s)?);
    } else {
        print!("{}", present::render_text(s, use_color())?);
    }
    Ok(())
}

/// The configuration: `--config` must exist and parse; the default path may be absent (then the
/// defaults apply, as on a node without a config).
fn load_config(named: &Option<PathBuf>) -> Result<jobscope_config::Config> {
    jobscope_config::Config::load_given(named.as_deref())
        .map_err(|e| anyhow::anyhow!("configuration: {e}"))
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    // Every command but `schema` reads the configuration first.
    if let Cmd::Schema = cli.cmd {
        return schema();
    }
    let cfg = load_config(&cli.config)?;
    match cli.cmd {
        Cmd::Schema => schema(),
        Cmd::Show {
            job_id,
            json,
            list,
            start,
            cluster,
        } => show(&cfg, job_id, json, list, start, cluster),
        Cmd::Epilog {
            job,
            node,
            nodelist,
            json,
        } => epilog(&cfg, job, node, nodelist, json),
        Cmd::Reap { node, json } => reap(&cfg, node, json),
        Cmd::Mail { cmd } => mail(&cfg, cmd),
        Cmd::Archive {
            cmd: ArchiveCmd::Prune,
        } => archive_prune(&cfg),
        Cmd::Archive {
            cmd: ArchiveCmd::Verify { verbose },
        } => archive_verify(&cfg, verbose),
        Cmd::Run {
            cores,
            mem,
            gpus,
            cadence,
            name,
            archive,
            mail,
            json,
            output,
            cmd,
        } => {
            let opts = crate::run::RunOptions {
                cores,
                mem_bytes: mem,
                gpus,
                cadence_s: cadence,
                name,
                archive,
                mail,
                cmd,
            };
            run_cmd(&cfg, &opts, json, output)
        }
        Cmd::Top {
            job_id,
            once,
            interval,
        } => top(&cfg, job_id, once, interval),
        Cmd::Index { cmd } => crate::audit::index_cmd(&cfg, cmd),
        Cmd::Audit { cmd } => crate::audit::audit_cmd(&cfg, *cmd),
        Cmd::Pg { cmd } => crate::pg::run(cmd, &cfg),
        Cmd::Collect { once, json } => crate::cluster::collect_cmd(&cfg, once, json),
        Cmd::Watch {
            once,
            dry_run,
            json,
            node,
        } => crate::watch::watch_cmd(&cfg, once, dry_run, json, node),
        Cmd::Config { cmd } => crate::cluster::config_cmd(
            &cfg,
            cli.config
                .as_deref()
                .unwrap_or(std::path::Path::new(jobscope_config::DEFAULT_CONFIG_PATH)),
            cmd,
        ),
        Cmd::Alerts(a) => crate::alerts::run(&cfg, a),
        Cmd::AdminComment {
            job_id,
            batch_exit,
            print,
        } => admin_comment(&cfg, job_id, batch_exit, print),
        Cmd::Summarize { dir, json } => summarize(&cfg, &dir, json),
    }
}

/// `jobscope show`: a running job's report so far (marked running), else the archived run
/// (`--start`, `--cluster` pick one; `--list` lists them).
fn show(
    cfg: &jobscope_config::Config,
    job_id: u32,
    json: bool,
    list: bool,
    start: Option<u64>,
    cluster: Option<String>,
) -> Result<()> {
    if !list && start.is_none() && cluster.is_none() {
        if let Some(l) = crate::live::live(
            cfg,
            &*jobscope_report::slurm::detect(),
            job_id,
            caller_uid(),
        )? {
            return print_summary(&l.summary, json);
        }
    }
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
        &cfg.report,
    )?;
    for n in &shown.notes {
        eprintln!("jobscope: {n}");
    }
    print_summary(&shown.loaded.summary, json)
}

/// The epilog's environment: this process's, with what the options name in place of SLURM's.
fn epilog_vars(
    mut vars: std::collections::HashMap<String, String>,
    job: Option<u32>,
    node: Option<String>,
    nodelist: Option<String>,
) -> std::collections::HashMap<String, String> {
    if let Some(j) = job {
        vars.insert("SLURM_JOB_ID".into(), j.to_string());
    }
    if let Some(n) = node {
        vars.insert("SLURMD_NODENAME".into(), n);
    }
    if let Some(n) = nodelist {
        vars.insert("SLURM_NODELIST".into(), n);
    }
    vars
}

/// `jobscope epilog`: the epilog by hand, as SLURM's Epilog= runs it.
fn epilog(
    cfg: &jobscope_config::Config,
    job: Option<u32>,
    node: Option<String>,
    nodelist: Option<String>,
    json: bool,
) -> Result<()> {
    let vars = epilog_vars(jobscope_epilog::env_vars_lossy(), job, node, nodelist);
    let mut env = EpilogEnv::from_vars(&vars).map_err(anyhow::Error::msg)?;
    let slurm = jobscope_report::slurm::detect();
    // SLURM's Epilog always has SLURM_CLUSTER_NAME; by hand it may be missing, and a node
    // summary sent under no cluster would not meet its job's other nodes' (transport.mode =
    // "postgres" keys them by cluster).
    if env.cluster.is_none() {
        env.cluster = slurm.job_facts(env.job_id).and_then(|f| f.cluster);
    }
    let outcome = flow::run_epilog(cfg, &env, &*slurm, &mut |m| eprintln!("jobscope: {m}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        println!("job {}: {}", env.job_id, outcome.describe());
    }
    Ok(())
}

/// `jobscope reap`: what epilogs could not finish on this node.
fn reap(cfg: &jobscope_config::Config, node: Option<String>, json: bool) -> Result<()> {
    let slurm = jobscope_report::slurm::detect();
    // Without slurmctld we cannot tell a running job from a dead one: do nothing rather
    // than turn running jobs' spools into early partial reports.
    if !slurm.ping() {
        bail!("slurmctld does not answer `scontrol ping`; not reaping now");
    }
    let node = node.unwrap_or_else(jobscope_report::slurm::short_hostname);
    let rep = flow::reap(
        cfg,
        &node,
        jobscope_common::now_unix_ms(),
        &*slurm,
        &mut |m| eprintln!("jobscope: {m}"),
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        print!("{}", rep.describe());
    }
    Ok(())
}

/// `jobscope mail flush|list|retry`.
fn mail(cfg: &jobscope_config::Config, cmd: MailCmd) -> Result<()> {
    use jobscope_deliver::mail::queue::{FlushMode, Queue};
    match cmd {
        MailCmd::Flush { budget } => println!(
            "{}",
            jobscope_deliver::notify::flush(
                cfg,
                std::time::Duration::from_secs(budget),
                FlushMode::Full,
            )?
        ),
        MailCmd::List { json } => {
            let list = Queue::open(&cfg.mail.queue_dir)?.list();
            if json {
                println!("{}", serde_json::to_string_pretty(&mail_list_json(&list))?);
            } else {
                print!("{}", mail_list_table(&list));
            }
        }
        MailCmd::Retry { id } => {
            let ok = Queue::open(&cfg.mail.queue_dir)?.retry_dead(&id)?;
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

/// `jobscope archive prune`.
fn archive_prune(cfg: &jobscope_config::Config) -> Result<()> {
    let (days, copies) = archive::Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group)
        .prune(cfg.archive.retention_days, jobscope_common::now_unix_ms())?;
    println!(
        "removed {days} day directories and {copies} user copies older than {} days",
        cfg.archive.retention_days
    );
    Ok(())
}

/// `jobscope archive verify`: fails when the archive has problems.
fn archive_verify(cfg: &jobscope_config::Config, verbose: bool) -> Result<()> {
    let rep = archive::Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group).verify();
    print!("{}", rep.render(verbose));
    if !rep.ok() {
        bail!("archive verification found problems");
    }
    Ok(())
}

/// `jobscope schema`.
fn schema() -> Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(&jobscope_model::summary::json_schema())?
    );
    Ok(())
}

/// `jobscope run`: runs the command, writes its report (stderr or `output`) and exits with the
/// command's status.
fn run_cmd(
    cfg: &jobscope_config::Config,
    opts: &crate::run::RunOptions,
    json: bool,
    output: Option<PathBuf>,
) -> Result<()> {
    // Made before the run: a report that cannot be written is known before CMD runs.
    let mut out_file = match &output {
        // No symlink another user planted is followed, in any component of the path.
        Some(p) => Some(jobscope_common::fsutil::create_output(p, 0o666)?),
        None => None,
    };
    let o = crate::run::run(cfg, opts, &mut |m| eprintln!("jobscope: {m}"))?;
    for p in &o.problems {
        eprintln!("jobscope: {p}");
    }
    let text = if json {
        serde_json::to_string_pretty(&o.summary)? + "\n"
    } else {
        let tty = out_file.is_none() && std::io::stderr().is_terminal();
        present::render_text(&o.summary, tty && no_color_unset())?
    };
    use std::io::Write;
    match out_file.as_mut() {
        Some(f) => f.write_all(text.as_bytes())?,
        None => eprint!("{text}"),
    }
    if let Some(p) = &o.archived {
        eprintln!(
            "jobscope: archived as job {} of cluster {}: {}",
            o.summary.job_id,
            cfg.run.cluster,
            p.display()
        );
    }
    std::process::exit(o.exit_status);
}

/// `jobscope top`: a running job's screen, refreshed every `interval` seconds on a terminal.
/// How long `admin-comment` gives `scontrol update`: the plugin waits for the whole command at the
/// batch script's end (`plugin/src/admin_comment.rs`), so this stays well inside its bound.
const ADMIN_COMMENT_UPDATE_LIMIT: std::time::Duration = std::time::Duration::from_secs(3);

/// `jobscope admin-comment`: a running job's line ([`jobscope_report::admin_comment`]), printed,
/// and unless `print`, written into slurmctld's record of the job.
fn admin_comment(
    cfg: &jobscope_config::Config,
    job_id: u32,
    batch_exit: Option<i32>,
    print: bool,
) -> Result<()> {
    use jobscope_report::admin_comment::{admin_comment, Taken};
    let uid = caller_uid();
    if uid != 0 && (!print || batch_exit.is_some()) {
        bail!("only root writes a job's AdminComment (--print shows your own job's line)");
    }
    let slurm = jobscope_report::slurm::detect();
    let (live, taken) = match batch_exit {
        Some(status) => (
            crate::live::at_batch_end(cfg, &*slurm, job_id, status)?,
            Taken::BatchEnd,
        ),
        None => (
            crate::live::live(cfg, &*slurm, job_id, uid)?,
            Taken::Running,
        ),
    };
    let Some(l) = live else {
        bail!(
            "job {job_id} is not running: slurmctld no longer lets its AdminComment change (with [report] admin_comment, whoever archives it writes the line into the accounting database)"
        );
    };
    let line = admin_comment(&l.summary, taken);
    if !print {
        slurm
            .update_admin_comment(job_id, &line, ADMIN_COMMENT_UPDATE_LIMIT)
            .map_err(anyhow::Error::msg)?;
    }
    println!("{line}");
    Ok(())
}

fn top(cfg: &jobscope_config::Config, job_id: u32, once: bool, interval: u64) -> Result<()> {
    let tty = std::io::stdout().is_terminal();
    let slurm = jobscope_report::slurm::detect();
    let mut first = true;
    loop {
        let Some(l) = crate::live::live(cfg, &*slurm, job_id, caller_uid())? else {
            if first {
                bail!("job {job_id} is not running; its report: jobscope show {job_id}");
            }
            println!("job {job_id} has ended; its report: jobscope show {job_id}");
            return Ok(());
        };
        let screen = crate::live::top::render(&l, use_color());
        if once || !tty {
            print!("{screen}");
            return Ok(());
        }
        // Home and clear, then the screen: refreshed in place.
        print!("\x1b[H\x1b[2J{screen}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        first = false;
        std::thread::sleep(std::time::Duration::from_secs(interval.max(1)));
    }
}

/// `jobscope summarize DIR`.
fn summarize(cfg: &jobscope_config::Config, dir: &std::path::Path, json: bool) -> Result<()> {
    let (s, problems) = pipeline::summarize_dir(dir, cfg).map_err(anyhow::Error::msg)?;
    for p in problems {
        eprintln!("jobscope: {p}");
    }
    print_summary(&s, json)
}

/// `jobscope mail list`, for people: one line per message.
fn mail_list_table(list: &[jobscope_deliver::mail::queue::Listed]) -> String {
    if list.is_empty() {
        return "the mail queue is empty\n".into();
    }
    let when = |t: u64| {
        if t == 0 {
            "-".to_string()
        } else {
            jobscope_model::time::utc_time(t)
        }
    };
    let mut t = format!(
        "{:<40} {:<6} {:>8} {:>8}  {:<20} {:<20} {}\n",
        "id", "state", "size", "attempts", "queued (UTC)", "next attempt (UTC)", "to / last error"
    );
    for l in list {
        let m = &l.meta;
        let note = m
            .dead_reason
            .as_deref()
            .or(m.last_error.as_deref())
            .map(|e| format!("; {e}"))
            .unwrap_or_default();
        t += &format!(
            "{:<40} {:<6} {:>8} {:>8}  {:<20} {:<20} {}\n",
            jobscope_report::present::clean(&m.id, 180),
            if l.dead { "dead" } else { "queued" },
            jobscope_report::present::fmt_bytes(Some(l.bytes)),
            m.attempts,
            when(m.created_unix),
            if l.dead {
                "-".to_string()
            } else {
                when(m.next_attempt_unix)
            },
            jobscope_report::present::clean(&format!("{}{note}", m.to.join(", ")), 200),
        );
    }
    t
}

/// `jobscope mail list --json`, for scripts.
fn mail_list_json(list: &[jobscope_deliver::mail::queue::Listed]) -> serde_json::Value {
    serde_json::Value::Array(
        list.iter()
            .map(|l| {
                let mut v = serde_json::to_value(&l.meta).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("dead".into(), l.dead.into());
                    o.insert("bytes".into(), l.bytes.into());
                }
                v
            })
            .collect(),
    )
}

/// `jobscope`: exit 0 on success, 1 with a one-line error otherwise.
pub fn main() -> i32 {
    if let Some(rc) = jobscope_deliver::notify::user_file_child() {
        return rc;
    }
    match real_main() {
        Ok(()) => 0,
        // Output written through a writer of its own (`audit … --format csv`) to a closed pipe.
        Err(e) if out::is_closed_pipe(&e) => 0,
        Err(e) => {
            // Each cause once: a file error carries its OS error as text and as its cause.
            eprintln!(
                "jobscope: {}",
                jobscope_common::fsutil::error_line(e.as_ref())
            );
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options replace SLURM's variables; what they leave out stays as SLURM set it.
    #[test]
    fn epilog_options_override_slurms_variables() {
        let slurm: std::collections::HashMap<String, String> = [
            ("SLURM_JOB_ID", "7"),
            ("SLURMD_NODENAME", "n1"),
            ("SLURM_NODELIST", "n[1-2]"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let v = epilog_vars(slurm.clone(), None, None, None);
        assert_eq!(v, slurm);
        let v = epilog_vars(slurm, Some(9), Some("n2".into()), None);
        assert_eq!(v["SLURM_JOB_ID"], "9");
        assert_eq!(v["SLURMD_NODENAME"], "n2");
        assert_eq!(v["SLURM_NODELIST"], "n[1-2]");
    }

    /// clap's own consistency checks over every command, and a global option before one.
    #[test]
    fn the_command_line_is_consistent() {
        let cli = Cli::try_parse_from(["jobscope", "--config", "/nonexistent", "schema"]).unwrap();
        assert!(matches!(cli.cmd, Cmd::Schema));
        command().debug_assert();
    }
}
