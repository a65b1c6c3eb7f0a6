#!/bin/sh
# MailProg for the jobscope TEST cluster: sends nothing, logs one line per message.
# slurmctld runs it as SlurmUser with no PATH; args: -s "<subject>" <user>.
log=/var/log/slurm/mailprog.log
{
  printf '%s job=%s type=%s state=%s args:' "$(/bin/date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "${SLURM_JOB_ID:-?}" "${SLURM_JOB_MAIL_TYPE:-?}" "${SLURM_JOB_STATE:-?}"
  for a in "$@"; do printf ' [%s]' "$a"; done
  printf '\n'
} >>"$log" 2>/dev/null
exit 0
