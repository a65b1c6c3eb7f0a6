#!/bin/bash
# Checks the installed jobscope packages on this host, as root (tests/run-all.sh runs it after
# `cluster.sh install --packages`):
#   1. both packages are installed and own the files docs/packaging.md lists;
#   2. the man pages render without groff warnings and name every subcommand;
#   3. the bash completion completes the subcommands and `mail`'s own;
#   4. postinst makes the directories with the owners and modes of docs/packaging.md on a fresh
#      node, and keeps the mode of one that exists (run in a private mount namespace on empty
#      tmpfs mounts, so this host's directories are never touched);
#   5. no shipped binary needs a newer C library than the oldest a supported distribution has
#      (the GLIBC versions its ELF version references name, `objdump -p`): 2.34, EL9's.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fail=1; }
[ "$(id -u)" = 0 ] || { echo "test-packages: run as root" >&2; exit 1; }

for f in /usr/bin/jobscope /usr/sbin/jobscope-epilog /etc/jobscope/jobscope.toml \
  /lib/systemd/system/jobscope-reap.timer /lib/systemd/system/jobscope-reap.service \
  /lib/systemd/system/jobscope-mail-flush.timer /lib/systemd/system/jobscope-mail-flush.service \
  /lib/systemd/system/jobscope-index.timer /lib/systemd/system/jobscope-index.service \
  /lib/systemd/system/jobscope-pg-sync.timer /lib/systemd/system/jobscope-pg-sync.service \
  /lib/systemd/system/jobscope-collector.service \
  /lib/systemd/system/jobscope-watch.service \
  /lib/systemd/system/jobscope-audit-report.timer /lib/systemd/system/jobscope-audit-report.service \
  /usr/share/man/man1/jobscope.1.gz /usr/share/man/man8/jobscope-epilog.8.gz \
  /usr/share/man/man8/jobscope-kernel.8.gz /usr/sbin/jobscope-kernel \
  /usr/share/man/man5/jobscope.toml.5.gz /usr/share/bash-completion/completions/jobscope \
  /usr/share/zsh/vendor-completions/_jobscope /usr/share/fish/vendor_completions.d/jobscope.fish \
  /usr/share/jobscope/grafana/jobscope.json; do
  o=$(dpkg -S "$f" 2>/dev/null | cut -d: -f1)
  [ "$o" = jobscope ] && ok "$f from jobscope" || bad "$f: owned by '${o:-nothing}', expected jobscope"
done
for f in /usr/lib/x86_64-linux-gnu/slurm-wlm/jobscope_spank.so /etc/slurm/plugstack.conf.d/jobscope.conf; do
  o=$(dpkg -S "$f" 2>/dev/null | cut -d: -f1)
  [ "$o" = jobscope-spank-slurm22.05 ] && ok "$f from jobscope-spank-slurm22.05" || bad "$f: owned by '${o:-nothing}'"
done
dpkg-query -W -f='${Conffiles}\n' jobscope | grep -q ' /etc/jobscope/jobscope.toml ' \
  && ok "jobscope.toml is a conffile" || bad "jobscope.toml is not a conffile"

for p in /usr/share/man/man1/jobscope.1.gz /usr/share/man/man8/jobscope-epilog.8.gz \
         /usr/share/man/man8/jobscope-kernel.8.gz /usr/share/man/man5/jobscope.toml.5.gz; do
  w=$(MANWIDTH=80 man --warnings -l "$p" 2>&1 >/dev/null)
  [ -z "$w" ] && ok "man -l $p: no warnings" || bad "man -l $p: $w"
done
page=$(MANWIDTH=200 man -l /usr/share/man/man1/jobscope.1.gz 2>/dev/null)
for sub in $(/usr/bin/jobscope --help | awk '/^Commands:/ { on = 1; next } on && NF { print $1 } !NF { on = 0 }' | grep -v '^help$'); do
  grep -q "jobscope $sub" <<<"$page" && ok "jobscope(1) documents '$sub'" || bad "jobscope(1) lacks '$sub'"
done

kpage=$(MANWIDTH=200 man -l /usr/share/man/man8/jobscope-kernel.8.gz 2>/dev/null)
for sub in run status; do
  grep -q "jobscope-kernel $sub" <<<"$kpage" && ok "jobscope-kernel(8) documents '$sub'" || bad "jobscope-kernel(8) lacks '$sub'"
done
for hidden in workload bench; do
  grep -q "jobscope-kernel $hidden" <<<"$kpage" && bad "jobscope-kernel(8) shows the hidden '$hidden'" || ok "jobscope-kernel(8) hides '$hidden'"
done
for sw in --syscalls --page-cache; do
  grep -q -- "$sw" <<<"$kpage" && ok "jobscope-kernel(8) documents $sw" || bad "jobscope-kernel(8) lacks $sw"
done

# The C library: the highest GLIBC version each binary's version references name (what the
# dynamic loader checks before the program runs), against the oldest glibc jobscope is built to
# run on: EL9's 2.34 (Debian 12 has 2.36). EL8 has 2.28: printed, not met by these (the RPMs'
# binaries are linked for it: packaging/build-rpms.sh, docs/packaging.md).
GLIBC_FLOOR=2.34
EL8_GLIBC=2.28
glibc_needs() { # file: the highest GLIBC_x.y in its version references, or nothing
  objdump -p "$1" 2>/dev/null | sed -n '/^Version References:/,/^$/p' \
    | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n 1
}
version_le() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" = "$2" ]; }
for f in /usr/bin/jobscope /usr/sbin/jobscope-epilog /usr/sbin/jobscope-kernel \
         /usr/lib/x86_64-linux-gnu/slurm-wlm/jobscope_spank.so; do
  need=$(glibc_needs "$f")
  if [ -z "$need" ]; then
    bad "$f: no GLIBC version references read (objdump -p)"
  elif version_le "$need" "$GLIBC_FLOOR"; then
    if version_le "$need" "$EL8_GLIBC"; then el8="EL8's $EL8_GLIBC too"; else el8="not EL8's $EL8_GLIBC"; fi
    ok "$f needs glibc $need: runs on $GLIBC_FLOOR (EL9), $el8"
  else
    syms=$(objdump -T "$f" 2>/dev/null | grep -F "(GLIBC_$need)" | awk '{ print $NF }' | head -n 5 | tr '\n' ' ')
    bad "$f needs glibc $need, newer than $GLIBC_FLOOR (EL9): $syms"
  fi
done

complete_words() { # words...: what bash completion offers after them
  bash -c 'source /usr/share/bash-completion/completions/jobscope
    COMP_WORDS=("$@" ""); COMP_CWORD=$#; COMP_LINE="$* "; COMP_POINT=${#COMP_LINE}
    _jobscope jobscope "" "${COMP_WORDS[COMP_CWORD-1]}"; printf "%s\n" "${COMPREPLY[@]}"' _ "$@"
}
c=$(complete_words jobscope)
for w in show reap mail archive; do
  grep -qx "$w" <<<"$c" && ok "bash completes 'jobscope $w'" || bad "bash does not complete 'jobscope $w' (got: $(echo $c))"
done
c=$(complete_words jobscope mail)
grep -qx flush <<<"$c" && ok "bash completes 'jobscope mail flush'" || bad "no 'flush' after 'jobscope mail' (got: $(echo $c))"

out=$(unshare -m bash -c '
  set -e
  for d in /var/lib /var/spool /var/log; do mount -t tmpfs none "$d"; done
  sh "$1" configure >/dev/null 2>&1 || true
  stat -c "%a %U:%G %n" /var/spool/jobscope /var/spool/jobscope/mail /var/lib/jobscope/archive /var/lib/jobscope/state /var/log/jobscope
  chmod 0711 /var/lib/jobscope/state
  sh "$1" configure 0.1.0-1 >/dev/null 2>&1 || true
  stat -c "upgrade %a %n" /var/lib/jobscope/state
' _ "$REPO/packaging/debian/jobscope/postinst")
expected="700 root:root /var/spool/jobscope
700 root:root /var/spool/jobscope/mail
755 root:root /var/lib/jobscope/archive
700 root:root /var/lib/jobscope/state
750 root:adm /var/log/jobscope
upgrade 711 /var/lib/jobscope/state"
[ "$out" = "$expected" ] && ok "postinst: directories, owners and modes; an existing mode kept" \
  || bad "postinst made:
$out
expected:
$expected"

# The timers the package enables (postinst: deb-systemd-helper enable, which makes the link
# below whether or not systemd runs; deb-systemd-helper itself only answers inside dpkg), and
# the ones it leaves to the admin.
wants=/etc/systemd/system/timers.target.wants
for t in jobscope-reap.timer jobscope-mail-flush.timer jobscope-audit-report.timer; do
  [ -L "$wants/$t" ] && ok "$t enabled" || bad "$t is not enabled ($wants/$t missing)"
done
for t in jobscope-index.timer jobscope-pg-sync.timer; do
  [ -L "$wants/$t" ] && bad "$t enabled by the package" || ok "$t left disabled"
done
# The collector runs on one service host only: the admin enables it there (docs/cluster.md).
[ -L /etc/systemd/system/multi-user.target.wants/jobscope-collector.service ] \
  && bad "jobscope-collector.service enabled by the package" || ok "jobscope-collector.service left disabled"
# Acting on running jobs is the site's decision (docs/watch.md).
[ -L /etc/systemd/system/multi-user.target.wants/jobscope-watch.service ] \
  && bad "jobscope-watch.service enabled by the package" || ok "jobscope-watch.service left disabled"
[ -d /var/lib/jobscope/outbox ] && [ "$(stat -c %a:%U /var/lib/jobscope/outbox)" = 700:root ] \
  && ok "/var/lib/jobscope/outbox 0700 root" || bad "/var/lib/jobscope/outbox missing or not 0700 root"
# The weekly report's service without audit.report_to: nothing mailed, success (its ExecStart,
# with a configuration of defaults).
exec_start=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/jobscope-audit-report.service)
cfgdir=$(mktemp -d)
: >"$cfgdir/jobscope.toml"
out=$(${exec_start/\/usr\/bin\/jobscope /\/usr\/bin\/jobscope --config $cfgdir\/jobscope.toml } 2>&1); rc=$?
rm -r "$cfgdir"
[ "$rc" = 0 ] && grep -q 'audit.report_to is not set' <<<"$out" \
  && ok "jobscope-audit-report.service without audit.report_to: nothing mailed, exit 0" \
  || bad "jobscope-audit-report.service without audit.report_to: exit $rc: $out"

[ "$fail" = 0 ] && echo "test-packages: all passed" || echo "test-packages: FAILED"
exit "$fail"
