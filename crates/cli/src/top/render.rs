//! Drawing a [`View`] into a ratatui [`Buffer`]: a pure function of the
//! view and the scroll position, so it is tested with `TestBackend` and the
//! plain-text frames (stdout not a terminal) are the same screen as text.
//!
//! From top to bottom: three header lines, the thread table (as many rows
//! as fit), loops and sleep sites (only when the target has probes), the
//! sampler's warnings, the findings, and one footer line. Every section is
//! bounded; the thread table gets what is left, at least a few rows.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthStr;
use wakemeter::{KernelThreadInterval, OffCpuTime, ThreadInterval};

use super::view::{Kernel, SortKey, View, clock, fit};
use crate::print::{self, safe};

/// Lines above the thread table.
const HEADER_LINES: usize = 3;
/// Width of the thread-name column, in cells.
const NAME_WIDTH: usize = 16;
/// At most this many loops and as many sleep sites are listed.
const MAX_PROBE_ROWS: usize = 5;
/// At most this many warnings are listed.
const MAX_WARNINGS: usize = 2;
/// The thread table keeps at least this many rows when sections compete.
const MIN_THREAD_ROWS: usize = 3;

/// What a draw showed of the thread table, for scrolling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drawn {
    /// Index (in sorted order) of the first thread row shown.
    pub first: usize,
    /// Thread rows that fit on the screen.
    pub rows: usize,
}

/// Lines given to each section.
struct Plan {
    thread_rows: usize,
    loops: usize,
    sleeps: usize,
    warnings: usize,
    findings: usize,
}

/// Lines a section of `n` probe rows wants: a blank line, its header, rows.
fn probe_lines(n: usize) -> usize {
    if n == 0 { 0 } else { 2 + n.min(MAX_PROBE_ROWS) }
}

/// Indent of a finding's summary, and of its continuation lines (under
/// the text after `[SEVERITY]`).
const FINDING_INDENT: (&str, &str) = ("  ", "             ");
/// Indent of a finding's advice, and of its continuation lines.
const ADVICE_INDENT: (&str, &str) = ("      advice: ", "              ");

/// `text` wrapped at word boundaries to `width` cells, never cut: the first
/// line starts with `indent.0`, the others with `indent.1`. textwrap knows
/// the display width of wide characters, which a hand-written split would
/// have to relearn.
fn wrapped(text: &str, indent: (&str, &str), width: u16) -> Vec<String> {
    let options = textwrap::Options::new(usize::from(width).max(20))
        .initial_indent(indent.0)
        .subsequent_indent(indent.1)
        .word_splitter(textwrap::WordSplitter::NoHyphenation)
        .break_words(true);
    textwrap::wrap(text, options)
        .into_iter()
        .map(std::borrow::Cow::into_owned)
        .collect()
}

/// Each finding's summary and advice, wrapped to `width`.
fn finding_texts(v: &View, width: u16) -> Vec<(Vec<String>, Vec<String>)> {
    v.findings
        .iter()
        .map(|f| {
            (
                wrapped(&print::finding_line(f), FINDING_INDENT, width),
                wrapped(&safe(&f.advice), ADVICE_INDENT, width),
            )
        })
        .collect()
}

/// Lines the findings want at `width`: a blank line, the title, then each
/// summary and advice, wrapped.
fn findings_wanted(v: &View, width: u16) -> usize {
    2 + finding_texts(v, width)
        .iter()
        .map(|(s, a)| s.len() + a.len())
        .sum::<usize>()
}

fn plan(v: &View, height: usize, width: u16, findings_cap: usize) -> Plan {
    // Header, the table's own header line, and the footer.
    let rest = height.saturating_sub(HEADER_LINES + 2);
    let min_rows = v.threads.len().clamp(1, MIN_THREAD_ROWS);
    let mut budget = rest.saturating_sub(min_rows);
    let mut take = |want: usize| {
        let got = want.min(budget);
        budget -= got;
        got
    };
    let findings = take(findings_wanted(v, width).min(findings_cap));
    let warnings = take(v.warnings.len().min(MAX_WARNINGS));
    let (loops, sleeps) = match v.interval {
        Some(i) => (
            take(probe_lines(i.loops.len())),
            take(probe_lines(i.sleeps.len())),
        ),
        None => (0, 0),
    };
    Plan {
        thread_rows: rest - findings - warnings - loops - sleeps,
        loops,
        sleeps,
        warnings,
        findings,
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// The two largest off-CPU causes, in percent of the interval:
/// `poll 95% lock 3%` (causes under 0.5% left out).
fn off_cpu_split(off: &OffCpuTime, interval_ns: u64) -> String {
    if interval_ns == 0 {
        return "-".to_string();
    }
    let mut causes: Vec<(&str, u64)> = OffCpuTime::CAUSES
        .iter()
        .copied()
        .zip(off.by_cause())
        .filter(|(_, ns)| *ns as f64 * 200.0 >= interval_ns as f64)
        .collect();
    causes.sort_by_key(|c| std::cmp::Reverse(c.1));
    let parts: Vec<String> = causes
        .iter()
        .take(2)
        .map(|(name, ns)| format!("{name} {:.0}%", *ns as f64 * 100.0 / interval_ns as f64))
        .collect();
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(" ")
    }
}

/// The thread table's header cells; the sorted one is highlighted.
fn table_header(sort: SortKey, kernel: bool) -> Line<'static> {
    let mut cells = vec![
        (format!("{:>8} {:<NAME_WIDTH$}", "TID", "THREAD"), None),
        (format!(" {:>6}", "CPU%"), Some(SortKey::Cpu)),
        (format!(" {:>9}", "switch/s"), Some(SortKey::Switches)),
        (format!(" {:>8} {:>8}", "vol/s", "invol/s"), None),
        (format!(" {:>8}", "RQwait%"), Some(SortKey::RunQueueWait)),
    ];
    if kernel {
        cells.push((format!(" {:>8}", "wakes/s"), Some(SortKey::Wakes)));
        cells.push((
            format!(
                " {:>8} {:>8}  {}",
                "polls/s", "blocked%", "off-CPU by cause"
            ),
            None,
        ));
    }
    let bold = Style::new().add_modifier(Modifier::BOLD);
    Line::from(
        cells
            .into_iter()
            .map(|(text, key)| {
                if key == Some(sort) {
                    Span::styled(text, bold.add_modifier(Modifier::REVERSED))
                } else {
                    Span::styled(text, bold)
                }
            })
            .collect::<Vec<_>>(),
    )
}

fn kernel_cells(k: &KernelThreadInterval, interval_ns: u64) -> String {
    format!(
        " {:>8.0} {:>8.0} {:>8.1}  {}",
        k.wakes_per_sec,
        k.poll_calls_per_sec,
        k.blocked_percent,
        off_cpu_split(&k.off_cpu, interval_ns)
    )
}

fn thread_row(t: &ThreadInterval, kernel: bool, interval_ns: u64) -> String {
    let mut row = format!(
        "{:>8} {} {:>6.1} {:>9} {:>8} {:>8} {:>8}",
        t.tid,
        fit(&t.name, NAME_WIDTH),
        t.cpu_percent,
        opt(t.switches_per_sec, 0),
        opt(t.voluntary_switches_per_sec, 0),
        opt(t.involuntary_switches_per_sec, 0),
        opt(t.run_queue_wait_percent, 1)
    );
    if kernel {
        match &t.kernel {
            Some(k) => row.push_str(&kernel_cells(k, interval_ns)),
            None => row.push_str(&format!(" {:>8} {:>8} {:>8}  -", "-", "-", "-")),
        }
    }
    row
}

fn header_lines(v: &View) -> [Line<'static>; HEADER_LINES] {
    let title = Line::from(vec![
        Span::styled("wakemeter top", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  process {} ({})  watching {}  refresh {} s",
            v.pid,
            safe(v.name),
            clock(v.watching),
            trim_float(v.refresh.as_secs_f64())
        )),
    ]);
    let process = match v.interval {
        Some(i) => Line::raw(format!(
            "CPU {:.1}%  RSS {:.1} MiB ({:+} KiB)  threads {} ({} exited)  sampler {:.3}% CPU  over {:.1} s",
            i.process.cpu_percent,
            i.process.rss_bytes as f64 / (1u64 << 20) as f64,
            i.process.rss_change_bytes / 1024,
            i.process.thread_count,
            i.threads_exited,
            i.sampler_cpu_percent,
            i.duration_secs()
        )),
        None => Line::raw("measuring: the first numbers come after two samples"),
    };
    let third = match (v.notice, v.kernel) {
        (Some(n), _) => Line::styled(
            safe(n).into_owned(),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ),
        (None, Kernel::Attached) => Line::raw("kernel view: eBPF attached"),
        (None, Kernel::Missing(why)) => Line::raw(format!(
            "kernel view: none, /proc only (eBPF not attached: {})",
            safe(why)
        )),
    };
    [title, process, third]
}

/// `1` for 1.0, `0.5` for 0.5.
fn trim_float(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn warning_line(w: &wakemeter::SampleWarning) -> String {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = print::warnings(&mut out, std::slice::from_ref(w));
    String::from_utf8_lossy(&out).trim().to_string()
}

/// The findings section in `lines` lines of `width` cells: every summary
/// and advice wrapped, never cut; when they do not all fit, the advice is
/// left out, and then the findings that do not fit whole are counted
/// ("… and 3 more").
fn finding_lines(v: &View, lines: usize, width: u16) -> Vec<Line<'static>> {
    let mut out = Vec::with_capacity(lines);
    if lines == 0 {
        return out;
    }
    // The blank line before goes first when there is room for more.
    let mut lines = lines;
    if lines >= 2 {
        out.push(Line::raw(""));
        lines -= 1;
    }
    let n = v.findings.len();
    let title = if n == 0 {
        "findings: none, nothing wastes CPU or wakeups here".to_string()
    } else {
        format!("findings ({n}):")
    };
    out.push(Line::styled(
        title,
        Style::new().add_modifier(Modifier::BOLD),
    ));
    lines -= 1;
    let texts = finding_texts(v, width);
    // Advice only when every finding gets its lines and its advice.
    let with_advice = lines >= texts.iter().map(|(s, a)| s.len() + a.len()).sum::<usize>();
    for (k, (f, (summary, advice))) in v.findings.iter().zip(&texts).enumerate() {
        let left = n - k;
        let wants = summary.len() + if with_advice { advice.len() } else { 0 };
        // The last finding may use the last line; others leave one for
        // the count of those that do not fit.
        let room = if left > 1 {
            lines.saturating_sub(1)
        } else {
            lines
        };
        if wants > room {
            if lines > 0 {
                out.push(Line::raw(format!("  … and {left} more")));
            }
            break;
        }
        let style = match f.severity {
            wakemeter::Severity::Critical => Style::new().fg(Color::Red),
            wakemeter::Severity::Warning => Style::new().fg(Color::Yellow),
            _ => Style::new(),
        };
        out.extend(summary.iter().map(|l| Line::styled(l.clone(), style)));
        if with_advice {
            out.extend(advice.iter().map(|l| Line::raw(l.clone())));
        }
        lines -= wants;
    }
    out
}

fn footer(v: &View, drawn: Drawn) -> Line<'static> {
    let shown = if v.threads.is_empty() {
        "no threads".to_string()
    } else {
        format!(
            "threads {}-{} of {}",
            drawn.first + 1,
            drawn.first + drawn.rows.min(v.threads.len() - drawn.first),
            v.threads.len()
        )
    };
    if v.interactive {
        Line::from(vec![
            Span::styled(" q ", Style::new().add_modifier(Modifier::REVERSED)),
            Span::raw(" quit  "),
            Span::styled(" c s w r ", Style::new().add_modifier(Modifier::REVERSED)),
            Span::raw(format!(" sort (by {})  ", v.sort.label())),
            Span::styled(
                " ↑ ↓ PgUp PgDn ",
                Style::new().add_modifier(Modifier::REVERSED),
            ),
            Span::raw(format!(" scroll  {shown}")),
        ])
    } else {
        Line::raw(format!("{shown}, sorted by {}", v.sort.label()))
    }
}

/// Draws `v` into `area` of `buf`, the thread table starting at row
/// `scroll` (clamped so the last page is full); returns what it showed.
pub fn render(v: &View, scroll: usize, area: Rect, buf: &mut Buffer) -> Drawn {
    render_with(v, scroll, area, buf, (area.height as usize / 3).max(4))
}

fn render_with(
    v: &View,
    scroll: usize,
    area: Rect,
    buf: &mut Buffer,
    findings_cap: usize,
) -> Drawn {
    let height = area.height as usize;
    let width = area.width;
    let p = plan(v, height, width, findings_cap);
    let first = scroll.min(v.threads.len().saturating_sub(p.thread_rows));
    let drawn = Drawn {
        first,
        rows: p.thread_rows,
    };
    let mut lines: Vec<Line> = Vec::with_capacity(height);
    lines.extend(header_lines(v));
    let kernel = v.has_kernel_columns();
    let interval_ns = v.interval.map_or(0, |i| i.duration_ns);
    lines.push(table_header(v.sort, kernel));
    // Only the rows that fit are formatted.
    for t in v.threads.iter().skip(first).take(p.thread_rows) {
        lines.push(Line::raw(thread_row(t, kernel, interval_ns)));
    }
    lines.extend(std::iter::repeat_n(
        Line::raw(""),
        p.thread_rows - v.threads.len().saturating_sub(first).min(p.thread_rows),
    ));
    if let Some(i) = v.interval {
        for (lines_for, header, rows) in [
            (
                p.loops,
                print::LOOP_HEADER,
                i.loops.iter().map(print::loop_row).collect::<Vec<_>>(),
            ),
            (
                p.sleeps,
                print::SLEEP_HEADER,
                i.sleeps.iter().map(print::sleep_row).collect(),
            ),
        ] {
            if lines_for >= 2 {
                lines.push(Line::raw(""));
                lines.push(Line::styled(
                    header,
                    Style::new().add_modifier(Modifier::BOLD),
                ));
                lines.extend(rows.into_iter().take(lines_for - 2).map(Line::raw));
            } else if lines_for == 1 {
                lines.push(Line::raw(""));
            }
        }
    }
    for w in v.warnings.iter().take(p.warnings) {
        lines.push(Line::styled(
            warning_line(w),
            Style::new().fg(Color::Yellow),
        ));
    }
    lines.extend(finding_lines(v, p.findings, width));
    lines.push(footer(v, drawn));
    for (y, line) in lines.iter().take(height).enumerate() {
        buf.set_line(area.x, area.y + y as u16, line, width);
    }
    drawn
}

/// The screen as plain text `width` columns wide, the thread table cut to
/// `max_threads` rows and every finding in full (for stdout that is not a
/// terminal); lines without trailing spaces.
pub fn plain(v: &View, width: u16, max_threads: usize) -> String {
    let probes = v.interval.map_or(0, |i| {
        probe_lines(i.loops.len()) + probe_lines(i.sleeps.len())
    });
    let height = HEADER_LINES
        + 2
        + v.threads.len().clamp(1, max_threads.max(1))
        + probes
        + v.warnings.len().min(MAX_WARNINGS)
        + findings_wanted(v, width);
    let height = u16::try_from(height).unwrap_or(u16::MAX);
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    render_with(v, 0, area, &mut buf, usize::MAX);
    text_of(&buf)
}

/// The buffer's symbols, one line per row, trailing spaces removed.
pub fn text_of(buf: &Buffer) -> String {
    let area = buf.area;
    let mut out = String::new();
    for y in 0..area.height {
        let mut line = String::new();
        let mut x = 0;
        while x < area.width {
            let symbol = buf[(area.x + x, area.y + y)].symbol();
            line.push_str(symbol);
            // A wide character covers the cells after it.
            x += u16::try_from(symbol.width().max(1)).unwrap_or(1);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
