//! What SLURM says about the job: the Epilog environment plus `squeue --json` (22.05 has no
//! `scontrol --json`, and `scontrol show job -o` cannot be split safely when a job name has spaces).
//! Everything here is untrusted text from users (names, comments, paths) and is only ever stored
//! and rendered through escaping templates.

use serde_json::Value;
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The Epilog's environment (see docs/architecture.md: no PATH, no HOME, no job name or state).
#[derive(Debug, Clone, Default)]
pub struct EpilogEnv {
    pub job_id: u32,
    pub node: String,
    pub uid: Option<u32>,
    pub user: Option<String>,
    pub nodelist: Option<String>,
    pub num_nodes: Option<u32>,
    pub partition: Option<String>,
    pub cluster: Option<String>,
    /// `SLURM_JOB_EXIT_CODE2`, e.g. `0:0` or `1:0` or `0:9`.
    pub exit_code2: Option<String>,
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
            user: get("SLURM_JOB_USER"),
            nodelist: get("SLURM_NODELIST").or_else(|| get("SLURM_JOB_NODELIST")),
            num_nodes: get("SLURM_JOB_NUM_NODES").and_then(|v| v.parse().ok()),
            partition: get("SLURM_JOB_PARTITION"),
            cluster: get("SLURM_CLUSTER_NAME"),
            exit_code2: get("SLURM_JOB_EXIT_CODE2"),
            gpus: get("SLURM_JOB_GPUS"),
        })
    }
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

/// The fields of `squeue --json` that jobscope uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobInfo {
    pub name: Option<String>,
    pub user: Option<String>,
    pub uid: Option<u32>,
    pub account: Option<String>,
    pub partition: Option<String>,
    pub cluster: Option<String>,
    pub state: Option<String>,
    pub state_reason: Option<String>,
    pub exit_code: Option<i64>,
    pub time_limit_min: Option<u64>,
    pub start_time: Option<u64>,
    pub end_time: Option<u64>,
    pub nodes: Option<String>,
    pub node_count: Option<u32>,
    pub cpus: Option<u32>,
    pub mem_per_node_mb: Option<u64>,
    pub mem_per_cpu_mb: Option<u64>,
    pub mail_user: Option<String>,
    pub mail_type: Vec<String>,
    pub work_dir: Option<String>,
    pub comment: Option<String>,
    pub array_job_id: Option<u32>,
    pub array_task_id: Option<u32>,
    pub gres: Option<String>,
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

/// Parses `squeue --json -j J -t all` output; `None` if the job is not in it.
pub fn parse_squeue_json(text: &str, job_id: u32) -> Option<JobInfo> {
    let v: Value = serde_json::from_str(text).ok()?;
    let job = v
        .get("jobs")?
        .as_array()?
        .iter()
        .find(|j| n(j, "job_id") == Some(job_id as u64))?;
    let mem_per_node = n(job, "memory_per_node").filter(|&m| m > 0 && m < u32::MAX as u64);
    let mem_per_cpu = n(job, "memory_per_cpu").filter(|&m| m > 0 && m < u32::MAX as u64);
    Some(JobInfo {
        name: s(job, "name"),
        user: s(job, "user_name"),
        uid: n(job, "user_id").map(|u| u as u32),
        account: s(job, "account"),
        partition: s(job, "partition"),
        cluster: s(job, "cluster"),
        state: job.get("job_state").and_then(|x| {
            x.as_str()
                .map(str::to_string)
                .or_else(|| x.as_array()?.first()?.as_str().map(str::to_string))
        }),
        state_reason: s(job, "state_reason").filter(|r| r != "None"),
        exit_code: job.get("exit_code").and_then(|x| {
            x.as_i64()
                .or_else(|| x.get("return_code").and_then(|r| r.as_i64()))
        }),
        time_limit_min: n(job, "time_limit").filter(|&t| t > 0 && t < u32::MAX as u64 - 1),
        start_time: n(job, "start_time").filter(|&t| t > 0),
        end_time: n(job, "end_time").filter(|&t| t > 0),
        nodes: s(job, "nodes"),
        node_count: n(job, "node_count").map(|x| x as u32),
        cpus: n(job, "cpus").map(|x| x as u32),
        mem_per_node_mb: mem_per_node,
        mem_per_cpu_mb: mem_per_cpu,
        mail_user: s(job, "mail_user"),
        mail_type: job
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
        array_job_id: n(job, "array_job_id").filter(|&a| a > 0).map(|a| a as u32),
        array_task_id: n(job, "array_task_id")
            .filter(|&a| a < u32::MAX as u64 - 1)
            .map(|a| a as u32),
        gres: s(job, "tres_alloc_str"),
    })
}

/// Runs a command with a hard time limit; `None` on failure or timeout (the epilog must never hang).
pub fn run_bounded(program: &str, args: &[&str], limit: Duration) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut out = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = Vec::new();
        let _ = out.by_ref().take(64 * 1024 * 1024).read_to_end(&mut buf);
        buf
    });
    let deadline = std::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let buf = reader.join().ok()?;
                return st
                    .success()
                    .then(|| String::from_utf8_lossy(&buf).into_owned());
            }
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// How many tasks of job array `array_id` are still to finish, not counting `this_job` (whose epilog
/// is running). COMPLETING counts as finished: those tasks are in their epilogs too. `None` if SLURM
/// could not be asked.
pub fn array_tasks_remaining(array_id: u32, this_job: u32) -> Option<usize> {
    let id = array_id.to_string();
    let out = run_bounded(
        "/usr/bin/squeue",
        &["--json", "-t", "all", "-j", &id],
        Duration::from_secs(5),
    )?;
    let v: Value = serde_json::from_str(&out).ok()?;
    let jobs = v.get("jobs")?.as_array()?;
    let open = [
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "SUSPENDED",
        "REQUEUED",
        "RESIZING",
    ];
    Some(
        jobs.iter()
            .filter(|j| n(j, "job_id") != Some(this_job as u64))
            .filter(|j| n(j, "array_job_id") == Some(array_id as u64))
            .filter(|j| {
                j.get("job_state")
                    .and_then(|s| s.as_str())
                    .is_some_and(|s| open.contains(&s))
            })
            .count(),
    )
}

/// Asks slurmctld about the job (bounded to a few seconds).
pub fn query(job_id: u32) -> Option<JobInfo> {
    let id = job_id.to_string();
    let out = run_bounded(
        "/usr/bin/squeue",
        &["--json", "-t", "all", "-j", &id],
        Duration::from_secs(5),
    )?;
    parse_squeue_json(&out, job_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_squeue_2205_json() {
        let text = include_str!("../testdata/squeue-22.05-job.json");
        let j = parse_squeue_json(text, 7).unwrap();
        assert_eq!(j.name.as_deref(), Some("burn <b>&\"x"));
        assert_eq!(j.user.as_deref(), Some("alice"));
        assert_eq!(j.state.as_deref(), Some("COMPLETED"));
        assert_eq!(j.cpus, Some(2));
        assert_eq!(j.mem_per_cpu_mb, Some(1000));
        assert_eq!(j.time_limit_min, Some(5));
        assert_eq!(j.node_count, Some(1));
        assert!(parse_squeue_json(text, 8).is_none());
        assert!(parse_squeue_json("not json", 7).is_none());
    }

    #[test]
    fn env_requires_job_id() {
        let mut v = HashMap::new();
        assert!(EpilogEnv::from_vars(&v).is_err());
        v.insert("SLURM_JOB_ID".into(), "12".into());
        v.insert("SLURMD_NODENAME".into(), "n1".into());
        let e = EpilogEnv::from_vars(&v).unwrap();
        assert_eq!((e.job_id, e.node.as_str()), (12, "n1"));
        v.insert("SLURM_JOB_ID".into(), "12;rm".into());
        assert!(EpilogEnv::from_vars(&v).is_err());
    }

    #[test]
    fn bounded_command_times_out() {
        let t = std::time::Instant::now();
        assert!(run_bounded("/bin/sleep", &["5"], Duration::from_millis(200)).is_none());
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(
            run_bounded("/bin/echo", &["hi"], Duration::from_secs(5)).as_deref(),
            Some("hi\n")
        );
    }
}
