#!/usr/bin/env bash
# What `wakemeter top` costs on a target with many threads, beside
# `wakemeter watch` on the same target in the same run: the CPU time of the
# wakemeter process (user + system, from the shell's `times`) per second of
# watching. top runs in a 200x60 tmux pane (the terminal view, refreshed
# every second) and with stdout piped (plain frames); watch reports every
# second. Rounds alternate the modes; the median of each is printed with its
# ratio to watch. /proc only (--no-ebpf), so the numbers are the sampler's
# and the view's, not the kernel's. Usage:
#   scripts/top-cost.sh [THREADS] [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-5000}
seconds=${2:-20}
rounds=${3:-3}
work=$(mktemp -d)
sock="wakemeter-top-cost-$$"
cleanup() {
  tmux -L "$sock" kill-server 2>/dev/null || true
  [ -n "${target:-}" ] && kill "$target" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=scripts/prereqs.sh
source scripts/prereqs.sh
apt_install tmux
cargo build -q --release -p wakemeter-cli
cli=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/wakemeter

# The target: one busy thread and THREADS-1 that block on an event.
python3 - "$threads" >"$work/ready" <<'EOF' &
import sys, threading
threading.stack_size(64 * 1024)
ev = threading.Event()
for _ in range(int(sys.argv[1]) - 1):
    threading.Thread(target=ev.wait, daemon=True).start()
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
ev.wait()
EOF
target=$!
until grep -q ready "$work/ready" 2>/dev/null; do sleep 0.2; done
echo "target: pid $target, $(ls /proc/$target/task | wc -l) threads; $seconds s per run, $rounds rounds"

# CPU seconds of the children of a `sh -c '...; times'`, from its output.
children_cpu() {
  python3 -c '
import re, sys
line = open(sys.argv[1]).read().strip().splitlines()[-1]
print(sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", line)))' "$1"
}

run() {
  local mode=$1 out="$work/$1.times"
  case $mode in
    watch) sh -c "'$cli' watch --pid $target --every 1 --seconds $seconds --no-ebpf >/dev/null 2>&1; times" >"$out" ;;
    top-plain) sh -c "'$cli' top --pid $target --seconds $seconds --no-ebpf >/dev/null 2>&1; times" >"$out" ;;
    top-tui)
      rm -f "$out"
      tmux -L "$sock" new-session -d -x 200 -y 60 \
        "sh -c \"'$cli' top --pid $target --seconds $seconds --no-ebpf 2>/dev/null; times >'$out.tmp'; mv '$out.tmp' '$out'\""
      until [ -f "$out" ]; do sleep 0.5; done
      tmux -L "$sock" kill-server 2>/dev/null || true
      ;;
  esac
  python3 -c "print(f'{$(children_cpu "$out") * 100 / $seconds:.2f}')"
}

declare -A results
for r in $(seq "$rounds"); do
  for mode in watch top-tui top-plain; do
    pct=$(run "$mode")
    results[$mode]+="$pct "
    echo "round $r: $mode $pct% CPU"
  done
done

python3 - "${results[watch]}" "${results[top-tui]}" "${results[top-plain]}" <<'EOF'
import statistics, sys
watch, tui, plain = (statistics.median(map(float, a.split())) for a in sys.argv[1:])
print(f"median CPU of one core: watch {watch:.2f}%, top (tmux) {tui:.2f}% ({tui / watch:.2f}x watch), "
      f"top (plain) {plain:.2f}% ({plain / watch:.2f}x watch)")
EOF
