//! `GET /wakemeter`: the findings in words, the dispatchers and the
//! per-thread table, as plain text; `?format=json` is the core's `Report`.

use std::fmt::Write as _;

use wakemeter::{Report, Severity, Subject};

use crate::module::{Dispatcher, DispatcherFigures};

/// What the admin page shows besides the report.
#[derive(Debug, Clone, Default)]
pub struct PageContext {
    /// Sampling period, milliseconds.
    pub interval_ms: u64,
    /// Whether the module's eBPF view is attached.
    pub ebpf: bool,
    /// Why eBPF is off, when it was asked for.
    pub ebpf_note: Option<String>,
    /// The dispatchers and their figures over the newest interval.
    pub dispatchers: Vec<(Dispatcher, DispatcherFigures)>,
    /// The stats hook on Envoy's main thread: (last, max, mean) ns and calls.
    pub publish_cost: (u64, u64, u64, u64),
    /// The publisher thread's CPU, nanoseconds.
    pub publisher_cpu_ns: u64,
    /// The admin hook (report and page) on Envoy's main thread, as
    /// `publish_cost`, over the previous requests.
    pub admin_cost: (u64, u64, u64, u64),
}

/// The output format a query asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Plain text (default).
    Text,
    /// The `Report` as JSON (`format=json`).
    Json,
}

/// The format asked for in `path` (`/wakemeter?format=json`).
///
/// # Errors
/// The value of an unknown `format`.
pub fn format_of(path: &str) -> Result<Format, String> {
    let query = path.split_once('?').map(|(_, q)| q).unwrap_or("");
    for pair in query.split('&') {
        if let Some(v) = pair.strip_prefix("format=") {
            return match v {
                "json" => Ok(Format::Json),
                "text" | "" => Ok(Format::Text),
                other => Err(format!(
                    "unknown format {other:?}: use format=json or format=text"
                )),
            };
        }
    }
    Ok(Format::Text)
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(v) => format!("{v:.decimals$}"),
        None => "-".to_owned(),
    }
}

fn subject(s: &Subject) -> String {
    match s {
        Subject::Process { pid } => format!("process {pid}"),
        Subject::Thread { tid, name } => format!("thread {name} ({tid})"),
        Subject::Loop { name, .. } => format!("loop {name}"),
        Subject::SleepSite { name, .. } => format!("sleep site {name}"),
        Subject::Threads { name, tids } => format!("{} threads {name}", tids.len()),
        other => format!("{other:?}"),
    }
}

/// The role of thread `tid`, if it is a dispatcher.
fn role_of(dispatchers: &[(Dispatcher, DispatcherFigures)], tid: u64) -> Option<&str> {
    dispatchers
        .iter()
        .find(|(d, _)| d.tid == tid)
        .map(|(d, _)| d.role.as_str())
}

/// The text page.
pub fn text(report: &Report, ctx: &PageContext) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "wakemeter {} in Envoy (pid {}): sampling every {} ms, eBPF {}",
        report.library_version,
        report.target.pid,
        ctx.interval_ms,
        if ctx.ebpf { "on" } else { "off" }
    );
    if let Some(note) = &ctx.ebpf_note {
        let _ = writeln!(o, "  ({note})");
    }
    let _ = writeln!(o);
    if report.findings.is_empty() {
        let _ = writeln!(
            o,
            "Findings: none (no waste found over the rules' windows)."
        );
    } else {
        let _ = writeln!(o, "Findings ({}):", report.findings.len());
        for f in &report.findings {
            let sev = match f.severity {
                Severity::Critical => "CRITICAL",
                Severity::Warning => "warning",
                _ => "info",
            };
            let _ = writeln!(
                o,
                "  [{sev}] {} ({}): {}",
                f.kind.as_str(),
                subject(&f.subject),
                f.summary
            );
            let _ = writeln!(o, "      advice: {}", f.advice);
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Dispatchers (Envoy's event loops), over the newest interval:"
    );
    let _ = writeln!(
        o,
        "  {:<12} {:>8}  {:>7} {:>9} {:>9} {:>9} {:>9}",
        "dispatcher", "tid", "cpu%", "vol/s", "invol/s", "rq-wait%", "polls/s"
    );
    for (d, f) in &ctx.dispatchers {
        let _ = writeln!(
            o,
            "  {:<12} {:>8}  {:>7.2} {:>9} {:>9} {:>9} {:>9}",
            d.role,
            d.tid,
            f.cpu_percent,
            opt(f.voluntary_switches_per_sec, 1),
            opt(f.involuntary_switches_per_sec, 1),
            opt(f.run_queue_wait_percent, 2),
            opt(f.poll_calls_per_sec, 1),
        );
    }
    let _ = writeln!(o);
    match &report.interval {
        Some(i) => {
            let _ = writeln!(
                o,
                "Threads over the last {:.1} s (process CPU {:.2}% of a core; {} listed, {} folded into groups):",
                i.duration_ns as f64 / 1e9,
                i.process.cpu_percent,
                i.threads.len(),
                report.threads_folded
            );
            let _ = writeln!(
                o,
                "  {:<16} {:>8} {:<12} {:>7} {:>9} {:>9} {:>9} {:>9}",
                "thread", "tid", "dispatcher", "cpu%", "switch/s", "vol/s", "invol/s", "rq-wait%"
            );
            let mut threads: Vec<_> = i.threads.iter().collect();
            threads.sort_by(|a, b| b.cpu_percent.total_cmp(&a.cpu_percent));
            for t in threads {
                let _ = writeln!(
                    o,
                    "  {:<16} {:>8} {:<12} {:>7.2} {:>9} {:>9} {:>9} {:>9}",
                    t.name,
                    t.tid,
                    role_of(&ctx.dispatchers, t.tid).unwrap_or("-"),
                    t.cpu_percent,
                    opt(t.switches_per_sec, 1),
                    opt(t.voluntary_switches_per_sec, 1),
                    opt(t.involuntary_switches_per_sec, 1),
                    opt(t.run_queue_wait_percent, 2),
                );
            }
        }
        None => {
            let _ = writeln!(o, "Threads: no interval yet (fewer than two samples).");
        }
    }
    let (last, max, mean, calls) = ctx.publish_cost;
    let (admin_last, admin_max, admin_mean, admin_calls) = ctx.admin_cost;
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Module cost: sampler thread {:.3}% of a core (mean sample {:.1} us); publisher thread {:.3} ms CPU in all; stats hook on Envoy's main thread: last {:.1} us, mean {:.1} us, max {:.1} us over {calls} calls.",
        report.stats.sampler_cpu_percent,
        report.stats.mean_sample_cost_ns as f64 / 1e3,
        ctx.publisher_cpu_ns as f64 / 1e6,
        last as f64 / 1e3,
        mean as f64 / 1e3,
        max as f64 / 1e3,
    );
    if admin_calls > 0 {
        let _ = writeln!(
            o,
            "Admin pages before this one (report and page, on Envoy's main thread): last {:.0} us, mean {:.0} us, max {:.0} us over {admin_calls}.",
            admin_last as f64 / 1e3,
            admin_mean as f64 / 1e3,
            admin_max as f64 / 1e3,
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_from_query() {
        assert_eq!(format_of("/wakemeter"), Ok(Format::Text));
        assert_eq!(format_of("/wakemeter?format=json"), Ok(Format::Json));
        assert_eq!(format_of("/wakemeter?x=1&format=json"), Ok(Format::Json));
        assert_eq!(format_of("/wakemeter?format=text"), Ok(Format::Text));
        assert!(format_of("/wakemeter?format=xml").is_err());
    }

    #[test]
    fn text_names_dispatchers_and_threads() {
        let sampler = wakemeter::Sampler::new().expect("sampler");
        sampler.sample().expect("sample");
        std::thread::sleep(std::time::Duration::from_millis(20));
        sampler.sample().expect("sample");
        let report = sampler.report();
        let tid = crate::module::gettid();
        let ctx = PageContext {
            interval_ms: 1000,
            dispatchers: vec![(
                Dispatcher {
                    role: "main_thread".to_owned(),
                    tid,
                },
                DispatcherFigures::default(),
            )],
            ..PageContext::default()
        };
        let page = text(&report, &ctx);
        assert!(page.contains("main_thread"), "{page}");
        assert!(page.contains(&tid.to_string()), "{page}");
        assert!(page.contains("Findings"), "{page}");
        let i = report
            .interval
            .as_ref()
            .expect("two samples make an interval");
        for t in &i.threads {
            assert!(
                page.contains(&t.tid.to_string()),
                "thread {} missing:\n{page}",
                t.tid
            );
        }
    }
}
