//! `wakemeter record` and `wakemeter diff` against real processes, and
//! their bad input: a clear message, exit 2, nothing written.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Sleeper, bin, run};

/// A bound on waits and runs that only a hang reaches (a loaded machine
/// is slow, never wrong).
const LIMIT: Duration = Duration::from_secs(300);

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
                "--period",
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
    assert_eq!(lines[0]["schema_version"], 2);
    assert_eq!(lines[0]["target"]["pid"], a.pid());
    assert_eq!(lines[0]["target"]["name"], "sleep");
    assert_eq!(lines[0]["role"], "sleep 30");
    assert!(lines.len() >= 3, "{text}");
    let (last, middle) = lines[1..].split_last().unwrap();
    assert!(
        middle.iter().all(|l| l["record"] == "interval"
            && l["pid"] == a.pid()
            && l["groups"][0]["name"] == "sleep"),
        "{text}"
    );
    assert_eq!(last["record"], "end", "{text}");
    assert_eq!(last["reason"], "deadline", "{text}");
    assert_eq!(last["intervals"], middle.len(), "{text}");
    assert_no_partials(&d);

    let r = diff(&[&files[0], &files[2]], false);
    assert_eq!(r.code, Some(0), "{}", r.said());
    let out = r.stdout();
    for want in [
        "control: ",
        "variant: ",
        "test (over intervals): ",
        "totals (every recorded process",
        "  CPU  ",
        "memory (RSS)",
        "sleep [sleep 30]",
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
        (v["control"]["runs"].as_u64(), v["variant"]["runs"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(v["tested_over"], "runs");
    let total = v["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "cpu_percent")
        .unwrap();
    assert_eq!(total["control"]["runs"], 2, "{total}");
    let cpu = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["subject"] == "process" && r["metric"] == "cpu_percent")
        .unwrap();
    // Two different `sleep 30` processes have one identity: matched.
    assert_eq!(cpu["process"], "sleep [sleep 30]", "{cpu}");
    assert_eq!(cpu["control"]["runs"], 2, "{cpu}");
    assert_eq!(cpu["variant"]["runs"], 2, "{cpu}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_recordings_and_targets_are_clear_errors_and_write_nothing() {
    let d = dir("bad");
    let out = d.join("never.ndjson");
    let r = record(common::NO_SUCH_PID, &out);
    common::assert_no_such_pid(&r);
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
        assert_eq!(r.stderr().lines().count(), 1, "one line: {}", r.said());
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
        &header.replace("\"schema_version\":2,", "\"schema_version\":99,"),
        "future.ndjson:1: recording schema version 99; this wakemeter reads versions 1 to 2",
    );
    case(
        "headeronly.ndjson",
        &format!("{header}\n"),
        "headeronly.ndjson: no intervals recorded",
    );
    let lines: Vec<&str> = text.lines().collect();
    let mut broken = lines.clone();
    broken.insert(2, "{\"record\":\"interval\",\"duration_ns\":\"x\"}");
    case(
        "broken.ndjson",
        &broken.join("\n"),
        "broken.ndjson:3: malformed interval",
    );
    // Numbers JSON cannot hold as finite doubles, and negative rates.
    let cpu = regex_free_cpu(lines[1]);
    for (name, bad) in [("inf.ndjson", "1e999"), ("negative.ndjson", "-5.0")] {
        let mut l = lines.clone();
        let swapped = lines[1].replace(&cpu, &format!("\"cpu_percent\":{bad}"));
        l[1] = &swapped;
        case(name, &l.join("\n"), &format!("{name}:2: "));
    }
    let mut after_end = lines.clone();
    after_end.push(lines[1]);
    case(
        "afterend.ndjson",
        &after_end.join("\n"),
        &format!(
            "afterend.ndjson:{}: a line after the end record",
            lines.len() + 1
        ),
    );

    // Cut short: no end record, then a last line cut mid-way. Compared,
    // with a warning each.
    let n = lines.len();
    let partial = d.join("partial.ndjson");
    std::fs::write(&partial, format!("{}\n", lines[..n - 1].join("\n"))).unwrap();
    let r = diff(&[&good, &partial], false);
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert!(
        r.stderr()
            .contains("partial.ndjson: partial recording (no end record"),
        "{}",
        r.said()
    );
    let cut = d.join("cut.ndjson");
    let half = &lines[n - 2][..lines[n - 2].len() / 2];
    std::fs::write(&cut, format!("{}\n{half}", lines[..n - 2].join("\n"))).unwrap();
    let r = diff(&[&good, &cut], false);
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert!(
        r.stderr()
            .contains(&format!("cut.ndjson:{}: the last line is cut off", n - 1)),
        "{}",
        r.said()
    );
    assert!(!r.stdout().contains("inf") && !r.stdout().contains("NaN"));
    let r = diff(&[&good], false);
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(r.stderr().contains("give two recordings"), "{}", r.said());
    let _ = std::fs::remove_dir_all(&d);
}

/// The `"cpu_percent":…` of the process in an interval line.
fn regex_free_cpu(line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let cpu = &v["process"]["cpu_percent"];
    let text = format!("\"cpu_percent\":{cpu}");
    assert!(line.contains(&text), "{text} not in {line}");
    text
}

/// No temporary file is left in `d`.
fn assert_no_partials(d: &Path) {
    let left: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A copy of `sleep` named `name` (in `d`), started for 60 s and past its
/// exec, killed and reaped on drop.
struct Named(std::process::Child);

impl Named {
    fn start(d: &Path, name: &str) -> Named {
        let exe = d.join(name);
        if !exe.exists() {
            std::fs::copy("/bin/sleep", &exe).unwrap();
        }
        let c = Named(std::process::Command::new(&exe).arg("60").spawn().unwrap());
        let comm = format!("/proc/{}/comm", c.0.id());
        let start = std::time::Instant::now();
        while std::fs::read_to_string(&comm).unwrap_or_default() != format!("{name}\n") {
            assert!(start.elapsed() < LIMIT, "{name} never ran");
            std::thread::sleep(Duration::from_millis(5));
        }
        c
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `target` of every header line of a recording.
fn headers(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["record"] == "header")
        .map(|v| v["target"].clone())
        .collect()
}

#[test]
fn several_processes_are_one_file_of_sections_that_diff_pairs_by_name() {
    let d = dir("pod");
    let tag = std::process::id() % 10_000;
    let (proxy, app) = (format!("wmpx{tag}"), format!("wmap{tag}"));
    let control = d.join("control.ndjson");
    let variant = d.join("variant.ndjson");
    for out in [&control, &variant] {
        // One "pod": a proxy and an app, new processes each time.
        let (p, a) = (Named::start(&d, &proxy), Named::start(&d, &app));
        let r = run(
            bin()
                .args(["record", "--pid", &p.pid(), "--pid", &a.pid()])
                .args(["--seconds", "1", "--period", "0.2", "--no-ebpf", "-o"])
                .arg(out),
            LIMIT,
        );
        assert_eq!(r.code, Some(0), "{}", r.said());
        assert!(
            r.stderr().contains("intervals of 2 processes"),
            "{}",
            r.said()
        );
        let mut pids: Vec<u64> = headers(out)
            .iter()
            .map(|t| t["pid"].as_u64().unwrap())
            .collect();
        pids.sort_unstable();
        let mut want = vec![u64::from(p.0.id()), u64::from(a.0.id())];
        want.sort_unstable();
        assert_eq!(pids, want, "one header per process");
    }
    assert_no_partials(&d);

    let r = diff(&[&control, &variant], true);
    assert_eq!(r.code, Some(0), "{}", r.said());
    let v: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    for name in [&proxy, &app] {
        let identity = format!("{name} [{} 60]", d.join(name).display());
        let row = rows
            .iter()
            .find(|row| {
                row["process"] == identity.as_str()
                    && row["subject"] == "process"
                    && row["metric"] == "cpu_percent"
            })
            .unwrap_or_else(|| panic!("no {identity} process cpu_percent row: {v}"));
        // Paired by name across the two pods (their PIDs differ).
        assert!(
            !row["control"].is_null() && !row["variant"].is_null(),
            "{row}"
        );
    }
    let total = v["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "rss_bytes")
        .unwrap();
    // The total holds both processes: more than either one.
    let one = rows
        .iter()
        .find(|r| r["subject"] == "process" && r["metric"] == "rss_bytes")
        .unwrap();
    assert!(
        total["control"]["mean"].as_f64().unwrap() > one["control"]["mean"].as_f64().unwrap(),
        "{total} {one}"
    );
    let r = diff(&[&control, &variant], false);
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert!(
        r.stdout().contains("control: 1 run, 2 process sections"),
        "{}",
        r.said()
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_name_or_cgroup_that_matches_nothing_writes_nothing() {
    let d = dir("none");
    let out = d.join("run.ndjson");
    for (args, says) in [
        (
            ["--name", "no-such-proc-wm"],
            "wakemeter: no process named no-such-proc-wm",
        ),
        (
            ["--cgroup", "/no/such/cgroup-wm"],
            "wakemeter: cgroup /no/such/cgroup-wm does not exist",
        ),
    ] {
        let r = run(
            bin()
                .arg("record")
                .args(args)
                .args(["--seconds", "1", "-o"])
                .arg(&out),
            LIMIT,
        );
        assert_eq!(r.code, Some(2), "{}", r.said());
        assert!(r.stderr().starts_with(says), "{}", r.said());
        assert!(r.stdout.is_empty(), "{}", r.said());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0, "nothing written");
    }
    let _ = std::fs::remove_dir_all(&d);
}
