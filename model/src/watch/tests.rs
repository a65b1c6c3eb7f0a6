//! The rules' decisions on figures written out by hand (30 s intervals, as the sampler's).
use super::*;

const IV: u64 = 30_000;

/// A GPU track of 30 s intervals from t = 0 with these utilizations.
fn track(label: &str, utils: &[Option<f64>]) -> GpuTrack {
    GpuTrack {
        label: label.into(),
        intervals: utils
            .iter()
            .enumerate()
            .map(|(i, &u)| GpuInterval {
                from_ms: i as u64 * IV,
                to_ms: (i as u64 + 1) * IV,
                util_pct: u,
            })
            .collect(),
    }
}

fn rule(kind: RuleKind) -> Rule {
    Rule {
        name: "r".into(),
        kind,
        ..Rule::default()
    }
}

fn job_with_gpus(gpus: Vec<GpuTrack>) -> LiveJob {
    LiveJob {
        job_id: 7,
        node: "n1".into(),
        user: Some("alice".into()),
        account: Some("physics".into()),
        partition: Some("gpu".into()),
        qos: Some("normal".into()),
        gpus,
        ..LiveJob::default()
    }
}

#[test]
fn an_idle_gpu_is_idle_since_its_first_interval() {
    let t = track("GPU 0", &[Some(0.0); 10]);
    assert_eq!(idle_since_ms(&t.intervals, 15.0, 300_000), Some(0));
}

/// 5 s at 100 % in every minute: every other 30 s interval averages 5/30 = 16.7 %. Over any
/// 300 s window that is 8.3 %, under 15 %: the bursts do not end the idle stretch.
#[test]
fn short_bursts_do_not_end_an_idle_stretch() {
    let burst = 100.0 * 5.0 / 30.0;
    let utils: Vec<Option<f64>> = (0..120)
        .map(|i| Some(if i % 2 == 0 { burst } else { 0.0 }))
        .collect();
    let t = track("GPU 1", &utils);
    assert_eq!(idle_since_ms(&t.intervals, 15.0, 300_000), Some(0));
    // With a 30 s window, one interval of 16.7 % is use: the idle stretch restarts at each burst.
    assert_eq!(idle_since_ms(&t.intervals, 15.0, 30_000), Some(119 * IV));
}

/// 50 % for the first 20 intervals (0–600 s), then 0. The last 300 s window with a mean of at
/// least 15 % ends at 810 s (510–810 s: 3 intervals at 50 % = 150 × 30 / 300 = 15 %); the one
/// ending at 840 s holds 2 (10 %).
#[test]
fn sustained_use_ends_an_idle_stretch_where_its_window_falls_under_the_threshold() {
    let utils: Vec<Option<f64>> = (0..60)
        .map(|i| Some(if i < 20 { 50.0 } else { 0.0 }))
        .collect();
    let t = track("GPU 0", &utils);
    assert_eq!(idle_since_ms(&t.intervals, 15.0, 300_000), Some(810_000));
}

/// An interval whose utilization is unknown is no evidence of idleness: the stretch starts after
/// it, and a track whose newest interval is unknown has no idle stretch at all.
#[test]
fn unknown_utilization_is_not_idle() {
    let mut utils = vec![Some(0.0); 10];
    utils[4] = None;
    let t = track("GPU 0", &utils);
    assert_eq!(idle_since_ms(&t.intervals, 15.0, 300_000), Some(5 * IV));
    utils[9] = None;
    let t = track("GPU 0", &utils);
    assert_eq!(idle_since_ms(&t.intervals, 15.0, 300_000), None);
    assert_eq!(idle_since_ms(&[], 15.0, 300_000), None);
}

/// Two GPUs for 40 minutes: GPU 0 busy at 80 %, GPU 1 idle. A 30-minute rule on `any` names
/// GPU 1 alone, with its 0 % and the stretch from the start; on `all` it does not hold.
#[test]
fn gpu_idle_names_the_idle_gpus_and_respects_any_and_all() {
    let busy = track("GPU 0", &[Some(80.0); 80]);
    let idle = track("GPU 1", &[Some(0.0); 80]);
    let job = job_with_gpus(vec![busy.clone(), idle.clone()]);
    let r = Rule {
        minutes: 30.0,
        ..rule(RuleKind::GpuIdle)
    };
    let f = evaluate(&r, &job).expect("GPU 1 idle for 40 min");
    assert_eq!(f.subjects, vec!["GPU 1".to_string()]);
    assert_eq!(f.since_unix_ms, 0);
    assert_eq!(f.seen_until_unix_ms, 80 * IV);
    assert_eq!(f.value_pct, 0.0);
    let all = Rule {
        gpus: GpuScope::All,
        ..r.clone()
    };
    assert_eq!(evaluate(&all, &job), None);
    let both = job_with_gpus(vec![idle.clone(), track("GPU 2", &[Some(1.0); 80])]);
    let f = evaluate(&all, &both).expect("both idle");
    assert_eq!(f.subjects.len(), 2);
    // 0 % and 1 % over the same stretch: 0.5 %.
    assert!((f.value_pct - 0.5).abs() < 1e-9, "{}", f.value_pct);
    // Not idle long enough: 20 minutes seen.
    let short = job_with_gpus(vec![track("GPU 1", &[Some(0.0); 40])]);
    assert_eq!(evaluate(&r, &short), None);
    // A GPU with no known figure never makes `all` hold.
    let unknown = job_with_gpus(vec![idle, track("GPU 3", &[None; 80])]);
    assert_eq!(evaluate(&all, &unknown), None);
}

fn cpu_job(cores: u32, busy: f64, intervals: usize) -> LiveJob {
    LiveJob {
        alloc_cores: Some(cores),
        cpu: (0..intervals as u64)
            .map(|i| Point {
                from_ms: i * IV,
                to_ms: (i + 1) * IV,
                value: busy,
            })
            .collect(),
        ..job_with_gpus(Vec::new())
    }
}

/// 8 cores, 0.4 of them busy: 5 %. A 30-minute rule under 10 % holds after 30 minutes, not before;
/// a 2-core job is left alone (min_cores 4); 1.2 busy cores (15 %) is not low.
#[test]
fn cpu_low_needs_the_whole_window_and_enough_cores() {
    let r = Rule {
        minutes: 30.0,
        ..rule(RuleKind::CpuLow)
    };
    let f = evaluate(&r, &cpu_job(8, 0.4, 60)).expect("5 % for 30 min");
    assert!((f.value_pct - 5.0).abs() < 1e-9);
    assert_eq!(f.seen_until_unix_ms, 60 * IV);
    // 30 minutes are the 60 intervals seen: the window starts at the job's start.
    assert_eq!(f.since_unix_ms, 0);
    assert_eq!(evaluate(&r, &cpu_job(8, 0.4, 59)), None);
    assert_eq!(evaluate(&r, &cpu_job(2, 0.0, 60)), None);
    assert_eq!(evaluate(&r, &cpu_job(8, 1.2, 60)), None);
}

fn mem_job(limit: u64, values: &[f64]) -> LiveJob {
    LiveJob {
        alloc_mem_bytes: Some(limit),
        mem: values
            .iter()
            .enumerate()
            .map(|(i, &v)| Point {
                from_ms: i as u64 * IV,
                to_ms: (i as u64 + 1) * IV,
                value: v,
            })
            .collect(),
        ..job_with_gpus(Vec::new())
    }
}

/// Limit 1000: 800, 900, 950 is at 95 % and rising; 950, 950 is not rising; 850 is under 90 %;
/// no allocation known, no finding.
#[test]
fn mem_near_limit_needs_the_share_and_a_rise() {
    let r = Rule {
        minutes: 5.0,
        ..rule(RuleKind::MemNearLimit)
    };
    let f = evaluate(&r, &mem_job(1000, &[800.0, 900.0, 950.0])).expect("95 % and rising");
    assert!((f.value_pct - 95.0).abs() < 1e-9);
    assert_eq!(f.mem_bytes, Some(950));
    assert_eq!(f.mem_limit_bytes, Some(1000));
    assert_eq!(f.since_unix_ms, IV);
    assert_eq!(evaluate(&r, &mem_job(1000, &[950.0, 950.0])), None);
    assert_eq!(evaluate(&r, &mem_job(1000, &[800.0, 850.0])), None);
    let mut unknown = mem_job(1000, &[800.0, 950.0]);
    unknown.alloc_mem_bytes = None;
    assert_eq!(evaluate(&r, &unknown), None);
    // The rise must be within the window: 5 minutes = 10 intervals.
    let mut old_rise = vec![900.0];
    old_rise.extend([950.0; 12]);
    assert_eq!(evaluate(&r, &mem_job(1000, &old_rise)), None);
}

fn idle_job() -> LiveJob {
    job_with_gpus(vec![track("GPU 1", &[Some(0.0); 80])])
}

fn cancelling() -> Rule {
    Rule {
        minutes: 30.0,
        cancel: true,
        grace_minutes: 10.0,
        cancel_partitions: vec!["gpu".into()],
        ..rule(RuleKind::GpuIdle)
    }
}

fn done(p: &Planned, at: u64) -> Intervention {
    Intervention {
        rule: p.rule.clone(),
        action: p.action,
        at_unix_ms: at,
        node: "n1".into(),
        finding: p.finding.clone(),
        mailed: p.mail,
        error: None,
    }
}

/// Warn first, then nothing until the grace is over, then cancel, then nothing.
#[test]
fn a_rule_warns_once_then_cancels_after_its_grace() {
    let r = cancelling();
    let job = idle_job();
    let now = 80 * IV;
    let (p, s) = plan(std::slice::from_ref(&r), &job, &[], now);
    assert_eq!(s, vec![]);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].action, ActionKind::Warned);
    assert!(p[0].mail);
    let past = vec![done(&p[0], now)];
    let (p2, _) = plan(std::slice::from_ref(&r), &job, &past, now + 9 * 60_000);
    assert_eq!(p2, vec![]);
    let (p3, _) = plan(std::slice::from_ref(&r), &job, &past, now + 10 * 60_000);
    assert_eq!(p3.len(), 1);
    assert_eq!(p3[0].action, ActionKind::Cancelled);
    let mut past = past;
    past.push(done(&p3[0], now + 10 * 60_000));
    let (p4, _) = plan(std::slice::from_ref(&r), &job, &past, now + 20 * 60_000);
    assert_eq!(p4, vec![]);
}

/// A rule without cancellation, or a job outside the rule's partitions, is warned once only.
#[test]
fn no_cancel_outside_the_rules_partitions() {
    let job = idle_job();
    let now = 80 * IV;
    for r in [
        Rule {
            cancel: false,
            ..cancelling()
        },
        Rule {
            cancel_partitions: vec!["cpu".into()],
            ..cancelling()
        },
    ] {
        let (p, _) = plan(std::slice::from_ref(&r), &job, &[], now);
        let past = vec![done(&p[0], now)];
        let (p2, _) = plan(std::slice::from_ref(&r), &job, &past, now + 3_600_000);
        assert_eq!(p2, vec![], "{r:?}");
    }
    let star = Rule {
        cancel_partitions: vec!["*".into()],
        ..cancelling()
    };
    assert!(star.may_cancel(&job));
    // SLURM lists a job submitted to several partitions as "a,gpu" until it starts.
    let mut multi = idle_job();
    multi.partition = Some("cpu,gpu".into());
    assert!(cancelling().may_cancel(&multi));
}

/// An exempt user, account, partition or QOS gets nothing, and the dry run can say why.
#[test]
fn exemptions_skip_with_a_reason() {
    let job = idle_job();
    for (r, why) in [
        (
            Rule {
                exempt_users: vec!["alice".into()],
                ..cancelling()
            },
            "user alice is exempt",
        ),
        (
            Rule {
                exempt_accounts: vec!["physics".into()],
                ..cancelling()
            },
            "account physics is exempt",
        ),
        (
            Rule {
                exempt_partitions: vec!["gpu".into()],
                ..cancelling()
            },
            "partition gpu is exempt",
        ),
        (
            Rule {
                exempt_qos: vec!["normal".into()],
                ..cancelling()
            },
            "QOS normal is exempt",
        ),
    ] {
        let (p, s) = plan(std::slice::from_ref(&r), &job, &[], 80 * IV);
        assert_eq!(p, vec![]);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].why, why);
    }
}

/// Warned at 40 min (idle since 0); the user then used the GPU, which went idle again at 60 min:
/// no cancellation on the old warning; a new one first.
#[test]
fn a_condition_that_broke_off_is_warned_anew_before_a_cancel() {
    let r = cancelling();
    let mut utils = vec![Some(0.0); 80];
    utils.extend(vec![Some(90.0); 20]);
    utils.extend(vec![Some(0.0); 80]);
    let job = job_with_gpus(vec![track("GPU 1", &utils)]);
    let (first, _) = plan(
        std::slice::from_ref(&r),
        &job_with_gpus(vec![track("GPU 1", &utils[..80])]),
        &[],
        80 * IV,
    );
    let past = vec![done(&first[0], 80 * IV)];
    let (p, _) = plan(std::slice::from_ref(&r), &job, &past, 180 * IV);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].action, ActionKind::Warned);
    assert!(p[0].finding.since_unix_ms > 80 * IV);
}

#[test]
fn three_failed_cancels_are_left_to_the_admins() {
    let r = cancelling();
    let job = idle_job();
    let (p, _) = plan(std::slice::from_ref(&r), &job, &[], 80 * IV);
    let mut past = vec![done(&p[0], 80 * IV)];
    let later = 80 * IV + 3_600_000;
    for _ in 0..3 {
        let (p, _) = plan(std::slice::from_ref(&r), &job, &past, later);
        assert_eq!(p[0].action, ActionKind::Cancelled);
        let mut failed = done(&p[0], later);
        failed.action = ActionKind::CancelFailed;
        past.push(failed);
    }
    let (p, s) = plan(std::slice::from_ref(&r), &job, &past, later);
    assert_eq!(p, vec![]);
    assert_eq!(s[0].why, "cancelling failed three times");
}

#[test]
fn validation_names_the_field() {
    assert!(cancelling().validate().is_ok());
    let e = Rule {
        cancel_partitions: vec![],
        ..cancelling()
    }
    .validate()
    .unwrap_err();
    assert!(e.contains("cancel_partitions"), "{e}");
    let e = Rule {
        name: "a b".into(),
        ..cancelling()
    }
    .validate()
    .unwrap_err();
    assert!(e.contains("name"), "{e}");
    let e = Rule {
        minutes: f64::NAN,
        ..cancelling()
    }
    .validate()
    .unwrap_err();
    assert!(e.contains("minutes"), "{e}");
}

/// A shared GPU is judged by the job's own share; a GPU without utilization (MIG) is idle only
/// while none of the job's processes is on it, and unknown otherwise.
#[test]
fn gpu_tracks_judge_the_jobs_own_share() {
    use crate::gpu::spool::{DeviceBucket, GpuBucket, GpuInfo, GpuSeries};
    use crate::gpu::{GpuDevice, GpuIdentity};
    use crate::spool::{Gauge, Header};
    let dev = |i: u32| GpuDevice {
        identity: GpuIdentity {
            index: Some(i),
            uuid: Some(format!("GPU-{i}")),
            ..Default::default()
        },
        ..Default::default()
    };
    let bucket = |t: u64| GpuBucket {
        t_first_ms: t,
        t_last_ms: t,
        n: 1,
        devices: vec![
            // Busy at 90 %, all of it another job's.
            DeviceBucket {
                slot: 0,
                samples: 1,
                util_gpu_pct: Some(Gauge::one(90)),
                job_util_gpu_pct: Some(Gauge::one(0)),
                other_processes: Some(Gauge::one(1)),
                ..Default::default()
            },
            // No utilization reported; none of the job's processes.
            DeviceBucket {
                slot: 1,
                samples: 1,
                job_processes: Some(Gauge::one(0)),
                ..Default::default()
            },
            // No utilization reported; one of the job's processes: unknown.
            DeviceBucket {
                slot: 2,
                samples: 1,
                job_processes: Some(Gauge::one(1)),
                ..Default::default()
            },
        ],
    };
    let series = GpuSeries {
        header: Header::new(7, "n1", "gpu", 0),
        info: Some(GpuInfo {
            t_ms: 0,
            backends: vec!["nvml".into()],
            selection_source: None,
            devices: vec![dev(0), dev(1), dev(2)],
            unresolved: vec![],
            notes: vec![],
        }),
        buckets: (1..=4).map(|k| bucket(k * IV)).collect(),
        events: vec![],
        end: None,
        torn: false,
        valid_bytes: 0,
    };
    let tracks = gpu_tracks(&series);
    assert_eq!(tracks.len(), 3);
    assert!(tracks[0].label.starts_with("GPU 0"));
    let utils = |t: &GpuTrack| t.intervals.iter().map(|i| i.util_pct).collect::<Vec<_>>();
    assert_eq!(utils(&tracks[0]), vec![Some(0.0); 4]);
    assert_eq!(utils(&tracks[1]), vec![Some(0.0); 4]);
    assert_eq!(utils(&tracks[2]), vec![None; 4]);
}
