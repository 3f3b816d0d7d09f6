#!/usr/bin/env bash
# `make demo` (and optionally `make test`) from a bare Debian machine, timed: issue 14's target
# is at most 4 minutes for `make demo`.
#
# A bare machine is made with debootstrap: Debian 12's minimal base plus only what a user needs
# to type the Quick start (python3, make, git, ca-certificates): no allocator, no compiler, no
# venv, no package lists (as on a fresh image, so apt-get must refresh them). The repository is
# cloned into it and the Quick start runs inside a chroot, on this machine's kernel. The host's
# extra CA certificates and pip.conf are copied in where present (a sandbox's HTTPS proxy needs
# them; a real bare machine on the open internet would not).
#
# Needs root and debootstrap (apt-get install -y debootstrap). Touches nothing of the host but
# the scratch directory, and unmounts what it mounted on every path.
#
# usage: sudo bench/bare_machine.sh [--test] [--keep] [REPO]   (REPO: default this checkout)
set -euo pipefail

run_test=0 keep=0
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --test) run_test=1 ;;
    --keep) keep=1 ;;
    *) echo "unknown option $1; usage: $0 [--test] [--keep] [REPO]" >&2; exit 2 ;;
  esac
  shift
done
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
[[ $(id -u) -eq 0 ]] || { echo "bare_machine.sh needs root (debootstrap, chroot, mount); run it with sudo." >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 2; }

cache=${ALLOCLAB_BARE_CACHE:-/var/tmp/alloclab-bare}
base=$cache/base root=$cache/run
mkdir -p "$cache"

mounted=()
cleanup() {
  for ((i=${#mounted[@]}-1; i>=0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  if [[ $keep -eq 0 ]]; then rm -rf "$root"; fi
}
trap cleanup EXIT

if [[ ! -x $base/usr/bin/python3 ]]; then
  echo "bare_machine: debootstrap of Debian 12 (minbase + python3 make git ca-certificates) into $base"
  rm -rf "$base"
  debootstrap --variant=minbase --include=python3,make,git,ca-certificates bookworm "$base" \
    http://deb.debian.org/debian >/dev/null
  cat >"$base/etc/apt/sources.list" <<'EOF'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  rm -rf "$base/var/lib/apt/lists" && mkdir -p "$base/var/lib/apt/lists/partial"
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$base/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$base/usr/local/share/ca-certificates/"
    chroot "$base" update-ca-certificates >/dev/null
  fi
  [[ -f /etc/pip.conf ]] && cp /etc/pip.conf "$base/etc/pip.conf"
fi

rm -rf "$root"
cp -a "$base" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
git clone -q "$repo" "$root/root/alloclab"
mount -t proc proc "$root/proc"; mounted+=("$root/proc")
mount --rbind /sys "$root/sys"; mounted+=("$root/sys")
mount --rbind /dev "$root/dev"; mounted+=("$root/dev")

in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ${PIP_CERT:+PIP_CERT=$PIP_CERT} /bin/bash -c 'cd /root/alloclab && "$@"' bash "$@"
}

seconds() { local ms=$(( ($2 - $1) / 1000000 )); printf '%d.%01d' $((ms / 1000)) $((ms % 1000 / 100)); }
t0=$(date +%s%N)
in_root make demo
t1=$(date +%s%N)
echo "bare_machine: make demo from a bare Debian 12 root: exit 0 in $(seconds "$t0" "$t1") s (target: 240 s)"
if [[ $run_test -eq 1 ]]; then
  in_root make test
  t2=$(date +%s%N)
  echo "bare_machine: make test after it: exit 0 in $(seconds "$t1" "$t2") s (target: 300 s)"
fi
