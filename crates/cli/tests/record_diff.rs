//! `wakemeter record` and `wakemeter diff` against real processes, and
//! their bad input: a clear message, exit 2, nothing written.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Sleeper, bin, run};

const LIMIT: Duration = Duration::from_secs(30);

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wakemeter-record-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn record(pid: u32, out: &Path) -> common::Run {
    run(
        bin()
            .args([
                "record",
                "--pid",
                &pid.to_string(),
                "--seconds",
                "1",
                "--interval",
                "0.2",
                "--no-ebpf",
                "-o",
            ])
            .arg(out),
        LIMIT,
    )
}

fn diff(args: &[&Path], json: bool) -> common::Run {
    let mut c = bin();
    c.arg("diff");
    if json {
        c.arg("--json");
    }
    for a in args {
        c.arg(a);
    }
    run(&mut c, LIMIT)
}

#[test]
fn record_then_diff_runs_and_repeated_runs() {
    let d = dir("ok");
    let (a, b) = (Sleeper::new("30"), Sleeper::new("30"));
    let files: Vec<PathBuf> = (0..4).map(|i| d.join(format!("run{i}.ndjson"))).collect();
    for (i, f) in files.iter().enumerate() {
        let r = record(if i < 2 { a.pid() } else { b.pid() }, f);
        assert_eq!(r.code, Some(0), "{}", r.said());
        assert!(r.stdout.is_empty(), "{}", r.said());
    }
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["record"], "header");
    assert_eq!(lines[0]["schema_version"], 1);
    assert_eq!(lines[0]["target"]["pid"], a.pid());
    assert_eq!(lines[0]["target"]["name"], "sleep");
    assert!(lines.len() >= 2, "{text}");
    assert!(
        lines[1..]
            .iter()
            .all(|l| l["record"] == "interval" && l["groups"][0]["name"] == "sleep"),
        "{text}"
    );
    assert!(!d.join("run0.ndjson.partial").exists());

    let r = diff(&[&files[0], &files[2]], false);
    assert_eq!(r.code, Some(0), "{}", r.said());
    let out = r.stdout();
    for want in [
        "control: ",
        "variant: ",
        "cpu_percent_p95",
        "rss_bytes",
        "switches_per_sec",
        "thread sleep",
    ] {
        assert!(out.contains(want), "no {want:?} in\n{out}");
    }
    let r = diff(
        &[&files[0], &files[1], Path::new("--"), &files[2], &files[3]],
        true,
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    let v: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(
        (v["control_runs"].as_u64(), v["variant_runs"].as_u64()),
        (Some(2), Some(2))
    );
    let cpu = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["subject"] == "process" && r["metric"] == "cpu_percent")
        .unwrap();
    assert_eq!(cpu["control"]["runs"], 2, "{cpu}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_recordings_and_targets_are_clear_errors_and_write_nothing() {
    let d = dir("bad");
    let out = d.join("never.ndjson");
    let r = record(4_294_967_000, &out);
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert_eq!(
        r.stderr(),
        "wakemeter: no process with pid 4294967000\n",
        "{}",
        r.said()
    );
    assert!(
        std::fs::read_dir(&d).unwrap().next().is_none(),
        "something was written"
    );

    let good = d.join("good.ndjson");
    let s = Sleeper::new("30");
    assert_eq!(record(s.pid(), &good).code, Some(0));
    let text = std::fs::read_to_string(&good).unwrap();
    let case = |name: &str, content: &str, says: &str| {
        let p = d.join(name);
        std::fs::write(&p, content).unwrap();
        let r = diff(&[&good, &p], false);
        assert_eq!(r.code, Some(2), "{}", r.said());
        assert!(r.stderr().contains(says), "{name}: {}", r.said());
        assert!(r.stdout.is_empty(), "{}", r.said());
    };
    let header = text.lines().next().unwrap();
    case(
        "empty.ndjson",
        "",
        "empty.ndjson: empty; not a wakemeter recording",
    );
    case(
        "text.ndjson",
        "hello\n",
        "text.ndjson:1: not a wakemeter recording (not JSON",
    );
    case(
        "future.ndjson",
        &header.replace("\"schema_version\":1,", "\"schema_version\":99,"),
        "future.ndjson: recording schema version 99; this wakemeter reads version 1",
    );
    case(
        "headeronly.ndjson",
        &format!("{header}\n"),
        "headeronly.ndjson: no intervals recorded",
    );
    let mut broken: Vec<&str> = text.lines().collect();
    broken.insert(2, "{\"record\":\"interval\",\"duration_ns\":\"x\"}");
    case(
        "broken.ndjson",
        &broken.join("\n"),
        "broken.ndjson:3: malformed interval",
    );
    let r = diff(&[&good], false);
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(r.stderr().contains("give two recordings"), "{}", r.said());
    let _ = std::fs::remove_dir_all(&d);
}
