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
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use wakemeter::{FindingKind, Severity};

use crate::groups::{Groups, Totals};
use crate::names::OTHER;
use crate::names::label_value;
use crate::state::{ExporterConfig, ServerStats, State};
use crate::totals::{KERNEL_COUNTS, LoopTotals, OFF_CPU_CAUSES, SleepTotals, ThreadTotals};

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
            // info, process (cpu, rss, threads, peak rss), sampler (cpu,
            // samples, history), findings.
            let fixed = 1 + 3 + usize::from(s.peak_rss_bytes.is_some()) + 3 + findings.len();
            if fixed > left {
                dropped += (fixed
                    + threads.len() * thread_cost
                    + loops.len() * LOOP_SERIES
                    + sleeps.len() * SLEEP_SERIES) as u64;
                continue;
            }
            left -= fixed;
            let labels = if config.per_process {
                vec![
                    ("pid", s.target.pid.to_string()),
                    ("process", label_value(&s.target.name)),
                ]
            } else {
                Vec::new()
            };
            parts.push(Part {
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
            });
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

/// Series of one thread group: CPU, run-queue wait, members; switches
/// when counted; with eBPF, wakes, off-CPU time by cause and the
/// [`KERNEL_COUNTS`].
fn thread_series(switches: bool, kernel: bool) -> usize {
    let ebpf = 1 + OFF_CPU_CAUSES.len() + KERNEL_COUNTS.len();
    3 + usize::from(switches) + if kernel { ebpf } else { 0 }
}

/// The exporter's own series: its series count, series dropped, and
/// the four HTTP counters.
const EXPORTER_SERIES: usize = 2 + 4;

/// Series of one loop group: four counters, two times, a histogram.
const LOOP_SERIES: usize = 6 + HISTOGRAM_SERIES;
/// Series of one sleep-site group: calls, three times, a histogram.
const SLEEP_SERIES: usize = 4 + HISTOGRAM_SERIES;

type Labels = Vec<(&'static str, String)>;

/// One family: its descriptor, then one sample (or histogram) per row.
fn family<V>(
    enc: &mut DescriptorEncoder,
    (name, help, unit, ty): (&str, &str, Option<&Unit>, MetricType),
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

const SECONDS: Option<&Unit> = Some(&Unit::Seconds);
const BYTES: Option<&Unit> = Some(&Unit::Bytes);

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

    fn by_thread(
        &self,
        f: &dyn Fn(&ThreadTotals) -> u64,
        when: fn(&Part) -> bool,
    ) -> Vec<(Labels, u64)> {
        self.parts
            .iter()
            .filter(|p| when(p))
            .flat_map(|p| {
                p.threads
                    .iter()
                    .map(|(n, t, _)| (with(&p.labels, &[("thread", n)]), f(t)))
            })
            .collect()
    }

    fn by_loop(&self, f: &dyn Fn(&LoopTotals) -> u64) -> Vec<(Labels, u64)> {
        self.parts
            .iter()
            .flat_map(|p| {
                p.loops
                    .iter()
                    .map(|(n, t)| (with(&p.labels, &[("loop", n)]), f(t)))
            })
            .collect()
    }

    fn by_site(&self, f: &dyn Fn(&SleepTotals) -> u64) -> Vec<(Labels, u64)> {
        self.parts
            .iter()
            .flat_map(|p| {
                p.sleeps
                    .iter()
                    .map(|(n, t)| (with(&p.labels, &[("sleep_site", n)]), f(t)))
            })
            .collect()
    }
}

impl Collector for Exposed {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        use MetricType::{Counter, Gauge, Histogram, Info};
        let e = &mut enc;
        let none: Labels = Vec::new();
        if !self.parts.is_empty() {
            let mut m = e.encode_descriptor(
                "wakemeter_target",
                "The process observed, and the wakemeter version observing it.",
                None,
                Info,
            )?;
            let version = env!("CARGO_PKG_VERSION").to_string();
            for p in &self.parts {
                // Per process, `pid` and `process` are every series' labels;
                // alone, the info names the process.
                let info: Labels = if self.per_process {
                    with(&p.labels, &[("version", &version)])
                } else {
                    vec![
                        ("pid", p.target_pid.clone()),
                        ("name", p.target_name.clone()),
                        ("version", version.clone()),
                    ]
                };
                m.encode_info(&info)?;
            }
        }

        family(
            e,
            (
                "wakemeter_process_cpu",
                "CPU time of the whole process (exited threads included).",
                SECONDS,
                Counter,
            ),
            &self.per_part(|p| Some(p.process_cpu_ns)),
            counter_secs,
        )?;
        family(
            e,
            (
                "wakemeter_process_resident_memory",
                "Resident set size.",
                BYTES,
                Gauge,
            ),
            &self.per_part(|p| Some(p.rss_bytes)),
            gauge_u64,
        )?;
        family(
            e,
            (
                "wakemeter_process_peak_resident_memory",
                "Peak resident set size (VmHWM).",
                BYTES,
                Gauge,
            ),
            &self.per_part(|p| p.peak_rss_bytes),
            gauge_u64,
        )?;
        family(
            e,
            (
                "wakemeter_process_threads",
                "Threads of the process.",
                None,
                Gauge,
            ),
            &self.per_part(|p| Some(u64::from(p.thread_count))),
            gauge_u64,
        )?;

        let all = |_: &Part| true;
        family(
            e,
            (
                "wakemeter_thread_cpu",
                "CPU time of the threads of this name (numbers collapsed to {n}; \"other\": threads outside the top N).",
                SECONDS,
                Counter,
            ),
            &self.by_thread(&|t| t.cpu_ns, all),
            counter_secs,
        )?;
        family(
            e,
            (
                "wakemeter_thread_switches",
                "Context switches (times scheduled onto a CPU) of the threads of this name.",
                None,
                Counter,
            ),
            &self.by_thread(&|t| t.switches, |p| p.switches),
            counter_u64,
        )?;
        family(
            e,
            (
                "wakemeter_thread_run_queue_wait",
                "Time the threads of this name were runnable but waiting for a CPU.",
                SECONDS,
                Counter,
            ),
            &self.by_thread(&|t| t.run_queue_wait_ns, all),
            counter_secs,
        )?;
        let members: Vec<(Labels, u64)> = self
            .parts
            .iter()
            .flat_map(|p| {
                p.threads
                    .iter()
                    .map(|(n, _, m)| (with(&p.labels, &[("thread", n)]), u64::from(*m)))
            })
            .collect();
        family(
            e,
            (
                "wakemeter_thread_group_threads",
                "Live threads of this name in the latest sample.",
                None,
                Gauge,
            ),
            &members,
            gauge_u64,
        )?;
        family(
            e,
            (
                "wakemeter_thread_wakes",
                "Times the threads of this name were made runnable (eBPF sched_waking).",
                None,
                Counter,
            ),
            &self.by_thread(&|t| t.wakes, |p| p.kernel),
            counter_u64,
        )?;
        let off_cpu: Vec<(Labels, u64)> = self
            .parts
            .iter()
            .filter(|p| p.kernel)
            .flat_map(|p| {
                p.threads.iter().flat_map(|(n, t, _)| {
                    OFF_CPU_CAUSES.iter().zip(t.off_cpu_ns).map(|(c, v)| {
                        let cause = (*c).to_string();
                        (with(&p.labels, &[("thread", n), ("cause", &cause)]), v)
                    })
                })
            })
            .collect();
        family(
            e,
            (
                "wakemeter_thread_off_cpu",
                "Time the threads of this name spent off CPU, by cause (eBPF).",
                SECONDS,
                Counter,
            ),
            &off_cpu,
            counter_secs,
        )?;
        for (i, (name, help, _)) in KERNEL_COUNTS.iter().enumerate() {
            family(
                e,
                (&format!("wakemeter_thread_{name}"), help, None, Counter),
                &self.by_thread(&|t| t.kernel.get(i).copied().unwrap_or(0), |p| p.kernel),
                counter_u64,
            )?;
        }

        for (name, help, f) in [
            (
                "wakemeter_loop_wakeups",
                "Returns from the loop's wait.",
                (|t: &LoopTotals| t.wakeups) as fn(&LoopTotals) -> u64,
            ),
            (
                "wakemeter_loop_idle_wakeups",
                "Wakeups that found no event.",
                |t| t.idle_wakeups,
            ),
            (
                "wakemeter_loop_zero_timeout_waits",
                "Waits with a zero timeout (non-blocking polls).",
                |t| t.zero_timeout_waits,
            ),
            (
                "wakemeter_loop_events",
                "Ready events the waits reported.",
                |t| t.events,
            ),
        ] {
            family(
                e,
                (name, help, None, Counter),
                &self.by_loop(&f),
                counter_u64,
            )?;
        }
        family(
            e,
            (
                "wakemeter_loop_wait",
                "Time inside the loop's waits.",
                SECONDS,
                Counter,
            ),
            &self.by_loop(&|t| t.wait_ns),
            counter_secs,
        )?;
        family(
            e,
            (
                "wakemeter_loop_busy",
                "Time between the loop's waits (doing work).",
                SECONDS,
                Counter,
            ),
            &self.by_loop(&|t| t.busy_ns),
            counter_secs,
        )?;
        let delays: Vec<(Labels, (Vec<u64>, u64))> = self
            .parts
            .iter()
            .flat_map(|p| {
                p.loops.iter().map(|(n, t)| {
                    (
                        with(&p.labels, &[("loop", n)]),
                        (t.poll_delay_buckets.clone(), t.poll_delay_ns),
                    )
                })
            })
            .collect();
        family(
            e,
            (
                "wakemeter_loop_poll_delay",
                "How late timed-out waits returned after their timeout (Envoy's poll_delay).",
                SECONDS,
                Histogram,
            ),
            &delays,
            histogram,
        )?;

        family(
            e,
            ("wakemeter_sleep_calls", "Completed sleeps.", None, Counter),
            &self.by_site(&|t| t.calls),
            counter_u64,
        )?;
        for (name, help, f) in [
            (
                "wakemeter_sleep_requested",
                "Sleep time asked for.",
                (|t: &SleepTotals| t.requested_ns) as fn(&SleepTotals) -> u64,
            ),
            (
                "wakemeter_sleep_actual",
                "Sleep time got (monotonic clock).",
                |t| t.actual_ns,
            ),
            (
                "wakemeter_sleep_cpu",
                "CPU time spent inside the sleep calls.",
                |t| t.cpu_ns,
            ),
        ] {
            family(
                e,
                (name, help, SECONDS, Counter),
                &self.by_site(&f),
                counter_secs,
            )?;
        }
        let overs: Vec<(Labels, (Vec<u64>, u64))> = self
            .parts
            .iter()
            .flat_map(|p| {
                p.sleeps.iter().map(|(n, t)| {
                    (
                        with(&p.labels, &[("sleep_site", n)]),
                        (t.oversleep_buckets.clone(), t.oversleep_ns),
                    )
                })
            })
            .collect();
        family(
            e,
            (
                "wakemeter_sleep_oversleep",
                "Actual minus requested sleep time.",
                SECONDS,
                Histogram,
            ),
            &overs,
            histogram,
        )?;

        let findings: Vec<(Labels, u64)> = self
            .parts
            .iter()
            .flat_map(|p| {
                p.findings
                    .iter()
                    .map(|((k, s), n)| (with(&p.labels, &[("kind", k), ("severity", s)]), *n))
            })
            .collect();
        family(
            e,
            (
                "wakemeter_findings",
                "Current findings by kind and severity (over each rule's window).",
                None,
                Gauge,
            ),
            &findings,
            gauge_u64,
        )?;

        family(
            e,
            (
                "wakemeter_sampler_cpu",
                "CPU time wakemeter spent sampling, diagnosing and exporting: the overhead paid.",
                SECONDS,
                Counter,
            ),
            &self.per_part(|p| Some(p.sampler_cpu_ns)),
            counter_secs,
        )?;
        family(
            e,
            (
                "wakemeter_sampler_samples",
                "Snapshots taken.",
                None,
                Counter,
            ),
            &self.per_part(|p| Some(p.samples)),
            counter_u64,
        )?;
        family(
            e,
            (
                "wakemeter_sampler_history",
                "Memory the sampler's history holds.",
                BYTES,
                Gauge,
            ),
            &self.per_part(|p| Some(p.history_bytes)),
            gauge_u64,
        )?;
        let one = |v: u64| vec![(none.clone(), v)];
        family(
            e,
            (
                "wakemeter_exporter_series",
                "Series in this exposition (at most the configured cap).",
                None,
                Gauge,
            ),
            &one(self.series as u64),
            gauge_u64,
        )?;
        family(
            e,
            (
                "wakemeter_exporter_dropped_series",
                "Series left out of expositions because of the series cap, summed over every exposition built.",
                None,
                Counter,
            ),
            &one(self.dropped_total),
            counter_u64,
        )?;
        for (name, help, v) in [
            (
                "wakemeter_exporter_http_connections",
                "Connections the metrics endpoint accepted.",
                self.http.connections,
            ),
            (
                "wakemeter_exporter_http_shed_connections",
                "Connections closed to keep the endpoint within its cap on open connections (the oldest one still waiting for its request goes first).",
                self.http.shed,
            ),
            (
                "wakemeter_exporter_http_timeouts",
                "Connections closed because their request and answer took longer than the endpoint's deadline.",
                self.http.timeouts,
            ),
            (
                "wakemeter_exporter_http_accept_errors",
                "Accepts that failed for lack of file descriptors or memory, each followed by a pause of accepting (up to 1 s).",
                self.http.accept_errors,
            ),
        ] {
            family(e, (name, help, None, Counter), &one(v), counter_u64)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "encode_tests.rs"]
mod tests;
