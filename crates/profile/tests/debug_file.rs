//! A stripped binary symbolized from its separate debug file: built here
//! with `cc -g`, its debug file split off (`objcopy --only-keep-debug`),
//! the binary stripped and given a `.gnu_debuglink`, the debug file put in
//! a directory of the `.build-id/xx/yyyy.debug` layout (Debian's `-dbgsym`
//! packages, debuginfod caches). Without that directory its frames are
//! `module+0x…`, and its pprof mapping carries the build ID and file offset
//! a symbol server needs; with it, the same frames have names (root: eBPF).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use wakemeter_profile::{Profile, ProfileOptions, Profiler, StackKind};

/// The functions of spin.c that only the debug file names (the stripped
/// binary has no `.symtab`, and they are not exported).
const NAMED_BY_DEBUG_FILE: [&str; 3] = ["spin_here", "light_work", "other_work"];

fn run(program: &str, args: &[&std::ffi::OsStr]) {
    let status = Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{program} runs (apt-get install binutils): {e}"));
    assert!(status.success(), "{program} {args:?} failed");
}

/// The GNU build ID of `file`, in hex, from `readelf -n`.
fn build_id(file: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(file)
        .output()
        .expect("readelf runs (apt-get install binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .map(|id| id.trim().to_owned())
        .expect("the binary has a GNU build ID")
}

/// Builds spin.c, splits off its debug file into `<tmp>/debug/.build-id/`
/// and strips it: (stripped binary, debug directory, build ID).
fn stripped_with_debug_dir() -> (PathBuf, PathBuf, String) {
    let built = common::build(
        "spin",
        "spin-stripped",
        &["-g", "-O1", "-fno-omit-frame-pointer", "-Wl,--build-id"],
    );
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let id = build_id(&built);
    let debug_dir = tmp.join("debug-dir");
    let by_id = debug_dir.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&by_id).expect("debug dir");
    let debug_file = by_id.join(format!("{}.debug", &id[2..]));
    run(
        "objcopy",
        &[
            "--only-keep-debug".as_ref(),
            built.as_os_str(),
            debug_file.as_os_str(),
        ],
    );
    run("strip", &["--strip-all".as_ref(), built.as_os_str()]);
    let link = format!("--add-gnu-debuglink={}", debug_file.display());
    run("objcopy", &[link.as_ref(), built.as_os_str()]);
    (built, debug_dir, id)
}

/// On-CPU stacks of `pid` until it has run `cpu_ns` of CPU time (99
/// samples a CPU-second), however long a loaded machine takes to give it.
fn capture(profiler: &Profiler, pid: u32, cpu_ns: u64) -> Profile {
    common::capture_until(profiler, pid, &ProfileOptions::new(StackKind::OnCpu), |w| {
        w.cpu_ns >= cpu_ns
    })
}

/// The module offsets of the frames in `module` and their names, if any.
fn frames_in(profile: &Profile, module: &str) -> Vec<(u64, Option<String>)> {
    profile
        .samples
        .iter()
        .flat_map(|s| &s.frames)
        .filter(|f| f.module.as_deref() == Some(module))
        .filter_map(|f| Some((f.module_offset?, f.function.clone())))
        .collect()
}

#[test]
#[ignore = "needs root"]
fn a_stripped_binary_is_named_from_its_debug_file() {
    let (program, debug_dir, id) = stripped_with_debug_dir();
    let module = program.display().to_string();
    let child = common::start(&program, &[common::PROGRAM_SECONDS]);

    // One CPU-second (about 99 samples): frames of the program to look up.
    let plain = capture(&Profiler::new(), child.pid(), 1_000_000_000);
    let unnamed = frames_in(&plain, &module);
    assert!(!unnamed.is_empty(), "no frame in {module}");
    for name in NAMED_BY_DEBUG_FILE {
        assert_eq!(
            plain.inclusive_share(name),
            0.0,
            "{name} named without debug file"
        );
    }
    // The pprof mapping says what a symbol server needs: the build ID, the
    // file offset, and that its frames still need names.
    let pprof = wakemeter_profile::pprof::to_pprof(&plain);
    let mapping = pprof
        .mapping
        .iter()
        .find(|m| pprof.string_table.get(m.filename as usize) == Some(&module))
        .expect("a mapping of the program");
    assert_eq!(pprof.string_table.get(mapping.build_id as usize), Some(&id));
    assert!(!mapping.has_functions);
    let main_text = plain
        .mappings
        .iter()
        .find(|m| m.path == module)
        .expect("the program's mapping");
    assert_eq!(mapping.file_offset, main_text.file_offset);
    assert!(mapping.memory_start < mapping.memory_limit);

    // Four CPU-seconds (about 400 samples): spin_here's 70% within four
    // standard errors. A fixed 3 s window caught 0.57 beside stress-ng,
    // where the program ran a fraction of those seconds.
    let named = capture(
        &Profiler::with_debug_dirs(&[debug_dir]),
        child.pid(),
        4_000_000_000,
    );
    let samples: u64 = named.samples.iter().map(|s| s.count).sum();
    let spin = named.inclusive_share("spin_here");
    let tolerance = common::share_tolerance(0.70, samples);
    assert!(
        (spin - 0.70).abs() <= tolerance,
        "spin_here {spin:.3}, expected 0.70 ± {tolerance:.3} at {samples} samples"
    );
    let names: std::collections::HashMap<u64, Option<String>> =
        frames_in(&named, &module).into_iter().collect();
    // Return addresses recur from one capture to the next: each offset shown
    // as `+0x…` before is named now.
    let again: Vec<_> = unnamed
        .iter()
        .filter(|(off, name)| name.is_none() && names.contains_key(off))
        .collect();
    assert!(!again.is_empty(), "no offset seen in both captures");
    for (off, _) in again {
        assert!(
            names.get(off).is_some_and(Option::is_some),
            "{module}+{off:#x} has no name from the debug file"
        );
    }
}
