//! Snapshots' intervals and findings to Perfetto `TracePacket` records.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use prost::Message;
use wakemeter::{Finding, Interval, Subject, TargetIdentity};

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
    /// The track's uuid; 0 while it is not described (uuids carry the
    /// sequence in their high 32 bits, so none is 0).
    uuid: u64,
    /// The last value written; NaN before the first (values written are
    /// finite, and NaN differs from every value).
    last: f64,
}

/// A counter track not described yet.
const UNDESCRIBED: Counter = Counter {
    uuid: 0,
    last: f64::NAN,
};

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
    /// Its key in [`Entities`] (a thread's serial, a probe's id).
    key: u64,
    /// 0 until described.
    uuid: u64,
    /// Generation of the last interval that listed it (to drop the gone).
    seen: u64,
    name: Name,
    counters: [Counter; N],
    /// OS thread id (threads only).
    tid: u64,
    /// Off-CPU time by cause (threads with eBPF only), made on first use
    /// (boxed: most threads never have it, and the map stays compact).
    off_cpu: Option<Box<[Counter; 6]>>,
}

impl<const N: usize> Tracks<N> {
    fn new(tid: u64, name: &str) -> Self {
        Tracks {
            key: 0,
            uuid: 0,
            seen: 0,
            name: Name::new(name),
            counters: [UNDESCRIBED; N],
            tid,
            off_cpu: None,
        }
    }

    /// Marks it listed in interval `generation`; true the first time in
    /// that interval.
    fn see(&mut self, generation: u64) -> bool {
        let fresh = self.seen != generation;
        self.seen = generation;
        fresh
    }
}

/// A thread's or probe's name, kept inline when short (a Linux thread
/// name is 15 bytes at most), so that comparing it with the interval's
/// reads no cache line but its [`Tracks`]'.
#[derive(Debug)]
enum Name {
    Inline { len: u8, bytes: [u8; 22] },
    Heap(Box<str>),
}

impl Name {
    fn new(name: &str) -> Name {
        let mut bytes = [0u8; 22];
        match bytes.get_mut(..name.len()) {
            Some(head) => {
                head.copy_from_slice(name.as_bytes());
                Name::Inline {
                    len: name.len() as u8,
                    bytes,
                }
            }
            None => Name::Heap(name.into()),
        }
    }

    /// Whether it is `name`.
    fn is(&self, name: &str) -> bool {
        match self {
            Name::Inline { len, bytes } => &bytes[..usize::from(*len)] == name.as_bytes(),
            Name::Heap(s) => **s == *name,
        }
    }
}

/// The hasher of the per-entity maps, keyed by the sampler's thread
/// serials and probe ids: small counters the sampler assigns, not input
/// an attacker picks, so one multiply (as rustc's FxHash) serves where
/// SipHash would cost several times more on the writer's hot path.
#[derive(Debug, Default, Clone, Copy)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// Entities by serial or probe id.
type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// What the first pass over an interval's threads read of one thread.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Where its tracks are in [`Entities::tracks`].
    at: u32,
    /// Its serial was listed before in this interval: what was read is
    /// stale, read it again.
    again: bool,
    /// Its track is new or its name changed.
    renamed: bool,
    /// Its counters.
    counters: [Counter; 5],
}

/// The threads, loops or sleep sites of a trace by key (serial or probe
/// id): their tracks side by side in one vector, found through a compact
/// index (a few bytes per entity, where the tracks take a few cache
/// lines).
#[derive(Debug)]
struct Entities<const N: usize> {
    index: IdMap<u32>,
    tracks: Vec<Tracks<N>>,
}

impl<const N: usize> Default for Entities<N> {
    fn default() -> Self {
        Entities {
            index: IdMap::default(),
            tracks: Vec::new(),
        }
    }
}

impl<const N: usize> Entities<N> {
    /// Where `key`'s tracks are, made by `new` when it has none.
    #[inline]
    fn slot(&mut self, key: u64, new: impl FnOnce() -> Tracks<N>) -> usize {
        let end = self.tracks.len();
        let at = *self.index.entry(key).or_insert(end as u32) as usize;
        if at == end {
            let mut t = new();
            t.key = key;
            self.tracks.push(t);
        }
        at
    }

    fn values(&self) -> std::slice::Iter<'_, Tracks<N>> {
        self.tracks.iter()
    }

    /// Drops the entities not listed in interval `generation`, unless all
    /// `listed` of them were (the usual case: no pass over them).
    fn forget_gone(&mut self, listed: usize, generation: u64) {
        if listed != self.tracks.len() {
            self.tracks.retain(|t| t.seen == generation);
            self.index.clear();
            let index = self.tracks.iter().enumerate();
            self.index.extend(index.map(|(at, t)| (t.key, at as u32)));
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
    process: [Counter; 2],
    threads: Entities<5>,
    loops: Entities<4>,
    sleeps: Entities<3>,
    findings: HashMap<String, FindingTrack>,
    generation: u64,
    intervals: u64,
    findings_written: u64,
    findings_dropped: u64,
    /// The counter values being encoded; kept to reuse its buffers.
    batch: Batch,
    /// Per thread of the interval being encoded, what the first pass
    /// read (kept to reuse).
    slots: Vec<Slot>,
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
            process: [UNDESCRIBED; 2],
            threads: Entities::default(),
            loops: Entities::default(),
            sleeps: Entities::default(),
            findings: HashMap::new(),
            generation: 0,
            intervals: 0,
            findings_written: 0,
            findings_dropped: 0,
            batch: Batch::default(),
            slots: Vec::new(),
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
        next(&mut self.next_uuid)
    }

    fn describe(&self, out: &mut Vec<u8>, d: TrackDescriptor) {
        describe(out, self.sequence, d);
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
        // Disjoint borrows of the fields: one map lookup per entity, not
        // per value (this is the writer's whole per-interval cost).
        let TraceEncoder {
            pid,
            sequence: seq,
            process_uuid,
            next_uuid,
            process,
            threads,
            loops,
            sleeps,
            generation,
            batch,
            slots,
            ..
        } = self;
        let (pid, seq, puuid, g) = (*pid, *seq, *process_uuid, *generation);
        let mut w = Writer {
            seq,
            next_uuid,
            batch,
            out,
        };
        w.batch.begin(start);
        w.put(
            puuid,
            &mut process[0],
            PROCESS_COUNTERS[0],
            None,
            Some(i.process.cpu_percent),
        );
        // First each thread's tracks, name and counters, read in a pass of
        // their own: they are cold (last read an interval ago, and most
        // of the writer's time was spent waiting for them), and these
        // short, independent reads let the CPU wait for many at once,
        // where the work below would wait for each in turn.
        let mut listed = 0;
        slots.clear();
        for t in &i.threads {
            let at = threads.slot(t.serial, || Tracks::new(t.tid, ""));
            let tr = &mut threads.tracks[at];
            let fresh = tr.see(g);
            listed += usize::from(fresh);
            slots.push(Slot {
                at: at as u32,
                // A serial listed twice reads its tracks again below.
                again: !fresh,
                renamed: tr.uuid == 0 || !tr.name.is(&t.name),
                counters: tr.counters,
            });
        }
        for (t, slot) in i.threads.iter().zip(slots.iter()) {
            let tr = &mut threads.tracks[slot.at as usize];
            let (renamed, mut counters) = if slot.again {
                (tr.uuid == 0 || !tr.name.is(&t.name), tr.counters)
            } else {
                (slot.renamed, slot.counters)
            };
            if renamed {
                if tr.uuid == 0 {
                    tr.uuid = next(w.next_uuid);
                }
                tr.name = Name::new(&t.name);
                describe(
                    w.out,
                    seq,
                    TrackDescriptor {
                        uuid: Some(tr.uuid),
                        parent_uuid: Some(puuid),
                        thread: Some(ThreadDescriptor {
                            pid: Some(pid as i32),
                            tid: Some(t.tid as i32),
                            thread_name: Some(t.name.clone()),
                        }),
                        ..Default::default()
                    },
                );
            }
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
                w.put(tr.uuid, &mut counters[n], THREAD_COUNTERS[n], None, v);
            }
            tr.counters = counters;
            if let Some(k) = k
                && secs > 0.0
            {
                for (n, ns) in k.off_cpu.by_cause().into_iter().enumerate() {
                    // A cause never seen gets no track.
                    if ns == 0 && tr.off_cpu.as_ref().is_none_or(|o| o[n].uuid == 0) {
                        continue;
                    }
                    let pct = ns as f64 / (secs * 1e9) * 100.0;
                    let off = tr.off_cpu.get_or_insert_with(|| Box::new([UNDESCRIBED; 6]));
                    w.put(
                        tr.uuid,
                        &mut off[n],
                        OFF_CPU,
                        Some(OFF_CPU_CAUSES[n]),
                        Some(pct),
                    );
                }
            }
        }
        threads.forget_gone(listed, g);
        let mut listed = 0;
        for l in &i.loops {
            let tr = probe(&mut w, loops, l.id, &l.name, "loop", puuid);
            listed += usize::from(tr.see(g));
            let values = [
                l.wakeups_per_sec,
                l.idle_wakeup_ratio,
                l.utilization,
                l.mean_poll_delay_ns as f64,
            ];
            for (n, v) in values.into_iter().enumerate() {
                w.put(
                    tr.uuid,
                    &mut tr.counters[n],
                    LOOP_COUNTERS[n],
                    None,
                    Some(v),
                );
            }
        }
        loops.forget_gone(listed, g);
        let mut listed = 0;
        for sl in &i.sleeps {
            let tr = probe(&mut w, sleeps, sl.id, &sl.name, "sleep site", puuid);
            listed += usize::from(tr.see(g));
            let values = [
                sl.sleeps_per_sec,
                sl.mean_oversleep_ns as f64,
                sl.cpu_percent,
            ];
            for (n, v) in values.into_iter().enumerate() {
                w.put(
                    tr.uuid,
                    &mut tr.counters[n],
                    SLEEP_COUNTERS[n],
                    None,
                    Some(v),
                );
            }
        }
        sleeps.forget_gone(listed, g);
        w.batch.end(seq, w.out);
        w.batch.begin(i.end_monotonic_ns);
        w.put(
            puuid,
            &mut process[1],
            PROCESS_COUNTERS[1],
            None,
            Some(i.process.rss_bytes as f64),
        );
        w.batch.end(seq, w.out);
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
                .find(|t| t.name.is(name))
                .map(|t| t.uuid),
            Subject::SleepSite { name, .. } => self
                .sleeps
                .values()
                .find(|t| t.name.is(name))
                .map(|t| t.uuid),
            // A group of alike threads: on its first thread's track.
            Subject::Threads { tids, .. } => tids
                .first()
                .and_then(|tid| self.threads.tracks.iter().find(|t| t.tid == *tid))
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
        let mut reported = std::collections::HashSet::with_capacity(findings.len());
        let mut open = self.open_findings();
        for f in findings {
            let key = format!("{}\u{0}{}", f.kind.as_str(), f.subject.label());
            if let Some(t) = self.findings.get_mut(&key)
                && t.open_since_ns.is_some()
            {
                t.last_seen_ns = now_ns;
                reported.insert(key);
                continue;
            }
            if open >= MAX_OPEN_FINDINGS
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
            open += 1;
            reported.insert(key);
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

    /// The open finding slices: (track uuid, when last reported). What a
    /// writer keeps after each write that reached the file, so that it
    /// can close exactly those if a later write fails.
    pub(crate) fn open_slices(&self) -> Vec<(u64, u64)> {
        self.findings
            .values()
            .filter(|t| t.open_since_ns.is_some())
            .map(|t| (t.uuid, t.last_seen_ns))
            .collect()
    }

    /// Ends `slices` (from [`TraceEncoder::open_slices`]) and nothing else:
    /// after a failed write, the encoder is ahead of the file.
    pub(crate) fn end_slices(&self, slices: &[(u64, u64)], out: &mut Vec<u8>) {
        for &(uuid, ts) in slices {
            slice_end(out, self.sequence, ts, uuid);
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

/// Off-CPU time of one cause (the cause goes into the track's name).
const OFF_CPU: CounterKind = CounterKind::new("off-CPU", Unit::Percent);

/// Takes the next uuid.
fn next(next_uuid: &mut u64) -> u64 {
    let u = *next_uuid;
    *next_uuid += 1;
    u
}

/// Appends a track descriptor.
fn describe(out: &mut Vec<u8>, seq: u32, d: TrackDescriptor) {
    push(
        out,
        &TracePacket {
            trusted_packet_sequence_id: Some(seq),
            track_descriptor: Some(d),
            ..Default::default()
        },
    );
}

/// The parts of the encoder one interval writes with.
struct Writer<'a> {
    seq: u32,
    next_uuid: &'a mut u64,
    batch: &'a mut Batch,
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    /// Sets counter `c` (of kind `kind`, under track `parent`) to
    /// `value`: describes the track on first use, and encodes the value
    /// if it differs from the last one written. `cause` names an off-CPU
    /// cause's track.
    #[inline(always)]
    fn put(
        &mut self,
        parent: u64,
        c: &mut Counter,
        kind: CounterKind,
        cause: Option<&str>,
        value: Option<f64>,
    ) {
        let Some(value) = value.filter(|v| v.is_finite()) else {
            return;
        };
        if c.uuid == 0 {
            c.uuid = self.describe_counter(parent, kind, cause);
        }
        if c.last != value {
            c.last = value;
            self.batch.push(self.seq, c.uuid, value);
        }
    }

    /// Describes a new counter track; returns its uuid.
    #[cold]
    fn describe_counter(&mut self, parent: u64, kind: CounterKind, cause: Option<&str>) -> u64 {
        let uuid = next(self.next_uuid);
        let name = match cause {
            Some(cause) => format!("off-CPU {cause} %"),
            None => kind.name.to_string(),
        };
        describe(
            self.out,
            self.seq,
            TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(parent),
                name: Some(name),
                counter: Some(kind.descriptor()),
                ..Default::default()
            },
        );
        uuid
    }
}

/// A probe's track (`label name` under the process), described when new.
fn probe<'m, const N: usize>(
    w: &mut Writer<'_>,
    map: &'m mut Entities<N>,
    id: u64,
    name: &str,
    label: &str,
    parent: u64,
) -> &'m mut Tracks<N> {
    let at = map.slot(id, || Tracks::new(0, name));
    let tr = &mut map.tracks[at];
    if tr.uuid == 0 {
        tr.uuid = next(w.next_uuid);
        describe(
            w.out,
            w.seq,
            TrackDescriptor {
                uuid: Some(tr.uuid),
                parent_uuid: Some(parent),
                name: Some(format!("{label} {name}")),
                ..Default::default()
            },
        );
    }
    tr
}

/// Appends one `Trace.packet` record.
fn push(out: &mut Vec<u8>, p: &TracePacket) {
    // Field 1, wire type 2 (length-delimited).
    out.push(((proto::TRACE_PACKET_FIELD << 3) | 2) as u8);
    // Encoding into a Vec cannot fail (it grows).
    let _ = p.encode_length_delimited(out);
}

/// A field's key (`field << 3 | wire type`) as a two-byte varint, for
/// fields 16 to 2047.
const fn key2(field: u32, wire_type: u32) -> [u8; 2] {
    assert!(field >= 16 && field < 2048);
    let key = (field << 3) | wire_type;
    [(key as u8) | 0x80, (key >> 7) as u8]
}

/// `TrackEvent.extra_double_counter_track_uuids` (45, varint), one per
/// record (the schema's repeated field is not packed).
const EXTRA_UUID_KEY: [u8; 2] = key2(45, 0);
/// `TrackEvent.extra_double_counter_values` (46, fixed64).
const EXTRA_VALUE_KEY: [u8; 2] = key2(46, 1);

/// Counter values at one timestamp, encoded as they come: one
/// `TYPE_COUNTER` event on the first track, the others as its extra
/// counter values, in packets of at most [`MAX_VALUES_PER_PACKET`]
/// values.
///
/// Encoded field by field rather than through the derived [`TrackEvent`]:
/// this is the writer's hot path (a thousand values per interval at 256
/// threads), and the derived message would copy every uuid and value into
/// two vectors and walk them twice (length, then bytes). Here each value
/// is encoded once, into two buffers kept from one interval to the next
/// (the extra uuids and the extra values, which the packet holds one run
/// after the other), and a packet is their two copies behind its header.
/// Same fields and numbers as [`TrackEvent`]; the tests read the result
/// with Perfetto's schema.
#[derive(Debug, Default)]
struct Batch {
    /// The values' timestamp.
    ts: u64,
    /// The first value of the packet being built (its event's own track
    /// and value).
    first: Option<(u64, f64)>,
    /// The packet's extra uuids, encoded (field 45 records).
    uuids: Vec<u8>,
    /// The packet's extra values, encoded (field 46 records).
    values: Vec<u8>,
    /// Values in the packet being built.
    len: usize,
    /// Whole packets of this timestamp: they follow every track
    /// descriptor the interval writes, so they are appended at its end.
    packets: Vec<u8>,
}

impl Batch {
    /// Starts the values stamped `ts`.
    fn begin(&mut self, ts: u64) {
        self.ts = ts;
        self.first = None;
        self.uuids.clear();
        self.values.clear();
        self.len = 0;
        self.packets.clear();
    }

    #[inline(always)]
    fn push(&mut self, seq: u32, uuid: u64, value: f64) {
        if self.first.is_none() {
            self.first = Some((uuid, value));
        } else {
            // A fixed-size copy (a few moves, where a copy of the
            // varint's own length would call memcpy), then cut to length.
            let mut rec = [0u8; 12];
            rec[..2].copy_from_slice(&EXTRA_UUID_KEY);
            let n = 2 + varint(uuid, &mut rec[2..]);
            let end = self.uuids.len() + n;
            self.uuids.extend_from_slice(&rec);
            self.uuids.truncate(end);
            let mut rec = [0u8; 10];
            rec[..2].copy_from_slice(&EXTRA_VALUE_KEY);
            rec[2..].copy_from_slice(&value.to_le_bytes());
            self.values.extend_from_slice(&rec);
        }
        self.len += 1;
        if self.len == MAX_VALUES_PER_PACKET {
            self.packet(seq);
        }
    }

    /// Encodes the packet being built (if any) into `packets`.
    fn packet(&mut self, seq: u32) {
        use prost::encoding::{
            double, encode_key, encode_varint, encoded_len_varint, uint32, uint64,
        };
        let Some((uuid, value)) = self.first.take() else {
            return;
        };
        // TrackEvent: type (9), track_uuid (11), double_counter_value
        // (44), then each extra uuid (45) and each extra value (46), not
        // packed (the schema's repeated fields are not).
        let event_len = uint32::encoded_len(9, &(event_type::COUNTER as u32))
            + uint64::encoded_len(11, &uuid)
            + 2
            + 8
            + self.uuids.len()
            + self.values.len();
        let ts = self.ts;
        let packet_len = uint64::encoded_len(8, &ts)
            + uint32::encoded_len(58, &clock::MONOTONIC)
            + uint32::encoded_len(10, &seq)
            + 1
            + encoded_len_varint(event_len as u64)
            + event_len;
        let out = &mut self.packets;
        out.reserve(1 + encoded_len_varint(packet_len as u64) + packet_len);
        out.push(((proto::TRACE_PACKET_FIELD << 3) | 2) as u8);
        encode_varint(packet_len as u64, out);
        uint64::encode(8, &ts, out);
        uint32::encode(58, &clock::MONOTONIC, out);
        uint32::encode(10, &seq, out);
        encode_key(11, prost::encoding::WireType::LengthDelimited, out);
        encode_varint(event_len as u64, out);
        uint32::encode(9, &(event_type::COUNTER as u32), out);
        uint64::encode(11, &uuid, out);
        double::encode(44, &value, out);
        out.extend_from_slice(&self.uuids);
        out.extend_from_slice(&self.values);
        self.uuids.clear();
        self.values.clear();
        self.len = 0;
    }

    /// Ends the values of this timestamp: appends their packets to `out`.
    fn end(&mut self, seq: u32, out: &mut Vec<u8>) {
        self.packet(seq);
        out.extend_from_slice(&self.packets);
        self.packets.clear();
    }
}

/// Writes `v` as a varint at the start of `buf` (10 bytes at least);
/// returns its length.
#[inline]
fn varint(mut v: u64, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    n + 1
}

/// A clock snapshot: MONOTONIC (the trace's timestamps), BOOTTIME
/// (Perfetto's default trace clock) and REALTIME, read together.
fn clock_snapshot(out: &mut Vec<u8>, seq: u32) {
    let ids = [
        Some((clock::MONOTONIC, libc::CLOCK_MONOTONIC)),
        Some((clock::REALTIME, libc::CLOCK_REALTIME)),
        // Apple systems have no BOOTTIME (their MONOTONIC counts sleep).
        #[cfg(any(target_os = "linux", target_os = "android"))]
        Some((clock::BOOTTIME, libc::CLOCK_BOOTTIME)),
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        None,
    ];
    let clocks = ids
        .into_iter()
        .flatten()
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
