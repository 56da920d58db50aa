//! `wakemeter record` and `wakemeter diff`: a control and a variant, side
//! by side.
//!
//! A recording is NDJSON: a [`RecordingHeader`] per process (written with
//! its first interval), one [`IntervalSummary`] per sampling interval of
//! each process, tagged with its PID (so that the processes' lines can
//! interleave as they are taken), and an end record ([`RecordingEnd`]).
//! Each line is written whole, with one `write`, when its interval is
//! taken: a recording killed mid-way holds every interval taken before,
//! and `diff` reads it, saying that it is partial. SIGINT and SIGTERM end
//! a recording cleanly, with its end record.
//!
//! Where it is written ([`Output`]): a regular file (or a name that does
//! not exist yet) is written to a temporary file created new beside it
//! (create-new, no symlink followed) and renamed over it at the end, so a
//! file of that name is either the previous one or a recording with
//! everything taken; a device, a FIFO or standard output (`/dev/stdout`)
//! is written to directly; anything else is refused.

use std::collections::BTreeMap;
use std::error::Error;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wakemeter::compare::{
    Comparison, DEFAULT_MAX_GROUPS, DiffRow, Experiment, IdentityRule, IntervalSummary, LoadRecord,
    RecordLine, RecordingEnd, RecordingHeader, Side, Spread, Verdict, read_recording,
};
use wakemeter::{Sampler, SamplerBuilder, SamplingGuard, Target};

use crate::selection::{LeftOut, Selection};
use crate::signals::stop_on_signals;
use crate::target::{self, Liveness, Resolved};
use crate::{kernel, print};

/// What `record` was asked for.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// The processes: `--pid` (repeatable), `--name`, `--cgroup`.
    pub selection: Selection,
    /// How long to record, counted from the moment every selected process
    /// is measured (after the eBPF attach).
    pub duration: Duration,
    pub interval: Duration,
    pub output: PathBuf,
    pub kernel: crate::kernel::Choice,
    /// `--perfetto FILE`: the recorded processes in one trace too.
    pub perfetto: crate::perfetto::PerfettoArgs,
    /// Exit 0 even when some selected processes could not be recorded
    /// (`--allow-partial`).
    pub allow_partial: bool,
}

/// Longest `record --seconds`: one day.
pub const MAX_RECORD: Duration = Duration::from_secs(86_400);

/// Where a recording goes.
pub enum Output {
    /// A regular file: written to `tmp` beside it, renamed at the end.
    Regular {
        tmp: PathBuf,
        target: PathBuf,
        file: File,
    },
    /// A device, FIFO or standard output: written to as it is.
    Direct { target: PathBuf, file: File },
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

/// Whether `path` names this process's standard output.
fn is_stdout(path: &Path) -> bool {
    matches!(
        path.to_str(),
        Some("/dev/stdout" | "/dev/fd/1" | "/proc/self/fd/1" | "-")
    )
}

impl Output {
    /// Opens `path` for a recording (see the module docs).
    ///
    /// # Errors
    /// One line for the user: what the path is and why it is refused, or
    /// why it cannot be created.
    pub fn open(path: &Path) -> Result<Output, String> {
        let shown = print::safe(&path.to_string_lossy()).into_owned();
        if is_stdout(path) {
            let fd = std::os::fd::AsFd::as_fd(&io::stdout())
                .try_clone_to_owned()
                .map_err(|e| format!("cannot write to standard output: {e}"))?;
            return Ok(Output::Direct {
                target: path.to_path_buf(),
                file: File::from(fd),
            });
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_file() => {}
            Ok(m) if m.file_type().is_symlink() => {
                // Only a link to a device or FIFO is written through; a
                // link to a file would be replaced by the rename.
                let to = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
                let t = to.file_type();
                if t.is_char_device() || t.is_block_device() || t.is_fifo() {
                    return Self::direct(path, &shown);
                }
                return Err(format!(
                    "{shown} is a symbolic link; give the file it points to \
                     (a recording replaces its output, and would replace the link)"
                ));
            }
            Ok(m) => {
                let t = m.file_type();
                if t.is_char_device() || t.is_block_device() || t.is_fifo() {
                    return Self::direct(path, &shown);
                }
                let what = if t.is_dir() {
                    "a directory"
                } else if t.is_socket() {
                    "a socket"
                } else {
                    "not a regular file"
                };
                return Err(format!(
                    "{shown} is {what}; give a file name (or a device, FIFO or /dev/stdout)"
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot write {shown}: {e}")),
        }
        let tmp = beside(path, &format!(".partial-{}", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", print::safe(&tmp.to_string_lossy())))?;
        Ok(Output::Regular {
            tmp,
            target: path.to_path_buf(),
            file,
        })
    }

    fn direct(path: &Path, shown: &str) -> Result<Output, String> {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| format!("cannot write {shown}: {e}"))?;
        Ok(Output::Direct {
            target: path.to_path_buf(),
            file,
        })
    }

    /// Writes one line with one `write` call (a line is never split
    /// between two writes, so a reader never sees half a record unless
    /// the disk filled up mid-line).
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        let mut buf = Vec::with_capacity(text.len() + 1);
        buf.extend_from_slice(text.as_bytes());
        buf.push(b'\n');
        let file = match self {
            Output::Regular { file, .. } | Output::Direct { file, .. } => file,
        };
        file.write_all(&buf)
    }

    /// The path the user gave.
    pub fn target(&self) -> &Path {
        match self {
            Output::Regular { target, .. } | Output::Direct { target, .. } => target,
        }
    }

    /// Makes the recording visible under its name: synced and renamed (a
    /// regular file), or flushed.
    ///
    /// # Errors
    /// When the sync or the rename fails.
    pub fn finish(self) -> Result<(), String> {
        match self {
            Output::Regular { tmp, target, file } => {
                file.sync_all()
                    .map_err(|e| format!("cannot write {}: {e}", target.display()))?;
                std::fs::rename(&tmp, &target)
                    .map_err(|e| format!("cannot write {}: {e}", target.display()))
            }
            Output::Direct { mut file, .. } => file.flush().map_err(|e| e.to_string()),
        }
    }

    /// Removes what was written, when it can be (a regular file).
    pub fn abandon(self) {
        if let Output::Regular { tmp, .. } = self {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// What a process does, to tell apart processes of one name: its command
/// line, after its parent's when the parent has the same name (an nginx
/// worker under its master, which names the configuration).
pub fn role(pid: u32) -> Option<String> {
    let cmdline = |pid: u32| -> Option<String> {
        let text = wakemeter_procfs::process::cmdline(pid).ok()?;
        // Bounded: a role is a name, not a document.
        Some(text.trim().chars().take(200).collect())
    };
    let comm = |pid: u32| {
        wakemeter_procfs::process::comm(wakemeter_procfs::process::Process::Pid(pid)).ok()
    };
    let own = cmdline(pid)?;
    let stat = wakemeter_procfs::process::stat(pid).ok()?;
    // Field 4, after the name in parentheses (which may hold spaces).
    let ppid = wakemeter_procfs::parse::stat_parent(&stat);
    match ppid {
        Some(pp) if pp > 1 && comm(pp).is_some() && comm(pp) == comm(pid) => {
            Some(format!("{} > {own}", cmdline(pp).unwrap_or_default()))
        }
        _ => Some(own),
    }
}

/// The recording of one process.
pub struct Section {
    pub target: Resolved,
    sampler: Sampler,
    guard: Option<SamplingGuard>,
    header: Option<RecordingHeader>,
    /// The newest snapshot written up to.
    last: Option<u64>,
    pub written: u64,
    pub exited: bool,
    /// Its part of the `--perfetto` trace.
    trace: Option<crate::perfetto::ProcessTrace>,
}

impl Section {
    /// Attaches to `pid` (eBPF when asked and allowed) and builds its
    /// sampler, without starting it.
    pub fn prepare(
        pid: u32,
        interval: Duration,
        choice: kernel::Choice,
        label: Option<String>,
    ) -> Result<Section, Box<dyn Error>> {
        let target = target::resolve(pid)?;
        let mut builder = SamplerBuilder::new()
            .with_target(Target::Pid(pid))
            .with_interval(interval)
            .with_switch_split_every(1);
        match kernel::attach(Target::Pid(pid), choice) {
            Ok(src) => builder = builder.with_kernel_source(src),
            Err(why) => print::note(&format!(
                "eBPF: not attached to process {pid} ({why}); /proc sampling only"
            )),
        }
        let sampler = builder.build()?;
        let header = RecordingHeader::of(&sampler, now_unix_ns()).with_role(role(pid), label);
        Ok(Section {
            target,
            sampler,
            guard: None,
            header: Some(header),
            last: None,
            written: 0,
            exited: false,
            trace: None,
        })
    }

    /// Starts sampling.
    pub fn start(&mut self) -> Result<(), Box<dyn Error>> {
        if let Some(h) = &mut self.header {
            h.start_unix_time_ns = now_unix_ns();
        }
        self.guard = Some(self.sampler.start()?);
        Ok(())
    }

    /// Writes one line per sampling interval stored since the last call
    /// (the header before the first).
    fn write_new(&mut self, out: &mut Output) -> Result<u64, Box<dyn Error>> {
        let Some(newest) = self.sampler.stats().total_samples.checked_sub(1) else {
            return Ok(0);
        };
        let Some(mut from) = self.last else {
            self.last = Some(newest);
            return Ok(0);
        };
        let mut n = 0;
        while from < newest {
            let to = from + 1;
            // The shared call: a `--perfetto` trace polled next takes
            // this interval rather than computing it again.
            if let Some(i) = self.sampler.interval_between_shared(from, to) {
                let line = self.sampler.account(|| {
                    print::json(&RecordLine::Interval(
                        IntervalSummary::of(&i, DEFAULT_MAX_GROUPS).for_pid(self.target.pid),
                    ))
                })?;
                if let Some(h) = self.header.take() {
                    out.line(&print::json(&RecordLine::Header(h))?)?;
                }
                out.line(&line)?;
                self.written += 1;
                n += 1;
            }
            from = to;
            self.last = Some(from);
        }
        Ok(n)
    }

    /// Stops sampling with one last sample now (so the window ends at the
    /// deadline or the load's end, not at the sample before), and writes
    /// what was stored.
    fn stop(&mut self, out: &mut Output) -> Result<u64, Box<dyn Error>> {
        if self.guard.take().is_some() && !self.exited {
            // A process that has just exited has nothing more to give.
            let _ = self.sampler.sample();
        }
        // The trace takes the last snapshots and ends its finding slices.
        drop(self.trace.take());
        self.write_new(out)
    }

    pub fn label(&self) -> String {
        format!(
            "process {} ({})",
            self.target.pid,
            print::safe(&self.target.name)
        )
    }
}

/// Attaches to every process of `pids`, saying on stderr how long each
/// took and in total, so a loaded machine never looks hung.
pub fn prepare_all(
    pids: impl IntoIterator<Item = u32>,
    interval: Duration,
    choice: kernel::Choice,
    label: impl Fn(u32) -> Option<String>,
    left_out: &mut LeftOut,
) -> Vec<Section> {
    left_out.begin();
    let all = Instant::now();
    let mut ready = Vec::new();
    let mut tried = 0;
    for pid in pids {
        tried += 1;
        let t = Instant::now();
        match Section::prepare(pid, interval, choice, label(pid)) {
            Ok(s) => {
                print::note(&format!(
                    "wakemeter: attached to {} in {:.1} s",
                    s.label(),
                    t.elapsed().as_secs_f64()
                ));
                left_out.started(pid);
                ready.push(s);
            }
            // Left out (e.g. out of descriptors), or exited between the
            // listing and the attach (then not named).
            Err(e) => left_out.failed(pid, e.to_string()),
        }
    }
    left_out.end("recorded");
    if tried == 0 {
        return ready;
    }
    print::note(&format!(
        "wakemeter: {} process{} ready in {:.1} s; measuring from now",
        ready.len(),
        if ready.len() == 1 { "" } else { "es" },
        all.elapsed().as_secs_f64()
    ));
    ready
}

/// Why a recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    Deadline,
    Interrupted,
    Exited,
    LoadDone,
}

impl EndReason {
    fn as_str(self) -> &'static str {
        match self {
            EndReason::Deadline => "deadline",
            EndReason::Interrupted => "interrupted",
            EndReason::Exited => "exited",
            EndReason::LoadDone => "load_done",
        }
    }
}

/// Processes being recorded into one output.
pub struct Recorder {
    pub out: Output,
    live: BTreeMap<u32, Section>,
    done: Vec<Section>,
    pub intervals: u64,
    /// The first write error; recording stops at it.
    write_error: Option<String>,
    /// `--perfetto`: every section's process is added to it.
    pub perfetto: Option<crate::perfetto::Trace>,
}

impl Recorder {
    /// Starts every prepared section at once.
    pub fn start(out: Output, sections: Vec<Section>) -> Recorder {
        Recorder::start_traced(out, sections, None)
    }

    /// As [`Recorder::start`], with every process also in a Perfetto trace.
    pub fn start_traced(
        out: Output,
        sections: Vec<Section>,
        perfetto: Option<crate::perfetto::Trace>,
    ) -> Recorder {
        let mut r = Recorder {
            out,
            live: BTreeMap::new(),
            done: Vec::new(),
            intervals: 0,
            write_error: None,
            perfetto,
        };
        for s in sections {
            r.add(s);
        }
        r
    }

    /// Starts one more section (a process that appeared).
    pub fn add(&mut self, mut s: Section) {
        if let Some(t) = &self.perfetto {
            match t.file.add(&s.sampler) {
                Ok(p) => s.trace = Some(p),
                Err(e) => print::note(&format!("wakemeter: {}: {e}", s.label())),
            }
        }
        match s.start() {
            Ok(()) => {
                self.live.insert(s.target.pid, s);
            }
            Err(e) => print::note(&format!("wakemeter: {}: {e}", s.label())),
        }
    }

    pub fn has(&self, pid: u32) -> bool {
        self.live.contains_key(&pid)
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    fn wrote(&mut self, r: Result<u64, Box<dyn Error>>) {
        match r {
            Ok(n) => self.intervals += n,
            Err(e) => {
                if self.write_error.is_none() {
                    self.write_error = Some(e.to_string());
                }
            }
        }
    }

    /// Writes what every process has stored; moves those that exited to
    /// the done list (returned, to be announced). `false` after a write
    /// error.
    pub fn poll(&mut self) -> (bool, Vec<String>) {
        let mut ended = Vec::new();
        let pids: Vec<u32> = self.live.keys().copied().collect();
        for pid in pids {
            let Some(mut s) = self.live.remove(&pid) else {
                continue;
            };
            let r = s.write_new(&mut self.out);
            self.wrote(r);
            if let Some(p) = &mut s.trace {
                p.poll();
            }
            if let Some(t) = &mut self.perfetto {
                t.note_end();
            }
            if target::liveness(pid) != Liveness::Alive || !s.sampler.is_running() {
                s.exited = true;
                let r = s.stop(&mut self.out);
                self.wrote(r);
                ended.push(s.label());
                self.done.push(s);
            } else {
                self.live.insert(pid, s);
            }
        }
        (self.write_error.is_none(), ended)
    }

    /// Stops every process, writes the `load` record and the end record,
    /// and makes the file visible. Returns the sections (for the summary).
    ///
    /// # Errors
    /// Nothing was recorded (the output is removed when it can be), or a
    /// write failed (what was written is kept, without end record).
    pub fn finish(
        mut self,
        reason: EndReason,
        load: Option<LoadRecord>,
    ) -> Result<(Vec<Section>, PathBuf), Box<dyn Error>> {
        for (_, mut s) in std::mem::take(&mut self.live) {
            let r = s.stop(&mut self.out);
            self.wrote(r);
            self.done.push(s);
        }
        let target = self.out.target().to_path_buf();
        let shown = print::safe(&target.to_string_lossy()).into_owned();
        if let Some(e) = self.write_error.take() {
            // Keep what reached the disk: every line before is complete.
            let kept = self.intervals;
            let _ = self.out.finish();
            return Err(format!(
                "writing {shown}: {e}; it keeps the {kept} intervals written before \
                 (no end record: diff reads it as partial)"
            )
            .into());
        }
        if self.intervals == 0 {
            self.out.abandon();
            return Err(format!(
                "nothing recorded: {} before two samples were taken; {shown} not written",
                match &self.done[..] {
                    [one] if one.exited => format!("{} exited", one.label()),
                    [one] => format!("{} was not sampled", one.label()),
                    _ => "the processes gave no two samples in a row".to_string(),
                }
            )
            .into());
        }
        let mut tail = Vec::new();
        if let Some(l) = load {
            tail.push(print::json(&RecordLine::Load(l))?);
        }
        tail.push(print::json(&RecordLine::End(RecordingEnd::new(
            self.intervals,
            reason.as_str(),
            now_unix_ns(),
        )))?);
        for t in &tail {
            if let Err(e) = self.out.line(t) {
                let _ = self.out.finish();
                return Err(format!("writing {shown}: {e}").into());
            }
        }
        self.out.finish()?;
        let mut done = self.done;
        done.sort_by_key(|s| s.target.pid);
        Ok((done, target))
    }
}

pub fn record(o: &RecordOptions) -> Result<ExitCode, Box<dyn Error>> {
    if o.duration.is_zero() || o.duration > MAX_RECORD {
        return Err(format!(
            "--seconds must be more than 0 and at most {} (one day)",
            MAX_RECORD.as_secs()
        )
        .into());
    }
    if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&o.interval) {
        return Err("--interval must be between 0.01 and 60 seconds".into());
    }
    let sel = &o.selection;
    // Every bad input is found here, before any file is created.
    sel.check()?;
    let out = Output::open(&o.output)?;
    let trace = match o.perfetto.create() {
        Ok(t) => t,
        Err(e) => {
            out.abandon();
            return Err(e.into());
        }
    };
    let stop = stop_on_signals()?;
    let follows = sel.name.is_some() || sel.cgroup.is_some();
    let many = follows || sel.pids.len() > 1;
    let mut last_dropped: Vec<u32> = Vec::new();
    let mut left_out = LeftOut::default();
    let first = sel.resolve_capped("recording", &mut last_dropped)?;
    let sections = prepare_all(first, o.interval, o.kernel, |_| None, &mut left_out);
    let mut rec = Recorder::start_traced(out, sections, trace);
    // The window opens when every selected process is measured.
    let deadline = Instant::now()
        .checked_add(o.duration)
        .ok_or("--seconds is too large")?;
    // Looks at the samplers twice an interval (within 5 ms to 200 ms).
    let step = (o.interval / 2).clamp(Duration::from_millis(5), Duration::from_millis(200));
    let resolve_every = o.interval.max(Duration::from_secs(1));
    let mut next_resolve = Instant::now() + resolve_every;
    let reason = loop {
        if stop.load(Ordering::Relaxed) {
            break EndReason::Interrupted;
        }
        let now = Instant::now();
        if now >= deadline {
            break EndReason::Deadline;
        }
        if follows && now >= next_resolve {
            next_resolve = now + resolve_every;
            let kept = sel.resolve_capped("recording", &mut last_dropped)?;
            let new: Vec<u32> = kept.into_iter().filter(|p| !rec.has(*p)).collect();
            for s in prepare_all(new, o.interval, o.kernel, |_| None, &mut left_out) {
                if many {
                    print::note(&format!("wakemeter: recording {}", s.label()));
                }
                rec.add(s);
            }
        }
        let (ok, ended) = rec.poll();
        if many {
            for e in ended {
                print::note(&format!("wakemeter: {e} exited"));
            }
        }
        if !ok {
            break EndReason::Deadline;
        }
        // Only a name or a cgroup can come back; fixed PIDs that are all
        // gone end the recording.
        if rec.is_empty() && !follows {
            break EndReason::Exited;
        }
        std::thread::sleep(step.min(deadline.saturating_duration_since(Instant::now())));
    };
    let mut trace = rec.perfetto.take();
    let (kept, target) = rec.finish(reason, None)?;
    if let Some(t) = &mut trace {
        t.summary();
    }
    let kept: Vec<&Section> = kept.iter().filter(|s| s.written > 0).collect();
    let written: u64 = kept.iter().map(|s| s.written).sum();
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
    let why = match reason {
        EndReason::Interrupted => " (interrupted: ended by a signal, with what was taken)",
        EndReason::Exited if kept.len() == 1 => " (the process exited before --seconds)",
        EndReason::Exited => " (the processes exited before --seconds)",
        _ => "",
    };
    print::note(&format!(
        "wakemeter: recorded {written} intervals of {what} to {}{why}",
        print::safe(&target.to_string_lossy())
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

/// A value in the unit a person reads: MiB, µs, %. Never `inf` or `NaN`.
fn human(v: f64, unit: &str) -> String {
    if !v.is_finite() {
        return "-".to_string();
    }
    // No "-0.0" for a value that rounds to nothing.
    let v = if v.abs() < 1e-9 { 0.0 } else { v };
    match unit {
        "bytes" => format!("{:.1} MiB", v / (1u64 << 20) as f64),
        "ns" => format!("{:.1} µs", v / 1e3),
        "µs" => format!("{v:.1} µs"),
        "s" => format!("{v:.2} s"),
        "%" => format!("{v:.2}%"),
        "ratio" => format!("{v:.3}"),
        "count" => format!("{v:.1}"),
        _ => format!("{v:.1}"),
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
            verdict(r.verdict)
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
            verdict(r.verdict)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("wakemeter-output-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_symlink_planted_at_the_temporary_name_is_refused_not_followed() {
        let d = scratch("planted");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let out = d.join("rec.ndjson");
        let tmp = beside(&out, &format!(".partial-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        let e = Output::open(&out).err().unwrap();
        assert!(e.contains("cannot create"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!out.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_regular_file_is_replaced_whole_at_the_end_only() {
        let d = scratch("regular");
        let out = d.join("rec.ndjson");
        std::fs::write(&out, "old").unwrap();
        let mut o = Output::open(&out).unwrap();
        o.line("{\"a\":1}").unwrap();
        // Until the end, the old file is what the name holds.
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
        o.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"a\":1}\n");
        let left: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().collect();
        assert_eq!(left.len(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn values_are_never_printed_as_inf_or_nan() {
        for v in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
            for unit in ["%", "bytes", "ns", "µs", "s", "1/s"] {
                assert_eq!(human(v, unit), "-");
            }
        }
        assert_eq!(human(-0.0, "bytes"), "0.0 MiB");
    }
}
