//! `wakemeter ab` end to end, with a stand-in load: a command that
//! prints the output `wrk` printed here (so the parser and the recording
//! of the load are exercised without a web server), and side commands
//! that start the processes to record.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{bin, run};

#[test]
fn ab_starts_each_side_records_the_load_window_and_compares() {
    let d = std::env::temp_dir().join(format!("wakemeter-ab-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    // A copy of sleep with a name of its own, so that only the processes
    // the sides start are selected.
    let name = format!("wmab{}", std::process::id() % 100_000);
    let exe = d.join(&name);
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let wrk = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/load/wrk-latency.txt"
    );
    let load = format!("sleep 2; cat {wrk}");
    let exe = exe.display().to_string();
    let r = run(
        bin()
            .args(["ab", "--name", &name, "--runs", "2", "--no-ebpf", "--json"])
            .args(["--period", "200ms", "--settle", "300ms", "--load", &load])
            .args(["--control", &format!("exec {exe} 60")])
            // The variant has a second process (a "proxy") of the same name.
            .args(["--variant", &format!("{exe} 61 & exec {exe} 60")])
            .arg("--dir")
            .arg(&d),
        Duration::from_secs(180),
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    let v: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(v["tested_over"], "runs", "{v}");
    assert_eq!(v["control"]["runs"], 2);
    assert_eq!(v["variant"]["processes"], 4, "two per run: {v}");
    let totals = v["totals"].as_array().unwrap();
    let rps = totals
        .iter()
        .find(|r| r["metric"] == "requests_per_sec")
        .unwrap();
    assert_eq!(rps["control"]["mean"], 43358.42, "{rps}");
    let rows = v["rows"].as_array().unwrap();
    // The "proxy" is matched by its role, and only the variant has it:
    // the shell exec'd into `60`, which became its parent, of the same
    // name, so the parent's command line comes first.
    let proxy = rows
        .iter()
        .find(|r| {
            r["process"] == format!("{name} [{exe} 60 > {exe} 61]") && r["metric"] == "rss_bytes"
        })
        .unwrap_or_else(|| panic!("no proxy row: {v}"));
    assert_eq!(proxy["verdict"], "only_in_variant", "{proxy}");
    // Each run is a complete recording with the load's output in it.
    for f in ["control-1", "control-2", "variant-1", "variant-2"] {
        let text = std::fs::read_to_string(d.join(format!("{f}.ndjson"))).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let load = lines.iter().find(|l| l["record"] == "load").unwrap();
        assert_eq!(load["tool"], "wrk", "{f}");
        assert_eq!(load["requests"], 130_859, "{f}");
        assert!(load["output"].as_str().unwrap().contains("Requests/sec"));
        // Recorded over the load window (2 s of sleep): intervals of
        // 200 ms, so a handful, not the 60 s the processes live.
        let intervals = lines.iter().filter(|l| l["record"] == "interval").count();
        assert!(intervals >= 4, "{f}: {intervals} intervals");
        assert_eq!(lines.last().unwrap()["reason"], "load_done", "{f}");
    }
    // The sides' processes were stopped after each run.
    let left = std::process::Command::new("pgrep")
        .args(["-x", &name])
        .output()
        .unwrap();
    assert!(left.stdout.is_empty(), "left running: {left:?}");
    // Alternating sides: the stderr says which ran in which order.
    let err = r.stderr();
    let c2 = err.find("control, run 2").unwrap();
    let v2 = err.find("variant, run 2").unwrap();
    assert!(v2 < c2, "run 2 starts with the variant: {err}");
    let _ = std::fs::remove_dir_all(&d);
}
