#!/bin/bash
# Times the README's demo command on a fresh Debian 12 system of this machine's kind, as a
# newcomer would run it: a new bookworm root filesystem (mmdebstrap, "important" packages plus a C
# compiler and git, as a fresh install with Rust has), this machine's Rust toolchain and nothing
# else of it (no crates downloaded, no apt packages of the demo, no build), a clone of this
# repository's HEAD, then `slurm-conf/demo.sh --down` in it, timed: apt, crate downloads, build,
# cluster, job, report, mail, audit and cluster report.
#
#   sudo bench/demo/fresh.sh [WORKDIR]     (default /var/tmp/jobscope-demo-fresh; removed after)
#
# The demo's cluster runs on this host's kernel and loopback (chroot, shared network and cgroups),
# so no other jobscope test cluster may be up. Prints the demo's own step times and the total.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=${1:-/var/tmp/jobscope-demo-fresh}
ROOT=$WORK/root
die() { echo "demo-fresh: ERROR: $*" >&2; exit 1; }
. "$REPO/slurm-conf/lib/debian-root.sh"

[ "$(id -u)" = 0 ] || die "must run as root"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (slurm-conf/install-deps.sh installs it)"
! (exec 3<>/dev/tcp/127.0.0.1/6817) 2>/dev/null || die "something listens on 6817: stop the test cluster first (slurm-conf/cluster.sh down)"
RUSTUP_DIR=${RUSTUP_HOME:-$HOME/.rustup}
CARGO_BIN=${CARGO_HOME:-$HOME/.cargo}/bin
[ -x "$CARGO_BIN/cargo" ] || die "no cargo in $CARGO_BIN"

umount_all() { mountpoint -q "$ROOT/proc" 2>/dev/null || return 0; umount -R "$ROOT/proc" "$ROOT/sys" "$ROOT/dev" "$ROOT/run" "$ROOT/root/.rustup" 2>/dev/null || true; }
cleanup() { umount_all; rm -rf "$WORK"; }
trap cleanup EXIT
rm -rf "$WORK"; mkdir -p "$WORK"

echo "demo-fresh: a new Debian 12 root filesystem in $ROOT"
mmdebstrap --quiet --variant=important --include=ca-certificates,gcc,libc6-dev,git,procps \
  bookworm "$ROOT" "$(host_mirror)"
# what reaching the archive takes on this host (a snapshot mirror needs its date checks off)
cp /etc/apt/apt.conf.d/99* "$ROOT/etc/apt/apt.conf.d/" 2>/dev/null || true
cp /etc/resolv.conf /etc/hosts "$ROOT/etc/"
# and this host's certificate authorities (its network may sit behind a TLS proxy with its own CA),
# in a file of their own that no package's trigger rewrites, named as this host's environment does
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/demo-fresh-host-ca.crt"
CA=/etc/demo-fresh-host-ca.crt
# the Rust toolchain, read-only, and rustup's proxies; CARGO_HOME's registry starts empty
install -d "$ROOT/root/.rustup" "$ROOT/root/.cargo/bin"
mount --bind -o ro "$RUSTUP_DIR" "$ROOT/root/.rustup"
cp -a "$CARGO_BIN"/{cargo,rustc,rustup} "$ROOT/root/.cargo/bin/"
git clone --quiet "$REPO" "$ROOT/root/jobscope"
mount -t proc proc "$ROOT/proc"
mount --rbind /sys "$ROOT/sys"; mount --make-rslave "$ROOT/sys"
mount --rbind /dev "$ROOT/dev"; mount --make-rslave "$ROOT/dev"
mount -t tmpfs -o mode=0755 tmpfs "$ROOT/run"

echo "demo-fresh: slurm-conf/demo.sh --down in the fresh system (clone of $(git -C "$REPO" rev-parse --short HEAD))"
t0=$(date +%s)
rc=0
chroot "$ROOT" /usr/bin/env -i HOME=/root TERM=dumb PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  RUSTUP_AUTO_INSTALL=0 SSL_CERT_FILE=$CA CARGO_HTTP_CAINFO=$CA /bin/bash -c 'cd /root/jobscope && slurm-conf/demo.sh --down' >"$WORK.log" 2>&1 || rc=$?
t1=$(date +%s)
grep -E '^==> \[' "$WORK.log" || true
if [ "$rc" != 0 ]; then
  tail -30 "$WORK.log"
  die "the demo failed (exit $rc); its output: $WORK.log"
fi
echo "demo-fresh: the demo took $((t1 - t0)) s on a fresh system ($(nproc) CPUs); its output: $WORK.log"
