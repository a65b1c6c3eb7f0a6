# The cluster test suites per configuration (sourced by tests/run-all.sh and slurm-conf/vm/run-suite.sh;
# README "Supported configurations" says the same in words). 22.05 on cgroup v1 (the host) runs every
# cluster test; the other configurations run the CORE set, and each adds what it alone shows:
#
#   CORE           every end state a 1-node cluster gives without waiting for a requeue (COMPLETED,
#                  FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY), CPU, memory peak, I/O and OOM kills
#                  counted to the job's last moment against the kernel's own counters in the job's
#                  cgroup, one GPU test with the fake NVML, mail through a real SMTP server matching
#                  the archive, the archive's permissions, the audit
#   HOST_2411      24.11 on cgroup v1 (the trixie rootfs on the host): CORE, preemption, a multi-step
#                  job, an array's digest, the live view, the fault-injection plugin, the AdminComment
#                  line (slurmctld's refusal to update an ended job; also in VM_SID for 26.05)
#   VM_TRIXIE      24.11 on cgroup v2 (VM, SLURM's default controllers: I/O per process): CORE,
#                  `jobscope run` in delegated scopes and in a process tree
#   VM_SID         26.05 on cgroup v2 (VM, SLUID job directories, io.stat): CORE, the AdminComment
#                  line, a multi-step job
#                  (`jobscope run` does not depend on the SLURM release: once, in VM_TRIXIE), the
#                  kernel view (the packaged collector under systemd, with system-call counting
#                  turned on by a drop-in as docs/kernel.md tells a site; its BPF programs on a
#                  guest kernel that is not the host's; tasks in cgroup v2 job directories)
#
# Why not more: the VM runs under software emulation on CI's 2 cores, where a test takes 10-20 times
# as long as on the host (README, "Supported configurations", has the measured times), and the whole
# run must stay within 60 minutes.
# shellcheck shell=bash disable=SC2034
CORE='
a_nonzero_exit_is_failed
a_job_cancelled_while_running_is_cancelled_with_its_figures
timeout_job_states_why_it_ended
oom_job_states_why_it_ended
cpu_and_memory_match_the_kernel_counters
late_writes_by_short_processes_are_counted
late_memory_peak_is_counted
late_oom_kill_is_counted
gpu_utilization_is_attributed_by_device_identity
smtp_mail_matches_the_archived_report
only_the_owner_reads_her_copy_and_cannot_alter_it
audit_figures_equal_the_archive_and_users_see_only_their_own
'
HOST_2411="$CORE
a_preempted_job_is_preempted
per_step_breakdown_matches_each_steps_own_accounting
array_gets_one_digest_and_no_task_mails
live_show_of_a_running_job_grows_and_only_its_owner_sees_it
panics_in_sampler_init_and_exit_harm_nothing
the_admin_comment_carries_the_verdict_into_slurmctld_and_the_archive
"
VM_TRIXIE="$CORE
v2_jobscope_run_in_a_delegated_scope_counts_what_the_kernel_counts
a_user_without_a_cgroup_is_followed_through_the_process_tree
"
VM_SID="$CORE
the_admin_comment_carries_the_verdict_into_slurmctld_and_the_archive
per_step_breakdown_matches_each_steps_own_accounting
kernel_view_counts_one_byte_reads_and_writes_exactly
kernel_view_sees_four_busy_processes_wait_on_one_core
kernel_view_counts_a_loopback_transfer_and_direct_io_exactly
"

# suite_filter LIST: a nextest filter expression naming exactly those tests, among the cluster tests
# and `jobscope run`'s own (cli/tests/run_cmd.rs).
suite_filter() {
  local t e=
  for t in $1; do e+="${e:+ | }test(=$t)"; done
  echo "(package(jobscope-cluster-tests) | (package(jobscope-cli) & binary(run_cmd))) & ($e)"
}
