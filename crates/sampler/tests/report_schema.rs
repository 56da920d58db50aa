//! The report is a saved format: a report written by this version must read
//! back as it was, and a report of the committed example (schema version
//! `REPORT_SCHEMA_VERSION`) must keep reading, field for field. Renaming or
//! removing a field without raising the schema version fails here.
//!
//! Regenerate the example after a deliberate schema change (and a version
//! bump) with `WAKEMETER_BLESS=1 cargo test -p wakemeter --test report_schema`.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use wakemeter::{REPORT_SCHEMA_VERSION, Report, SamplerBuilder, Thresholds};

fn example_path(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/report-v{version}.json"))
}

/// A report with every kind of record a sampler makes without eBPF: threads,
/// a loop and a sleep site, findings with evidence, warnings.
fn live_report() -> Report {
    let sampler = SamplerBuilder::new()
        .with_thresholds(
            Thresholds::default()
                .with_window(Duration::from_millis(200))
                .with_min_window(Duration::from_millis(20))
                .with_busy_poll_wakeups_per_sec(100.0),
        )
        .build()
        .unwrap();
    let mut spin = sampler.loop_probe("spin").unwrap();
    let mut nap = sampler.sleep_probe("nap").unwrap();
    for _ in 0..5 {
        for _ in 0..2000 {
            spin.before_wait(Some(Duration::ZERO));
            spin.after_wait(0);
        }
        nap.sleep(Duration::from_micros(200));
        std::thread::sleep(Duration::from_millis(10));
        sampler.sample_now().unwrap();
    }
    sampler.report()
}

#[test]
fn a_new_report_round_trips_and_says_what_made_it() {
    let report = live_report();
    assert_eq!(report.schema_version, REPORT_SCHEMA_VERSION);
    assert_eq!(report.library_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(report.target.pid, std::process::id());
    assert!(!report.findings.is_empty(), "the busy loop is found");
    let json = serde_json::to_string(&report).unwrap();
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
}

#[test]
fn the_committed_example_reads_back_field_for_field() {
    let path = example_path(REPORT_SCHEMA_VERSION);
    if std::env::var_os("WAKEMETER_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&live_report()).unwrap();
        std::fs::write(&path, text + "\n").unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let saved: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(saved["schema_version"], Value::from(REPORT_SCHEMA_VERSION));
    let report: Report = serde_json::from_value(saved.clone())
        .expect("the example of the current schema must deserialize");
    // Serializing again gives the same document: no field was renamed,
    // dropped or silently defaulted (a missing `Option` field would come
    // back as an extra `null`, an unknown one would be gone).
    assert_eq!(serde_json::to_value(&report).unwrap(), saved);
    // And the example holds every kind of record, so the check above covers them.
    assert!(!report.findings.is_empty());
    let interval = report.interval.expect("an interval");
    assert!(!interval.loops.is_empty() && !interval.sleeps.is_empty());
    assert!(!interval.threads.is_empty());
    assert!(!report.thread_groups.is_empty());
}

/// A version 1 report (every thread listed, no groups) still reads: as
/// version 2 with nothing folded and no groups.
#[test]
fn a_version_1_report_still_reads() {
    let text = std::fs::read_to_string(example_path(1)).unwrap();
    let saved: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(saved["schema_version"], Value::from(1));
    let report: Report = serde_json::from_value(saved.clone()).unwrap();
    assert_eq!(report.schema_version, 1);
    assert!(report.thread_groups.is_empty());
    assert_eq!(report.threads_folded, 0);
    let threads = report.interval.unwrap().threads;
    assert_eq!(
        threads.len(),
        saved["interval"]["threads"].as_array().unwrap().len()
    );
    assert_eq!(
        report.config.report_threads,
        wakemeter::config::DEFAULT_REPORT_THREADS
    );
}

/// Thresholds added after a report was written read as their defaults, so
/// recordings made by an earlier build of the same schema keep reading.
#[test]
fn a_report_without_a_newer_threshold_reads_with_its_default() {
    let text = std::fs::read_to_string(example_path(REPORT_SCHEMA_VERSION)).unwrap();
    let mut saved: Value = serde_json::from_str(&text).unwrap();
    let thresholds = saved["config"]["thresholds"].as_object_mut().unwrap();
    assert!(thresholds.remove("cpu_min_window").is_some());
    let report: Report = serde_json::from_value(saved).unwrap();
    assert_eq!(
        report.config.thresholds.cpu_min_window,
        Thresholds::default().cpu_min_window
    );
}
