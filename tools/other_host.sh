#!/usr/bin/env bash
# Run a command as if on another machine of the same kind, to show that no
# output nbval compares depends on the host:
#
#     tools/other_host.sh .venv/bin/python -m pytest book/
#
# Inside a private mount namespace (needs root or unprivileged user
# namespaces, and `unshare` from util-linux) it replaces what the kernel
# reports about the machine with other values, then runs the command pinned
# to one core with `taskset`:
#   /proc/cpuinfo    every "model name" becomes "Simulated Other CPU"
#   /sys/.../cache   every cache size of every CPU becomes 96K / 768K / 6144K
#                    (L1 / L2 / L3), unlike any machine this book ran on
#   /sys/.../online  "0-5": os.cpu_count() reports six cores
# and it makes the arithmetic take other code paths, as another CPU's would:
#   ATEN_CPU_CAPABILITY=default  PyTorch's scalar kernels, not AVX2/AVX-512
#   MKL_CBWR=COMPATIBLE          MKL's generic (SSE2) BLAS kernels
#   ONEDNN_MAX_CPU_ISA=SSE41     oneDNN capped likewise
# so printed digits that depend on vector width or FMA show up as failures.
# (The load average comes from a system call and differs between runs anyway.)
# The static guard that runs with every `make test` is tools/host_scan.py
# (tests/test_host.py); this script is the dynamic check behind it.
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: tools/other_host.sh COMMAND [ARG...]" >&2
  exit 2
fi
if [ "${OTHER_HOST_INSIDE:-}" != 1 ]; then
  command -v unshare >/dev/null || { echo "other_host.sh: needs unshare" >&2; exit 2; }
  if [ "$(id -u)" = 0 ]; then ns=(unshare --mount); else ns=(unshare --mount --map-root-user); fi
  OTHER_HOST_INSIDE=1 exec "${ns[@]}" "$0" "$@"
fi
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
sed 's/^model name.*/model name\t: Simulated Other CPU/' /proc/cpuinfo > "$fake/cpuinfo"
echo "0-5" > "$fake/online"
mount --bind "$fake/cpuinfo" /proc/cpuinfo
mount --bind "$fake/online" /sys/devices/system/cpu/online
n=0
for size in /sys/devices/system/cpu/cpu*/cache/index*/size; do
  [ -e "$size" ] || continue
  level=$(cat "$(dirname "$size")/level")
  case "$level" in 1) v=96K ;; 2) v=768K ;; *) v=6144K ;; esac
  echo "$v" > "$fake/size$n"
  mount --bind "$fake/size$n" "$size"
  n=$((n + 1))
done
echo "other_host.sh: simulated CPU model, 6 cores, caches 96K/768K/6144K, scalar kernels, pinned to core 0" >&2
export ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41
exec taskset -c 0 "$@"
