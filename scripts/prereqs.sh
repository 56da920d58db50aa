# Sourced by the README's commands: installs or checks what the build needs,
# and says exactly what is missing when it cannot install it.

have() { command -v "$1" >/dev/null 2>&1; }

apt_install() {
  # Installs Debian packages when missing; needs root (or sudo) and apt-get.
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if have sudo; then sudo="sudo"; else
      echo "MISSING: Debian packages ${missing[*]} (not root and no sudo; install them by hand)" >&2
      return 1
    fi
  fi
  if ! have apt-get; then
    echo "MISSING: Debian packages ${missing[*]} (no apt-get on this machine)" >&2
    return 1
  fi
  echo "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

ensure_rust() {
  if ! have cargo; then
    echo "MISSING: cargo/rustup. Install rustup (https://rustup.rs); rust-toolchain.toml pins the version." >&2
    exit 1
  fi
  # rust-toolchain.toml makes rustup fetch the pinned toolchain on first use.
  cargo --version
}
