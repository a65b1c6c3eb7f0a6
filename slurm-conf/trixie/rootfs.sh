#!/bin/bash
# Builds (once per machine) a Debian 13 "trixie" root filesystem holding SLURM 24.11 + munge,
# so the jobscope test cluster can run the 24.11 daemons from it on this Debian 12 host
# (slurm-conf/trixie/cluster.sh). Root only; loopback only; nothing here touches the host's
# own SLURM 22.05 installation.
#
#   slurm-conf/trixie/rootfs.sh build [--force]   build it (no-op if the cached one is current)
#   slurm-conf/trixie/rootfs.sh path              print the rootfs directory
#   slurm-conf/trixie/rootfs.sh info              SLURM version, size, build time of the cached rootfs
#
# Where: $JOBSCOPE_TRIXIE_CACHE (default /var/cache/jobscope-trixie)/rootfs, outside the repository
# so CI builds it once per machine. A stamp file records the package list it was built with; a
# different list (an edit of PACKAGES below) rebuilds it.
# Mirror: the first Debian mirror URI of the host's apt configuration (/etc/apt/sources.list*),
# with suite trixie, verified with the host's debian-archive-keyring (which holds the trixie keys).
set -euo pipefail

CACHE=${JOBSCOPE_TRIXIE_CACHE:-/var/cache/jobscope-trixie}
ROOT=$CACHE/rootfs
STAMP=$ROOT/.jobscope-rootfs-stamp
SUITE=trixie
# slurmctld/slurmd/slurm-client: the daemons and commands; libslurm-dev: the 24.11 headers the
# plugin is built against (plugin/build.rs reads them from $ROOT/usr/include); munge: libmunge for
# auth/munge (the host's munged serves both releases through the bind-mounted /run/munge);
# python3: the test jobs run inside the rootfs (slurmstepd does), and the cluster tests' job
# scripts use python3 as on the host (slurm-conf/install-deps.sh installs it there);
# exim4-daemon-light: /usr/sbin/sendmail for `mail.transport = "sendmail"`, which the Epilog runs
# inside the rootfs (slurmd does), configured "local delivery only" like the host's
# (slurm-conf/install-deps.sh), delivering into the /var/mail the cluster shares with the host;
# libelf1t64: the jobscope package's jobscope-kernel links libelf (its Depends says libelf1, which
# trixie's libelf1t64 provides). A site's apt fetches it; apt inside this rootfs has no archive to
# fetch from, so it is here from the start, as a Debian 13 system with iproute2 already has it.
PACKAGES=slurmctld,slurmd,slurm-client,libslurm-dev,munge,procps,python3,exim4-daemon-light,libelf1t64

log() { echo "trixie-rootfs: $*"; }
die() { echo "trixie-rootfs: ERROR: $*" >&2; exit 1; }
# EXIM_CONF, KEYRING, host_mirror, mounted_under
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd)/debian-root.sh"

# the exim settings are part of what the stamp records: an edit rebuilds the rootfs
stamp_text() { printf 'suite=%s\npackages=%s\nexim=%s\n' "$SUITE" "$PACKAGES" "$(printf '%s' "$EXIM_CONF" | md5sum | cut -c1-12)"; }

current() { [ -f "$STAMP" ] && [ "$(grep -E '^(suite|packages|exim)=' "$STAMP")" = "$(stamp_text)" ]; }

cmd_build() {
  local force=0 mirror t0 t1 tmp
  [ "${1:-}" = --force ] && force=1
  [ "$(id -u)" = 0 ] || die "must run as root"
  if [ "$force" = 0 ] && current; then
    log "cached rootfs is current: $ROOT"
    return 0
  fi
  # one builder at a time (CI jobs on one machine)
  install -d -m 0755 "$CACHE"
  exec 9>"$CACHE/.build.lock"
  flock -w 1800 9 || die "another build holds $CACHE/.build.lock"
  if [ "$force" = 0 ] && current; then log "built meanwhile by another process: $ROOT"; return 0; fi
  if ! command -v mmdebstrap >/dev/null; then
    log "installing mmdebstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
  fi
  [ -s "$KEYRING" ] || die "$KEYRING missing (apt-get install debian-archive-keyring)"
  mirror=$(host_mirror)
  tmp=$CACHE/rootfs.new
  # never follow anything in a half-built tree: it is ours, remove it whole
  if [ -e "$tmp" ]; then
    mounted_under "$tmp" && die "$tmp has mounts: unmount them first"
    rm -rf --one-file-system "$tmp"
  fi
  printf '%s\n' "$EXIM_CONF" >"$CACHE/exim4.conf.conf"
  log "building $SUITE from $mirror into $tmp (packages: $PACKAGES)"
  t0=$(date +%s.%N)
  # minbase + apt; policy-rc.d (set by mmdebstrap while installing) keeps the daemons from starting.
  mmdebstrap --mode=root --variant=apt --keyring="$KEYRING" --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook="upload $CACHE/exim4.conf.conf /etc/exim4/update-exim4.conf.conf" \
    --customize-hook='chroot "$1" update-exim4.conf' \
    "$SUITE" "$tmp" "deb $mirror $SUITE main" \
    || die "mmdebstrap failed"
  t1=$(date +%s.%N)
  # mount points the cluster script bind-mounts host directories onto
  install -d -m 0755 "$tmp/usr/local/lib/slurm" "$tmp/var/spool/jobscope" "$tmp/var/lib/jobscope" \
    "$tmp/var/log/jobscope" "$tmp/etc/jobscope" "$tmp/var/lib/slurm" "$tmp/var/log/slurm"
  {
    stamp_text
    printf 'mirror=%s\nbuilt=%s\nbuild_s=%s\n' "$mirror" "$(date -u +%FT%TZ)" \
      "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')"
    printf 'slurm=%s\n' "$(chroot "$tmp" dpkg-query -W -f '${Version}' slurmd)"
  } >"$tmp/.jobscope-rootfs-stamp"
  if [ -e "$ROOT" ]; then
    # The cluster bind-mounts host directories (/home, /tmp, /etc/slurm…) under $ROOT, from the
    # same filesystem, which rm --one-file-system would NOT stop at: refuse while any mount is there.
    mounted_under "$ROOT" && die "$ROOT has mounts (cluster up?): run slurm-conf/trixie/cluster.sh down first"
    rm -rf --one-file-system "$ROOT"
  fi
  mv "$tmp" "$ROOT"
  log "done: $ROOT ($(du -sh --one-file-system "$ROOT" | cut -f1), $(grep '^build_s=' "$STAMP" | cut -d= -f2) s, slurm $(grep '^slurm=' "$STAMP" | cut -d= -f2))"
}

cmd_info() {
  [ -f "$STAMP" ] || die "no rootfs at $ROOT (run: $0 build)"
  cat "$STAMP"
  echo "size=$(du -sh --one-file-system "$ROOT" | cut -f1)"
}

case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  path) echo "$ROOT" ;;
  info) cmd_info ;;
  *) echo "usage: $0 build [--force] | path | info" >&2; exit 2 ;;
esac
