//! The transport's tables, in the audit's schema `jobscope` (audit/src/pg/schema.rs):
//!
//! - `node_summaries`: one row per [`crate::Envelope`] a node sent, unique on its key
//!   ([`crate::Envelope::key`]), so a second send of the same summary inserts nothing. `taken` is
//!   NULL while the row waits for the collector, then says what became of it: `assembled` (into
//!   the run `run_start_s`), `late` (its run had been archived without it: a partial report that
//!   names this node stands) or `unreadable` (an envelope the collector cannot read; kept).
//! - `assembled_runs`: one row per run the collector archived, keyed like the archive (cluster,
//!   job, SLURM's start second): the latest end of its nodes' summaries tells a later run's rows
//!   (a requeued job) from late rows of this one.
//! - the role `jobscope_node` (NOLOGIN; nodes log in as a member, `jobscope pg node-role`): USAGE
//!   on the schema and INSERT on `node_summaries`' data columns, nothing else. It cannot read any
//!   row (not even its own), update, delete, or set `taken`: a compromised node can add rows under
//!   keys not sent yet, never alter what was sent or what was archived.

use anyhow::{Context, Result};
use postgres::Client;

/// The role whose members are the compute nodes.
pub const NODE_ROLE: &str = "jobscope_node";

const DDL: &str = r#"
CREATE SCHEMA IF NOT EXISTS jobscope;
CREATE TABLE IF NOT EXISTS jobscope.node_summaries (
    id bigserial PRIMARY KEY,
    cluster text NOT NULL,
    job_id bigint NOT NULL,
    node text NOT NULL,
    node_start_ms bigint NOT NULL,
    node_end_ms bigint NOT NULL,
    envelope jsonb NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    taken text,
    run_start_s bigint,
    UNIQUE (cluster, job_id, node, node_end_ms)
);
CREATE INDEX IF NOT EXISTS node_summaries_waiting
    ON jobscope.node_summaries (cluster, job_id) WHERE taken IS NULL;
CREATE TABLE IF NOT EXISTS jobscope.assembled_runs (
    cluster text NOT NULL,
    job_id bigint NOT NULL,
    run_start_s bigint NOT NULL,
    nodes_end_ms bigint NOT NULL,
    record text NOT NULL,
    missing_nodes text[] NOT NULL,
    assembled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, job_id, run_start_s)
);
DO $$ BEGIN
    CREATE ROLE jobscope_node NOLOGIN;
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;
REVOKE ALL ON jobscope.node_summaries, jobscope.assembled_runs FROM jobscope_node;
GRANT USAGE ON SCHEMA jobscope TO jobscope_node;
GRANT INSERT (cluster, job_id, node, node_start_ms, node_end_ms, envelope)
    ON jobscope.node_summaries TO jobscope_node;
GRANT USAGE ON SEQUENCE jobscope.node_summaries_id_seq TO jobscope_node;
"#;

/// Creates the tables and the node role where missing (idempotent; `jobscope pg init` and the
/// collector's start call it).
pub fn ensure(c: &mut Client) -> Result<()> {
    c.batch_execute(DDL)
        .context("creating the transport's tables (jobscope.node_summaries)")
}

/// Creates (or gives a new password to) LOGIN role `login`, a member of [`NODE_ROLE`] and of
/// nothing else: what every compute node's `[transport.postgres]` connects as.
pub fn node_login(c: &mut Client, login: &str, password: &str) -> Result<()> {
    anyhow::ensure!(
        !login.is_empty()
            && login.len() <= 63
            && login
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
        "role name {login:?}: use 1 to 63 of a-z 0-9 _"
    );
    anyhow::ensure!(
        !password.is_empty() && !password.contains(['\0', '\n']),
        "the password must be one non-empty line"
    );
    ensure(c)?;
    // DDL takes no parameters: the name is checked above, the password quoted as a literal.
    let pw = password.replace('\'', "''");
    let exists = c
        .query_opt("SELECT 1 FROM pg_roles WHERE rolname = $1", &[&login])?
        .is_some();
    let verb = if exists { "ALTER" } else { "CREATE" };
    c.batch_execute(&format!(
        "{verb} ROLE {login} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE INHERIT PASSWORD '{pw}';
         GRANT {NODE_ROLE} TO {login};"
    ))
    .with_context(|| format!("role {login}"))?;
    Ok(())
}
