//! Findings on small real programs (`tests/scenarios/*.c`, `timer.js`),
//! watched from outside as `wakemeter watch --pid` does: each scenario
//! asserts the finding a user should get and the absence of the wrong
//! ones that earlier versions gave. The eBPF tests need root
//! (`--include-ignored`); the `/proc`-only ones run anywhere.
//!
//! Scenarios run one at a time (a shared lock) so that they do not disturb
//! each other's rates on a small machine. No timing is asserted.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use wakemeter::{
    Finding, FindingKind, Interval, SampleWait, SamplerBuilder, Subject, Syscall, Target,
    Thresholds,
};
use wakemeter_ebpf::EbpfSource;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios")
}

/// Compiles `tests/scenarios/<name>.c` once per test run.
fn compiled(name: &str) -> PathBuf {
    compiled_with(name, &[])
}

/// [`compiled`], linked with `libs` (`-levent`).
fn compiled_with(name: &str, libs: &[&str]) -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("scenario-{name}"));
    let src = sources().join(format!("{name}.c"));
    let status = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .args(libs)
        .status()
        .expect("a C compiler (cc) to build the scenario programs");
    assert!(status.success(), "cc {}", src.display());
    out
}

/// A scenario program, killed when dropped.
struct Program(Child);

impl Program {
    fn c(name: &str) -> Program {
        let exe = compiled(name);
        Program::spawn(
            Command::new(exe).arg(PROGRAM_SECONDS),
            SETTLED_TIMESLICES,
            SETTLED_RUN_NS,
        )
    }

    /// `tests/scenarios/<class>.java`, compiled by `javac` and run by
    /// `java` (OpenJDK), settled once its threads have been on a CPU a
    /// thousand times (the JVM's start-up, then the program's own work).
    fn java(class: &str) -> Program {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scenario-java");
        std::fs::create_dir_all(&out).unwrap();
        let src = sources().join(format!("{class}.java"));
        let status = Command::new("javac")
            .arg("-d")
            .arg(&out)
            .arg(&src)
            .status()
            .expect("a JDK (javac, java) to build the Java scenarios");
        assert!(status.success(), "javac {}", src.display());
        Program::spawn(
            Command::new("java")
                .arg("-cp")
                .arg(&out)
                .arg(class)
                .arg(PROGRAM_SECONDS),
            1000,
            u64::MAX,
        )
    }

    fn node(script: &str) -> Program {
        Program::spawn(
            Command::new("node")
                .arg(sources().join(script))
                .arg(PROGRAM_SECONDS),
            // Node starts a dozen threads and compiles before its loop
            // runs: settled once the 1 ms timer has fired about two
            // thousand times, whatever its start-up cost in CPU.
            2000,
            u64::MAX,
        )
    }

    /// Starts the program and waits until it is in its steady state: its
    /// threads have been on a CPU `timeslices` times or run `run_ns`
    /// (whichever comes first; a busy poller may not be switched out on
    /// an idle core), read from its own schedstat files. A loaded machine
    /// makes this slower, never wrong.
    fn spawn(cmd: &mut Command, settled_timeslices: u64, settled_run_ns: u64) -> Program {
        let child = cmd
            .stdout(Stdio::null())
            .spawn()
            .expect("start the scenario program");
        let program = Program(child);
        let start = Instant::now();
        loop {
            let (run_ns, timeslices) = schedstat_sum(program.pid());
            if timeslices >= settled_timeslices || run_ns >= settled_run_ns {
                break;
            }
            assert!(
                start.elapsed() < HANG_GUARD,
                "the scenario program never settled: {run_ns} ns run, {timeslices} timeslices"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        program
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

/// How long a scenario program runs at most (it is killed when the test
/// is done): far longer than any wait below, so that a slow machine
/// never outlives it.
const PROGRAM_SECONDS: &str = "600";

/// The bound of every wait for work (a hang guard, not a deadline that a
/// loaded machine may miss).
const HANG_GUARD: Duration = Duration::from_secs(300);

/// A program is settled after this many timeslices of its threads...
const SETTLED_TIMESLICES: u64 = 100;
/// ... or this much CPU time.
const SETTLED_RUN_NS: u64 = 100_000_000;

/// The run time (ns) and timeslices of all of `pid`'s threads, summed
/// from `/proc/PID/task/*/schedstat` (0 for a thread gone meanwhile).
fn schedstat_sum(pid: u32) -> (u64, u64) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0, 0);
    };
    let (mut run_ns, mut timeslices) = (0u64, 0u64);
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let fields: Vec<u64> = text
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        if let [run, _wait, slices] = fields[..] {
            run_ns += run;
            timeslices += slices;
        }
    }
    (run_ns, timeslices)
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Findings over a window of about 2.5 seconds of `program` in which it
/// did its work (see [`has_done_the_work`]), with the eBPF kernel source
/// or from `/proc` alone. The rules keep their defaults but the windows,
/// so that a few seconds suffice.
fn watch(program: &Program, ebpf: bool) -> Vec<Finding> {
    watch_with_interval(program, ebpf).0
}

/// As [`watch`], with the interval the findings looked at.
fn watch_with_interval(program: &Program, ebpf: bool) -> (Vec<Finding>, Interval) {
    let pid = program.pid();
    // The scenarios check what a rule says and that the wrong rule stays
    // silent, not the steadiness bar of periodic_wakeups: on a loaded
    // shared machine a thread woken by thread starts, or twenty sleepers,
    // are not always steady or cheap enough over 2.5 s for the defaults.
    let thresholds = Thresholds::default()
        .with_window(Duration::from_millis(2500))
        .with_min_window(Duration::from_secs(2))
        .with_periodic_max_variation(1.0)
        .with_periodic_max_cpu_percent(20.0);
    let mut builder = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_interval(Duration::from_millis(100))
        .with_switch_split_every(2)
        .with_thresholds(thresholds);
    if ebpf {
        let source = EbpfSource::attach(Target::Pid(pid))
            .unwrap_or_else(|e| panic!("attach (needs root, kernel BTF, clang): {e}"));
        builder = builder.with_kernel_source(Box::new(source));
    }
    let sampler = builder.build().unwrap();
    let guard = sampler.start().unwrap();
    // Waits for the work the findings are about, not for a fixed time:
    // on a loaded machine the sampler and the program both get less CPU
    // than asked, so 2.6 s of wall time may hold too few samples.
    let start = Instant::now();
    let mut seq = None;
    let interval = loop {
        if let SampleWait::Stored { seq: s } = sampler.wait_for_sample(seq, Duration::from_secs(1))
        {
            seq = Some(s);
        }
        if let Some(i) = sampler
            .interval_over(WINDOW)
            .filter(|i| has_done_the_work(i, pid))
        {
            break i;
        }
        assert!(
            start.elapsed() < HANG_GUARD,
            "no {WINDOW:?} window of work: {:#?}",
            sampler.interval_over(WINDOW)
        );
    };
    drop(guard);
    // The findings of the newest snapshot: no snapshot is stored after
    // the guard is dropped, so they are over `interval` or a later one
    // that has done at least as much.
    let findings = sampler.findings();
    let interval = sampler.interval_over(WINDOW).unwrap_or(interval);
    (findings, interval)
}

/// The findings' window.
const WINDOW: Duration = Duration::from_millis(2500);

/// Whether `i` is a window the rules can judge: it spans at least the
/// rules' minimum window (2 s) with 20 or more samples, and `pid`'s
/// threads did the work of a scenario in it (100 context switches, or a
/// quarter of a CPU-second for a busy poller that is never switched out).
fn has_done_the_work(i: &Interval, pid: u32) -> bool {
    let switches: u64 = i
        .threads
        .iter()
        .filter_map(|t| t.voluntary_switches.or(t.switches))
        .sum();
    let cpu_ns: u64 = i.threads.iter().map(|t| t.cpu_time_ns).sum();
    i.process.pid == pid
        && i.duration_ns >= 2_000_000_000
        && i.to_seq - i.from_seq >= 20
        && (switches >= 100 || cpu_ns >= 250_000_000)
}

fn of_kind(f: &[Finding], kind: FindingKind) -> Vec<&Finding> {
    f.iter().filter(|x| x.kind == kind).collect()
}

fn about(f: &[Finding], kind: FindingKind, tid: u64) -> Option<&Finding> {
    f.iter()
        .find(|x| x.kind == kind && x.subject.tids().contains(&tid))
}

/// Class 1: a libuv-style loop with a 1 ms timer (a zero-timeout
/// epoll_pwait before each blocking one) is a periodic waker on a timer,
/// never a busy poller.
fn assert_timer_loop(f: &[Finding], pid: u32, ebpf: bool) {
    assert!(of_kind(f, FindingKind::BusyPoller).is_empty(), "{f:#?}");
    let p = about(f, FindingKind::PeriodicWakeups, u64::from(pid))
        .unwrap_or_else(|| panic!("periodic_wakeups for the loop thread: {f:#?}"));
    if ebpf {
        assert!(p.summary.contains("a periodic timer"), "{p:#?}");
        assert!(p.evidence("blocked_percent").unwrap() > 50.0, "{p:#?}");
    }
}

#[test]
#[ignore = "needs root"]
fn timer_loop_with_zero_timeout_prepoll_is_periodic_not_busy() {
    let _one = one_at_a_time();
    let p = Program::c("timer_loop");
    assert_timer_loop(&watch(&p, true), p.pid(), true);
}

/// Node's own loop: the same pattern, checked in the kernel view, and no
/// busy poller. (Its main thread is not always steady enough for
/// `periodic_wakeups` while Node warms up on a loaded machine: when the
/// finding is there, it must name the timer.)
#[test]
#[ignore = "needs root"]
fn node_set_interval_1ms_is_not_busy() {
    let _one = one_at_a_time();
    let p = Program::node("timer.js");
    let (f, i) = watch_with_interval(&p, true);
    assert!(of_kind(&f, FindingKind::BusyPoller).is_empty(), "{f:#?}");
    let thread = i
        .threads
        .iter()
        .find(|t| t.tid == u64::from(p.pid()))
        .unwrap();
    let main = thread.kernel.clone().unwrap();
    // The libuv pattern: about one zero-timeout epoll_pwait per blocking one.
    let pre_polls = main.poll_calls_per_sec / main.blocking_polls_per_sec.max(1.0);
    assert!((1.5..=2.5).contains(&pre_polls), "{main:#?}");
    // Not busy: blocked far longer than it runs. (On a loaded machine much
    // of the rest is run-queue wait, so no fixed share of the window.)
    assert!(
        main.blocked_percent > 5.0 * main.on_cpu_percent,
        "{main:#?} {:?}",
        thread.run_queue_wait_percent
    );
    assert!(
        main.calls_by_syscall
            .iter()
            .any(|c| c.syscall == Syscall::EpollPwait && c.calls_per_sec > 100.0),
        "{main:#?}"
    );
    if let Some(w) = about(&f, FindingKind::PeriodicWakeups, u64::from(p.pid())) {
        assert!(w.summary.contains("a periodic timer"), "{w:#?}");
    }
}

/// Class 1 and 5: real busy pollers, with the syscall they spin on named.
#[test]
#[ignore = "needs root"]
fn zero_timeout_pollers_are_busy_and_their_syscall_is_named() {
    let _one = one_at_a_time();
    for (program, syscall, advice) in [
        ("busy_epoll", "epoll_wait(2)", "already uses epoll"),
        ("busy_poll", "poll(2)", "'poll' or 'select' where 'epoll'"),
    ] {
        let p = Program::c(program);
        let f = watch(&p, true);
        let b = about(&f, FindingKind::BusyPoller, u64::from(p.pid()))
            .unwrap_or_else(|| panic!("{program}: busy_poller: {f:#?}"));
        assert!(b.summary.contains(syscall), "{program}: {b:#?}");
        assert!(b.advice.contains(advice), "{program}: {b:#?}");
        assert!(b.evidence("blocked_percent").unwrap() < 50.0, "{b:#?}");
        assert!(
            of_kind(&f, FindingKind::PeriodicWakeups).is_empty(),
            "{f:#?}"
        );
    }
}

/// A thread's time is on a CPU, waiting for one, or blocked. With /proc's
/// CPU share (the scheduler's accounting, the reference) the three shares
/// add up to 100 within a point. Before, a 1 ms timer loop (about 1,000
/// wakes/s) on a loaded machine summed to 101-144 (ACCURACY.md, issue
/// 39), and then to 101.4-101.6: the scheduler counts the woken thread's
/// run time from its wake (the clock update skipped after a wake that
/// preempts), which blocked held too. The kernel view's on-CPU share is
/// the switch tracepoints' and sums to 100 less that difference.
#[test]
#[ignore = "needs root"]
fn cpu_run_queue_wait_and_blocked_add_up_to_the_interval() {
    const SUM_TOLERANCE: f64 = 2.0;
    let _one = one_at_a_time();
    let p = Program::c("timer_loop");
    let (_, interval) = watch_with_interval(&p, true);
    let th = interval
        .threads
        .iter()
        .find(|t| t.tid == u64::from(p.pid()))
        .expect("the timer loop's thread");
    let k = th.kernel.as_ref().expect("a kernel view");
    let wait = th.run_queue_wait_percent.expect("schedstat read");
    let sum = th.cpu_percent + wait + k.blocked_percent;
    eprintln!(
        "cpu {} + run-queue wait {wait} + blocked {} = {sum} (on-CPU {}, {} wakes/s)",
        th.cpu_percent, k.blocked_percent, k.on_cpu_percent, k.wakes_per_sec
    );
    // Within 2 points: the sampler reads /proc, then the kernel view, and
    // divides both by the span between its two snapshot clocks; on a busy
    // machine (load 15 on 2 cores) a preempted read shifts the kernel
    // view's window by tens of ms against /proc's, and the sum came to
    // 98.6-98.9 in 3 of 6 runs (never below 99 on a quiet one).
    assert!(
        (sum - 100.0).abs() <= SUM_TOLERANCE,
        "cpu {} + run-queue wait {wait} + blocked {} = {sum} (on-CPU {}, {} wakes/s)",
        th.cpu_percent,
        k.blocked_percent,
        k.on_cpu_percent,
        k.wakes_per_sec
    );
    let gap = (th.cpu_percent - k.on_cpu_percent).max(0.0);
    let kernel_sum = k.on_cpu_percent + wait + k.blocked_percent;
    assert!(
        (kernel_sum + gap - 100.0).abs() <= SUM_TOLERANCE,
        "on-CPU {} + run-queue wait {wait} + blocked {} = {kernel_sum}, /proc's CPU {} more",
        k.on_cpu_percent,
        k.blocked_percent,
        gap
    );
    assert!(k.wakes_per_sec >= 100.0, "{k:#?}");
}

/// libevent's `EV_ET` on the `poll` backend (`EVENT_NOEPOLL=1`): an eventfd
/// that stays readable is returned by every `poll(2)` at once although each
/// has a timeout, so the loop never blocks. Neither idle nor zero-timeout:
/// the kernel view names it a busy poller by the polls that return ready
/// without blocking, with the syscall and the cause. On epoll (the
/// control) the event fires once and the loop blocks: no busy poller.
#[test]
#[ignore = "needs root"]
fn libevent_edge_triggered_on_poll_never_blocks_and_is_named() {
    let _one = one_at_a_time();
    let exe = compiled_with("libevent_ready", &["-levent"]);
    let spin = Program::spawn(
        Command::new(&exe)
            .arg(PROGRAM_SECONDS)
            .env("EVENT_NOEPOLL", "1"),
        SETTLED_TIMESLICES,
        SETTLED_RUN_NS,
    );
    let f = watch(&spin, true);
    let b = about(&f, FindingKind::BusyPoller, u64::from(spin.pid()))
        .unwrap_or_else(|| panic!("busy_poller: {f:#?}"));
    assert!(b.summary.contains("poll(2)"), "{b:#?}");
    assert!(b.summary.contains("return ready at once"), "{b:#?}");
    assert!(b.summary.contains("EV_ET"), "{b:#?}");
    // The descriptor that stays ready: the program's one eventfd, the
    // number its own descriptor table gives (the kernel view read the
    // poll array; /proc/PID/fd the kind).
    let eventfds: Vec<f64> = std::fs::read_dir(format!("/proc/{}/fd", spin.pid()))
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|l| l.to_string_lossy() == "anon_inode:[eventfd]")
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    assert_eq!(eventfds.len(), 1, "{eventfds:?}");
    assert_eq!(b.evidence("ready_fd"), Some(eventfds[0]), "{b:#?}");
    assert!(
        b.summary.contains(&format!(
            "Descriptor {} (an eventfd) stays ready",
            eventfds[0]
        )),
        "{b:#?}"
    );
    eprintln!("{}", b.summary);
    assert!(b.advice.contains("epoll, kqueue"), "{b:#?}");
    assert!(b.evidence("ready_at_once_ratio").unwrap() >= 0.9, "{b:#?}");
    assert!(
        b.evidence("zero_timeout_poll_ratio").unwrap() < 0.5,
        "{b:#?}"
    );
    assert!(b.evidence("blocked_percent").unwrap() < 50.0, "{b:#?}");
    drop(spin);
    // On epoll the loop blocks at once: settled when it has run at all.
    let control = Program::spawn(Command::new(&exe).arg(PROGRAM_SECONDS), 1, 1);
    let f = watch(&control, true);
    assert!(of_kind(&f, FindingKind::BusyPoller).is_empty(), "{f:#?}");
}

/// A JVM `scheduleAtFixedRate` every 10 ms: its thread waits in timed
/// futex waits (no sleep or poll call), which the kernel view sees time
/// out. The finding names the runtime's timer instead of "woken by
/// interrupts, a timer or I/O", and its counts agree with the thread's
/// wakes (sched_waking, an independent counter): one timeout per run.
#[test]
#[ignore = "needs root"]
fn jvm_fixed_rate_timed_waits_are_the_runtimes_timer() {
    let _one = one_at_a_time();
    let p = Program::java("FixedRate");
    let (f, i) = watch_with_interval(&p, true);
    let ticker = i
        .threads
        .iter()
        .find(|t| t.name == "ticker")
        .unwrap_or_else(|| panic!("no \"ticker\" thread: {i:#?}"));
    let s = about(&f, FindingKind::PeriodicWakeups, ticker.tid)
        .unwrap_or_else(|| panic!("periodic_wakeups on the ticker: {f:#?}"));
    assert!(s.summary.contains("its own timed waits time out"), "{s:#?}");
    assert!(s.summary.contains("ScheduledExecutor"), "{s:#?}");
    assert!(!s.summary.contains("a timer or I/O"), "{s:#?}");
    assert!(s.advice.contains("scheduleAtFixedRate"), "{s:#?}");
    eprintln!("{}", s.summary);
    let k = ticker.kernel.as_ref().unwrap();
    let (timeouts, wakes) = (k.futex_timeouts_per_sec, k.wakes_per_sec);
    // Every run ends one timed wait by its timeout; a wake the executor
    // did not ask for (a GC safepoint) may add to the wakes.
    assert!(
        timeouts >= 0.8 * wakes && timeouts <= 1.02 * wakes + 1.0,
        "{timeouts} futex timeouts/s against {wakes} wakes/s: {k:#?}"
    );
    assert!(k.timed_futex_waits_per_sec >= timeouts, "{k:#?}");
}

/// Class 2: 10 ms sleeps cut short by a 1 kHz signal timer are signal
/// wakeups with their real length, not a sleep-and-check loop of
/// impossible length.
#[test]
#[ignore = "needs root"]
fn signal_interrupted_sleeps_are_signal_wakeups_not_a_sleep_loop() {
    let _one = one_at_a_time();
    let p = Program::c("signal_sleep");
    let f = watch(&p, true);
    let tid = u64::from(p.pid());
    assert!(
        about(&f, FindingKind::SleepOverhead, tid).is_none(),
        "{f:#?}"
    );
    let s = about(&f, FindingKind::SignalWakeups, tid)
        .unwrap_or_else(|| panic!("signal_wakeups: {f:#?}"));
    assert!(s.summary.contains("ask for 10.00 ms"), "{s:#?}");
    let (rate, actual) = (
        s.evidence("interrupted_sleeps_per_sec").unwrap(),
        s.evidence("mean_actual_ns").unwrap(),
    );
    // What was slept adds up to at most the time that passed.
    assert!(rate * actual <= 1.05e9, "{s:#?}");
}

/// Class 2: absolute CLOCK_REALTIME deadlines get their real length, not 0.
#[test]
#[ignore = "needs root"]
fn absolute_realtime_sleeps_have_a_requested_length() {
    let _one = one_at_a_time();
    let p = Program::c("abs_sleep");
    let f = watch(&p, true);
    let s = about(&f, FindingKind::SleepOverhead, u64::from(p.pid()))
        .unwrap_or_else(|| panic!("sleep_overhead: {f:#?}"));
    let requested = s.evidence("mean_requested_ns").unwrap();
    // 5 ms deadlines, less the loop's own time and the previous oversleep.
    assert!(
        (1e6..=5.1e6).contains(&requested),
        "requested {requested} ns: {s:#?}"
    );
    assert!(!s.summary.contains("asking for 0.00 ms"), "{s:#?}");
}

/// Class 3: a main thread woken by short-lived threads is told so, not
/// that it has a periodic timer.
#[test]
#[ignore = "needs root"]
fn thread_woken_main_is_attributed_to_threads_not_a_timer() {
    let _one = one_at_a_time();
    let p = Program::c("thread_woken");
    let f = watch(&p, true);
    let w = about(&f, FindingKind::PeriodicWakeups, u64::from(p.pid()))
        .unwrap_or_else(|| panic!("periodic_wakeups: {f:#?}"));
    assert!(
        w.summary.contains("woken by other threads of this process"),
        "{w:#?}"
    );
    assert!(!w.summary.contains("a periodic timer"), "{w:#?}");
    assert!(w.advice.contains("batches"), "{w:#?}");
}

/// One finding per cause: twenty alike sleepers are one group. On a noisy
/// machine a worker may miss a rule's bar (its rate not steady enough in a
/// short window) or differ by more than the tolerance; most must be in the
/// group, and no more than a few stragglers may be reported alone.
fn assert_one_group_of_twenty(f: &[Finding], kind: FindingKind) {
    // Of the rule's kind only: on a loaded machine twenty threads that
    // wait for a CPU are a true run-queue contention finding as well.
    let groups: Vec<_> = f
        .iter()
        .filter(|x| x.kind == kind)
        .filter(|x| matches!(&x.subject, Subject::Threads { name, .. } if name == "worker-{n}"))
        .collect();
    assert_eq!(groups.len(), 1, "{f:#?}");
    let g = groups[0];
    let n = g.subject.tids().len();
    assert!(n >= 15, "{g:#?}");
    assert!(
        g.summary
            .starts_with(&format!("{n} threads \"worker-{{n}}\"")),
        "{g:#?}"
    );
    let alone = f
        .iter()
        .filter(|x| x.kind == kind)
        .filter(
            |x| matches!(&x.subject, Subject::Thread { name, .. } if name.starts_with("worker-")),
        )
        .count();
    assert!(alone <= 20 - n, "{f:#?}");
}

#[test]
#[ignore = "needs root"]
fn twenty_alike_sleepers_are_one_finding_with_ebpf() {
    let _one = one_at_a_time();
    let p = Program::c("twenty_sleepers");
    assert_one_group_of_twenty(&watch(&p, true), FindingKind::SleepOverhead);
}

// The same scenarios from /proc alone (no privilege): no kernel view, so
// no sleep or poll counts, and no word on what wakes a thread.

#[test]
fn timer_loop_from_proc_is_periodic_not_busy() {
    let _one = one_at_a_time();
    let p = Program::c("timer_loop");
    assert_timer_loop(&watch(&p, false), p.pid(), false);
}

#[test]
fn thread_woken_main_from_proc_claims_no_timer() {
    let _one = one_at_a_time();
    let p = Program::c("thread_woken");
    let f = watch(&p, false);
    let w = about(&f, FindingKind::PeriodicWakeups, u64::from(p.pid()))
        .unwrap_or_else(|| panic!("periodic_wakeups: {f:#?}"));
    assert!(!w.summary.contains("a periodic timer"), "{w:#?}");
    assert!(w.summary.contains("which one is unknown"), "{w:#?}");
}

#[test]
fn twenty_alike_sleepers_are_one_finding_from_proc() {
    let _one = one_at_a_time();
    let p = Program::c("twenty_sleepers");
    assert_one_group_of_twenty(&watch(&p, false), FindingKind::PeriodicWakeups);
}

/// Class 7: thread exits. 400 threads that each start and exit between two
/// samples: the kernel source counts every exit (exactly the program's own
/// count), while the sampler's thread lists see at most a few of them, and
/// the interval says which number comes from where.
#[test]
#[ignore = "needs root"]
fn every_thread_exit_is_counted_by_the_kernel_source() {
    use std::io::{BufRead, BufReader, Write};
    let _one = one_at_a_time();
    const THREADS: u64 = 400;
    let mut child = Command::new(compiled("thread_churn"))
        .args([PROGRAM_SECONDS, &THREADS.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start thread_churn");
    let pid = child.id();
    let source = EbpfSource::attach(Target::Pid(pid))
        .unwrap_or_else(|e| panic!("attach (needs root, kernel BTF, clang): {e}"));
    let sampler = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_kernel_source(Box::new(source))
        .build()
        .unwrap();
    let before = sampler.sample_now().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "go").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "done");
    let after = sampler.sample_now().unwrap();
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let i = Interval::between(&before, &after);
    assert_eq!(i.kernel_thread_exits, Some(THREADS), "{i:#?}");
    assert!(i.threads_exited <= 1, "{}", i.threads_exited);
}
