//! Tests of `Interval::between`: rates, matching by serial, the switch split.

use super::*;
use crate::kernel::KernelSample;
use crate::model::{CpuTimeSource, ProcessSample};

fn thread(serial: u64, cpu: u64, slices: u64, vol: Option<u64>) -> ThreadSample {
    ThreadSample {
        tid: 100 + serial,
        serial,
        name: format!("t{serial}"),
        total_cpu_time_ns: cpu,
        cpu_time_source: CpuTimeSource::ThreadClock,
        total_run_queue_wait_ns: Some(cpu / 10),
        total_switches: Some(slices),
        total_voluntary_switches: vol,
        total_involuntary_switches: vol.map(|_| 0),
    }
}

fn snap(seq: u64, t_ns: u64, rss: u64, threads: Vec<ThreadSample>) -> Snapshot {
    Snapshot {
        seq,
        monotonic_ns: t_ns,
        unix_time_ns: 0,
        process: ProcessSample {
            rss_bytes: rss,
            total_cpu_time_ns: t_ns / 2,
            thread_count: threads.len() as u32,
            ..Default::default()
        },
        threads,
        switch_split_read: true,
        sampler_cost_ns: 0,
        total_sampler_cpu_time_ns: seq * 1000,
        loops: vec![],
        sleeps: vec![],
        kernel: None,
        warnings: vec![],
    }
}

#[test]
fn rates_match_deltas() {
    let a = snap(
        0,
        1_000_000_000,
        10 << 20,
        vec![
            thread(0, 100_000_000, 10, Some(4)),
            thread(1, 0, 0, Some(0)),
        ],
    );
    let b = snap(
        2,
        3_000_000_000,
        12 << 20,
        vec![
            thread(0, 600_000_000, 410, Some(404)),
            thread(2, 50_000_000, 7, None),
        ],
    );
    let i = Interval::between(&a, &b);
    assert_eq!(i.duration_ns, 2_000_000_000);
    assert_eq!(i.threads_exited, 1);
    let t0 = i.thread_by_serial(0).unwrap();
    assert_eq!(t0.cpu_time_ns, 500_000_000);
    assert!((t0.cpu_percent - 25.0).abs() < 1e-9);
    assert_eq!(t0.switches_per_sec, Some(200.0));
    assert_eq!(t0.voluntary_switches_per_sec, Some(200.0));
    assert_eq!(t0.run_queue_wait_percent, Some(2.5));
    assert!(!t0.started_in_interval);
    let t2 = i.thread_by_serial(2).unwrap();
    assert!(t2.started_in_interval);
    assert_eq!(t2.cpu_time_ns, 50_000_000);
    assert_eq!(t2.voluntary_switches, None, "absent split stays absent");
    assert_eq!(i.threads[0].serial, 0, "highest CPU first");
    assert_eq!(i.process.rss_change_bytes, 2 << 20);
    assert!((i.process.cpu_percent - 50.0).abs() < 1e-9);
    assert_eq!(i.sampler_cpu_time_ns, 2000);
}

/// A deterministic shuffle (a linear congruential generator).
fn shuffle<T>(v: &mut [T], seed: &mut u64) {
    for i in (1..v.len()).rev() {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        v.swap(i, (*seed >> 33) as usize % (i + 1));
    }
}

fn kernel(tid: u64, wakes: u64) -> KernelThreadStats {
    KernelThreadStats {
        tid,
        total_wakes: wakes,
        total_on_cpu_ns: wakes * 1000,
        ..Default::default()
    }
}

/// Threads are matched across the two ends by serial whatever their
/// order, exits and starts are counted, and kernel counters are found
/// by TID whether sorted or not: checked against a plain linear search
/// of the earlier end for every thread.
#[test]
fn threads_match_by_serial_in_any_order() {
    let mut seed = 7;
    for round in 0..40u64 {
        // Serials 0..60 earlier; 10..70 later (10 exited, 10 started).
        let mut earlier: Vec<ThreadSample> = (0..60)
            .map(|s| thread(s, s * 1_000 + round, s, Some(s)))
            .collect();
        let mut later: Vec<ThreadSample> = (10..70)
            .map(|s| {
                thread(
                    s,
                    s * 1_000 + (s * 7919 + round) % 50_000,
                    s * 3,
                    Some(s * 2),
                )
            })
            .collect();
        // Same order most of the time (as a backend lists them),
        // shuffled in some rounds, swapped locally in others.
        match round % 4 {
            0 => {}
            1 => shuffle(&mut later, &mut seed),
            2 => {
                shuffle(&mut earlier, &mut seed);
                shuffle(&mut later, &mut seed);
            }
            _ => later.swap(3, 40),
        }
        let mut a = snap(0, 1_000_000_000, 0, earlier.clone());
        let mut b = snap(1, 2_000_000_000, 0, later.clone());
        let mut ka: Vec<KernelThreadStats> = (0..60).map(|s| kernel(100 + s, s)).collect();
        let mut kb: Vec<KernelThreadStats> = (5..70).map(|s| kernel(100 + s, s * 5)).collect();
        if round % 3 == 0 {
            shuffle(&mut ka, &mut seed);
            shuffle(&mut kb, &mut seed);
        }
        a.kernel = Some(KernelSample {
            threads: ka.clone(),
            ..Default::default()
        });
        b.kernel = Some(KernelSample {
            threads: kb.clone(),
            ..Default::default()
        });
        let i = Interval::between(&a, &b);
        assert_eq!(i.threads.len(), later.len());
        assert_eq!(i.threads_exited, 10, "round {round}");
        for t in &i.threads {
            let now = later.iter().find(|x| x.serial == t.serial).expect("later");
            let before = earlier.iter().find(|x| x.serial == t.serial);
            assert_eq!(t.started_in_interval, before.is_none(), "round {round}");
            let cpu = now.total_cpu_time_ns - before.map_or(0, |x| x.total_cpu_time_ns);
            assert_eq!(t.cpu_time_ns, cpu, "round {round} serial {}", t.serial);
            let vol = now.total_voluntary_switches.unwrap_or(0)
                - before.map_or(0, |x| x.total_voluntary_switches.unwrap_or(0));
            assert_eq!(t.voluntary_switches, Some(vol));
            let kb_t = kb.iter().find(|k| k.tid == t.tid).expect("kernel later");
            let ka_t = ka.iter().find(|k| k.tid == t.tid);
            let k = t.kernel.as_ref().expect("kernel interval");
            let wakes = kb_t.total_wakes - ka_t.map_or(0, |k| k.total_wakes);
            assert_eq!(k.wakes_per_sec, wakes as f64, "round {round}");
        }
        // Most CPU first, then by TID.
        assert!(i.threads.windows(2).all(|w| {
            (w[0].cpu_time_ns, std::cmp::Reverse(w[0].tid))
                > (w[1].cpu_time_ns, std::cmp::Reverse(w[1].tid))
        }));
        assert_eq!(i.kernel_uncovered_threads, Some(0));
    }
}

/// An interval whose ends did not read the voluntary/involuntary
/// split takes it from the outermost snapshots inside that did: the
/// same figures as the interval between those two snapshots gives
/// each thread, the other figures its own.
#[test]
fn the_split_comes_from_the_outermost_snapshots_that_read_it() {
    use crate::history::{Encoders, Header, History};
    use crate::model::{ABSENT, ThreadIdent};
    use std::sync::Arc;
    let idents: Vec<Arc<ThreadIdent>> = (0..40)
        .map(|s| ThreadIdent::thread_clock(500 + s, s, &format!("w{s}")))
        .collect();
    let mut enc = Encoders::default();
    let mut h = History::new(16, u64::MAX);
    let mut seed = 3;
    for seq in 0..6u64 {
        let split = seq == 1 || seq == 4;
        // Thread 0 exits after snapshot 2; thread 39 starts at 3.
        let mut threads: Vec<ThreadRow> = idents
            .iter()
            .filter(|i| {
                let exited = i.serial == 0 && seq > 2;
                let unborn = i.serial == 39 && seq < 3;
                !(exited || unborn)
            })
            .map(|i| ThreadRow {
                ident: i.clone(),
                total_cpu_time_ns: seq * 1_000 * (i.serial + 1),
                total_run_queue_wait_ns: seq * 10,
                total_switches: seq * 100 * (i.serial % 7),
                total_voluntary_switches: if split {
                    seq * 60 * (i.serial % 5)
                } else {
                    ABSENT
                },
                total_involuntary_switches: if split {
                    seq * 3 * (i.serial % 3)
                } else {
                    ABSENT
                },
            })
            .collect();
        if seq == 4 {
            shuffle(&mut threads, &mut seed);
        }
        let header = Header {
            seq,
            monotonic_ns: 1_000_000_000 * (seq + 1) + seq * 7_777,
            unix_time_ns: 0,
            process: Default::default(),
            switch_split_read: split,
            sampler_cost_ns: 0,
            total_sampler_cpu_time_ns: 0,
            warnings: Vec::new(),
        };
        h.push_rows(&mut enc, header, threads);
    }
    let (from, to) = (h.get(0).expect("0"), h.get(5).expect("5"));
    let got = between_in_history(&h, from, to);
    let own = between_stored(from, to);
    let split = between_stored(h.get(1).expect("1"), h.get(4).expect("4"));
    assert_eq!(got.threads.len(), own.threads.len());
    for (g, o) in got.threads.iter().zip(&own.threads) {
        assert_eq!(g.serial, o.serial);
        let s = split.thread_by_serial(g.serial).expect("alive at 4");
        let mut expected = o.clone();
        expected.voluntary_switches = s.voluntary_switches;
        expected.voluntary_switches_per_sec = s.voluntary_switches_per_sec;
        expected.involuntary_switches = s.involuntary_switches;
        expected.involuntary_switches_per_sec = s.involuntary_switches_per_sec;
        assert_eq!(*g, expected);
        assert!(g.voluntary_switches.is_some(), "serial {}", g.serial);
    }
    assert_eq!(got.threads_exited, 1);
}

#[test]
fn zero_length_interval_has_zero_rates() {
    let a = snap(0, 5, 0, vec![thread(0, 10, 1, None)]);
    let i = Interval::between(&a, &a);
    assert_eq!(i.threads[0].cpu_percent, 0.0);
    assert_eq!(i.threads[0].switches_per_sec, Some(0.0));
}
