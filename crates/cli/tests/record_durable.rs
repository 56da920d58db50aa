//! Recordings that survive their end: signals, kills, and outputs that
//! are not regular files; command-line durations at their maxima.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Sleeper, bin, run, run_until};

const LIMIT: Duration = Duration::from_secs(60);

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wakemeter-durable-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn record_cmd(pid: u32, seconds: &str, out: &Path) -> Command {
    let mut c = bin();
    c.args(["record", "--pid", &pid.to_string(), "--seconds", seconds])
        .args(["--period", "0.1", "--no-ebpf", "-o"])
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits (generously) until `path` holds at least `n` interval lines.
fn wait_for_intervals(path: &Path, n: usize) {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.matches("\"record\":\"interval\"").count() >= n {
            return;
        }
        assert!(
            start.elapsed() < LIMIT,
            "{} never had {n} intervals",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child we started; no memory involved.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

#[test]
fn sigint_and_sigterm_end_a_recording_cleanly_and_a_kill_leaves_a_readable_partial() {
    let d = dir("signals");
    let s = Sleeper::new("120");
    for (sig, name) in [(libc::SIGINT, "int"), (libc::SIGTERM, "term")] {
        let out = d.join(format!("{name}.ndjson"));
        let child = record_cmd(s.pid(), "3600", &out).spawn().unwrap();
        // Intervals reach the file as they are taken.
        let tmp = d.join(format!("{name}.ndjson.partial-{}", child.id()));
        wait_for_intervals(&tmp, 2);
        signal(child.id(), sig);
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(err.contains("interrupted"), "{err}");
        let l = lines(&out);
        let end = l.last().unwrap();
        assert_eq!(end["record"], "end");
        assert_eq!(end["reason"], "interrupted");
        assert!(end["intervals"].as_u64().unwrap() >= 2, "{end}");
        assert!(!tmp.exists());
    }
    // SIGKILL: nothing can run, but every interval taken is on disk.
    let out = d.join("kill.ndjson");
    let mut child = record_cmd(s.pid(), "3600", &out).spawn().unwrap();
    let tmp = d.join(format!("kill.ndjson.partial-{}", child.id()));
    wait_for_intervals(&tmp, 3);
    child.kill().unwrap();
    child.wait().unwrap();
    let r = run(bin().arg("diff").arg(&tmp).arg(d.join("int.ndjson")), LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert!(
        r.stderr().contains("partial recording (no end record"),
        "{}",
        r.said()
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn outputs_that_are_not_regular_files_are_written_directly_or_refused() {
    let d = dir("outputs");
    let s = Sleeper::new("120");
    // A directory, a socket-less special: refused in one line, untouched.
    let r = run(&mut record_cmd(s.pid(), "1", &d), LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(r.stderr().contains("is a directory"), "{}", r.said());
    assert_eq!(r.stderr().lines().count(), 1, "{}", r.said());
    // A symlink to a file: refused, the link and its file kept.
    let file = d.join("file.txt");
    std::fs::write(&file, "keep me").unwrap();
    let link = d.join("link.ndjson");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let r = run(&mut record_cmd(s.pid(), "1", &link), LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(r.stderr().contains("is a symbolic link"), "{}", r.said());
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    // A FIFO: written to as it is, streaming, and still a FIFO after.
    let fifo = d.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let r = run(&mut record_cmd(s.pid(), "1", &fifo), LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.said());
    let text = reader.join().unwrap();
    assert!(
        text.trim_end().ends_with('}') && text.contains("\"record\":\"end\""),
        "{text}"
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    // /dev/stdout: the recording is the standard output.
    let r = run(
        &mut record_cmd(s.pid(), "1", Path::new("/dev/stdout")),
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    let out = r.stdout();
    assert!(out.starts_with("{\"record\":\"header\""), "{}", r.said());
    assert!(out.contains("\"record\":\"end\""), "{}", r.said());
    let _ = std::fs::remove_dir_all(&d);
}

/// As root: `record -o /dev/null`, where /dev is a scratch directory
/// bind-mounted in a private mount namespace (the real /dev/null is never
/// touched), leaves the scratch null device a device.
#[test]
fn dev_null_stays_a_device_as_root() {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("unshare").arg("--help").output().is_err() {
        eprintln!("skipped: needs root and unshare");
        return;
    }
    let d = dir("devnull");
    let scratch = d.join("dev");
    std::fs::create_dir_all(&scratch).unwrap();
    let null = scratch.join("null");
    let c = std::ffi::CString::new(null.to_str().unwrap()).unwrap();
    // SAFETY: mknod(2) with a valid path; makes a character device 1:3
    // (what /dev/null is) inside our scratch directory.
    let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(made, 0, "mknod: {}", std::io::Error::last_os_error());
    let s = Sleeper::new("120");
    let script = format!(
        "mount --make-rprivate / && mount --bind {} /dev && exec {} record --pid {} \
         --seconds 1 --period 0.2 --no-ebpf -o /dev/null",
        scratch.display(),
        env!("CARGO_BIN_EXE_wakemeter"),
        s.pid()
    );
    let r = run(
        Command::new("unshare").args(["-m", "sh", "-c", &script]),
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::symlink_metadata(&null).unwrap().file_type();
    assert!(
        t.is_char_device(),
        "the scratch /dev/null was replaced: {t:?}"
    );
    let left: Vec<_> = std::fs::read_dir(&scratch).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "nothing written beside it: {left:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn durations_at_and_beyond_their_maxima_are_checked_not_a_panic() {
    let s = Sleeper::new("120");
    let pid = s.pid().to_string();
    let huge = "18446744073709551615";
    let d = dir("maxima");
    let out = d.join("r.ndjson");
    let out = out.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["watch", "--pid", &pid, "--seconds", huge],
        vec!["watch", "--name", "sleep", "--seconds", huge],
        vec!["top", "--pid", &pid, "--seconds", huge],
        vec!["record", "--pid", &pid, "--seconds", huge, "-o", out],
        vec!["record", "--pid", &pid, "--seconds", "86401", "-o", out],
        vec!["record", "--pid", &pid, "--period", huge, "-o", out],
        vec!["ab", "--pid", &pid, "--load", "true", "--settle", huge],
        vec![
            "ab",
            "--pid",
            &pid,
            "--load",
            "true",
            "--load-timeout",
            huge,
        ],
        vec!["ab", "--pid", &pid, "--load", "true", "--runs", "101"],
        vec!["profile", "--pid", &pid, "--on-cpu", "--seconds", huge],
        vec!["profile", "--pid", &pid, "--on-cpu", "--seconds", "1e309"],
    ];
    for args in cases {
        let r = run(bin().args(&args), LIMIT);
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.said());
        assert!(!r.stderr().contains("panicked"), "{args:?}: {}", r.said());
    }
    // The largest accepted --seconds runs (and ends when the target does).
    let short = Sleeper::new("2");
    let other = Sleeper::new("120");
    let opid = other.pid().to_string();
    let max = "31536000";
    let spid = short.pid().to_string();
    for args in [
        vec![
            "watch",
            "--pid",
            &spid,
            "--seconds",
            max,
            "--no-ebpf",
            "--json",
        ],
        vec![
            "watch",
            "--pid",
            &opid,
            "--pid",
            &pid,
            "--seconds",
            "1",
            "--no-ebpf",
        ],
    ] {
        let r = run(bin().args(&args), LIMIT);
        assert!(matches!(r.code, Some(0 | 1)), "{args:?}: {}", r.said());
        assert!(!r.stderr().contains("panicked"), "{args:?}: {}", r.said());
    }
    let r = run_until(
        bin()
            .args([
                "watch",
                "--name",
                "sleep",
                "--seconds",
                max,
                "--every",
                "1",
                "--no-ebpf",
            ])
            .arg("--max-processes")
            .arg("1"),
        Duration::from_secs(3),
    );
    // Still running when killed: the deadline was accepted, no panic.
    assert!(r.timed_out, "{}", r.said());
    assert!(!r.stderr().contains("panicked"), "{}", r.said());
    let _ = std::fs::remove_dir_all(&d);
}

/// As root: a disk that fills up mid-recording (a 64 KiB tmpfs in a
/// private mount namespace) stops the recording with a clear error, and
/// the intervals written before are kept, readable as a partial recording.
#[test]
fn a_full_disk_keeps_what_was_written_as_root() {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("unshare").arg("--help").output().is_err() {
        eprintln!("skipped: needs root and unshare");
        return;
    }
    let d = dir("full");
    let mnt = d.join("small");
    std::fs::create_dir_all(&mnt).unwrap();
    let s = Sleeper::new("120");
    let w = env!("CARGO_BIN_EXE_wakemeter");
    let script = format!(
        "mount --make-rprivate / && mount -t tmpfs -o size=64k none {m} && \
         {w} record --pid {pid} --seconds 300 --period 0.02 --no-ebpf -o {m}/r.ndjson; \
         echo record=$?; {w} diff {m}/r.ndjson {m}/r.ndjson > /dev/null; echo diff=$?; ls {m}",
        m = mnt.display(),
        pid = s.pid()
    );
    let r = run(
        Command::new("unshare").args(["-m", "sh", "-c", &script]),
        LIMIT,
    );
    let out = r.stdout();
    let err = r.stderr();
    assert!(out.contains("record=2"), "{}", r.said());
    assert!(err.contains("No space left on device"), "{}", r.said());
    assert!(err.contains("it keeps the"), "{}", r.said());
    assert!(out.contains("diff=0"), "{}", r.said());
    assert!(err.contains("partial recording"), "{}", r.said());
    // The recording has its name; no temporary file is left.
    assert!(out.lines().any(|l| l == "r.ndjson"), "{}", r.said());
    assert!(!out.contains(".partial"), "{}", r.said());
    let _ = std::fs::remove_dir_all(&d);
}
