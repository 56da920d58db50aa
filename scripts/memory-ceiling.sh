#!/usr/bin/env bash
# The memory ceiling of issue 29 in a memory cgroup (cgroup v2, or v1 on hybrid hosts; as root):
# a C host with 1,000 threads, history = 100000, interval_ns = 1 ms runs
# for SECONDS inside a cgroup with memory.max = LIMIT; it must exit 0 (not
# OOM-killed) and its cgroup's memory.peak must stay below LIMIT.
#   scripts/memory-ceiling.sh [SECONDS [LIMIT_BYTES [BUDGET_BYTES]]]
# Defaults: 10 s, 300 MB, the library's default budget. The permitted
# maximum budget (1 GiB) was run as
#   scripts/memory-ceiling.sh 40 1400000000 1073741824   (RELIABILITY.md)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
limit=${2:-300000000}
budget=${3:-0}
if [ "$(id -u)" != 0 ]; then
  echo "MISSING: root (a child memory cgroup is made under /sys/fs/cgroup)" >&2
  exit 1
fi
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build -q --release -p wakemeter-capi
out="$target_dir/c-tests"
mkdir -p "$out"
cc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Werror -Iinclude -Icrates/capi/c/tests \
  crates/capi/c/tests/memory_ceiling.c -o "$out/memory_ceiling" -pthread \
  -L"$target_dir/release" -lwakemeter -Wl,-rpath,"$target_dir/release"

# A child memory cgroup: cgroup v2 when its memory controller is there,
# else the v1 memory hierarchy (hybrid hosts), below this shell's own
# memory cgroup so the host's accounting still covers it.
v2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
v1=$(awk '$3 == "cgroup" && $4 ~ /(^|,)memory(,|$)/ { print $2; exit }' /proc/self/mounts)
if [ -n "$v2" ] && grep -qw memory "$v2/cgroup.controllers" 2>/dev/null; then
  grep -qw memory "$v2/cgroup.subtree_control" || echo +memory >"$v2/cgroup.subtree_control"
  cg="$v2/wakemeter-memory-ceiling-$$"
  mkdir "$cg"
  echo "$limit" >"$cg/memory.max"
  echo 0 >"$cg/memory.swap.max" 2>/dev/null || true
  peak_file=memory.peak
  ooms() { awk '$1 == "oom_kill" { print $2 }' "$cg/memory.events"; }
elif [ -n "$v1" ]; then
  own=$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)
  cg="$v1${own%/}/wakemeter-memory-ceiling-$$"
  mkdir "$cg"
  echo "$limit" >"$cg/memory.limit_in_bytes"
  peak_file=memory.max_usage_in_bytes
  ooms() { awk '$1 == "oom_kill" { print $2 }' "$cg/memory.oom_control"; }
else
  echo "MISSING: a memory cgroup controller (v2 or v1)" >&2
  exit 1
fi
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
status=0
sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$cg" \
  "$out/memory_ceiling" 1000 "$seconds" "$budget" || status=$?
peak=$(cat "$cg/$peak_file" 2>/dev/null || echo unknown)
killed=$(ooms || echo 0)
echo "exit=$status $peak_file=$peak limit=$limit oom_kill=${killed:-0}"
if [ "$status" != 0 ] || [ "${killed:-0}" != 0 ]; then
  echo "FAILED: the C host was killed or failed in a $limit-byte cgroup" >&2
  exit 1
fi
