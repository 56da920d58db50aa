use super::files::{remove_files, write_files};
use super::policy::*;
use super::*;
use crate::model::tests::off_cpu_profile;

fn finding(kind: &str, subject: serde_json::Value) -> Finding {
    serde_json::from_value(serde_json::json!({
        "kind": kind, "severity": "warning", "subject": subject,
        "summary": "s", "evidence": [], "advice": "a", "window_ns": 1
    }))
    .expect("a finding")
}

fn thread(tid: u64) -> serde_json::Value {
    serde_json::json!({"type": "thread", "tid": tid, "name": "t"})
}

#[test]
fn kind_names_are_the_json_names() {
    for kind in FindingKind::ALL {
        let json = serde_json::to_value(kind).expect("json");
        assert_eq!(json.as_str(), Some(finding_kind_name(kind)));
    }
}

#[test]
fn findings_come_first_with_their_profile_kind_and_repeats_wait() {
    let config = AutoProfilerBuilder::new().with_thread_cpu_percent(50.0);
    let findings = vec![
        finding(
            "memory_growth",
            serde_json::json!({"type": "process", "pid": 1}),
        ),
        finding("periodic_wakeups", thread(7)),
        finding("busy_poller", thread(8)),
    ];
    let cpu = CpuUse {
        process_percent: 150.0,
        threads: vec![(9, "hot".into(), 99.0), (10, "warm".into(), 60.0)],
    };
    let mut recent = HashMap::new();
    let (t, kind) =
        choose(findings.clone(), Some(&cpu), &config, &recent, None).expect("a trigger");
    // memory_growth has no profile; periodic wakeups answer with wakers.
    assert_eq!((t.thread(), kind), (Some(7), StackKind::Wakeups));
    recent.insert(t.key(), Instant::now());
    let (t, kind) =
        choose(findings.clone(), Some(&cpu), &config, &recent, None).expect("a trigger");
    assert_eq!((t.thread(), kind), (Some(8), StackKind::OnCpu));
    recent.insert(t.key(), Instant::now());
    // Then the busiest thread over the threshold, never our own.
    let (t, _) =
        choose(findings.clone(), Some(&cpu), &config, &recent, Some(9)).expect("a trigger");
    assert!(matches!(t, Trigger::ThreadCpu { tid: 10, .. }), "{t:?}");
    recent.insert(t.key(), Instant::now());
    assert_eq!(
        choose(findings.clone(), Some(&cpu), &config, &recent, Some(9)),
        None
    );
    // The process threshold, when set, comes last.
    let config = config.with_process_cpu_percent(120.0);
    let (t, kind) = choose(findings, Some(&cpu), &config, &recent, Some(9)).expect("a trigger");
    assert!(matches!(t, Trigger::ProcessCpu { .. }) && kind == StackKind::OnCpu);
    assert_eq!(t.thread(), None);
    // A finding kind can be turned off or mapped to another profile.
    let config = AutoProfilerBuilder::new()
        .without_finding(FindingKind::BusyPoller)
        .with_finding(FindingKind::PeriodicWakeups, StackKind::OffCpu);
    let only = vec![
        finding("busy_poller", thread(8)),
        finding("periodic_wakeups", thread(7)),
    ];
    let (t, kind) = choose(only, None, &config, &HashMap::new(), None).expect("a trigger");
    assert_eq!((t.thread(), kind), (Some(7), StackKind::OffCpu));
}

fn triggered(id: u64) -> TriggeredProfile {
    TriggeredProfile {
        id,
        trigger: Trigger::Finding(finding("busy_poller", thread(id))),
        profile: off_cpu_profile(),
        files: None,
    }
}

#[test]
fn kept_captures_stay_within_count_and_bytes() {
    let one = triggered(0).profile.memory_bytes();
    let mut s = State::default();
    for id in 1..=5 {
        let dropped = s.keep(triggered(id), 3, u64::MAX);
        assert_eq!(dropped.len(), usize::from(id > 3));
    }
    let ids: Vec<u64> = s.kept.iter().map(|c| c.id).collect();
    assert_eq!(ids, [3, 4, 5]);
    assert_eq!(s.kept_bytes, 3 * one);
    // Bytes: room for two.
    let dropped = s.keep(triggered(6), 10, 2 * one + 1);
    assert_eq!(dropped.len(), 2);
    assert_eq!(s.kept_bytes, 2 * one);
    // One capture over the bound alone is not kept either.
    let dropped = s.keep(triggered(7), 10, one - 1);
    assert_eq!(dropped.len(), 3);
    assert!(s.kept.is_empty() && s.kept_bytes == 0);
    assert_eq!(s.total_evicted, 2 + 2 + 3);
    // The newest capture of a finding's kind and subject answers it.
    s.keep(triggered(8), 10, u64::MAX);
    let key = TriggerKey::Finding(FindingKind::BusyPoller, SubjectKey::Thread(8));
    assert_eq!(s.newest_for(&key).map(|c| c.id), Some(8));
    let other = TriggerKey::Finding(FindingKind::CpuHog, SubjectKey::Thread(8));
    assert!(s.newest_for(&other).is_none());
}

#[test]
fn files_are_written_new_and_removed_with_their_capture() {
    let dir = std::env::temp_dir().join(format!("wakemeter-trigger-{}", std::process::id()));
    let out = wakemeter_outfile::Dir::open_or_create(&dir).expect("dir");
    let loop_subject = serde_json::json!({"type": "loop", "name": "io/../x y", "tid": null});
    let trigger = Trigger::Finding(finding("sleep_overhead", loop_subject));
    let profile = off_cpu_profile();
    let files = write_files(&out, 3, &trigger, &profile, true).expect("files");
    let name = files
        .svg
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name");
    assert!(
        name.starts_with("wakemeter-42-0-3-sleep_overhead-loop-io____x_y-off_cpu"),
        "{name}"
    );
    let folded = std::fs::read_to_string(&files.folded).expect("folded");
    assert!(folded.contains("log_request"));
    let sizes: u64 = files
        .paths()
        .map(|p| std::fs::metadata(p).expect("written").len())
        .sum();
    assert_eq!(files.bytes, sizes);
    // Never over an existing file.
    assert!(matches!(
        write_files(&out, 3, &trigger, &profile, false),
        Err(ProfileError::File { .. })
    ));
    assert!(files.folded.exists(), "the existing file is untouched");
    let left = std::fs::read_dir(&dir).expect("dir").count();
    assert_eq!(left, 3, "no temporary file left beside the capture's files");
    let kept = Arc::new(TriggeredProfile {
        id: 3,
        trigger,
        profile,
        files: Some(files.clone()),
    });
    remove_files(Some(&out), &[kept]).expect("removed");
    assert!(files.paths().all(|p| !p.exists()));
    let _ = std::fs::remove_dir(&dir);
}

#[test]
fn options_out_of_range_are_typed_errors() {
    let sampler = Sampler::new().expect("sampler");
    let bad = [
        AutoProfiler::builder().with_max_kept(0),
        AutoProfiler::builder().with_max_kept_bytes(0),
        AutoProfiler::builder().with_thread_cpu_percent(101.0),
        AutoProfiler::builder().with_process_cpu_percent(f64::NAN),
        AutoProfiler::builder().with_cpu_window(Duration::ZERO),
    ];
    for b in bad {
        assert!(
            matches!(b.start(&sampler), Err(ProfileError::TriggerOption { .. })),
            "accepted"
        );
    }
    assert!(matches!(
        AutoProfiler::builder()
            .with_capture(Duration::ZERO)
            .start(&sampler),
        Err(ProfileError::DurationOutOfRange { .. })
    ));
}

/// Without snapshots nothing is captured, and dropping returns.
#[test]
fn idle_profiler_stops() {
    let sampler = Sampler::new().expect("sampler");
    let auto = AutoProfiler::builder().start(&sampler).expect("started");
    assert_eq!(auto.stats(), AutoProfilerStats::default());
    assert!(auto.findings().is_empty() && auto.captures().is_empty());
    auto.stop();
}
