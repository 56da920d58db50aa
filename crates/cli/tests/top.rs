//! `wakemeter top` used as a person uses it: tmux runs it in a 160×50
//! terminal, `send-keys` types, `capture-pane` reads the screen, and the
//! shell after it shows the exit status and the terminal's modes. Numbers
//! are checked against `/proc/PID/task/TID/stat` read over the same time.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{bin, run};

/// One busy thread (`spinner`) and two that sleep (`idler-1`, `idler-2`);
/// prints the spinner's TID once every name is set.
const SPINNER: &str = r#"
import ctypes, threading, time
libc = ctypes.CDLL(None)
def name(n):
    libc.prctl(15, ctypes.c_char_p(n), 0, 0, 0)
ready = threading.Barrier(4)
tid = []
def spin():
    name(b"spinner")
    tid.append(threading.get_native_id())
    ready.wait()
    while True:
        pass
def idle(n):
    name(n)
    ready.wait()
    while True:
        time.sleep(0.2)
for f, a in ((spin, ()), (idle, (b"idler-1",)), (idle, (b"idler-2",))):
    threading.Thread(target=f, args=a, daemon=True).start()
ready.wait()
print(tid[0], flush=True)
time.sleep(600)
"#;

/// A thread that names itself with a title-setting escape and a screen
/// clear, beside one with a plain name.
const HOSTILE: &str = r#"
import ctypes, threading, time
libc = ctypes.CDLL(None)
ready = threading.Barrier(2)
def hostile():
    libc.prctl(15, ctypes.c_char_p(b"\x1b]2;pwned\x07\x1b[2J"), 0, 0, 0)
    ready.wait()
    time.sleep(600)
threading.Thread(target=hostile, daemon=True).start()
ready.wait()
print(0, flush=True)
time.sleep(600)
"#;

/// A Python child running `program`, killed and reaped on drop.
struct Target {
    child: Child,
    pid: u32,
    /// The number it printed when ready (the spinner's TID).
    said: u32,
}

impl Target {
    fn start(program: &str) -> Target {
        let mut child = Command::new("python3")
            .args(["-c", program])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is needed to start the watched program");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let said = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the watched program did not start: {line:?}"));
        let pid = child.id();
        Target { child, pid, said }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Makes sure tmux is installed (Debian package `tmux`).
fn ensure_tmux() {
    let have = || {
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if have() {
        return;
    }
    let status = Command::new("bash")
        .arg("-c")
        .arg(concat!(
            "source '",
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/prereqs.sh' && apt_install tmux"
        ))
        .status()
        .expect("bash runs");
    assert!(
        status.success() && have(),
        "tmux is needed for the terminal tests and could not be installed \
         (install the Debian package tmux)"
    );
}

/// A tmux server of its own (its own socket) with one 160×50 session,
/// killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `command` in a new session, through `sh -c`.
    fn start(command: &str) -> Tmux {
        ensure_tmux();
        static N: AtomicU32 = AtomicU32::new(0);
        let socket = format!(
            "wakemeter-top-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let t = Tmux { socket };
        let out = t
            .cmd()
            .args([
                "new-session",
                "-d",
                "-x",
                "160",
                "-y",
                "50",
                "sh",
                "-c",
                command,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]).env_remove("TMUX");
        c
    }

    fn screen(&self) -> String {
        let out = self.cmd().args(["capture-pane", "-p"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A tmux format of the pane, e.g. `#{alternate_on}`.
    fn display(&self, format: &str) -> String {
        let out = self.cmd().args(["display", "-p", format]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn keys(&self, keys: &str) {
        assert!(
            self.cmd()
                .args(["send-keys", keys])
                .status()
                .unwrap()
                .success()
        );
    }

    /// Waits (up to 30 s) until the screen satisfies `ok`; returns it.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(300),
                "never saw {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The `wakemeter` process the pane's shell started.
    fn wakemeter_pid(&self) -> u32 {
        let shell = self.display("#{pane_pid}");
        let children =
            std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
        children
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .find(|p: &u32| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "wakemeter")
            })
            .unwrap_or_else(|| panic!("no wakemeter under the pane's shell {shell}"))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// What the pane's shell prints once the exit status and the terminal's
/// modes are all on the screen.
const SHELL_DONE: &str = "shell-after-top-done";

/// `top` in the pane, then the exit status and the terminal's modes.
fn top_then_status(pid: u32, args: &str) -> String {
    format!(
        "'{}' top --pid {pid} {args}; echo \"status=$?\"; stty -a; echo {SHELL_DONE}; sleep 120",
        env!("CARGO_BIN_EXE_wakemeter")
    )
}

/// The terminal is back to how a shell left it: not raw (canonical input,
/// echo), off the alternate screen, the cursor shown.
fn assert_restored(t: &Tmux, screen: &str) {
    let modes: Vec<&str> = screen.split_whitespace().collect();
    for m in ["icanon", "echo", "isig", "opost"] {
        assert!(modes.contains(&m), "{m} is off after top\n{screen}");
    }
    assert_eq!(
        t.display("#{alternate_on}"),
        "0",
        "still on the alternate screen\n{screen}"
    );
    assert_eq!(
        t.display("#{cursor_flag}"),
        "1",
        "the cursor is hidden\n{screen}"
    );
}

/// The table's rows as (TID, name, CPU%), top to bottom.
fn rows(screen: &str) -> Vec<(u64, String, f64)> {
    screen
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("TID"))
        .skip(1)
        .map_while(|l| {
            let mut f = l.split_whitespace();
            Some((
                f.next()?.parse().ok()?,
                f.next()?.to_string(),
                f.next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// CPU time of thread `tid` of `pid` from its `stat` (utime + stime), in s.
fn cpu_secs(pid: u32, tid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

#[test]
fn the_busy_thread_leads_with_the_cpu_proc_measures_and_q_restores_the_terminal() {
    let target = Target::start(SPINNER);
    let t = Tmux::start(&top_then_status(target.pid, "--no-ebpf --every 4"));
    let first = t.wait_for("a 4 s interval", |s| s.contains("over 4.0 s"));
    assert_eq!(
        t.display("#{alternate_on}"),
        "1",
        "top draws on the alternate screen"
    );
    // The reference from one refresh to the next, so that it covers the
    // same 4 s as the screen's interval (give or take a sampling period).
    let refreshed = |after: &str| {
        let watching = |s: &str| s.lines().next().unwrap_or_default().to_string();
        let before = watching(after);
        t.wait_for("a refresh", |s| watching(s) != before)
    };
    let at_refresh = refreshed(&first);
    let (cpu0, t0) = (cpu_secs(target.pid, target.said), Instant::now());
    let screen = refreshed(&at_refresh);
    let reference = (cpu_secs(target.pid, target.said) - cpu0) * 100.0 / t0.elapsed().as_secs_f64();
    let rows = rows(&screen);
    let (tid, name, cpu) = rows
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("no rows\n{screen}"));
    assert_eq!(
        (tid, name.as_str()),
        (u64::from(target.said), "spinner"),
        "{screen}"
    );
    assert!(
        (cpu - reference).abs() <= 15.0,
        "spinner at {cpu}% on screen, {reference:.1}% from /proc over the same 4 s\n{screen}"
    );
    for idler in ["idler-1", "idler-2"] {
        let r = rows
            .iter()
            .find(|r| r.1 == idler)
            .unwrap_or_else(|| panic!("{screen}"));
        assert!(r.2 < 5.0, "{idler} at {}%\n{screen}", r.2);
    }
    assert!(
        screen.contains(&format!("process {} (python3)", target.pid)),
        "{screen}"
    );
    // Another sort key, then quit.
    t.keys("s");
    t.wait_for("the switches sort", |s| s.contains("sort (by switches/s)"));
    t.keys("q");
    let screen = t.wait_for("the exit status", |s| s.contains(SHELL_DONE));
    assert!(screen.contains("status=0"), "{screen}");
    assert_restored(&t, &screen);
}

#[test]
fn sigterm_restores_the_terminal() {
    let target = Target::start(SPINNER);
    let t = Tmux::start(&top_then_status(target.pid, "--no-ebpf"));
    t.wait_for("the table", |s| s.contains("spinner"));
    let pid = t.wakemeter_pid();
    // SAFETY: kill has no memory preconditions; pid is our tmux pane's child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let screen = t.wait_for("the exit status", |s| s.contains(SHELL_DONE));
    assert!(screen.contains("status=143"), "{screen}");
    assert_restored(&t, &screen);
}

#[test]
fn a_target_that_exits_while_watched_is_reported_and_top_exits_cleanly() {
    let mut target = Target::start(SPINNER);
    let t = Tmux::start(&top_then_status(target.pid, "--no-ebpf"));
    t.wait_for("the table", |s| s.contains("spinner"));
    target.stop();
    let screen = t.wait_for("the exit status", |s| s.contains(SHELL_DONE));
    assert!(screen.contains("status=0"), "{screen}");
    assert!(
        screen.contains(&format!(
            "target exited: process {} (python3) exited",
            target.pid
        )),
        "{screen}"
    );
    // The last numbers stay on the terminal.
    assert!(screen.contains("spinner"), "{screen}");
    assert_restored(&t, &screen);
}

#[test]
fn hostile_thread_names_do_not_reach_the_terminal() {
    let target = Target::start(HOSTILE);
    let t = Tmux::start(&top_then_status(target.pid, "--no-ebpf"));
    let title = t.display("#{pane_title}");
    let screen = t.wait_for("the escaped name", |s| s.contains("\\x1b]2;pwned\\x0"));
    assert!(
        screen.contains("wakemeter top"),
        "the screen was not cleared\n{screen}"
    );
    assert_eq!(
        t.display("#{pane_title}"),
        title,
        "a thread name set the title"
    );
    t.keys("q");
    let screen = t.wait_for("the exit status", |s| s.contains(SHELL_DONE));
    assert!(screen.contains("status=0"), "{screen}");
}

#[test]
#[ignore = "needs root"]
fn with_ebpf_the_kernel_columns_are_shown() {
    let target = Target::start(SPINNER);
    let t = Tmux::start(&top_then_status(target.pid, ""));
    let screen = t.wait_for("the kernel columns", |s| {
        s.contains("wakes/s") && rows(s).iter().any(|r| r.1 == "idler-1")
    });
    assert!(screen.contains("kernel view: eBPF attached"), "{screen}");
    // The idlers sleep in a loop: the kernel sees them off CPU for sleep.
    let idler = screen.lines().find(|l| l.contains(" idler-1 ")).unwrap();
    assert!(idler.contains("sleep"), "{idler}\n{screen}");
    t.keys("q");
    let screen = t.wait_for("the exit status", |s| s.contains(SHELL_DONE));
    assert!(screen.contains("status=0"), "{screen}");
    assert_restored(&t, &screen);
}

#[test]
fn piped_stdout_gets_plain_frames_one_per_interval() {
    let target = Target::start(SPINNER);
    let r = run(
        bin().args([
            "top",
            "--pid",
            &target.pid.to_string(),
            "--no-ebpf",
            "--seconds",
            "4",
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    let out = r.stdout();
    assert!(
        !out.contains('\x1b'),
        "escape sequences in plain output\n{}",
        r.said()
    );
    let frames: Vec<&str> = out.split("wakemeter top  process").skip(1).collect();
    assert!(
        (2..=6).contains(&frames.len()),
        "{} frames\n{}",
        frames.len(),
        r.said()
    );
    for f in frames {
        assert_eq!(
            rows(f).first().map(|r| r.1.as_str()),
            Some("spinner"),
            "{f}"
        );
        assert!(f.contains("sorted by CPU%"), "{f}");
    }
}

#[test]
fn a_missing_pid_is_one_clear_error() {
    let r = run(
        bin().args(["top", "--pid", &common::NO_SUCH_PID.to_string()]),
        Duration::from_secs(30),
    );
    common::assert_no_such_pid(&r);
}

#[test]
fn a_bad_interval_is_refused() {
    let r = run(
        bin().args([
            "top",
            "--pid",
            &std::process::id().to_string(),
            // The old name of `--every`, kept as a hidden alias.
            "--interval",
            "0.2s",
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(
        r.stderr()
            .contains("--every must be between 1 and 60 seconds, whole"),
        "{}",
        r.said()
    );
}
