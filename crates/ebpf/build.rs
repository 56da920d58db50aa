//! Compiles the kernel programs (C, CO-RE) with clang into `$OUT_DIR`.
//!
//! clang is looked up as `$WAKEMETER_CLANG` (a path or a name), then `clang`,
//! then versioned names (`clang-19` ... `clang-14`) on `PATH`. Without clang
//! the crate still builds: it emits a `cargo:warning` and the
//! `wakemeter_ebpf_no_clang` cfg, and attaching then fails with
//! `EbpfError::BuiltWithoutClang`. Set `WAKEMETER_EBPF_NO_CLANG=1` to force
//! that mode.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCES: &[&str] = &[
    "src/bpf/wakemeter.bpf.c",
    "src/bpf/stacks.bpf.c",
    "src/bpf/pid_ns.bpf.c",
    "src/bpf/pid_ns.h",
    "src/bpf/wakemeter.h",
    "src/bpf/stacks.h",
    "src/bpf/sched_classify.h",
    "src/bpf/sched_events.h",
    "src/bpf/bpf_min.h",
    "src/bpf/vmlinux_min.h",
];

/// The programs: (source `src/bpf/<source>.c`, object `$OUT_DIR/<object>.o`,
/// extra defines). The counters of `EbpfSource` twice, with their entries
/// in task storage (Linux 5.11+) and in a hash map (older kernels would
/// refuse the whole object for its task storage map), the stacks of
/// `StackSession`, and the task finder both run first when the observer is
/// in a PID namespace of its own.
const PROGRAMS: &[(&str, &str, &[&str])] = &[
    (
        "wakemeter.bpf",
        "wakemeter_task_store.bpf",
        &["-DWM_WITH_TASK_STORE"],
    ),
    ("wakemeter.bpf", "wakemeter.bpf", &[]),
    ("stacks.bpf", "stacks.bpf", &[]),
    ("pid_ns.bpf", "pid_ns.bpf", &[]),
];

fn main() {
    println!("cargo:rustc-check-cfg=cfg(wakemeter_ebpf_no_clang)");
    println!("cargo:rerun-if-env-changed=WAKEMETER_CLANG");
    println!("cargo:rerun-if-env-changed=WAKEMETER_EBPF_NO_CLANG");
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }

    // Only Linux hosts get kernel programs; other targets build a stub.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let arch_define = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "-D__TARGET_ARCH_x86",
        Ok("aarch64") => "-D__TARGET_ARCH_arm64",
        other => {
            no_clang(&format!(
                "target architecture {other:?} has no syscall table in the eBPF programs (x86_64 and aarch64 do)"
            ));
            return;
        }
    };
    if env::var_os("WAKEMETER_EBPF_NO_CLANG").is_some_and(|v| v != "0" && !v.is_empty()) {
        no_clang("WAKEMETER_EBPF_NO_CLANG is set");
        return;
    }
    let Some(clang) = find_clang() else {
        watch_path_for_clang();
        no_clang(
            "clang was not found (set WAKEMETER_CLANG or install clang, e.g. `apt-get install clang`)",
        );
        return;
    };

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest_dir.join("src/bpf");
    for (source, object, defines) in PROGRAMS {
        compile(
            &clang,
            arch_define,
            defines,
            &bpf_dir,
            (source, object),
            &out_dir,
        );
    }
}

/// Compiles `src/bpf/<source>.c` into `<out_dir>/<object>.o`.
fn compile(
    clang: &Path,
    arch_define: &str,
    defines: &[&str],
    bpf_dir: &Path,
    (program, object): (&str, &str),
    out_dir: &Path,
) {
    let output = Command::new(clang)
        .args([
            "-target",
            "bpf",
            "-g",
            "-O2",
            "-Wall",
            "-Werror",
            arch_define,
        ])
        .args(defines)
        .arg("-I")
        .arg(bpf_dir)
        .arg("-c")
        .arg(bpf_dir.join(format!("{program}.c")))
        .arg("-o")
        .arg(out_dir.join(format!("{object}.o")))
        .output();
    match output {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "`{}` failed to compile the eBPF program {program}.c ({}):\n{}\nSet WAKEMETER_EBPF_NO_CLANG=1 to build without them.",
            clang.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("could not run `{}`: {e}", clang.display()),
    }
}

/// Marks the build as having no kernel programs, loudly.
fn no_clang(reason: &str) {
    println!(
        "cargo:warning=wakemeter-ebpf: building WITHOUT eBPF programs: {reason}; EbpfSource::attach will fail with BuiltWithoutClang"
    );
    println!("cargo:rustc-cfg=wakemeter_ebpf_no_clang");
}

/// The first working clang: `$WAKEMETER_CLANG`, `clang`, then `clang-19`..`clang-14`.
fn find_clang() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(c) = env::var_os("WAKEMETER_CLANG") {
        candidates.push(PathBuf::from(c));
    }
    candidates.push(PathBuf::from("clang"));
    for v in (14..=19).rev() {
        candidates.push(PathBuf::from(format!("clang-{v}")));
    }
    candidates.into_iter().find(|c| runs(c))
}

fn runs(clang: &Path) -> bool {
    Command::new(clang)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Re-run this script when a directory of `PATH` changes, so that installing
/// clang later turns the kernel programs on without a `cargo clean`.
fn watch_path_for_clang() {
    println!("cargo:rerun-if-env-changed=PATH");
    if let Some(path) = env::var_os("PATH") {
        for dir in env::split_paths(&path) {
            if dir.is_dir() {
                println!("cargo:rerun-if-changed={}", dir.display());
            }
        }
    }
}
