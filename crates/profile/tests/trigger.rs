//! Continuous profiling against a program whose answer is known (root:
//! eBPF): a busy-polling loop's finding comes with an on-CPU profile of
//! its thread that names its poll call site.

mod common;

use std::time::{Duration, Instant};

use wakemeter::{FindingKind, SamplerBuilder, Subject, Thresholds};
use wakemeter_profile::{AutoProfiler, StackKind, Target, Trigger};

/// Generous: the finding needs 1-2 s of history, the capture 3 s; the
/// two cores are shared with other builds.
const LIMIT: Duration = Duration::from_secs(300);

/// Of the samples whose stack holds `callee` (by weight), how many have
/// `caller` as the frame directly below it (towards the root), and how
/// many hold `callee` at all.
fn direct_caller_weight(
    profile: &wakemeter_profile::Profile,
    callee: &str,
    caller: &str,
) -> (u64, u64) {
    let name = |f: &wakemeter_profile::Frame| f.function.as_deref() == Some(callee);
    let mut direct = 0;
    let mut total = 0;
    for sample in &profile.samples {
        // Frames are root first: the frame before the callee is its caller.
        let Some(at) = sample.frames.iter().position(name) else {
            continue;
        };
        total += sample.count;
        if at > 0 && sample.frames[at - 1].function.as_deref() == Some(caller) {
            direct += sample.count;
        }
    }
    (direct, total)
}

#[test]
#[ignore = "needs root"]
fn busy_poller_finding_comes_with_a_stack_naming_its_poll_call_site() {
    let program = common::build(
        "busypoll",
        "busypoll-fp",
        &["-g", "-O1", "-fno-omit-frame-pointer"],
    );
    let child = common::start(&program, &[common::PROGRAM_SECONDS]);
    let pid = child.pid();
    let kernel = wakemeter_ebpf::EbpfSource::attach(Target::Pid(pid)).expect("eBPF counters");
    let sampler = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_interval(Duration::from_millis(250))
        .with_kernel_source(Box::new(kernel))
        .with_thresholds(
            Thresholds::default()
                .with_window(Duration::from_secs(2))
                .with_min_window(Duration::from_secs(1)),
        )
        .build()
        .expect("sampler");
    let _sampling = sampler.start().expect("sampling");
    let auto = AutoProfiler::builder()
        .with_capture(Duration::from_secs(3))
        .start(&sampler)
        .expect("auto profiler");

    let start = Instant::now();
    let profiled = loop {
        let found = auto
            .findings()
            .into_iter()
            .find(|f| f.finding.kind == FindingKind::BusyPoller && f.profile.is_some());
        if let Some(f) = found {
            break f;
        }
        let stats = auto.stats();
        assert!(
            start.elapsed() < LIMIT,
            "no profiled busy-poller finding; findings {:?}, stats {stats:?}",
            sampler.findings()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let Subject::Thread { tid, name } = &profiled.finding.subject else {
        panic!("subject {:?}", profiled.finding.subject);
    };
    assert_eq!(name, "poller");
    let captured = profiled.profile.expect("a profile");
    assert!(matches!(&captured.trigger, Trigger::Finding(f) if f.kind == FindingKind::BusyPoller));
    let profile = &captured.profile;
    let samples: u64 = profile.samples.iter().map(|s| s.count).sum();
    let poll_site = profile.inclusive_share("poll_forever");
    let poll_call = profile.inclusive_share("epoll_wait");
    println!(
        "{samples} samples of thread {tid}: poll_forever {:.0}%, epoll_wait {:.0}%, warnings {:?}",
        poll_site * 100.0,
        poll_call * 100.0,
        profile.warnings
    );
    assert_eq!(profile.kind, StackKind::OnCpu);
    // Only the finding's thread was captured.
    assert!(samples > 0);
    assert!(
        profile.samples.iter().all(|s| u64::from(s.tid) == *tid),
        "stacks of other threads"
    );
    // The poll call and its call site are named; every stack runs in the
    // poller's thread function.
    assert!(poll_call > 0.0 && poll_site > 0.0, "{:?}", profile.samples);
    assert!(profile.inclusive_share("poller_main") > 0.9);
    // One chain: the C library's epoll_wait has no frame pointer, yet the
    // frame below it (its caller) is poll_forever, not poll_forever's
    // caller. Nearly all: the recovery is one step, so a sample inside
    // epoll_wait's own frameless callees (the C library's
    // __pthread_enable_asynccancel / __pthread_disable_asynccancel, about
    // 5% of the samples here) names epoll_wait but not poll_forever.
    let (direct, in_epoll) = direct_caller_weight(profile, "epoll_wait", "poll_forever");
    println!("epoll_wait called directly from poll_forever in {direct} of {in_epoll} samples");
    assert!(in_epoll > 0);
    assert!(
        direct as f64 >= 0.85 * in_epoll as f64,
        "{direct} of {in_epoll} samples in epoll_wait name poll_forever as its caller: {:#?}",
        profile
            .samples
            .iter()
            .filter(|s| s.contains_function("epoll_wait"))
            .map(|s| (
                s.count,
                s.frames
                    .iter()
                    .map(|f| f.function.clone())
                    .collect::<Vec<_>>()
            ))
            .collect::<Vec<_>>()
    );
    // Kept in memory, and nothing failed.
    let stats = auto.stats();
    assert!(stats.total_failed == 0, "{stats:?}");
    assert!(stats.kept_bytes >= profile.memory_bytes());
    drop(auto);
    drop(child);
}
