#!/bin/sh
# Time and peak memory of `wakemeter diff` on generated recordings: many
# distinct thread groups (subjects), and a large file with few groups.
# Usage: scripts/diff-scale.sh NEW_BINARY [BASELINE_BINARY]
# Prints one line per file and binary: seconds and peak RSS (KiB), from
# /usr/bin/time -v. Recordings are version 1, which every version reads.
set -eu
new=$1
base=${2:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sleep 600 &
pid=$!
"$new" record --pid "$pid" --seconds 1 --period 0.2 --no-ebpf -o "$dir/seed.ndjson" 2>/dev/null
kill "$pid"
# gen OUT INTERVALS GROUPS DISTINCT(1: new group names every interval)
gen() {
    python3 - "$dir/seed.ndjson" "$@" <<'PY'
import json, sys
seed, out, n, g, distinct = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == '1'
lines = [json.loads(l) for l in open(seed)]
h = next(l for l in lines if l['record'] == 'header')
h['schema_version'] = 1
h.pop('role', None)
iv = next(l for l in lines if l['record'] == 'interval')
iv.pop('pid', None)
grp = iv['groups'][0]
def name(k):
    s, k = '', k + 1
    while k:
        k, r = divmod(k - 1, 26)
        s = chr(97 + r) + s
    return 'grp-' + s
with open(out, 'w') as f:
    f.write(json.dumps(h) + '\n')
    for i in range(n):
        gs = []
        for k in range(g):
            x = dict(grp)
            x['name'] = name(i * g + k if distinct else k)
            x['cpu_percent'] = (i * 7 + k) % 13 / 10
            gs.append(x)
        iv['groups'], iv['from_seq'], iv['to_seq'] = gs, i, i + 1
        iv['process']['cpu_percent'] = 20 + i % 10
        f.write(json.dumps(iv) + '\n')
PY
}
gen "$dir/subjects-5k.ndjson" 157 32 1
gen "$dir/subjects-20k.ndjson" 625 32 1
gen "$dir/large.ndjson" 27000 32 0
for f in subjects-5k subjects-20k large; do
    for b in $base $new; do
        /usr/bin/time -v "$b" diff "$dir/$f.ndjson" "$dir/$f.ndjson" >/dev/null 2>"$dir/time"
        printf '%-14s %-40s %8s s %8s KiB (%s bytes)\n' "$f" "$b" \
            "$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$dir/time")" \
            "$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/time")" \
            "$(stat -c %s "$dir/$f.ndjson")"
    done
done
