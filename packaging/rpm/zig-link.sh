#!/bin/sh
# The linker of the RPMs' binaries (packaging/build-rpms.sh): cargo-zigbuild's `zig cc` for
# x86_64-linux-gnu.2.28 (the path cargo-zigbuild puts in CC_x86_64_unknown_linux_gnu), with two
# changes to what rustc passes:
#
# - -Wl,--unresolved-symbols=ignore-all (plugin/build.rs, for the plugin's test binaries) is
#   dropped: zig's linker refuses it, and the plugin, a shared library, leaves slurmstepd's symbols
#   unresolved without it.
# - -Wl,--allow-shlib-undefined is added: Debian's libelf.so and libz.so are only the link-time
#   stand-ins of EL's (build-rpms.sh's sysroot/lib); their own needs on Debian's newer glibc are
#   not the binary's, and on EL its own libelf and libz are loaded.
set -eu
[ -n "${CC_x86_64_unknown_linux_gnu:-}" ] || { echo "zig-link.sh: run by cargo zigbuild only (CC_x86_64_unknown_linux_gnu unset)" >&2; exit 1; }
for a in "$@"; do
  shift
  [ "$a" = "-Wl,--unresolved-symbols=ignore-all" ] && continue
  set -- "$@" "$a"
done
exec "$CC_x86_64_unknown_linux_gnu" "$@" -Wl,--allow-shlib-undefined
