# Sourced by the README's two commands: installs or checks what the build
# needs, and says exactly what is missing when it cannot install it.

have() { command -v "$1" >/dev/null 2>&1; }

apt_install() {
  # Installs Debian/Ubuntu packages when missing; needs root (or sudo) and apt-get.
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if have sudo && sudo -n true 2>/dev/null; then sudo="sudo"; else
      echo "MISSING: packages ${missing[*]} (not root and no sudo; install them by hand)" >&2
      return 1
    fi
  fi
  if ! have apt-get; then
    echo "MISSING: packages ${missing[*]} (no apt-get on this machine; install them by hand)" >&2
    return 1
  fi
  echo "installing packages: ${missing[*]}"
  # Another apt-get (a test installing its own tool) may hold the dpkg
  # lock: wait for it rather than fail.
  $sudo apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${missing[@]}" >/dev/null
}

# The toolchain channel pinned in rust-toolchain.toml (one source for it).
pinned_toolchain() {
  sed -n 's/^channel *= *"\(.*\)"/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../rust-toolchain.toml"
}

ensure_rust() {
  # Installs the pinned toolchain with its components: automatic toolchain
  # installation may be off (RUSTUP_AUTO_INSTALL=0), so never rely on it.
  local pin
  pin="$(pinned_toolchain)"
  if ! have rustup; then
    if have cargo && cargo --version | grep -q " ${pin} "; then cargo --version; return 0; fi
    echo "MISSING: rustup (rust-toolchain.toml pins Rust ${pin}; install rustup from your distribution or rustup.rs, then rerun)" >&2
    exit 1
  fi
  if ! rustup toolchain list | grep -q "^${pin}-"; then
    echo "installing the pinned Rust toolchain ${pin}"
    if ! rustup toolchain install "${pin}" --profile minimal -c rustfmt -c clippy; then
      echo "MISSING: Rust ${pin} (rustup toolchain install ${pin} failed: no network to the Rust distribution server?)" >&2
      exit 1
    fi
  fi
  # An existing install may lack a component the pin names.
  rustup component add --toolchain "${pin}" rustfmt clippy >/dev/null 2>&1 || true
  cargo --version
}

ensure_clang() {
  # clang compiles the eBPF programs (crates/ebpf). Without it the crate still
  # builds, but the eBPF source reports "unavailable: built without clang".
  if have clang || ls /usr/bin/clang-1[4-9] >/dev/null 2>&1; then return 0; fi
  if ! apt_install clang; then
    echo "MISSING: clang — eBPF programs will not be built; eBPF tests will fail" >&2
    return 1
  fi
}

# GiB that a whole `scripts/test.sh` leaves under the build directory (debug
# tests and examples, the arm64 build, the cross-target libraries): measured
# 31 GiB, 5.6 of them incremental caches, which test.sh no longer writes.
# Linkers write their outputs through mmap, so a full disk shows up as "ld
# terminated with signal 7 [Bus error]" in the middle of cargo test; this
# check names it first.
WAKEMETER_BUILD_GIB=${WAKEMETER_BUILD_GIB:-26}

ensure_disk() {
  local dir=$1 free_kib used_kib have_gib
  mkdir -p "$dir"
  free_kib=$(df -Pk "$dir" | awk 'NR==2 {print $4}')
  used_kib=$(du -sk "$dir" 2>/dev/null | awk '{print $1}')
  have_gib=$(((free_kib + used_kib) / 1048576))
  if [ "$have_gib" -lt "$WAKEMETER_BUILD_GIB" ]; then
    echo "MISSING: disk space: the build directory $dir needs about ${WAKEMETER_BUILD_GIB} GiB" \
      "(it holds $((used_kib / 1048576)) GiB and its filesystem has $((free_kib / 1048576)) GiB free)." \
      "Free some space or point CARGO_TARGET_DIR at a larger disk." >&2
    return 1
  fi
}

ensure_c_deps() {
  # The C API tests (scripts/c-test.sh): clang with the sanitizer runtimes
  # (ASan/LSan/UBSan: libclang-rt-N-dev), libevent headers, pkg-config.
  if ! apt_install clang libevent-dev pkg-config; then
    echo "MISSING: C test dependencies (clang libevent-dev pkg-config)" >&2
    return 1
  fi
  if ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.asan-x86_64.a \
    /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.asan-aarch64.a >/dev/null 2>&1; then
    local v
    v=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
    if ! apt_install "libclang-rt-${v}-dev"; then
      echo "MISSING: libclang-rt-${v}-dev (sanitizer runtimes of clang ${v})" >&2
      return 1
    fi
  fi
}
