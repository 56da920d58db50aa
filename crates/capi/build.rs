//! The shared library's version in its name, as C libraries carry it.
//!
//! Linux: the SONAME `libwakemeter.so.<sover>`, which a program linked with
//! `-lwakemeter` records and the loader then looks for. macOS: the install
//! name `@rpath/libwakemeter.<sover>.dylib` (scripts/c-install.sh sets the
//! installed path). Android and the static library are left as they are:
//! an APK ships `lib*.so` files only.
//!
//! `<sover>` follows Cargo's compatibility rule, as cargo-c does: the major
//! version from 1.0 on, `0.<minor>` before it (0.1 and 0.2 are as
//! incompatible as 1 and 2 are). A change of `WM_ABI_VERSION` (a signature
//! or a struct layout) therefore needs a minor version bump while the crate
//! is 0.x, and a major one after.
//!
//! So that programs linked against the build tree (`-L target/<profile>
//! -lwakemeter -Wl,-rpath,...`, as scripts/c-test.sh does) find the library
//! by that name, the script also puts the link `libwakemeter.so.<sover>` ->
//! `libwakemeter.so` next to it: the one file it writes outside `OUT_DIR`,
//! and what `cargo build` of a C library with a SONAME needs to stay usable
//! in place.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let major = env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    let version = env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let sover = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    match env::var("CARGO_CFG_TARGET_OS").as_deref() {
        Ok("linux") => {
            let soname = format!("libwakemeter.so.{sover}");
            println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
            link_in_build_tree(&soname, "libwakemeter.so");
        }
        Ok("macos") => {
            let name = format!("libwakemeter.{sover}.dylib");
            println!("cargo:rustc-cdylib-link-arg=-Wl,-install_name,@rpath/{name}");
            println!("cargo:rustc-cdylib-link-arg=-Wl,-compatibility_version,{sover}");
            println!("cargo:rustc-cdylib-link-arg=-Wl,-current_version,{version}");
            link_in_build_tree(&name, "libwakemeter.dylib");
        }
        _ => {}
    }
}

/// `<target>/<profile>/<link>` -> `<file>` (relative: the library cargo
/// writes there after this script). `OUT_DIR` is
/// `<target>/<profile>/build/<package>-<hash>/out`.
fn link_in_build_tree(link: &str, file: &str) {
    let Some(out_dir) = env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    let Some(profile_dir) = out_dir.ancestors().nth(3) else {
        return;
    };
    if profile_dir.join("build") != out_dir.ancestors().nth(2).unwrap_or(Path::new("")) {
        // Not the layout above: leave the directory alone.
        return;
    }
    let path = profile_dir.join(link);
    if std::fs::read_link(&path).is_ok_and(|to| to == Path::new(file)) {
        return;
    }
    let _ = std::fs::remove_file(&path);
    #[cfg(unix)]
    if let Err(e) = std::os::unix::fs::symlink(file, &path) {
        println!(
            "cargo:warning=wakemeter-capi: could not link {} -> {file}: {e}; programs linked against the build tree will not find {link}",
            path.display()
        );
    }
}
