//! Snapshots' intervals and findings to Perfetto `TracePacket` records.

use std::collections::HashMap;

use prost::Message;
use wakemeter::{Finding, Interval, Subject, TargetIdentity, ThreadInterval};

use crate::proto::{
    self, Clock, ClockSnapshot, CounterDescriptor, DebugAnnotation, ProcessDescriptor,
    ThreadDescriptor, TracePacket, TrackDescriptor, TrackEvent, clock, event_type, unit,
};

/// Counter values carried by one packet at most, so that a packet stays
/// small (about 10 bytes per value) whatever the thread count.
const MAX_VALUES_PER_PACKET: usize = 512;
/// Findings followed at once (open slices); more are counted in
/// [`TraceEncoder::findings_dropped`] and left out, which bounds memory
/// and the bytes needed to close them.
pub const MAX_OPEN_FINDINGS: usize = 512;
/// Finding tracks kept (one per kind and subject); bounds memory.
const MAX_FINDING_TRACKS: usize = 4096;
/// A clock snapshot is repeated every this many intervals, so that a
/// suspend (BOOTTIME moves, MONOTONIC does not) is seen by the reader.
const CLOCK_SNAPSHOT_EVERY: u64 = 60;
/// Bytes one open finding needs to be closed (a `SLICE_END` packet),
/// rounded up.
pub const CLOSE_BYTES_PER_FINDING: u64 = 40;

/// Off-CPU causes, in the order of [`wakemeter::OffCpuTime::by_cause`].
const OFF_CPU_CAUSES: [&str; 6] = ["sleep", "lock", "poll", "io", "preempted", "other"];

/// One counter track and the last value written on it: an unchanged
/// value is not written again (a Perfetto counter holds its value until
/// the next one), which keeps idle threads almost free.
#[derive(Debug, Clone, Copy)]
struct Counter {
    uuid: u64,
    last: Option<f64>,
}

/// What a counter track is: name and unit, fixed per kind.
#[derive(Debug, Clone, Copy)]
struct CounterKind {
    name: &'static str,
    unit: Unit,
}

#[derive(Debug, Clone, Copy)]
enum Unit {
    Percent,
    PerSec,
    Ratio,
    Ns,
    Bytes,
}

impl CounterKind {
    const fn new(name: &'static str, unit: Unit) -> Self {
        CounterKind { name, unit }
    }

    fn descriptor(self) -> CounterDescriptor {
        let (unit, name) = match self.unit {
            Unit::Percent => (None, Some("%")),
            Unit::PerSec => (None, Some("/s")),
            Unit::Ratio => (None, Some("ratio")),
            Unit::Ns => (Some(unit::TIME_NS), None),
            Unit::Bytes => (Some(unit::SIZE_BYTES), None),
        };
        CounterDescriptor {
            unit,
            unit_name: name.map(str::to_string),
        }
    }
}

/// Per-thread counter tracks (children of the thread's track).
const THREAD_COUNTERS: [CounterKind; 5] = [
    CounterKind::new("CPU %", Unit::Percent),
    CounterKind::new("voluntary switches/s", Unit::PerSec),
    CounterKind::new("involuntary switches/s", Unit::PerSec),
    CounterKind::new("run-queue wait %", Unit::Percent),
    CounterKind::new("wakes/s", Unit::PerSec),
];
/// Per loop probe.
const LOOP_COUNTERS: [CounterKind; 4] = [
    CounterKind::new("wakeups/s", Unit::PerSec),
    CounterKind::new("idle-wakeup ratio", Unit::Ratio),
    CounterKind::new("utilization", Unit::Ratio),
    CounterKind::new("mean poll delay", Unit::Ns),
];
/// Per sleep site.
const SLEEP_COUNTERS: [CounterKind; 3] = [
    CounterKind::new("sleeps/s", Unit::PerSec),
    CounterKind::new("mean oversleep", Unit::Ns),
    CounterKind::new("CPU in sleep %", Unit::Percent),
];
/// The process's own counters.
const PROCESS_COUNTERS: [CounterKind; 2] = [
    CounterKind::new("process CPU %", Unit::Percent),
    CounterKind::new("RSS", Unit::Bytes),
];

/// A track with counters under it: a thread, a loop or a sleep site.
#[derive(Debug)]
struct Tracks<const N: usize> {
    uuid: u64,
    /// OS thread id (threads only).
    tid: u64,
    name: String,
    counters: [Option<Counter>; N],
    /// Off-CPU time by cause (threads with eBPF only), made on first use.
    off_cpu: [Option<Counter>; 6],
    /// Generation of the last interval that listed it (to drop the gone).
    seen: u64,
}

impl<const N: usize> Tracks<N> {
    fn new(uuid: u64, tid: u64, name: &str, seen: u64) -> Self {
        Tracks {
            uuid,
            tid,
            name: name.to_string(),
            counters: [None; N],
            off_cpu: [None; 6],
            seen,
        }
    }
}

/// A finding's track and, while it is reported, its open slice.
#[derive(Debug)]
struct FindingTrack {
    uuid: u64,
    /// When the open slice began (None: no slice open).
    open_since_ns: Option<u64>,
    /// The last time it was reported (where its open slice will end).
    last_seen_ns: u64,
    /// The end of its last closed slice: a new one never begins before
    /// it, so that slices of one track never overlap.
    closed_at_ns: u64,
}

/// Turns a sampler's intervals and findings into Perfetto trace records
/// (`Trace.packet`, field 1, length-delimited `TracePacket`s), appended to
/// a byte buffer: any concatenation of what it returns, from
/// [`TraceEncoder::header`] on, is a complete trace file.
///
/// Tracks: the process (its PID and name) with `process CPU %` and `RSS`
/// counters; each thread (its real TID and name, under the process) with
/// `CPU %`, `voluntary switches/s`, `involuntary switches/s`,
/// `run-queue wait %` and, with eBPF, `wakes/s` and `off-CPU <cause> %`;
/// each loop probe (`loop <name>`) with `wakeups/s`, `idle-wakeup ratio`,
/// `utilization`, `mean poll delay` (ns); each sleep site
/// (`sleep site <name>`) with `sleeps/s`, `mean oversleep` (ns) and
/// `CPU in sleep %`. An interval's rates are stamped at its start, so a
/// counter's step covers exactly the interval it was measured over; RSS
/// is stamped at the interval's end, when it was read. Findings are
/// slices on a `finding: <kind>` track under their subject's track.
/// Timestamps are `CLOCK_MONOTONIC` (the sampler's clock), with clock
/// snapshots so that readers line them up with a system trace.
#[derive(Debug)]
pub struct TraceEncoder {
    pid: u32,
    /// Its writer sequence; also the high 32 bits of its track uuids, so
    /// that several processes share one file.
    sequence: u32,
    process_uuid: u64,
    next_uuid: u64,
    process: [Option<Counter>; 2],
    threads: HashMap<u64, Tracks<5>>,
    loops: HashMap<u64, Tracks<4>>,
    sleeps: HashMap<u64, Tracks<3>>,
    findings: HashMap<String, FindingTrack>,
    generation: u64,
    intervals: u64,
    findings_written: u64,
    findings_dropped: u64,
    /// (uuid, value) pairs of the packet being built; kept to reuse its
    /// allocation.
    values: Vec<(u64, f64)>,
    /// The process's name.
    name: String,
}

impl TraceEncoder {
    /// An encoder for the process `target` (its PID and name go into the
    /// process descriptor), writing on sequence `sequence` (1 or more;
    /// give each process of one file its own).
    pub fn new(target: &TargetIdentity, sequence: u32) -> Self {
        let sequence = sequence.max(1);
        let base = u64::from(sequence) << 32;
        TraceEncoder {
            pid: target.pid,
            sequence,
            process_uuid: base | 1,
            next_uuid: base | 2,
            process: [None; 2],
            threads: HashMap::new(),
            loops: HashMap::new(),
            sleeps: HashMap::new(),
            findings: HashMap::new(),
            generation: 0,
            intervals: 0,
            findings_written: 0,
            findings_dropped: 0,
            values: Vec::new(),
            name: target.name.clone(),
        }
    }

    /// The first records of a trace: a clock snapshot and the process's
    /// track (its name stored as given, control characters included).
    pub fn header(&mut self, out: &mut Vec<u8>) {
        push(
            out,
            &TracePacket {
                trusted_packet_sequence_id: Some(self.sequence),
                sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
                first_packet_on_sequence: Some(true),
                ..Default::default()
            },
        );
        clock_snapshot(out, self.sequence);
        self.describe(
            out,
            TrackDescriptor {
                uuid: Some(self.process_uuid),
                process: Some(ProcessDescriptor {
                    pid: Some(self.pid as i32),
                    process_name: Some(self.name.clone()),
                }),
                ..Default::default()
            },
        );
    }

    /// Intervals encoded so far.
    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    /// Finding slices begun so far.
    pub fn findings_written(&self) -> u64 {
        self.findings_written
    }

    /// Findings left out because [`MAX_OPEN_FINDINGS`] were open.
    pub fn findings_dropped(&self) -> u64 {
        self.findings_dropped
    }

    /// Findings whose slice is open (each needs
    /// [`CLOSE_BYTES_PER_FINDING`] bytes at most to be closed).
    pub fn open_findings(&self) -> usize {
        self.findings
            .values()
            .filter(|f| f.open_since_ns.is_some())
            .count()
    }

    fn uuid(&mut self) -> u64 {
        let u = self.next_uuid;
        self.next_uuid += 1;
        u
    }

    fn describe(&self, out: &mut Vec<u8>, d: TrackDescriptor) {
        push(
            out,
            &TracePacket {
                trusted_packet_sequence_id: Some(self.sequence),
                track_descriptor: Some(d),
                ..Default::default()
            },
        );
    }

    /// The counter track `kind` under `parent`, described on first use;
    /// returns its uuid if `value` differs from the last one written.
    fn counter(
        &mut self,
        slot: CounterRef,
        kind: CounterKind,
        value: f64,
        out: &mut Vec<u8>,
    ) -> Option<u64> {
        if !value.is_finite() {
            return None;
        }
        let (parent, existing) = self.slot(slot)?;
        let c = match existing {
            Some(c) => c,
            None => {
                let uuid = self.uuid();
                let name = match slot {
                    CounterRef::ThreadOffCpu(_, cause) => {
                        format!("off-CPU {} %", OFF_CPU_CAUSES[cause])
                    }
                    _ => kind.name.to_string(),
                };
                self.describe(
                    out,
                    TrackDescriptor {
                        uuid: Some(uuid),
                        parent_uuid: Some(parent),
                        name: Some(name),
                        counter: Some(kind.descriptor()),
                        ..Default::default()
                    },
                );
                Counter { uuid, last: None }
            }
        };
        let changed = c.last != Some(value);
        self.store(
            slot,
            Counter {
                uuid: c.uuid,
                last: Some(value),
            },
        );
        changed.then_some(c.uuid)
    }

    fn slot(&self, r: CounterRef) -> Option<(u64, Option<Counter>)> {
        Some(match r {
            CounterRef::Process(i) => (self.process_uuid, self.process[i]),
            CounterRef::Thread(s, i) => {
                let t = self.threads.get(&s)?;
                (t.uuid, t.counters[i])
            }
            CounterRef::ThreadOffCpu(s, i) => {
                let t = self.threads.get(&s)?;
                (t.uuid, t.off_cpu[i])
            }
            CounterRef::Loop(id, i) => {
                let t = self.loops.get(&id)?;
                (t.uuid, t.counters[i])
            }
            CounterRef::Sleep(id, i) => {
                let t = self.sleeps.get(&id)?;
                (t.uuid, t.counters[i])
            }
        })
    }

    fn store(&mut self, r: CounterRef, c: Counter) {
        let place = match r {
            CounterRef::Process(i) => self.process.get_mut(i),
            CounterRef::Thread(s, i) => {
                self.threads.get_mut(&s).and_then(|t| t.counters.get_mut(i))
            }
            CounterRef::ThreadOffCpu(s, i) => {
                self.threads.get_mut(&s).and_then(|t| t.off_cpu.get_mut(i))
            }
            CounterRef::Loop(id, i) => self.loops.get_mut(&id).and_then(|t| t.counters.get_mut(i)),
            CounterRef::Sleep(id, i) => {
                self.sleeps.get_mut(&id).and_then(|t| t.counters.get_mut(i))
            }
        };
        if let Some(p) = place {
            *p = Some(c);
        }
    }

    fn set(&mut self, r: CounterRef, kind: CounterKind, value: Option<f64>, out: &mut Vec<u8>) {
        if let Some(v) = value
            && let Some(uuid) = self.counter(r, kind, v, out)
        {
            self.values.push((uuid, v));
        }
    }

    /// The thread's track, described when new or renamed.
    fn thread(&mut self, t: &ThreadInterval, out: &mut Vec<u8>) {
        let generation = self.generation;
        let renamed = match self.threads.get_mut(&t.serial) {
            Some(known) => {
                known.seen = generation;
                (known.name != t.name).then_some(known.uuid)
            }
            None => {
                let uuid = self.uuid();
                self.threads
                    .insert(t.serial, Tracks::new(uuid, t.tid, &t.name, generation));
                Some(uuid)
            }
        };
        if let Some(uuid) = renamed {
            if let Some(known) = self.threads.get_mut(&t.serial) {
                known.name.clone_from(&t.name);
            }
            self.describe(
                out,
                TrackDescriptor {
                    uuid: Some(uuid),
                    parent_uuid: Some(self.process_uuid),
                    thread: Some(ThreadDescriptor {
                        pid: Some(self.pid as i32),
                        tid: Some(t.tid as i32),
                        thread_name: Some(t.name.clone()),
                    }),
                    ..Default::default()
                },
            );
        }
    }

    fn probe_track(&mut self, kind: ProbeKind, id: u64, name: &str, out: &mut Vec<u8>) {
        let generation = self.generation;
        let known = match kind {
            ProbeKind::Loop => self.loops.get_mut(&id).map(|t| t.seen = generation),
            ProbeKind::Sleep => self.sleeps.get_mut(&id).map(|t| t.seen = generation),
        };
        if known.is_some() {
            return;
        }
        let uuid = self.uuid();
        match kind {
            ProbeKind::Loop => {
                self.loops
                    .insert(id, Tracks::new(uuid, 0, name, generation));
            }
            ProbeKind::Sleep => {
                self.sleeps
                    .insert(id, Tracks::new(uuid, 0, name, generation));
            }
        }
        let label = match kind {
            ProbeKind::Loop => "loop",
            ProbeKind::Sleep => "sleep site",
        };
        self.describe(
            out,
            TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(self.process_uuid),
                name: Some(format!("{label} {name}")),
                ..Default::default()
            },
        );
    }

    /// Appends the records of one interval: new or renamed tracks, then
    /// every counter whose value changed, stamped at the interval's start
    /// (RSS at its end). Threads, loops and sleep sites not in `i` are
    /// forgotten (their tracks stay in the file).
    pub fn interval(&mut self, i: &Interval, out: &mut Vec<u8>) {
        self.generation += 1;
        self.intervals += 1;
        if self.intervals.is_multiple_of(CLOCK_SNAPSHOT_EVERY) {
            clock_snapshot(out, self.sequence);
        }
        let start = i.end_monotonic_ns.saturating_sub(i.duration_ns);
        let secs = i.duration_ns as f64 / 1e9;
        self.values.clear();
        self.set(
            CounterRef::Process(0),
            PROCESS_COUNTERS[0],
            Some(i.process.cpu_percent),
            out,
        );
        for t in &i.threads {
            self.thread(t, out);
            let s = t.serial;
            let k = t.kernel.as_ref();
            let vol = t
                .voluntary_switches_per_sec
                .or(k.map(|k| k.voluntary_switches_per_sec));
            let invol = t
                .involuntary_switches_per_sec
                .or(k.map(|k| k.involuntary_switches_per_sec));
            let values = [
                Some(t.cpu_percent),
                vol,
                invol,
                t.run_queue_wait_percent,
                k.map(|k| k.wakes_per_sec),
            ];
            for (n, v) in values.into_iter().enumerate() {
                self.set(CounterRef::Thread(s, n), THREAD_COUNTERS[n], v, out);
            }
            if let Some(k) = k
                && secs > 0.0
            {
                for (n, ns) in k.off_cpu.by_cause().into_iter().enumerate() {
                    let known = self.threads.get(&s).is_some_and(|t| t.off_cpu[n].is_some());
                    // A cause never seen gets no track.
                    if ns == 0 && !known {
                        continue;
                    }
                    let pct = ns as f64 / (secs * 1e9) * 100.0;
                    self.set(
                        CounterRef::ThreadOffCpu(s, n),
                        CounterKind::new("off-CPU", Unit::Percent),
                        Some(pct),
                        out,
                    );
                }
            }
        }
        for l in &i.loops {
            self.probe_track(ProbeKind::Loop, l.id, &l.name, out);
            let values = [
                l.wakeups_per_sec,
                l.idle_wakeup_ratio,
                l.utilization,
                l.mean_poll_delay_ns as f64,
            ];
            for (n, v) in values.into_iter().enumerate() {
                self.set(CounterRef::Loop(l.id, n), LOOP_COUNTERS[n], Some(v), out);
            }
        }
        for sl in &i.sleeps {
            self.probe_track(ProbeKind::Sleep, sl.id, &sl.name, out);
            let values = [
                sl.sleeps_per_sec,
                sl.mean_oversleep_ns as f64,
                sl.cpu_percent,
            ];
            for (n, v) in values.into_iter().enumerate() {
                self.set(CounterRef::Sleep(sl.id, n), SLEEP_COUNTERS[n], Some(v), out);
            }
        }
        let values = std::mem::take(&mut self.values);
        counters(out, self.sequence, start, &values);
        self.values = values;
        self.values.clear();
        self.set(
            CounterRef::Process(1),
            PROCESS_COUNTERS[1],
            Some(i.process.rss_bytes as f64),
            out,
        );
        let values = std::mem::take(&mut self.values);
        counters(out, self.sequence, i.end_monotonic_ns, &values);
        self.values = values;
        let g = self.generation;
        self.threads.retain(|_, t| t.seen == g);
        self.loops.retain(|_, t| t.seen == g);
        self.sleeps.retain(|_, t| t.seen == g);
    }

    /// The track a finding's subject has in this trace: its thread's, its
    /// probe's, a group's first thread's; the process's for the process
    /// or a subject not seen.
    fn subject_track(&self, s: &Subject) -> u64 {
        let found = match s {
            Subject::Thread { tid, .. } => self
                .threads
                .values()
                .find(|t| t.tid == *tid)
                .map(|t| t.uuid),
            Subject::Loop { name, .. } => self
                .loops
                .values()
                .find(|t| &t.name == name)
                .map(|t| t.uuid),
            Subject::SleepSite { name, .. } => self
                .sleeps
                .values()
                .find(|t| &t.name == name)
                .map(|t| t.uuid),
            // A group of alike threads: on its first thread's track.
            Subject::Threads { tids, .. } => tids
                .first()
                .and_then(|tid| self.threads.values().find(|t| t.tid == *tid))
                .map(|t| t.uuid),
            _ => None,
        };
        found.unwrap_or(self.process_uuid)
    }

    /// Appends the finding slices for `findings`, the findings reported
    /// at `now_ns` (monotonic): a finding not open yet begins a slice at
    /// the start of its window (`now_ns - window_ns`, never before the
    /// end of the previous slice of its track), named by its summary, with
    /// its kind, severity, subject, evidence and advice as arguments; an
    /// open one that is still reported stays open; one no longer reported
    /// ends where it was last reported.
    pub fn findings(&mut self, now_ns: u64, findings: &[Finding], out: &mut Vec<u8>) {
        let mut reported = Vec::with_capacity(findings.len());
        for f in findings {
            let key = format!("{}\u{0}{}", f.kind.as_str(), f.subject.label());
            if let Some(t) = self.findings.get_mut(&key)
                && t.open_since_ns.is_some()
            {
                t.last_seen_ns = now_ns;
                reported.push(key);
                continue;
            }
            if self.open_findings() >= MAX_OPEN_FINDINGS
                || (!self.findings.contains_key(&key) && self.findings.len() >= MAX_FINDING_TRACKS)
            {
                self.findings_dropped += 1;
                continue;
            }
            let uuid = match self.findings.get(&key) {
                Some(t) => t.uuid,
                None => {
                    let uuid = self.uuid();
                    let parent = self.subject_track(&f.subject);
                    self.describe(
                        out,
                        TrackDescriptor {
                            uuid: Some(uuid),
                            parent_uuid: Some(parent),
                            name: Some(format!("finding: {}", f.kind.as_str())),
                            ..Default::default()
                        },
                    );
                    self.findings.insert(
                        key.clone(),
                        FindingTrack {
                            uuid,
                            open_since_ns: None,
                            last_seen_ns: now_ns,
                            closed_at_ns: 0,
                        },
                    );
                    uuid
                }
            };
            let Some(t) = self.findings.get_mut(&key) else {
                continue;
            };
            let begin = now_ns.saturating_sub(f.window_ns).max(t.closed_at_ns);
            t.open_since_ns = Some(begin);
            t.last_seen_ns = now_ns;
            slice_begin(out, self.sequence, begin, uuid, f);
            self.findings_written += 1;
            reported.push(key);
        }
        let seq = self.sequence;
        for (key, t) in &mut self.findings {
            if t.open_since_ns.is_some() && !reported.contains(key) {
                t.open_since_ns = None;
                t.closed_at_ns = t.last_seen_ns;
                slice_end(out, seq, t.last_seen_ns, t.uuid);
            }
        }
    }

    /// Ends every open finding slice where it was last reported: the last
    /// records of a trace.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let seq = self.sequence;
        for t in self.findings.values_mut() {
            if t.open_since_ns.take().is_some() {
                t.closed_at_ns = t.last_seen_ns;
                slice_end(out, seq, t.last_seen_ns, t.uuid);
            }
        }
    }
}

fn annotation(name: &str, value: String) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.to_string()),
        string_value: Some(value),
        ..Default::default()
    }
}

fn slice_begin(out: &mut Vec<u8>, seq: u32, ts: u64, track: u64, f: &Finding) {
    let evidence = f
        .evidence
        .iter()
        .map(|e| DebugAnnotation {
            name: Some(if e.unit.is_empty() {
                e.name.clone()
            } else {
                format!("{} ({})", e.name, e.unit)
            }),
            double_value: Some(e.value),
            ..Default::default()
        })
        .collect();
    let args = vec![
        annotation("summary", f.summary.clone()),
        annotation("kind", f.kind.as_str().to_string()),
        annotation("severity", f.severity.as_str().to_string()),
        annotation("subject", f.subject.label()),
        DebugAnnotation {
            name: Some("evidence".to_string()),
            dict_entries: evidence,
            ..Default::default()
        },
        annotation("advice", f.advice.clone()),
        DebugAnnotation {
            name: Some("window_s".to_string()),
            double_value: Some(f.window_ns as f64 / 1e9),
            ..Default::default()
        },
    ];
    push(
        out,
        &TracePacket {
            timestamp: Some(ts),
            timestamp_clock_id: Some(clock::MONOTONIC),
            trusted_packet_sequence_id: Some(seq),
            track_event: Some(TrackEvent {
                r#type: Some(event_type::SLICE_BEGIN),
                track_uuid: Some(track),
                name: Some(f.summary.clone()),
                categories: vec![format!("wakemeter.{}", f.severity.as_str())],
                debug_annotations: args,
                ..Default::default()
            }),
            ..Default::default()
        },
    );
}

fn slice_end(out: &mut Vec<u8>, seq: u32, ts: u64, track: u64) {
    push(
        out,
        &TracePacket {
            timestamp: Some(ts),
            timestamp_clock_id: Some(clock::MONOTONIC),
            trusted_packet_sequence_id: Some(seq),
            track_event: Some(TrackEvent {
                r#type: Some(event_type::SLICE_END),
                track_uuid: Some(track),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
}

/// Which counter slot a value goes to.
#[derive(Debug, Clone, Copy)]
enum CounterRef {
    Process(usize),
    Thread(u64, usize),
    ThreadOffCpu(u64, usize),
    Loop(u64, usize),
    Sleep(u64, usize),
}

#[derive(Debug, Clone, Copy)]
enum ProbeKind {
    Loop,
    Sleep,
}

/// Appends one `Trace.packet` record.
fn push(out: &mut Vec<u8>, p: &TracePacket) {
    // Field 1, wire type 2 (length-delimited).
    out.push(((proto::TRACE_PACKET_FIELD << 3) | 2) as u8);
    // Encoding into a Vec cannot fail (it grows).
    let _ = p.encode_length_delimited(out);
}

/// Counter values at `ts`: one `TYPE_COUNTER` event on the first track,
/// the others as its extra counter values, in packets of at most
/// [`MAX_VALUES_PER_PACKET`] values.
fn counters(out: &mut Vec<u8>, seq: u32, ts: u64, values: &[(u64, f64)]) {
    for chunk in values.chunks(MAX_VALUES_PER_PACKET) {
        let Some((&(uuid, value), rest)) = chunk.split_first() else {
            continue;
        };
        push(
            out,
            &TracePacket {
                timestamp: Some(ts),
                timestamp_clock_id: Some(clock::MONOTONIC),
                trusted_packet_sequence_id: Some(seq),
                track_event: Some(TrackEvent {
                    r#type: Some(event_type::COUNTER),
                    track_uuid: Some(uuid),
                    double_counter_value: Some(value),
                    extra_double_counter_track_uuids: rest.iter().map(|v| v.0).collect(),
                    extra_double_counter_values: rest.iter().map(|v| v.1).collect(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
    }
}

/// A clock snapshot: MONOTONIC (the trace's timestamps), BOOTTIME
/// (Perfetto's default trace clock) and REALTIME, read together.
fn clock_snapshot(out: &mut Vec<u8>, seq: u32) {
    let clocks = [
        (clock::MONOTONIC, libc::CLOCK_MONOTONIC),
        (clock::BOOTTIME, libc::CLOCK_BOOTTIME),
        (clock::REALTIME, libc::CLOCK_REALTIME),
    ]
    .into_iter()
    .filter_map(|(id, c)| {
        Some(Clock {
            clock_id: Some(id),
            timestamp: Some(read_clock(c)?),
        })
    })
    .collect();
    push(
        out,
        &TracePacket {
            trusted_packet_sequence_id: Some(seq),
            clock_snapshot: Some(ClockSnapshot { clocks }),
            ..Default::default()
        },
    );
}

fn read_clock(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return None;
    }
    Some((ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64)
}
