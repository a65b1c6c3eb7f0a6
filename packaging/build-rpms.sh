#!/bin/bash
# jobscope's RPMs for EL8 and EL9 (packaging/rpm/jobscope.spec), built here on Debian and checked
# as far as a machine without EL can check them (docs/packaging.md, "RPMs for EL8 and EL9"):
#
#   packaging/build-rpms.sh [--slurm RELEASE]     # default 22.05: the plugin for Debian's headers
#   packaging/build-rpms.sh --srpm                # also the source RPM a site rebuilds on EL
#
# 0. The binaries (jobscope, jobscope-epilog, jobscope-kernel, the plugin) are built for glibc
#    2.28, EL8's: `cargo zigbuild --target x86_64-unknown-linux-gnu.2.28` (zig's glibc 2.28 stubs
#    instead of Debian's 2.36; cargo-zigbuild and zig from /opt/jobscope-zig, which
#    slurm-conf/install-deps.sh makes), in a target directory of their own beside the release build
#    the .debs and the cluster tests use, which stays as it is: $JOBSCOPE_EL8_CACHE (default
#    /var/cache/jobscope-el8)/target, outside the repository so that a fresh clone (CI) compiles
#    only the workspace's crates again, not their dependencies (emptied past 6 GiB;
#    target/el8-cache where /var/cache is not writable). The man pages and completions are the
#    release build's (target/release/jobscope-docs, made by packaging/build-debs.sh). Another SLURM
#    release's plugin is built the same way in .../slurm-RELEASE, from that release's headers
#    (24.11: slurm-conf/trixie/rootfs.sh's root filesystem; 26.05: slurm-conf/vm/image.sh's sid
#    image; any release: JOBSCOPE_RPM_SLURM_INCLUDE=DIR holding slurm/spank.h).
# 1. rpmbuild -bb with the spec's prebuilt mode (`jobscope_prebuilt`, `jobscope_src`; --nodeps:
#    Debian has no pkgconfig(slurm) RPM); the RPMs land in target/rpm/RPMS/x86_64/.
# 2. rpmlint, with packaging/rpm/jobscope.rpmlintrc (the deliberate findings, each with its
#    reason): no errors.
# 3. The file lists (paths, modes, %config(noreplace)) and the dependencies: the plugin requires
#    SchedMD's or OpenHPC's SLURM of its release; nothing needs a library outside EL8's and EL9's
#    base (glibc's libc, libm, libpthread, libdl, librt, libutil; libgcc_s, libelf, libz).
# 4. The scriptlets, in a throw-away root (rpm --root, a shell and a systemctl that logs its
#    arguments, no systemd): install presets the units, the directories are root's with the
#    .debs' modes, erase disables them, a changed config is kept as .rpmsave. Before the erase,
#    every installed ELF file's version needs (objdump -p): no GLIBC_ version above 2.28 (EL8's;
#    EL9 has 2.34), none private, each one defined by this host's newer glibc too; libelf's and
#    zlib's within EL8's (ELFUTILS_1.7, ZLIB_1.2.9).
# What needs EL itself (its SLURM packages, systemd, SELinux, dnf resolving the dependencies) is
# not checked here; docs/packaging.md says what was and was not.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
SPEC=$REPO/packaging/rpm/jobscope.spec
LINTRC=$REPO/packaging/rpm/jobscope.rpmlintrc
ZIGENV=${JOBSCOPE_ZIG_ENV:-/opt/jobscope-zig}
# The oldest glibc the binaries are linked for: EL8's (EL9 has 2.34). zlib and libelf: EL8's
# newest symbol versions (zlib 1.2.11, elfutils 0.174 and later).
EL_GLIBC=2.28
EL_ZLIB=1.2.9
EL_ELFUTILS=1.7
release=22.05
srpm=0

die() { echo "build-rpms: ERROR: $*" >&2; exit 1; }
log() { echo "build-rpms: $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --slurm) release=${2:-}; shift 2 ;;
    --srpm) srpm=1; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) die "unknown argument: $1" ;;
  esac
done
[[ "$release" =~ ^[0-9]+\.[0-9]{2}$ ]] || die "--slurm $release: not a SLURM release (22.05, 24.11 …)"
for t in rpmbuild rpmlint rpm strip objdump cargo; do
  command -v "$t" >/dev/null || die "$t is missing (slurm-conf/install-deps.sh installs rpm, rpmlint, binutils; cargo: rustup)"
done
[ -x "$ZIGENV/bin/cargo-zigbuild" ] || die "$ZIGENV/bin/cargo-zigbuild missing: slurm-conf/install-deps.sh installs it (zig and cargo-zigbuild from PyPI)"
[ -f "$TARGET/release/jobscope-docs/man/jobscope.1.gz" ] \
  || die "$TARGET/release/jobscope-docs/man/jobscope.1.gz missing: cargo build --release --workspace, then packaging/build-debs.sh (the man pages)"
# The SLURM headers the plugin is built against.
if [ -n "${JOBSCOPE_RPM_SLURM_INCLUDE:-}" ]; then
  slurm_inc=$JOBSCOPE_RPM_SLURM_INCLUDE
else
  case $release in
    22.05) slurm_inc=/usr/include ;;
    24.11) slurm_inc=$(bash "$REPO/slurm-conf/trixie/rootfs.sh" path)/usr/include ;;
    26.05) slurm_inc=$(bash "$REPO/slurm-conf/vm/image.sh" path sid)/rootfs/usr/include ;;
    *) die "--slurm $release: set JOBSCOPE_RPM_SLURM_INCLUDE to the directory holding its slurm/spank.h" ;;
  esac
fi
h=$slurm_inc/slurm/slurm_version.h
[ -f "$h" ] || die "$h missing (22.05: apt-get install libslurm-dev; 24.11: slurm-conf/trixie/rootfs.sh build; 26.05: slurm-conf/vm/image.sh build sid)"
slurm_num=$(awk '$2 == "SLURM_VERSION_NUMBER" { print $3 }' "$h")
[ "$(printf '%d.%02d' $(( slurm_num >> 16 )) $(( (slurm_num >> 8) & 0xff )))" = "$release" ] \
  || die "$h is not SLURM $release ($slurm_num)"

# 0. The binaries, linked against glibc 2.28 (cargo zigbuild). Every path the build sees (target
# directory, sysroot, linker) is the cache's, the same for every clone: cargo compiles everything
# again when the linker's path or the flags change.
cache=${JOBSCOPE_EL8_CACHE:-/var/cache/jobscope-el8}
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
  cache=$TARGET/el8-cache
  mkdir -p "$cache"
fi
if [ "$(du -sm "$cache" | cut -f1)" -gt 6144 ]; then
  log "$cache holds more than 6 GiB (the workspace's crates of many clones): emptied"
  rm -rf "${cache:?}"/*
fi
cmp -s "$REPO/packaging/rpm/zig-link.sh" "$cache/zig-link.sh" || install -m 0755 "$REPO/packaging/rpm/zig-link.sh" "$cache/zig-link.sh"
# el8_build DIR SLURM_INCLUDE PACKAGE...: in the target directory DIR, with a sysroot there holding
# only what zig's C library lacks: SLURM_INCLUDE/slurm (bindgen, plugin/build.rs), libelf's and
# zlib's headers (libbpf-sys compiles libbpf), and Debian's libelf.so and libz.so to link against
# (packaging/rpm/zig-link.sh).
el8_build() {
  local dir=$1 inc=$2; shift 2
  local sys=$dir/sysroot h
  mkdir -p "$sys/include" "$sys/lib"
  ln -sfn "$inc/slurm" "$sys/include/slurm"
  for h in libelf.h gelf.h nlist.h zlib.h zconf.h; do ln -sfn "/usr/include/$h" "$sys/include/$h"; done
  ln -sfn /usr/lib/x86_64-linux-gnu/libelf.so.1 "$sys/lib/libelf.so"
  ln -sfn /usr/lib/x86_64-linux-gnu/libz.so.1 "$sys/lib/libz.so"
  local t0=$SECONDS log=$dir/build.log
  log "cargo zigbuild --release --target x86_64-unknown-linux-gnu.$EL_GLIBC $* (in $dir)"
  # Debug information is left out (the spec strips the binaries): a shorter link.
  if ! PATH=$ZIGENV/bin:$PATH CARGO_TARGET_DIR=$dir CARGO_PROFILE_RELEASE_DEBUG=0 \
      JOBSCOPE_SLURM_INCLUDE="$sys/include" BINDGEN_EXTRA_CLANG_ARGS="-I$sys/include" \
      LIBBPF_SYS_EXTRA_CFLAGS="-I$sys/include" \
      CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-L native=$sys/lib" \
      CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER="$cache/zig-link.sh" \
      cargo zigbuild --release --locked --target "x86_64-unknown-linux-gnu.$EL_GLIBC" "$@" >"$log" 2>&1; then
    grep -v '^ *Compiling' "$log" | tail -40 >&2
    die "cargo zigbuild failed ($log)"
  fi
  log "built in $(( SECONDS - t0 )) s"
}
# The main target directory always builds the plugin too, against Debian's SLURM 22.05 headers
# (the same set of packages every time: no rebuild for another feature set).
el8_build "$cache/target" /usr/include -p jobscope-cli -p jobscope-epilog -p jobscope-kernel -p jobscope-plugin
bin=$cache/target/x86_64-unknown-linux-gnu/release
plugin_bin=$bin
if [ "$release" != 22.05 ]; then
  el8_build "$cache/slurm-$release" "$slurm_inc" -p jobscope-plugin
  plugin_bin=$cache/slurm-$release/x86_64-unknown-linux-gnu/release
fi

top=$TARGET/rpm
rm -rf "$top"
mkdir -p "$top"
# The spec reads the binaries and the documentation from one directory: a staging copy holds the
# glibc 2.28 binaries, the plugin for $release and the release build's man pages together.
stage=$top/stage
mkdir -p "$stage"
cp -a "$bin/jobscope" "$bin/jobscope-epilog" "$bin/jobscope-kernel" "$TARGET/release/jobscope-docs" "$stage/"
cp -a "$plugin_bin/libjobscope_spank.so" "$stage/"

# They are the packaged programs: they start here (glibc 2.36 runs what 2.28 linked), the
# collector is without its test-only `bench` feature, the plugin is not the fault-injection one
# and exports the version of the headers it was built against (slurmstepd loads only that).
for b in jobscope jobscope-epilog jobscope-kernel; do
  "$stage/$b" --version >/dev/null 2>&1 || "$stage/$b" --help >/dev/null 2>&1 || die "$stage/$b does not start here"
done
! "$stage/jobscope-kernel" bench --help >/dev/null 2>&1 || die "$stage/jobscope-kernel is built with the bench feature"
dynsyms=$(objdump -T "$stage/libjobscope_spank.so") || die "cannot read the dynamic symbols of the plugin"
! grep -qw jobscope_fault_injection <<<"$dynsyms" || die "the plugin is built with the fault-injection feature"
read -r pv_addr pv_sect < <(awk '$NF == "plugin_version" { print $1, $4 }' <<<"$dynsyms") || true
[ -n "${pv_addr:-}" ] || die "the plugin exports no plugin_version"
pv=$(objdump -s -j "$pv_sect" --start-address="0x$pv_addr" --stop-address="$(printf '0x%x' $(( 0x$pv_addr + 4 )))" \
  "$stage/libjobscope_spank.so" | awk '$1 ~ /^[0-9a-f]+$/ && length($2) == 8 {
    b = $2; print substr(b,7,2) substr(b,5,2) substr(b,3,2) substr(b,1,2); exit }')
[ -n "$pv" ] && [ "$(( 0x$pv ))" = "$(( slurm_num ))" ] || die "the plugin exports plugin_version 0x${pv:-?}, the headers say $slurm_num"
log "binaries: start here, no bench feature; the plugin exports plugin_version $(printf '0x%x' "$slurm_num") (SLURM $release)"

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
version_le() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" = "$2" ]; }

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
      ld-linux-x86-64.so.2*|libc.so.6*|libm.so.6*|libpthread.so.0*|libdl.so.2*|librt.so.1*|libutil.so.1*) ;;
      libgcc_s.so.1*|libelf.so.1*|libz.so.1*) ;;
      *) bad "$(basename "$p"): a dependency outside EL8's and EL9's base: $dep" ;;
    esac
  done < <(rpm -qp --requires "$p")
  # rpm's own reading of the version needs, of every glibc library (libm's exp@GLIBC_2.29 too).
  newest=$(rpm -qp --requires "$p" | sed -n 's/^[a-z0-9_-]*\.so\.[0-9]*(GLIBC_\([0-9.]*\)).*/\1/p' | sort -V | tail -1)
  if [ -z "$newest" ]; then
    bad "$(basename "$p"): no GLIBC_ version among its requirements"
  elif ! version_le "$newest" "$EL_GLIBC"; then
    bad "$(basename "$p") requires GLIBC_$newest, newer than EL8's $EL_GLIBC"
  fi
  log "$(basename "$p"): newest C library version required GLIBC_$newest (EL8 has $EL_GLIBC, EL9 2.34)"
done

# elf_check ROOT FILE...: each ELF file's version needs (objdump -p, "Version References": the
# library and the version of each) and the libraries it needs (NEEDED).
elf_check() {
  local root=$1 f p lib ver newest needs other sysdefs; shift
  for f in "$@"; do
    p=$root$f
    [ -f "$p" ] || { bad "$f: not installed"; continue; }
    needs=$(objdump -p "$p" | awk '/^Version References:/ { v = 1; next }
      v && /^$/ { exit }
      v && /required from/ { lib = $3; sub(/:$/, "", lib); next }
      v { print lib, $NF }')
    [ -n "$needs" ] || { bad "$f: no version needs read (objdump -p)"; continue; }
    newest=$(awk '$2 ~ /^GLIBC_[0-9]/ { sub(/^GLIBC_/, "", $2); print $2 }' <<<"$needs" | sort -V | tail -n 1)
    if [ -z "$newest" ]; then
      bad "$f: no GLIBC_ version needed (objdump -p)"
    elif ! version_le "$newest" "$EL_GLIBC"; then
      bad "$f needs GLIBC_$newest, newer than EL8's $EL_GLIBC: $(objdump -T "$p" | grep -F "(GLIBC_$newest)" | awk '{ print $NF }' | head -n 5 | tr '\n' ' ')"
    fi
    ! grep -q ' GLIBC_PRIVATE$' <<<"$needs" || bad "$f needs GLIBC_PRIVATE"
    # glibc keeps every version it once defined: this host's newer glibc (2.36, as EL9's 2.34)
    # must define each one needed.
    while read -r lib ver; do
      case "$ver" in
        GLIBC_*)
          sysdefs=$(objdump -p "/lib/x86_64-linux-gnu/$lib" 2>/dev/null | sed -n '/^Version definitions:/,/^$/p')
          grep -qw -- "$ver" <<<"$sysdefs" || bad "$f: $lib($ver) is not defined by this host's $lib" ;;
        ZLIB_*) version_le "${ver#ZLIB_}" "$EL_ZLIB" || bad "$f needs $ver, newer than EL8's zlib (ZLIB_$EL_ZLIB)" ;;
        ELFUTILS_*) version_le "${ver#ELFUTILS_}" "$EL_ELFUTILS" || bad "$f needs $ver, newer than EL8's libelf (ELFUTILS_$EL_ELFUTILS)" ;;
      esac
    done <<<"$needs"
    for lib in $(objdump -p "$p" | awk '$1 == "NEEDED" { print $2 }'); do
      case "$lib" in
        libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|libutil.so.1|ld-linux-x86-64.so.2) ;;
        libgcc_s.so.1|libelf.so.1|libz.so.1) ;;
        *) bad "$f needs $lib, not in EL8's and EL9's base" ;;
      esac
    done
    other=$(awk '$2 !~ /^GLIBC_/ { print $2 }' <<<"$needs" | sort -uV | tr '\n' ' ')
    log "$f: needs GLIBC_$newest (EL8 has $EL_GLIBC, EL9 2.34)${other:+; also ${other% }}; libraries $(objdump -p "$p" | awk '$1 == "NEEDED" { printf "%s%s", s, $2; s = " " }')"
  done
}

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
# The installed ELF files, as shipped (stripped): what their version needs name, which is what
# the dynamic loader checks before the program runs.
elf_check "$root" /usr/bin/jobscope /usr/sbin/jobscope-epilog /usr/sbin/jobscope-kernel /usr/lib64/slurm/jobscope_spank.so
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
