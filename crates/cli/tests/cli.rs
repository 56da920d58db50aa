//! The `wakemeter` binary end to end.
#![cfg(target_os = "linux")]

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wakemeter"))
}

#[test]
fn demo_flags_the_wasteful_twins_and_writes_the_report() {
    let dir = std::env::temp_dir().join(format!("wakemeter-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.json");
    let out = bin()
        .args(["demo", "--seconds", "5", "--report"])
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("[  5/5 s]"), "progress shown:\n{stdout}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let checks = doc["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 5);
    assert!(checks.iter().all(|c| c["passed"] == true), "{checks:?}");
    let findings = doc["report"]["findings"].as_array().unwrap();
    assert!(findings.iter().any(|f| f["kind"] == "busy_poller"));
    assert!(findings.iter().any(|f| f["kind"] == "sleep_overhead"));
    assert!(
        doc["report"]["interval"]["threads"]
            .as_array()
            .unwrap()
            .len()
            >= 5
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn demo_rejects_bad_arguments_clearly() {
    let out = bin().args(["demo", "--seconds", "1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seconds must be between 5 and 600"));
}

#[test]
fn watch_another_process_then_it_exits() {
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let out = bin()
        .args([
            "watch",
            "--pid",
            &child.id().to_string(),
            "--every",
            "1",
            "--seconds",
            "2",
            "--json",
            "--no-ebpf",
        ])
        .output()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["interval"]["process"]["pid"], child.id());
}

#[test]
fn watch_a_missing_pid_is_a_clear_error() {
    let out = bin()
        .args(["watch", "--pid", "4294967000", "--no-ebpf"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no process with pid 4294967000"));
}
