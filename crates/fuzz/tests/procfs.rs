//! Fuzzes the `/proc` and `/sys` parsers of `wakemeter-procfs`, the bytes
//! every sample reads, with the files the kernel writes (`corpus/procfs`)
//! mutated and with arbitrary bytes. Nothing may panic, whatever the bytes;
//! what is not a file of that kind is `None`, never a number read from the
//! wrong place.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use wakemeter_fuzz::{PROCFS_TOKENS, cases, corpus, inputs};
use wakemeter_procfs::{maps, parse};

/// Every parser over `bytes`; returns what the `stat` parsers read, for
/// the checks below.
fn parse_all(bytes: &[u8]) -> (Option<u64>, Option<u8>) {
    let _ = parse::schedstat(bytes);
    let _ = parse::statm_resident_pages(bytes);
    let _ = parse::status_switches(bytes);
    let _ = parse::status_name(bytes);
    for key in [&b"Tgid"[..], b"Threads", b"VmHWM", b"State", b""] {
        let _ = parse::status_field(bytes, key);
        let _ = parse::status_line(bytes, key);
    }
    let _ = parse::status_hex(bytes, b"CapEff");
    let _ = parse::stat_start_ticks(bytes);
    let _ = parse::stat_parent(bytes);
    let _ = parse::boot_time_secs(bytes);
    let _ = parse::comm(bytes);
    let _ = parse::cmdline(bytes);
    let _ = parse::task_syscall(bytes);
    let mut tids = Vec::new();
    parse::dirent_tids(bytes, &mut tids);
    let text = String::from_utf8_lossy(bytes);
    let _ = parse::pid_namespace_inode(&text);
    let _ = parse::cgroup2_mount_point(&text);
    let _ = parse::cgroup_procs(&text).count();
    for m in maps::lines(&text) {
        assert!(text.contains(m.path));
    }
    (parse::stat_cpu_ticks(bytes), parse::stat_state(bytes))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn proc_files_of_any_bytes_parse_or_are_refused_without_panicking(
        bytes in inputs(corpus("procfs"), PROCFS_TOKENS),
    ) {
        let (ticks, state) = parse_all(&bytes);
        // What follows the last ')' decides: a text without one has no
        // fields 3 and on, so neither a state nor CPU ticks.
        if !bytes.contains(&b')') {
            prop_assert_eq!(ticks, None);
            prop_assert_eq!(state, None);
        }
    }
}

#[test]
fn the_seed_corpus_parses_as_the_kernel_wrote_it() {
    let seeds = corpus("procfs");
    assert!(seeds.len() >= 9, "{} seeds", seeds.len());
    for seed in &seeds {
        parse_all(seed);
    }
    let stat =
        b"4242 (nginx: worker) S 4241 4241 4241 0 -1 4194624 1200 0 0 0 250 75 0 0 20 0 1 0 99123";
    assert!(seeds.iter().any(|s| s.starts_with(stat)));
    let stat = seeds.iter().find(|s| s.starts_with(stat)).unwrap();
    assert_eq!(parse::stat_cpu_ticks(stat), Some(325));
    assert_eq!(parse::stat_start_ticks(stat), Some(99123));
    let status = seeds.iter().find(|s| s.starts_with(b"Name:")).unwrap();
    assert_eq!(parse::status_switches(status), Some((17, 3)));
    assert_eq!(parse::status_hex(status, b"CapEff"), Some(0x1ff_ffff_ffff));
}
