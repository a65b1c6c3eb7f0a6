//! The database side: schema `jobscope` with
//!
//! - `jobs`: one row per archived run, keyed like the archive (archive/src/store.rs `Key`:
//!   cluster label or `''`, job id, SLURM's start second), the columns of
//!   [`crate::COLUMNS`] under the same names, the whole summary as `jsonb` and the archive
//!   file it came from. Declaratively partitioned by month of the start second (`jobs_YYYY_MM`,
//!   created on demand by `jobscope.ensure_month`), so the key is the conflict target of the upsert.
//! - `meta`: `max_span_s` / `max_lead_s`, the largest (end - start) and (start - end) in seconds
//!   pushed so far: a window on END time becomes an exact range on the start second, which prunes
//!   partitions (audit/src/pg/engine.rs).
//! - `sync_days`: the checkpoint of `jobscope pg sync`, per source archive and day: manifest lines
//!   and bytes already pushed.
//! - `role_map`: database role → (cluster, uid). Row-level security on `jobs` lets a role see the
//!   rows of its mapped uid(s) only; members of `jobscope_auditor` see all; the owner (the sink's
//!   role) is not subject to it. `role_map` itself shows a role its own lines only. SELECT is
//!   granted on the partitioned table, never on a partition, so the policies cannot be side-stepped.

use anyhow::{Context, Result};
use postgres::Client;

/// Bump when the DDL below changes; `ensure` re-applies it when the database has an older one
/// (3: the GPUs' SM activity and health columns, added by `ADD COLUMN IF NOT EXISTS`; 4:
/// `mail_never`, likewise).
pub const SCHEMA_VERSION: i64 = 4;

/// The SQL type of an audit column.
pub fn sql_type(t: crate::ColType) -> &'static str {
    use crate::ColType as C;
    match t {
        C::Int => "bigint",
        C::Float => "double precision",
        C::Text => "text",
        C::Bool => "boolean",
    }
}

/// A column name as a quoted identifier (`user` and `group` are SQL keywords). Names come from
/// [`crate::COLUMNS`] (ASCII snake_case), never from input.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The columns that are NOT NULL (the run's key and what every row has since version 1).
fn not_null(name: &str) -> bool {
    matches!(
        name,
        "job_id" | "node_count" | "node_list" | "start_unix_ms" | "end_unix_ms"
    )
}

fn ddl() -> String {
    let cols: Vec<String> = crate::COLUMNS
        .iter()
        .map(|(n, t)| {
            format!(
                "    {} {}{}",
                ident(n),
                sql_type(*t),
                if not_null(n) { " NOT NULL" } else { "" }
            )
        })
        .collect();
    // An older schema's table gets the columns added since (nullable: its rows have none of
    // them; a row pushed again with a changed summary gets them filled). On the parent table,
    // so every month partition has them.
    let added: Vec<String> = crate::COLUMNS
        .iter()
        .filter(|(n, _)| !not_null(n))
        .map(|(n, t)| {
            format!(
                "ALTER TABLE jobscope.jobs ADD COLUMN IF NOT EXISTS {} {};",
                ident(n),
                sql_type(*t)
            )
        })
        .collect();
    format!(
        r#"
CREATE SCHEMA IF NOT EXISTS jobscope;
CREATE TABLE IF NOT EXISTS jobscope.jobs (
    key_cluster text NOT NULL,
    key_start_s bigint NOT NULL,
{cols},
    summary jsonb NOT NULL,
    archive_file text NOT NULL,
    pushed_at timestamptz NOT NULL DEFAULT now(),
    -- 1 when first pushed, +1 each time a changed summary of the same run replaced it
    revision integer NOT NULL DEFAULT 1,
    PRIMARY KEY (key_cluster, job_id, key_start_s)
) PARTITION BY RANGE (key_start_s);
{added}
CREATE INDEX IF NOT EXISTS jobs_end_idx ON jobscope.jobs (end_unix_ms);
CREATE INDEX IF NOT EXISTS jobs_uid_idx ON jobscope.jobs (uid, end_unix_ms);
CREATE TABLE IF NOT EXISTS jobscope.meta (k text PRIMARY KEY, v bigint NOT NULL);
CREATE TABLE IF NOT EXISTS jobscope.sync_days (
    source text NOT NULL,
    day text NOT NULL,
    seq bigint NOT NULL,
    manifest_bytes bigint NOT NULL,
    synced_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, day)
);
CREATE TABLE IF NOT EXISTS jobscope.role_map (
    role_name text NOT NULL,
    cluster text NOT NULL,
    uid bigint NOT NULL,
    PRIMARY KEY (role_name, cluster)
);

-- The month partition that holds start second `start_s` (UTC months).
CREATE OR REPLACE FUNCTION jobscope.ensure_month(start_s bigint) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    m timestamp := date_trunc('month', to_timestamp(start_s) AT TIME ZONE 'UTC');
    lo bigint := extract(epoch FROM (m AT TIME ZONE 'UTC'))::bigint;
    hi bigint := extract(epoch FROM ((m + interval '1 month') AT TIME ZONE 'UTC'))::bigint;
    part text := 'jobs_' || to_char(m, 'YYYY_MM');
BEGIN
    IF to_regclass('jobscope.' || part) IS NULL THEN
        EXECUTE format('CREATE TABLE jobscope.%I PARTITION OF jobscope.jobs FOR VALUES FROM (%s) TO (%s)',
                       part, lo, hi);
    END IF;
END
$fn$;

-- Roles belong to the server, not to this database, and the advisory lock above serialises
-- only this database's schema: two databases set up at once may both find a role missing, so
-- the second CREATE ROLE's "already exists" is not an error.
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'jobscope_user') THEN
        BEGIN
            CREATE ROLE jobscope_user NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'jobscope_auditor') THEN
        BEGIN
            CREATE ROLE jobscope_auditor NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
    END IF;
END
$do$;
GRANT USAGE ON SCHEMA jobscope TO jobscope_user, jobscope_auditor;
GRANT SELECT ON jobscope.jobs, jobscope.role_map, jobscope.meta TO jobscope_user, jobscope_auditor;

ALTER TABLE jobscope.jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobscope.role_map ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS jobs_read ON jobscope.jobs;
CREATE POLICY jobs_read ON jobscope.jobs FOR SELECT USING (
    pg_has_role('jobscope_auditor', 'MEMBER')
    OR EXISTS (SELECT 1 FROM jobscope.role_map m
               WHERE m.role_name = current_user
                 AND m.cluster = jobs.key_cluster
                 AND m.uid = jobs.uid)
);
DROP POLICY IF EXISTS role_map_own ON jobscope.role_map;
CREATE POLICY role_map_own ON jobscope.role_map FOR SELECT USING (
    role_name = current_user OR pg_has_role('jobscope_auditor', 'MEMBER')
);
"#,
        cols = cols.join(",\n"),
        added = added.join("\n")
    )
}

/// Creates or upgrades the schema (idempotent; serialised by an advisory lock, so two syncs
/// starting at once do not race). Needs a role that may create schemas and roles the first time.
pub fn ensure(client: &mut Client) -> Result<()> {
    let current: Option<i64> = client
        .query_opt(
            "SELECT v FROM jobscope.meta WHERE k = 'schema_version'",
            &[],
        )
        .ok()
        .flatten()
        .map(|r| r.get(0));
    if current == Some(SCHEMA_VERSION) {
        return Ok(());
    }
    let mut tx = client.transaction()?;
    tx.batch_execute("SELECT pg_advisory_xact_lock(hashtext('jobscope-schema'))")?;
    tx.batch_execute(&ddl())
        .context("creating the jobscope schema")?;
    tx.execute(
        "INSERT INTO jobscope.meta (k, v) VALUES ('schema_version', $1)
         ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
        &[&SCHEMA_VERSION],
    )?;
    tx.commit()?;
    Ok(())
}

/// Maps database role `role` to uid `uid` of cluster `cluster` (`''` for jobs without a cluster):
/// the role sees those jobs, and only those (plus any other uid mapped to it on another cluster).
/// Grants it `jobscope_user`. The role must exist (created by the site's DBA, with its password).
pub fn map_role(client: &mut Client, role: &str, cluster: &str, uid: u32) -> Result<()> {
    let exists = client
        .query_opt("SELECT 1 FROM pg_roles WHERE rolname = $1", &[&role])?
        .is_some();
    anyhow::ensure!(exists, "database role {role:?} does not exist");
    let mut tx = client.transaction()?;
    tx.execute(
        "INSERT INTO jobscope.role_map (role_name, cluster, uid) VALUES ($1, $2, $3)
         ON CONFLICT (role_name, cluster) DO UPDATE SET uid = EXCLUDED.uid",
        &[&role, &cluster, &i64::from(uid)],
    )?;
    tx.batch_execute(&format!("GRANT jobscope_user TO {}", ident(role)))?;
    tx.commit()?;
    Ok(())
}
