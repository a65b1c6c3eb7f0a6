//! SLURM 22.05: the Epilog environment, `scontrol show job -o` (the one question about a job),
//! `squeue` (an array's tasks) and `scontrol ping`, each run with a cleared environment, a time
//! limit and a cap on its output.
//!
//! The Epilog asks slurmctld about its own job only, once: `scontrol show job -o ID` is a
//! single-job request. 22.05's `squeue --json` ignores `-j` and `-t` and returns every job the
//! controller holds (bench/epilog-query.sh measures both), and 22.05 has no `scontrol --json`. So the
//! one record is text, one line of `Key=Value` fields in which free text (job name, comment, paths)
//! can hold anything, including copies of other fields: every field is taken only with the fields
//! SLURM prints around it, and only when that run of fields occurs once (see [`unique_field`]).
//! Times are asked for as Unix seconds (`SLURM_TIME_FORMAT=%s`). An array's tasks come from
//! `squeue -h -r -t all -j ID -o %A|%F|%K|%T`, which prints no free text.
//!
//! Captured outputs are the test fixtures (`report/testdata/scontrol-22.05-*.txt`,
//! `report/testdata/squeue-22.05-array-tasks.txt`); `parse_squeue_json` stays for the recorded jobs'
//! `squeue.json` under `report/testdata/recorded/` and newer releases' JSON.
//!
//! Everything here is untrusted text from users (names, comments, paths): it is only ever stored and
//! rendered through escaping templates.

use super::{ArrayTask, JobFacts, JobState, Slurm};
use jobscope_model::slurm::expand_hostlist;
use serde_json::Value;
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long any SLURM command may take (the Epilog must never hang).
const COMMAND_LIMIT: Duration = Duration::from_secs(5);

/// SLURM's task/cgroup plugin reports an OOM kill as the pseudo-signal SIG_OOM (253), which the 7-bit
/// signal field of `SLURM_JOB_EXIT_CODE2` shows as 125.
pub const SIG_OOM_IN_EXIT_CODE2: i32 = 125;

/// The Epilog's environment (see docs/architecture.md: no PATH, no HOME, no job name or state).
/// Serializable: with the PostgreSQL transport a node sends it beside its summary, so the
/// collector decodes the job's facts from it exactly as the Epilog would (`facts_with`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpilogEnv {
    pub job_id: u32,
    pub node: String,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub user: Option<String>,
    pub nodelist: Option<String>,
    pub num_nodes: Option<u32>,
    pub partition: Option<String>,
    pub cluster: Option<String>,
    /// `SLURM_JOB_EXIT_CODE2`, e.g. `0:0` or `1:0` or `0:9`.
    pub exit_code2: Option<String>,
    /// `SLURM_JOB_DERIVED_EC`: the highest step exit status, as a wait status (`1024` = code 4).
    pub derived_ec: Option<String>,
    pub gpus: Option<String>,
}

impl EpilogEnv {
    pub fn from_vars(vars: &HashMap<String, String>) -> Result<EpilogEnv, String> {
        let get = |k: &str| vars.get(k).cloned().filter(|v| !v.is_empty());
        let job_id = get("SLURM_JOB_ID")
            .or_else(|| get("SLURM_JOBID"))
            .ok_or("SLURM_JOB_ID is not set (is this running as Epilog=?)")?
            .parse::<u32>()
            .map_err(|_| "SLURM_JOB_ID is not a number".to_string())?;
        Ok(EpilogEnv {
            job_id,
            node: get("SLURMD_NODENAME").unwrap_or_else(short_hostname),
            uid: get("SLURM_JOB_UID").and_then(|v| v.parse().ok()),
            gid: get("SLURM_JOB_GID").and_then(|v| v.parse().ok()),
            user: get("SLURM_JOB_USER"),
            nodelist: get("SLURM_NODELIST").or_else(|| get("SLURM_JOB_NODELIST")),
            num_nodes: get("SLURM_JOB_NUM_NODES").and_then(|v| v.parse().ok()),
            partition: get("SLURM_JOB_PARTITION"),
            cluster: get("SLURM_CLUSTER_NAME"),
            exit_code2: get("SLURM_JOB_EXIT_CODE2"),
            derived_ec: get("SLURM_JOB_DERIVED_EC"),
            gpus: get("SLURM_JOB_GPUS"),
        })
    }

    /// The job's nodes (from the node list); this node alone when the list is missing or malformed.
    pub fn expected_nodes(&self) -> Vec<String> {
        self.nodelist
            .as_deref()
            .and_then(expand_hostlist)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| vec![self.node.clone()])
    }

    /// What the environment says about the job, decoded.
    pub fn facts(&self) -> JobFacts {
        let (exit_code, signal) = self
            .exit_code2
            .as_deref()
            .map(decode_exit_code2)
            .unwrap_or((None, None));
        let oom = signal == Some(SIG_OOM_IN_EXIT_CODE2);
        JobFacts {
            job_id: self.job_id,
            uid: self.uid,
            gid: self.gid,
            user: self.user.clone(),
            partition: self.partition.clone(),
            cluster: self.cluster.clone(),
            node_count: self.num_nodes,
            nodes: self
                .nodelist
                .as_deref()
                .and_then(expand_hostlist)
                .unwrap_or_default(),
            gpus: self.gpus.clone(),
            exit_code,
            // SIG_OOM is not a signal the job got: it is the scheduler's OOM report.
            exit_signal: if oom { Some(0) } else { signal },
            scheduler_oom: oom,
            derived_exit_code: self
                .derived_ec
                .as_deref()
                .and_then(|v| v.trim().parse::<i32>().ok())
                .map(|status| (status >> 8) & 0xff),
            ..Default::default()
        }
    }

    /// The environment's facts completed by the controller's: the controller wins for what it
    /// knows better (names, limits, allocation), the environment for the exit status, the GPUs and
    /// the uid (they are this job's own, set by slurmd for the Epilog).
    pub fn facts_with(&self, ctl: Option<JobFacts>) -> JobFacts {
        let env = self.facts();
        let Some(c) = ctl else { return env };
        JobFacts {
            job_id: self.job_id,
            uid: env.uid.or(c.uid),
            gid: env.gid.or(c.gid),
            user: c.user.or(env.user),
            partition: c.partition.or(env.partition),
            cluster: c.cluster.or(env.cluster),
            node_count: c.node_count.or(env.node_count),
            nodes: if c.nodes.is_empty() {
                env.nodes
            } else {
                c.nodes
            },
            gpus: env.gpus.or(c.gpus),
            // The environment's exit status is the job's own, but a job cancelled while running
            // (scancel, preemption) reaches the Epilog as `0:0`: the controller's record then
            // holds the signal that ended it.
            exit_code: nonzero_or(env.exit_code, c.exit_code),
            exit_signal: nonzero_or(env.exit_signal, c.exit_signal),
            derived_exit_code: env.derived_exit_code.or(c.derived_exit_code),
            scheduler_oom: env.scheduler_oom || c.scheduler_oom,
            ..c
        }
    }
}

/// `SLURM_JOB_EXIT_CODE2` (`<exit code>:<signal>`) → (exit code, signal).
/// `a` unless it is absent or 0 and `b` is not.
fn nonzero_or(a: Option<i32>, b: Option<i32>) -> Option<i32> {
    match (a, b) {
        (None | Some(0), Some(x)) if x != 0 => Some(x),
        (a, b) => a.or(b),
    }
}

/// What `scontrol show job -o` tells about how a run ended that `squeue --json` does not while
/// the job is COMPLETING (both say COMPLETING then): the controller's exit status, preemption,
/// and a requeue.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScontrolEnd {
    /// The controller's state word, when it is not COMPLETING (e.g. NODE_FAIL shows at once).
    pub state: Option<JobState>,
    /// The controller's reason word (e.g. `Prolog`, `NodeDown`).
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub scheduler_oom: bool,
    pub preempted: bool,
    pub requeued: bool,
}

/// The value of the one run of fields `before KEY=VALUE after` in a `scontrol show job -o` record.
/// The record is one line of `Key=Value` pairs, but free text (job name, comment, work dir) can hold
/// anything, including a forged `ExitCode=0:0`: so the field is taken only with the fields SLURM
/// prints around it, and only when that run occurs exactly once (a forged copy makes it ambiguous,
/// and then nothing is believed).
fn unique_field<'a>(record: &'a str, before: &str, key: &str, after: &str) -> Option<&'a str> {
    match runs(record, before, key, after)[..] {
        [one] => Some(one),
        _ => None,
    }
}

/// Every value of `KEY` found in a run `before=<one token> KEY=<value> after=` (see
/// [`unique_field`]).
fn runs<'a>(record: &'a str, before: &str, key: &str, after: &str) -> Vec<&'a str> {
    let pat = format!(" {key}=");
    let mut found = Vec::new();
    for (i, _) in record.match_indices(&pat) {
        let head = &record[..i];
        let value_start = i + pat.len();
        let rest = &record[value_start..];
        let value_end = rest.find(' ').unwrap_or(rest.len());
        let tail = &rest[value_end..];
        // The preceding field must be `before=<one token>`; the next must start with `after=`.
        let prev_ok = head
            .rfind(' ')
            .is_some_and(|j| head[j + 1..].starts_with(&format!("{before}=")));
        if prev_ok && tail.starts_with(&format!(" {after}=")) {
            found.push(&rest[..value_end]);
        }
    }
    found
}

/// Parses how a run ended from a `scontrol show job -o` record (SLURM 22.05's field order).
pub fn parse_scontrol_end(record: &str) -> ScontrolEnd {
    let (code, mut signal) = unique_field(record, "Reboot", "ExitCode", "RunTime")
        .map(decode_exit_code2)
        .unwrap_or((None, None));
    let oom = signal == Some(SIG_OOM_IN_EXIT_CODE2);
    if oom {
        signal = Some(0);
    }
    let state = unique_field(record, "QOS", "JobState", "Reason")
        .map(JobState::from_name)
        .filter(|s| *s != JobState::Completing && *s != JobState::Unknown);
    // A job not yet ended has no end to forget: its EndTime is Unknown whenever it has no limit.
    let not_ended = matches!(
        state,
        Some(JobState::Running | JobState::Pending | JobState::Suspended)
    );
    ScontrolEnd {
        state,
        reason: unique_field(record, "JobState", "Reason", "Dependency")
            .filter(|r| *r != "None")
            .map(str::to_string),
        exit_code: code,
        exit_signal: signal,
        scheduler_oom: oom,
        // `PreemptTime` is printed for preemptable jobs: a time once the job was preempted.
        preempted: unique_field(record, "PreemptEligibleTime", "PreemptTime", "SuspendTime")
            .is_some_and(|t| t != "None" && t != "Unknown"),
        // A run that has ended (its Epilog is running) but whose end the controller has
        // forgotten: the job was reset for its next run, i.e. requeued.
        requeued: !not_ended
            && unique_field(record, "StartTime", "EndTime", "Deadline")
                .is_some_and(|t| t == "Unknown"),
    }
}

/// [`unique_field`] with several possible neighbours (SLURM leaves some fields out, e.g.
/// `Scheduler=` for a job never scheduled): the value when all pairings together find exactly one
/// run (a forged run under any pairing makes the field ambiguous).
fn field<'a>(record: &'a str, before: &[&str], key: &str, after: &[&str]) -> Option<&'a str> {
    let mut found: Vec<&'a str> = Vec::new();
    for b in before {
        for a in after {
            for v in runs(record, b, key, a) {
                // The same run found through two pairings is one run.
                if !found.iter().any(|f| std::ptr::eq(*f, v)) {
                    found.push(v);
                }
            }
        }
    }
    match found[..] {
        [one] => Some(one),
        _ => None,
    }
}

/// `(null)`, `N/A` and the empty string are SLURM's "not set".
fn set(v: Option<&str>) -> Option<String> {
    v.filter(|v| !v.is_empty() && *v != "(null)" && *v != "N/A")
        .map(str::to_string)
}

/// The one record of job `job_id` in `scontrol show job -o` output. Asked about an array's own
/// id, scontrol prints every task of the array, one record per line; a job name may hold a line
/// break, so records are cut only where a line starts with `JobId=`, and the job's record must be
/// the only one that starts `JobId=<job_id> ` (a name forging one makes it ambiguous: `None`).
pub fn own_record(text: &str, job_id: u32) -> Option<&str> {
    let head = format!("JobId={job_id} ");
    let mut mine = records(text).filter(|r| r.starts_with(&head));
    let one = mine.next();
    match mine.next() {
        Some(_) => None,
        None => one,
    }
}

/// The records of `scontrol show job -o` output, cut where a line starts with `JobId=` (the one
/// place a record can start; a job name holding a line break can fake one, which callers
/// handle), each without its trailing line break and spaces.
fn records(text: &str) -> impl Iterator<Item = &str> {
    let mut starts: Vec<usize> = text.match_indices("\nJobId=").map(|(i, _)| i + 1).collect();
    if text.starts_with("JobId=") {
        starts.insert(0, 0);
    }
    (0..starts.len()).map(move |k| {
        let end = starts.get(k + 1).map_or(text.len(), |&n| n - 1);
        text[starts[k]..end].trim_end_matches(['\n', ' '])
    })
}

/// The owner and group run, `UserId=<name>(<uid>) GroupId=<name>(<gid>) MCS_label=`, right after
/// the job name: its position and values when it occurs exactly once (a name holding a copy makes
/// it ambiguous, and then neither the name nor the owner is believed).
fn identity(record: &str) -> Option<(usize, &str, u32, &str, u32)> {
    fn name_id(v: &str) -> Option<(&str, u32)> {
        let (name, id) = v.strip_suffix(')')?.split_once('(')?;
        Some((name, id.parse().ok()?))
    }
    let mut found = None;
    for (i, _) in record.match_indices(" UserId=") {
        let rest = &record[i + " UserId=".len()..];
        let mut it = rest.splitn(3, ' ');
        let (Some(u), Some(g), Some(tail)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let (Some((user, uid)), Some((group, gid))) =
            (name_id(u), g.strip_prefix("GroupId=").and_then(name_id))
        else {
            continue;
        };
        if !tail.starts_with("MCS_label=") {
            continue;
        }
        if found.is_some() {
            return None;
        }
        found = Some((i, user, uid, group, gid));
    }
    found
}

/// Free text that runs from ` KEY=` to the nearest of the `ends` fields after it: only when
/// ` KEY=` occurs once in the record (a copy in other free text makes it ambiguous).
fn free_text<'a>(record: &'a str, key: &str, ends: &[&str]) -> Option<&'a str> {
    let pat = format!(" {key}=");
    let mut hits = record.match_indices(&pat);
    let (at, _) = hits.next()?;
    if hits.next().is_some() {
        return None;
    }
    let rest = &record[at + pat.len()..];
    let end = ends
        .iter()
        .filter_map(|e| rest.find(&format!(" {e}=")))
        .min()
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// A time limit as scontrol prints it (`[days-]hours:minutes:seconds`, `UNLIMITED`) in seconds.
fn limit_s(v: &str) -> Option<u64> {
    let (days, hms) = match v.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, v),
    };
    let parts: Vec<u64> = hms
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let s = match parts[..] {
        [h, m, s] => h * 3600 + m * 60 + s,
        [m, s] => m * 60 + s,
        _ => return None,
    };
    Some(days * 86_400 + s).filter(|&s| s > 0)
}

/// A memory size as scontrol prints it (`300M`, `2G`; megabytes without a suffix) in bytes; 0 is
/// "not set".
fn mem_bytes(v: &str) -> Option<u64> {
    let (num, unit) = match v.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&v[..i], &v[i..]),
        None => (v, "M"),
    };
    let shift = match unit {
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "P" => 50,
        _ => return None,
    };
    let n: f64 = num.parse().ok()?;
    (n.is_finite() && n > 0.0).then(|| (n * (1u64 << shift) as f64).round() as u64)
}

/// What the controller knows about job `job_id`, from `scontrol show job -o` output run with
/// `SLURM_TIME_FORMAT=%s` (SLURM 22.05's field order; `report/testdata/scontrol-22.05-*.txt`).
/// `None` when the output holds no record of the job, or more than one.
pub fn parse_scontrol_job(text: &str, job_id: u32) -> Option<JobFacts> {
    let rec = own_record(text, job_id)?;
    // Nothing a user chooses comes before the name: the first ` JobName=` is SLURM's, and the
    // fields before it (array ids) are SLURM's too.
    let name_at = rec.find(" JobName=")?;
    let prefix: HashMap<&str, &str> = rec[..name_at]
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let who = identity(rec).filter(|w| w.0 >= name_at);
    let name = who
        .map(|w| &rec[name_at + " JobName=".len()..w.0])
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    let num = |v: Option<&str>| v.and_then(|v| v.parse::<u64>().ok());
    let time = |b: &[&str], k, a: &[&str]| num(field(rec, b, k, a)).filter(|&t| t > 0);
    let end = parse_scontrol_end(rec);
    let (mail_user, mail_types) = parse_scontrol_mail(rec);
    let mem = |k| field(rec, &["MinCPUsNode"], k, &["MinTmpDiskNode"]).and_then(mem_bytes);
    Some(JobFacts {
        job_id,
        name,
        user: who.map(|w| w.1.to_string()),
        uid: who.map(|w| w.2),
        gid: who.map(|w| w.4),
        group: who.map(|w| w.3.to_string()),
        account: set(field(rec, &["Nice"], "Account", &["QOS"])),
        partition: set(field(
            rec,
            &["Scheduler", "LastSchedEval", "SecsPreSuspend"],
            "Partition",
            &["AllocNode:Sid"],
        )),
        qos: set(field(rec, &["Account"], "QOS", &["JobState"])),
        cluster: None,
        array_job_id: num(prefix.get("ArrayJobId").copied())
            .filter(|&a| a > 0)
            .map(|a| a as u32),
        array_task_id: num(prefix.get("ArrayTaskId").copied())
            .filter(|&a| a < u32::MAX as u64 - 1)
            .map(|a| a as u32),
        time_limit_s: field(rec, &["RunTime"], "TimeLimit", &["TimeMin"]).and_then(limit_s),
        cpus: num(field(rec, &["NumNodes"], "NumCPUs", &["NumTasks"])).map(|x| x as u32),
        node_count: num(field(
            rec,
            &["BatchHost", "NodeList"],
            "NumNodes",
            &["NumCPUs"],
        ))
        .map(|x| x as u32),
        nodes: set(field(
            rec,
            &["ExcNodeList"],
            "NodeList",
            &["BatchHost", "NumNodes"],
        ))
        .as_deref()
        .and_then(expand_hostlist)
        .unwrap_or_default(),
        mem_per_node_bytes: mem("MinMemoryNode"),
        mem_per_cpu_bytes: mem("MinMemoryCPU"),
        gpus: None,
        tres: set(field(rec, &["ReqB:S:C:T"], "TRES", &["Socks/Node"])),
        scheduler_state: field(rec, &["QOS"], "JobState", &["Reason"]).map(JobState::from_name),
        derived_exit_code: None,
        preempted: end.preempted,
        requeued: end.requeued,
        // 22.05 says COMPLETING as the state itself (scheduler_state).
        completing: false,
        scheduler_reason: end.reason,
        submit_unix_s: time(&["TimeMin"], "SubmitTime", &["EligibleTime"]),
        start_unix_s: time(&["AccrueTime", "EligibleTime"], "StartTime", &["EndTime"]),
        end_unix_s: time(&["StartTime"], "EndTime", &["Deadline"]),
        exit_code: end.exit_code,
        exit_signal: end.exit_signal,
        scheduler_oom: end.scheduler_oom,
        mail_user,
        mail_types,
        work_dir: free_text(rec, "WorkDir", &["Comment", "StdErr", "StdIn", "StdOut"])
            .filter(|d| d.starts_with('/'))
            .map(str::to_string),
        comment: free_text(rec, "Comment", &["StdErr", "StdIn", "StdOut", "Power"])
            .map(str::trim_end)
            .filter(|c| !c.is_empty())
            .map(str::to_string),
    })
}

/// The tasks of array `array_id` from `squeue -h -r -t all -j <array_id> -o %A|%F|%K|%T` (job id,
/// array id, task index, state: no free text). Lines of other shapes are skipped.
pub fn parse_array_task_lines(text: &str, array_id: u32) -> Vec<ArrayTask> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.trim().split('|').collect();
            let [job, array, task, state] = f[..] else {
                return None;
            };
            (array.parse::<u32>().ok()? == array_id).then_some(())?;
            Some(ArrayTask {
                job_id: job.parse().ok()?,
                task_id: task.parse().ok(),
                state: JobState::from_name(state),
            })
        })
        .collect()
}

pub fn decode_exit_code2(s: &str) -> (Option<i32>, Option<i32>) {
    s.split_once(':')
        .map(|(a, b)| (a.trim().parse().ok(), b.trim().parse().ok()))
        .unwrap_or((None, None))
}

pub fn short_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: valid buffer; gethostname NUL-terminates on success.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end])
        .split('.')
        .next()
        .unwrap_or("unknown")
        .to_string()
}

fn s(v: &Value, k: &str) -> Option<String> {
    v.get(k)
        .and_then(|x| x.as_str())
        .map(str::to_string)
        .filter(|x| !x.is_empty())
}

fn n(v: &Value, k: &str) -> Option<u64> {
    let x = v.get(k)?;
    // 22.05 prints plain numbers; newer releases wrap them as {"set":..,"number":..}.
    x.as_u64().or_else(|| {
        x.get("number")
            .and_then(|n| n.as_u64())
            .filter(|_| x.get("set").and_then(|s| s.as_bool()) != Some(false))
    })
}

/// `job_state`: a string in 22.05, a list of names in later releases.
fn state(job: &Value) -> Option<JobState> {
    let x = job.get("job_state")?;
    x.as_str()
        .or_else(|| x.as_array()?.first()?.as_str())
        .map(JobState::from_name)
}

fn jobs(text: &str) -> Option<Vec<Value>> {
    let v: Value = serde_json::from_str(text).ok()?;
    match v.get("jobs")? {
        Value::Array(a) => Some(a.clone()),
        _ => None,
    }
}

const MIB: u64 = 1024 * 1024;

/// Parses `squeue --json -j J -t all` output; `None` if the job is not in it.
pub fn parse_squeue_json(text: &str, job_id: u32) -> Option<JobFacts> {
    let jobs = jobs(text)?;
    let job = jobs
        .iter()
        .find(|j| n(j, "job_id") == Some(job_id as u64))?;
    // 0 and the "infinite"/NO_VAL sentinels mean "not set".
    let mem = |k| n(job, k).filter(|&m| m > 0 && m < u32::MAX as u64);
    Some(JobFacts {
        job_id,
        name: s(job, "name"),
        user: s(job, "user_name"),
        uid: n(job, "user_id").map(|u| u as u32),
        gid: n(job, "group_id").map(|g| g as u32),
        group: s(job, "group_name"),
        account: s(job, "account"),
        partition: s(job, "partition"),
        qos: s(job, "qos"),
        cluster: s(job, "cluster"),
        array_job_id: n(job, "array_job_id").filter(|&a| a > 0).map(|a| a as u32),
        array_task_id: n(job, "array_task_id")
            .filter(|&a| a < u32::MAX as u64 - 1)
            .map(|a| a as u32),
        time_limit_s: n(job, "time_limit")
            .filter(|&t| t > 0 && t < u32::MAX as u64 - 1)
            .map(|m| m * 60),
        cpus: n(job, "cpus").map(|x| x as u32),
        node_count: n(job, "node_count").map(|x| x as u32),
        nodes: s(job, "nodes")
            .as_deref()
            .and_then(expand_hostlist)
            .unwrap_or_default(),
        mem_per_node_bytes: mem("memory_per_node").map(|m| m * MIB),
        mem_per_cpu_bytes: mem("memory_per_cpu").map(|m| m * MIB),
        gpus: None,
        tres: s(job, "tres_alloc_str"),
        scheduler_state: state(job),
        derived_exit_code: None,
        preempted: false,
        requeued: false,
        completing: false,
        scheduler_reason: s(job, "state_reason").filter(|r| r != "None"),
        submit_unix_s: n(job, "submit_time").filter(|&t| t > 0),
        start_unix_s: n(job, "start_time").filter(|&t| t > 0),
        end_unix_s: n(job, "end_time").filter(|&t| t > 0),
        // The Epilog's SLURM_JOB_EXIT_CODE2 is the job's exit status; squeue's is not final yet.
        exit_code: None,
        exit_signal: None,
        scheduler_oom: false,
        mail_user: s(job, "mail_user"),
        mail_types: job
            .get("mail_type")
            .and_then(|m| m.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        work_dir: s(job, "current_working_directory"),
        comment: s(job, "comment"),
    })
}

/// The tasks of array `array_id` in `squeue --json -t all -j <array_id>` output.
pub fn parse_array_tasks(text: &str, array_id: u32) -> Option<Vec<ArrayTask>> {
    Some(
        jobs(text)?
            .iter()
            .filter(|j| n(j, "array_job_id") == Some(array_id as u64))
            .filter_map(|j| {
                Some(ArrayTask {
                    job_id: n(j, "job_id")? as u32,
                    task_id: n(j, "array_task_id")
                        .filter(|&a| a < u32::MAX as u64 - 1)
                        .map(|a| a as u32),
                    state: state(j).unwrap_or(JobState::Unknown),
                })
            })
            .collect(),
    )
}

/// `MailUser` and `MailType` from `scontrol show job -o` output. SLURM 22.05's `squeue --json`
/// has neither field, and scontrol prints them only when the job has a `--mail-type`. Free text
/// (job name, comment, paths) comes before them in the record, so the LAST ` MailUser=` is the real
/// one, and its value runs up to the ` MailType=` that follows (a `--mail-user` may hold spaces or
/// line breaks, which `choose_recipient` then refuses, with the reason logged).
pub fn parse_scontrol_mail(record: &str) -> (Option<String>, Vec<String>) {
    let at = match record.rfind(" MailUser=") {
        Some(i) => i + 1,
        None if record.starts_with("MailUser=") => 0,
        None => return (None, Vec::new()),
    };
    let rest = &record[at + "MailUser=".len()..];
    let (user, types) = match rest.find(" MailType=") {
        Some(i) => (&rest[..i], &rest[i + " MailType=".len()..]),
        None => (rest.split_whitespace().next().unwrap_or(""), ""),
    };
    let types: Vec<String> = types
        .split_whitespace()
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|t| !t.is_empty() && *t != "NONE" && *t != "(null)")
        .map(str::to_string)
        .collect();
    let user = (!user.is_empty() && user != "(null)").then(|| user.to_string());
    (user, types)
}

/// Runs a command with a hard time limit; `None` on failure or timeout (the epilog must never hang).
pub fn run_bounded(program: &str, args: &[&str], limit: Duration) -> Option<String> {
    run_bounded_env(program, args, &[], limit)
}

/// [`run_bounded`] with these variables added to the cleared environment.
pub fn run_bounded_env(
    program: &str,
    args: &[&str],
    vars: &[(&str, &str)],
    limit: Duration,
) -> Option<String> {
    let child = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let ended = jobscope_common::child::wait_bounded(
        child,
        None,
        jobscope_common::child::Bounds {
            limit,
            max_output_bytes: 64 * 1024 * 1024,
            // What is left in the pipe after the exit is at most its 64 KiB buffer.
            pipe_grace: Duration::from_secs(2),
            kill_group: false,
        },
    )
    .ok()?;
    // Output cut short is never parsed: a partial record would read as a different job.
    ended
        .succeeded()
        .then(|| String::from_utf8_lossy(&ended.stdout.bytes).into_owned())
}

/// SLURM 22.05 through its commands in `/usr/bin`.
#[derive(Debug, Clone)]
pub struct Slurm2205 {
    pub squeue: String,
    pub scontrol: String,
    /// Where the cluster's name is read (`ClusterName=`): the first file that names it. scontrol's
    /// job record has no cluster, and asking slurmctld for its configuration would be a second
    /// question; the Epilog's environment names it too (`SLURM_CLUSTER_NAME`), `reap` has only this.
    pub slurm_conf: Vec<String>,
}

impl Default for Slurm2205 {
    fn default() -> Self {
        Slurm2205 {
            squeue: "/usr/bin/squeue".into(),
            scontrol: "/usr/bin/scontrol".into(),
            // slurmd's copy in configless mode, then the usual place.
            slurm_conf: vec![
                "/run/slurm/conf/slurm.conf".into(),
                "/etc/slurm/slurm.conf".into(),
            ],
        }
    }
}

/// `ClusterName=` in slurm.conf text (keys are case-insensitive; `#` starts a comment).
pub fn cluster_name_from_conf(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let line = line.split('#').next().unwrap_or("").trim();
        let (k, v) = line.split_once('=')?;
        (k.trim().eq_ignore_ascii_case("ClusterName"))
            .then(|| v.trim().to_string())
            .filter(|v| !v.is_empty() && !v.contains(char::is_whitespace))
    })
}

impl Slurm2205 {
    fn cluster_name(&self) -> Option<String> {
        self.slurm_conf.iter().find_map(|p| {
            let f = std::fs::File::open(p).ok()?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::Read::take(f, 1 << 20), &mut text).ok()?;
            cluster_name_from_conf(&text)
        })
    }
}

impl Slurm for Slurm2205 {
    /// One single-job request to slurmctld (see the module's notes).
    fn job_facts(&self, job_id: u32) -> Option<JobFacts> {
        let out = run_bounded_env(
            &self.scontrol,
            &["show", "job", "-o", &job_id.to_string()],
            &[("SLURM_TIME_FORMAT", "%s")],
            COMMAND_LIMIT,
        )?;
        let mut f = parse_scontrol_job(&out, job_id)?;
        f.cluster = self.cluster_name();
        Some(f)
    }

    fn array_tasks(&self, array_id: u32) -> Option<Vec<ArrayTask>> {
        let id = array_id.to_string();
        let out = run_bounded(
            &self.squeue,
            &["-h", "-r", "-t", "all", "-j", &id, "-o", "%A|%F|%K|%T"],
            COMMAND_LIMIT,
        )?;
        Some(parse_array_task_lines(&out, array_id))
    }

    fn ping(&self) -> bool {
        run_bounded(&self.scontrol, &["ping"], COMMAND_LIMIT).is_some_and(|o| o.contains("UP"))
    }

    fn partitions(&self) -> Option<Vec<super::Partition>> {
        run_bounded(&self.scontrol, &["show", "partition", "-o"], COMMAND_LIMIT)
            .map(|o| parse_partitions(&o))
    }

    /// Two requests whatever the number of jobs, from [`BATCH_MIN_JOBS`] on (fewer are asked one
    /// by one): every job's record (`scontrol show job -o`) and every job id
    /// (`squeue -t all -o %A`), which no job name can forge (see [`records_by_id`]).
    fn jobs_facts(&self, job_ids: &[u32]) -> Option<HashMap<u32, JobFacts>> {
        if job_ids.len() < BATCH_MIN_JOBS {
            return None;
        }
        let ids = run_bounded(
            &self.squeue,
            &["-h", "-t", "all", "-o", "%A"],
            COMMAND_LIMIT,
        )?;
        let text = run_bounded_env(
            &self.scontrol,
            &["show", "job", "-o"],
            &[("SLURM_TIME_FORMAT", "%s")],
            COMMAND_LIMIT,
        )?;
        let cluster = self.cluster_name();
        Some(facts_of_listing(&text, &ids, job_ids, cluster))
    }
}

/// From this many jobs on, [`Slurm2205::jobs_facts`] lists every job instead of asking per job.
pub const BATCH_MIN_JOBS: usize = 8;

/// The records of `scontrol show job -o` (every job) by job id. A record starts at a line that
/// begins `JobId=`; a job name or comment holding a line break can fake such a line, so a record
/// is kept only for an id that `squeue` lists (`known_ids`, one id per line) and that heads one
/// record only (as [`own_record`] refuses an ambiguous one).
pub fn records_by_id<'a>(text: &'a str, known_ids: &str) -> HashMap<u32, &'a str> {
    let known: std::collections::HashSet<u32> = known_ids
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let mut seen: HashMap<u32, Option<&str>> = HashMap::new();
    for rec in records(text) {
        let Some(id) = rec["JobId=".len()..]
            .split(' ')
            .next()
            .and_then(|v| v.parse::<u32>().ok())
        else {
            continue;
        };
        seen.entry(id)
            .and_modify(|r| *r = None)
            .or_insert(Some(rec));
    }
    seen.into_iter()
        .filter(|(id, _)| known.contains(id))
        .filter_map(|(id, r)| Some((id, r?)))
        .collect()
}

/// The facts of `wanted` jobs from one listing ([`records_by_id`]), each parsed as a single
/// job's record is.
pub fn facts_of_listing(
    text: &str,
    known_ids: &str,
    wanted: &[u32],
    cluster: Option<String>,
) -> HashMap<u32, JobFacts> {
    let recs = records_by_id(text, known_ids);
    wanted
        .iter()
        .filter_map(|id| {
            let mut f = parse_scontrol_job(recs.get(id)?, *id)?;
            f.cluster.clone_from(&cluster);
            Some((*id, f))
        })
        .collect()
}

/// `scontrol show partition -o`: one line per partition, `Key=Value` fields; a partition
/// name has no spaces (slurm.conf's syntax), so splitting on spaces is exact for the fields read.
pub fn parse_partitions(text: &str) -> Vec<super::Partition> {
    text.lines()
        .filter_map(|l| {
            let f: HashMap<&str, &str> = l.split(' ').filter_map(|kv| kv.split_once('=')).collect();
            Some(super::Partition {
                name: f.get("PartitionName")?.to_string(),
                max_nodes: f.get("MaxNodes").and_then(|v| v.parse().ok()),
                total_nodes: f.get("TotalNodes")?.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn testdata(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// One listing of every job gives each job the facts its own request gives, and a job name
    /// that fakes another job's record (job 24's name holds `\nJobId=1 …`) gives job 1 nothing.
    #[test]
    fn one_listing_of_all_jobs_gives_each_the_facts_of_its_own_record() {
        let text = testdata("scontrol-22.05-all-jobs.txt");
        let ids = testdata("squeue-22.05-all-ids.txt");
        let got = facts_of_listing(&text, &ids, &[21, 22, 23, 24, 1, 999], Some("c".into()));
        let mut keys: Vec<u32> = got.keys().copied().collect();
        keys.sort();
        assert_eq!(keys, [21, 22, 23, 24]);
        for id in [21, 22, 23, 24] {
            let mut one = parse_scontrol_job(&text, id).unwrap();
            one.cluster = Some("c".into());
            assert_eq!(got[&id], one, "job {id}");
        }
        assert_eq!(got[&22].name.as_deref(), Some("batch-a"));
        assert_eq!(got[&22].nodes.len(), 2);
        // Running jobs without a time limit have EndTime=Unknown: they are not requeued (only an
        // ended run whose end the controller forgot is).
        for id in [22, 23] {
            assert_eq!(
                got[&id].scheduler_state,
                Some(JobState::Running),
                "job {id}"
            );
            assert!(!got[&id].requeued, "job {id}");
        }
        // Job 24's name cut its record short: nothing after it is believed, as for its own request.
        assert_eq!(got[&24].user, None);
        // Had squeue listed an id 1, the forged record would still be refused only if it is
        // ambiguous; a real job 1 next to the forgery makes it so.
        let with_real_1 = format!(
            "{text}JobId=1 JobName=real UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A\n"
        );
        let r = records_by_id(&with_real_1, "1\n21\n");
        assert!(!r.contains_key(&1));
        assert!(r.contains_key(&21));
    }

    #[test]
    fn parses_the_partitions_and_tells_which_let_a_job_span_nodes() {
        let p = parse_partitions(&testdata("scontrol-22.05-partitions.txt"));
        let names: Vec<(&str, Option<u32>, u32)> = p
            .iter()
            .map(|p| (p.name.as_str(), p.max_nodes, p.total_nodes))
            .collect();
        assert_eq!(names, [("debug", None, 4), ("high", None, 4)]);
        assert!(p.iter().all(|p| p.multi_node()));
        let one = super::super::Partition {
            name: "serial".into(),
            max_nodes: Some(1),
            total_nodes: 100,
        };
        let single = super::super::Partition {
            name: "login".into(),
            max_nodes: None,
            total_nodes: 1,
        };
        assert!(!one.multi_node() && !single.multi_node());
        assert_eq!(parse_partitions("garbage\n\n"), []);
    }

    #[test]
    fn parses_squeue_2205_json() {
        let text = testdata("squeue-22.05-job.json");
        let j = parse_squeue_json(&text, 7).unwrap();
        assert_eq!(j.name.as_deref(), Some("burn <b>&\"x"));
        assert_eq!(j.user.as_deref(), Some("alice"));
        assert_eq!(j.uid, Some(1001));
        assert_eq!(j.scheduler_state, Some(JobState::Completed));
        assert_eq!(j.scheduler_reason, None, "\"None\" is no reason");
        assert_eq!(j.cpus, Some(2));
        assert_eq!(j.mem_per_cpu_bytes, Some(1000 * MIB));
        assert_eq!(j.mem_per_node_bytes, None, "0 means not set");
        assert_eq!(j.time_limit_s, Some(5 * 60));
        assert_eq!(j.node_count, Some(1));
        assert_eq!(j.nodes, vec!["vm"]);
        assert_eq!(j.start_unix_s, Some(1_795_305_466));
        assert_eq!(j.array_job_id, None, "0 means not an array");
        assert!(parse_squeue_json(&text, 8).is_none());
        assert!(parse_squeue_json("not json", 7).is_none());
    }

    #[test]
    fn parses_the_recorded_jobs_squeue_output() {
        let text = testdata("recorded/two-node-imbalanced/squeue.json");
        let id: u32 = testdata("recorded/two-node-imbalanced/job_id")
            .trim()
            .parse()
            .unwrap();
        let j = parse_squeue_json(&text, id).unwrap();
        assert_eq!(j.nodes, vec!["vmn1", "vmn2"]);
        assert_eq!(j.node_count, Some(2));
    }

    #[test]
    fn newer_json_shapes_are_read_too() {
        // Releases after 22.05 wrap numbers as {set, number} and list states.
        let text = r#"{"jobs":[{"job_id":9,"job_state":["RUNNING","COMPLETING"],
            "time_limit":{"set":true,"infinite":false,"number":10},
            "cpus":{"set":false,"number":0}}]}"#;
        let j = parse_squeue_json(text, 9).unwrap();
        assert_eq!(j.scheduler_state, Some(JobState::Running));
        assert_eq!(j.time_limit_s, Some(600));
        assert_eq!(j.cpus, None, "set: false means not set");
    }

    #[test]
    fn array_tasks_are_listed_with_their_states() {
        let text = r#"{"jobs":[
            {"job_id":80,"array_job_id":80,"array_task_id":1,"job_state":"COMPLETED"},
            {"job_id":81,"array_job_id":80,"array_task_id":2,"job_state":"RUNNING"},
            {"job_id":82,"array_job_id":80,"array_task_id":3,"job_state":"COMPLETING"},
            {"job_id":99,"array_job_id":0,"job_state":"RUNNING"}]}"#;
        let t = parse_array_tasks(text, 80).unwrap();
        assert_eq!(
            t.iter()
                .map(|t| (t.job_id, t.task_id, t.state))
                .collect::<Vec<_>>(),
            vec![
                (80, Some(1), JobState::Completed),
                (81, Some(2), JobState::Running),
                (82, Some(3), JobState::Completing)
            ]
        );
        assert!(parse_array_tasks("{}", 80).is_none());
    }

    #[test]
    fn mail_settings_from_scontrol() {
        // 22.05 output (tail), with free text before it that imitates the fields.
        let rec = testdata("scontrol-22.05-job.txt");
        assert_eq!(
            parse_scontrol_mail(&rec),
            (
                Some("bob@localhost".into()),
                vec!["END".into(), "FAIL".into()]
            )
        );
        // A --mail-user with spaces or a line break is kept whole, for choose_recipient to refuse.
        let rec = "JobId=1 Power= MailUser=not an address MailType=END\n";
        assert_eq!(
            parse_scontrol_mail(rec).0.as_deref(),
            Some("not an address")
        );
        let rec = "JobId=1 Power= MailUser=a@b\r\nBcc: c@d MailType=END\n";
        assert_eq!(
            parse_scontrol_mail(rec).0.as_deref(),
            Some("a@b\r\nBcc: c@d")
        );
        // No --mail-type: scontrol prints neither.
        assert_eq!(parse_scontrol_mail("JobId=1 Power= \n"), (None, vec![]));
    }

    fn vars(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn env_requires_job_id() {
        let mut v = HashMap::new();
        assert!(EpilogEnv::from_vars(&v).is_err());
        v.insert("SLURM_JOB_ID".into(), "12".into());
        v.insert("SLURMD_NODENAME".into(), "n1".into());
        let e = EpilogEnv::from_vars(&v).unwrap();
        assert_eq!((e.job_id, e.node.as_str()), (12, "n1"));
        assert_eq!(e.expected_nodes(), vec!["n1"], "no node list: this node");
        v.insert("SLURM_JOB_ID".into(), "12;rm".into());
        assert!(EpilogEnv::from_vars(&v).is_err());
    }

    #[test]
    fn exit_code2_is_decoded_and_sig_oom_is_the_schedulers_oom_report() {
        let env = |code: &str| {
            EpilogEnv::from_vars(&vars(&[
                ("SLURM_JOB_ID", "3"),
                ("SLURMD_NODENAME", "a"),
                ("SLURM_JOB_EXIT_CODE2", code),
            ]))
            .unwrap()
            .facts()
        };
        let f = env("0:125");
        assert!(f.scheduler_oom);
        assert_eq!((f.exit_code, f.exit_signal), (Some(0), Some(0)));
        let f = env("0:9");
        assert!(!f.scheduler_oom);
        assert_eq!((f.exit_code, f.exit_signal), (Some(0), Some(9)));
        let f = env("2:0");
        assert_eq!((f.exit_code, f.exit_signal), (Some(2), Some(0)));
        let f = env("garbage");
        assert_eq!(
            (f.exit_code, f.exit_signal, f.scheduler_oom),
            (None, None, false)
        );
    }

    #[test]
    fn controller_facts_complete_the_environment() {
        let e = EpilogEnv::from_vars(&vars(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURMD_NODENAME", "vm"),
            ("SLURM_JOB_UID", "4242"),
            ("SLURM_JOB_PARTITION", "envpart"),
            ("SLURM_JOB_GPUS", "0,1"),
            ("SLURM_JOB_EXIT_CODE2", "1:0"),
            ("SLURM_NODELIST", "vm"),
        ]))
        .unwrap();
        let ctl = parse_squeue_json(&testdata("squeue-22.05-job.json"), 7);
        let f = e.facts_with(ctl);
        assert_eq!(f.uid, Some(4242), "the Epilog's own uid wins");
        assert_eq!(
            f.name.as_deref(),
            Some("burn <b>&\"x"),
            "the name only squeue knows"
        );
        assert_eq!(f.exit_code, Some(1), "the exit status is the Epilog's");
        assert_eq!(f.gpus.as_deref(), Some("0,1"));
        assert_eq!(f.time_limit_s, Some(300));
        let alone = e.facts_with(None);
        assert_eq!(alone.partition.as_deref(), Some("envpart"));
        assert_eq!(alone.name, None);
    }

    #[test]
    fn bounded_command_times_out() {
        let t = std::time::Instant::now();
        assert!(run_bounded("/bin/sleep", &["300"], Duration::from_millis(200)).is_none());
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "returned at its 200 ms bound, not after the 300 s command: {:?}",
            t.elapsed()
        );
        assert_eq!(
            run_bounded("/bin/echo", &["hi"], Duration::from_secs(5)).as_deref(),
            Some("hi\n")
        );
    }

    #[test]
    fn missing_commands_mean_no_answer() {
        let s = Slurm2205 {
            squeue: "/nonexistent/squeue".into(),
            scontrol: "/nonexistent/scontrol".into(),
            slurm_conf: vec!["/nonexistent/slurm.conf".into()],
        };
        assert!(s.job_facts(1).is_none() && s.array_tasks(1).is_none() && !s.ping());
    }

    /// Records captured by the test cluster's Epilog (first 600 characters): how each run ended,
    /// as only scontrol says it while the job is COMPLETING.
    #[test]
    fn scontrol_says_how_a_run_ended() {
        let cancelled = parse_scontrol_end(&testdata("scontrol-22.05-epilog-cancelled.txt"));
        assert_eq!(
            (cancelled.state, cancelled.exit_code, cancelled.exit_signal),
            (None, Some(0), Some(15)),
            "scancel: COMPLETING, signal 15"
        );
        assert!(!cancelled.preempted && !cancelled.requeued);
        let requeued = parse_scontrol_end(&testdata("scontrol-22.05-epilog-requeued.txt"));
        assert!(requeued.requeued && !requeued.preempted, "{requeued:?}");
        let node = parse_scontrol_end(&testdata("scontrol-22.05-epilog-node-fail.txt"));
        assert_eq!(node.state, Some(JobState::NodeFail));
        let preempted = testdata("scontrol-22.05-epilog-cancelled.txt")
            .replace("PreemptTime=None", "PreemptTime=2026-11-22T19:27:02");
        assert!(parse_scontrol_end(&preempted).preempted);
        let prolog = parse_scontrol_end(&testdata("scontrol-22.05-epilog-in-prolog.txt"));
        assert_eq!(
            (
                prolog.reason.as_deref(),
                prolog.exit_code,
                prolog.exit_signal
            ),
            (Some("Prolog"), Some(0), Some(0))
        );
    }

    /// A job name or comment holding a copy of the fields cannot decide the state: the run of
    /// fields must be unique, else nothing in it is believed.
    #[test]
    fn forged_fields_in_free_text_are_not_believed() {
        let real = testdata("scontrol-22.05-epilog-cancelled.txt");
        let forged = real.replacen(
            "JobName=wrap",
            "JobName=x Reboot=0 ExitCode=0:0 RunTime=00:00:01 QOS=x JobState=COMPLETED Reason=None",
            1,
        );
        let e = parse_scontrol_end(&forged);
        assert_eq!(
            (e.state, e.exit_code, e.exit_signal),
            (None, None, None),
            "{e:?}"
        );
    }

    /// A whole 22.05 record (`sbatch -J 'burn <b>&"x' --comment 'c JobState=COMPLETED Reason=None
    /// ExitCode=0:0' -t 5 --mem=300M --mail-type=END,FAIL --mail-user=bob@localhost`, captured
    /// with SLURM_TIME_FORMAT=%s after the job completed).
    #[test]
    fn scontrol_record_gives_the_job_facts() {
        let j = parse_scontrol_job(&testdata("scontrol-22.05-hostile-comment.txt"), 243).unwrap();
        assert_eq!(j.name.as_deref(), Some("burn <b>&\"x"));
        assert_eq!((j.user.as_deref(), j.uid), (Some("alice"), Some(1001)));
        assert_eq!((j.group.as_deref(), j.gid), (Some("alice"), Some(1001)));
        assert_eq!(
            (j.account.as_deref(), j.qos.as_deref()),
            (None, None),
            "(null)"
        );
        assert_eq!(j.partition.as_deref(), Some("debug"));
        assert_eq!(j.scheduler_state, Some(JobState::Completed));
        assert_eq!(j.scheduler_reason, None, "\"None\" is no reason");
        assert_eq!((j.exit_code, j.exit_signal), (Some(0), Some(0)));
        assert_eq!(j.time_limit_s, Some(5 * 60));
        assert_eq!(j.mem_per_node_bytes, Some(300 * MIB));
        assert_eq!(j.mem_per_cpu_bytes, None);
        assert_eq!((j.cpus, j.node_count), (Some(1), Some(1)));
        assert_eq!(j.nodes, vec!["vm"]);
        assert_eq!(j.tres.as_deref(), Some("cpu=1,mem=300M,node=1,billing=1"));
        assert_eq!(
            (j.submit_unix_s, j.start_unix_s, j.end_unix_s),
            (
                Some(1_795_381_558),
                Some(1_795_381_558),
                Some(1_795_381_561)
            )
        );
        assert_eq!((j.array_job_id, j.array_task_id), (None, None));
        assert_eq!(j.mail_user.as_deref(), Some("bob@localhost"));
        assert_eq!(j.mail_types, vec!["END", "FAIL"]);
        assert_eq!(j.work_dir.as_deref(), Some("/tmp/pkgcap"));
        assert_eq!(
            j.comment.as_deref(),
            Some("c JobState=COMPLETED Reason=None ExitCode=0:0")
        );
        assert!(!j.preempted && !j.requeued && !j.scheduler_oom);
        assert!(parse_scontrol_job(&testdata("scontrol-22.05-hostile-comment.txt"), 24).is_none());
        assert!(
            parse_scontrol_job("slurm_load_jobs error: Invalid job id specified\n", 243).is_none()
        );
    }

    /// QOS and submit time come only from their own run of fields (`Account=… QOS=… JobState=`,
    /// `TimeMin=… SubmitTime=… EligibleTime=`). The captured cluster has no accounting (QOS=(null)),
    /// so the QOS a cluster with accounting prints is put into the captured record by hand; a job
    /// name forging either run makes the field ambiguous, and then it is not believed.
    #[test]
    fn qos_and_submit_time_from_their_own_fields_only() {
        let real = testdata("scontrol-22.05-hostile-comment.txt");
        assert_eq!(real.matches(" QOS=(null) ").count(), 1);
        let with_qos = real.replace(" QOS=(null) ", " QOS=high ");
        let j = parse_scontrol_job(&with_qos, 243).unwrap();
        assert_eq!(j.qos.as_deref(), Some("high"));
        assert_eq!(j.submit_unix_s, Some(1_795_381_558));
        let forged = with_qos.replacen(
            "JobName=burn",
            "JobName=burn Account=a QOS=evil JobState=COMPLETED TimeMin=N/A SubmitTime=1 EligibleTime=1",
            1,
        );
        let j = parse_scontrol_job(&forged, 243).unwrap();
        assert_eq!((j.qos, j.submit_unix_s), (None, None), "{forged}");
    }

    /// During the Epilog (`--wrap 'sleep 3; kill -TERM $$'`, `-t 1-02:03:00 --mem-per-cpu=1500M`):
    /// COMPLETING, with the signal in the controller's exit status.
    #[test]
    fn scontrol_record_while_completing() {
        let j = parse_scontrol_job(&testdata("scontrol-22.05-completing.txt"), 248).unwrap();
        assert_eq!(j.name.as_deref(), Some("run ning"));
        assert_eq!(j.scheduler_state, Some(JobState::Completing));
        assert_eq!((j.exit_code, j.exit_signal), (Some(0), Some(15)));
        assert_eq!(j.scheduler_reason.as_deref(), Some("JobLaunchFailure"));
        assert_eq!(j.time_limit_s, Some(86_400 + 2 * 3600 + 3 * 60));
        assert_eq!(j.mem_per_cpu_bytes, Some(1500 * MIB));
        let running = parse_scontrol_job(&testdata("scontrol-22.05-running.txt"), 248).unwrap();
        assert_eq!(running.scheduler_state, Some(JobState::Running));
        assert_eq!(
            running.end_unix_s,
            Some(1_795_381_646 + 93_780),
            "the limit's end"
        );
    }

    /// A name holding a line break and a copy of the owner fields (`UserId=root(0)`): the owner
    /// run is ambiguous, so neither the name nor the owner is believed; the rest is read.
    #[test]
    fn a_name_forging_the_owner_is_not_believed() {
        let j = parse_scontrol_job(&testdata("scontrol-22.05-newline-name.txt"), 244).unwrap();
        assert_eq!((j.name, j.user, j.uid, j.gid), (None, None, None, None));
        assert_eq!(j.scheduler_state, Some(JobState::Failed));
        assert_eq!((j.exit_code, j.exit_signal), (Some(3), Some(0)));
        assert_eq!((j.cpus, j.time_limit_s), (Some(2), None), "UNLIMITED");
        assert_eq!(j.mem_per_cpu_bytes, Some(1000 * MIB));
        // The same name without the copy is read whole, line break included.
        let plain = testdata("scontrol-22.05-newline-name.txt").replace(
            " UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1",
            "",
        );
        let j = parse_scontrol_job(&plain, 244).unwrap();
        assert_eq!(j.name.as_deref(), Some("two\nlines"));
        assert_eq!(j.uid, Some(1001));
    }

    /// Asked about an array's own id, scontrol prints every task: the job's own record is the one
    /// that starts with its id; a name that forges a record start makes it ambiguous.
    #[test]
    fn an_array_tasks_own_record_is_picked() {
        let text = testdata("scontrol-22.05-array.txt");
        let last = parse_scontrol_job(&text, 245).unwrap();
        assert_eq!(
            (last.array_job_id, last.array_task_id),
            (Some(245), Some(3))
        );
        assert_eq!(last.name.as_deref(), Some("arr"));
        let second = parse_scontrol_job(&text, 247).unwrap();
        assert_eq!(second.array_task_id, Some(2));
        assert!(parse_scontrol_job(&text, 999).is_none());
        let forged = text.replacen("JobName=arr", "JobName=x\nJobId=245 JobName=y", 1);
        assert!(parse_scontrol_job(&forged, 245).is_none());
        assert_eq!(
            parse_scontrol_job(&forged, 247).unwrap().array_task_id,
            Some(2),
            "the other tasks' records are untouched"
        );
    }

    /// A field SLURM prints with one of several neighbours: a forged run under any of them makes
    /// it ambiguous (a copy under one neighbour must not hide the real run under another).
    #[test]
    fn a_forged_run_under_another_neighbour_is_not_believed() {
        let real = testdata("scontrol-22.05-hostile-comment.txt");
        let forged = real.replacen(
            "JobName=burn",
            "JobName=x Scheduler=x Partition=evil AllocNode:Sid=x LastSchedEval=1 Partition=evil AllocNode:Sid=x",
            1,
        );
        assert_eq!(parse_scontrol_job(&forged, 243).unwrap().partition, None);
        assert_eq!(
            parse_scontrol_job(&real, 243).unwrap().partition.as_deref(),
            Some("debug")
        );
    }

    #[test]
    fn the_cluster_name_from_slurm_conf() {
        let conf = "# ClusterName=commented\nSlurmctldHost=vm\nclustername = jobscope # ours\nClusterName=second\n";
        assert_eq!(cluster_name_from_conf(conf).as_deref(), Some("jobscope"));
        assert_eq!(cluster_name_from_conf("ClusterName=\n"), None);
        assert_eq!(cluster_name_from_conf("PartitionName=x\n"), None);
    }

    #[test]
    fn limits_and_sizes_as_scontrol_prints_them() {
        assert_eq!(limit_s("00:05:00"), Some(300));
        assert_eq!(limit_s("2-00:00:01"), Some(172_801));
        assert_eq!(limit_s("UNLIMITED"), None);
        assert_eq!(limit_s("Partition_Limit"), None);
        assert_eq!(mem_bytes("300M"), Some(300 * MIB));
        assert_eq!(mem_bytes("2G"), Some(2048 * MIB));
        assert_eq!(mem_bytes("0"), None, "0 is not set");
        assert_eq!(mem_bytes("12X"), None);
    }

    /// `squeue -h -r -t all -j 245 -o %A|%F|%K|%T` as captured.
    #[test]
    fn array_task_lines() {
        let t = parse_array_task_lines(&testdata("squeue-22.05-array-tasks.txt"), 245);
        assert_eq!(
            t.iter()
                .map(|t| (t.job_id, t.task_id, t.state))
                .collect::<Vec<_>>(),
            vec![
                (245, Some(3), JobState::Completed),
                (247, Some(2), JobState::Completed),
                (246, Some(1), JobState::Completed)
            ]
        );
        let odd = "80|80|N/A|PENDING\n81|99|1|RUNNING\ngarbage\n";
        assert_eq!(
            parse_array_task_lines(odd, 80),
            vec![ArrayTask {
                job_id: 80,
                task_id: None,
                state: JobState::Pending
            }]
        );
    }

    /// The controller's signal fills in for the Epilog's `0:0`; a real exit status is kept.
    #[test]
    fn the_controllers_exit_status_completes_a_zero_environment() {
        let env = EpilogEnv {
            job_id: 70,
            exit_code2: Some("0:0".into()),
            derived_ec: Some("1024".into()),
            ..Default::default()
        };
        let ctl = JobFacts {
            exit_code: Some(0),
            exit_signal: Some(15),
            ..Default::default()
        };
        let f = env.facts_with(Some(ctl.clone()));
        assert_eq!(
            (f.exit_code, f.exit_signal, f.derived_exit_code),
            (Some(0), Some(15), Some(4))
        );
        let env3 = EpilogEnv {
            exit_code2: Some("3:0".into()),
            ..env
        };
        assert_eq!(env3.facts_with(Some(ctl)).exit_code, Some(3));
    }
}
