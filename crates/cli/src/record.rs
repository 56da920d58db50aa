//! `wakemeter record` and `wakemeter diff`: a control and a variant, side
//! by side.
//!
//! A recording is NDJSON: the [`RecordingHeader`] on the first line, then
//! one [`IntervalSummary`] per sampling interval. It is written to a
//! `.partial` file beside the output and renamed at the end, so a failed
//! or interrupted recording never leaves a file that looks complete.

use std::error::Error;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wakemeter::compare::{
    self, Comparison, DEFAULT_MAX_GROUPS, IntervalSummary, RECORDING_SCHEMA_VERSION, RecordLine,
    RecordingHeader, Run, Spread, Verdict,
};
use wakemeter::{SampleWait, SamplerBuilder, Target};

use crate::target::{self, Liveness};
use crate::{kernel, print};

/// What `record` was asked for.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub pid: u32,
    pub seconds: u64,
    pub interval_secs: f64,
    pub output: PathBuf,
    pub kernel: crate::kernel::Choice,
}

/// The `.partial` file beside `output`.
fn partial(output: &Path) -> PathBuf {
    let mut name = output
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".partial");
    output.with_file_name(name)
}

/// Removes the partial file unless disarmed.
struct Cleanup(Option<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

pub fn record(o: &RecordOptions) -> Result<ExitCode, Box<dyn Error>> {
    if !(1..=86_400).contains(&o.seconds) {
        return Err("--seconds must be between 1 and 86400".into());
    }
    if !(0.01..=60.0).contains(&o.interval_secs) {
        return Err("--interval must be between 0.01 and 60 seconds".into());
    }
    let target = target::resolve(o.pid)?;
    let pid = target.pid;
    let tmp = partial(&o.output);
    let file = File::create(&tmp).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    let mut cleanup = Cleanup(Some(tmp.clone()));
    let mut out = BufWriter::new(file);
    let mut builder = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_interval(Duration::from_secs_f64(o.interval_secs))
        .with_switch_split_every(1);
    match kernel::attach(Target::Pid(pid), o.kernel) {
        Ok(src) => builder = builder.with_kernel_source(src),
        Err(why) => print::note(&format!("eBPF: not attached ({why}); /proc sampling only")),
    }
    let sampler = builder.build()?;
    let start_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let header = RecordLine::Header(RecordingHeader::of(&sampler, start_unix));
    writeln!(out, "{}", print::json(&header)?)?;
    let guard = sampler.start()?;
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let (mut first, mut last, mut written) = (None, None, 0u64);
    let exited = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break false;
        }
        match sampler.wait_for_sample(last, left.min(Duration::from_secs(1))) {
            SampleWait::Stored { seq } => {
                if let Some(from) = last
                    && let Some(i) = sampler.interval_between(from, seq)
                {
                    let line = sampler.account(|| {
                        print::json(&RecordLine::Interval(IntervalSummary::of(
                            &i,
                            DEFAULT_MAX_GROUPS,
                        )))
                    })?;
                    writeln!(out, "{line}")?;
                    written += 1;
                }
                first.get_or_insert(seq);
                last = Some(seq);
            }
            SampleWait::TimedOut | SampleWait::Stopped => {}
            _ => {}
        }
        if target::liveness(pid) != Liveness::Alive || !sampler.is_running() {
            break true;
        }
    };
    drop(guard);
    if written == 0 {
        return Err(format!(
            "nothing recorded: process {pid} ({}) {} before two samples were taken; {} not written",
            target.name,
            if exited { "exited" } else { "was not sampled" },
            o.output.display()
        )
        .into());
    }
    out.flush()?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, &o.output)
        .map_err(|e| format!("cannot write {}: {e}", o.output.display()))?;
    cleanup.0 = None;
    print::note(&format!(
        "wakemeter: recorded {written} intervals of process {pid} ({}) to {}{}",
        target.name,
        o.output.display(),
        if exited {
            " (the process exited before --seconds)"
        } else {
            ""
        }
    ));
    Ok(ExitCode::SUCCESS)
}

/// Reads one recording, or says precisely what is wrong with it.
pub fn read_run(path: &Path) -> Result<Run, String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, first)) = lines.next() else {
        return Err(format!("{name}: empty; not a wakemeter recording"));
    };
    let v: serde_json::Value = serde_json::from_str(first)
        .map_err(|e| format!("{name}:1: not a wakemeter recording (not JSON: {e})"))?;
    if v.get("record").and_then(|r| r.as_str()) != Some("header") {
        return Err(format!(
            "{name}:1: not a wakemeter recording (the first line is not a header)"
        ));
    }
    let version = v.get("schema_version").and_then(|s| s.as_u64());
    if version != Some(u64::from(RECORDING_SCHEMA_VERSION)) {
        return Err(format!(
            "{name}: recording schema version {}; this wakemeter reads version {RECORDING_SCHEMA_VERSION} \
             (record it again with this version)",
            version.map_or_else(|| "missing".to_string(), |v| v.to_string())
        ));
    }
    let header = match serde_json::from_value::<RecordLine>(v) {
        Ok(RecordLine::Header(h)) => h,
        Ok(_) => return Err(format!("{name}:1: not a header")),
        Err(e) => return Err(format!("{name}:1: malformed header: {e}")),
    };
    let mut intervals = Vec::new();
    for (n, line) in lines {
        match serde_json::from_str::<RecordLine>(line) {
            Ok(RecordLine::Interval(i)) => intervals.push(i),
            Ok(_) => return Err(format!("{name}:{}: a second header", n + 1)),
            Err(e) => return Err(format!("{name}:{}: malformed interval: {e}", n + 1)),
        }
    }
    if intervals.is_empty() {
        return Err(format!("{name}: no intervals recorded"));
    }
    Ok(Run::new(header, intervals))
}

pub fn diff(
    control: &[PathBuf],
    variant: &[PathBuf],
    json: bool,
) -> Result<ExitCode, Box<dyn Error>> {
    let (control, variant) = match (control, variant) {
        ([c, v], []) => (vec![c.clone()], vec![v.clone()]),
        (c, v) if !c.is_empty() && !v.is_empty() => (c.to_vec(), v.to_vec()),
        _ => {
            return Err(
                "give two recordings (CONTROL VARIANT), or control runs, --, variant runs \
                        (a1 a2 a3 -- b1 b2 b3)"
                    .into(),
            );
        }
    };
    let read = |paths: &[PathBuf]| -> Result<Vec<Run>, String> {
        paths.iter().map(|p| read_run(p)).collect()
    };
    let (c, v) = (read(&control)?, read(&variant)?);
    let cmp = compare::compare(&c, &v);
    let mut out = io::stdout().lock();
    if json {
        writeln!(out, "{}", print::json(&cmp)?)?;
    } else {
        describe(&mut out, "control", &control, &c)?;
        describe(&mut out, "variant", &variant, &v)?;
        table(&mut out, &cmp)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn describe(out: &mut impl Write, side: &str, paths: &[PathBuf], runs: &[Run]) -> io::Result<()> {
    for (p, r) in paths.iter().zip(runs) {
        let secs: f64 = r.intervals.iter().map(|i| i.duration_ns as f64 / 1e9).sum();
        writeln!(
            out,
            "{side}: {} (process {} \"{}\", {} intervals, {secs:.0} s)",
            print::safe(&p.display().to_string()),
            r.header.target.pid,
            print::safe(&r.header.target.name),
            r.intervals.len()
        )?;
    }
    Ok(())
}

/// A value in the unit a person reads: MiB, µs, %.
fn human(v: f64, unit: &str) -> String {
    match unit {
        "bytes" => format!("{:.1} MiB", v / (1u64 << 20) as f64),
        "ns" => format!("{:.1} µs", v / 1e3),
        "%" => format!("{v:.2}%"),
        "ratio" => format!("{v:.3}"),
        _ => format!("{v:.1}"),
    }
}

fn side(s: Option<Spread>, unit: &str) -> String {
    match s {
        None => "-".to_string(),
        Some(s) => format!(
            "{} [{}…{}]",
            human(s.mean, unit),
            human(s.low, unit),
            human(s.high, unit)
        ),
    }
}

fn table(out: &mut impl Write, c: &Comparison) -> io::Result<()> {
    writeln!(
        out,
        "\nspread in [ ]: {}\n",
        if c.control_runs > 1 || c.variant_runs > 1 {
            "lowest…highest run (one run: its intervals' 5th…95th percentile)"
        } else {
            "the intervals' 5th…95th percentile"
        }
    )?;
    writeln!(
        out,
        "{:<26} {:<27} {:>30} {:>30} {:>12} {:>8}  verdict",
        "subject", "metric", "control", "variant", "delta", "rel"
    )?;
    for r in &c.rows {
        let delta = r.delta.map_or_else(
            || "-".to_string(),
            |d| {
                let h = human(d, &r.unit);
                if d >= 0.0 { format!("+{h}") } else { h }
            },
        );
        let rel = r
            .relative
            .map_or_else(|| "-".to_string(), |x| format!("{:+.1}%", x * 100.0));
        let verdict = match r.verdict {
            Verdict::Changed => "CHANGED",
            Verdict::WithinNoise => "within noise",
            Verdict::OnlyInControl => "control only",
            Verdict::OnlyInVariant => "variant only",
            _ => "",
        };
        writeln!(
            out,
            "{:<26} {:<27} {:>30} {:>30} {:>12} {:>8}  {verdict}",
            print::safe(&r.subject),
            r.metric,
            side(r.control, &r.unit),
            side(r.variant, &r.unit),
            delta,
            rel
        )?;
    }
    Ok(())
}
