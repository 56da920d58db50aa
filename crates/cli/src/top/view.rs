//! What one screen of `wakemeter top` shows, built from a [`Report`] and
//! an [`Interval`]: plain data, so that drawing is a function of it.
//!
//! Threads are only sorted here (references, no copies); their rows are
//! formatted and escaped by the renderer for the visible ones only, so a
//! target with thousands of threads costs a sort per frame, not thousands
//! of formatted lines.

use std::cmp::Ordering;
use std::time::Duration;

use unicode_width::UnicodeWidthChar;
use wakemeter::{Finding, Interval, Report, SampleWarning, ThreadInterval};

use crate::print::safe;

/// The column the thread table is sorted by, busiest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// CPU time, percent of one core.
    Cpu,
    /// Switches per second (voluntary + involuntary).
    Switches,
    /// Kernel wakes per second (eBPF; threads without a kernel record last).
    Wakes,
    /// Run-queue wait, percent of the interval.
    RunQueueWait,
}

impl SortKey {
    /// The key after this one, for the key that cycles through them.
    pub fn next(self) -> SortKey {
        match self {
            SortKey::Cpu => SortKey::Switches,
            SortKey::Switches => SortKey::Wakes,
            SortKey::Wakes => SortKey::RunQueueWait,
            SortKey::RunQueueWait => SortKey::Cpu,
        }
    }

    /// The key sorting by what letter `c` names (`c`, `s`, `w`, `r`).
    pub fn for_letter(c: char) -> Option<SortKey> {
        match c {
            'c' => Some(SortKey::Cpu),
            's' => Some(SortKey::Switches),
            'w' => Some(SortKey::Wakes),
            'r' => Some(SortKey::RunQueueWait),
            _ => None,
        }
    }

    /// Its name in the footer.
    pub fn label(self) -> &'static str {
        match self {
            SortKey::Cpu => "CPU%",
            SortKey::Switches => "switches/s",
            SortKey::Wakes => "wakes/s",
            SortKey::RunQueueWait => "run-queue wait",
        }
    }

    /// The thread's value for this key; `None` sorts after every value.
    fn value(self, t: &ThreadInterval) -> Option<f64> {
        match self {
            SortKey::Cpu => Some(t.cpu_percent),
            SortKey::Switches => t.switches_per_sec,
            SortKey::Wakes => t.kernel.as_ref().map(|k| k.wakes_per_sec),
            SortKey::RunQueueWait => t.run_queue_wait_percent,
        }
    }
}

/// `threads` ordered by `key`, highest first; ties by CPU, then by TID, so
/// rows do not jump between frames with equal values.
pub fn sorted(threads: &[ThreadInterval], key: SortKey) -> Vec<&ThreadInterval> {
    let mut v: Vec<&ThreadInterval> = threads.iter().collect();
    v.sort_unstable_by(|a, b| {
        let by_key = match (key.value(a), key.value(b)) {
            (Some(x), Some(y)) => y.total_cmp(&x),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_key
            .then_with(|| b.cpu_percent.total_cmp(&a.cpu_percent))
            .then_with(|| a.tid.cmp(&b.tid))
    });
    v
}

/// Whether the kernel view (eBPF) is there, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kernel {
    /// The eBPF kernel source is attached.
    Attached,
    /// It is not, for this reason (raw; escaped when drawn).
    Missing(String),
}

/// One screen's worth of data.
#[derive(Debug)]
pub struct View<'a> {
    /// Process ID of the target.
    pub pid: u32,
    /// Its name (raw; escaped when drawn).
    pub name: &'a str,
    /// How long `top` has been watching.
    pub watching: Duration,
    /// Time between refreshes.
    pub refresh: Duration,
    /// Whether the kernel view is attached.
    pub kernel: &'a Kernel,
    /// Rates over the last refresh period (None until two snapshots exist).
    pub interval: Option<&'a Interval>,
    /// The interval's threads, sorted by `sort`.
    pub threads: Vec<&'a ThreadInterval>,
    /// Current findings (over the findings window, as `watch` reports them).
    pub findings: &'a [Finding],
    /// What made the snapshots less complete than configured.
    pub warnings: &'a [SampleWarning],
    /// The thread table's order.
    pub sort: SortKey,
    /// A line that must be seen (the target exited, a sampling error);
    /// raw, escaped when drawn.
    pub notice: Option<&'a str>,
    /// Keys work (a terminal); plain frames say no keys.
    pub interactive: bool,
}

impl<'a> View<'a> {
    /// The view of `report` (findings, warnings) with the thread table of
    /// `interval` (the last refresh period) sorted by `sort`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pid: u32,
        name: &'a str,
        watching: Duration,
        refresh: Duration,
        kernel: &'a Kernel,
        report: &'a Report,
        interval: Option<&'a Interval>,
        sort: SortKey,
    ) -> View<'a> {
        View {
            pid,
            name,
            watching,
            refresh,
            kernel,
            interval,
            threads: interval
                .map(|i| sorted(&i.threads, sort))
                .unwrap_or_default(),
            findings: &report.findings,
            warnings: &report.warnings,
            sort,
            notice: None,
            interactive: true,
        }
    }

    /// Whether any thread has kernel-view (eBPF) numbers.
    pub fn has_kernel_columns(&self) -> bool {
        self.threads.iter().any(|t| t.kernel.is_some())
    }
}

/// `s` escaped (see [`safe`]), cut to at most `width` terminal cells with
/// `…` marking the cut, and padded with spaces to exactly `width` cells.
pub fn fit(s: &str, width: usize) -> String {
    let s = safe(s);
    let mut out = String::with_capacity(width + 4);
    let total: usize = s.chars().map(|c| c.width().unwrap_or(0)).sum();
    let mut used = 0;
    if total <= width {
        out.push_str(&s);
        used = total;
    } else if width > 0 {
        for c in s.chars() {
            let w = c.width().unwrap_or(0);
            if used + w > width - 1 {
                break;
            }
            out.push(c);
            used += w;
        }
        out.push('…');
        used += 1;
    }
    out.extend(std::iter::repeat_n(' ', width.saturating_sub(used)));
    out
}

/// `d` as `H:MM:SS`.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_pads_cuts_and_escapes() {
        assert_eq!(fit("spinner", 10), "spinner   ");
        assert_eq!(fit("a-very-long-thread-name", 10), "a-very-lo…");
        // Escaped first, then cut: no raw control survives, and the cut
        // falls on the escape's visible text.
        let cut = fit("\x1b]0;pwned\x07", 8);
        assert_eq!(cut, "\\x1b]0;…");
        assert!(!cut.chars().any(char::is_control));
        // Two cells per CJK character.
        assert_eq!(fit("漢字漢字", 5), "漢字…");
        assert_eq!(fit("漢字", 5), "漢字 ");
        assert_eq!(fit("x", 0), "");
    }

    #[test]
    fn clock_is_hours_minutes_seconds() {
        assert_eq!(clock(Duration::from_secs(3723)), "1:02:03");
        assert_eq!(clock(Duration::from_millis(59_999)), "0:00:59");
    }

    #[test]
    fn sort_keys_cycle_through_all_four() {
        let mut k = SortKey::Cpu;
        let mut seen = vec![k];
        for _ in 0..3 {
            k = k.next();
            seen.push(k);
        }
        assert_eq!(k.next(), SortKey::Cpu);
        for c in ['c', 's', 'w', 'r'] {
            assert!(seen.contains(&SortKey::for_letter(c).unwrap()));
        }
        assert_eq!(SortKey::for_letter('x'), None);
    }
}
