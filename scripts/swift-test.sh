#!/usr/bin/env bash
# Builds and tests the Swift package (Package.swift at the repository root,
# sources in bindings/swift) with a real Swift compiler:
#   1. the committed generated bindings match the Rust API
#      (scripts/bindings.sh --check, which also builds the release
#      libwakemeter_ffi.so on the host);
#   2. a Debian 13 (trixie) root with Debian's `swiftlang` (Swift 6.0.3,
#      SwiftPM, XCTest, Foundation) is made once and then reused from
#      $WAKEMETER_CACHE_DIR/swift-trixie (default /var/cache/wakemeter): it
#      outlives the checkout, so a fresh clone on the same machine reuses it.
#      First setup: debootstrap, then ~530 MB of packages (2 min 53 s on
#      the machine the README's figures come from), 2.6 GB on disk. It is built in a temporary directory and renamed when
#      complete, so an interrupted setup is never taken for a finished one;
#   3. `swift build` (warnings are errors) and `swift test` run in that root,
#      in a private mount namespace (unshare) where /proc, /dev, the checkout
#      and the Rust library directory are bind-mounted. Mounts made in a
#      private namespace vanish with it, so nothing is left mounted on the
#      host on any exit path (Ctrl-C, kill, crash); the traps below unmount
#      too.
# Needs root (debootstrap, chroot, mount). Says MISSING: … when it cannot.
#
# Environment: WAKEMETER_CACHE_DIR, CARGO_TARGET_DIR, DEBIAN_MIRROR
# (default http://deb.debian.org/debian); arguments go to `swift test`
# (e.g. --filter SamplerTests).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd -P)"

# shellcheck source=scripts/prereqs.sh
source scripts/prereqs.sh

cache_dir="${WAKEMETER_CACHE_DIR:-/var/cache/wakemeter}"
root="$cache_dir/swift-trixie"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What the root must contain; part of the "finished" marker, so changing
# the list makes the next run build a new root.
chroot_packages=(swiftlang libc6-dev binutils gcc)
marker="$root/.wakemeter-swift-root"
marker_text="trixie ${chroot_packages[*]}"

if [ "$(id -u)" -ne 0 ]; then
  echo "MISSING: root privilege (the Swift tests run in a Debian 13 chroot: debootstrap, chroot and mount need root; run: sudo scripts/swift-test.sh)" >&2
  exit 1
fi
for tool in cargo unshare setsid flock mount chroot; do
  if ! have "$tool"; then
    case "$tool" in
      cargo) echo "MISSING: cargo (install rustup; rust-toolchain.toml pins the version)" >&2 ;;
      *) echo "MISSING: $tool (util-linux/coreutils; run: apt-get install util-linux coreutils)" >&2 ;;
    esac
    exit 1
  fi
done

# Unmounts every mount point under $1, deepest first (used on a root being
# built and by the traps below).
unmount_under() {
  local dir mounts
  dir="$(realpath -m "$1")"
  mapfile -t mounts < <(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  for m in "${mounts[@]}"; do
    umount -l "$m" 2>/dev/null || true
  done
}

# Every long step runs in a process group of its own (setsid) through
# run_child, so that INT or TERM sent to this script alone (not only a
# terminal's Ctrl-C, which reaches the whole foreground group) ends it.
child=""
run_child() {
  setsid "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=""
  return "$rc"
}

# Processes of the mount namespace $1 (SwiftPM starts the test runner in a
# process group of its own, out of reach of the group signal; other runs
# sharing the Swift root have namespaces of their own).
in_namespace() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$1" ] && echo "${p#/proc/}"
  done
  return 0
}

# Ends the running step and everything it started: TERM, then KILL what is
# still there after 10 s. A private mount namespace, with its bind mounts,
# goes with its last process.
stop_child() {
  [ -n "$child" ] || return 0
  local ns pids i
  ns="$(readlink "/proc/$child/ns/mnt" 2>/dev/null || true)"
  kill -TERM -- "-$child" 2>/dev/null || true
  if [ -n "$ns" ] && [ "$ns" != "$(readlink /proc/self/ns/mnt)" ]; then
    for i in $(seq 100); do
      mapfile -t pids < <(in_namespace "$ns")
      [ "${#pids[@]}" -eq 0 ] && break
      [ "$i" -eq 1 ] && { kill -TERM "${pids[@]}" 2>/dev/null || true; }
      [ "$i" -eq 100 ] && { kill -KILL "${pids[@]}" 2>/dev/null || true; }
      sleep 0.1
    done
  fi
  wait "$child" 2>/dev/null || true
}
trap 'stop_child; exit 130' INT
trap 'stop_child; exit 143' TERM

make_root() {
  mkdir -p "$cache_dir"
  local avail_kb
  avail_kb=$(df -Pk "$cache_dir" | awk 'NR == 2 { print $4 }')
  if [ "${avail_kb:-0}" -lt $((4 * 1024 * 1024)) ]; then
    echo "MISSING: disk space: setting up the Swift root needs 4 GB free (2.6 GB stay) and $cache_dir has $((avail_kb / 1024)) MB free (free some space or set WAKEMETER_CACHE_DIR to a larger disk)" >&2
    exit 1
  fi
  if ! have debootstrap && ! apt_install debootstrap; then
    echo "MISSING: debootstrap (run: apt-get install debootstrap)" >&2
    exit 1
  fi
  # Leftovers of an interrupted setup (we hold the lock: nobody else is
  # building one).
  local old
  for old in "$root".tmp.*; do
    [ -e "$old" ] || continue
    echo "==> removing the unfinished Swift root $old" >&2
    unmount_under "$old"
    rm -rf --one-file-system "$old"
  done
  tmp="$root.tmp.$$"
  trap 'unmount_under "$tmp"; rm -rf --one-file-system "$tmp"' EXIT
  local start=$SECONDS
  echo "==> first Swift setup: debootstrap --variant=minbase trixie $tmp (about 1 minute)" >&2
  if ! run_child debootstrap --variant=minbase trixie "$tmp" "$mirror" >"$cache_dir/debootstrap.log" 2>&1; then
    tail -5 "$cache_dir/debootstrap.log" >&2
    echo "MISSING: a Debian 13 root: debootstrap could not fetch trixie from $mirror (no network? see $cache_dir/debootstrap.log; rerun scripts/swift-test.sh with access to $mirror, or set DEBIAN_MIRROR to a reachable Debian mirror)" >&2
    exit 1
  fi
  cp /etc/resolv.conf "$tmp/etc/resolv.conf" 2>/dev/null || true
  echo "==> installing ${chroot_packages[*]} in the root (about 530 MB, 3 minutes)" >&2
  # In a private mount namespace: /proc and /dev for dpkg's maintainer
  # scripts and for swift (its driver finds itself through /proc/self/exe).
  # shellcheck disable=SC2016 # expanded by the inner shell
  if ! run_child unshare --mount --propagation private -- sh -ec '
      root="$1"; shift
      mount --bind /proc "$root/proc"
      mount --bind /dev "$root/dev"
      chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get -q update
      chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends "$@"
      chroot "$root" apt-get clean
      chroot "$root" swift --version' sh "$tmp" "${chroot_packages[@]}" >"$cache_dir/apt.log" 2>&1; then
    tail -5 "$cache_dir/apt.log" >&2
    echo "MISSING: swiftlang in the Debian 13 root: apt-get install or swift --version failed (no network? see $cache_dir/apt.log; rerun scripts/swift-test.sh with access to $mirror, or set DEBIAN_MIRROR)" >&2
    exit 1
  fi
  echo "$marker_text" >"$tmp/.wakemeter-swift-root"
  unmount_under "$tmp"
  # The rename is what makes the root "finished".
  rm -rf --one-file-system "$root"
  mv "$tmp" "$root"
  trap - EXIT
  echo "==> Swift root ready in $((SECONDS - start)) s: $root ($(du -sh "$root" | cut -f1))" >&2
}

# One setup at a time; the lock file lives next to the root.
mkdir -p "$cache_dir"
exec 9>"$cache_dir/swift-trixie.lock"
flock 9
if [ "$(cat "$marker" 2>/dev/null)" != "$marker_text" ]; then
  make_root
fi
flock -u 9

if [ "${1:-}" = --setup-only ]; then
  echo "Swift root ready: $root"
  exit 0
fi

# Builds the release libwakemeter_ffi.so the tests link, on the host.
scripts/bindings.sh --check

target_dir="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}"
mkdir -p "$target_dir/swift"
target_dir="$(realpath "$target_dir")"
if [ ! -f "$target_dir/release/libwakemeter_ffi.so" ]; then
  echo "MISSING: $target_dir/release/libwakemeter_ffi.so after building wakemeter-ffi (run: cargo build -p wakemeter-ffi --release)" >&2
  exit 1
fi

# Runs in the private mount namespace: binds what the build needs into the
# root, then builds and tests as an unprivileged-looking clean environment.
# The checkout is at /wakemeter/src, the cargo target dir at /wakemeter/target
# (SwiftPM's build directory goes to its swift/ subdirectory).
# shellcheck disable=SC2016 # expanded by the inner shell
inside='
set -eu
root="$1" src="$2" target="$3"; shift 3
mounted=""
cleanup() {
  for m in $mounted; do umount -l "$m" 2>/dev/null || true; done
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM
for pair in "/proc:proc" "/dev:dev" "$src:wakemeter/src" "$target:wakemeter/target"; do
  from="${pair%%:*}" to="$root/${pair#*:}"
  mkdir -p "$to"
  mount --bind "$from" "$to"
  mounted="$to $mounted"
done
run() {
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin LANG=C.UTF-8 \
    LD_LIBRARY_PATH=/wakemeter/target/release \
    sh -c "cd /wakemeter/src && exec \"\$@\"" sh "$@"
}
# The same flags for both commands, or swift test would rebuild everything.
flags="--scratch-path /wakemeter/target/swift -Xlinker -L/wakemeter/target/release -Xswiftc -warnings-as-errors"
run swift --version 2>&1 | head -1
echo "==> swift build (Swift 6 language mode, warnings are errors)"
# SwiftPM 6.0.3 itself (swift-build, not the compiler) has crashed here
# once in about ten runs (SIGSEGV while planning): one retry for a crash
# of the tool, none for a failed build.
status=0
run swift build --build-tests $flags || status=$?
if [ "$status" -gt 128 ]; then
  echo "==> swift build crashed (status $status), retrying once"
  run swift build --build-tests $flags
elif [ "$status" -ne 0 ]; then
  exit "$status"
fi
echo "==> swift test"
run swift test --skip-build $flags "$@"
'

echo "==> building and testing the Swift package in $root" >&2
run_child unshare --mount --propagation private -- sh -c "$inside" sh "$root" "$repo" "$target_dir" "$@"
