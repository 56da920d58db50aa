#!/usr/bin/env bash
# Attacks on every output of every command (issue 38), as root writing into
# a sticky world-writable directory (a small tmpfs, as /tmp) where a second
# user (nobody) plants links at the output names and at their temporary
# names, flips them while root writes, pre-creates `ab`'s directory; then a
# full file system, a FIFO and /dev/full as outputs, and a cut descriptor
# limit. Root-only victim files are checksummed before and after every
# attack: any change fails the script. Each attack prints its result (the
# lines RELIABILITY.md lists). About a minute.
#   scripts/attack-outputs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "MISSING: root (a tmpfs is mounted, and a second user plants the links)" >&2
  exit 1
fi
for tool in setpriv mount sha256sum; do
  command -v "$tool" >/dev/null || { echo "MISSING: $tool" >&2; exit 1; }
done
attacker=nobody
auid=$(id -u "$attacker") || { echo "MISSING: user $attacker" >&2; exit 1; }
agid=$(id -g "$attacker")
as_attacker() { setpriv --reuid="$auid" --regid="$agid" --clear-groups "$@"; }

cargo build -q -p wakemeter-cli
bin="${CARGO_TARGET_DIR:-$PWD/target}/debug/wakemeter"

work=$(mktemp -d /tmp/wakemeter-attack.XXXXXX)
chmod 711 "$work"
victims="$work/victims"
shared="$work/shared"
small="$work/small"
mkdir -m 700 "$victims"
mkdir "$shared" "$small"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  umount "$shared" 2>/dev/null || true
  umount "$small" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mount -t tmpfs -o size=16m,mode=1777 tmpfs "$shared"
mount -t tmpfs -o size=400k,mode=1777 tmpfs "$small"

echo "root-only secret" >"$victims/shadow"
head -c 65536 /dev/urandom >"$victims/blob"
chmod 600 "$victims"/*
sha256sum "$victims"/* >"$work/before"
failures=0
check_victims() { # what
  if ! sha256sum --quiet -c "$work/before" >/dev/null 2>&1; then
    echo "FAIL: $1: a victim file changed" >&2
    failures=$((failures + 1))
  fi
}
result() { printf '  %-58s %s\n' "$1" "$2"; }

sleep 600 &
target=$!
pids+=("$target")
rec() { "$bin" record --pid "$target" --no-ebpf "$@"; }

echo "== links planted by $attacker at the output's name"
plant() { # name -> points to
  rm -f "$2"
  as_attacker ln -s "$1" "$2"
}
try() { # what, command...
  local what=$1
  shift
  local rc=0
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  check_victims "$what"
  if [ "$rc" = 0 ]; then
    result "$what" "WRITTEN (rc 0): $(tail -1 "$work/err")"
  else
    result "$what" "refused (rc $rc): $(grep -m1 -o 'symbolic link[^;]*\|belongs to[^;]*\|other users[^;]*\|owned by[^;]*' "$work/err" || tail -1 "$work/err")"
  fi
  return 0
}
expect_refused() { # what, command...
  try "$@"
  if ! grep -q 'symbolic link\|belongs to\|other users\|owned by' "$work/err"; then
    echo "FAIL: $1: not refused as a link or an unsafe directory: $(tail -3 "$work/err")" >&2
    failures=$((failures + 1))
  fi
}
for to in "$victims/shadow" /dev/null; do
  plant "$to" "$shared/out.ndjson"
  expect_refused "record -o LINK -> $to" rec --period 0.1 --seconds 0.5 -o "$shared/out.ndjson"
  plant "$to" "$shared/t.pftrace"
  expect_refused "record --perfetto LINK -> $to" rec --period 0.1 --seconds 0.5 -o "$shared/ok.ndjson" --perfetto "$shared/t.pftrace"
  expect_refused "watch --perfetto LINK -> $to" "$bin" watch --pid "$target" --no-ebpf --seconds 2 --perfetto "$shared/t.pftrace"
  for out in --svg --folded --pprof; do
    plant "$to" "$shared/p.out"
    expect_refused "profile $out LINK -> $to" "$bin" profile --pid "$target" --off-cpu --seconds 1 "$out" "$shared/p.out"
  done
  plant "$to" "$shared/report.json"
  expect_refused "demo --report LINK -> $to" "$bin" demo --seconds 5 --no-ebpf --report "$shared/report.json"
done

echo "== ab's directory planted by $attacker (the default wakemeter-ab/ in a shared working directory)"
as_attacker mkdir -m 777 "$shared/wakemeter-ab"
for f in control-1.load.txt control-1.cmd.log control-1.ndjson; do
  as_attacker ln -s "$victims/shadow" "$shared/wakemeter-ab/$f"
done
(cd "$shared" && expect_refused "ab (default dir of $attacker, links inside)" \
  "$bin" ab --pid "$target" --no-ebpf --load "true" --control "sleep 1" --settle 0s)
as_attacker ln -s "$victims" "$shared/abdir"
expect_refused "ab --dir LINK -> a root directory" "$bin" ab --pid "$target" --no-ebpf --load true --settle 0s --dir "$shared/abdir"
try "ab --dir NEW (made by root, 0755)" "$bin" ab --pid "$target" --no-ebpf --load "sleep 0.5" --settle 0s --period 0.1 --dir "$shared/abnew"
result "  ab --dir NEW: owner and mode" "$(stat -c '%U %a' "$shared/abnew")"

echo "== links flipped by $attacker while root writes (temporary names included)"
flip() {
  local n=0
  while :; do
    for name in flip.ndjson flip.pftrace; do
      ln -sfn "$victims/shadow" "$shared/$name.x" 2>/dev/null && mv -fT "$shared/$name.x" "$shared/$name" 2>/dev/null
      for p in $(pgrep -f "wakemeter record" 2>/dev/null); do
        ln -s "$victims/blob" "$shared/$name.partial-$p" 2>/dev/null || true
        ln -s "$victims/blob" "$shared/$name.partial-$p-1" 2>/dev/null || true
      done
      ln -sfn /dev/null "$shared/$name.x" 2>/dev/null && mv -fT "$shared/$name.x" "$shared/$name" 2>/dev/null
      rm -f "$shared/$name" 2>/dev/null
    done
    n=$((n + 1))
  done
}
export -f flip
export victims shared
setpriv --reuid="$auid" --regid="$agid" --clear-groups bash -c flip &
flipper=$!
pids+=("$flipper")
written=0
refused=0
for i in $(seq 1 15); do
  if rec --period 0.1 --seconds 0.3 -o "$shared/flip.ndjson" --perfetto "$shared/flip.pftrace" >/dev/null 2>&1; then
    written=$((written + 1))
  else
    refused=$((refused + 1))
  fi
  check_victims "flip round $i"
done
kill "$flipper" 2>/dev/null || true
wait "$flipper" 2>/dev/null || true
result "record -o + --perfetto, 15 runs against a flipping link" "$written written, $refused refused, victims intact"

echo "== a full file system (a 400 KiB tmpfs) beside a Perfetto trace"
busy() { # fills the file system with a recording, with or without a trace
  rm -f "$small"/*
  local rc=0
  rec --period 0.01 --seconds 60 -o "$small/r.ndjson" "$@" >/dev/null 2>"$work/err" || rc=$?
  check_victims "full disk"
  local kept
  kept=$(grep -c '"record":"interval"' "$small/r.ndjson" 2>/dev/null || echo 0)
  echo "$rc $kept"
}
read -r rc_plain kept_plain <<<"$(busy)"
read -r rc_trace kept_trace <<<"$(busy --perfetto "$small/t.pftrace")"
trace_bytes=$(stat -c %s "$small/t.pftrace" 2>/dev/null || echo 0)
summary=$(grep -c "Perfetto trace" "$work/err" || true)
result "record alone until ENOSPC" "rc $rc_plain, $kept_plain intervals kept"
result "record + --perfetto until ENOSPC" "rc $rc_trace, $kept_trace intervals kept, trace $trace_bytes bytes, summary said: $summary"
if [ "$kept_trace" -lt $((kept_plain * 8 / 10)) ]; then
  echo "FAIL: the trace's reserve cost the recording: $kept_trace < 80% of $kept_plain" >&2
  failures=$((failures + 1))
fi
if [ "$summary" = 0 ]; then
  echo "FAIL: no trace summary on the full-disk exit" >&2
  failures=$((failures + 1))
fi
last=$(tail -c 1 "$small/r.ndjson" | od -An -c | tr -d ' ')
result "  the recording ends on a whole line" "$([ "$last" = '\n' ] && echo yes || echo NO)"
[ "$last" = '\n' ] || failures=$((failures + 1))

echo "== a FIFO and /dev/full as the trace"
rc=0
rec --period 0.1 --seconds 1 -o "$shared/f.ndjson" --perfetto /dev/full >/dev/null 2>"$work/err" || rc=$?
result "record --perfetto /dev/full" "rc $rc ($(grep -m1 -o 'never written\|cut short' "$work/err" || echo 'no error said'))"
[ "$rc" != 0 ] || failures=$((failures + 1))
mkfifo "$shared/pipe"
cat "$shared/pipe" >"$work/from-pipe" &
rc=0
rec --period 0.1 --seconds 1 -o "$shared/f.ndjson" --perfetto "$shared/pipe" >/dev/null 2>"$work/err" || rc=$?
wait $! || true
result "record --perfetto FIFO (a reader)" "rc $rc, $(stat -c %s "$work/from-pipe") bytes through the pipe"
[ "$rc" = 0 ] && [ -s "$work/from-pipe" ] || failures=$((failures + 1))

echo "== descriptors cut (ulimit -n)"
for n in 6 10 16; do
  rc=0
  (ulimit -n "$n" && rec --period 0.1 --seconds 0.5 -o "$shared/u.ndjson" --perfetto "$shared/u.pftrace") >/dev/null 2>"$work/err" || rc=$?
  check_victims "ulimit -n $n"
  result "record + --perfetto under ulimit -n $n" "rc $rc: $(tail -1 "$work/err" | cut -c1-70)"
  if [ "$rc" -ge 128 ]; then
    echo "FAIL: killed by a signal under ulimit -n $n" >&2
    failures=$((failures + 1))
  fi
done
lowfd() { # what, command... (under ulimit -n 10)
  local what=$1 rc=0
  shift
  (ulimit -n 10 && "$@") >/dev/null 2>"$work/err" || rc=$?
  check_victims "$what under ulimit -n 10"
  result "$what under ulimit -n 10" "rc $rc: $(tail -1 "$work/err" | cut -c1-70)"
  if [ "$rc" -ge 128 ]; then
    echo "FAIL: $what killed by a signal under ulimit -n 10" >&2
    failures=$((failures + 1))
  fi
}
lowfd "watch --perfetto" "$bin" watch --pid "$target" --no-ebpf --seconds 1 --perfetto "$shared/lw.pftrace"
lowfd "ab" "$bin" ab --pid "$target" --no-ebpf --load "sleep 0.3" --settle 0s --period 0.1 --dir "$shared/lowab"
lowfd "profile --svg --folded --pprof" "$bin" profile --pid "$target" --off-cpu --seconds 1 \
  --svg "$shared/l.svg" --folded "$shared/l.folded" --pprof "$shared/l.pb.gz"
lowfd "demo --report" "$bin" demo --seconds 5 --no-ebpf --report "$shared/l.json"
leftover=$(find "$shared" -name '*.partial-*' ! -type l | wc -l)
result "temporary files left behind (not links)" "$leftover"

if [ "$failures" != 0 ]; then
  echo "attack-outputs: $failures failure(s)" >&2
  exit 1
fi
echo "attack-outputs: every victim intact (sha256 before and after each attack)"
