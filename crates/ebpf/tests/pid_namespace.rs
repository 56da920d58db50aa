//! The kernel source observed from inside a PID namespace of its own, as
//! in a container without the host's PID namespace: this test binary runs
//! itself again under `unshare -p -f --mount-proc`, and that copy (process 1
//! of the new namespace, with a `/proc` of that namespace) attaches and
//! checks what it reads against its own `/proc`. Needs root and `unshare`
//! (util-linux).
#![cfg(target_os = "linux")]
// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use wakemeter::KernelSource;
use wakemeter_ebpf::{EbpfSource, StackKind, StackSession, Target};

const INNER: &str = "WAKEMETER_EBPF_NS_INNER";
const SLEEPS: u64 = 40;

/// This test binary run as the test `name`, with `env` set.
fn this_test(name: &str) -> Vec<String> {
    [
        std::env::current_exe().unwrap().to_str().unwrap(),
        "--exact",
        name,
        "--nocapture",
        "--test-threads=1",
    ]
    .map(str::to_owned)
    .to_vec()
}

#[test]
#[ignore = "needs root"]
fn counters_and_stacks_from_a_child_pid_namespace() {
    let args = this_test("inner_main");
    let out = Command::new("unshare")
        .args(["-p", "-f", "--mount-proc"])
        .args(&args)
        .env(INNER, "observer")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running unshare (util-linux) failed: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}\n{stderr}");
    assert!(
        out.status.success(),
        "the observer in the new namespace failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("namespace observer: all checks passed"),
        "the observer did not run its checks:\n{stdout}"
    );
}

/// Body of the copies run by the test above; does nothing in a normal run.
/// `observer`: the checks, inside the new namespace. `sleeper`: a process
/// whose thread `wm-ns-sleeper` sleeps 1 ms `SLEEPS` times after a byte
/// arrives on stdin, then blocks on stdin again until it closes.
#[test]
fn inner_main() {
    match std::env::var(INNER).as_deref() {
        Ok("observer") => observer(),
        Ok("sleeper") => sleeper(),
        _ => {}
    }
}

fn sleeper() {
    let worker = thread::Builder::new()
        .name("wm-ns-sleeper".into())
        .spawn(|| {
            let mut byte = [0u8; 1];
            std::io::Read::read_exact(&mut std::io::stdin(), &mut byte).unwrap();
            for _ in 0..SLEEPS {
                thread::sleep(Duration::from_millis(1));
            }
            // Blocked until the observer closes stdin.
            let _ = std::io::Read::read(&mut std::io::stdin(), &mut byte);
        })
        .unwrap();
    worker.join().unwrap();
}

fn status_field(pid: u32, tid: u32, name: &str) -> String {
    let s = fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(name))
        .unwrap()
        .trim()
        .to_owned()
}

/// (state, voluntary, involuntary) switches of a thread from this
/// namespace's `/proc`.
fn proc_switches(pid: u32, tid: u32) -> (char, u64, u64) {
    (
        status_field(pid, tid, "State:").chars().next().unwrap(),
        status_field(pid, tid, "voluntary_ctxt_switches:")
            .parse()
            .unwrap(),
        status_field(pid, tid, "nonvoluntary_ctxt_switches:")
            .parse()
            .unwrap(),
    )
}

fn observer() {
    let ns = fs::read_link("/proc/self/ns/pid").unwrap();
    assert_ne!(
        ns.to_str(),
        Some("pid:[4026531836]"),
        "not in a new namespace"
    );
    assert_eq!(
        std::process::id(),
        1,
        "unshare -f makes the observer process 1"
    );

    // Another process of the namespace, observed by its id here.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(&this_test("inner_main")[1..])
        .env(INNER, "sleeper")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let tid = wakemeter_testkit::thread_named(pid, "wm-ns-sleeper");
    let mut source = match EbpfSource::attach(Target::Pid(pid)) {
        Ok(s) => s,
        Err(e) => panic!(
            "attach from a child PID namespace failed: {e} ({:?})",
            std::error::Error::source(&e)
        ),
    };
    assert_eq!(source.pid(), pid);
    let mut stacks = StackSession::builder(Target::Pid(pid), StackKind::OffCpu)
        .with_thread(tid)
        .attach()
        .unwrap_or_else(|e| panic!("stack session from a child PID namespace: {e}"));

    let before = proc_switches(pid, tid);
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"x").unwrap();
    // Read while the thread is blocked on stdin again, when procfs and the
    // kernel programs describe the same instant.
    // Bounded by a hang guard of minutes, not a count of tries a loaded
    // machine may use up before the sleeps are done.
    let settled_by = Instant::now() + Duration::from_secs(300);
    let (sample, after) = std::iter::repeat(())
        .take_while(|()| Instant::now() < settled_by)
        .find_map(|()| {
            thread::sleep(Duration::from_millis(5));
            let a = proc_switches(pid, tid);
            let sample = source.read().unwrap();
            let b = proc_switches(pid, tid);
            (a == b && a.0 == 'S' && a.1 > before.1 + SLEEPS).then_some((sample, b))
        })
        .expect("the sleeper never settled after its sleeps");

    let tids: Vec<u64> = sample.threads.iter().map(|t| t.tid).collect();
    let t = sample.thread(u64::from(tid)).unwrap_or_else(|| {
        panic!("thread {tid} (this namespace's id) missing; the sample has {tids:?}")
    });
    assert_eq!(t.name, "wm-ns-sleeper");
    // Every tid is one of this namespace's /proc.
    for tid in &tids {
        assert!(
            fs::metadata(format!("/proc/{pid}/task/{tid}")).is_ok(),
            "tid {tid} of the sample is not a thread of {pid} here: {tids:?}"
        );
    }
    // Switches since the attach, against procfs's over the same span (the
    // thread was blocked on stdin at the attach and is again now).
    assert_eq!(
        t.total_voluntary_switches,
        after.1 - before.1,
        "voluntary switches vs procfs ({before:?} -> {after:?})"
    );
    assert_eq!(
        t.total_involuntary_switches,
        after.2 - before.2,
        "involuntary switches vs procfs"
    );
    assert_eq!(t.sleep.total_calls, SLEEPS);
    assert!(t.total_on_cpu_ns > 0);
    // Sleeps end in a timer interrupt; wakers have ids of this namespace
    // too (the stdin write came from this thread).
    let wakers: Vec<(u64, &str)> = t
        .top_wakers
        .iter()
        .map(|w| (w.tid, w.name.as_str()))
        .collect();
    assert!(wakers.contains(&(0, "[interrupt]")), "{wakers:?}");
    // SAFETY: gettid has no preconditions.
    let me = u64::try_from(unsafe { libc::gettid() }).unwrap();
    assert!(
        t.top_wakers.iter().any(|w| w.tid == me),
        "this thread ({me} here) woke it: {wakers:?}"
    );
    println!(
        "namespace {ns:?}: thread {tid}: {} voluntary, {} involuntary switches, wakers {wakers:?}",
        t.total_voluntary_switches, t.total_involuntary_switches
    );

    stacks.stop();
    let counts = stacks.read().unwrap();
    let spans: u64 = counts
        .entries
        .iter()
        .inspect(|e| assert_eq!(e.tid, tid, "off-CPU stack of another id: {e:?}"))
        .map(|e| e.count)
        .sum();
    // Every switch-out of the thread ended (it is back on stdin, the last
    // one still open): close to the voluntary count, as the kernel
    // occasionally misses a switch-in under load.
    let switches = t.total_voluntary_switches + t.total_involuntary_switches;
    assert!(
        spans <= switches && spans * 10 >= (switches - 1) * 8,
        "off-CPU spans {spans} of {switches} switches"
    );
    drop(child.stdin.take());
    child.wait().unwrap();
    println!("namespace observer: all checks passed");
}
