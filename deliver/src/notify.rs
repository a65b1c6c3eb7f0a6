//! Telling the job's owner: whether to mail (policy), the end-of-job mail, array digests, and the
//! report file in the working directory for sites without mail. Runs after the archive is written:
//! nothing here can lose a report (an undelivered mail waits in the queue; failures are logged).
//!
//! # Policy and SLURM's `--mail-type` (the decision)
//! 1. `--jobscope-mail=never|fail|end|always` (SPANK option, handed over by job_prolog) wins.
//! 2. Otherwise SLURM's `--mail-type` says what the user wants to hear about: `FAIL` alone (or with
//!    `BEGIN`/`REQUEUE`…) → `fail`; `END`, `ALL`, `TIME_LIMIT*` → `end`. SLURM still sends its own
//!    short mail for those types; jobscope's report comes in addition, from its own data.
//! 3. Otherwise the site's `mail.default_policy`.
//!
//! Whether a job is ARCHIVED is not the user's choice: every job is archived.

use crate::mail::message::{build_mail, choose_recipient, MailOptions, DIGEST_KIND};
use crate::mail::queue::{FlushMode, FlushOptions, Queue, RetryPolicy};
use crate::mail::transport::{SendmailConfig, SmtpConfig, TlsMode, Transport};
use anyhow::{Context, Result};
use jobscope_common::child::{wait_bounded, Bounds};
use jobscope_common::fsutil::{ensure_dir, is_safe_name, read_limited, write_atomic};
use jobscope_config::{Config, MailPolicy, MailTransportKind, SmtpTls};
use jobscope_model::job::{JobFacts, JobState};
use jobscope_model::summary::JobSummary;
use jobscope_report::present::{self, Templates, View};
use jobscope_report::slurm::{ArrayTask, Slurm};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The effective policy and where it came from (for the log and the archive).
pub fn effective_policy(
    user_option: Option<&str>,
    slurm_mail_type: &[String],
    default: MailPolicy,
) -> (MailPolicy, &'static str) {
    if let Some(p) = user_option.and_then(MailPolicy::parse) {
        return (p, "--jobscope-mail");
    }
    let has = |t: &str| {
        slurm_mail_type
            .iter()
            .any(|m| m.eq_ignore_ascii_case(t) || m.to_ascii_uppercase().starts_with(t))
    };
    if has("END") || has("ALL") || has("TIME_LIMIT") {
        return (MailPolicy::End, "--mail-type");
    }
    if has("FAIL") {
        return (MailPolicy::Fail, "--mail-type");
    }
    (default, "site default")
}

/// Whether this job's report is mailed under `policy`; `Err(reason)` when not.
pub fn should_mail(policy: MailPolicy, s: &JobSummary, cfg: &Config) -> Result<(), String> {
    let failed = !s.state.is_success();
    match policy {
        MailPolicy::Never => Err("policy never".into()),
        MailPolicy::Fail if !failed => Err("policy fail and the job completed".into()),
        MailPolicy::Fail => Ok(()),
        MailPolicy::End if !failed && s.elapsed_s < cfg.mail.min_elapsed_s as f64 => Err(format!(
            "job ran {:.0} s, under mail.min_elapsed_s",
            s.elapsed_s
        )),
        MailPolicy::End | MailPolicy::Always => Ok(()),
    }
}

fn transport(cfg: &Config) -> Result<Transport> {
    let m = &cfg.mail;
    Ok(match m.transport {
        MailTransportKind::Sendmail => Transport::Sendmail(SendmailConfig {
            path: m.sendmail.path.clone(),
            timeout: Duration::from_secs(m.sendmail.timeout_s),
        }),
        MailTransportKind::Smtp => {
            let password = match &m.smtp.password_file {
                Some(p) => Some(
                    String::from_utf8(read_limited(p, 4096)?)
                        .context("password file is not UTF-8")?
                        .trim()
                        .to_string(),
                ),
                None => None,
            };
            Transport::Smtp(SmtpConfig {
                host: m.smtp.host.clone(),
                port: m.smtp.port,
                tls: match m.smtp.tls {
                    SmtpTls::None => TlsMode::None,
                    SmtpTls::Starttls => TlsMode::Starttls,
                    SmtpTls::Tls => TlsMode::Tls,
                },
                user: m.smtp.user.clone(),
                password,
                timeout: Duration::from_secs(m.smtp.timeout_s),
                ca_file: m.smtp.ca_file.clone(),
                helo_name: m.smtp.helo_name.clone(),
            })
        }
    })
}

fn retry(cfg: &Config) -> RetryPolicy {
    let m = &cfg.mail;
    RetryPolicy {
        initial_backoff: Duration::from_secs(m.initial_backoff_s),
        max_backoff: Duration::from_secs(m.max_backoff_s),
        max_age: Duration::from_secs(m.max_age_s),
        // Saturating: the configuration bounds the days, a wrapped product would keep nothing.
        keep_sent: Duration::from_secs(m.keep_sent_days.saturating_mul(86_400)),
    }
}

/// Delivers what is due in the queue within `budget` (the epilog's few seconds, or longer for
/// `jobscope mail flush`). Returns the one-line summary for the log.
pub fn flush(cfg: &Config, budget: Duration, mode: FlushMode) -> Result<String> {
    let q = Queue::open(&cfg.mail.queue_dir)?;
    let t = transport(cfg)?;
    let rep = q.flush(
        &t,
        &FlushOptions::within(budget, cfg.mail.rate_per_s, retry(cfg), mode),
    );
    Ok(format!("{} via {}", rep.summary(), t.describe()))
}

fn mail_options(cfg: &Config) -> Result<MailOptions> {
    let from = crate::mail::message::parse_address(&cfg.mail.from)
        .map_err(|e| anyhow::anyhow!("mail.from {:?}: {e}", cfg.mail.from))?;
    Ok(MailOptions {
        from,
        chart_width: cfg.mail.chart_width,
        chart_height: cfg.mail.chart_height,
        max_chart_nodes: cfg.mail.max_chart_nodes,
    })
}

/// Builds and queues one mail, then flushes within the epilog's budget.
fn send(
    cfg: &Config,
    s: &JobSummary,
    view: &View,
    kind: &str,
    facts: Option<&JobFacts>,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    let r = choose_recipient(
        facts.and_then(|i| i.mail_user.as_deref()),
        s.user.as_deref(),
        cfg.mail.domain.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("no valid recipient: {e}"))?;
    if let Some((shown, why)) = &r.rejected_mail_user {
        // `shown` is already escaped for the log (choose_recipient ran it through `printable`).
        log(&format!(
            "job {}: --mail-user {shown} refused ({why}); mailing the job's user instead",
            s.job_id
        ));
    }
    let (templates, warnings) = Templates::load(cfg.mail.template_dir.as_deref());
    for w in warnings {
        log(&format!("mail templates: {w}"));
    }
    let mail = build_mail(s, view, &r.mailbox, kind, &mail_options(cfg)?, &templates)?;
    for w in &mail.warnings {
        log(&format!("job {}: mail: {w}", s.job_id));
    }
    let q = Queue::open(&cfg.mail.queue_dir)?;
    let queued = q.enqueue_mail(&mail)?;
    log(&format!(
        "job {}: mail {} to {}: {queued:?}",
        s.job_id, mail.id, r.mailbox
    ));
    log(&format!(
        "mail flush: {}",
        flush(
            cfg,
            Duration::from_secs(cfg.mail.flush_budget_s),
            FlushMode::Epilog
        )?
    ));
    Ok(())
}

/// How many tasks of job array `array_id` are still to finish, not counting `this_job` (whose epilog
/// is running). COMPLETING counts as finished: those tasks are in their epilogs too. `None` if SLURM
/// could not be asked.
pub fn array_tasks_remaining(slurm: &dyn Slurm, array_id: u32, this_job: u32) -> Option<usize> {
    Some(remaining_of(&slurm.array_tasks(array_id)?, this_job))
}

fn remaining_of(tasks: &[ArrayTask], this_job: u32) -> usize {
    tasks
        .iter()
        .filter(|t| t.job_id != this_job && t.state.is_unfinished())
        .count()
}

/// Everything after the archive write. Never fails the epilog: problems are logged. `facts` is
/// what SLURM said about the job (mail settings, working directory); `slurm` is asked about arrays.
pub fn notify(
    cfg: &Config,
    s: &JobSummary,
    facts: Option<&JobFacts>,
    slurm: &dyn Slurm,
    log: &mut dyn FnMut(&str),
) {
    let info = facts;
    let view = present::job_view(s);
    let text = match Templates::builtin().render_text(&view) {
        Ok(t) => t,
        Err(e) => {
            log(&format!("job {}: text report: {e}", s.job_id));
            return;
        }
    };
    if cfg.mail.workdir_report {
        if let Err(e) = workdir_report(s, info, &text) {
            log(&format!(
                "job {}: report in the working directory: {e:#}",
                s.job_id
            ));
        }
    }
    if !cfg.mail.enabled {
        return;
    }
    let mail_type = info.map(|i| i.mail_types.clone()).unwrap_or_default();
    let (policy, source) = effective_policy(
        s.user_options.get("mail").map(String::as_str),
        &mail_type,
        cfg.mail.default_policy,
    );
    let array = s.array_job_id.filter(|_| {
        cfg.mail.array_digest && policy != MailPolicy::Always && policy != MailPolicy::Never
    });
    if let Some(array_id) = array {
        if let Err(e) = array_task_done(cfg, s, array_id, policy, info, slurm, log) {
            log(&format!("job {}: array digest: {e:#}", s.job_id));
        }
        return;
    }
    match should_mail(policy, s, cfg) {
        Err(why) => log(&format!(
            "job {}: no mail ({why}; policy from {source})",
            s.job_id
        )),
        Ok(()) => {
            if let Err(e) = send(cfg, s, &view, "end", info, log) {
                log(&format!("job {}: mail not sent: {e:#}", s.job_id));
            }
        }
    }
}

// ------------------------------------------------------------------------------------ arrays

pub use jobscope_report::present::ArrayRow;

fn array_dir(cfg: &Config, array_id: u32) -> PathBuf {
    cfg.paths
        .state_dir
        .join("arrays")
        .join(array_id.to_string())
}

/// Records this task; if it is the array's last, sends the digest (once: O_EXCL claim).
fn array_task_done(
    cfg: &Config,
    s: &JobSummary,
    array_id: u32,
    policy: MailPolicy,
    info: Option<&JobFacts>,
    slurm: &dyn Slurm,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    let dir = array_dir(cfg, array_id);
    ensure_dir(&cfg.paths.state_dir.join("arrays"), 0o700, 0, 0)?;
    ensure_dir(&dir, 0o700, 0, 0)?;
    let row = ArrayRow {
        task_id: s.array_task_id.unwrap_or(s.job_id),
        job_id: s.job_id,
        state: s.state,
        elapsed_s: s.elapsed_s,
        cpu_pct: s.efficiency.cpu_pct,
        mem_peak_bytes: s.mem.peak_bytes,
        mem_pct: s.efficiency.mem_pct,
    };
    write_atomic(
        &dir,
        &format!("task-{}.json", row.task_id),
        &serde_json::to_vec(&row)?,
        0o600,
        None,
    )?;
    let Some(tasks) = slurm.array_tasks(array_id) else {
        log(&format!("array {array_id}: cannot ask SLURM which tasks remain; digest deferred to the next task"));
        return Ok(());
    };
    if remaining_of(&tasks, s.job_id) > 0 {
        return Ok(());
    }
    if jobscope_common::fsutil::create_new(&dir.join("digest-claimed"), 0o600).is_err() {
        return Ok(());
    }
    // Tasks that ended at the same moment may still be writing their rows: wait for the row of
    // each task SLURM shows COMPLETING (its Epilog, which writes the row, is running). A task
    // past COMPLETING wrote its row already, or never ran (cancelled while pending) and has none.
    let expected: BTreeSet<u32> = tasks
        .iter()
        .filter(|t| t.job_id != s.job_id && t.state == JobState::Completing)
        .map(|t| t.task_id.unwrap_or(t.job_id))
        .chain([row.task_id])
        .collect();
    let rows = wait_for_rows(&dir, &expected, ROWS_WAIT);
    let have: BTreeSet<u32> = rows.iter().map(|r| r.task_id).collect();
    let missing: Vec<String> = expected.difference(&have).map(u32::to_string).collect();
    if !missing.is_empty() {
        log(&format!(
            "array {array_id}: no row from task(s) {} after {} s; the digest lists the {} it has",
            missing.join(","),
            ROWS_WAIT.as_secs(),
            rows.len()
        ));
    }
    let failed = rows.iter().any(|r| !r.state.is_success());
    if policy == MailPolicy::Fail && !failed {
        log(&format!(
            "array {array_id}: all {} tasks completed; policy fail: no digest",
            rows.len()
        ));
        return Ok(());
    }
    let digest = digest_summary(array_id, s, &rows);
    let view = present::digest_view(&digest, array_id, s.name.as_deref(), &rows);
    send(cfg, &digest, &view, DIGEST_KIND, info, log)
}

/// The summary a digest mail is built from (never archived): the array as the job (`Job <array>`,
/// not the last task's `<array>_<task>`), the state COMPLETED only if every task completed, the
/// longest task's elapsed time and the tasks' mean CPU and memory efficiency, so that the subject
/// speaks for the whole array rather than for whichever task happened to end last.
pub fn digest_summary(array_id: u32, last: &JobSummary, rows: &[ArrayRow]) -> JobSummary {
    let mut d = last.clone();
    d.job_id = array_id;
    d.array_job_id = Some(array_id);
    d.array_task_id = None;
    let bad = rows.iter().filter(|r| !r.state.is_success()).count();
    d.name = Some(if bad == 0 {
        format!(
            "{}: array digest, {} tasks",
            last.name.as_deref().unwrap_or("(unknown)"),
            rows.len()
        )
    } else {
        format!(
            "{}: array digest, {} tasks, {bad} not completed",
            last.name.as_deref().unwrap_or("(unknown)"),
            rows.len()
        )
    });
    // The array's state: COMPLETED only if every task completed, else the first other task's.
    d.state = rows
        .iter()
        .map(|r| r.state)
        .find(|s| !s.is_success())
        .unwrap_or(JobState::Completed);
    if let Some(max) = rows.iter().map(|r| r.elapsed_s).reduce(f64::max) {
        d.elapsed_s = max;
    }
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    d.efficiency.cpu_pct = mean(rows.iter().filter_map(|r| r.cpu_pct).collect());
    d.efficiency.mem_pct = mean(rows.iter().filter_map(|r| r.mem_pct).collect());
    d
}

/// Sends the digests of arrays whose last task could not ask SLURM at the time (called by `reap`).
pub fn send_pending_digests(cfg: &Config, slurm: &dyn Slurm, log: &mut dyn FnMut(&str)) {
    let root = cfg.paths.state_dir.join("arrays");
    for e in std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .take(1000)
    {
        let Some(array_id) = e.file_name().to_string_lossy().parse::<u32>().ok() else {
            continue;
        };
        if e.path().join("digest-claimed").exists()
            || array_tasks_remaining(slurm, array_id, 0) != Some(0)
        {
            continue;
        }
        let rows = read_rows(&e.path());
        let Some(first) = rows.first() else { continue };
        let Ok(bytes) = jobscope_archive::find(&cfg.paths.archive_dir, first.job_id, 0) else {
            continue;
        };
        let Ok(s) = serde_json::from_slice::<JobSummary>(&bytes) else {
            continue;
        };
        if jobscope_common::fsutil::create_new(&e.path().join("digest-claimed"), 0o600).is_err() {
            continue;
        }
        let digest = digest_summary(array_id, &s, &rows);
        let view = present::digest_view(&digest, array_id, s.name.as_deref(), &rows);
        if let Err(err) = send(cfg, &digest, &view, DIGEST_KIND, None, log) {
            log(&format!("array {array_id}: digest not sent: {err:#}"));
        }
    }
}

/// How long the last task waits for the rows of tasks that ended with it. Their Epilogs write a
/// row within milliseconds of each other; this only bounds a task whose Epilog never does.
const ROWS_WAIT: Duration = Duration::from_secs(10);

/// The rows in `dir` once they include every task of `expected`, or what is there after `bound`.
fn wait_for_rows(dir: &Path, expected: &BTreeSet<u32>, bound: Duration) -> Vec<ArrayRow> {
    let until = std::time::Instant::now() + bound;
    loop {
        let rows = read_rows(dir);
        let have: BTreeSet<u32> = rows.iter().map(|r| r.task_id).collect();
        if expected.is_subset(&have) || std::time::Instant::now() >= until {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_rows(dir: &Path) -> Vec<ArrayRow> {
    let mut rows: Vec<ArrayRow> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("task-"))
        .filter_map(|e| read_limited(&e.path(), 1 << 20).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect();
    rows.sort_by_key(|r| r.task_id);
    rows
}

// ------------------------------------------------------------------- report in the work dir

/// Writes the report as `<workdir>/jobscope-<jobid>.txt` AS THE JOB'S USER: a child process drops
/// all privileges (setgroups, setgid, setuid) before it opens anything, and opens with
/// `O_CREAT|O_EXCL|O_NOFOLLOW`, so root never writes into a user's directory and no symlink is followed.
pub fn workdir_report(s: &JobSummary, info: Option<&JobFacts>, text: &str) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let dir = info
        .and_then(|i| i.work_dir.clone())
        .context("SLURM gave no working directory")?;
    let uid = s.uid.context("the job's uid is unknown")?;
    anyhow::ensure!(uid != 0, "refusing to write as uid 0");
    let name = format!("jobscope-{}.txt", s.job_id);
    anyhow::ensure!(is_safe_name(&name));
    let path = Path::new(&dir).join(name);
    anyhow::ensure!(
        path.is_absolute(),
        "working directory {dir:?} is not absolute"
    );
    let gid = jobscope_common::users::by_uid(uid)
        .context("no such user")?
        .gid;
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.arg("--write-user-file")
        .arg(&path)
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let ended = wait_bounded(
        cmd.spawn()?,
        Some(text.as_bytes().to_vec()),
        Bounds {
            limit: Duration::from_secs(5),
            max_output_bytes: 0,
            pipe_grace: Duration::from_secs(1),
            kill_group: false,
        },
    )?;
    let Some(st) = ended.status else {
        anyhow::bail!("writer timed out (working directory on a hung filesystem?)");
    };
    anyhow::ensure!(st.success(), "writer exited with {st}");
    ended
        .input
        .context("the writer did not read the whole report")
}

/// The unprivileged half of [`workdir_report`]: runs as the user, writes stdin to a new file.
pub fn write_user_file(path: &Path) -> i32 {
    use std::io::{Read, Write};
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } == 0 {
        return 2;
    }
    let mut data = Vec::new();
    if std::io::stdin()
        .take(16 * 1024 * 1024)
        .read_to_end(&mut data)
        .is_err()
    {
        return 1;
    }
    let f = jobscope_common::fsutil::open_regular(
        path,
        jobscope_common::fsutil::Access::CreateNew(0o644),
    );
    match f.and_then(|mut f| f.write_all(&data)) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// The privilege-dropped child of [`workdir_report`]: the same binary (either of them), re-executed as
/// the user with `--write-user-file PATH`; `None` when this process is not that child.
pub fn user_file_child() -> Option<i32> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    (args.len() == 3 && args[1] == "--write-user-file")
        .then(|| write_user_file(std::path::Path::new(&args[2])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_precedence() {
        let d = MailPolicy::End;
        assert_eq!(
            effective_policy(Some("never"), &["END".into()], d),
            (MailPolicy::Never, "--jobscope-mail")
        );
        assert_eq!(
            effective_policy(Some("bogus"), &["FAIL".into()], d).0,
            MailPolicy::Fail
        );
        assert_eq!(
            effective_policy(None, &["BEGIN".into(), "END".into()], MailPolicy::Never).0,
            MailPolicy::End
        );
        assert_eq!(
            effective_policy(None, &["TIME_LIMIT_90".into()], MailPolicy::Never).0,
            MailPolicy::End
        );
        assert_eq!(
            effective_policy(None, &[], MailPolicy::Fail),
            (MailPolicy::Fail, "site default")
        );
    }

    fn write_row(dir: &Path, task_id: u32) {
        let row = ArrayRow {
            task_id,
            job_id: 80 + task_id,
            state: JobState::Completed,
            elapsed_s: 1.0,
            cpu_pct: None,
            mem_peak_bytes: None,
            mem_pct: None,
        };
        let name = format!("task-{task_id}.json");
        write_atomic(dir, &name, &serde_json::to_vec(&row).unwrap(), 0o600, None).unwrap();
    }

    #[test]
    fn the_digest_waits_for_the_row_of_a_task_still_writing_it() {
        let d = tempfile::tempdir().unwrap();
        write_row(d.path(), 1);
        let dir = d.path().to_path_buf();
        // Task 2's Epilog writes its row a little later than the last task looks.
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            write_row(&dir, 2);
        });
        let expected = BTreeSet::from([1, 2]);
        // The bound is far above the 300 ms: only the row's arrival can end the wait in time.
        let rows = wait_for_rows(d.path(), &expected, Duration::from_secs(60));
        late.join().unwrap();
        let ids: Vec<u32> = rows.iter().map(|r| r.task_id).collect();
        assert_eq!(ids, vec![1, 2]);
    }

    #[test]
    fn a_row_that_never_comes_ends_the_wait_at_the_bound_with_the_others() {
        let d = tempfile::tempdir().unwrap();
        write_row(d.path(), 1);
        let rows = wait_for_rows(
            d.path(),
            &BTreeSet::from([1, 2]),
            Duration::from_millis(100),
        );
        assert_eq!(rows.iter().map(|r| r.task_id).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn array_tasks_still_to_finish() {
        use jobscope_report::slurm::{ArrayTask, FakeSlurm};
        let task = |job_id, state| ArrayTask {
            job_id,
            task_id: Some(job_id - 80),
            state,
        };
        let mut slurm = FakeSlurm::up();
        slurm.arrays.insert(
            80,
            vec![
                task(81, JobState::Completed),
                task(82, JobState::Completing),
                task(83, JobState::Running),
                task(84, JobState::Pending),
                task(85, JobState::Failed),
            ],
        );
        assert_eq!(array_tasks_remaining(&slurm, 80, 81), Some(2));
        // The task whose epilog asks does not count, whatever SLURM shows for it.
        assert_eq!(array_tasks_remaining(&slurm, 80, 83), Some(1));
        assert_eq!(array_tasks_remaining(&slurm, 99, 0), Some(0));
        assert_eq!(array_tasks_remaining(&FakeSlurm::default(), 80, 81), None);
    }

    #[test]
    fn digest_speaks_for_the_whole_array() {
        let mut last = crate::mail::message::tests::summary();
        last.name = Some("sweep".into());
        last.array_job_id = Some(80);
        last.array_task_id = Some(5);
        let row = |t: u32, state: &str, el: f64, cpu: f64, mem: f64| ArrayRow {
            task_id: t,
            job_id: 80 + t,
            state: JobState::from_name(state),
            elapsed_s: el,
            cpu_pct: Some(cpu),
            mem_peak_bytes: Some(1 << 20),
            mem_pct: Some(mem),
        };
        let rows = vec![
            row(1, "COMPLETED", 10.0, 20.0, 10.0),
            row(2, "COMPLETED", 30.0, 40.0, 30.0),
        ];
        let d = digest_summary(80, &last, &rows);
        assert_eq!(
            (d.job_id, d.array_job_id, d.array_task_id),
            (80, Some(80), None)
        );
        assert_eq!(d.state, JobState::Completed);
        assert_eq!(d.elapsed_s, 30.0);
        assert_eq!(
            (d.efficiency.cpu_pct, d.efficiency.mem_pct),
            (Some(30.0), Some(20.0))
        );
        assert_eq!(d.name.as_deref(), Some("sweep: array digest, 2 tasks"));
        let rows = vec![
            row(1, "COMPLETED", 10.0, 20.0, 10.0),
            row(2, "TIMEOUT", 30.0, 40.0, 30.0),
        ];
        let d = digest_summary(80, &last, &rows);
        assert_eq!(d.state, JobState::Timeout);
        assert_eq!(
            d.name.as_deref(),
            Some("sweep: array digest, 2 tasks, 1 not completed")
        );
    }
}
