//! Thousands of distinct stacks are all kept: no stack lost to another
//! stack that hashed to the same place (root: eBPF).

mod common;

use std::collections::HashSet;
use wakemeter_profile::{ProfileOptions, ProfileWarning, Profiler, StackKind};

/// manystacks.c's 2048 distinct user stacks, each blocking many times: an
/// off-CPU capture keeps every one of them (far below the map's 8192
/// capacity) and reports nothing lost.
#[test]
#[ignore = "needs root"]
fn two_thousand_distinct_stacks_lose_none() {
    let program = common::build(
        "manystacks",
        "manystacks-fp",
        &["-g", "-O1", "-fno-omit-frame-pointer"],
    );
    let child = common::start(&program, &[]);
    // Each nanosleep is a voluntary switch: 6,000 of them walk the 2,048
    // paths about three times over, whatever time that takes.
    let profile = common::capture_until(
        &Profiler::new(),
        child.pid(),
        &ProfileOptions::new(StackKind::OffCpu),
        |w| w.voluntary_switches >= 6000,
    );
    let switches: u64 = profile.samples.iter().map(|s| s.count).sum();
    // Distinct user paths through descend: the sequence of left/right.
    let paths: HashSet<Vec<&str>> = profile
        .samples
        .iter()
        .filter(|s| s.contains_function("descend"))
        .map(|s| {
            s.frames
                .iter()
                .filter_map(|f| f.function.as_deref())
                .filter(|n| *n == "left" || *n == "right")
                .collect()
        })
        .collect();
    println!(
        "{switches} switches, {} distinct left/right paths, warnings {:?}",
        paths.len(),
        profile.warnings
    );
    assert!(switches > 4000, "too few switches: {switches}");
    assert!(paths.len() >= 2000, "{} distinct paths", paths.len());
    assert!(
        !profile
            .warnings
            .iter()
            .any(|w| matches!(w, ProfileWarning::StacksLost { .. })),
        "{:?}",
        profile.warnings
    );
    assert!(
        !profile
            .samples
            .iter()
            .any(|s| s.gaps.contains(&wakemeter_profile::StackGap::UserLost)
                || s.gaps.contains(&wakemeter_profile::StackGap::KernelLost)),
        "a sample without its stack"
    );
}
