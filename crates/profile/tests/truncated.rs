//! Stacks through code whose `%rbp` holds data, not a frame pointer: the
//! frame-pointer walk reads data words as return addresses; the profile
//! must cut the stack there with a `[truncated]` marker, never show them
//! as callers (root: eBPF; x86_64: the program sets `%rbp` in assembly).
#![cfg(target_arch = "x86_64")]

mod common;

/// One capture at a time: the programs need the CPUs (two cores here).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

use wakemeter_profile::{
    Profile, ProfileOptions, Profiler, StackGap, StackKind, StopReason, UnwindStop,
};

/// The words garbage.c leaves where a frame-pointer walk looks for return
/// addresses: a sleep's `tv_nsec` and a buffer's bytes.
const DATA_WORDS: [u64; 2] = [0x4c4b40, 0x6161_6161_6161_6161];

fn capture(kind: StackKind) -> Profile {
    let program = common::build(
        "garbage",
        "garbage-nofp",
        &["-g", "-O1", "-fomit-frame-pointer", "-mno-red-zone"],
    );
    let child = common::start(&program, &[]);
    // Both halves of its loop, many times (it sleeps 5 ms, then spins),
    // however long a loaded machine takes.
    common::capture_until(
        &Profiler::new(),
        child.pid(),
        &ProfileOptions::new(kind),
        |w| w.cpu_ns >= 500_000_000 && w.voluntary_switches >= 100,
    )
}

/// Checks that the stacks through `function` were cut, with the marker, and
/// that no data word is a frame anywhere.
fn assert_cut(profile: &Profile, function: &str) {
    for s in &profile.samples {
        for f in &s.frames {
            assert!(
                !DATA_WORDS.contains(&f.address) && !DATA_WORDS.contains(&(f.address - 1)),
                "data word shown as a frame: {:?}",
                s.frames
            );
        }
    }
    let through: Vec<_> = profile
        .samples
        .iter()
        .filter(|s| s.contains_function(function))
        .collect();
    assert!(!through.is_empty(), "no stack through {function}");
    let weight: u64 = through.iter().map(|s| s.count).sum();
    let cut: u64 = through
        .iter()
        .filter(|s| s.gaps.contains(&StackGap::UserTruncated))
        .map(|s| s.count)
        .sum();
    // Every stack from inside the assembly is cut; a sample just before or
    // after it (%rbp not yet or no longer set) may be whole.
    assert!(
        cut * 10 >= weight * 8,
        "{cut} of {weight} stacks through {function} marked truncated"
    );
    // Each cut stack is counted with the module it stopped in and why; the
    // stacks through `function` stop in the test program itself.
    let stopped: u64 = profile.unwind_stops.iter().map(|s| s.events).sum();
    let all_cut: u64 = profile
        .samples
        .iter()
        .filter(|s| s.gaps.contains(&StackGap::UserTruncated))
        .map(|s| s.count)
        .sum();
    assert_eq!(stopped, all_cut, "{:?}", profile.unwind_stops);
    let in_program: u64 = profile
        .unwind_stops
        .iter()
        .filter(|s| {
            s.module
                .as_deref()
                .is_some_and(|m| m.ends_with("garbage-nofp"))
        })
        .map(|s| s.events)
        .sum();
    assert!(
        in_program >= cut,
        "{in_program} stops in the program, {cut} cut stacks through {function}: {:?}",
        profile.unwind_stops
    );
    eprintln!("unwind stops: {:?}", profile.unwind_stops);
    let lines = wakemeter_profile::folded::to_folded_lines(profile);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("[truncated]") && l.contains(function)),
        "{lines:?}"
    );
}

#[test]
#[ignore = "needs root"]
fn off_cpu_stacks_end_at_data_words() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let profile = capture(StackKind::OffCpu);
    assert_cut(&profile, "sleep_with_data_in_rbp");
}

#[test]
#[ignore = "needs root"]
fn on_cpu_stacks_end_at_data_words() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let profile = capture(StackKind::OnCpu);
    assert_cut(&profile, "spin_with_data_in_rbp");
}

/// A stack deeper than the frames kept: the kernel's walk stops at the
/// depth limit, and the profile counts it as `too_deep` in the program.
#[test]
#[ignore = "needs root"]
fn a_stack_too_deep_is_counted_with_its_reason() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let program = common::build("deep", "deep-nofp", &["-g", "-O1", "-fomit-frame-pointer"]);
    let child = common::start(&program, &["600"]);
    // Enough CPU time for well over 50 samples at the default frequency,
    // however long a loaded machine takes to give it.
    let profile = common::capture_until(
        &Profiler::new(),
        child.pid(),
        &ProfileOptions::new(StackKind::OnCpu),
        |w| w.cpu_ns >= 1_500_000_000,
    );
    eprintln!("unwind stops: {:?}", profile.unwind_stops);
    let samples: u64 = profile.samples.iter().map(|s| s.count).sum();
    let deep: u64 = profile
        .unwind_stops
        .iter()
        .filter(|s| {
            s.reason == StopReason::Unwinder(UnwindStop::TooDeep)
                && s.module
                    .as_deref()
                    .is_some_and(|m| m.ends_with("deep-nofp"))
        })
        .map(|s| s.events)
        .sum();
    // Nearly every sample is at the bottom of the recursion.
    assert!(samples > 50, "{samples} samples");
    assert!(
        deep * 10 >= samples * 9,
        "{deep} of {samples}: {:?}",
        profile.unwind_stops
    );
    let truncated: u64 = profile
        .samples
        .iter()
        .filter(|s| s.gaps.contains(&StackGap::UserTruncated))
        .map(|s| s.count)
        .sum();
    assert!(truncated >= deep, "{truncated} truncated, {deep} too deep");
}
