//! The comparison of a control and a variant, each one or more runs.
//!
//! Processes are matched by identity ([`RecordingHeader::identity`]): name
//! plus role (command line, or the parent's when it has the same name),
//! or a user label. Processes of one run that share an identity are
//! summed (two identical workers are twice the CPU), never averaged with
//! each other; runs of a side are replicates.
//!
//! A run's value of a metric is its duration-weighted mean over the
//! intervals; a side's value is the mean of its runs'. The totals add up
//! every recorded process of a run (the processes the selection matched,
//! on each side), so a proxy that only the variant has counts in the
//! variant's total. Verdicts come from the test described in
//! [`TEST_DESCRIPTION`](super::TEST_DESCRIPTION).
//!
//! Memory is bounded by the number of distinct series (metric × process
//! identity × thread group), not by the number of intervals; every step is
//! linear in the number of series.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::stats::{self, Batches, Combine, Quantity, TEST_DESCRIPTION};
use super::{IntervalSummary, LoadRecord, RecordLine, RecordingHeader};

/// How processes are matched across runs and sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IdentityRule {
    /// Name plus role (command line, parent's when it has the same name),
    /// or the user's label.
    #[default]
    NameAndRole,
    /// Name only (or the label): every process of a name in a run is one.
    Name,
}

/// Which side a run belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The baseline.
    Control,
    /// The changed setup.
    Variant,
}

/// A metric's value on one side, with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Spread {
    /// The side's value: the mean of its runs' values.
    pub mean: f64,
    /// Low end of the 95% bootstrap interval of the value (equal to
    /// `mean` when no test could be made).
    pub low: f64,
    /// High end of that interval.
    pub high: f64,
    /// Runs that had this metric.
    pub runs: u32,
    /// Intervals of the longest series behind it (per-run figures: runs).
    pub intervals: u64,
}

/// What a row says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// The 95% interval of the difference excludes 0.
    Changed,
    /// It includes 0: the difference may be noise.
    WithinNoise,
    /// The difference is at most what the metric can resolve
    /// ([`resolution`]: a page for RSS): no change, whatever the test
    /// says. A figure constant within each recording (RSS of an idle
    /// process) has no spread, so any difference, even one page, would
    /// otherwise look significant.
    NoChange,
    /// Too few intervals or runs for the test (see [`super::MIN_INTERVALS`]).
    NotEnoughData,
    /// Only the control has this metric (e.g. a process the variant lacks).
    OnlyInControl,
    /// Only the variant has it.
    OnlyInVariant,
}

/// One metric, control against variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DiffRow {
    /// The process identity; `None` for the totals.
    pub process: Option<String>,
    /// What in it: `total`, `process`, `thread worker-{n}`, `loop io`,
    /// `sleep site nap`.
    pub subject: String,
    /// The metric, named as in [`crate::Interval`] (`cpu_percent`,
    /// `switches_per_sec`, …), or a total (`cpu_seconds`,
    /// `cpu_us_per_request`, `requests_per_sec`, `latency_p95_ns`).
    pub metric: String,
    /// Its unit: `%`, `s`, `bytes`, `1/s`, `ns`, `µs`, `ratio`, `count`.
    pub unit: String,
    /// The control's value.
    pub control: Option<Spread>,
    /// The variant's value.
    pub variant: Option<Spread>,
    /// `variant.mean - control.mean`.
    pub delta: Option<f64>,
    /// `delta / control.mean` (a fraction; `None` when the control is 0).
    pub relative: Option<f64>,
    /// The 95% interval of `delta`, when tested.
    pub delta_interval: Option<(f64, f64)>,
    /// What the test says.
    pub verdict: Verdict,
}

/// What one side was made of.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SideInfo {
    /// Runs (recordings).
    pub runs: u32,
    /// Runs without an end record (cut short; read up to where they stop).
    pub partial_runs: u32,
    /// Process sections over all runs.
    pub processes: u32,
    /// Intervals over all runs.
    pub intervals: u64,
    /// Values of thread groups, loops and sleep sites left out because a
    /// run had more than [`MAX_SERIES_PER_RUN`] series (0 normally).
    pub values_left_out: u64,
}

/// A control and a variant: totals, then rows per process identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Comparison {
    /// The test behind the verdicts, in words.
    pub test: String,
    /// `runs` (two or more runs per side) or `intervals`.
    pub tested_over: String,
    /// How processes were matched: `name_and_role` or `name`.
    pub identity: String,
    /// The control's runs.
    pub control: SideInfo,
    /// The variant's runs.
    pub variant: SideInfo,
    /// Totals over every recorded process of a run, and the load tool's
    /// figures where recorded: each row holds both sides.
    pub totals: Vec<DiffRow>,
    /// Per process identity (largest CPU change first): the process's
    /// metrics, then its thread groups (largest change first), loops and
    /// sleep sites.
    pub rows: Vec<DiffRow>,
}

/// A metric kept per interval.
#[derive(Debug)]
struct Metric {
    name: &'static str,
    unit: &'static str,
    combine: Combine,
}

const fn m(name: &'static str, unit: &'static str, combine: Combine) -> Metric {
    Metric {
        name,
        unit,
        combine,
    }
}

const P_CPU: Metric = m("cpu_percent", "%", Combine::Sum);
const P_RSS: Metric = m("rss_bytes", "bytes", Combine::Sum);
const P_THREADS: Metric = m("threads", "count", Combine::Sum);
const P_SW: Metric = m("switches_per_sec", "1/s", Combine::Sum);
const P_VSW: Metric = m("voluntary_switches_per_sec", "1/s", Combine::Sum);
const P_WAKES: Metric = m("wakes_per_sec", "1/s", Combine::Sum);
const P_SAMPLER: Metric = m("sampler_cpu_percent", "%", Combine::Sum);
const L_WAKEUPS: Metric = m("wakeups_per_sec", "1/s", Combine::Sum);
const L_IDLE: Metric = m("idle_wakeup_ratio", "ratio", Combine::Mean);
const L_UTIL: Metric = m("utilization", "ratio", Combine::Mean);
const L_DELAY: Metric = m("mean_poll_delay_ns", "ns", Combine::Mean);
const S_SLEEPS: Metric = m("sleeps_per_sec", "1/s", Combine::Sum);
const S_OVERSLEEP: Metric = m("mean_oversleep_ns", "ns", Combine::Mean);

/// The order of a process's own metrics in the output.
const PROCESS_METRICS: [&Metric; 7] = [
    &P_CPU, &P_RSS, &P_THREADS, &P_SW, &P_VSW, &P_WAKES, &P_SAMPLER,
];

/// One metric of one subject of one identity, per process section.
#[derive(Debug)]
struct Series {
    identity: u32,
    subject: String,
    metric: &'static Metric,
    per_section: Vec<(u32, Batches)>,
}

#[derive(Debug, Default)]
struct RunAcc {
    /// Identity of each section (header), in order.
    sections: Vec<u32>,
    /// The latest section of each PID.
    by_pid: HashMap<u32, u32>,
    series: HashMap<String, Series>,
    load: Option<LoadRecord>,
    complete: bool,
    intervals: u64,
    /// Values of series left out past [`MAX_SERIES_PER_RUN`].
    left_out: u64,
}

/// Most series (metric × identity × subject) kept per run: memory stays
/// bounded (each series is at most 32 batches) even for a recording whose
/// thread names never repeat.
pub const MAX_SERIES_PER_RUN: usize = 100_000;

#[derive(Debug, Default)]
struct SideAcc {
    runs: Vec<RunAcc>,
}

/// Runs of a control and a variant, read line by line; see the module
/// docs.
#[derive(Debug, Default)]
pub struct Experiment {
    rule: IdentityRule,
    ids: HashMap<String, u32>,
    names: Vec<String>,
    sides: [SideAcc; 2],
    key: String,
}

fn index(side: Side) -> usize {
    match side {
        Side::Control => 0,
        Side::Variant => 1,
    }
}

impl Experiment {
    /// An empty experiment matching processes by `rule`.
    pub fn new(rule: IdentityRule) -> Self {
        Experiment {
            rule,
            ..Default::default()
        }
    }

    /// Starts a run (one recording) of `side`; the lines pushed next
    /// belong to it.
    pub fn begin_run(&mut self, side: Side) {
        self.sides[index(side)].runs.push(RunAcc::default());
    }

    /// Adds one line of the current run of `side`.
    ///
    /// # Errors
    /// An interval before any header, or of a PID no header introduced.
    pub fn push(&mut self, side: Side, line: RecordLine) -> Result<(), String> {
        if self.sides[index(side)].runs.is_empty() {
            self.begin_run(side);
        }
        match line {
            RecordLine::Header(h) => {
                let identity = h.identity(self.rule);
                let next = self.names.len() as u32;
                let id = *self.ids.entry(identity.clone()).or_insert(next);
                if id == next {
                    self.names.push(identity);
                }
                let run = self.run(side)?;
                let section = run.sections.len() as u32;
                run.sections.push(id);
                run.by_pid.insert(h.target.pid, section);
            }
            RecordLine::Interval(i) => self.interval(side, &i)?,
            RecordLine::Load(l) => self.run(side)?.load = Some(l),
            RecordLine::End(_) => self.run(side)?.complete = true,
        }
        Ok(())
    }

    fn run(&mut self, side: Side) -> Result<&mut RunAcc, String> {
        self.sides[index(side)]
            .runs
            .last_mut()
            .ok_or_else(|| "no run started".to_string())
    }

    fn interval(&mut self, side: Side, i: &IntervalSummary) -> Result<(), String> {
        let mut key = std::mem::take(&mut self.key);
        let run = self.sides[index(side)]
            .runs
            .last_mut()
            .ok_or("no run started")?;
        let section = match i.pid {
            Some(pid) => *run.by_pid.get(&pid).ok_or_else(|| {
                format!("an interval of process {pid}, which no header introduced")
            })?,
            None => run
                .sections
                .len()
                .checked_sub(1)
                .ok_or("an interval before any header")? as u32,
        };
        let identity = run.sections.get(section as usize).copied().unwrap_or(0);
        run.intervals += 1;
        let w = i.duration_ns as f64 / 1e9;
        let mut add = |subject: &str, prefix: &str, metric: &'static Metric, v: Option<f64>| {
            let Some(v) = v else { return };
            key.clear();
            use std::fmt::Write;
            let _ = write!(key, "{identity}\0{prefix}{subject}\0{}", metric.name);
            if !run.series.contains_key(key.as_str()) {
                // Past the cap, new thread groups, loops and sleep sites
                // are left out (and counted); the process rows, which
                // make the totals, are always kept.
                if !prefix.is_empty() && run.series.len() >= MAX_SERIES_PER_RUN {
                    run.left_out += 1;
                    return;
                }
                run.series.insert(
                    key.clone(),
                    Series {
                        identity,
                        subject: format!("{prefix}{subject}"),
                        metric,
                        per_section: Vec::new(),
                    },
                );
            }
            let Some(series) = run.series.get_mut(key.as_str()) else {
                return;
            };
            let b = match series.per_section.iter().position(|(s, _)| *s == section) {
                Some(p) => &mut series.per_section[p].1,
                None => {
                    series.per_section.push((section, Batches::default()));
                    let last = series.per_section.len() - 1;
                    &mut series.per_section[last].1
                }
            };
            b.push(v, w);
        };
        let p = &i.process;
        add("process", "", &P_CPU, Some(p.cpu_percent));
        add("process", "", &P_RSS, Some(p.rss_bytes as f64));
        add("process", "", &P_THREADS, Some(f64::from(p.thread_count)));
        add("process", "", &P_SW, i.switches_per_sec);
        add("process", "", &P_VSW, i.voluntary_switches_per_sec);
        add("process", "", &P_WAKES, i.wakes_per_sec);
        add("process", "", &P_SAMPLER, Some(i.sampler_cpu_percent));
        for g in &i.groups {
            add(&g.name, "thread ", &P_CPU, Some(g.cpu_percent));
            add(&g.name, "thread ", &P_SW, g.switches_per_sec);
            add(&g.name, "thread ", &P_WAKES, g.wakes_per_sec);
        }
        for l in &i.loops {
            add(&l.name, "loop ", &L_WAKEUPS, Some(l.wakeups_per_sec));
            add(&l.name, "loop ", &L_IDLE, Some(l.idle_wakeup_ratio));
            add(&l.name, "loop ", &L_UTIL, Some(l.utilization));
            add(
                &l.name,
                "loop ",
                &L_DELAY,
                Some(l.mean_poll_delay_ns as f64),
            );
        }
        for z in &i.sleeps {
            add(&z.name, "sleep site ", &S_SLEEPS, Some(z.sleeps_per_sec));
            add(&z.name, "sleep site ", &P_CPU, Some(z.cpu_percent));
            add(
                &z.name,
                "sleep site ",
                &S_OVERSLEEP,
                Some(z.mean_oversleep_ns as f64),
            );
        }
        self.key = key;
        Ok(())
    }

    /// Adds a whole run: `header` and its `intervals` (one process).
    pub fn add_run(
        &mut self,
        side: Side,
        header: RecordingHeader,
        intervals: Vec<IntervalSummary>,
    ) {
        self.begin_run(side);
        let _ = self.push(side, RecordLine::Header(header));
        for i in intervals {
            let _ = self.push(side, RecordLine::Interval(i.clone_without_pid()));
        }
        let _ = self.push(
            side,
            RecordLine::End(super::RecordingEnd::new(0, "deadline", 0)),
        );
    }

    fn info(&self, side: Side) -> SideInfo {
        let runs = &self.sides[index(side)].runs;
        SideInfo {
            runs: runs.len() as u32,
            partial_runs: runs.iter().filter(|r| !r.complete).count() as u32,
            processes: runs.iter().map(|r| r.sections.len() as u32).sum(),
            intervals: runs.iter().map(|r| r.intervals).sum(),
            values_left_out: runs.iter().map(|r| r.left_out).sum(),
        }
    }

    /// The comparison (see the module docs).
    pub fn compare(&self) -> Comparison {
        let [c, v] = &self.sides;
        let replicates = c.runs.len() >= 2 && v.runs.len() >= 2;
        let totals = self.totals(replicates);
        // Every series key of either side, in order of first appearance.
        let mut keys: Vec<(&str, &Series)> = Vec::new();
        let mut seen: HashMap<&str, ()> = HashMap::new();
        for run in c.runs.iter().chain(&v.runs) {
            for (k, s) in &run.series {
                if seen.insert(k.as_str(), ()).is_none() {
                    keys.push((k.as_str(), s));
                }
            }
        }
        fn quantity<'a>(side: &'a SideAcc, key: &str, how: Combine) -> Quantity<'a> {
            let runs: Vec<(Vec<&Batches>, f64)> = side
                .runs
                .iter()
                .filter_map(|r| r.series.get(key))
                .map(|s| (s.per_section.iter().map(|(_, b)| b).collect(), 1.0))
                .collect();
            Quantity::Series(runs, how)
        }
        let mut rows: Vec<(u32, String, DiffRow)> = keys
            .iter()
            .map(|(k, s)| {
                let process = self
                    .names
                    .get(s.identity as usize)
                    .cloned()
                    .unwrap_or_default();
                let row = make_row(
                    Some(process),
                    &s.subject,
                    s.metric.name,
                    s.metric.unit,
                    &quantity(c, k, s.metric.combine),
                    &quantity(v, k, s.metric.combine),
                    replicates,
                );
                (s.identity, s.subject.clone(), row)
            })
            .collect();
        sort_rows(&mut rows);
        Comparison {
            test: TEST_DESCRIPTION.to_string(),
            tested_over: if replicates { "runs" } else { "intervals" }.to_string(),
            identity: match self.rule {
                IdentityRule::Name => "name",
                IdentityRule::NameAndRole => "name_and_role",
            }
            .to_string(),
            control: self.info(Side::Control),
            variant: self.info(Side::Variant),
            totals,
            rows: rows.into_iter().map(|(_, _, r)| r).collect(),
        }
    }

    fn totals(&self, replicates: bool) -> Vec<DiffRow> {
        let [c, v] = &self.sides;
        // Per run: the process-level series of one metric, every identity.
        fn process_series<'a>(
            side: &'a SideAcc,
            metric: &str,
            per_request: bool,
        ) -> Vec<(Vec<&'a Batches>, f64)> {
            side.runs
                .iter()
                .filter_map(|r| {
                    let factor = if per_request {
                        // CPU % → µs of CPU per request: % / 100 × 1e6 / rps.
                        let rps = r.load.as_ref()?.requests_per_sec.filter(|x| *x > 0.0)?;
                        1e4 / rps
                    } else {
                        1.0
                    };
                    let s: Vec<&Batches> = r
                        .series
                        .values()
                        .filter(|s| s.subject == "process" && s.metric.name == metric)
                        .flat_map(|s| s.per_section.iter().map(|(_, b)| b))
                        .collect();
                    (!s.is_empty()).then_some((s, factor))
                })
                .collect::<Vec<_>>()
        }
        let mut rows = Vec::new();
        let mut total = |metric: &str, unit: &str, src: &str, how: Combine, per_request: bool| {
            let (cq, vq) = (
                Quantity::Series(process_series(c, src, per_request), how),
                Quantity::Series(process_series(v, src, per_request), how),
            );
            let row = make_row(None, "total", metric, unit, &cq, &vq, replicates);
            if row.control.is_some() || row.variant.is_some() {
                rows.push(row);
            }
        };
        total("cpu_percent", "%", "cpu_percent", Combine::Sum, false);
        total(
            "cpu_seconds",
            "s",
            "cpu_percent",
            Combine::CpuSeconds,
            false,
        );
        total(
            "cpu_us_per_request",
            "µs",
            "cpu_percent",
            Combine::Sum,
            true,
        );
        total("rss_bytes", "bytes", "rss_bytes", Combine::Sum, false);
        total(
            "switches_per_sec",
            "1/s",
            "switches_per_sec",
            Combine::Sum,
            false,
        );
        total("wakes_per_sec", "1/s", "wakes_per_sec", Combine::Sum, false);
        let load = |side: &SideAcc, f: &dyn Fn(&LoadRecord) -> Option<f64>| {
            Quantity::PerRun(
                side.runs
                    .iter()
                    .filter_map(|r| r.load.as_ref().and_then(f))
                    .collect(),
            )
        };
        type Field = fn(&LoadRecord) -> Option<f64>;
        let fields: [(&str, &str, Field); 4] = [
            ("requests_per_sec", "1/s", |l| l.requests_per_sec),
            ("latency_p50_ns", "ns", |l| l.latency_p50_ns),
            ("latency_p95_ns", "ns", |l| l.latency_p95_ns),
            ("latency_p99_ns", "ns", |l| l.latency_p99_ns),
        ];
        for (metric, unit, f) in fields {
            let row = make_row(
                None,
                "load",
                metric,
                unit,
                &load(c, &f),
                &load(v, &f),
                replicates,
            );
            if row.control.is_some() || row.variant.is_some() {
                rows.push(row);
            }
        }
        rows
    }
}

impl IntervalSummary {
    fn clone_without_pid(mut self) -> Self {
        self.pid = None;
        self
    }
}

/// The difference a metric cannot tell from none, in its unit: one 4 KiB page
/// for RSS (the kernel counts resident memory in pages; 4 KiB is the
/// smallest page of the platforms wakemeter runs on), 0 (every difference
/// counts) for the rest.
pub fn resolution(metric: &str, unit: &str) -> f64 {
    match (metric, unit) {
        ("rss_bytes", "bytes") => 4096.0,
        _ => 0.0,
    }
}

fn make_row(
    process: Option<String>,
    subject: &str,
    metric: &str,
    unit: &str,
    c: &Quantity,
    v: &Quantity,
    replicates: bool,
) -> DiffRow {
    let name = format!("{}\0{subject}\0{metric}", process.as_deref().unwrap_or(""));
    let t = stats::test(c, v, replicates, &name);
    let spread = |s: Option<(f64, f64, f64, u32, u64)>| {
        s.map(|(mean, low, high, runs, intervals)| Spread {
            mean,
            low,
            high,
            runs,
            intervals,
        })
    };
    let (control, variant) = (spread(t.control), spread(t.variant));
    let delta = control.zip(variant).map(|(c, v)| v.mean - c.mean);
    let relative = control
        .zip(delta)
        .and_then(|(c, d)| (c.mean != 0.0).then(|| d / c.mean));
    let floor = resolution(metric, unit);
    let verdict = match (control, variant, t.delta_interval) {
        (Some(_), None, _) => Verdict::OnlyInControl,
        (None, _, _) => Verdict::OnlyInVariant,
        (Some(_), Some(_), _) if floor > 0.0 && delta.is_some_and(|d| d.abs() <= floor) => {
            Verdict::NoChange
        }
        (Some(_), Some(_), Some((lo, hi))) if lo > 0.0 || hi < 0.0 => Verdict::Changed,
        (Some(_), Some(_), Some(_)) => Verdict::WithinNoise,
        _ => Verdict::NotEnoughData,
    };
    DiffRow {
        process,
        subject: subject.to_string(),
        metric: metric.to_string(),
        unit: unit.to_string(),
        control,
        variant,
        delta,
        relative,
        delta_interval: t.delta_interval.filter(|_| t.enough),
        verdict,
    }
}

/// The size of a row's change, for sorting: |delta|, or the one side's
/// value when only one side has it.
fn size(r: &DiffRow) -> f64 {
    match (r.delta, r.control, r.variant) {
        (Some(d), _, _) => d.abs(),
        (None, Some(s), None) | (None, None, Some(s)) => s.mean.abs(),
        _ => 0.0,
    }
}

/// Identities by their process CPU change; in each, the process's metrics
/// in a fixed order, then thread groups by their CPU change, loops, sleep
/// sites.
fn sort_rows(rows: &mut [(u32, String, DiffRow)]) {
    let mut by_identity: HashMap<u32, f64> = HashMap::new();
    let mut by_subject: HashMap<(u32, String), f64> = HashMap::new();
    for (id, subject, r) in rows.iter() {
        if r.metric == P_CPU.name {
            if subject == "process" {
                by_identity.insert(*id, size(r));
            }
            by_subject.insert((*id, subject.clone()), size(r));
        }
    }
    let kind = |s: &str| {
        if s == "process" {
            0
        } else if s.starts_with("thread ") {
            1
        } else if s.starts_with("loop ") {
            2
        } else {
            3
        }
    };
    let metric_order = |m: &str| {
        PROCESS_METRICS
            .iter()
            .position(|x| x.name == m)
            .unwrap_or(PROCESS_METRICS.len())
    };
    rows.sort_by(|a, b| {
        let ia = by_identity.get(&a.0).copied().unwrap_or(0.0);
        let ib = by_identity.get(&b.0).copied().unwrap_or(0.0);
        let sa = by_subject.get(&(a.0, a.1.clone())).copied().unwrap_or(0.0);
        let sb = by_subject.get(&(b.0, b.1.clone())).copied().unwrap_or(0.0);
        ib.total_cmp(&ia)
            .then(a.0.cmp(&b.0))
            .then(kind(&a.1).cmp(&kind(&b.1)))
            .then(sb.total_cmp(&sa))
            .then(a.1.cmp(&b.1))
            .then(metric_order(&a.2.metric).cmp(&metric_order(&b.2.metric)))
            .then(a.2.metric.cmp(&b.2.metric))
    });
}

#[cfg(test)]
#[path = "diff_tests.rs"]
mod tests;
