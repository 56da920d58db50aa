//! Tests of the experiment: processes told apart, the series cap, noise and replicates.

use super::*;
use crate::compare::ThreadGroupInterval;
use crate::interval::ProcessInterval;
use crate::model::TargetIdentity;

fn header(pid: u32, name: &str, role: &str) -> RecordingHeader {
    RecordingHeader {
        schema_version: super::super::RECORDING_SCHEMA_VERSION,
        report_schema_version: crate::sampler::REPORT_SCHEMA_VERSION,
        library_version: "test".to_string(),
        target: TargetIdentity {
            pid,
            name: name.to_string(),
            start_time_unix_ns: None,
        },
        config: Default::default(),
        system: Default::default(),
        start_unix_time_ns: 0,
        role: Some(role.to_string()),
        label: None,
    }
}

fn interval(pid: u32, cpu: f64) -> IntervalSummary {
    IntervalSummary {
        pid: Some(pid),
        from_seq: 0,
        to_seq: 1,
        duration_ns: 1_000_000_000,
        process: ProcessInterval {
            cpu_percent: cpu,
            ..Default::default()
        },
        switches_per_sec: None,
        voluntary_switches_per_sec: None,
        wakes_per_sec: None,
        groups: vec![ThreadGroupInterval {
            cpu_percent: cpu / 2.0,
            ..ThreadGroupInterval::empty("worker-{n}".to_string())
        }],
        loops: Vec::new(),
        sleeps: Vec::new(),
        sampler_cpu_percent: 0.0,
    }
}

/// One run: processes (pid, name, role, cpu per interval), intervals
/// interleaved as a streaming recording writes them.
fn run(e: &mut Experiment, side: Side, procs: &[(u32, &str, &str, &[f64])]) {
    e.begin_run(side);
    for (pid, name, role, _) in procs {
        e.push(side, RecordLine::Header(header(*pid, name, role)))
            .unwrap();
    }
    let n = procs.iter().map(|p| p.3.len()).max().unwrap_or(0);
    for k in 0..n {
        for (pid, _, _, cpu) in procs {
            if let Some(c) = cpu.get(k) {
                e.push(side, RecordLine::Interval(interval(*pid, *c)))
                    .unwrap();
            }
        }
    }
    e.push(
        side,
        RecordLine::End(super::super::RecordingEnd::new(0, "deadline", 0)),
    )
    .unwrap();
}

/// RSS of an idle process, constant within each recording, one page
/// less in the variant: no spread on either side, so the bootstrap
/// called the page "-0.0 MiB (-0.0%) CHANGED". Up to a page it is "no change";
/// a real difference (a MiB) is still "changed".
#[test]
fn rss_differences_below_a_page_are_no_change() {
    let verdict = |control_rss: u64, variant_rss: u64| {
        let mut e = Experiment::new(IdentityRule::NameAndRole);
        for (side, rss) in [(Side::Control, control_rss), (Side::Variant, variant_rss)] {
            e.begin_run(side);
            e.push(side, RecordLine::Header(header(10, "idle", "idle")))
                .unwrap();
            for _ in 0..12 {
                let mut i = interval(10, 1.0);
                i.process.rss_bytes = rss;
                e.push(side, RecordLine::Interval(i)).unwrap();
            }
            e.push(
                side,
                RecordLine::End(super::super::RecordingEnd::new(0, "deadline", 0)),
            )
            .unwrap();
        }
        let c = e.compare();
        row(&c, Some("idle [idle]"), "process", "rss_bytes").verdict
    };
    let base = 40 << 20;
    assert_eq!(verdict(base, base - 4096), Verdict::NoChange);
    assert_eq!(verdict(base, base + (1 << 20)), Verdict::Changed);
}

fn row<'a>(c: &'a Comparison, process: Option<&str>, subject: &str, metric: &str) -> &'a DiffRow {
    c.totals
        .iter()
        .chain(&c.rows)
        .find(|r| r.process.as_deref() == process && r.subject == subject && r.metric == metric)
        .unwrap_or_else(|| panic!("no row {process:?} {subject} {metric}"))
}

fn noisy(level: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| level + ((i as f64) * 1.7).sin() * level * 0.02)
        .collect()
}

#[test]
fn processes_sharing_a_name_are_told_apart_and_totals_add_them_up() {
    let master = "nginx: master process nginx -c origin.conf";
    let worker = "nginx: master process nginx -c origin.conf > nginx: worker process";
    let pmaster = "nginx: master process nginx -c proxy.conf";
    let pworker = "nginx: master process nginx -c proxy.conf > nginx: worker process";
    let (z, w38, w31, p15) = (
        noisy(0.0, 12),
        noisy(38.0, 12),
        noisy(31.0, 12),
        noisy(15.6, 12),
    );
    let mut e = Experiment::new(IdentityRule::NameAndRole);
    run(
        &mut e,
        Side::Control,
        &[(10, "nginx", master, &z), (11, "nginx", worker, &w38)],
    );
    run(
        &mut e,
        Side::Variant,
        &[
            (10, "nginx", master, &z),
            (11, "nginx", worker, &w31),
            (20, "nginx", pmaster, &z),
            (21, "nginx", pworker, &p15),
        ],
    );
    let c = e.compare();
    let total = row(&c, None, "total", "cpu_percent");
    assert!(
        (total.control.unwrap().mean - 38.0).abs() < 0.5,
        "{total:?}"
    );
    assert!(
        (total.variant.unwrap().mean - 46.6).abs() < 0.5,
        "{total:?}"
    );
    assert_eq!(total.verdict, Verdict::Changed);
    let origin = row(
        &c,
        Some(&format!("nginx [{worker}]")),
        "process",
        "cpu_percent",
    );
    assert!((origin.control.unwrap().mean - 38.0).abs() < 0.5);
    assert_eq!(origin.verdict, Verdict::Changed);
    let proxy = row(
        &c,
        Some(&format!("nginx [{pworker}]")),
        "process",
        "cpu_percent",
    );
    assert_eq!(proxy.verdict, Verdict::OnlyInVariant);
    // The largest change leads: the proxy's worker (15.6 new).
    assert_eq!(
        c.rows[0].process.as_deref(),
        Some(format!("nginx [{pworker}]").as_str())
    );
    assert_eq!(c.tested_over, "intervals");
    // By name only, the four processes of the variant are one, summed.
    let mut e = Experiment::new(IdentityRule::Name);
    run(
        &mut e,
        Side::Control,
        &[(10, "nginx", master, &z), (11, "nginx", worker, &w38)],
    );
    run(
        &mut e,
        Side::Variant,
        &[(11, "nginx", worker, &w31), (21, "nginx", pworker, &p15)],
    );
    let c = e.compare();
    let r = row(&c, Some("nginx"), "process", "cpu_percent");
    assert!((r.variant.unwrap().mean - 46.6).abs() < 0.5, "{r:?}");
}

#[test]
fn series_past_the_cap_are_left_out_and_counted_but_totals_kept() {
    let mut e = Experiment::new(IdentityRule::NameAndRole);
    e.begin_run(Side::Control);
    e.push(Side::Control, RecordLine::Header(header(1, "app", "app")))
        .unwrap();
    // One series per group here (only its CPU is set).
    let per = MAX_SERIES_PER_RUN + 10;
    for k in 0..per {
        let mut i = interval(1, 10.0);
        i.groups[0].name = format!("g{k}");
        e.push(Side::Control, RecordLine::Interval(i)).unwrap();
    }
    let run = &e.sides[0].runs[0];
    assert!(run.series.len() <= MAX_SERIES_PER_RUN + 7);
    assert!(run.left_out > 0);
    let c = e.compare();
    assert!(c.control.values_left_out > 0);
    let t = row(&c, None, "total", "cpu_percent");
    assert_eq!(t.control.unwrap().intervals, per as u64);
}

#[test]
fn the_same_steady_process_twice_is_within_noise() {
    let mut e = Experiment::new(IdentityRule::NameAndRole);
    let a = noisy(20.0, 30);
    let b: Vec<f64> = noisy(20.0, 30).into_iter().rev().collect();
    run(&mut e, Side::Control, &[(1, "app", "app", &a)]);
    run(&mut e, Side::Variant, &[(1, "app", "app", &b)]);
    let c = e.compare();
    for r in c.totals.iter().chain(&c.rows) {
        assert_ne!(r.verdict, Verdict::Changed, "{r:?}");
    }
}

#[test]
fn replicates_are_tested_over_runs_and_few_intervals_are_not_enough() {
    let mut e = Experiment::new(IdentityRule::NameAndRole);
    for cpu in [10.0, 11.0, 12.0] {
        run(&mut e, Side::Control, &[(1, "app", "app", &[cpu, cpu])]);
    }
    for cpu in [20.0, 21.0, 22.0] {
        run(&mut e, Side::Variant, &[(1, "app", "app", &[cpu, cpu])]);
    }
    let c = e.compare();
    assert_eq!(c.tested_over, "runs");
    let r = row(&c, Some("app [app]"), "process", "cpu_percent");
    assert_eq!((r.control.unwrap().runs, r.verdict), (3, Verdict::Changed));
    assert_eq!(r.delta, Some(10.0));
    let mut e = Experiment::new(IdentityRule::NameAndRole);
    run(&mut e, Side::Control, &[(1, "app", "app", &[10.0, 11.0])]);
    run(&mut e, Side::Variant, &[(1, "app", "app", &[30.0, 31.0])]);
    let c = e.compare();
    assert_eq!(
        row(&c, Some("app [app]"), "process", "cpu_percent").verdict,
        Verdict::NotEnoughData
    );
}
