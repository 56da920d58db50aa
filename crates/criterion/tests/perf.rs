//! perf counters: software events work here; hardware events either work
//! (a machine with a PMU) or fail with the typed error naming the PMU.

#![cfg(any(target_os = "linux", target_os = "android"))]

use std::time::Duration;

use criterion::measurement::Measurement;
use wakemeter_criterion::{ContextSwitches, Error, PerfCounter, PerfEvent};

/// Opens a counter; these tests run as root (`--include-ignored`), where
/// every software event must open. A refusal still names its reason.
fn open(event: PerfEvent) -> Option<PerfCounter> {
    match PerfCounter::new(event) {
        Ok(c) => Some(c),
        Err(e @ Error::Forbidden { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("perf_event_paranoid"), "{msg}");
            panic!("{}: {msg} (run as root)", event.name())
        }
        Err(e) => panic!("{}: {e}", event.name()),
    }
}

#[test]
#[ignore = "needs root (perf events with kernel counts)"]
fn perf_context_switches_match_getrusage_exactly() {
    let Some(perf) = open(PerfEvent::ContextSwitches) else {
        return;
    };
    assert!(perf.counts_kernel());
    let ru = ContextSwitches::all();
    let (p, r) = (perf.start(), ru.start());
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (rv, pv) = (ru.end(r), perf.end(p));
    assert!(rv >= 10);
    assert_eq!(
        pv, rv,
        "perf's context-switches = nvcsw + nivcsw of the thread"
    );
    assert_eq!(
        perf.scaled_samples(),
        0,
        "software counters are never multiplexed"
    );
}

#[test]
#[ignore = "needs root (perf events with kernel counts)"]
fn software_counters_count() {
    let Some(tc) = open(PerfEvent::TaskClock) else {
        return;
    };
    let Some(pf) = open(PerfEvent::PageFaults) else {
        return;
    };
    let (t, p) = (tc.start(), pf.start());
    let mut v = vec![0u8; 64 << 20];
    for i in (0..v.len()).step_by(4096) {
        v[i] = 1;
    }
    std::hint::black_box(&v);
    let (pv, tv) = (pf.end(p), tc.end(t));
    assert!(pv >= 1000, "touching 64 MiB faults in pages: {pv}");
    assert!(tv > 0);
    let unit = tc.formatter().format_value(1500.0);
    assert!(unit.contains("µs cpu"), "{unit}");
    let unit = pf.formatter().format_value(2.0);
    assert!(unit.contains("page-faults/iter"), "{unit}");
}

#[test]
fn hardware_counters_work_or_name_the_missing_pmu() {
    for event in [
        PerfEvent::Cycles,
        PerfEvent::Instructions,
        PerfEvent::CacheMisses,
    ] {
        assert!(event.is_hardware());
        match PerfCounter::new(event) {
            Ok(c) => {
                let s = c.start();
                std::hint::black_box((0..1000u64).sum::<u64>());
                let _ = c.end(s);
            }
            Err(e @ Error::NoCounter { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("PMU"), "{msg}");
                assert!(msg.contains(event.name()), "{msg}");
            }
            Err(Error::Forbidden { .. }) => {}
            Err(e) => panic!("{}: unexpected error {e}", event.name()),
        }
    }
}

#[test]
#[ignore = "needs root (perf events with kernel counts)"]
fn reading_on_another_thread_than_the_owner_panics() {
    let Some(c) = open(PerfEvent::TaskClock) else {
        return;
    };
    let c = std::sync::Arc::new(c);
    let c2 = std::sync::Arc::clone(&c);
    let r = std::thread::spawn(move || c2.start()).join();
    assert!(r.is_err());
    assert!(c.read().is_ok());
}
