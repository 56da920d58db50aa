//! `wakemeter diff`: two recordings (or several runs per side) compared,
//! as a table or JSON.

use std::error::Error;
use std::fs::File;
use std::io::{self, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use wakemeter::compare::{
    Comparison, DiffRow, Experiment, IdentityRule, Side, Spread, Verdict, read_recording,
};

use crate::print;

/// Reads one recording into `exp` as a run of `side`, line by line. A
/// cut-off last line and a missing end record are warnings on stderr; a
/// malformed line is an error naming the file and line.
pub fn read_run(exp: &mut Experiment, side: Side, path: &Path) -> Result<(), String> {
    let name = print::safe(&path.to_string_lossy()).into_owned();
    let file = File::open(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    exp.begin_run(side);
    let summary = read_recording(BufReader::with_capacity(1 << 16, file), |line| {
        exp.push(side, line)
    })
    .map_err(|e| match e.line {
        0 => format!("{name}: {}", e.message),
        n => format!("{name}:{n}: {}", e.message),
    })?;
    if summary.intervals == 0 {
        return Err(format!("{name}: no intervals recorded"));
    }
    if let Some(n) = summary.truncated_line {
        print::note(&format!(
            "wakemeter: warning: {name}:{n}: the last line is cut off; compared the {} intervals before it",
            summary.intervals
        ));
    }
    if !summary.complete {
        print::note(&format!(
            "wakemeter: warning: {name}: partial recording (no end record: it was cut short); \
             compared the {} intervals it holds",
            summary.intervals
        ));
    }
    Ok(())
}

/// The files of each side, from `diff`'s arguments.
pub fn sides(
    control: &[PathBuf],
    variant: &[PathBuf],
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), String> {
    match (control, variant) {
        ([c, v], []) => Ok((vec![c.clone()], vec![v.clone()])),
        (c, v) if !c.is_empty() && !v.is_empty() => Ok((c.to_vec(), v.to_vec())),
        _ => Err(
            "give two recordings (CONTROL VARIANT), or control runs, --, variant runs \
                  (a1 a2 a3 -- b1 b2 b3)"
                .to_string(),
        ),
    }
}

pub fn diff(
    control: &[PathBuf],
    variant: &[PathBuf],
    json: bool,
    rule: IdentityRule,
) -> Result<ExitCode, Box<dyn Error>> {
    let (control, variant) = sides(control, variant)?;
    let mut exp = Experiment::new(rule);
    for p in &control {
        read_run(&mut exp, Side::Control, p)?;
    }
    for p in &variant {
        read_run(&mut exp, Side::Variant, p)?;
    }
    let cmp = exp.compare();
    let mut out = io::stdout().lock();
    if json {
        writeln!(out, "{}", print::json(&cmp)?)?;
    } else {
        for (side, files) in [("control", &control), ("variant", &variant)] {
            let list: Vec<String> = files
                .iter()
                .map(|p| print::safe(&p.to_string_lossy()).into_owned())
                .collect();
            writeln!(out, "{side}: {}", list.join(" "))?;
        }
        table(&mut out, &cmp)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// A value in the unit a person reads: MiB, µs, %. Never `inf` or `NaN`,
/// and never a number wider than a column: past a billion (a corrupt or
/// hostile recording can hold 1e308), in scientific notation.
fn human(v: f64, unit: &str) -> String {
    if !v.is_finite() {
        return "-".to_string();
    }
    // No "-0.0" for a value that rounds to nothing.
    let v = if v.abs() < 1e-9 { 0.0 } else { v };
    let (v, precision, suffix) = match unit {
        "bytes" => (v / (1u64 << 20) as f64, 1, " MiB"),
        "ns" => (v / 1e3, 1, " µs"),
        "µs" => (v, 1, " µs"),
        "s" => (v, 2, " s"),
        "%" => (v, 2, "%"),
        "ratio" => (v, 3, ""),
        _ => (v, 1, ""),
    };
    if v.abs() >= 1e9 {
        format!("{v:.3e}{suffix}")
    } else {
        format!("{v:.precision$}{suffix}")
    }
}

/// The verdict shown for a row: only where both sides have a value to
/// compare (a row with one side is that side's only; with none, "-").
fn shown_verdict(r: &DiffRow) -> &'static str {
    let has = |s: Option<Spread>| s.is_some_and(|s| s.mean.is_finite());
    match (has(r.control), has(r.variant)) {
        (true, true) => verdict(r.verdict),
        (true, false) | (false, true) => match r.verdict {
            Verdict::OnlyInControl | Verdict::OnlyInVariant => verdict(r.verdict),
            _ => "not enough data",
        },
        (false, false) => "-",
    }
}

fn signed(v: f64, unit: &str) -> String {
    let h = human(v, unit);
    if v >= 0.0 && v.is_finite() {
        format!("+{h}")
    } else {
        h
    }
}

fn side(s: Option<Spread>, unit: &str) -> String {
    match s {
        None => "-".to_string(),
        Some(s) if s.low == s.high => human(s.mean, unit),
        Some(s) => format!(
            "{} [{}…{}]",
            human(s.mean, unit),
            human(s.low, unit),
            human(s.high, unit)
        ),
    }
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Changed => "CHANGED",
        Verdict::WithinNoise => "within noise",
        Verdict::NoChange => "no change",
        Verdict::NotEnoughData => "not enough data",
        Verdict::OnlyInControl => "control only",
        Verdict::OnlyInVariant => "variant only",
        _ => "",
    }
}

/// The names people read for the totals.
fn total_name(metric: &str) -> &str {
    match metric {
        "cpu_percent" => "CPU",
        "cpu_seconds" => "CPU time",
        "cpu_us_per_request" => "CPU per request",
        "rss_bytes" => "memory (RSS)",
        "switches_per_sec" => "context switches/s",
        "wakes_per_sec" => "wakes/s (eBPF)",
        "requests_per_sec" => "requests/s",
        "latency_p50_ns" => "latency p50",
        "latency_p95_ns" => "latency p95",
        "latency_p99_ns" => "latency p99",
        m => m,
    }
}

fn change(r: &DiffRow) -> String {
    let Some(d) = r.delta else {
        return "-".to_string();
    };
    let mut s = signed(d, &r.unit);
    if let Some(x) = r.relative.filter(|x| x.is_finite()) {
        s.push_str(&format!(" ({:+.1}%)", x * 100.0));
    }
    if let Some((lo, hi)) = r.delta_interval {
        s.push_str(&format!(
            " [{}…{}]",
            signed(lo, &r.unit),
            signed(hi, &r.unit)
        ));
    }
    s
}

/// Prints a comparison: how it was tested, the totals, then the rows.
pub fn table(out: &mut impl Write, c: &Comparison) -> io::Result<()> {
    let sides = |s: &wakemeter::compare::SideInfo| {
        format!(
            "{} run{}, {} process section{}, {} intervals{}",
            s.runs,
            if s.runs == 1 { "" } else { "s" },
            s.processes,
            if s.processes == 1 { "" } else { "s" },
            s.intervals,
            if s.partial_runs > 0 {
                format!(", {} partial", s.partial_runs)
            } else {
                String::new()
            }
        )
    };
    writeln!(
        out,
        "control: {}; variant: {}",
        sides(&c.control),
        sides(&c.variant)
    )?;
    writeln!(
        out,
        "processes matched by {}; values are means, [ ] their 95% interval",
        if c.identity == "name" {
            "name"
        } else {
            "name and role (command line; the parent's first when it has the same name)"
        }
    )?;
    writeln!(out, "test (over {}): {}", c.tested_over, c.test)?;
    let left_out = c.control.values_left_out + c.variant.values_left_out;
    if left_out > 0 {
        writeln!(
            out,
            "note: more than {} series in a run: {left_out} values of thread groups, loops and \
             sleep sites past that were left out (totals and process rows are complete)",
            wakemeter::compare::MAX_SERIES_PER_RUN
        )?;
    }
    if c.tested_over == "intervals" {
        writeln!(
            out,
            "note: one run on a side: a verdict weighs the noise inside each recording, not the \
             drift between recordings (a busy machine); give several runs per side (or `ab --runs`) \
             to test over runs"
        )?;
    }
    writeln!(
        out,
        "\ntotals (every recorded process; load as the load tool printed it)"
    )?;
    writeln!(
        out,
        "  {:<22} {:>30} {:>30}  {:<40} verdict",
        "", "control", "variant", "change"
    )?;
    for r in &c.totals {
        writeln!(
            out,
            "  {:<22} {:>30} {:>30}  {:<40} {}",
            total_name(&r.metric),
            side(r.control, &r.unit),
            side(r.variant, &r.unit),
            change(r),
            shown_verdict(r)
        )?;
    }
    writeln!(out, "\nper process (largest CPU change first)")?;
    let mut current: Option<&str> = None;
    for r in &c.rows {
        let p = r.process.as_deref().unwrap_or("");
        if current != Some(p) {
            writeln!(out, "{}", print::safe(p))?;
            current = Some(p);
        }
        writeln!(
            out,
            "  {:<24} {:<27} {:>30} {:>30}  {:<40} {}",
            print::safe(&r.subject),
            r.metric,
            side(r.control, &r.unit),
            side(r.variant, &r.unit),
            change(r),
            shown_verdict(r)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_never_printed_as_inf_or_nan() {
        for v in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
            for unit in ["%", "bytes", "ns", "µs", "s", "1/s"] {
                assert_eq!(human(v, unit), "-");
            }
        }
        assert_eq!(human(-0.0, "bytes"), "0.0 MiB");
    }

    #[test]
    fn huge_values_stay_short_and_empty_rows_get_no_verdict() {
        let huge = human(f64::MAX, "count");
        assert!(huge.len() < 16, "{huge}");
        assert_eq!(human(1e308, "%"), "1.000e308%");
        assert_eq!(human(123.456, "count"), "123.5");
        let row = |control: Option<f64>, variant: Option<f64>, v: &str| -> DiffRow {
            let spread = |m: Option<f64>| {
                m.map(|m| serde_json::json!({"mean": m, "low": m, "high": m, "runs": 1, "intervals": 1}))
            };
            serde_json::from_value(serde_json::json!({
                "process": null, "subject": "s", "metric": "cpu_percent", "unit": "%",
                "control": spread(control), "variant": spread(variant),
                "delta": null, "relative": null, "delta_interval": null, "verdict": v
            }))
            .expect("a row")
        };
        assert_eq!(shown_verdict(&row(None, None, "changed")), "-");
        let mut nan = row(Some(1.0), Some(1.0), "within_noise");
        if let Some(c) = nan.control.as_mut() {
            c.mean = f64::NAN;
        }
        assert_eq!(shown_verdict(&nan), "not enough data");
        assert_eq!(
            shown_verdict(&row(Some(1.0), None, "only_in_control")),
            "control only"
        );
        assert_eq!(
            shown_verdict(&row(Some(1.0), Some(2.0), "changed")),
            "CHANGED"
        );
    }
}
