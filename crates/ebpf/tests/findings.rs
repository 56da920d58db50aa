//! The findings engine on an unmodified workload: no probes, only the eBPF
//! kernel source. Needs root: `cargo test -p wakemeter-ebpf -- --include-ignored`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use wakemeter::{FindingKind, SamplerBuilder, Thresholds};
use wakemeter_ebpf::{EbpfSource, Target};

fn spawn(
    name: &str,
    stop: &Arc<AtomicBool>,
    body: impl Fn() + Send + 'static,
) -> (u64, std::thread::JoinHandle<()>) {
    let tid = Arc::new(AtomicU64::new(0));
    let (t2, s2) = (tid.clone(), stop.clone());
    let h = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // SAFETY: gettid has no preconditions.
            t2.store(unsafe { libc::gettid() } as u64, Ordering::SeqCst);
            while !s2.load(Ordering::Relaxed) {
                body();
            }
        })
        .unwrap();
    while tid.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    (tid.load(Ordering::SeqCst), h)
}

#[test]
#[ignore = "needs root"]
fn unmodified_busy_poller_and_sleep_loop_are_flagged_from_the_kernel_view() {
    let source = match EbpfSource::attach(Target::SelfProcess) {
        Ok(s) => s,
        Err(e) => panic!("attach (needs root, kernel BTF and a build with clang): {e}"),
    };
    let t = Thresholds::default()
        .with_window(Duration::from_secs(2))
        .with_min_window(Duration::from_secs(1))
        .with_cpu_window(Duration::from_secs(2))
        .with_cpu_min_window(Duration::from_secs(1))
        .with_wakeups_window(Duration::from_secs(2))
        .with_wakeups_min_window(Duration::from_secs(1))
        .with_memory_min_window(Duration::from_secs(1));
    let sampler = SamplerBuilder::new()
        .with_interval(Duration::from_millis(100))
        .with_thresholds(t)
        .with_kernel_source(Box::new(source))
        .build()
        .unwrap();
    let mut fds = [0i32; 2];
    // SAFETY: valid out-array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (r, w) = (fds[0], fds[1]);
    let stop = Arc::new(AtomicBool::new(false));
    let (spinner, h1) = spawn("raw-spinner", &stop, move || {
        let mut p = libc::pollfd {
            fd: r,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 0) };
    });
    let (sleeper, h2) = spawn("raw-sleeper", &stop, || {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: valid timespec; no remainder wanted.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    });
    let (blocked, h3) = spawn("raw-blocked", &stop, move || {
        let mut p = libc::pollfd {
            fd: r,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 200) };
    });
    let guard = sampler.start().unwrap();
    // Until the rules' 2 s window holds 15 samples or more, however long a
    // loaded machine takes to give the sampler that many (a fixed 2.5 s
    // may hold too few), with a hang guard of minutes.
    let started = std::time::Instant::now();
    let mut seq = None;
    loop {
        if let wakemeter::SampleWait::Stored { seq: s } =
            sampler.wait_for_sample(seq, Duration::from_secs(1))
        {
            seq = Some(s);
        }
        if sampler
            .interval_over(Duration::from_secs(2))
            .is_some_and(|i| i.duration_ns >= 1_900_000_000 && i.to_seq - i.from_seq >= 15)
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no 2 s window of 15 samples"
        );
    }
    drop(guard);
    let findings = sampler.findings();
    let interval = sampler.interval_over(Duration::from_secs(2)).unwrap();
    stop.store(true, Ordering::Relaxed);
    for h in [h1, h2, h3] {
        h.join().unwrap();
    }
    // SAFETY: closing our own pipe.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
    let about = |tid: u64, kind: FindingKind| {
        findings
            .iter()
            .any(|f| f.kind == kind && f.subject.tid() == Some(tid))
    };
    assert!(about(spinner, FindingKind::BusyPoller), "{findings:#?}");
    assert!(about(sleeper, FindingKind::SleepOverhead), "{findings:#?}");
    assert!(
        findings.iter().all(|f| f.subject.tid() != Some(blocked)),
        "{findings:#?}"
    );
    // The kernel view is merged into the per-thread interval records.
    let k = interval
        .threads
        .iter()
        .find(|t| t.tid == spinner)
        .and_then(|t| t.kernel.clone())
        .unwrap();
    assert!(
        k.poll_calls_per_sec >= 1000.0 && k.idle_poll_ratio > 0.99,
        "{k:?}"
    );
    let k = interval
        .threads
        .iter()
        .find(|t| t.tid == blocked)
        .and_then(|t| t.kernel.clone())
        .unwrap();
    assert!(
        k.poll_calls_per_sec <= 10.0 && k.off_cpu.poll_ns > 1_000_000_000,
        "{k:?}"
    );
}
