//! A target whose thread names are terminal escape sequences must not be
//! able to drive the terminal of whoever watches it.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Run, run, watch};

/// Names its threads (and itself) with escape sequences: a window-title
/// change, a screen clear, C1 CSI (U+009B as UTF-8) with DEL, and colours
/// around a backspace. (Not a newline: the kernel itself escapes that in
/// some of the files names are read from.) One thread wakes another often, so with eBPF the
/// hostile waker shows up as a "top waker" too. Prints the TID of a
/// non-leader thread once all names are set.
const CHILD: &str = r#"
import ctypes, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NAME = 15
def name(n):
    if libc.prctl(PR_SET_NAME, ctypes.c_char_p(n), 0, 0, 0) != 0:
        sys.exit("prctl failed")
ev = threading.Event()
ready = threading.Barrier(4)
def waiter():
    name(b"\x1b]0;pwned\x07")
    ready.wait()
    while True:
        ev.wait(0.05)
        ev.clear()
def waker():
    name(b"\x1b[2J\x1b[H")
    ready.wait()
    while True:
        time.sleep(0.005)
        ev.set()
def c1():
    name(b"c1\xc2\x9b31m\x7f")
    ready.wait()
    time.sleep(600)
ts = [threading.Thread(target=f, daemon=True) for f in (waiter, waker, c1)]
for t in ts:
    t.start()
name(b"\x1b[31mevil\x08\x1b[0m")
ready.wait()
print(ts[0].native_id, flush=True)
time.sleep(600)
"#;

/// The names as the kernel keeps them (and the core reads them).
const NAMES: [&str; 4] = [
    "\x1b]0;pwned\x07",
    "\x1b[2J\x1b[H",
    "c1\u{9b}31m\x7f",
    "\x1b[31mevil\x08\x1b[0m",
];

/// The same names as a terminal must show them.
const ESCAPED: [&str; 4] = [
    "\\x1b]0;pwned\\x07",
    "\\x1b[2J\\x1b[H",
    "c1\\u{9b}31m\\x7f",
    "\\x1b[31mevil\\x08\\x1b[0m",
];

struct Hostile {
    child: Child,
    pid: u32,
    thread: u32,
}

impl Hostile {
    fn start() -> Hostile {
        let mut child = Command::new("python3")
            .args(["-c", CHILD])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is needed to start the hostile child");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let thread = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("hostile child did not start: {line:?}"));
        let pid = child.id();
        Hostile { child, pid, thread }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// No byte that starts or ends a terminal control sequence, in either stream.
fn assert_no_raw_controls(r: &Run) {
    for (which, bytes) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
        for (i, b) in bytes.iter().enumerate() {
            assert!(
                !matches!(b, 0x00..=0x08 | 0x0b..=0x1f | 0x7f),
                "raw control byte {b:#04x} at {i} of {which}\n{}",
                r.said()
            );
        }
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)),
            "raw C1 control in {which}\n{}",
            r.said()
        );
    }
}

#[test]
fn hostile_thread_names_are_shown_escaped_in_tables_and_messages() {
    let h = Hostile::start();
    // eBPF on (where it attaches): the kernel view prints names and wakers too.
    let r = run(
        &mut watch(h.pid, &["--seconds", "2", "--every", "1"]),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert_no_raw_controls(&r);
    let out = r.stdout();
    for e in ESCAPED {
        assert!(out.contains(e), "{e} not shown\n{}", r.said());
    }
    if out.contains("kernel view (eBPF)") {
        assert!(
            out.contains(&format!("{} (", ESCAPED[1])),
            "the hostile waker is shown escaped\n{}",
            r.said()
        );
    }
}

#[test]
fn hostile_names_stay_exact_in_json_without_raw_controls() {
    let h = Hostile::start();
    // Through a non-leader thread: stderr then names the (hostile) process.
    let r = run(
        &mut watch(
            h.thread,
            &["--seconds", "1", "--every", "1", "--json", "--no-ebpf"],
        ),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert_no_raw_controls(&r);
    assert!(
        r.stderr().contains(&format!(
            "{} is a thread of process {} ({})",
            h.thread, h.pid, ESCAPED[3]
        )),
        "{}",
        r.said()
    );
    let out = r.stdout();
    let line = out.lines().last().unwrap_or_else(|| panic!("{}", r.said()));
    let doc: serde_json::Value = serde_json::from_str(line).unwrap();
    let threads = doc["interval"]["threads"].as_array().unwrap();
    assert!(threads.iter().any(|t| t["tid"] == h.thread), "{threads:?}");
    let names: Vec<&str> = threads.iter().filter_map(|t| t["name"].as_str()).collect();
    for n in NAMES {
        assert!(names.contains(&n), "{n:?} not in {names:?}");
    }
}
