//! A cluster, not one host (docs/cluster.md): `jobscope collect`, the collector that makes every
//! report when nodes send their summaries through PostgreSQL, and `jobscope config check`, which
//! says which mode a node is in and refuses one that cannot work.

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use jobscope_config::{Config, TransportMode};
use jobscope_epilog::collect;
use jobscope_transport::{pg, schema};
use std::path::Path;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Check the configuration: which transport mode this node is in, whether that mode can work
    /// here (a shared directory that root cannot write is refused), and warnings (multi-node
    /// partitions with no transport). Exit 1 on an error.
    Check {
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn require_root(what: &str) -> Result<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("jobscope {what}: only root may run it");
    }
    Ok(())
}

/// `jobscope collect [--once]`: passes every `transport.collect_interval_s`, forever (the
/// jobscope-collector service), or one pass. A database that is away is waited for, not fatal.
pub fn collect_cmd(cfg: &Config, once: bool, json: bool) -> Result<()> {
    require_root("collect")?;
    if cfg.postgres.conninfo.is_none() {
        bail!("jobscope collect: no [postgres] conninfo: the collector reads the node summaries from PostgreSQL (docs/cluster.md)");
    }
    let slurm = jobscope_report::slurm::detect();
    let mut log = |m: &str| eprintln!("jobscope: {m}");
    let mut client: Option<pg::Client> = None;
    let mut failures = 0u32;
    loop {
        let pass = (|| -> Result<collect::CollectReport> {
            let c = match client.as_mut() {
                Some(c) if !c.is_closed() => c,
                _ => {
                    let mut c = pg::connect(&cfg.postgres)?;
                    schema::ensure(&mut c)?;
                    client.insert(c)
                }
            };
            collect::collect_once(cfg, c, &*slurm, &mut log)
        })();
        match pass {
            Ok(rep) => {
                failures = 0;
                if once {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&rep)?);
                    } else {
                        print!("{}", rep.describe());
                    }
                    return Ok(());
                }
            }
            Err(e) if once => return Err(e),
            Err(e) => {
                failures += 1;
                client = None;
                log(&format!("collect: {e:#} (retrying)"));
            }
        }
        let wait = Duration::from_secs(cfg.transport.collect_interval_s);
        std::thread::sleep(if failures > 0 {
            wait.max(jobscope_transport::send::backoff(failures))
        } else {
            wait
        });
    }
}

/// What `jobscope config check` found.
#[derive(Debug, serde::Serialize)]
struct Check {
    config: String,
    mode: &'static str,
    description: String,
    warnings: Vec<String>,
    errors: Vec<String>,
}

/// `jobscope config check`.
pub fn config_cmd(cfg: &Config, path: &Path, cmd: ConfigCmd) -> Result<()> {
    let ConfigCmd::Check { json } = cmd;
    let mut c = Check {
        config: path.display().to_string(),
        mode: cfg.transport.mode.as_str(),
        description: describe_mode(cfg),
        warnings: Vec::new(),
        errors: Vec::new(),
    };
    match cfg.transport.mode {
        TransportMode::SharedDir => {
            if let Err(e) = root_may_write(&cfg.paths.state_dir) {
                c.errors.push(e);
            }
        }
        TransportMode::Postgres => {
            let t = &cfg.transport.postgres;
            if let Err(e) = pg::connect_within(t, Duration::from_secs(t.connect_timeout_s), None) {
                c.warnings.push(format!(
                    "the database does not answer now ({e:#}): node summaries wait in {} until it does",
                    cfg.transport.outbox_dir.display()
                ));
            }
        }
        TransportMode::None => {
            let multi: Vec<String> = jobscope_report::slurm::detect()
                .partitions()
                .unwrap_or_default()
                .into_iter()
                .filter(|p| p.multi_node())
                .map(|p| p.name)
                .collect();
            if !multi.is_empty() {
                c.warnings.push(format!(
                    "partition(s) {} let a job span nodes and no transport is configured: such a job is reported by its first node alone, with that node's figures (set [transport]: docs/cluster.md)",
                    multi.join(", ")
                ));
            }
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        println!("{}: read", c.config);
        println!("transport: {}: {}", c.mode, c.description);
        for w in &c.warnings {
            println!("warning: {w}");
        }
    }
    if let Some(e) = c.errors.first() {
        bail!("{e}");
    }
    Ok(())
}

/// One sentence on how this node's job summaries become reports.
fn describe_mode(cfg: &Config) -> String {
    match cfg.transport.mode {
        TransportMode::None => "nodes share nothing: a one-node job is reported by its node, a multi-node job by its first node alone".into(),
        TransportMode::SharedDir => format!(
            "every node of a job writes its summary into {} (shared by the job's nodes); the last node makes the report",
            cfg.paths.state_dir.display()
        ),
        TransportMode::Postgres => format!(
            "each node inserts its summaries into PostgreSQL ({}), keeping them in {} until the database has them; the collector (jobscope collect) makes the reports",
            cfg.transport.postgres.conninfo.as_deref().unwrap_or("?"),
            cfg.transport.outbox_dir.display()
        ),
    }
}

/// Shared-directory mode writes as root: a file root creates in `dir` must be root's. On an
/// export with root squash (the default) it belongs to `nobody`, and the mode cannot work. The
/// check changes nothing of the directory (it runs from the package's postinst): it must exist
/// (a share is mounted, not made), and only its probe file comes and goes.
fn root_may_write(dir: &Path) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let probe = dir.join(format!(".jobscope-probe.{}", std::process::id()));
    let made = std::fs::metadata(dir)
        .map_err(|e| format!("{e} (mount the shared directory first)"))
        .and_then(|m| {
            if m.is_dir() {
                Ok(())
            } else {
                Err("not a directory".into())
            }
        })
        .and_then(|()| {
            jobscope_common::fsutil::create_new(&probe, 0o600).map_err(|e| e.to_string())
        })
        .and_then(|f| f.metadata().map(|m| m.uid()).map_err(|e| e.to_string()));
    let _ = std::fs::remove_file(&probe);
    shared_dir_verdict(dir, made)
}

/// Whether shared-directory mode can work in `dir`, from the owner of the file root created
/// there (or why it could not create one).
fn shared_dir_verdict(
    dir: &Path,
    probe_owner: std::result::Result<u32, String>,
) -> std::result::Result<(), String> {
    match probe_owner {
        Ok(0) => Ok(()),
        Ok(uid) => Err(format!(
            "transport.mode = \"shared_dir\" cannot work here: a file root creates in paths.state_dir {} belongs to uid {uid} (a root-squashed export); use transport.mode = \"postgres\" (docs/cluster.md)",
            dir.display()
        )),
        Err(e) => Err(format!(
            "transport.mode = \"shared_dir\" cannot work here: root cannot write in paths.state_dir {} ({e}); use transport.mode = \"postgres\" (docs/cluster.md)",
            dir.display()
        )),
    }
}

/// `jobscope pg node-role ROLE --password-file F`: the login every compute node connects as.
pub fn node_role(c: &mut pg::Client, role: &str, password_file: &Path) -> Result<()> {
    let password = pg::read_password(password_file)?;
    schema::node_login(c, role, &password).context("jobscope pg node-role")?;
    println!(
        "role {role} may now insert node summaries, and nothing else (put it in [transport.postgres] on the compute nodes)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_directory_is_refused_in_one_line_unless_root_owns_what_it_writes() {
        let d = tempfile::tempdir().unwrap();
        // Root here (the test command runs as root): its probe is its own, and is removed; the
        // directory's mode is left as the admin set it.
        use std::os::unix::fs::PermissionsExt;
        let state = d.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o711)).unwrap();
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(root_may_write(&state), Ok(()));
            assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
        }
        let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o711);
        // A shared directory that is not there (not mounted) is not made: it is refused.
        let e = root_may_write(&d.path().join("absent")).unwrap_err();
        assert!(
            e.contains("mount the shared directory first") && !e.contains('\n'),
            "{e}"
        );
        assert!(!d.path().join("absent").exists());
        // A file in the way.
        std::fs::write(d.path().join("file"), b"x").unwrap();
        let e = root_may_write(&d.path().join("file")).unwrap_err();
        assert!(
            e.contains("root cannot write in paths.state_dir") && !e.contains('\n'),
            "{e}"
        );
        // What a root-squashed export gives root's files: nobody's uid.
        let e = shared_dir_verdict(Path::new("/shared/state"), Ok(65534)).unwrap_err();
        assert_eq!(
            e,
            "transport.mode = \"shared_dir\" cannot work here: a file root creates in paths.state_dir /shared/state belongs to uid 65534 (a root-squashed export); use transport.mode = \"postgres\" (docs/cluster.md)"
        );
    }
}
