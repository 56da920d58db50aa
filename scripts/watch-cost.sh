#!/usr/bin/env bash
# What watching a syscall-heavy process costs that process: the calls per
# second a one-thread syscall loop achieves (benches/c/syscall_target.c)
# alone and while `wakemeter watch` observes it, with the eBPF syscall hook,
# without it (--no-syscall-hook) and without eBPF (--no-ebpf). Rounds
# alternate the modes; the median of each is printed with its ratio to the
# loop alone. eBPF modes need root. Usage:
#   scripts/watch-cost.sh [poll|getppid] [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
call=${1:-poll}
seconds=${2:-5}
rounds=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cc -O2 -o "$work/target" benches/c/syscall_target.c
cargo build -q --release -p wakemeter-cli
cli=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/wakemeter

# One run: the loop's calls/s; $1 is the mode, the rest the watch flags.
run() {
  local mode=$1
  shift
  rm -f "$work/go" "$work/watch.err"
  mkfifo "$work/go"
  "$work/target" "$call" "$seconds" <"$work/go" >"$work/rate" &
  local target=$!
  exec 3>"$work/go"
  local watcher=
  if [ "$mode" != alone ]; then
    "$cli" watch --pid "$target" --every 1 --json "$@" >/dev/null 2>"$work/watch.err" &
    watcher=$!
    # Until it has attached (or given up on eBPF) and taken a sample.
    for _ in $(seq 100); do
      grep -q "eBPF: attached\|eBPF: not attached" "$work/watch.err" 2>/dev/null && break
      sleep 0.1
    done
    sleep 1
  fi
  echo go >&3
  exec 3>&-
  wait "$target"
  if [ -n "$watcher" ]; then
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
  fi
  cat "$work/rate"
}

flags() {
  case $1 in
    alone | hook) ;;
    no-hook) echo --no-syscall-hook ;;
    no-ebpf) echo --no-ebpf ;;
  esac
}

modes=(alone hook no-hook no-ebpf)
declare -A rates
for _ in $(seq "$rounds"); do
  for m in "${modes[@]}"; do
    # shellcheck disable=SC2046 # flags() prints zero or one word
    rates[$m]+="$(run "$m" $(flags "$m")) "
  done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(echo "${rates[alone]}" | median)
printf '%s loop, %s s x %s rounds, calls/s (median) and ratio to alone\n' "$call" "$seconds" "$rounds"
for m in "${modes[@]}"; do
  med=$(echo "${rates[$m]}" | median)
  printf '  %-8s %10s  %.3f   (runs: %s)\n' "$m" "$med" "$(awk -v a="$med" -v b="$base" 'BEGIN {print a / b}')" "${rates[$m]}"
done
