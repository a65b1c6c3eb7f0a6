# What the Debian root filesystems of the test clusters share (slurm-conf/trixie/rootfs.sh for the
# 24.11 chroot, slurm-conf/vm/image.sh for the VM images). Sourced, not run; the sourcing script
# defines die.

# exim4-config's settings: local delivery only into /var/mail, listening nowhere. Both scripts hash
# this text into their stamps: an edit rebuilds their root filesystems.
EXIM_CONF="dc_eximconfig_configtype='local'
dc_other_hostnames=''
dc_local_interfaces='127.0.0.1 ; ::1'
dc_readhost=''
dc_relay_domains=''
dc_minimaldns='false'
dc_relay_nets=''
dc_smarthost=''
CFILEMODE='644'
dc_use_split_config='false'
dc_hide_mailname=''
dc_mailname_in_oh='true'
dc_localdelivery='mail_spool'"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

host_mirror() {
  local m
  # deb822 sources first (Debian 12's default), then one-line sources.list
  m=$(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' \
        /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1) || true
  if [ -z "$m" ]; then
    m=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\/.*\/debian\/?$/) { print $i; exit } }' \
          /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n1) || true
  fi
  [ -n "$m" ] || die "no Debian mirror found in /etc/apt/sources.list*"
  echo "${m%/}"
}

# whether anything is mounted at or below directory $1 (/proc/self/mountinfo field 5)
mounted_under() {
  awk -v r="$1" '$5 == r || index($5, r "/") == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo
}
