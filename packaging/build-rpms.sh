#!/bin/bash
# jobscope's RPMs for EL9 (packaging/rpm/jobscope.spec), built here on Debian from what
# `cargo build --release` built, and checked as far as a machine without EL can check them
# (docs/packaging.md, "RPMs for EL9"):
#
#   packaging/build-rpms.sh [--slurm RELEASE]     # default 22.05: the plugin built here
#   packaging/build-rpms.sh --srpm                # also the source RPM a site rebuilds on EL
#
# 1. rpmbuild -bb with the spec's prebuilt mode (`jobscope_prebuilt`, `jobscope_src`; --nodeps:
#    Debian has no pkgconfig(slurm) RPM); the RPMs land in target/rpm/RPMS/x86_64/.
# 2. rpmlint, with packaging/rpm/jobscope.rpmlintrc (the deliberate findings, each with its
#    reason): no errors.
# 3. The file lists (paths, modes, %config(noreplace)) and the dependencies: the plugin requires
#    SchedMD's or OpenHPC's SLURM of its release; nothing needs a C library newer than EL9's
#    (GLIBC 2.34) or a library outside EL9's base (libc, libm, libgcc_s, libelf, libz).
# 4. The scriptlets, in a throw-away root (rpm --root, a shell and a systemctl that logs its
#    arguments, no systemd): install presets the units, the directories are root's with the
#    .debs' modes, erase disables them, a changed config is kept as .rpmsave.
# What needs EL itself (its SLURM packages, systemd, SELinux, dnf resolving the dependencies) is
# not checked here; docs/packaging.md says what was and was not.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
SPEC=$REPO/packaging/rpm/jobscope.spec
LINTRC=$REPO/packaging/rpm/jobscope.rpmlintrc
release=22.05
srpm=0

die() { echo "build-rpms: ERROR: $*" >&2; exit 1; }
log() { echo "build-rpms: $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --slurm) release=${2:-}; shift 2 ;;
    --srpm) srpm=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) die "unknown argument: $1" ;;
  esac
done
[[ "$release" =~ ^[0-9]+\.[0-9]{2}$ ]] || die "--slurm $release: not a SLURM release (22.05, 24.11 …)"
for t in rpmbuild rpmlint rpm strip; do
  command -v "$t" >/dev/null || die "$t is missing (slurm-conf/install-deps.sh installs rpm, rpmlint, binutils)"
done
case $release in
  22.05) bin=$TARGET/release ;;
  *) bin=${JOBSCOPE_RPM_PLUGIN_DIR:-$TARGET/slurm-$release/release} ;;
esac
for f in jobscope jobscope-epilog jobscope-kernel libjobscope_spank.so jobscope-docs/man/jobscope.1.gz; do
  [ -f "$TARGET/release/$f" ] || die "$TARGET/release/$f missing: cargo build --release --workspace, then packaging/build-debs.sh (the man pages)"
done
[ -f "$bin/libjobscope_spank.so" ] || die "$bin/libjobscope_spank.so missing: the plugin for $release is built by packaging/build-debs.sh --slurm $release"

top=$TARGET/rpm
rm -rf "$top"
mkdir -p "$top"
# The main package's binaries are the build's; the plugin is the one built for $release (the
# spec reads both from one directory: a staging copy holds them together).
stage=$top/stage
mkdir -p "$stage"
cp -a "$TARGET/release/jobscope" "$TARGET/release/jobscope-epilog" "$TARGET/release/jobscope-kernel" \
  "$TARGET/release/jobscope-docs" "$stage/"
cp -a "$bin/libjobscope_spank.so" "$stage/"

log "rpmbuild (SLURM $release)"
rpmbuild -bb --nodeps --quiet --target x86_64 \
  --define "_topdir $top" \
  --define "jobscope_prebuilt $stage" \
  --define "jobscope_src $REPO" \
  --define "slurm_release $release" \
  "$SPEC" >"$top/rpmbuild.log" 2>&1 || { tail -30 "$top/rpmbuild.log" >&2; die "rpmbuild failed ($top/rpmbuild.log)"; }
main=$(ls "$top"/RPMS/x86_64/jobscope-0*.rpm)
plugin=$(ls "$top"/RPMS/x86_64/jobscope-spank-slurm"$release"-*.rpm)
log "built $(basename "$main") $(basename "$plugin")"

fail=0
bad() { echo "build-rpms: FAIL: $*" >&2; fail=1; }

# 2. rpmlint
lint=$(rpmlint -r "$LINTRC" "$main" "$plugin" 2>&1) || true
echo "$lint" | grep -E ': [EW]: ' || true
errors=$(echo "$lint" | sed -n 's/.* \([0-9]*\) errors,.*/\1/p' | tail -1)
[ "$errors" = 0 ] || bad "rpmlint: ${errors:-?} errors"
log "rpmlint: ${errors:-?} errors"

# 3. File lists: each path with its mode and file flags (c = %config, n = noreplace).
files() { rpm -qp --qf '[%{FILEMODES:perms} %{FILEFLAGS:fflags} %{FILENAMES}\n]' "$1" | grep -v '/usr/lib/.build-id'; }
expect() { # package-file "mode flags path"...
  local pkg=$1; shift
  local got; got=$(files "$pkg")
  for want in "$@"; do
    grep -qxF -- "$want" <<<"$got" || bad "$(basename "$pkg"): no '$want' in:
$got"
  done
}
expect "$plugin" \
  "-rwxr-xr-x  /usr/lib64/slurm/jobscope_spank.so" \
  "-rw-r--r-- cn /etc/slurm/plugstack.conf.d/jobscope.conf"
expect "$main" \
  "-rwxr-xr-x  /usr/bin/jobscope" \
  "-rwxr-xr-x  /usr/sbin/jobscope-epilog" \
  "-rwxr-xr-x  /usr/sbin/jobscope-kernel" \
  "-rw-r--r-- cn /etc/jobscope/jobscope.toml" \
  "-rw-r--r--  /usr/lib/systemd/system/jobscope-kernel.service" \
  "-rw-r--r--  /usr/lib/systemd/system/jobscope-reap.timer" \
  "-rw-r--r--  /usr/lib/systemd/system-preset/80-jobscope.preset" \
  "-rw-r--r-- d /usr/share/man/man1/jobscope.1.gz" \
  "-rw-r--r-- d /usr/share/man/man5/jobscope.toml.5.gz" \
  "-rw-r--r--  /usr/share/bash-completion/completions/jobscope" \
  "-rw-r--r-- d /usr/share/doc/jobscope/configuration.md" \
  "-rw-r--r--  /usr/share/jobscope/grafana/jobscope.json" \
  "drwx------  /var/spool/jobscope" \
  "drwx------  /var/spool/jobscope/mail" \
  "drwxr-xr-x  /var/lib/jobscope/archive" \
  "drwx------  /var/lib/jobscope/state" \
  "drwx------  /var/lib/jobscope/outbox" \
  "drwxr-x---  /var/log/jobscope"
units_here=$(cd "$REPO/packaging/systemd" && ls)
for u in $units_here; do
  files "$main" | grep -q " /usr/lib/systemd/system/$u\$" || bad "$(basename "$main"): no unit $u"
done
# Dependencies.
next=$(awk -F. '{printf "%s.%02d", $1, $2 + 1}' <<<"$release")
want_slurm="((slurm >= $release with slurm < $next) or (slurm-ohpc >= $release with slurm-ohpc < $next))"
rpm -qp --requires "$plugin" | grep -qxF "$want_slurm" || bad "plugin: no dependency $want_slurm"
for p in "$main" "$plugin"; do
  while read -r dep; do
    case "$dep" in
      /bin/sh|rtld\(GNU_HASH\)|rpmlib\(*|config\(jobscope*|"jobscope = "*|"$want_slurm") ;;
      ld-linux-x86-64.so.2*|libc.so.6*|libm.so.6*|libgcc_s.so.1*|libelf.so.1*|libz.so.1*) ;;
      *) bad "$(basename "$p"): a dependency outside EL9's base: $dep" ;;
    esac
  done < <(rpm -qp --requires "$p")
  newest=$(rpm -qp --requires "$p" | sed -n 's/^libc\.so\.6(GLIBC_\([0-9.]*\)).*/\1/p' | sort -V | tail -1)
  if [ "$(printf '%s\n2.34\n' "$newest" | sort -V | tail -1)" != 2.34 ]; then
    bad "$(basename "$p") needs GLIBC_$newest, newer than EL9's 2.34"
  fi
  log "$(basename "$p"): newest C library symbol GLIBC_$newest (EL9 has 2.34)"
done

# 4. Scriptlets in a throw-away root.
root=$top/root
mkdir -p "$root/bin" "$root/usr/bin" "$root/dev" "$root/tmp"
cp /bin/dash "$root/bin/sh"
for l in $(ldd /bin/dash | grep -o '/[^ ]*'); do
  mkdir -p "$root$(dirname "$l")"; cp "$l" "$root$l"
done
mknod -m 666 "$root/dev/null" c 1 3
cat >"$root/usr/bin/systemctl" <<'SYSTEMCTL'
#!/bin/sh
echo "$*" >> /tmp/systemctl.log
SYSTEMCTL
chmod 0755 "$root/usr/bin/systemctl"
rpm --root "$root" --initdb
rpm --root "$root" -i --nodeps "$main" "$plugin" 2>&1 | grep -v 'use Alien\|assuming you know' || true
rpm --root "$root" -q jobscope "jobscope-spank-slurm$release" >/dev/null || bad "not installed in the throw-away root"
grep -q '^--no-reload preset .*jobscope-reap.timer.*jobscope-kernel.service' "$root/tmp/systemctl.log" 2>/dev/null \
  || bad "install: the units were not preset ($(cat "$root/tmp/systemctl.log" 2>/dev/null))"
# The plugstack line stays commented out and names EL's plugin directory and its package.
plugstack=$(cat "$root/etc/slurm/plugstack.conf.d/jobscope.conf" 2>/dev/null || true)
grep -qx '#optional /usr/lib64/slurm/jobscope_spank.so' <<<"$plugstack" || bad "plugstack file: no commented-out EL line"
grep -q "jobscope-spank-slurm$release" <<<"$plugstack" || bad "plugstack file: does not name its package"
[ "$(stat -c '%a %U' "$root/var/spool/jobscope")" = "700 root" ] || bad "/var/spool/jobscope is $(stat -c '%a %U' "$root/var/spool/jobscope")"
verify=$(rpm --root "$root" -V --nodeps jobscope "jobscope-spank-slurm$release" 2>&1 | grep -v 'use Alien\|assuming you know' || true)
[ -z "$verify" ] || bad "rpm -V after install: $verify"
echo "# changed by the site" >> "$root/etc/jobscope/jobscope.toml"
rpm --root "$root" -e "jobscope-spank-slurm$release" jobscope 2>&1 | grep -v 'use Alien\|assuming you know' || true
grep -q '^--no-reload disable --now .*jobscope-kernel.service' "$root/tmp/systemctl.log" \
  || bad "erase: the units were not disabled ($(cat "$root/tmp/systemctl.log"))"
[ -f "$root/etc/jobscope/jobscope.toml.rpmsave" ] || bad "erase: the changed config was not kept as .rpmsave"
[ ! -e "$root/usr/bin/jobscope" ] || bad "erase: /usr/bin/jobscope is still there"
log "scriptlets: systemctl $(wc -l < "$root/tmp/systemctl.log") calls, all as expected; the changed config kept as .rpmsave"

[ "$fail" = 0 ] || die "the RPMs failed their checks (above)"

# 5. The source RPM a site rebuilds on its EL build host (`rpmbuild --rebuild`, docs/packaging.md).
if [ "$srpm" = 1 ]; then
  version=$(sed -n 's/^Version: *//p' "$SPEC")
  src=$top/src
  mkdir -p "$src" "$top/SOURCES"
  git -C "$REPO" archive --format=tar --prefix="jobscope-$version/" HEAD | tar -x -C "$src"
  (cd "$src/jobscope-$version" && cargo vendor --locked --offline --versioned-dirs vendor >/dev/null 2>"$top/vendor.log") \
    || die "cargo vendor failed ($top/vendor.log; every crate of Cargo.lock must be in cargo's cache: cargo fetch --locked)"
  tar -czf "$top/SOURCES/jobscope-$version.tar.gz" -C "$src" "jobscope-$version"
  rpmbuild -bs --nodeps --quiet --define "_topdir $top" --define "slurm_release $release" "$SPEC" \
    >>"$top/rpmbuild.log" 2>&1 || die "rpmbuild -bs failed ($top/rpmbuild.log)"
  srpm_file=$(ls "$top"/SRPMS/jobscope-"$version"-*.src.rpm)
  rpm -qp --requires "$srpm_file" | grep -qx 'pkgconfig(slurm)' || die "the source RPM does not require pkgconfig(slurm)"
  log "source RPM: $srpm_file ($(du -h "$srpm_file" | cut -f1); on EL: rpmbuild --rebuild $(basename "$srpm_file"))"
fi
log "OK: $(basename "$main"), $(basename "$plugin")"
