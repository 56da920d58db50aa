//! The per-tick work of a sampler's readers, alone, for profilers: what
//! the FFI listener does every tick (latest interval + findings) and a
//! report serialized to JSON, over a history taken at a real gap.
//! `valgrind --tool=callgrind --toggle-collect='*reader_work::listener_tick*'`
//! (or `*report_json*`) counts the instructions of that work only.
//!
//! Usage: `reader_work [THREADS] [idle|active] [SNAPSHOTS] [GAP_MS] [TICKS]`
//! (defaults: 258 threads in all, idle, 12 snapshots, 1000 ms, 20 ticks).
//! The history is what a sampler at that period holds after SNAPSHOTS
//! ticks; then each tick takes one more snapshot after the gap, as the
//! background sampler does, and the readers run on it in the order a
//! host's consumers do: the listener's interval and findings, a report,
//! the report as JSON, then a second report of the same snapshot (a
//! dashboard polling faster than the sampler). Findings and the report's
//! body are computed once per snapshot and shared, so the later calls
//! cost what they add. The default thresholds apply. Prints the median
//! CPU time of each call, in µs, and how many findings and threads it saw.

use std::time::Duration;

use wakemeter::{Sampler, SamplerBuilder};
use wakemeter_benches::{ActiveThreads, ParkedThreads, median, thread_cpu_ns};

/// What the FFI listener computes per tick.
#[inline(never)]
fn listener_tick(s: &Sampler) -> usize {
    let i = std::hint::black_box(s.latest_interval());
    let f = std::hint::black_box(s.findings());
    i.map_or(0, |i| i.threads.len()) + f.len()
}

/// A report, serialized to JSON.
#[inline(never)]
fn report_json(s: &Sampler) -> usize {
    serde_json::to_string(&s.report()).map_or(0, |j| j.len())
}

/// The report alone, not serialized.
#[inline(never)]
fn report(s: &Sampler) -> usize {
    std::hint::black_box(s.report()).findings.len()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let threads: usize = arg(1, "258").parse().unwrap_or(258);
    let active = arg(2, "idle") == "active";
    let snapshots: usize = arg(3, "12").parse().unwrap_or(12);
    let gap = Duration::from_millis(arg(4, "1000").parse().unwrap_or(1000));
    let ticks: usize = arg(5, "20").parse().unwrap_or(20).max(1);
    // The main thread and the sampler's are two of `threads` in the
    // background bench; here the main thread samples, so one more extra.
    let extra = threads.saturating_sub(1);
    let (_p, _a) = if active {
        (None, Some(ActiveThreads::spawn(extra)))
    } else {
        (Some(ParkedThreads::spawn(extra)), None)
    };
    let s = SamplerBuilder::new().build().expect("sampler");
    for _ in 0..snapshots {
        let _ = s.sample();
        std::thread::sleep(gap);
    }
    let _ = s.sample();
    let (mut tick, mut rep, mut json, mut again) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut seen, mut bytes) = (0, 0);
    for _ in 0..ticks {
        std::thread::sleep(gap);
        let _ = s.sample();
        let c0 = thread_cpu_ns();
        seen = listener_tick(&s);
        let c1 = thread_cpu_ns();
        std::hint::black_box(report(&s));
        let c2 = thread_cpu_ns();
        bytes = report_json(&s);
        let c3 = thread_cpu_ns();
        std::hint::black_box(report(&s));
        let c4 = thread_cpu_ns();
        tick.push((c1 - c0) as f64 / 1e3);
        rep.push((c2 - c1) as f64 / 1e3);
        json.push((c3 - c2) as f64 / 1e3);
        again.push((c4 - c3) as f64 / 1e3);
    }
    let findings = s.findings();
    println!(
        "{threads} threads ({}), {} snapshots {} ms apart: {} findings, interval threads + findings {seen}, report {bytes} bytes of JSON",
        if active { "active" } else { "idle" },
        snapshots + 1,
        gap.as_millis(),
        findings.len(),
    );
    println!(
        "median CPU µs per call: interval + findings {:.1}, report {:.1}, report to JSON {:.1}, report again {:.1}",
        median(&mut tick),
        median(&mut rep),
        median(&mut json),
        median(&mut again)
    );
}
