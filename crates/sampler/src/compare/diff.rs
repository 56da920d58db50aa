//! The comparison of a control and a variant, each one or more runs.
//!
//! Each metric of a run is the duration-weighted mean over its intervals
//! (the process CPU's p95 is the 95th percentile of its intervals). The
//! spread shown beside it is what a person needs to tell a change from
//! noise:
//! - one run: the 5th to 95th percentile of its intervals;
//! - several runs: the lowest and highest of the runs' values, and the
//!   mean is the mean of the runs.
//!
//! A row is [`Verdict::Changed`] when the two spreads do not overlap.

use serde::{Deserialize, Serialize};

use super::{IntervalSummary, RecordingHeader};

/// One recorded run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Run {
    /// What was recorded, and how.
    pub header: RecordingHeader,
    /// Its intervals, oldest first.
    pub intervals: Vec<IntervalSummary>,
}

impl Run {
    /// A run from its header and intervals.
    pub fn new(header: RecordingHeader, intervals: Vec<IntervalSummary>) -> Self {
        Run { header, intervals }
    }
}

/// A metric's value on one side, with its spread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Spread {
    /// The value (see the module docs).
    pub mean: f64,
    /// Low end of the spread.
    pub low: f64,
    /// High end of the spread.
    pub high: f64,
    /// Runs that had this metric.
    pub runs: u32,
}

/// What a row says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// The spreads do not overlap.
    Changed,
    /// The spreads overlap: the difference may be noise.
    WithinNoise,
    /// Only the control has this metric (e.g. a thread group the variant lacks).
    OnlyInControl,
    /// Only the variant has it.
    OnlyInVariant,
}

/// One metric, control against variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DiffRow {
    /// What it is about: `process`, `thread worker-{n}`, `loop io`, `sleep site nap`.
    pub subject: String,
    /// The metric, named as in [`crate::Interval`] (`cpu_percent`, `switches_per_sec`, …).
    pub metric: String,
    /// Its unit: `%`, `bytes`, `1/s`, `ns`, `ratio`, `count`.
    pub unit: String,
    /// The control's value.
    pub control: Option<Spread>,
    /// The variant's value.
    pub variant: Option<Spread>,
    /// `variant.mean - control.mean`.
    pub delta: Option<f64>,
    /// `delta / control.mean` (a fraction; `None` when the control is 0).
    pub relative: Option<f64>,
    /// Whether it changed beyond the spread.
    pub verdict: Verdict,
}

/// A control and a variant, metric by metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Comparison {
    /// Runs of the control.
    pub control_runs: u32,
    /// Runs of the variant.
    pub variant_runs: u32,
    /// Process first, then thread groups, loops and sleep sites.
    pub rows: Vec<DiffRow>,
}

type Key = (String, &'static str, &'static str);

/// Per metric of one run: (value, weight) per interval.
#[derive(Default)]
struct Series {
    keys: Vec<Key>,
    values: Vec<Vec<(f64, f64)>>,
}

impl Series {
    fn push(
        &mut self,
        subject: &str,
        metric: &'static str,
        unit: &'static str,
        v: Option<f64>,
        w: f64,
    ) {
        let Some(v) = v.filter(|v| v.is_finite()) else {
            return;
        };
        let i = match self
            .keys
            .iter()
            .position(|k| k.0 == subject && k.1 == metric)
        {
            Some(i) => i,
            None => {
                self.keys.push((subject.to_string(), metric, unit));
                self.values.push(Vec::new());
                self.keys.len() - 1
            }
        };
        if let Some(vs) = self.values.get_mut(i) {
            vs.push((v, w));
        }
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64) * q).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Every metric of one run, per interval.
fn series(run: &Run) -> Series {
    let mut s = Series::default();
    for i in &run.intervals {
        let w = i.duration_ns as f64;
        let p = "process";
        s.push(p, "cpu_percent", "%", Some(i.process.cpu_percent), w);
        s.push(p, "cpu_percent_p95", "%", Some(i.process.cpu_percent), w);
        s.push(p, "rss_bytes", "bytes", Some(i.process.rss_bytes as f64), w);
        s.push(
            p,
            "threads",
            "count",
            Some(f64::from(i.process.thread_count)),
            w,
        );
        s.push(p, "switches_per_sec", "1/s", i.switches_per_sec, w);
        s.push(
            p,
            "voluntary_switches_per_sec",
            "1/s",
            i.voluntary_switches_per_sec,
            w,
        );
        s.push(p, "wakes_per_sec", "1/s", i.wakes_per_sec, w);
        s.push(
            p,
            "sampler_cpu_percent",
            "%",
            Some(i.sampler_cpu_percent),
            w,
        );
        for g in &i.groups {
            let t = format!("thread {}", g.name);
            s.push(&t, "cpu_percent", "%", Some(g.cpu_percent), w);
            s.push(&t, "switches_per_sec", "1/s", g.switches_per_sec, w);
            s.push(&t, "wakes_per_sec", "1/s", g.wakes_per_sec, w);
        }
        for l in &i.loops {
            let t = format!("loop {}", l.name);
            s.push(&t, "wakeups_per_sec", "1/s", Some(l.wakeups_per_sec), w);
            s.push(
                &t,
                "idle_wakeup_ratio",
                "ratio",
                Some(l.idle_wakeup_ratio),
                w,
            );
            s.push(&t, "utilization", "ratio", Some(l.utilization), w);
            s.push(
                &t,
                "mean_poll_delay_ns",
                "ns",
                Some(l.mean_poll_delay_ns as f64),
                w,
            );
        }
        for z in &i.sleeps {
            let t = format!("sleep site {}", z.name);
            s.push(&t, "sleeps_per_sec", "1/s", Some(z.sleeps_per_sec), w);
            s.push(&t, "cpu_percent", "%", Some(z.cpu_percent), w);
            s.push(
                &t,
                "mean_oversleep_ns",
                "ns",
                Some(z.mean_oversleep_ns as f64),
                w,
            );
        }
    }
    s
}

/// A run's value of one metric, and its intervals' 5th–95th percentiles.
fn run_value(metric: &str, vs: &[(f64, f64)]) -> (f64, f64, f64) {
    let all = sorted(vs.iter().map(|(v, _)| *v).collect());
    let value = if metric == "cpu_percent_p95" {
        percentile(&all, 0.95)
    } else {
        let wsum: f64 = vs.iter().map(|(_, w)| w).sum();
        if wsum > 0.0 {
            vs.iter().map(|(v, w)| v * w).sum::<f64>() / wsum
        } else {
            all.iter().sum::<f64>() / all.len().max(1) as f64
        }
    };
    if metric == "cpu_percent_p95" {
        return (value, value, value);
    }
    (value, percentile(&all, 0.05), percentile(&all, 0.95))
}

/// One side's spread of every metric over its runs.
fn side(runs: &[Run]) -> (Vec<Key>, Vec<Spread>) {
    let mut keys: Vec<Key> = Vec::new();
    let mut per_run: Vec<Vec<(f64, f64, f64)>> = Vec::new();
    for run in runs {
        let s = series(run);
        for (k, vs) in s.keys.into_iter().zip(s.values) {
            let i = match keys.iter().position(|x| x.0 == k.0 && x.1 == k.1) {
                Some(i) => i,
                None => {
                    keys.push(k.clone());
                    per_run.push(Vec::new());
                    keys.len() - 1
                }
            };
            if let Some(p) = per_run.get_mut(i) {
                p.push(run_value(k.1, &vs));
            }
        }
    }
    let spreads = per_run
        .into_iter()
        .map(|vals| {
            let runs = vals.len() as u32;
            match vals.as_slice() {
                [(v, lo, hi)] => Spread {
                    mean: *v,
                    low: *lo,
                    high: *hi,
                    runs,
                },
                _ => {
                    let means = sorted(vals.iter().map(|v| v.0).collect());
                    Spread {
                        mean: means.iter().sum::<f64>() / means.len().max(1) as f64,
                        low: means.first().copied().unwrap_or(0.0),
                        high: means.last().copied().unwrap_or(0.0),
                        runs,
                    }
                }
            }
        })
        .collect();
    (keys, spreads)
}

/// Compares `control` runs with `variant` runs (see the module docs).
pub fn compare(control: &[Run], variant: &[Run]) -> Comparison {
    let (ck, cs) = side(control);
    let (vk, vs) = side(variant);
    let mut keys = ck.clone();
    for k in &vk {
        if !keys.iter().any(|x| x.0 == k.0 && x.1 == k.1) {
            keys.push(k.clone());
        }
    }
    let find = |ks: &[Key], ss: &[Spread], k: &Key| {
        ks.iter()
            .position(|x| x.0 == k.0 && x.1 == k.1)
            .and_then(|i| ss.get(i).copied())
    };
    let rows = keys
        .into_iter()
        .map(|k| {
            let c = find(&ck, &cs, &k);
            let v = find(&vk, &vs, &k);
            let delta = c.zip(v).map(|(c, v)| v.mean - c.mean);
            let relative = c
                .zip(delta)
                .and_then(|(c, d)| (c.mean != 0.0).then(|| d / c.mean));
            let verdict = match (c, v) {
                (Some(c), Some(v)) if c.high < v.low || v.high < c.low => Verdict::Changed,
                (Some(_), Some(_)) => Verdict::WithinNoise,
                (Some(_), None) => Verdict::OnlyInControl,
                _ => Verdict::OnlyInVariant,
            };
            DiffRow {
                subject: k.0,
                metric: k.1.to_string(),
                unit: k.2.to_string(),
                control: c,
                variant: v,
                delta,
                relative,
                verdict,
            }
        })
        .collect();
    Comparison {
        control_runs: control.len() as u32,
        variant_runs: variant.len() as u32,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::ThreadGroupInterval;
    use crate::interval::ProcessInterval;

    fn header() -> RecordingHeader {
        RecordingHeader {
            schema_version: super::super::RECORDING_SCHEMA_VERSION,
            report_schema_version: crate::REPORT_SCHEMA_VERSION,
            library_version: "test".to_string(),
            target: Default::default(),
            config: Default::default(),
            system: Default::default(),
            start_unix_time_ns: 0,
        }
    }

    /// A run whose intervals (1 s each) have these process CPU figures,
    /// and a thread group "worker-{n}" with half of it.
    fn run(cpu: &[f64]) -> Run {
        let intervals = cpu
            .iter()
            .map(|c| IntervalSummary {
                from_seq: 0,
                to_seq: 1,
                duration_ns: 1_000_000_000,
                process: ProcessInterval {
                    cpu_percent: *c,
                    ..Default::default()
                },
                switches_per_sec: None,
                voluntary_switches_per_sec: None,
                wakes_per_sec: None,
                groups: vec![ThreadGroupInterval {
                    cpu_percent: c / 2.0,
                    ..ThreadGroupInterval::empty("worker-{n}".to_string())
                }],
                loops: Vec::new(),
                sleeps: Vec::new(),
                sampler_cpu_percent: 0.0,
            })
            .collect();
        Run::new(header(), intervals)
    }

    fn row<'a>(c: &'a Comparison, subject: &str, metric: &str) -> &'a DiffRow {
        c.rows
            .iter()
            .find(|r| r.subject == subject && r.metric == metric)
            .unwrap()
    }

    #[test]
    fn one_run_each_uses_the_spread_of_its_intervals() {
        let c = compare(&[run(&[10.0, 12.0, 14.0])], &[run(&[30.0, 32.0, 34.0])]);
        let r = row(&c, "process", "cpu_percent");
        assert_eq!(r.control.unwrap().mean, 12.0);
        assert_eq!(
            (r.control.unwrap().low, r.control.unwrap().high),
            (10.0, 14.0)
        );
        assert_eq!(r.delta, Some(20.0));
        assert!((r.relative.unwrap() - 20.0 / 12.0).abs() < 1e-12);
        assert_eq!(r.verdict, Verdict::Changed);
        assert_eq!(
            row(&c, "process", "cpu_percent_p95").variant.unwrap().mean,
            34.0
        );
        assert_eq!(
            row(&c, "thread worker-{n}", "cpu_percent").delta,
            Some(10.0)
        );
        let noisy = compare(&[run(&[10.0, 30.0])], &[run(&[12.0, 28.0])]);
        assert_eq!(
            row(&noisy, "process", "cpu_percent").verdict,
            Verdict::WithinNoise
        );
    }

    #[test]
    fn repeated_runs_use_the_range_of_their_means() {
        let c = compare(
            &[run(&[10.0]), run(&[11.0]), run(&[12.0])],
            &[run(&[11.5]), run(&[13.0]), run(&[14.5])],
        );
        let r = row(&c, "process", "cpu_percent");
        assert_eq!((c.control_runs, c.variant_runs), (3, 3));
        assert_eq!(
            r.control.unwrap(),
            Spread {
                mean: 11.0,
                low: 10.0,
                high: 12.0,
                runs: 3
            }
        );
        assert_eq!(r.variant.unwrap().mean, 13.0);
        // 2.0 more on average, but the runs overlap: noise, not a change.
        assert_eq!(r.verdict, Verdict::WithinNoise);
        assert_eq!(
            row(&c, "thread worker-{n}", "cpu_percent").verdict,
            Verdict::WithinNoise
        );
    }
}
