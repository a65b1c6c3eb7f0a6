#!/bin/bash
# Builds (once per machine) a bootable Debian disk image holding SLURM + munge + systemd, for the
# jobscope VM test cluster (slurm-conf/vm/vm.sh): cgroup v2 under real SLURM, which this host
# cannot give (its controllers are bound to cgroup v1). Root only. Nothing here touches the host's
# own SLURM installation.
#
#   slurm-conf/vm/image.sh build SUITE [--force]   build it (no-op if the cached one is current)
#   slurm-conf/vm/image.sh path SUITE              print the cache directory of SUITE
#   slurm-conf/vm/image.sh info SUITE              stamp (SLURM version, kernel, build time) and sizes
#
# SUITE: trixie (Debian 13, SLURM 24.11) or sid (Debian unstable, SLURM 26.05 when measured).
#
# Where: $JOBSCOPE_VM_CACHE (default /var/cache/jobscope-vm)/SUITE/, outside the repository so CI
# builds it once per machine:
#   rootfs/        the root filesystem mmdebstrap made (kept: its /usr/include/slurm holds the
#                  headers a plugin for this release is built against)
#   disk.img       ext4 made from rootfs/ with mkfs.ext4 -d (vm.sh boots it with snapshot=on, so
#                  it never changes)
#   vmlinuz, initrd.img   the kernel and initramfs of the rootfs's linux-image-amd64
#   debs/          the .debs downloaded, reused by the next build (warm cache)
#   stamp          suite, package list and a hash of what is baked in; a different list or an edit
#                  of slurm-conf/vm/image/ rebuilds the image
# Mirror: the first Debian mirror URI of the host's apt configuration (/etc/apt/sources.list*),
# verified with the host's debian-archive-keyring, as slurm-conf/trixie/rootfs.sh does.
# CPU: mmdebstrap and mkfs run under nice -n 19 (CI machines have 2 cores and compile meanwhile).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_TOP=${JOBSCOPE_VM_CACHE:-/var/cache/jobscope-vm}
BAKED=$HERE/image          # copied over the rootfs as is (systemd units, the boot hook)
# linux-image-amd64 + systemd-sysv + udev + kmod: a bootable system (the initramfs holds the
# virtio drivers; kmod loads 9p and dummy); dbus: slurmd's cgroup/v2 plugin asks systemd over
# D-Bus for its slurmstepd scope; slurmctld/slurmd/slurm-client: the daemons and commands;
# libslurm-dev: the headers (rootfs/usr/include/slurm) the plugin is built against; munge: auth;
# procps, python3, iproute2 (dummy0), mawk, passwd (useradd): what the agent and the test jobs
# use; exim4-daemon-light: /usr/sbin/sendmail for `mail.transport = "sendmail"`, local delivery
# only as in slurm-conf/trixie/rootfs.sh; e2fsprogs: fsck of the root at boot; python3-aiosmtpd: the
# cluster tests' SMTP sink (tests/cluster/smtp/sink.py), as slurm-conf/install-deps.sh gives the host.
PACKAGES=linux-image-amd64,initramfs-tools,systemd-sysv,udev,kmod,mount,dbus,slurmctld,slurmd,slurm-client,libslurm-dev,munge,procps,python3,iproute2,mawk,passwd,e2fsprogs,exim4-daemon-light,python3-aiosmtpd
NODE=vm                    # the guest's hostname and SLURM NodeName
NODE_ADDR=192.0.2.10       # dummy0's address (jobscope-vm-hook); TEST-NET-1, routed nowhere
# test users, with the host's uids where it has them (files in the 9p share keep their numbers)
USERS="alice:1001 bob:1002"
DISK_SLACK_MB=1536         # free space in disk.img for jobs, logs, spool (the disk is snapshot=on)

log() { echo "vm-image: $*"; }
die() { echo "vm-image: ERROR: $*" >&2; exit 1; }
# EXIM_CONF, KEYRING, host_mirror, mounted_under
. "$HERE/../lib/debian-root.sh"

suite_ok() { case "$1" in trixie|sid) return 0 ;; *) die "unknown suite '$1' (trixie or sid)" ;; esac; }

baked_hash() { (cd "$BAKED" && find . -type f -print0 | sort -z | xargs -0 sha256sum; stat -c '%a %n' $(find . -type f | sort)) | sha256sum | cut -c1-16; }

# what customize.sh does is part of the stamp too: an edit of write_customize rebuilds the image
customize_hash() { declare -f write_customize | md5sum | cut -c1-12; }

stamp_text() {
  printf 'suite=%s\npackages=%s\nexim=%s\nbaked=%s\ncustomize=%s\nnode=%s %s\nusers=%s\n' "$1" "$PACKAGES" \
    "$(printf '%s' "$EXIM_CONF" | md5sum | cut -c1-12)" "$(baked_hash)" "$(customize_hash)" "$NODE" "$NODE_ADDR" "$USERS"
}

current() {
  local d=$CACHE_TOP/$1
  [ -f "$d/stamp" ] && [ -f "$d/disk.img" ] && [ -f "$d/vmlinuz" ] && [ -f "$d/initrd.img" ] \
    && [ "$(grep -E '^(suite|packages|exim|baked|customize|node|users)=' "$d/stamp")" = "$(stamp_text "$1")" ]
}

# customize: what the image needs beyond the packages (runs on the host, $1 = the rootfs)
write_customize() {
  local f=$1
  cat >"$f" <<EOS
#!/bin/sh
set -eu
R=\$1
echo $NODE >"\$R/etc/hostname"
cat >"\$R/etc/hosts" <<EOH
127.0.0.1 localhost
$NODE_ADDR $NODE
::1 localhost ip6-localhost ip6-loopback
EOH
: >"\$R/etc/fstab"
# the share's mount point; the SLURM and jobscope directories the test cluster uses
mkdir -p "\$R/mnt/jobscope" "\$R/usr/local/lib/slurm" "\$R/var/spool/jobscope" "\$R/var/lib/jobscope" \
  "\$R/var/log/jobscope" "\$R/etc/jobscope" "\$R/run/jobscope-vm"
for u in $USERS; do
  n=\${u%%:*}; id=\${u##*:}
  chroot "\$R" groupadd -g "\$id" "\$n"
  chroot "\$R" useradd -m -u "\$id" -g "\$id" -s /bin/bash "\$n"
done
# munge: one key per image (the package may have made one already)
if [ ! -s "\$R/etc/munge/munge.key" ]; then
  dd if=/dev/urandom of="\$R/etc/munge/munge.key" bs=1024 count=1 status=none
fi
chroot "\$R" chown munge:munge /etc/munge/munge.key
chmod 0400 "\$R/etc/munge/munge.key"
# daemons start when the agent says so (after it wrote slurm.conf), not at boot
chroot "\$R" systemctl disable munge.service slurmctld.service slurmd.service 2>/dev/null || true
chroot "\$R" systemctl enable jobscope-vm-hook.service
# no getty on the serial console (the console only logs); no login needed: the agent is root
chroot "\$R" systemctl mask serial-getty@ttyS0.service getty@tty1.service 2>/dev/null || true
# nothing should try a network
chroot "\$R" systemctl mask systemd-networkd-wait-online.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer 2>/dev/null || true
# what only costs boot time under emulation: the exim daemon (63 s at boot under TCG; sendmail
# delivers in a process of its own, no daemon needed), e2scrub, ldconfig at every boot (the disk
# is snapshot=on, so ConditionNeedsUpdate= holds at each boot; dpkg's trigger already ran it)
chroot "\$R" systemctl disable exim4.service 2>/dev/null || true
chroot "\$R" systemctl mask exim4.service e2scrub_reap.service e2scrub_all.timer ldconfig.service fstrim.timer man-db.timer 2>/dev/null || true
# An initrd with only what finds the root disk (virtio_blk, ext4 and what they need) instead of
# MODULES=most (40 MB, every storage driver): under emulation its unpacking and, with sid's
# default generator (dracut, replaced by initramfs-tools listed in PACKAGES), its udev and systemd
# in the initrd cost 10 to 30 s of every boot.
mkdir -p "\$R/etc/initramfs-tools/conf.d"
printf 'MODULES=list\nFSTYPE=ext4\n' >"\$R/etc/initramfs-tools/conf.d/jobscope-vm"
printf 'virtio_blk\next4\n' >>"\$R/etc/initramfs-tools/modules"
chroot "\$R" update-initramfs -u -k all
EOS
  chmod 0755 "$f"
}

cmd_build() {
  local suite=${1:-} force=0 mirror t0 t1 t2 tmp d size_mb kver
  suite_ok "$suite"; shift
  [ "${1:-}" = --force ] && force=1
  [ "$(id -u)" = 0 ] || die "must run as root"
  d=$CACHE_TOP/$suite
  if [ "$force" = 0 ] && current "$suite"; then
    log "cached image is current: $d"
    return 0
  fi
  install -d -m 0755 "$d"
  exec 9>"$d/.build.lock"
  flock -w 1800 9 || die "another build holds $d/.build.lock"
  if [ "$force" = 0 ] && current "$suite"; then log "built meanwhile by another process: $d"; return 0; fi
  if ! command -v mmdebstrap >/dev/null; then
    log "installing mmdebstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
  fi
  command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 missing (apt-get install e2fsprogs)"
  [ -s "$KEYRING" ] || die "$KEYRING missing (apt-get install debian-archive-keyring)"
  mirror=$(host_mirror)
  tmp=$d/rootfs.new
  if [ -e "$tmp" ]; then
    mounted_under "$tmp" && die "$tmp has mounts: unmount them first"
    rm -rf --one-file-system "$tmp"
  fi
  printf '%s\n' "$EXIM_CONF" >"$d/exim4.conf.conf"
  write_customize "$d/customize.sh"
  log "building $suite from $mirror into $tmp (packages: $PACKAGES)"
  t0=$(date +%s.%N)
  # --variant=apt: Essential packages + apt + the list; policy-rc.d (mmdebstrap's, while
  # installing) keeps the daemons from starting in the build chroot.
  # debs/: the downloaded .debs, kept between builds (a rebuild with a warm cache downloads only
  # what changed on the mirror); --skip=essential/unlink keeps the Essential set's there too.
  install -d -m 0755 "$d/debs"
  # sid's Release carries a Valid-Until a week ahead (trixie's, a stable release's, none): a mirror
  # that lags (a snapshot, a proxy) serves an "expired" sid Release, which apt refuses. The
  # signature is still checked; only the expiry is not.
  local aptopt=()
  [ "$suite" = sid ] && aptopt=(--aptopt='Acquire::Check-Valid-Until "false"')
  nice -n 19 mmdebstrap --mode=root --variant=apt --keyring="$KEYRING" --include="$PACKAGES" \
    "${aptopt[@]}" \
    --skip=essential/unlink \
    --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
    --setup-hook="sync-in $d/debs /var/cache/apt/archives/" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="upload $d/exim4.conf.conf /etc/exim4/update-exim4.conf.conf" \
    --customize-hook='chroot "$1" update-exim4.conf' \
    --customize-hook="sync-in $BAKED /" \
    --customize-hook="$d/customize.sh \"\$1\"" \
    --customize-hook="sync-out /var/cache/apt/archives $d/debs" \
    "$suite" "$tmp" "deb $mirror $suite main" \
    || die "mmdebstrap failed"
  t1=$(date +%s.%N)
  kver=$(basename "$(ls -1 "$tmp"/boot/vmlinuz-* | sort -V | tail -n1)"); kver=${kver#vmlinuz-}
  [ -f "$tmp/boot/initrd.img-$kver" ] || die "no initrd.img-$kver in $tmp/boot"
  {
    stamp_text "$suite"
    printf 'mirror=%s\nbuilt=%s\nmmdebstrap_s=%s\n' "$mirror" "$(date -u +%FT%TZ)" \
      "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')"
    printf 'slurm=%s\nkernel=%s\n' "$(chroot "$tmp" dpkg-query -W -f '${Version}' slurmd)" "$kver"
    printf 'slurm_version_number=%s\n' "$(awk '$2 == "SLURM_VERSION_NUMBER" { print $3 }' "$tmp/usr/include/slurm/slurm_version.h")"
  } >"$tmp/.jobscope-vm-stamp"
  # the disk: the rootfs plus DISK_SLACK_MB free (sparse file; snapshot=on at boot keeps it as is)
  size_mb=$(( $(du -sm --one-file-system "$tmp" | cut -f1) * 11 / 10 + DISK_SLACK_MB ))
  rm -f "$d/disk.img.new"
  truncate -s "${size_mb}M" "$d/disk.img.new"
  nice -n 19 mkfs.ext4 -q -F -L jobscope-vm -E root_owner=0:0 -d "$tmp" "$d/disk.img.new" \
    || die "mkfs.ext4 failed"
  t2=$(date +%s.%N)
  install -m 0644 "$tmp/boot/vmlinuz-$kver" "$d/vmlinuz.new"
  install -m 0644 "$tmp/boot/initrd.img-$kver" "$d/initrd.img.new"
  if [ -e "$d/rootfs" ]; then
    mounted_under "$d/rootfs" && die "$d/rootfs has mounts"
    rm -rf --one-file-system "$d/rootfs"
  fi
  mv "$tmp" "$d/rootfs"
  mv -f "$d/disk.img.new" "$d/disk.img"
  mv -f "$d/vmlinuz.new" "$d/vmlinuz"
  mv -f "$d/initrd.img.new" "$d/initrd.img"
  { cat "$d/rootfs/.jobscope-vm-stamp"
    printf 'mkfs_s=%s\ndisk_mb=%s\n' "$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }')" "$size_mb"
  } >"$d/stamp"
  rm -f "$d/customize.sh" "$d/exim4.conf.conf"
  log "done: $d (slurm $(grep '^slurm=' "$d/stamp" | cut -d= -f2), kernel $kver, mmdebstrap $(grep '^mmdebstrap_s=' "$d/stamp" | cut -d= -f2) s, mkfs $(grep '^mkfs_s=' "$d/stamp" | cut -d= -f2) s)"
}

cmd_info() {
  local suite=${1:-}; suite_ok "$suite"
  local d=$CACHE_TOP/$suite
  [ -f "$d/stamp" ] || die "no image at $d (run: $0 build $suite)"
  cat "$d/stamp"
  echo "rootfs_size=$(du -sh --one-file-system "$d/rootfs" | cut -f1)"
  echo "disk_allocated=$(du -sh "$d/disk.img" | cut -f1)"
  current "$suite" && echo "current=yes" || echo "current=no (rebuild: $0 build $suite)"
}

case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  path) suite_ok "${2:-}"; echo "$CACHE_TOP/$2" ;;
  info) cmd_info "${2:-}" ;;
  *) echo "usage: $0 build trixie|sid [--force] | path trixie|sid | info trixie|sid" >&2; exit 2 ;;
esac
