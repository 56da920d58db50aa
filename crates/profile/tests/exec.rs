//! A target that execs during the capture (root: eBPF; x86_64, where user
//! stacks are unwound from tables built at attach).
#![cfg(target_arch = "x86_64")]

mod common;

use std::collections::HashSet;

use wakemeter_profile::{ProfileOptions, Profiler, StackKind};

/// The capture goes on across the exec, and the new image's stacks are
/// never made from the old image's unwind rules: every user function they
/// name is on the new image's real call chain. Within a second of the exec
/// the capture builds the table again from the new image's mappings, so
/// most of its stacks are whole again (it is built without frame pointers:
/// the frame-pointer walk alone would not reach main).
#[test]
#[ignore = "needs root"]
fn after_an_exec_no_stack_is_unwound_with_the_old_table() {
    let flags = ["-g", "-O1", "-fomit-frame-pointer"];
    let first = common::build("execs", "execs-first", &flags);
    let second = common::build("execs", "execs-second", &[&flags[..], &["-DPAD"]].concat());
    // Without address randomization the second image is mapped where the
    // first was (setarch -R; the personality survives the exec).
    let setarch = std::path::Path::new("/usr/bin/setarch");
    let child = common::start(
        setarch,
        &[
            "-R",
            first.to_str().expect("utf-8 path"),
            second.to_str().expect("utf-8 path"),
        ],
    );
    // Until the new image has run for 1.5 CPU-seconds (its CPU time
    // counted from when the exec is first seen), however long a loaded
    // machine takes.
    let pid = child.pid();
    let exec_seen_at = std::cell::Cell::new(None::<u64>);
    let profile = common::capture_until_work_of(
        &Profiler::new(),
        pid,
        &ProfileOptions::new(StackKind::OnCpu),
        || {
            let cpu_ns = common::Work::of(pid).cpu_ns;
            let second = std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|exe| exe.ends_with("execs-second"));
            if second && exec_seen_at.get().is_none() {
                exec_seen_at.set(Some(cpu_ns));
            }
            common::Work {
                cpu_ns: exec_seen_at.get().map_or(0, |at| cpu_ns.saturating_sub(at)),
                voluntary_switches: 0,
            }
        },
        |w| w.cpu_ns >= 1_500_000_000,
    );
    assert!(
        !profile.is_partial(),
        "the target still runs after its exec"
    );
    // The first image's 1.5 s are in the profile too, but its addresses
    // are symbolized with the new image's mappings (a limitation): only
    // the new image's functions are checked by name.
    let after = profile.inclusive_share("burn_after");
    println!("burn_after {after:.2}");
    assert!(after > 0.3, "{after}");
    let real: HashSet<&str> = [
        "burn_after",
        "spin_after",
        "main",
        "now",
        "clock_gettime",
        "__clock_gettime",
        "__GI___clock_gettime",
        "__vdso_clock_gettime",
        "__libc_start_call_main",
        "__libc_start_main_impl",
        "__libc_start_main",
        "_start",
    ]
    .into_iter()
    .collect();
    for s in profile
        .samples
        .iter()
        .filter(|s| s.contains_function("burn_after") || s.contains_function("spin_after"))
    {
        for f in s.frames.iter().filter(|f| !f.kernel) {
            let name = f.function.as_deref().unwrap_or("?");
            assert!(
                real.contains(name),
                "{name} in a stack of the new image: {:?}",
                s.frames.iter().map(|f| f.label()).collect::<Vec<_>>()
            );
        }
    }
    let whole = profile
        .share_where(|s| s.contains_function("burn_after") && s.contains_function("main"))
        / after;
    println!("burn_after stacks reaching main: {whole:.2}");
    assert!(whole > 0.3, "{whole} of the new image's stacks reach main");
}
