//! The PostgreSQL connection every part of jobscope opens the same way: the password from a file
//! only root may read, a bounded connect, no TLS (docs/postgres.md). The audit's sink and engine
//! and the node-summary transport all connect through here.

use anyhow::{bail, Context, Result};
use jobscope_common::fsutil::{open_regular, Access};
use jobscope_config::Postgres as PgConfig;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

pub use postgres::Client;

/// The password from `password_file`: its first line. The file must be a regular file (not a
/// link) that neither group nor others may read, as for the SMTP password.
pub fn read_password(path: &Path) -> Result<String> {
    let f = open_regular(path, Access::Read)
        .with_context(|| format!("postgres.password_file {}", path.display()))?;
    let md = f.metadata()?;
    if md.mode() & 0o077 != 0 {
        bail!(
            "postgres.password_file {}: readable by group or others (mode {:o}); chmod 600 it",
            path.display(),
            md.mode() & 0o777
        );
    }
    let mut s = String::new();
    f.take(4096).read_to_string(&mut s)?;
    Ok(s.lines().next().unwrap_or("").to_string())
}

/// Connects as the configured role. No TLS (see docs/postgres.md for a server elsewhere).
pub fn connect(cfg: &PgConfig) -> Result<Client> {
    connect_within(cfg, Duration::from_secs(cfg.connect_timeout_s), None)
}

/// [`connect`] giving up after `connect_limit` (at most the configured timeout), with every
/// statement of the session limited to `statement_limit`: a node's Epilog must not wait on a
/// database that accepts connections but does not answer.
pub fn connect_within(
    cfg: &PgConfig,
    connect_limit: Duration,
    statement_limit: Option<Duration>,
) -> Result<Client> {
    let conninfo = cfg
        .conninfo
        .as_deref()
        .context("no [postgres] conninfo in the configuration: PostgreSQL is not set up")?;
    let mut c = postgres::Config::from_str(conninfo)
        .map_err(|e| anyhow::anyhow!("postgres.conninfo: {e}"))?;
    if let Some(p) = &cfg.password_file {
        c.password(read_password(p)?);
    }
    c.connect_timeout(connect_limit.min(Duration::from_secs(cfg.connect_timeout_s)));
    c.application_name("jobscope");
    if let Some(l) = statement_limit {
        c.options(&format!("-c statement_timeout={}", l.as_millis().max(1)));
    }
    c.connect(postgres::NoTls)
        .map_err(|e| anyhow::anyhow!("connecting to PostgreSQL ({}): {e}", describe(&c)))
}

/// Host, port, user and database of a connection, for messages (never the password).
fn describe(c: &postgres::Config) -> String {
    let host = c
        .get_hosts()
        .iter()
        .map(|h| match h {
            postgres::config::Host::Tcp(s) => s.clone(),
            postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect::<Vec<_>>()
        .join(",");
    let port = c
        .get_ports()
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "host {host} port {port} user {} database {}",
        c.get_user().unwrap_or("?"),
        c.get_dbname().unwrap_or("?")
    )
}

/// PostgreSQL refuses U+0000 in `text` and `jsonb`; a job name or comment may carry one. It is
/// stored as U+FFFD (the archive's JSON keeps the original).
pub fn pg_text(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') {
        std::borrow::Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// [`pg_text`] over every string (and key) of a JSON document.
pub fn pg_json(v: &mut serde_json::Value) {
    use serde_json::Value as J;
    match v {
        J::String(s) if s.contains('\0') => *s = s.replace('\0', "\u{FFFD}"),
        J::Array(a) => a.iter_mut().for_each(pg_json),
        J::Object(o) if o.keys().any(|k| k.contains('\0')) => {
            let old = std::mem::take(o);
            for (k, mut x) in old {
                pg_json(&mut x);
                o.insert(k.replace('\0', "\u{FFFD}"), x);
            }
        }
        J::Object(o) => o.values_mut().for_each(pg_json),
        _ => {}
    }
}
