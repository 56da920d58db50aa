//! Plain-text tables of intervals and findings.

use wakemeter::{Finding, Interval, Severity};

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// A per-thread table like `top -H`, plus switches/s and run-queue wait.
pub fn threads(i: &Interval) {
    println!(
        "\nover {:.1} s: process {:.1}% CPU, RSS {:.1} MiB ({:+} KiB), {} threads; sampler {:.3}% CPU",
        i.duration_secs(),
        i.process.cpu_percent,
        i.process.rss_bytes as f64 / (1u64 << 20) as f64,
        i.process.rss_change_bytes / 1024,
        i.process.thread_count,
        i.sampler_cpu_percent
    );
    println!(
        "{:>8} {:<16} {:>6} {:>9} {:>9} {:>9} {:>8}",
        "TID", "THREAD", "CPU%", "switch/s", "vol/s", "invol/s", "RQwait%"
    );
    for t in &i.threads {
        println!(
            "{:>8} {:<16} {:>6.1} {:>9} {:>9} {:>9} {:>8}",
            t.tid,
            t.name,
            t.cpu_percent,
            opt(t.switches_per_sec, 0),
            opt(t.voluntary_switches_per_sec, 0),
            opt(t.involuntary_switches_per_sec, 0),
            opt(t.run_queue_wait_percent, 1)
        );
    }
    if !i.loops.is_empty() {
        println!(
            "\n{:<16} {:>10} {:>7} {:>8} {:>8} {:>6} {:>12}",
            "LOOP", "wakeups/s", "idle%", "0-tmo%", "ev/wake", "util", "p99 delay"
        );
        for l in &i.loops {
            println!(
                "{:<16} {:>10.0} {:>7.1} {:>8.1} {:>8.2} {:>6.2} {:>12}",
                l.name,
                l.wakeups_per_sec,
                l.idle_wakeup_ratio * 100.0,
                l.zero_timeout_ratio * 100.0,
                l.events_per_wakeup,
                l.utilization,
                l.p99_poll_delay_ns
                    .map_or_else(|| "-".into(), |d| format!("{:.0} µs", d as f64 / 1e3))
            );
        }
    }
    if !i.sleeps.is_empty() {
        println!(
            "\n{:<16} {:>9} {:>11} {:>13} {:>10} {:>12}",
            "SLEEP SITE", "sleeps/s", "asked (ms)", "oversleep µs", "CPU% in", "CPU/sleep µs"
        );
        for s in &i.sleeps {
            println!(
                "{:<16} {:>9.0} {:>11.2} {:>13.0} {:>10.2} {:>12.1}",
                s.name,
                s.sleeps_per_sec,
                s.mean_requested_ns as f64 / 1e6,
                s.mean_oversleep_ns as f64 / 1e3,
                s.cpu_percent,
                s.cpu_per_sleep_ns as f64 / 1e3
            );
        }
    }
}

/// The kernel's view (eBPF) of each thread over the interval, when attached.
pub fn kernel(i: &Interval) {
    if i.threads.iter().all(|t| t.kernel.is_none()) {
        return;
    }
    println!("\nkernel view (eBPF) over {:.1} s:", i.duration_secs());
    println!(
        "{:>8} {:<16} {:>8} {:>8} {:>9} {:>7} {:>11} {:>10} {:>9} {:<20}",
        "TID",
        "THREAD",
        "vol/s",
        "invol/s",
        "polls/s",
        "0-ret%",
        "nanosleep/s",
        "wakeups/s",
        "in-poll%",
        "top waker"
    );
    for t in &i.threads {
        let Some(k) = &t.kernel else { continue };
        let waker = k
            .top_wakers
            .first()
            .map(|w| format!("{} ({})", w.comm, w.tid))
            .unwrap_or_default();
        println!(
            "{:>8} {:<16} {:>8.0} {:>8.0} {:>9.0} {:>7} {:>11.0} {:>10.0} {:>9.1} {:<20}",
            t.tid,
            t.name,
            k.voluntary_switches_per_sec,
            k.involuntary_switches_per_sec,
            k.poll_calls_per_sec,
            if k.poll_calls_per_sec == 0.0 {
                "-".to_string()
            } else {
                format!("{:.1}", k.poll_zero_return_ratio * 100.0)
            },
            k.sleeps_per_sec,
            k.wakeups_per_sec,
            k.off_cpu.poll_ns as f64 * 100.0 / i.duration_ns.max(1) as f64,
            waker
        );
    }
}

/// Findings, most severe first, with their advice.
pub fn findings(f: &[Finding]) {
    println!("\nfindings ({}):", f.len());
    if f.is_empty() {
        println!("  none: nothing wastes CPU or wakeups here");
    }
    for x in f {
        let sev = match x.severity {
            Severity::Critical => "CRITICAL",
            Severity::Warning => "WARNING ",
            _ => "INFO    ",
        };
        let kind = serde_json::to_value(x.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        println!("  [{sev}] {kind}: {}", x.summary);
        println!("             advice: {}", x.advice);
    }
}
