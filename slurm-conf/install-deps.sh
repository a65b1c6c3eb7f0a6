#!/bin/bash
# Install what the jobscope test cluster and the build need on Debian 12 (bookworm), as root:
# SLURM 22.05 (slurmctld, slurmd, client, headers), munge, libclang (bindgen for slurm-spank),
# mailutils, bc, python3, python3-aiosmtpd (the SMTP sink of the mail tests), chromium (the cluster
# report's browser test), lintian and cargo-deb
# (the .deb packages, packaging/build-debs.sh), postgresql (the
# server slurm-conf/postgres.sh runs for the PostgreSQL tests; Debian's own cluster is not started), a local MTA for the
# sendmail transport (exim4-daemon-light, configured "local delivery only" through a debconf
# preseed; skipped when another MTA already provides /usr/sbin/sendmail); zig and cargo-zigbuild in
# /opt/jobscope-zig (packaging/build-rpms.sh: the RPMs' binaries, linked for EL8's glibc 2.28); and
# create the test users alice and bob.
#
#   slurm-conf/install-deps.sh           # skips apt-get when everything is already installed
#   slurm-conf/install-deps.sh --force   # always apt-get update + install
#   slurm-conf/install-deps.sh --demo    # only what slurm-conf/demo.sh uses (DEMO_PKGS below):
#                                        # no lintian, cargo-deb, PostgreSQL, mmdebstrap, qemu,
#                                        # pyarrow, zig, MTA or chromium, which only the tests need
#
# Non-interactive, idempotent and quiet. Packages are installed with --no-install-recommends.
# Daemons are NOT started or enabled by the packages (a temporary policy-rc.d blocks that on
# hosts where none exists): slurm-conf/cluster.sh starts and stops them itself.
# Rust (cargo) is not installed here; it must already be on PATH (rustup).
set -euo pipefail

PKGS=(slurmctld slurmd slurm-client munge libslurm-dev slurm-wlm-basic-plugins-dev
      libclang-dev mailutils bc python3 python3-aiosmtpd
      clang libelf-dev zlib1g-dev pkg-config make  # the kernel collector's BPF programs (kernel/build.rs; libbpf-sys builds libbpf with make)
      binutils     # packaging/test-packages.sh reads the binaries' C library needs (objdump)
      postgresql   # the PostgreSQL sink's tests and demo: slurm-conf/postgres.sh starts its own server
      lintian      # packaging/build-debs.sh checks the .debs with it
      rpm rpmlint  # packaging/build-rpms.sh: the EL9 RPMs, built, linted and installed in a throw-away root
      mmdebstrap debian-archive-keyring  # the SLURM 24.11 root filesystem (slurm-conf/trixie/rootfs.sh)
      qemu-system-x86 e2fsprogs  # the cgroup v2 VM test cluster (slurm-conf/vm/: qemu, mkfs.ext4 -d)
      python3-venv  # /opt/jobscope-pyenv: pyarrow, to read back `jobscope audit --format parquet` in the tests
      chromium)     # the cluster report's browser test (admin/src/cluster/browser.rs), headless
# What the demo uses: the cluster, the build (bindgen's libclang, the BPF programs' clang and
# libelf) and the SMTP server that catches the report mail. The demo mails through SMTP, so no MTA.
DEMO_PKGS=(slurmctld slurmd slurm-client munge libslurm-dev slurm-wlm-basic-plugins-dev
           libclang-dev python3 python3-aiosmtpd clang libelf-dev zlib1g-dev pkg-config make)
TEST_USERS=(alice bob)
# The MTA behind `mail.transport = "sendmail"` in the mail tests. exim4 conflicts with every other
# MTA, so it is only installed where none is: apt must never swap out a host's own MTA.
MTA_PKG=exim4-daemon-light

die() { echo "install-deps: ERROR: $*" >&2; exit 1; }
log() { echo "install-deps: $*"; }

[ "$(id -u)" = 0 ] || die "must run as root"
[ -r /etc/debian_version ] || die "only Debian 12 (bookworm) is supported"

force=0 demo=0
for a in "$@"; do
  case "$a" in
    --force) force=1 ;;
    --demo) demo=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) die "unknown argument: $a (usage: $0 [--force] [--demo])" ;;
  esac
done
[ "$demo" = 1 ] && PKGS=("${DEMO_PKGS[@]}")

# A C toolchain is needed to link Rust crates; add it only when missing.
command -v cc >/dev/null 2>&1 || PKGS+=(gcc libc6-dev)

# Install exim4 only if nothing provides /usr/sbin/sendmail yet (or exim4 itself does).
if [ "$demo" = 1 ]; then
  :
elif [ -e /usr/sbin/sendmail ] && ! dpkg-query -S /usr/sbin/sendmail 2>/dev/null | grep -q '^exim4'; then
  owner=$(dpkg-query -S /usr/sbin/sendmail 2>/dev/null | cut -d: -f1 || true)
  log "/usr/sbin/sendmail is provided by ${owner:-something else}: not installing $MTA_PKG (the sendmail mail test needs local delivery to /var/mail/<user>)"
else
  PKGS+=("$MTA_PKG")
  # "local delivery only; not on a network": /usr/sbin/sendmail delivers straight into
  # /var/mail/<user> (mbox), no daemon needed and nothing leaves the host. Preseeded so the
  # install asks nothing; only takes effect when exim4-config is first configured.
  if command -v debconf-set-selections >/dev/null 2>&1; then
    debconf-set-selections <<PRESEED
exim4-config exim4/dc_eximconfig_configtype select local delivery only; not on a network
exim4-config exim4/dc_local_interfaces string 127.0.0.1 ; ::1
exim4-config exim4/dc_other_hostnames string
exim4-config exim4/dc_relay_nets string
exim4-config exim4/mailname string $(hostname -f 2>/dev/null || hostname)
exim4-config exim4/use_split_config boolean false
exim4-config exim4/dc_minimaldns boolean false
exim4-config exim4/dc_postmaster string root
PRESEED
  fi
fi

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$st" = installed ] || missing+=("$p")
done

if [ "$force" = 1 ] || [ "${#missing[@]}" -gt 0 ]; then
  [ "${#missing[@]}" -gt 0 ] && log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Keep the packages' maintainer scripts from starting slurmctld/slurmd/munged (systemd hosts):
  # exit code 101 = "action forbidden by policy". Only added if the host has no policy-rc.d.
  added_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# temporary, added by jobscope slurm-conf/install-deps.sh\nexit 101\n' \
      >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    added_policy=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  t0=$(date +%s)
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${PKGS[@]}" >/dev/null
  [ "$added_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  log "apt-get done in $(( $(date +%s) - t0 )) s"
else
  log "all packages already installed (use --force to re-run apt-get)"
fi

# The munge package normally creates the key; make sure one exists and is private.
if [ ! -s /etc/munge/munge.key ]; then
  log "creating /etc/munge/munge.key"
  install -d -m 0700 -o munge -g munge /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
fi

# cargo-deb builds the .deb packages (packaging/build-debs.sh); from crates.io, pinned by its lock file.
if [ "$demo" = 1 ]; then
  :
elif command -v cargo >/dev/null 2>&1 || [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
  cargo_bin=$(command -v cargo || echo "${CARGO_HOME:-$HOME/.cargo}/bin/cargo")
  if ! "$cargo_bin" deb --version >/dev/null 2>&1; then
    log "installing cargo-deb (cargo install --locked cargo-deb, a few minutes)"
    "$cargo_bin" install --locked --quiet cargo-deb || die "cargo install cargo-deb failed"
  fi
else
  log "cargo not found: cargo-deb not installed (packaging/build-debs.sh needs it)"
fi

# pyarrow (not packaged for bookworm) in a venv of its own, from PyPI: the audit cluster test reads
# `jobscope audit --format parquet` back with it (tests/cluster/tests/audit.rs).
PYENV=/opt/jobscope-pyenv
if [ "$demo" = 0 ] && ! "$PYENV/bin/python" -c 'import pyarrow' >/dev/null 2>&1; then
  log "creating $PYENV with pyarrow (pip, from PyPI)"
  python3 -m venv "$PYENV" || die "python3 -m venv $PYENV failed"
  "$PYENV/bin/pip" install --quiet --disable-pip-version-check 'pyarrow>=14' \
    || die "pip install pyarrow failed"
fi

# zig and cargo-zigbuild (PyPI wheels, pinned) in a venv of their own: packaging/build-rpms.sh links
# the RPMs' binaries against glibc 2.28 with them (`cargo zigbuild --target
# x86_64-unknown-linux-gnu.2.28`), so that one set of RPMs runs on EL8 and EL9 (docs/packaging.md).
ZIGENV=/opt/jobscope-zig
ZIG_PKGS=(cargo-zigbuild==0.24.1 ziglang==0.17.1)
if [ "$demo" = 0 ] && ! { [ -x "$ZIGENV/bin/cargo-zigbuild" ] \
     && [ "$("$ZIGENV/bin/pip" freeze --disable-pip-version-check 2>/dev/null | grep -ciE '^(cargo-zigbuild==0\.24\.1|ziglang==0\.17\.1)$')" = 2 ]; }; then
  log "creating $ZIGENV with ${ZIG_PKGS[*]} (pip, from PyPI)"
  python3 -m venv "$ZIGENV" || die "python3 -m venv $ZIGENV failed"
  "$ZIGENV/bin/pip" install --quiet --disable-pip-version-check "${ZIG_PKGS[@]}" \
    || die "pip install ${ZIG_PKGS[*]} failed"
fi

for u in "${TEST_USERS[@]}"; do
  if ! id "$u" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash "$u"
    log "created user $u"
  fi
  home=$(getent passwd "$u" | cut -d: -f6)
  if [ -n "$home" ] && [ ! -d "$home" ]; then
    install -d -m 0755 -o "$u" -g "$(id -gn "$u")" "$home"
  fi
done

exit 0
