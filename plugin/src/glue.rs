//! The SPANK entry points. ALL SLURM-version-specific code lives in this file: the plugin version
//! constant below and the `slurm-spank` API. See docs/slurm-versions.md to build for a newer SLURM.

use crate::args::Args;
use crate::handover;
use crate::scope::{own_proc_cgroup, slurm_scope, Allocation};
use crate::steps::{JobCtx, StepRecorder};
use jobscope_config::{Config, MailPolicy, DEFAULT_CONFIG_PATH};
use jobscope_model::slurm::{cpulist_count, step_name, STEP_BATCH, STEP_EXTERN};
use jobscope_model::spool::Handover;
use jobscope_sampler::sampler::{spawn, stop_all, SamplerHandle, Stoppable};
use jobscope_sampler::scope::short_hostname;
use slurm_spank::{Context, Plugin, SpankHandle, SpankOption, SPANK_PLUGIN};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

// SLURM refuses a SPANK plugin whose major.minor differs from its own. plugin/build.rs writes
// `SPANK_PLUGIN!(b"jobscope", <SLURM_VERSION_NUMBER of the headers built against>, Jobscope)` and
// `BUILT_FOR_SLURM` (slurm-spank 0.2.2's macro wants a literal, so it is generated, not a const).
include!(concat!(env!("OUT_DIR"), "/spank_plugin.rs"));

/// How long `exit` waits, in all, for the sampler and the GPU monitor to write their end records
/// before leaving them behind: both are signalled first, then waited for against this one
/// deadline (the GPU monitor's last sample ends early enough before it, see its `signal_stop`).
const STOP_WAIT: Duration = Duration::from_secs(2);

/// Marks a plugin built with the `fault-injection` feature in its dynamic symbols (`nm -D`):
/// packaging/build-debs.sh refuses to package such a build, and plugin/tests/no_fault_injection.rs
/// checks that the default build has neither this mark nor the injected panics.
#[cfg(feature = "fault-injection")]
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static jobscope_fault_injection: u8 = 1;

#[derive(Default)]
pub struct Jobscope {
    args: Option<Args>,
    ctx: Option<JobCtx>,
    sampler: Option<SamplerHandle>,
    gpu: Option<jobscope_sampler::gpu::GpuMonitor>,
    step: Option<StepRecorder>,
    started: bool,
    /// This process's sampler writes the live snapshot (the extern step, or the batch step
    /// without one); its `exit` removes it.
    live_written: bool,
}

static PANIC_HOOK: Once = Once::new();

/// Panics must never reach the job's stderr: the default hook would print there.
fn install_panic_hook() {
    PANIC_HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            crate::log_error(&format!("internal error (caught): {info}"));
        }));
    });
}

/// Runs a callback body: a panic or an error is logged and swallowed, and the callback reports
/// success to SLURM, so jobscope can never fail, delay (beyond its own bounds) or kill a job.
fn guard(what: &str, f: impl FnOnce() -> Result<(), String>) {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => crate::log_error(&format!("{what}: {e}")),
        Err(_) => crate::log_error(&format!(
            "{what}: panicked (caught; the job is not affected)"
        )),
    }
}

impl Jobscope {
    fn args(&mut self, spank: &SpankHandle) -> &Args {
        if self.args.is_none() {
            let a = Args::parse(spank.plugin_argv().unwrap_or_default());
            for p in &a.problems {
                crate::log_error(p);
            }
            self.args = Some(a);
        }
        self.args.as_ref().expect("set above")
    }

    fn config(args: &Args) -> Config {
        // A file named on the plugstack line must exist (the log says so when it does not); the
        // default path may be absent. Either way the job runs, with the defaults if need be.
        let loaded = match &args.config {
            Some(p) => Config::load_named(p),
            None => Config::load(Path::new(DEFAULT_CONFIG_PATH)),
        };
        loaded.unwrap_or_else(|e| {
            crate::log_error(&format!("config: {e}; using defaults"));
            Config::default()
        })
    }

    /// Learns the job context in a remote (slurmstepd) context, once the step is in its cgroups.
    fn remote_ctx(&mut self, spank: &SpankHandle) -> Result<JobCtx, String> {
        if let Some(c) = &self.ctx {
            return Ok(c.clone());
        }
        let args = self.args(spank).clone();
        let cfg = Self::config(&args);
        let job_id = spank.job_id().map_err(|e| e.to_string())?;
        let step_id = spank.job_stepid().map_err(|e| e.to_string())?;
        let cgroup_root = args
            .cgroup_root
            .clone()
            .unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup"));
        let alloc_cores = spank
            .job_alloc_cores()
            .ok()
            .and_then(cpulist_count)
            .filter(|&n| n > 0);
        let alloc_mem_bytes = spank
            .job_alloc_mem()
            .ok()
            .filter(|&m| m > 0)
            .map(|mb| mb * 1024 * 1024);
        let scope = slurm_scope(
            own_proc_cgroup().as_deref(),
            &cgroup_root,
            job_id,
            Allocation {
                cores: alloc_cores,
                mem_bytes: alloc_mem_bytes,
            },
        );
        let ctx = JobCtx {
            job_id,
            step: step_name(step_id),
            uid: spank.job_uid().map_err(|e| e.to_string())?,
            gid: spank.job_gid().map_err(|e| e.to_string())?,
            scope,
            cfg,
            args,
        };
        self.ctx = Some(ctx.clone());
        Ok(ctx)
    }

    fn start_sampler(&mut self, ctx: &JobCtx, handover: Option<Handover>) -> Result<(), String> {
        // Threads may outlive `exit`'s bounded wait (a driver call that never returns): keep
        // the code they run mapped from now on.
        crate::resident::pin();
        let (mut sampler, schedule) = ctx.sampler(handover.clone())?;
        sampler.set_after_sample(ctx.live_snapshot());
        self.gpu = ctx.gpu_monitor(handover.as_ref(), schedule.clone());
        let h = spawn(sampler, schedule, Box::new(|m: &str| crate::log_error(m)))
            .map_err(|e| format!("cannot start sampler thread: {e}"))?;
        self.sampler = Some(h);
        self.live_written = true;
        Ok(())
    }

    /// The first `task_post_fork` of a step: slurmstepd has forked its task(s) and sits in the job's cgroups.
    fn on_task_post_fork(&mut self, spank: &SpankHandle) -> Result<(), String> {
        let r = self.on_first_task_post_fork(spank);
        // Every task of a batch or srun step, in the kernel collector's maps (crate::steps).
        if let (Some(step), Ok(pid)) = (self.step.as_mut(), spank.task_pid()) {
            step.tag_task(pid);
        }
        r
    }

    /// The first `task_post_fork` of a step: slurmstepd has forked its task(s) and sits in the job's cgroups.
    fn on_first_task_post_fork(&mut self, spank: &SpankHandle) -> Result<(), String> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let step_id = spank.job_stepid().map_err(|e| e.to_string())?;
        let ctx = self.remote_ctx(spank)?;
        if ctx.args.disabled {
            return Ok(());
        }
        if step_id == STEP_EXTERN {
            let h = handover::read(&ctx.handover_dir(), ctx.job_id, ctx.node());
            return self.start_sampler(&ctx, h);
        }
        let mut rec = StepRecorder::start(&ctx);
        rec.local_tasks = spank.job_local_task_count().unwrap_or(1).max(1);
        if step_id == STEP_BATCH {
            // argv[0] of the batch step is slurmd's copy of the script (plugin/src/script.rs).
            rec.script = spank
                .job_argv_os()
                .ok()
                .and_then(|a| a.first().map(std::path::PathBuf::from))
                .and_then(crate::script::ScriptHash::spawn);
        }
        self.step = Some(rec);
        // Contain off: no extern step, so the batch step samples the job for its whole life.
        let extern_present = ctx.cgroup().is_some_and(|c| c.step("step_extern").exists());
        if step_id == STEP_BATCH && !extern_present {
            let handover = Some(Handover {
                job_id: ctx.job_id,
                options: user_options(spank),
                gpus: spank.getenv("SLURM_JOB_GPUS").ok().flatten(),
                cuda_visible_devices: spank.getenv("CUDA_VISIBLE_DEVICES").ok().flatten(),
                gpu_device_ordinal: spank.getenv("GPU_DEVICE_ORDINAL").ok().flatten(),
                rocr_visible_devices: spank.getenv("ROCR_VISIBLE_DEVICES").ok().flatten(),
            });
            self.start_sampler(&ctx, handover)?;
        }
        Ok(())
    }
}

/// `[report] admin_comment`: the job's line into slurmctld's record before the batch step tells
/// it the script ended (crate::admin_comment). Bounded; whatever fails is logged.
fn admin_comment_at_batch_end(ctx: &JobCtx, batch_wait_status: Option<i32>) {
    use crate::admin_comment::{find_cli, write_at_batch_end, WAIT};
    let job = ctx.job_id;
    let Some(status) = batch_wait_status else {
        crate::log_error(&format!(
            "job {job}: AdminComment not written at the batch script's end: its exit status was not seen"
        ));
        return;
    };
    let root = ctx
        .args
        .cgroup_root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup"));
    // Pure v2 has the unified hierarchy at the root; the hybrid layout below it.
    let unified = if root.join("cgroup.controllers").exists() {
        root.clone()
    } else {
        root.join("unified")
    };
    let leave = crate::admin_comment::cgroups_to_leave(
        &own_proc_cgroup().unwrap_or_default(),
        &root,
        &unified,
    );
    let written = find_cli(&[&ctx.cfg.paths.cli]).and_then(|cli| {
        write_at_batch_end(&cli, ctx.args.config.as_deref(), job, status, &leave, WAIT)
    });
    match written {
        Ok((line, took)) => crate::log_notice(&format!(
            "job {job}: AdminComment written at the batch script's end in {} ms: {line}",
            took.as_millis()
        )),
        Err(e) => crate::log_error(&format!(
            "job {job}: AdminComment not written at the batch script's end: {e}"
        )),
    }
}

/// The user's `--jobscope-*` options, validated.
fn user_options(spank: &SpankHandle) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    if let Ok(Some(v)) = spank.get_option_value("jobscope-mail") {
        match MailPolicy::parse(&v) {
            Some(p) => {
                m.insert("mail".to_string(), p.as_str().to_string());
            }
            None => crate::log_error(&format!(
                "ignoring --jobscope-mail={v:?}: expected one of {:?}",
                MailPolicy::ALL.map(MailPolicy::as_str)
            )),
        }
    }
    m
}

unsafe impl Plugin for Jobscope {
    fn setup(&self, _spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        // Deliberately no tracing subscriber (slurm-spank's default): its writer takes locks that a
        // forked task child could inherit held. We log with spank_log directly.
        install_panic_hook();
        Ok(())
    }

    fn init(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        guard("init", || {
            // Options are registered in every context so srun/sbatch accept them and job_prolog sees them.
            let opt = SpankOption::new("jobscope-mail")
                .takes_value("when")
                .usage(&format!(
                    "jobscope: mail the efficiency report: {} (site default otherwise)",
                    MailPolicy::ALL.map(MailPolicy::as_str).join("|")
                ));
            spank.register_option(opt).map_err(|e| e.to_string())?;
            #[cfg(feature = "fault-injection")]
            if matches!(spank.context(), Ok(Context::Remote))
                && self.args(spank).injects("init_panic")
            {
                panic!("jobscope fault injection: init panic");
            }
            Ok(())
        });
        Ok(())
    }

    fn job_prolog(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        // Returning an error here would drain the node: always Ok.
        guard("job_prolog", || {
            let args = self.args(spank).clone();
            if args.disabled {
                return Ok(());
            }
            let cfg = Self::config(&args);
            let job_id = spank.job_id().map_err(|e| e.to_string())?;
            let node = std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| short_hostname());
            let h = Handover {
                job_id,
                options: user_options(spank),
                gpus: std::env::var("SLURM_JOB_GPUS").ok(),
                cuda_visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
                gpu_device_ordinal: std::env::var("GPU_DEVICE_ORDINAL").ok(),
                rocr_visible_devices: std::env::var("ROCR_VISIBLE_DEVICES").ok(),
            };
            let dir = args.handover_dir.clone().unwrap_or(cfg.paths.handover_dir);
            handover::write(&dir, &node, &h).map(|_| ())
        });
        Ok(())
    }

    fn task_post_fork(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        guard("task_post_fork", || self.on_task_post_fork(spank));
        Ok(())
    }

    fn task_exit(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        guard("task_exit", || {
            if let (Some(step), Ok(status)) = (self.step.as_mut(), spank.task_exit_status()) {
                step.task_exited(status);
            }
            Ok(())
        });
        Ok(())
    }

    fn exit(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        guard("exit", || {
            if !matches!(spank.context(), Ok(Context::Remote)) {
                return Ok(());
            }
            #[cfg(feature = "fault-injection")]
            if let Some(args) = &self.args {
                if args.injects("exit_panic") {
                    panic!("jobscope fault injection: exit panic");
                }
            }
            // Steps first: their exit still sees the job cgroup (final counters).
            if let Some(step) = self.step.as_mut() {
                step.exit();
            }
            // One bound for both: signal each, then wait once.
            let deadline = Instant::now() + STOP_WAIT;
            let mut names = Vec::new();
            let mut threads: Vec<Box<dyn Stoppable>> = Vec::new();
            if let Some(h) = self.sampler.take() {
                names.push("sampler");
                threads.push(Box::new(h));
            }
            if let Some(g) = self.gpu.take() {
                names.push("GPU monitor");
                threads.push(Box::new(g));
            }
            for (name, stopped) in names.iter().zip(stop_all(threads, deadline)) {
                if !stopped {
                    crate::log_error(&format!("{name} did not stop in time; left behind"));
                }
            }
            if let Some(ctx) = &self.ctx {
                if ctx.step == "extern" {
                    handover::remove(&ctx.handover_dir(), ctx.job_id, ctx.node());
                }
                // The sampler has stopped: the live view of this node ends with the job here.
                if self.live_written {
                    ctx.remove_live_snapshot();
                }
                // Last: every record of this node is written, and the job still runs.
                if ctx.step == "batch" && ctx.cfg.report.admin_comment && !ctx.args.disabled {
                    let status = self.step.as_ref().and_then(|s| s.exit_status);
                    admin_comment_at_batch_end(ctx, status);
                }
            }
            Ok(())
        });
        Ok(())
    }
}
