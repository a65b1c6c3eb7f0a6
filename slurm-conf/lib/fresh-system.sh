# A fresh Debian 12 system of this machine's kind, for proofs that a README command works on a
# machine that never ran the project (bench/demo/fresh.sh: the demo; tests/fresh.sh: the test
# command): a new bookworm root filesystem (mmdebstrap, "important" packages plus a C compiler and
# git, as a fresh install with Rust has), this machine's Rust toolchain and nothing else of it (no
# crates downloaded, no apt packages of the project, no build), and a clone of the repository's
# HEAD. It runs on this host's kernel and loopback (chroot, shared network, cgroups and BPF): a
# cluster started in it would meet the host's. Sourced, not run; the sourcing script defines die and
# sets FRESH_ROOT (the root filesystem's directory, removed by fresh_cleanup).

. "$(dirname "${BASH_SOURCE[0]}")/debian-root.sh"

# the host's certificate authorities inside the fresh system, for cargo, pip and curl alike (its network may sit behind a TLS
# proxy with its own CA), in a file of their own that no package's trigger rewrites
FRESH_CA=/etc/fresh-system-host-ca.crt

fresh_umount() {
  mountpoint -q "$FRESH_ROOT/proc" 2>/dev/null || return 0
  umount -R "$FRESH_ROOT/proc" "$FRESH_ROOT/sys" "$FRESH_ROOT/dev" "$FRESH_ROOT/run" "$FRESH_ROOT/root/.rustup" 2>/dev/null || true
}

fresh_cleanup() { fresh_umount; rm -rf "$FRESH_ROOT"; }

# fresh_make REPO: the root filesystem, the toolchain and a clone of REPO's HEAD in /root/jobscope
fresh_make() {
  local repo=$1
  [ "$(id -u)" = 0 ] || die "must run as root"
  command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (slurm-conf/install-deps.sh installs it)"
  local rustup_dir=${RUSTUP_HOME:-$HOME/.rustup} cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
  [ -x "$cargo_bin/cargo" ] || die "no cargo in $cargo_bin"
  fresh_cleanup
  mkdir -p "$FRESH_ROOT"
  echo "fresh: a new Debian 12 root filesystem in $FRESH_ROOT"
  mmdebstrap --quiet --variant=important --include=ca-certificates,gcc,libc6-dev,git,procps \
    bookworm "$FRESH_ROOT" "$(host_mirror)"
  # what reaching the archive takes on this host (a snapshot mirror needs its date checks off)
  cp /etc/apt/apt.conf.d/99* "$FRESH_ROOT/etc/apt/apt.conf.d/" 2>/dev/null || true
  cp /etc/resolv.conf /etc/hosts "$FRESH_ROOT/etc/"
  cp /etc/ssl/certs/ca-certificates.crt "$FRESH_ROOT$FRESH_CA"
  # the Rust toolchain, read-only, and rustup's proxies; CARGO_HOME's registry starts empty. The
  # test command uses cargo-nextest where it is installed, as this machine's image has it.
  install -d "$FRESH_ROOT/root/.rustup" "$FRESH_ROOT/root/.cargo/bin"
  mount --bind -o ro "$rustup_dir" "$FRESH_ROOT/root/.rustup"
  cp -a "$cargo_bin"/{cargo,rustc,rustup} "$FRESH_ROOT/root/.cargo/bin/"
  local nextest; nextest=$(command -v cargo-nextest || true)
  [ -z "$nextest" ] || cp -a "$nextest" "$FRESH_ROOT/usr/local/bin/"
  git clone --quiet "$repo" "$FRESH_ROOT/root/jobscope"
  mount -t proc proc "$FRESH_ROOT/proc"
  mount --rbind /sys "$FRESH_ROOT/sys"; mount --make-rslave "$FRESH_ROOT/sys"
  mount --rbind /dev "$FRESH_ROOT/dev"; mount --make-rslave "$FRESH_ROOT/dev"
  mount -t tmpfs -o mode=0755 tmpfs "$FRESH_ROOT/run"
}

# fresh_run LOG COMMAND: COMMAND in /root/jobscope of the fresh system, with a clean environment,
# its output to LOG; returns COMMAND's status
fresh_run() {
  local log=$1; shift
  chroot "$FRESH_ROOT" /usr/bin/env -i HOME=/root TERM=dumb PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    RUSTUP_AUTO_INSTALL=0 SSL_CERT_FILE=$FRESH_CA CARGO_HTTP_CAINFO=$FRESH_CA PIP_CERT=$FRESH_CA REQUESTS_CA_BUNDLE=$FRESH_CA /bin/bash -c "cd /root/jobscope && $*" >"$log" 2>&1
}
