#!/usr/bin/env bash
# Fails when a /proc or /sys path string appears in library or binary code
# outside crates/procfs, the one crate that owns them (ARCHITECTURE.md,
# "The OS seam"). Checked: every .rs file under crates/*/src but
# crates/procfs, up to its first `#[cfg(test)]` (unit tests may read /proc
# as an independent reference, as integration tests under crates/*/tests
# do), comment lines left out. A string literal that starts with /proc or
# /sys is a finding, and so is a `format!` of one.
#
# Allowed, by exact text, because it is compared and never opened:
#   "/proc/self/fd/1"  (crates/cli: an output path that names stdout)
set -euo pipefail
cd "$(dirname "$0")/.."

found=0
while IFS= read -r -d '' file; do
  case "$file" in
    crates/procfs/*) continue ;;
    */tests.rs | */fake.rs | */*_tests.rs | */tests/*) continue ;;
  esac
  hits=$(awk '
    /^[[:space:]]*#\[cfg\((all\()?test/ { exit }
    /^[[:space:]]*\/\// { next }
    /"\/(proc|sys)([\/"])/ {
      line = $0
      gsub(/"\/proc\/self\/fd\/1"/, "", line)
      if (line ~ /"\/(proc|sys)([\/"])/) printf "%s:%d: %s\n", FILENAME, FNR, $0
    }
  ' "$file")
  if [ -n "$hits" ]; then
    printf '%s\n' "$hits"
    found=1
  fi
done < <(find crates/*/src -name '*.rs' -print0)

if [ "$found" -ne 0 ]; then
  echo "procfs-paths: /proc or /sys named outside crates/procfs (call wakemeter_procfs instead)" >&2
  exit 1
fi
echo "procfs-paths: no /proc or /sys path outside crates/procfs"
