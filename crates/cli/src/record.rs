//! `wakemeter record` and `wakemeter diff`: a control and a variant, side
//! by side.
//!
//! A recording is NDJSON: the [`RecordingHeader`] on the first line, then
//! one [`IntervalSummary`] per sampling interval. Recording several
//! processes (`--pid` repeated, `--name`, `--cgroup`) writes one such
//! section per process into the one file, one after the other: each
//! process keeps its own versioned header (its identity, its sampler), and
//! `diff` compares processes of the same name. The file is written to a
//! `.partial` file beside the output (each process's section first to a
//! `.partial-PID` file of its own, joined at the end) and renamed at the
//! end, so a failed or interrupted recording never leaves a file that
//! looks complete.

use std::collections::BTreeMap;
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
use wakemeter::{Sampler, SamplerBuilder, SamplingGuard, Target};

use crate::multi::Selection;
use crate::target::{self, Liveness, Resolved};
use crate::{kernel, print};

/// What `record` was asked for.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// The processes: `--pid` (repeatable), `--name`, `--cgroup`.
    pub selection: Selection,
    pub seconds: u64,
    pub interval_secs: f64,
    pub output: PathBuf,
    pub kernel: crate::kernel::Choice,
    /// Exit 0 even when some selected processes could not be recorded
    /// (`--allow-partial`).
    pub allow_partial: bool,
}

/// `output` with `suffix` appended to its file name.
fn beside(output: &Path, suffix: &str) -> PathBuf {
    let mut name = output
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
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

/// The recording of one process: its sampler and its section, written to
/// a file of its own until the end.
struct Section {
    target: Resolved,
    sampler: Sampler,
    guard: Option<SamplingGuard>,
    out: BufWriter<File>,
    file: Cleanup,
    /// The newest snapshot written up to.
    last: Option<u64>,
    written: u64,
    exited: bool,
}

impl Section {
    fn start(pid: u32, o: &RecordOptions) -> Result<Section, Box<dyn Error>> {
        let target = target::resolve(pid)?;
        let path = beside(&o.output, &format!(".partial-{pid}"));
        let file =
            File::create(&path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let cleanup = Cleanup(Some(path));
        let mut out = BufWriter::new(file);
        let mut builder = SamplerBuilder::new()
            .with_target(Target::Pid(pid))
            .with_interval(Duration::from_secs_f64(o.interval_secs))
            .with_switch_split_every(1);
        match kernel::attach(Target::Pid(pid), o.kernel) {
            Ok(src) => builder = builder.with_kernel_source(src),
            Err(why) => print::note(&format!(
                "eBPF: not attached to process {pid} ({why}); /proc sampling only"
            )),
        }
        let sampler = builder.build()?;
        let start_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let header = RecordLine::Header(RecordingHeader::of(&sampler, start_unix));
        writeln!(out, "{}", print::json(&header)?)?;
        let guard = sampler.start()?;
        Ok(Section {
            target,
            sampler,
            guard: Some(guard),
            out,
            file: cleanup,
            last: None,
            written: 0,
            exited: false,
        })
    }

    /// Writes one line per sampling interval stored since the last call.
    fn write_new(&mut self) -> Result<(), Box<dyn Error>> {
        let Some(newest) = self.sampler.stats().total_samples.checked_sub(1) else {
            return Ok(());
        };
        let Some(mut from) = self.last else {
            self.last = Some(newest);
            return Ok(());
        };
        while from < newest {
            let to = from + 1;
            if let Some(i) = self.sampler.interval_between(from, to) {
                let line = self.sampler.account(|| {
                    print::json(&RecordLine::Interval(IntervalSummary::of(
                        &i,
                        DEFAULT_MAX_GROUPS,
                    )))
                })?;
                writeln!(self.out, "{line}")?;
                self.written += 1;
            }
            from = to;
        }
        self.last = Some(newest);
        Ok(())
    }

    /// Stops sampling, after writing what was stored.
    fn stop(&mut self) -> Result<(), Box<dyn Error>> {
        drop(self.guard.take());
        self.write_new()
    }

    fn label(&self) -> String {
        format!(
            "process {} ({})",
            self.target.pid,
            print::safe(&self.target.name)
        )
    }
}

pub fn record(o: &RecordOptions) -> Result<ExitCode, Box<dyn Error>> {
    if !(1..=86_400).contains(&o.seconds) {
        return Err("--seconds must be between 1 and 86400".into());
    }
    if !(0.01..=60.0).contains(&o.interval_secs) {
        return Err("--interval must be between 0.01 and 60 seconds".into());
    }
    let sel = &o.selection;
    // Every bad input is found here, before any file is created.
    sel.check()?;
    let follows = sel.name.is_some() || sel.cgroup.is_some();
    let tmp = beside(&o.output, ".partial");
    let file = File::create(&tmp).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    let mut cleanup = Cleanup(Some(tmp.clone()));
    let interval = Duration::from_secs_f64(o.interval_secs);
    // Looks at the samplers twice an interval (within 5 ms to 200 ms).
    let step = (interval / 2).clamp(Duration::from_millis(5), Duration::from_millis(200));
    let resolve_every = interval.max(Duration::from_secs(1));
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    // Sections by PID while recording; those ended, in the order they ended.
    let mut live: BTreeMap<u32, Section> = BTreeMap::new();
    let mut done: Vec<Section> = Vec::new();
    let mut last_dropped: Vec<u32> = Vec::new();
    let mut left_out = crate::multi::LeftOut::default();
    let mut next_resolve = Instant::now();
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if now >= next_resolve {
            next_resolve = now + resolve_every;
            let kept = sel.resolve_capped("recording", &mut last_dropped)?;
            left_out.begin();
            for pid in kept {
                if live.contains_key(&pid) {
                    continue;
                }
                match Section::start(pid, o) {
                    Ok(s) => {
                        if follows || sel.pids.len() > 1 {
                            print::note(&format!("wakemeter: recording {}", s.label()));
                        }
                        left_out.started(pid);
                        live.insert(pid, s);
                    }
                    // Left out, or exited between the listing and the start.
                    Err(e) => left_out.failed(pid, e.to_string()),
                }
            }
            left_out.end("recorded");
        }
        let mut ended = Vec::new();
        for (pid, s) in &mut live {
            s.write_new()?;
            if target::liveness(*pid) != Liveness::Alive || !s.sampler.is_running() {
                ended.push(*pid);
            }
        }
        for pid in ended {
            if let Some(mut s) = live.remove(&pid) {
                s.stop()?;
                s.exited = true;
                if follows || sel.pids.len() > 1 {
                    print::note(&format!("wakemeter: {} exited", s.label()));
                }
                done.push(s);
            }
        }
        // Only a name or a cgroup can come back; fixed PIDs that are all
        // gone (or never started) end the recording.
        if live.is_empty() && !follows {
            break;
        }
        std::thread::sleep(step.min(deadline.saturating_duration_since(Instant::now())));
    }
    for (_, mut s) in std::mem::take(&mut live) {
        s.stop()?;
        done.push(s);
    }
    // Sections with something measured, in PID order; the others are
    // not written (a header alone is not a recording).
    done.sort_by_key(|s| (s.target.pid, s.sampler.target_identity().start_time_unix_ns));
    let (mut kept, empty): (Vec<Section>, Vec<Section>) =
        done.into_iter().partition(|s| s.written > 0);
    if kept.is_empty() {
        let who = match &empty[..] {
            [one] => format!(
                "process {} ({}) {}",
                one.target.pid,
                print::safe(&one.target.name),
                if one.exited {
                    "exited"
                } else {
                    "was not sampled"
                }
            ),
            _ => format!("{} gave no two samples in a row", sel.describe()),
        };
        return Err(format!(
            "nothing recorded: {who} before two samples were taken; {} not written",
            o.output.display()
        )
        .into());
    }
    let mut out = BufWriter::new(file);
    for s in &mut kept {
        s.out.flush()?;
        let path = s.file.0.clone().ok_or("a section without its file")?;
        let mut section =
            File::open(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        io::copy(&mut section, &mut out)?;
    }
    out.flush()?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, &o.output)
        .map_err(|e| format!("cannot write {}: {e}", o.output.display()))?;
    cleanup.0 = None;
    let written: u64 = kept.iter().map(|s| s.written).sum();
    let exited = kept.iter().any(|s| s.exited);
    let what = match &kept[..] {
        [one] => one.label(),
        many => format!(
            "{} processes ({})",
            many.len(),
            many.iter()
                .map(|s| format!("{} {}", s.target.pid, print::safe(&s.target.name)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    print::note(&format!(
        "wakemeter: recorded {written} intervals of {what} to {}{}",
        o.output.display(),
        if exited && kept.len() == 1 {
            " (the process exited before --seconds)"
        } else {
            ""
        }
    ));
    let missing = left_out.never_started();
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(u32::to_string).collect();
        print::note(&format!(
            "wakemeter: {}: {} selected process{} never recorded: {}",
            if o.allow_partial { "warning" } else { "error" },
            missing.len(),
            if missing.len() == 1 {
                " was"
            } else {
                "es were"
            },
            list.join(", ")
        ));
        if !o.allow_partial {
            print::note("wakemeter: the recording is incomplete (--allow-partial accepts that)");
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads one recording (one run per process section), or says precisely
/// what is wrong with it.
pub fn read_runs(path: &Path) -> Result<Vec<Run>, String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .peekable();
    if lines.peek().is_none() {
        return Err(format!("{name}: empty; not a wakemeter recording"));
    }
    let mut runs = Vec::new();
    while let Some((n, first)) = lines.next() {
        let at = n + 1;
        let v: serde_json::Value = serde_json::from_str(first)
            .map_err(|e| format!("{name}:{at}: not a wakemeter recording (not JSON: {e})"))?;
        if v.get("record").and_then(|r| r.as_str()) != Some("header") {
            return Err(if at == 1 {
                format!("{name}:1: not a wakemeter recording (the first line is not a header)")
            } else {
                format!("{name}:{at}: malformed interval")
            });
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
            Ok(_) => return Err(format!("{name}:{at}: not a header")),
            Err(e) => return Err(format!("{name}:{at}: malformed header: {e}")),
        };
        let mut intervals = Vec::new();
        // The section's intervals: every line up to the next header.
        while let Some((n, line)) = lines.next_if(|(_, l)| !is_header(l)) {
            match serde_json::from_str::<RecordLine>(line) {
                Ok(RecordLine::Interval(i)) => intervals.push(i),
                Ok(_) => return Err(format!("{name}:{}: a second header", n + 1)),
                Err(e) => return Err(format!("{name}:{}: malformed interval: {e}", n + 1)),
            }
        }
        if intervals.is_empty() {
            return Err(format!(
                "{name}:{at}: no intervals recorded for process {} ({})",
                header.target.pid,
                print::safe(&header.target.name)
            ));
        }
        runs.push(Run::new(header, intervals));
    }
    Ok(runs)
}

/// Whether a line is a section's header (`"record":"header"`).
fn is_header(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .is_ok_and(|v| v.get("record").and_then(|r| r.as_str()) == Some("header"))
}

/// Each side's runs by process name, names in order of first appearance.
fn by_name<'a>(runs: &'a [(PathBuf, Run)], names: &mut Vec<String>) -> Vec<(&'a str, Run)> {
    runs.iter()
        .map(|(_, r)| {
            let n = r.header.target.name.as_str();
            if !names.iter().any(|x| x == n) {
                names.push(n.to_string());
            }
            (n, r.clone())
        })
        .collect()
}

/// The comparison: as one process when each side holds one process name
/// (whatever the names), else per process name, each row's subject
/// prefixed with it (`envoy: thread worker-{n}`). A name on one side only
/// gives rows that say so.
fn compare_runs(control: &[(PathBuf, Run)], variant: &[(PathBuf, Run)]) -> Comparison {
    let mut names = Vec::new();
    let c = by_name(control, &mut names);
    let v = by_name(variant, &mut names);
    let distinct = |side: &[(&str, Run)]| {
        let mut n: Vec<&str> = side.iter().map(|(n, _)| *n).collect();
        n.sort_unstable();
        n.dedup();
        n.len()
    };
    let runs = |side: &[(&str, Run)], name: Option<&str>| -> Vec<Run> {
        side.iter()
            .filter(|(n, _)| name.is_none_or(|x| x == *n))
            .map(|(_, r)| r.clone())
            .collect()
    };
    if distinct(&c) <= 1 && distinct(&v) <= 1 {
        return compare::compare(&runs(&c, None), &runs(&v, None));
    }
    let mut all: Option<Comparison> = None;
    for name in &names {
        let (cr, vr) = (runs(&c, Some(name)), runs(&v, Some(name)));
        let mut one = compare::compare(&cr, &vr);
        for row in &mut one.rows {
            row.subject = format!("{name}: {}", row.subject);
        }
        match &mut all {
            None => all = Some(one),
            Some(a) => {
                // Runs per process name: the most of any name, which is
                // what the spread legend needs to know.
                a.control_runs = a.control_runs.max(one.control_runs);
                a.variant_runs = a.variant_runs.max(one.variant_runs);
                a.rows.append(&mut one.rows);
            }
        }
    }
    all.unwrap_or_else(|| compare::compare(&[], &[]))
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
    let read = |paths: &[PathBuf]| -> Result<Vec<(PathBuf, Run)>, String> {
        let mut all = Vec::new();
        for p in paths {
            all.extend(read_runs(p)?.into_iter().map(|r| (p.clone(), r)));
        }
        Ok(all)
    };
    let (c, v) = (read(&control)?, read(&variant)?);
    let cmp = compare_runs(&c, &v);
    let mut out = io::stdout().lock();
    if json {
        writeln!(out, "{}", print::json(&cmp)?)?;
    } else {
        describe(&mut out, "control", &c)?;
        describe(&mut out, "variant", &v)?;
        table(&mut out, &cmp)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn describe(out: &mut impl Write, side: &str, runs: &[(PathBuf, Run)]) -> io::Result<()> {
    for (p, r) in runs {
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
