//! Findings on memory: steady growth across the history.

use super::{Ctx, FindingKind, Severity, Subject, ns, number};
use crate::history::History;

pub(super) fn memory_growth(cx: &mut Ctx<'_>, h: &History) {
    let t = cx.t;
    let (Some(first), Some(last)) = (h.iter().next(), h.latest()) else {
        return;
    };
    let d = last
        .header
        .monotonic_ns
        .saturating_sub(first.header.monotonic_ns);
    // Growth needs two steps at least: one step is not a trend; and its
    // own minimum window, so that start-up allocation is not a leak.
    if d < ns(t.memory_min_window) || h.len() < 3 {
        return;
    }
    let (a, b) = (
        first.header.process.rss_bytes,
        last.header.process.rss_bytes,
    );
    let growth = b.saturating_sub(a);
    if growth < t.memory_growth_bytes || (growth as f64) < t.memory_growth_ratio * a as f64 {
        return;
    }
    let steps: Vec<bool> = h
        .iter()
        .zip(h.iter().skip(1))
        .map(|(x, y)| y.header.process.rss_bytes >= x.header.process.rss_bytes)
        .collect();
    let rising = steps.iter().filter(|s| **s).count() as f64 / steps.len().max(1) as f64;
    if rising < t.memory_growth_rising_ratio {
        return;
    }
    let mib = |v: u64| v as f64 / (1u64 << 20) as f64;
    let per_min = growth as f64 / (d as f64 / 60e9);
    cx.window_ns = d;
    cx.push(
        FindingKind::MemoryGrowth,
        if growth as f64 >= t.memory_growth_critical_ratio * a as f64 { Severity::Critical } else { Severity::Warning },
        Subject::Process { pid: last.header.process.pid },
        move || format!(
            "resident memory grew from {:.1} MiB to {:.1} MiB over {:.0} s ({:.1} MiB/min), rising in {:.0}% of samples",
            mib(a),
            mib(b),
            d as f64 / 1e9,
            mib(per_min as u64),
            rising * 100.0
        ),
        vec![
            number("rss_start_bytes", a as f64, "bytes"),
            number("rss_end_bytes", b as f64, "bytes"),
            number("growth_bytes_per_min", per_min, "bytes/min"),
            number("rising_ratio", rising, "ratio"),
        ],
        "Steady growth across the whole history looks like a leak or an unbounded cache/queue. Compare heap \
         profiles at two points (heaptrack, Instruments Allocations, Android Studio) or bound the cache.",
    );
}
