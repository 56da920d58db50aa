//! Plain-text tables of intervals and findings, and the one way anything
//! outside our control reaches the terminal.
//!
//! Thread names, loop names, eBPF `comm`s of any process on the host,
//! findings (which quote those names) and error messages are written by
//! others. Every human-readable line goes through [`safe`], which turns
//! control characters into visible escapes, so a hostile name cannot move
//! the cursor, clear the screen, set the window title or forge a line.
//! JSON goes through [`json`], which adds the escapes serde leaves out.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, Write};

use serde::Serialize;
use wakemeter::compare::ThreadGroupInterval;
use wakemeter::{Finding, Interval, LoopInterval, Report, SampleWarning, Severity, SleepInterval};

/// Characters that must not reach a terminal raw: C0 controls (including
/// ESC, BEL, tab and newline), DEL, C1 controls (`\u{9b}` is CSI on some
/// terminals), and the invisible ones that reorder or break text (bidi
/// embeddings, overrides and isolates, marks, line and paragraph separators).
fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200e}' | '\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

/// `s` with every control character replaced by a visible escape: `\x1b`
/// for C0 and DEL, `\u{9b}` for C1 and the other invisible controls, and
/// `\\` for a backslash so an escape in the output is never ambiguous.
/// Borrows when there is nothing to escape (the common case).
pub fn safe(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c == '\\' || is_unsafe(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\u{0}'..='\u{1f}' | '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `v` as one line of JSON that is also safe on a terminal. serde escapes
/// C0 controls inside strings but writes DEL, C1 and the bidi controls raw;
/// those become `\uXXXX` escapes here, which JSON readers decode to the
/// same text. (They can only occur inside strings: everything else serde
/// writes is ASCII punctuation, digits, letters and spaces.)
pub fn json<T: Serialize>(v: &T) -> Result<String, serde_json::Error> {
    Ok(json_escape(serde_json::to_string(v)?))
}

/// As [`json`], indented (for files).
pub fn json_pretty<T: Serialize>(v: &T) -> Result<String, serde_json::Error> {
    Ok(json_escape(serde_json::to_string_pretty(v)?))
}

fn json_escape(s: String) -> String {
    // Everything serde may leave raw is at or above DEL.
    if !s.chars().any(|c| c >= '\u{7f}' && is_unsafe(c)) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if c >= '\u{7f}' && is_unsafe(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// One line on stderr, escaped. A closed or broken stderr is ignored:
/// there is nowhere left to say anything.
pub fn note(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{}", safe(line));
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// A per-thread table like `top -H`, plus switches/s and run-queue wait.
pub fn threads(out: &mut impl Write, i: &Interval) -> io::Result<()> {
    writeln!(
        out,
        "\nover {:.1} s: process {:.1}% CPU, RSS {:.1} MiB ({:+} KiB), {} threads; sampler {:.3}% CPU",
        i.duration_secs(),
        i.process.cpu_percent,
        i.process.rss_bytes as f64 / (1u64 << 20) as f64,
        i.process.rss_change_bytes / 1024,
        i.process.thread_count,
        i.sampler_cpu_percent
    )?;
    // Two sources, each named: the sampler sees only threads alive at a
    // sample; the kernel source counts every exit.
    match i.kernel_thread_exits {
        Some(all) if all > 0 || i.threads_exited > 0 => writeln!(
            out,
            "threads exited: {all} ({:.0}/s, every exit, eBPF); {} of them seen by sampling",
            all as f64 / i.duration_secs().max(1e-9),
            i.threads_exited
        )?,
        None if i.threads_exited > 0 => writeln!(
            out,
            "threads exited: {} seen by sampling (threads that start and end between \
             samples are not seen without eBPF)",
            i.threads_exited
        )?,
        _ => {}
    }
    writeln!(
        out,
        "{:>8} {:<16} {:>6} {:>9} {:>9} {:>9} {:>8}",
        "TID", "THREAD", "CPU%", "switch/s", "vol/s", "invol/s", "RQwait%"
    )?;
    for t in &i.threads {
        writeln!(
            out,
            "{:>8} {:<16} {:>6.1} {:>9} {:>9} {:>9} {:>8}",
            t.tid,
            safe(&t.name),
            t.cpu_percent,
            opt(t.switches_per_sec, 0),
            opt(t.voluntary_switches_per_sec, 0),
            opt(t.involuntary_switches_per_sec, 0),
            opt(t.run_queue_wait_percent, 1)
        )?;
    }
    if !i.loops.is_empty() {
        writeln!(out, "\n{LOOP_HEADER}")?;
        for l in &i.loops {
            writeln!(out, "{}", loop_row(l))?;
        }
    }
    if !i.sleeps.is_empty() {
        writeln!(out, "\n{SLEEP_HEADER}")?;
        for s in &i.sleeps {
            writeln!(out, "{}", sleep_row(s))?;
        }
    }
    Ok(())
}

/// The header of the loops table (one row per `LoopProbe`).
pub const LOOP_HEADER: &str =
    "LOOP              wakeups/s   idle%   0-tmo%  ev/wake   util    p99 delay";

/// One loop's row under [`LOOP_HEADER`], its name escaped.
pub fn loop_row(l: &LoopInterval) -> String {
    format!(
        "{:<16} {:>10.0} {:>7.1} {:>8.1} {:>8.2} {:>6.2} {:>12}",
        safe(&l.name),
        l.wakeups_per_sec,
        l.idle_wakeup_ratio * 100.0,
        l.zero_timeout_ratio * 100.0,
        l.events_per_wakeup,
        l.utilization,
        l.p99_poll_delay_ns
            .map_or_else(|| "-".into(), |d| format!("{:.0} µs", d as f64 / 1e3))
    )
}

/// The header of the sleep sites table (one row per `SleepProbe`).
pub const SLEEP_HEADER: &str =
    "SLEEP SITE        sleeps/s  asked (ms)  oversleep µs    CPU% in CPU/sleep µs";

/// One sleep site's row under [`SLEEP_HEADER`], its name escaped.
pub fn sleep_row(s: &SleepInterval) -> String {
    format!(
        "{:<16} {:>9.0} {:>11.2} {:>13.0} {:>10.2} {:>12.1}",
        safe(&s.name),
        s.sleeps_per_sec,
        s.mean_requested_ns as f64 / 1e6,
        s.mean_oversleep_ns as f64 / 1e3,
        s.cpu_percent,
        s.cpu_per_sleep_ns as f64 / 1e3
    )
}

/// The threads a report folded (not in its thread table), by name group:
/// every thread of the process is in one group. Nothing when none was folded.
pub fn thread_groups(
    out: &mut impl Write,
    groups: &[ThreadGroupInterval],
    folded: u32,
) -> io::Result<()> {
    if folded == 0 {
        return Ok(());
    }
    let all: u32 = groups.iter().map(|g| g.threads).sum();
    writeln!(
        out,
        "\n{folded} more threads not listed; all {all} by name:\n{:<20} {:>7} {:>7} {:>9} {:>9} {:>8}",
        "GROUP", "threads", "CPU%", "switch/s", "vol/s", "RQwait%"
    )?;
    for g in groups {
        writeln!(
            out,
            "{:<20} {:>7} {:>7.1} {:>9} {:>9} {:>8}",
            safe(&g.name),
            g.threads,
            g.cpu_percent,
            opt(g.switches_per_sec, 0),
            opt(g.voluntary_switches_per_sec, 0),
            opt(g.run_queue_wait_percent, 1)
        )?;
    }
    Ok(())
}

/// The kernel's view (eBPF) of each thread over the interval, when attached.
///
/// `blocked%` is time off CPU for any cause but preemption; `polls/s` with
/// `idle%` (returned nothing), the most called poll-family syscall, and
/// `idle-nb/s`, the idle polls that did not block (what a busy poller makes); `sleeps/s`
/// with `intr/s`, the sleeps a signal cut short; `wakes/s` with its
/// sources (interrupts / threads of this process / other processes, in
/// percent); `top waker` is the thread that woke it most (who did the
/// waking, `[interrupt]` for interrupt context).
pub fn kernel(out: &mut impl Write, i: &Interval) -> io::Result<()> {
    if i.threads.iter().all(|t| t.kernel.is_none()) {
        return Ok(());
    }
    writeln!(out, "\nkernel view (eBPF) over {:.1} s:", i.duration_secs())?;
    writeln!(
        out,
        "{:>8} {:<16} {:>7} {:>7} {:>8} {:>9} {:>6} {:<13} {:>9} {:>8} {:>6} {:>8} {:>11} {:<20}",
        "TID",
        "THREAD",
        "vol/s",
        "invol/s",
        "blocked%",
        "polls/s",
        "idle%",
        "poll syscall",
        "idle-nb/s",
        "sleeps/s",
        "intr/s",
        "wakes/s",
        "irq/thr/oth",
        "top waker"
    )?;
    for t in &i.threads {
        let Some(k) = &t.kernel else { continue };
        // The waker may be any process on the host: its name is as
        // untrusted as the target's own.
        let waker = k
            .top_wakers
            .first()
            .map(|w| format!("{} ({})", safe(&w.name), w.tid))
            .unwrap_or_default();
        let top_poll = k
            .calls_by_syscall
            .iter()
            .filter(|c| c.syscall.is_poll())
            .max_by(|a, b| a.calls_per_sec.total_cmp(&b.calls_per_sec))
            .map(|c| c.syscall.name())
            .unwrap_or("-");
        let sources = k.interrupt_wakes_per_sec
            + k.process_thread_wakes_per_sec
            + k.other_process_wakes_per_sec;
        let shares = if sources > 0.0 {
            format!(
                "{:.0}/{:.0}/{:.0}",
                k.interrupt_wakes_per_sec * 100.0 / sources,
                k.process_thread_wakes_per_sec * 100.0 / sources,
                k.other_process_wakes_per_sec * 100.0 / sources
            )
        } else {
            "-".to_string()
        };
        writeln!(
            out,
            "{:>8} {:<16} {:>7.0} {:>7.0} {:>8.1} {:>9.0} {:>6} {:<13} {:>9.0} {:>8.0} {:>6.0} {:>8.0} {:>11} {:<20}",
            t.tid,
            safe(&t.name),
            k.voluntary_switches_per_sec,
            k.involuntary_switches_per_sec,
            k.blocked_percent,
            k.poll_calls_per_sec,
            if k.poll_calls_per_sec == 0.0 {
                "-".to_string()
            } else {
                format!("{:.1}", k.idle_poll_ratio * 100.0)
            },
            top_poll,
            k.idle_nonblocking_polls_per_sec,
            k.sleeps_per_sec,
            k.interrupted_sleeps_per_sec,
            k.wakes_per_sec,
            shares,
            waker
        )?;
    }
    if let Some(n) = i.kernel_uncovered_threads.filter(|n| *n > 0) {
        writeln!(
            out,
            "  {n} thread(s) have no kernel record: the eBPF thread map is full, \
             or they have not run since it attached"
        )?;
    }
    Ok(())
}

/// What made the report's snapshots less complete than configured (lost
/// kernel events, descriptors, a failed kernel source), one line each.
pub fn warnings(out: &mut impl Write, w: &[SampleWarning]) -> io::Result<()> {
    for w in w {
        let line = match w {
            SampleWarning::KernelEventsDropped { dropped_events } => format!(
                "{dropped_events} kernel events lost (an eBPF map was full): kernel counters are low"
            ),
            SampleWarning::DescriptorsExhausted {
                threads_without_descriptors,
            } => format!(
                "out of file descriptors: {threads_without_descriptors} thread(s) sampled with CPU time only"
            ),
            SampleWarning::KernelSourceFailed { message } => {
                format!("kernel source failed: {}", safe(message))
            }
            SampleWarning::HistoryOverBudget {
                held_snapshots,
                configured_snapshots,
                budget_bytes,
            } => format!(
                "history holds {held_snapshots} of the {configured_snapshots} snapshots configured: its byte budget ({budget_bytes} bytes) is reached"
            ),
            other => safe(&format!("{other:?}")).into_owned(),
        };
        writeln!(out, "  warning: {line}")?;
    }
    Ok(())
}

/// A finding's severity, kind and summary on one line, escaped:
/// `[CRITICAL] busy_poller: …`.
pub fn finding_line(f: &Finding) -> String {
    let sev = match f.severity {
        Severity::Critical => "CRITICAL",
        Severity::Warning => "WARNING ",
        _ => "INFO    ",
    };
    format!("[{sev}] {}: {}", safe(f.kind.as_str()), safe(&f.summary))
}

/// Findings, most severe first, with their advice. Summaries and advice
/// quote thread and loop names, so they are escaped like the tables.
pub fn findings(out: &mut impl Write, f: &[Finding]) -> io::Result<()> {
    findings_with(out, f, |_| None)
}

/// The findings, each followed by the path of its profile when `profile`
/// gives one.
pub fn findings_with(
    out: &mut impl Write,
    f: &[Finding],
    profile: impl Fn(&Finding) -> Option<String>,
) -> io::Result<()> {
    writeln!(out, "\nfindings ({}):", f.len())?;
    if f.is_empty() {
        writeln!(out, "  none: nothing wastes CPU or wakeups here")?;
    }
    for x in f {
        writeln!(out, "  {}", finding_line(x))?;
        writeln!(out, "             advice: {}", safe(&x.advice))?;
        if let Some(path) = profile(x) {
            writeln!(out, "             profile: {}", safe(&path))?;
        }
    }
    Ok(())
}

/// What the last written report was, so that one interval is never
/// written twice: when sampling starves (no new snapshot before the
/// deadline, or before the target's exit is noticed), the final report
/// would repeat the last one.
#[derive(Default)]
pub(crate) struct Printed {
    /// The snapshot the last written interval ended at, and whether the
    /// sampler was running then.
    last: Option<(u64, bool)>,
}

impl Printed {
    /// Whether `report` repeats the last one written (then it is not
    /// written again); otherwise it is noted as written. In JSON a report
    /// that only adds `running: false` to the same interval is written: it
    /// is how a reader learns that sampling ended.
    pub(crate) fn repeats(&mut self, report: &Report, json: bool) -> bool {
        let Some(i) = &report.interval else {
            return false;
        };
        let running = report.stats.running;
        let same = self
            .last
            .is_some_and(|(seq, was)| seq == i.to_seq && (!json || was == running));
        if !same {
            self.last = Some((i.to_seq, running));
        }
        same
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_untouched() {
        let s = "epoll-loop µs é 漢字";
        assert!(matches!(safe(s), Cow::Borrowed(x) if x == s));
    }

    #[test]
    fn controls_become_visible_escapes() {
        assert_eq!(safe("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");
        assert_eq!(safe("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(safe("\u{9b}31m\u{7f}"), "\\u{9b}31m\\x7f");
        assert_eq!(safe("x\ny\tz\r\0"), "x\\x0ay\\x09z\\x0d\\x00");
        assert_eq!(
            safe("evil\u{202e}txt.exe\u{2028}"),
            "evil\\u{202e}txt.exe\\u{2028}"
        );
        assert_eq!(safe("a\\x1b"), "a\\\\x1b");
        for c in (0u32..0x20).chain(0x7f..0xa0) {
            let c = char::from_u32(c).unwrap();
            let s = safe(&c.to_string()).into_owned();
            assert!(s.chars().all(|c| c.is_ascii_graphic()), "{s:?}");
        }
    }

    #[test]
    fn json_keeps_the_text_but_not_the_raw_controls() {
        let hostile = "a\x1b]0;t\x07b\u{7f}c\u{9b}d\u{85}e\u{202e}f\\\u{9b}";
        let line = json(&vec![hostile]).unwrap();
        assert!(
            line.chars().all(|c| c.is_ascii_graphic()),
            "raw control left in {line:?}"
        );
        let back: Vec<String> = serde_json::from_str(&line).unwrap();
        assert_eq!(back, [hostile]);
        let pretty = json_pretty(&vec![hostile]).unwrap();
        assert!(!pretty.chars().any(|c| c != '\n' && is_unsafe(c)));
    }

    #[test]
    fn table_headers_line_up_with_their_columns() {
        let loops = format!(
            "{:<16} {:>10} {:>7} {:>8} {:>8} {:>6} {:>12}",
            "LOOP", "wakeups/s", "idle%", "0-tmo%", "ev/wake", "util", "p99 delay"
        );
        assert_eq!(LOOP_HEADER, loops);
        let sleeps = format!(
            "{:<16} {:>9} {:>11} {:>13} {:>10} {:>12}",
            "SLEEP SITE", "sleeps/s", "asked (ms)", "oversleep µs", "CPU% in", "CPU/sleep µs"
        );
        assert_eq!(SLEEP_HEADER, sleeps);
    }

    #[test]
    fn tables_escape_names_of_findings() {
        let f: Vec<Finding> = serde_json::from_value(serde_json::json!([{
            "kind": "busy_poller",
            "severity": "critical",
            "subject": {"type": "thread", "tid": 7, "name": "\u{1b}[2J"},
            "summary": "thread \u{1b}]0;pwned\u{7} wakes a lot",
            "evidence": [],
            "advice": "fix \u{9b}1m it",
            "window_ns": 1
        }]))
        .unwrap();
        let mut out = Vec::new();
        findings(&mut out, &f).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains('\x1b') && !text.contains('\x07') && !text.contains('\u{9b}'));
        assert!(text.contains("\\x1b]0;pwned\\x07"), "{text}");
        assert!(text.contains("fix \\u{9b}1m it"), "{text}");
    }
}
