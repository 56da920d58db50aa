//! Off-CPU and wakeup profiles of programs whose answer is known, checked
//! against libbpf-tools' `offcputime` on the same run (root: eBPF).

mod common;

/// One capture at a time: the programs with a known answer need the CPUs
/// (two cores here) to themselves.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wakemeter_profile::{OffCpuCause, Profile, ProfileOptions, Profiler, StackKind};

/// Waits (with [`common::HANG_GUARD`]) until `done` holds.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < common::HANG_GUARD, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until process `pid` holds a BPF link (its programs are
/// attached): a tool's start-up takes a second on an idle machine and
/// far longer on a loaded one.
fn wait_for_bpf_link(pid: u32) {
    wait_until("offcputime attached its programs", || {
        std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|l| l.to_string_lossy().contains("bpf_link"))
            })
        })
    });
}

/// The output of `child` once it exits, killing it after
/// [`common::HANG_GUARD`].
fn wait_with_guard(child: &mut std::process::Child) -> std::process::Output {
    use std::io::Read;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    // Read both pipes while it prints (a full pipe would block it).
    std::thread::scope(|scope| {
        let out = child.stdout.take();
        let err = child.stderr.take();
        let a = scope.spawn(move || {
            if let Some(mut o) = out {
                let _ = o.read_to_end(&mut stdout);
            }
            stdout
        });
        let b = scope.spawn(move || {
            if let Some(mut e) = err {
                let _ = e.read_to_end(&mut stderr);
            }
            stderr
        });
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the child") {
                break status;
            }
            if start.elapsed() > common::HANG_GUARD {
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        std::process::Output {
            status,
            stdout: a.join().expect("stdout reader"),
            stderr: b.join().expect("stderr reader"),
        }
    })
}

/// Off-CPU time of the write site and of the lock site, in any unit:
/// stacks through the kernel's pipe write or the request thread, and
/// through a futex wait or a lock thread. Either half of a stack names the
/// site: a stack map drops one half on a hash collision (offcputime prints
/// `[Missed Kernel Stack]`), and where that lands depends on the boot's
/// kernel addresses.
fn sites(stacks: impl Iterator<Item = (Vec<String>, u64)>) -> (u64, u64) {
    let (mut write, mut lock) = (0u64, 0u64);
    for (frames, value) in stacks {
        let has = |part: &str| frames.iter().any(|f| f.contains(part));
        if has("pipe_write") || has("request_thread") {
            write += value;
        } else if has("futex_wait") || has("lock_thread") {
            lock += value;
        }
    }
    (write, lock)
}

/// `offcputime` prints one block per stack: frames, a `-  comm (tid)`
/// line, then the microseconds; blocks are separated by blank lines.
fn offcputime_blocks(text: &str) -> Vec<(Vec<String>, u64)> {
    text.split("\n\n")
        .filter_map(|block| {
            let lines: Vec<String> = block
                .lines()
                .map(|l| l.trim().to_owned())
                .filter(|l| !l.is_empty())
                .collect();
            let value = lines.last()?.parse().ok()?;
            Some((lines, value))
        })
        .collect()
}

fn ours(profile: &Profile) -> Vec<(Vec<String>, u64)> {
    profile
        .samples
        .iter()
        .map(|s| {
            (
                s.frames.iter().map(|f| f.label()).collect(),
                s.total_ns / 1000,
            )
        })
        .collect()
}

/// Makes sure `offcputime` (Debian package libbpf-tools) is installed.
fn offcputime() -> &'static str {
    let path = "/usr/sbin/offcputime";
    if !std::path::Path::new(path).exists() {
        let status = Command::new("bash")
            .arg("-c")
            .arg(concat!(
                "source '",
                env!("CARGO_MANIFEST_DIR"),
                "/../../scripts/prereqs.sh' && apt_install libbpf-tools"
            ))
            .status()
            .expect("bash runs");
        assert!(status.success(), "could not install libbpf-tools");
    }
    path
}

/// Write and lock sites get off-CPU time in the same proportion as
/// offcputime measures on the same run (within 10 points), with the causes
/// of the counters: `other` for the pipe write, `lock` for the mutex.
#[test]
#[ignore = "needs root"]
fn off_cpu_sites_match_offcputime() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tool = offcputime();
    let program = common::build(
        "offcpu",
        "offcpu",
        &["-g", "-O1", "-fno-omit-frame-pointer"],
    );
    let child = common::start(&program, &[common::PROGRAM_SECONDS]);
    let pid = child.pid().to_string();
    // offcputime runs until SIGINT (then prints what it saw): it starts
    // first and stops after our capture, so its window holds ours. Both
    // wait for work, not for a fixed time a loaded machine may spend
    // elsewhere.
    let mut reference = Command::new(tool)
        // A large stack map: fewer hash collisions, which drop whole
        // stacks in offcputime (it does not count them).
        .args(["-p", &pid, "--stack-storage-size", "65536", "86400"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("offcputime runs");
    wait_for_bpf_link(reference.id());
    // Each pipe write that blocks and each lock wait is a voluntary
    // switch: 400 of them give both sites many stacks.
    let profile = common::capture_until(
        &Profiler::new(),
        child.pid(),
        &ProfileOptions::new(StackKind::OffCpu),
        |w| w.voluntary_switches >= 400,
    );
    // Work done after our capture ended, seen by offcputime only: a few
    // more switches so its window surely holds ours.
    let after = common::Work::of(child.pid());
    wait_until("10 more switches after the capture", || {
        common::Work::of(child.pid())
            .since(after)
            .voluntary_switches
            >= 10
    });
    // Our own child, alive (not yet waited for): its pid is its own.
    let interrupted = Command::new("kill")
        .args(["-INT", &reference.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(interrupted.success());
    let out = wait_with_guard(&mut reference);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ref_write, ref_lock) =
        sites(offcputime_blocks(&String::from_utf8_lossy(&out.stdout)).into_iter());
    let (our_write, our_lock) = sites(ours(&profile).into_iter());
    let share = |w: u64, l: u64| w as f64 / (w + l).max(1) as f64;
    println!(
        "write/lock off-CPU us: ours {our_write}/{our_lock} ({:.3}), offcputime {ref_write}/{ref_lock} ({:.3})",
        share(our_write, our_lock),
        share(ref_write, ref_lock)
    );
    assert!(our_write > 0 && our_lock > 0 && ref_write > 0 && ref_lock > 0);
    assert!(
        (share(our_write, our_lock) - share(ref_write, ref_lock)).abs() <= 0.10,
        "write share differs by more than 10 points"
    );
    // The causes are the counters' classification.
    let cause_of = |part: &str| {
        profile
            .samples
            .iter()
            .filter(|s| s.frames.iter().any(|f| f.label().contains(part)))
            .max_by_key(|s| s.total_ns)
            .and_then(|s| s.cause)
    };
    assert_eq!(cause_of("pipe_write"), Some(OffCpuCause::Other));
    assert_eq!(cause_of("futex_wait"), Some(OffCpuCause::Lock));
    // The user side names the call sites: libc's write (`__write`) called
    // from request_thread, the lock waits from lock_thread (the direct
    // callers of libc functions without frame pointers are skipped by
    // frame-pointer unwinding, offcputime's too; see offcpu.c).
    let libc_write = |s: &wakemeter_profile::StackSample| {
        s.frames
            .iter()
            .any(|f| !f.kernel && f.function.as_deref().is_some_and(|n| n.ends_with("write")))
    };
    assert!(profile.share_where(|s| libc_write(s) && s.contains_function("request_thread")) > 0.0);
    assert!(profile.inclusive_share("lock_thread") > 0.0);
    // No tracing machinery in the stacks.
    assert!(
        profile.share_where(|s| s.frames.iter().any(|f| f.label().contains("bpf_trace_run")))
            == 0.0
    );
}

/// The reader of the pipe wakes the blocked writer, and an unlock wakes the
/// other lock thread: the wakers' stacks name their threads' functions and
/// the kernel's pipe read and futex wake.
#[test]
#[ignore = "needs root"]
fn wakeup_stacks_name_the_waker() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let program = common::build(
        "offcpu",
        "offcpu-wake",
        &["-g", "-O1", "-fno-omit-frame-pointer"],
    );
    let child = common::start(&program, &[common::PROGRAM_SECONDS]);
    // Every wakeup of a blocked thread ends one of its voluntary
    // switches: 200 of them, whatever time they take on a busy machine.
    let profile = common::capture_until(
        &Profiler::new(),
        child.pid(),
        &ProfileOptions::new(StackKind::Wakeups),
        |w| w.voluntary_switches >= 200,
    );
    let kernel_has = |s: &wakemeter_profile::StackSample, part: &str| {
        s.frames
            .iter()
            .any(|f| f.kernel && f.label().contains(part))
    };
    // The reader's own function is skipped: it calls libc's read, which
    // has no frame pointer (see offcpu.c).
    let user_read = |s: &wakemeter_profile::StackSample| {
        s.frames
            .iter()
            .any(|f| !f.kernel && f.function.as_deref().is_some_and(|n| n.ends_with("read")))
    };
    let by_reader = profile.share_where(|s| user_read(s) && kernel_has(s, "pipe_read"));
    let by_lock =
        profile.share_where(|s| s.contains_function("lock_thread") && kernel_has(s, "futex_wake"));
    println!(
        "{} stacks; woken by the reader (read, pipe_read) {:.2}, by lock_thread (futex_wake) {:.2}",
        profile.samples.len(),
        by_reader,
        by_lock
    );
    assert!(by_reader > 0.0, "no wakeup from the pipe reader");
    assert!(by_lock > 0.0, "no wakeup from the mutex unlock");
    let reader = profile
        .samples
        .iter()
        .find(|s| user_read(s) && kernel_has(s, "pipe_read"))
        .expect("reader stack");
    assert!(reader.waker.as_ref().is_some_and(|(tid, _)| *tid != 0));
    // Interrupt-context wakers have no user stack, only a kernel one.
    for s in profile
        .samples
        .iter()
        .filter(|s| s.waker.as_ref().is_some_and(|w| w.0 == 0))
    {
        assert!(s.frames.iter().all(|f| f.kernel), "{s:?}");
    }
}
