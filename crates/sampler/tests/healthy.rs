//! A healthy idle process produces no findings (its own test binary: no
//! other test's workload shares the process).
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::workloads::*;

#[test]
fn healthy_idle_process_has_no_findings() {
    let s = sampler(short_thresholds());
    let (_loop, _client) = efficient_loop(&s, "efficient");
    let mut slow = s.sleep_probe("sleep-200ms").unwrap();
    let _calm = Worker::spawn("calm", move |stop| {
        while !stopped(&stop) {
            slow.sleep(Duration::from_millis(200));
        }
    });
    let f = findings_after(&s, 3.0);
    assert!(f.is_empty(), "healthy process flagged: {f:#?}");
    let r = s.report();
    assert!(r.findings.is_empty());
    let json = serde_json::to_string(&r).unwrap();
    let back: wakemeter::Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, r);
}
