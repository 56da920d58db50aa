//! One exposition: what fits under the series cap, encoded with
//! prometheus-client's OpenMetrics text encoder.
//!
//! Names follow the Prometheus conventions: base units (seconds, bytes)
//! in the name and in `# UNIT`, `_total` on counters, histograms with
//! `le` bounds that are the log2 bucket bounds of the core
//! (`2^k` ns, written in seconds).

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use wakemeter::{FindingKind, Severity};

use crate::groups::{Groups, Totals};
use crate::names::OTHER;
use crate::names::label_value;
use crate::state::{ExporterConfig, ServerStats, State};
use crate::totals::{KERNEL_COUNTS, LoopTotals, OFF_CPU_CAUSES, SleepTotals, ThreadTotals};

#[path = "families.rs"]
mod families;
use families::{
    Base, EXPORTER_SERIES, FAMILIES, Family, LOOP_SERIES, Rows, SLEEP_SERIES, Type, When, applies,
    process_series, thread_series,
};

/// Smallest finite histogram bound: `2^10` ns (about 1 µs); faster
/// observations all fall in this first bucket.
pub const HISTOGRAM_LOW_POW2: u32 = 10;
/// Largest finite histogram bound: `2^33` ns (about 8.6 s); slower
/// observations fall in `+Inf`.
pub const HISTOGRAM_HIGH_POW2: u32 = 33;
/// Series of one histogram: the finite buckets, `+Inf`, `_sum`, `_count`.
const HISTOGRAM_SERIES: usize = (HISTOGRAM_HIGH_POW2 - HISTOGRAM_LOW_POW2 + 1) as usize + 3;

/// A log2 histogram (core bucket layout) as Prometheus buckets: the
/// count of each `(le, count)` bucket alone, as prometheus-client wants.
/// Core bucket `i` holds `[2^(i-1), 2^i)` ns, so everything up to bucket
/// `k` is `< 2^k` ns, within `le = 2^k` ns.
fn prometheus_buckets(log2: &[u64]) -> (Vec<(f64, u64)>, u64) {
    let mut out = Vec::with_capacity(HISTOGRAM_SERIES);
    let mut taken = 0usize;
    for k in HISTOGRAM_LOW_POW2..=HISTOGRAM_HIGH_POW2 {
        let upto = (k as usize + 1).min(log2.len());
        let n = log2
            .get(taken..upto)
            .map_or(0, |b| b.iter().fold(0u64, |a, v| a.saturating_add(*v)));
        taken = taken.max(upto);
        out.push(((1u64 << k) as f64 / 1e9, n));
    }
    let rest = log2
        .get(taken..)
        .map_or(0, |b| b.iter().fold(0u64, |a, v| a.saturating_add(*v)));
    out.push((f64::INFINITY, rest));
    let count = out.iter().fold(0u64, |a, (_, n)| a.saturating_add(*n));
    (out, count)
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// What one exposition holds of one process.
#[derive(Debug, Clone)]
struct Part {
    /// `pid` and `process` in per-process exporting; empty otherwise.
    labels: Labels,
    target_pid: String,
    target_name: String,
    process_cpu_ns: u64,
    rss_bytes: u64,
    peak_rss_bytes: Option<u64>,
    thread_count: u32,
    threads: Vec<(String, ThreadTotals, u32)>,
    switches: bool,
    kernel: bool,
    loops: Vec<(String, LoopTotals)>,
    sleeps: Vec<(String, SleepTotals)>,
    findings: Vec<((String, String), u64)>,
    sampler_cpu_ns: u64,
    samples: u64,
    history_bytes: u64,
}

/// What one exposition holds: everything that fits under the cap.
#[derive(Debug, Clone)]
pub(crate) struct Exposed {
    per_process: bool,
    parts: Vec<Part>,
    series: usize,
    dropped_total: u64,
    http: ServerStats,
}

/// The labelled groups heaviest first, then `other` if it ever counted anything.
fn with_other<T: Totals + PartialEq>(g: &Groups<T>) -> Vec<(String, T, u32)> {
    let mut v: Vec<(String, T, u32)> = g
        .labelled()
        .iter()
        .map(|g| (g.name.clone(), g.totals.clone(), g.members))
        .collect();
    if g.other != T::default() || g.other_members > 0 {
        // `other` first: it stands for everything else and is never dropped
        // before a single group.
        v.insert(0, (OTHER.to_string(), g.other.clone(), g.other_members));
    }
    v
}

/// Keeps, in turns over the processes (each one's first item, then each
/// one's second, …), the items that fit in `left` series at `cost(part)`
/// each; returns the series left out. Within a process the kept items are
/// always its first ones: its costs are equal and `left` only shrinks.
fn fit_in_turns<T>(lists: &mut [Vec<T>], cost: impl Fn(usize) -> usize, left: &mut usize) -> u64 {
    let mut kept = vec![0usize; lists.len()];
    let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
    let mut dropped = 0u64;
    for round in 0..longest {
        for (p, list) in lists.iter().enumerate() {
            if round >= list.len() {
                continue;
            }
            let c = cost(p).max(1);
            if c <= *left && kept.get(p) == Some(&round) {
                *left -= c;
                if let Some(k) = kept.get_mut(p) {
                    *k += 1;
                }
            } else {
                dropped += c as u64;
            }
        }
    }
    for (list, k) in lists.iter_mut().zip(kept) {
        list.truncate(k);
    }
    dropped
}

/// The findings of `s`: every known (kind, severity) pair, 0 when absent,
/// then any other the core reported.
fn all_findings(s: &State) -> Vec<((String, String), u64)> {
    let mut findings: Vec<((String, String), u64)> = Vec::new();
    // Every kind and severity of the core, each always exposed (0 when
    // absent), so that an alert can tell "none" from "no data".
    for k in FindingKind::ALL {
        for sev in Severity::ALL {
            let key = (k.as_str().to_string(), sev.as_str().to_string());
            let n = s
                .findings
                .iter()
                .find(|(f, _)| *f == key)
                .map_or(0, |(_, n)| *n);
            findings.push((key, n));
        }
    }
    for (key, n) in &s.findings {
        if !findings.iter().any(|(k, _)| k == key) {
            findings.push((key.clone(), *n));
        }
    }
    findings
}

impl Exposed {
    /// What of the processes `states` fits under `config.max_series`;
    /// returns it and the number of series left out. Each process's fixed
    /// series come first (in PID order; a process whose fixed series do
    /// not fit is left out whole), then thread groups, loops and sleep
    /// sites, each kind in turns over the processes.
    pub(crate) fn plan(states: &[&State], config: &ExporterConfig) -> (Exposed, u64) {
        // The exporter's own series.
        let mut left = config.max_series.saturating_sub(EXPORTER_SERIES);
        let mut dropped = 0u64;
        let mut parts = Vec::new();
        let mut thread_lists = Vec::new();
        let mut loop_lists = Vec::new();
        let mut sleep_lists = Vec::new();
        for s in states {
            let findings = all_findings(s);
            let thread_cost = thread_series(s.switches_seen, s.kernel_seen);
            let threads = with_other(&s.threads);
            let loops: Vec<(String, LoopTotals)> = with_other(&s.loops)
                .into_iter()
                .map(|(n, t, _)| (n, t))
                .collect();
            let sleeps: Vec<(String, SleepTotals)> = with_other(&s.sleeps)
                .into_iter()
                .map(|(n, t, _)| (n, t))
                .collect();
            let labels = if config.per_process {
                vec![
                    ("pid", s.target.pid.to_string()),
                    ("process", label_value(&s.target.name)),
                ]
            } else {
                Vec::new()
            };
            let part = Part {
                labels,
                target_pid: s.target.pid.to_string(),
                target_name: label_value(&s.target.name),
                process_cpu_ns: s.process_cpu_ns,
                rss_bytes: s.rss_bytes,
                peak_rss_bytes: s.peak_rss_bytes,
                thread_count: s.thread_count,
                threads: Vec::new(),
                switches: s.switches_seen,
                kernel: s.kernel_seen,
                loops: Vec::new(),
                sleeps: Vec::new(),
                findings,
                sampler_cpu_ns: s.sampler_cpu_ns,
                samples: s.samples,
                history_bytes: s.history_bytes,
            };
            let fixed = process_series(&part);
            if fixed > left {
                dropped += (fixed
                    + threads.len() * thread_cost
                    + loops.len() * LOOP_SERIES
                    + sleeps.len() * SLEEP_SERIES) as u64;
                continue;
            }
            left -= fixed;
            parts.push(part);
            thread_lists.push(threads);
            loop_lists.push(loops);
            sleep_lists.push(sleeps);
        }
        let thread_costs: Vec<usize> = parts
            .iter()
            .map(|p| thread_series(p.switches, p.kernel))
            .collect();
        dropped += fit_in_turns(
            &mut thread_lists,
            |i| thread_costs.get(i).copied().unwrap_or(1),
            &mut left,
        );
        dropped += fit_in_turns(&mut loop_lists, |_| LOOP_SERIES, &mut left);
        dropped += fit_in_turns(&mut sleep_lists, |_| SLEEP_SERIES, &mut left);
        for (((p, t), l), s) in parts
            .iter_mut()
            .zip(thread_lists)
            .zip(loop_lists)
            .zip(sleep_lists)
        {
            p.threads = t;
            p.loops = l;
            p.sleeps = s;
        }
        let exposed = Exposed {
            per_process: config.per_process,
            parts,
            series: config.max_series.saturating_sub(left),
            dropped_total: 0,
            http: ServerStats::default(),
        };
        (exposed, dropped)
    }

    /// With the exporter's running count of series left out.
    pub(crate) fn with_dropped(mut self, total: u64) -> Self {
        self.dropped_total = total;
        self
    }

    /// With what the HTTP endpoints did so far.
    pub(crate) fn with_http(mut self, http: ServerStats) -> Self {
        self.http = http;
        self
    }
}

type Labels = Vec<(&'static str, String)>;

/// One family: its descriptor, then one sample (or histogram) per row.
fn family<V>(
    enc: &mut DescriptorEncoder,
    (name, help, unit, ty): (
        &str,
        &str,
        Option<&prometheus_client::registry::Unit>,
        prometheus_client::metrics::MetricType,
    ),
    rows: &[(Labels, V)],
    write: impl Fn(&mut MetricEncoder, &V) -> fmt::Result,
) -> fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, unit, ty)?;
    for (labels, v) in rows {
        if labels.is_empty() {
            write(&mut m, v)?;
        } else {
            write(&mut m.encode_family(labels)?, v)?;
        }
    }
    Ok(())
}

fn counter_u64(m: &mut MetricEncoder, v: &u64) -> fmt::Result {
    m.encode_counter::<NoLabelSet, u64, u64>(v, None)
}

fn counter_secs(m: &mut MetricEncoder, ns: &u64) -> fmt::Result {
    m.encode_counter::<NoLabelSet, f64, f64>(&secs(*ns), None)
}

fn gauge_u64(m: &mut MetricEncoder, v: &u64) -> fmt::Result {
    m.encode_gauge(v)
}

fn histogram(m: &mut MetricEncoder, (log2, sum_ns): &(Vec<u64>, u64)) -> fmt::Result {
    let (buckets, count) = prometheus_buckets(log2);
    m.encode_histogram::<NoLabelSet>(secs(*sum_ns), count, &buckets, None)
}

/// `base` then `extra`: a process's labels, then the family's own.
fn with(base: &Labels, extra: &[(&'static str, &String)]) -> Labels {
    let mut l = base.clone();
    l.extend(extra.iter().map(|(k, v)| (*k, label_value(v))));
    l
}

impl Exposed {
    /// One row per process: its labels and `f` of it.
    fn per_part<V>(&self, f: impl Fn(&Part) -> Option<V>) -> Vec<(Labels, V)> {
        self.parts
            .iter()
            .filter_map(|p| Some((p.labels.clone(), f(p)?)))
            .collect()
    }

    /// One row per thread group of the processes `when` holds for.
    fn by_thread(
        &self,
        label: &'static str,
        when: When,
        f: impl Fn(&ThreadTotals, u32) -> u64,
    ) -> Vec<(Labels, u64)> {
        self.parts
            .iter()
            .filter(|p| applies(when, p))
            .flat_map(|p| {
                p.threads
                    .iter()
                    .map(|(n, t, m)| (with(&p.labels, &[(label, n)]), f(t, *m)))
            })
            .collect()
    }

    /// One row per group of `groups(part)` (loops or sleep sites).
    fn by_group<T, V>(
        &self,
        label: &'static str,
        groups: impl Fn(&Part) -> &Vec<(String, T)>,
        f: impl Fn(&T) -> V,
    ) -> Vec<(Labels, V)> {
        self.parts
            .iter()
            .flat_map(|p| {
                groups(p)
                    .iter()
                    .map(|(n, t)| (with(&p.labels, &[(label, n)]), f(t)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

impl Collector for Exposed {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        for fam in FAMILIES {
            self.encode_family(&mut enc, fam)?;
        }
        Ok(())
    }
}

impl Exposed {
    /// Writes the family `fam` declares (nothing if it has no rows).
    fn encode_family(&self, e: &mut DescriptorEncoder, fam: &Family) -> fmt::Result {
        let d = (fam.name, fam.help, fam.base.unit(), fam.ty.metric_type());
        // Counters in seconds are written from ns; other counters and
        // gauges as counts.
        let number = match (fam.ty, fam.base) {
            (Type::Counter, Base::Seconds) => counter_secs,
            (Type::Counter, _) => counter_u64,
            _ => gauge_u64,
        };
        let label = fam.labels.first().copied().unwrap_or("");
        match fam.rows {
            Rows::Target => self.encode_target(e, fam),
            Rows::Process(v) => family(e, d, &self.per_part(v), number),
            Rows::Thread(v, when) => family(e, d, &self.by_thread(label, when, v), number),
            Rows::ThreadOffCpu => {
                let cause_label = fam.labels.get(1).copied().unwrap_or("");
                let rows: Vec<(Labels, u64)> = self
                    .parts
                    .iter()
                    .filter(|p| p.kernel)
                    .flat_map(|p| {
                        p.threads.iter().flat_map(move |(n, t, _)| {
                            OFF_CPU_CAUSES.iter().zip(t.off_cpu_ns).map(move |(c, v)| {
                                let cause = (*c).to_string();
                                (with(&p.labels, &[(label, n), (cause_label, &cause)]), v)
                            })
                        })
                    })
                    .collect();
                family(e, d, &rows, number)
            }
            Rows::ThreadKernel => {
                for (i, (name, help, _)) in KERNEL_COUNTS.iter().enumerate() {
                    let rows = self.by_thread(label, When::Kernel, |t, _| {
                        t.kernel.get(i).copied().unwrap_or(0)
                    });
                    let name = format!("{}{name}", fam.name);
                    family(e, (&name, help, d.2, d.3), &rows, number)?;
                }
                Ok(())
            }
            Rows::Loop(v) => family(e, d, &self.by_group(label, |p| &p.loops, v), number),
            Rows::LoopHistogram(h) => {
                let rows = self.by_group(
                    label,
                    |p| &p.loops,
                    |t| {
                        let (b, sum) = h(t);
                        (b.to_vec(), sum)
                    },
                );
                family(e, d, &rows, histogram)
            }
            Rows::Site(v) => family(e, d, &self.by_group(label, |p| &p.sleeps, v), number),
            Rows::SiteHistogram(h) => {
                let rows = self.by_group(
                    label,
                    |p| &p.sleeps,
                    |t| {
                        let (b, sum) = h(t);
                        (b.to_vec(), sum)
                    },
                );
                family(e, d, &rows, histogram)
            }
            Rows::Findings => {
                let severity = fam.labels.get(1).copied().unwrap_or("");
                let rows: Vec<(Labels, u64)> = self
                    .parts
                    .iter()
                    .flat_map(|p| {
                        p.findings.iter().map(move |((k, s), n)| {
                            (with(&p.labels, &[(label, k), (severity, s)]), *n)
                        })
                    })
                    .collect();
                family(e, d, &rows, number)
            }
            Rows::Exporter(v) => family(e, d, &[(Vec::new(), v(self))], number),
        }
    }

    /// The info family: the process observed and the version observing it.
    fn encode_target(&self, e: &mut DescriptorEncoder, fam: &Family) -> fmt::Result {
        if self.parts.is_empty() {
            return Ok(());
        }
        let mut m =
            e.encode_descriptor(fam.name, fam.help, fam.base.unit(), fam.ty.metric_type())?;
        let version = env!("CARGO_PKG_VERSION").to_string();
        let label = fam.labels.first().copied().unwrap_or("version");
        for p in &self.parts {
            // Per process, `pid` and `process` are every series' labels;
            // alone, the info names the process.
            let info: Labels = if self.per_process {
                with(&p.labels, &[(label, &version)])
            } else {
                vec![
                    ("pid", p.target_pid.clone()),
                    ("name", p.target_name.clone()),
                    (label, version.clone()),
                ]
            };
            m.encode_info(&info)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "encode_tests.rs"]
mod tests;
