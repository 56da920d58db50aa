#!/usr/bin/env bash
# What watching a process with many threads costs, wakemeter against the
# tools people use for it, all watching the same target at the same time:
#
#   wakemeter watch --pid P --every 1 --json --no-ebpf  (one JSON report a second)
#   wakemeter watch --pid P --every 1 --no-ebpf         (the tables)
#   wakemeter watch --pid P --every 1 --json            (with eBPF where it attaches;
#                                                        its kernel-side cost is not in this figure)
#   wakemeter record --pid P --period 1 --no-ebpf     (one sample and one grouped line a second)
#   pidstat -t -w -u 1 -p P                    (sysstat: per-thread CPU and switches)
#   top -H -b -d 1 -p P                        (procps: per-thread CPU)
#
# The target is benches/c/many_threads.c: THREADS threads, BUSY of them
# working ~1 ms in 10, the rest idle. Each tool's CPU is utime + stime
# from /proc/<tool>/stat over the measured window (after a warm-up), in
# percent of one core; the ratios are to pidstat and top of the same run.
# watch samples once a second and reports on every --every-th snapshot;
# record samples once a second.
# Also printed: JSON bytes per report, and wakemeter's own cost per sample
# (`stats.mean_sample_cost_ns`: its samples and reports over its samples).
#
# Usage: scripts/sidecar-cost.sh [THREADS [SECONDS [BUSY [WAKE_MS]]]]
#   defaults 1000 threads, 60 s, 4 busy, idle threads blocked for good
#   (WAKE_MS > 0: each idle thread wakes every WAKE_MS ms).
# WAKEMETER_BIN: a built `wakemeter` (default: cargo build --release).
# Needs cc, pidstat (sysstat) and top (procps); results in BENCHMARKS.md.
set -euo pipefail

threads=${1:-1000}
seconds=${2:-60}
busy=${3:-4}
wake_ms=${4:-0}
warmup=5
root=$(cd "$(dirname "$0")/.." && pwd)

for tool in cc pidstat top; do
  if ! command -v "$tool" >/dev/null; then
    echo "sidecar-cost: needs $tool (Debian: build-essential, sysstat, procps)" >&2
    exit 1
  fi
done

if [ -z "${WAKEMETER_BIN:-}" ]; then
  (cd "$root" && cargo build --release -q -p wakemeter-cli)
  WAKEMETER_BIN="${CARGO_TARGET_DIR:-$root/target}/release/wakemeter"
fi

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  exec 3>&- 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

cc -O2 -pthread -o "$tmp/many_threads" "$root/benches/c/many_threads.c"
mkfifo "$tmp/stdin"
"$tmp/many_threads" "$threads" "$busy" "$wake_ms" <"$tmp/stdin" >"$tmp/ready" &
target=$!
pids+=("$target")
exec 3>"$tmp/stdin" # the target exits when this closes
for _ in $(seq 600); do
  grep -q ready "$tmp/ready" 2>/dev/null && break
  sleep 0.1
done
grep -q ready "$tmp/ready" || { echo "sidecar-cost: the target did not start" >&2; exit 1; }

names=(wm-json wm-table wm-json-ebpf wm-record pidstat top)
"$WAKEMETER_BIN" watch --pid "$target" --every 1 --json --no-ebpf >"$tmp/watch.json" 2>"$tmp/wm-json.err" &
pids+=($!)
"$WAKEMETER_BIN" watch --pid "$target" --every 1 --no-ebpf >/dev/null 2>"$tmp/wm-table.err" &
pids+=($!)
"$WAKEMETER_BIN" watch --pid "$target" --every 1 --json >/dev/null 2>"$tmp/wm-json-ebpf.err" &
pids+=($!)
"$WAKEMETER_BIN" record --pid "$target" --period 1 --seconds $((seconds + warmup + 30)) \
  --no-ebpf -o "$tmp/recording.ndjson" 2>"$tmp/wm-record.err" &
pids+=($!)
LC_ALL=C pidstat -t -w -u 1 -p "$target" >/dev/null &
pids+=($!)
COLUMNS=200 top -H -b -d 1 -p "$target" >/dev/null &
pids+=($!)
tools=("${pids[@]:1}")

ticks() { # utime + stime of a process, in clock ticks
  local stat
  stat=$(<"/proc/$1/stat")
  stat=${stat##*) } # fields after the name; utime and stime are 14 and 15
  set -- $stat
  echo $((${12} + ${13}))
}

sleep "$warmup"
declare -a before after
for i in "${!tools[@]}"; do before[i]=$(ticks "${tools[i]}"); done
target_before=$(ticks "$target")
start=$(date +%s.%N)
sleep "$seconds"
for i in "${!tools[@]}"; do after[i]=$(ticks "${tools[i]}"); done
target_after=$(ticks "$target")
end=$(date +%s.%N)
hz=$(getconf CLK_TCK)

declare -A pct
for i in "${!tools[@]}"; do
  pct[${names[i]}]=$(awk -v t=$((after[i] - before[i])) -v hz="$hz" -v s="$start" -v e="$end" \
    'BEGIN { printf "%.3f", t / hz / (e - s) * 100 }')
done
target_pct=$(awk -v t=$((target_after - target_before)) -v hz="$hz" -v s="$start" -v e="$end" \
  'BEGIN { printf "%.1f", t / hz / (e - s) * 100 }')

echo "target: $threads threads ($busy busy, idle wake every ${wake_ms} ms; 0 = never), ${target_pct}% CPU"
echo "window: $(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }') s after a ${warmup} s warm-up, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-10s %12s %10s %10s\n' tool "CPU % core" "/ pidstat" "/ top"
for n in "${names[@]}"; do
  printf '%-10s %12s %10s %10s\n' "$n" "${pct[$n]}" \
    "$(awk -v a="${pct[$n]}" -v b="${pct[pidstat]}" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }')" \
    "$(awk -v a="${pct[$n]}" -v b="${pct[top]}" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }')"
done

# The two figures issue 42 tracks: watch --json with eBPF and without,
# each against pidstat of the same run (target: at most 0.1x each).
ratio() { awk -v a="$1" -v b="${pct[pidstat]}" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }'; }
# And the eBPF watcher against the /proc one of the same run: what
# watching with eBPF adds, less moved by the machine's load than either.
over_proc=$(awk -v a="${pct[wm-json-ebpf]}" -v b="${pct[wm-json]}" \
  'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
echo "summary: watch --json with eBPF ${pct[wm-json-ebpf]}% = $(ratio "${pct[wm-json-ebpf]}")x pidstat;" \
  "with /proc only (--no-ebpf) ${pct[wm-json]}% = $(ratio "${pct[wm-json]}")x pidstat (target <= 0.1x each);" \
  "eBPF / proc = ${over_proc}x"

reports=$(wc -l <"$tmp/watch.json")
bytes=$(wc -c <"$tmp/watch.json")
if [ "$reports" -gt 0 ]; then
  echo "JSON: $reports reports, $((bytes / reports)) bytes per report"
  if command -v jq >/dev/null; then
    tail -n 1 "$tmp/watch.json" | jq -r '
      "last report: \(.interval.threads | length) threads listed of \(.interval.process.thread_count)"
      + (if .threads_folded != null then ", \(.threads_folded) folded into \(.thread_groups | length) groups" else "" end)
      + "; sampler CPU \(.stats.mean_sample_cost_ns / 1000 | floor) us per sample (reports included) = "
      + "\(.stats.mean_sample_cost_ns / .interval.process.thread_count / 1000 * 100 | round / 100) us per thread"'
  fi
fi
for f in wm-json wm-table wm-json-ebpf wm-record; do
  if [ -s "$tmp/$f.err" ]; then echo "$f said:"; sed 's/^/  /' "$tmp/$f.err"; fi
done
