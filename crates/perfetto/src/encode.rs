//! Snapshots' intervals and findings to Perfetto `TracePacket` records.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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
    /// The track's uuid; 0 while it is not described (no uuid is 0:
    /// [`Uuids`]).
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

/// A track with counters under it: a loop or a sleep site.
#[derive(Debug)]
struct Tracks<const N: usize> {
    /// Its key in [`Entities`]: the probe's id.
    key: u64,
    /// 0 until described.
    uuid: u64,
    /// Generation of the last interval that listed it (to drop the gone).
    seen: u64,
    name: Name,
    counters: [Counter; N],
}

impl<const N: usize> Tracks<N> {
    fn new(name: &str) -> Self {
        Tracks {
            key: 0,
            uuid: 0,
            seen: 0,
            name: Name::new(name),
            counters: [UNDESCRIBED; N],
        }
    }
}

/// A thread's tracks: its own and its [`THREAD_COUNTERS`], whose uuids
/// are the next numbers after its track's ([`Uuids::block`]), so that
/// only their last values are kept. The writer reads every thread's
/// entry at every interval, a second after the last time (out of cache):
/// it is kept small (112 bytes, where a [`Tracks`] of five counters takes
/// 144) and read in order.
#[derive(Debug)]
struct ThreadTracks {
    /// Its key in [`Entities`]: the thread's serial.
    key: u64,
    /// Generation of the last interval that listed it (to drop the gone).
    seen: u64,
    /// The number of its track ([`Uuids::uuid`]); counter `k` of
    /// [`THREAD_COUNTERS`] is number `+ 1 + k`. 0 until described.
    number: u64,
    name: Name,
    /// The last value written on each of [`THREAD_COUNTERS`]; NaN before
    /// the first (values written are finite, and NaN differs from every
    /// value).
    last: [f64; 5],
    /// Bit `k`: counter `k` of [`THREAD_COUNTERS`] is described.
    described: u8,
    /// OS thread id.
    tid: u64,
    /// Off-CPU time by cause (threads with eBPF only), made on first use
    /// (boxed: most threads never have it, and the entry stays small).
    off_cpu: Option<Box<[Counter; 6]>>,
}

impl ThreadTracks {
    fn new(tid: u64) -> Self {
        ThreadTracks {
            key: 0,
            seen: 0,
            number: 0,
            name: Name::new(""),
            last: [f64::NAN; 5],
            described: 0,
            tid,
            off_cpu: None,
        }
    }
}

/// In [`TraceEncoder`]'s `by_entry`: an entry no thread of the interval
/// names.
const NOT_LISTED: u32 = u32::MAX;

/// What [`Entities`] needs of an entry.
trait Entity {
    fn key(&self) -> u64;
    fn set_key(&mut self, key: u64);
    fn seen(&mut self) -> &mut u64;

    /// Marks it listed in interval `generation`; true the first time in
    /// that interval.
    fn see(&mut self, generation: u64) -> bool {
        let seen = self.seen();
        let fresh = *seen != generation;
        *seen = generation;
        fresh
    }
}

/// [`Entity`] for entries with `key` and `seen` fields.
macro_rules! entity {
    ($([$($generics:tt)*] $t:ty),*) => {$(
        impl<$($generics)*> Entity for $t {
            fn key(&self) -> u64 {
                self.key
            }
            fn set_key(&mut self, key: u64) {
                self.key = key;
            }
            fn seen(&mut self) -> &mut u64 {
                &mut self.seen
            }
        }
    )*};
}

entity!([const N: usize] Tracks<N>, [] ThreadTracks);

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
    #[inline(always)]
    fn is(&self, name: &str) -> bool {
        match self {
            Name::Inline { len, bytes } => {
                let name = name.as_bytes();
                name.len() == usize::from(*len) && same_short(&bytes[..name.len()], name)
            }
            Name::Heap(s) => **s == *name,
        }
    }
}

/// Whether `a` and `b`, of one length (at most 22 bytes, a [`Name`]
/// inline), hold the same bytes: a few overlapping word compares, inline,
/// where `==` on slices calls `memcmp` (a call per thread per interval on
/// the writer's hot path).
#[inline(always)]
fn same_short(a: &[u8], b: &[u8]) -> bool {
    fn word(s: &[u8], at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(w)
    }
    fn half(s: &[u8], at: usize) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&s[at..at + 4]);
        u32::from_ne_bytes(w)
    }
    let n = a.len();
    debug_assert_eq!(n, b.len());
    match n {
        16..=22 => {
            word(a, 0) == word(b, 0) && word(a, 8) == word(b, 8) && word(a, n - 8) == word(b, n - 8)
        }
        8..=15 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        _ => a == b,
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

/// Where each entity's entry is, by key: the sampler's thread serials and
/// probe ids are small counters it assigns from 0, so the keys of the
/// entities alive usually span not much more than their count, and a
/// plain table indexed by `key - base` (four bytes per key, a few cache
/// lines in all) finds an entry with no hashing and no second cold read;
/// keys outside the table's span (many threads came and went, so that it
/// would be mostly holes) go into a map.
#[derive(Debug, Default)]
struct Index {
    /// The key at `dense[0]`.
    base: u64,
    /// Entry positions by `key - base`; [`Index::NONE`] for none.
    dense: Vec<u32>,
    /// The keys outside `dense`.
    sparse: IdMap<u32>,
}

impl Index {
    const NONE: u32 = u32::MAX;
    /// Holes the table may hold beyond one per entity before keys go to
    /// the map.
    const SLACK: u64 = 64;

    /// The position of `key`, if it has one.
    #[inline(always)]
    fn get(&self, key: u64) -> Option<u32> {
        match self.dense.get(key.wrapping_sub(self.base) as usize) {
            Some(&at) if at != Self::NONE => Some(at),
            Some(_) => None,
            None => self.sparse.get(&key).copied(),
        }
    }

    /// Sets the position of a key that has none; `len` entities are
    /// indexed.
    fn insert(&mut self, key: u64, at: u32, len: usize) {
        let off = key.wrapping_sub(self.base);
        if self.dense.is_empty() && self.sparse.is_empty() {
            self.base = key;
            self.dense.push(at);
        } else if let Some(slot) = self.dense.get_mut(off as usize) {
            *slot = at;
        } else if key >= self.base && off < 2 * len as u64 + Self::SLACK {
            self.dense.resize(off as usize, Self::NONE);
            self.dense.push(at);
        } else {
            self.sparse.insert(key, at);
        }
    }

    /// Indexes `keys` (in entry order) anew.
    fn rebuild(&mut self, keys: impl Iterator<Item = u64> + Clone) {
        self.dense.clear();
        self.sparse.clear();
        let (len, low, high) = keys.clone().fold((0u64, u64::MAX, 0), |(n, lo, hi), k| {
            (n + 1, lo.min(k), hi.max(k))
        });
        if len == 0 {
            return;
        }
        self.base = low;
        if high - low < 2 * len + Self::SLACK {
            self.dense.resize((high - low + 1) as usize, Self::NONE);
            for (at, k) in keys.enumerate() {
                self.dense[(k - low) as usize] = at as u32;
            }
        } else {
            self.sparse
                .extend(keys.enumerate().map(|(at, k)| (k, at as u32)));
        }
    }
}

/// The threads, loops or sleep sites of a trace by key (serial or probe
/// id): their tracks side by side in one vector, found through a compact
/// [`Index`].
#[derive(Debug)]
struct Entities<T> {
    index: Index,
    tracks: Vec<T>,
}

impl<T> Default for Entities<T> {
    fn default() -> Self {
        Entities {
            index: Index::default(),
            tracks: Vec::new(),
        }
    }
}

impl<T: Entity> Entities<T> {
    /// Where `key`'s tracks are, made by `new` when it has none.
    #[inline]
    fn slot(&mut self, key: u64, new: impl FnOnce() -> T) -> usize {
        if let Some(at) = self.index.get(key) {
            return at as usize;
        }
        let at = self.tracks.len();
        self.index.insert(key, at as u32, at);
        let mut t = new();
        t.set_key(key);
        self.tracks.push(t);
        at
    }

    fn values(&self) -> std::slice::Iter<'_, T> {
        self.tracks.iter()
    }

    /// Drops the entities not listed in interval `generation`, unless all
    /// `listed` of them were (the usual case: no pass over them).
    fn forget_gone(&mut self, listed: usize, generation: u64) {
        if listed != self.tracks.len() {
            self.tracks.retain_mut(|t| *t.seen() == generation);
            self.index.rebuild(self.tracks.iter().map(Entity::key));
        }
    }
}

/// Track uuids of one writer sequence: track number `n` (1, 2, 3… in the
/// order tracks are made) gets a uuid no other track of the file has.
///
/// Short (the default, [`TraceEncoder::new`]): for sequences 1 to 7,
/// `n << 3 | sequence`, two bytes on the wire up to track 2047 (a trace of
/// 256 threads) where a sequence in the high 32 bits takes five, and
/// every counter value carries its track's uuid; from sequence 8 on,
/// `sequence << 32 | n`. The two never meet (the first are below
/// `2^35`, the second above, for fewer than `2^32` tracks per sequence,
/// which no file holds), and each is one-to-one: unique in a file whose
/// processes have sequences of their own. Wide
/// ([`TraceEncoder::for_system_trace`]): always `sequence << 32 | n`, so
/// that with a sequence salted per process the uuids stay apart from
/// those of other processes in a system trace. No uuid is 0.
#[derive(Debug, Clone, Copy)]
struct Uuids {
    sequence: u32,
    short: bool,
    /// The next track number.
    next: u64,
}

impl Uuids {
    /// Sequences whose uuids are short.
    const SHORT_SEQUENCES: u32 = 8;

    fn new(sequence: u32, short: bool) -> Self {
        Uuids {
            sequence,
            short: short && sequence < Self::SHORT_SEQUENCES,
            next: 1,
        }
    }

    /// The uuid of track number `n`.
    #[inline(always)]
    fn uuid(&self, n: u64) -> u64 {
        if self.short {
            (n << 3) | u64::from(self.sequence)
        } else {
            (u64::from(self.sequence) << 32) | n
        }
    }

    /// A new track's uuid.
    fn take(&mut self) -> u64 {
        let n = self.block(1);
        self.uuid(n)
    }

    /// Numbers for `len` new tracks: the first of them.
    fn block(&mut self, len: u64) -> u64 {
        let n = self.next;
        self.next += len;
        n
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
    /// Its writer sequence; also in its track uuids ([`Uuids`]), so that
    /// several processes share one file.
    sequence: u32,
    process_uuid: u64,
    uuids: Uuids,
    process: [Counter; 2],
    threads: Entities<ThreadTracks>,
    loops: Entities<Tracks<4>>,
    sleeps: Entities<Tracks<3>>,
    findings: HashMap<String, FindingTrack>,
    generation: u64,
    intervals: u64,
    findings_written: u64,
    findings_dropped: u64,
    /// The counter values being encoded; kept to reuse its buffers.
    batch: Batch,
    /// Per thread entry, the position in the interval being encoded of
    /// the thread that names it, or [`NOT_LISTED`] (kept to reuse).
    by_entry: Vec<u32>,
    /// Positions of threads whose serial the interval lists again (kept
    /// to reuse; the sampler lists none).
    repeated: Vec<u32>,
    /// The process's name.
    name: String,
}

impl TraceEncoder {
    /// An encoder for the process `target` (its PID and name go into the
    /// process descriptor), writing on sequence `sequence` (1 or more;
    /// give each process of one file its own, 1, 2, 3…: the first seven
    /// get track uuids of two or three bytes, where a sequence in their
    /// high 32 bits would take five for every counter value).
    pub fn new(target: &TargetIdentity, sequence: u32) -> Self {
        Self::with_uuids(target, sequence, true)
    }

    /// As [`TraceEncoder::new`], with `sequence` in the high 32 bits of
    /// every track uuid: for records that go into a system trace, beside
    /// other processes' tracks, where a sequence salted per process keeps
    /// the uuids apart from theirs.
    pub fn for_system_trace(target: &TargetIdentity, sequence: u32) -> Self {
        Self::with_uuids(target, sequence, false)
    }

    fn with_uuids(target: &TargetIdentity, sequence: u32, short: bool) -> Self {
        let sequence = sequence.max(1);
        let mut uuids = Uuids::new(sequence, short);
        TraceEncoder {
            pid: target.pid,
            sequence,
            process_uuid: uuids.take(),
            uuids,
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
            by_entry: Vec::new(),
            repeated: Vec::new(),
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
        self.uuids.take()
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
        // Disjoint borrows of the fields: one map lookup per entity at
        // most, not per value (this is the writer's whole per-interval
        // cost).
        let TraceEncoder {
            pid,
            sequence: seq,
            process_uuid,
            uuids,
            process,
            threads,
            loops,
            sleeps,
            generation,
            batch,
            by_entry,
            repeated,
            ..
        } = self;
        let (pid, seq, puuid, g) = (*pid, *seq, *process_uuid, *generation);
        let mut w = Writer {
            seq,
            uuids,
            batch,
            out,
        };
        w.batch.begin(start, w.out);
        w.put(
            puuid,
            &mut process[0],
            PROCESS_COUNTERS[0],
            None,
            Some(i.process.cpu_percent),
        );
        // The threads in the order of their entries, not the interval's
        // (most CPU first, a new order at every interval): the entries are
        // cold (last read an interval ago, and most of the writer's time
        // was spent waiting for them), and read one after the other the
        // CPU fetches them ahead, where in the interval's order it would
        // wait for each in turn. The interval was just computed: its
        // threads are in cache, in any order. First where each thread's
        // entry is (through the index, a few cache lines), then the work.
        by_entry.clear();
        by_entry.resize(threads.tracks.len(), NOT_LISTED);
        repeated.clear();
        for (n, t) in i.threads.iter().enumerate() {
            let at = threads.slot(t.serial, || ThreadTracks::new(t.tid));
            if at >= by_entry.len() {
                by_entry.resize(at + 1, NOT_LISTED);
            }
            if by_entry[at] == NOT_LISTED {
                by_entry[at] = n as u32;
            } else {
                // A serial listed twice: its later listings after the
                // others, in their order.
                repeated.push(n as u32);
            }
        }
        let mut listed = 0;
        for (at, &n) in by_entry.iter().enumerate() {
            if n == NOT_LISTED {
                continue;
            }
            let tr = &mut threads.tracks[at];
            tr.seen = g;
            listed += 1;
            thread(&mut w, tr, &i.threads[n as usize], pid, puuid, secs);
        }
        for &n in repeated.iter() {
            let t = &i.threads[n as usize];
            let at = threads.slot(t.serial, || ThreadTracks::new(t.tid));
            thread(&mut w, &mut threads.tracks[at], t, pid, puuid, secs);
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
        w.batch.end(w.out);
        w.batch.begin(i.end_monotonic_ns, w.out);
        w.put(
            puuid,
            &mut process[1],
            PROCESS_COUNTERS[1],
            None,
            Some(i.process.rss_bytes as f64),
        );
        w.batch.end(w.out);
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
                .map(|t| self.uuids.uuid(t.number)),
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
                .map(|t| self.uuids.uuid(t.number)),
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
    uuids: &'a mut Uuids,
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
            self.batch.push(self.seq, c.uuid, value, self.out);
        }
    }

    /// Sets counter `k` of [`THREAD_COUNTERS`] of thread `t` to `value`,
    /// as [`Writer::put`].
    #[inline(always)]
    fn put_thread(&mut self, t: &mut ThreadTracks, k: usize, value: Option<f64>) {
        let Some(value) = value.filter(|v| v.is_finite()) else {
            return;
        };
        let uuid = self.uuids.uuid(t.number + 1 + k as u64);
        if t.described & (1 << k) == 0 {
            t.described |= 1 << k;
            let parent = self.uuids.uuid(t.number);
            self.describe_counter_as(uuid, parent, THREAD_COUNTERS[k], None);
        }
        if t.last[k] != value {
            t.last[k] = value;
            self.batch.push(self.seq, uuid, value, self.out);
        }
    }

    /// Describes a new counter track; returns its uuid.
    #[cold]
    fn describe_counter(&mut self, parent: u64, kind: CounterKind, cause: Option<&str>) -> u64 {
        let uuid = self.uuids.take();
        self.describe_counter_as(uuid, parent, kind, cause);
        uuid
    }

    /// Describes counter track `uuid`.
    #[cold]
    fn describe_counter_as(
        &mut self,
        uuid: u64,
        parent: u64,
        kind: CounterKind,
        cause: Option<&str>,
    ) {
        let name = match cause {
            Some(cause) => format!("off-CPU {cause} %"),
            None => kind.name.to_string(),
        };
        describe(
            &mut self.batch.descriptors,
            self.seq,
            TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(parent),
                name: Some(name),
                counter: Some(kind.descriptor()),
                ..Default::default()
            },
        );
    }
}

/// Writes thread `t`'s records: its track if new or renamed, then every
/// counter whose value changed.
#[inline(always)]
fn thread(
    w: &mut Writer<'_>,
    tr: &mut ThreadTracks,
    t: &ThreadInterval,
    pid: u32,
    puuid: u64,
    secs: f64,
) {
    let seq = w.seq;
    let renamed = tr.number == 0 || !tr.name.is(&t.name);
    if renamed {
        if tr.number == 0 {
            // Its track and one number per counter.
            tr.number = w.uuids.block(1 + THREAD_COUNTERS.len() as u64);
        }
        tr.name = Name::new(&t.name);
        describe(
            &mut w.batch.descriptors,
            seq,
            TrackDescriptor {
                uuid: Some(w.uuids.uuid(tr.number)),
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
        w.put_thread(tr, n, v);
    }
    if let Some(k) = k
        && secs > 0.0
    {
        let parent = w.uuids.uuid(tr.number);
        for (n, ns) in k.off_cpu.by_cause().into_iter().enumerate() {
            // A cause never seen gets no track.
            if ns == 0 && tr.off_cpu.as_ref().is_none_or(|o| o[n].uuid == 0) {
                continue;
            }
            let pct = ns as f64 / (secs * 1e9) * 100.0;
            let off = tr.off_cpu.get_or_insert_with(|| Box::new([UNDESCRIBED; 6]));
            w.put(
                parent,
                &mut off[n],
                OFF_CPU,
                Some(OFF_CPU_CAUSES[n]),
                Some(pct),
            );
        }
    }
}

/// A probe's track (`label name` under the process), described when new.
fn probe<'m, const N: usize>(
    w: &mut Writer<'_>,
    map: &'m mut Entities<Tracks<N>>,
    id: u64,
    name: &str,
    label: &str,
    parent: u64,
) -> &'m mut Tracks<N> {
    let at = map.slot(id, || Tracks::new(name));
    let tr = &mut map.tracks[at];
    if tr.uuid == 0 {
        tr.uuid = w.uuids.take();
        describe(
            &mut w.batch.descriptors,
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
/// is encoded once, straight into the output: its extra uuid (45) and its
/// extra value (46) side by side (two repeated fields may interleave: a
/// reader takes each field's records in order, Perfetto's protozero as
/// any protobuf parser), behind a packet header whose two lengths are
/// three-byte varints filled in when the packet ends (a varint may carry
/// redundant bytes; Perfetto's own writer pads its nested lengths to four
/// bytes). Track descriptors made meanwhile go to a buffer of their own
/// and are put before the packets of their timestamp when it ends, so
/// that every track is described before its first value.
/// Same fields and numbers as [`TrackEvent`]; the tests read the result
/// with Perfetto's schema.
#[derive(Debug, Default)]
struct Batch {
    /// The values' timestamp.
    ts: u64,
    /// Where this timestamp's packets begin in the output.
    start: usize,
    /// The packet being built: where its length and its event's length
    /// are in the output (three bytes each, filled in when it ends).
    open: Option<(usize, usize)>,
    /// Values in the packet being built.
    len: usize,
    /// Track descriptors made while the packets are built (kept to reuse).
    descriptors: Vec<u8>,
}

/// Bytes of a length filled in when its message ends (lengths up to
/// 2 MiB; a packet holds at most [`MAX_VALUES_PER_PACKET`] values).
const LENGTH_BYTES: usize = 3;

impl Batch {
    /// Starts the values stamped `ts`, at the end of `out`.
    fn begin(&mut self, ts: u64, out: &[u8]) {
        self.ts = ts;
        self.start = out.len();
        self.open = None;
        self.len = 0;
        self.descriptors.clear();
    }

    #[inline(always)]
    fn push(&mut self, seq: u32, uuid: u64, value: f64, out: &mut Vec<u8>) {
        if self.open.is_none() {
            self.open_packet(seq, uuid, value, out);
        } else {
            // A fixed-size copy (a few moves, where a copy of the
            // record's own length would call memcpy), then cut to length.
            let mut rec = [0u8; 22];
            rec[..2].copy_from_slice(&EXTRA_UUID_KEY);
            let n = 2 + varint(uuid, &mut rec[2..]);
            rec[n..n + 2].copy_from_slice(&EXTRA_VALUE_KEY);
            rec[n + 2..n + 10].copy_from_slice(&value.to_le_bytes());
            let end = out.len() + n + 10;
            out.extend_from_slice(&rec);
            out.truncate(end);
        }
        self.len += 1;
        if self.len == MAX_VALUES_PER_PACKET {
            self.close(out);
        }
    }

    /// Begins a packet with its first value (its event's own track and
    /// value).
    fn open_packet(&mut self, seq: u32, uuid: u64, value: f64, out: &mut Vec<u8>) {
        use prost::encoding::{double, encode_key, uint32, uint64};
        // TracePacket: timestamp (8), its clock (58), the sequence (10),
        // the event (11); TrackEvent: type (9), track_uuid (11),
        // double_counter_value (44), then the extra uuids (45) and values
        // (46), not packed (the schema's repeated fields are not).
        out.push(((proto::TRACE_PACKET_FIELD << 3) | 2) as u8);
        let packet_at = out.len();
        out.extend_from_slice(&[0; LENGTH_BYTES]);
        uint64::encode(8, &self.ts, out);
        uint32::encode(58, &clock::MONOTONIC, out);
        uint32::encode(10, &seq, out);
        encode_key(11, prost::encoding::WireType::LengthDelimited, out);
        let event_at = out.len();
        out.extend_from_slice(&[0; LENGTH_BYTES]);
        uint32::encode(9, &(event_type::COUNTER as u32), out);
        uint64::encode(11, &uuid, out);
        double::encode(44, &value, out);
        self.open = Some((packet_at, event_at));
    }

    /// Ends the packet being built (if any): fills in its lengths.
    fn close(&mut self, out: &mut [u8]) {
        if let Some((packet_at, event_at)) = self.open.take() {
            let end = out.len();
            fill_length(out, packet_at, end);
            fill_length(out, event_at, end);
        }
        self.len = 0;
    }

    /// Ends the values of this timestamp: their last packet, and the
    /// track descriptors made meanwhile put before their packets (only
    /// when a track was made: moves the packets once).
    fn end(&mut self, out: &mut Vec<u8>) {
        self.close(out);
        if !self.descriptors.is_empty() {
            let at = self.start;
            out.splice(at..at, self.descriptors.drain(..));
        }
    }
}

/// Fills in the length at `at` (of [`LENGTH_BYTES`]) of the message that
/// runs from after it to `end`, as a varint with redundant bytes.
fn fill_length(out: &mut [u8], at: usize, end: usize) {
    let len = end - at - LENGTH_BYTES;
    debug_assert!(len < 1 << (7 * LENGTH_BYTES));
    out[at] = (len as u8 & 0x7f) | 0x80;
    out[at + 1] = ((len >> 7) as u8 & 0x7f) | 0x80;
    out[at + 2] = (len >> 14) as u8 & 0x7f;
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

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use prost::Message;
    use wakemeter::SamplerBuilder;

    use super::*;

    #[test]
    fn uuids_are_unique_in_a_file_of_many_sequences() {
        for short in [true, false] {
            let mut seen = HashSet::new();
            for sequence in 1..=20 {
                let mut u = Uuids::new(sequence, short);
                let first = u.block(6);
                for n in first..first + 6 {
                    assert!(seen.insert(u.uuid(n)), "{sequence} {n}");
                }
                for _ in 0..3000 {
                    let uuid = u.take();
                    assert_ne!(uuid, 0);
                    assert!(seen.insert(uuid), "{sequence} {uuid}");
                }
            }
        }
        // Short: two bytes on the wire up to track 2047.
        assert!(Uuids::new(7, true).uuid(2047) < 1 << 14);
        assert_eq!(Uuids::new(8, true).uuid(5), (8 << 32) | 5);
        assert_eq!(Uuids::new(1, false).uuid(5), (1 << 32) | 5);
    }

    #[test]
    fn index_finds_dense_and_scattered_keys() {
        let mut index = Index::default();
        let keys: Vec<u64> = (0..300).chain([100_000, 7, 5_000_000]).collect();
        let mut added = Vec::new();
        for &k in &keys {
            if index.get(k).is_none() {
                index.insert(k, added.len() as u32, added.len());
                added.push(k);
            }
        }
        for (at, &k) in added.iter().enumerate() {
            assert_eq!(index.get(k), Some(at as u32), "{k}");
        }
        assert_eq!(index.get(300), None);
        assert_eq!(index.get(99_999), None);
        // Dense after a rebuild of close keys, a map for scattered ones.
        for kept in [vec![250u64, 260, 299, 280], vec![3, 1_000_000, 40]] {
            index.rebuild(kept.iter().copied());
            for (at, &k) in kept.iter().enumerate() {
                assert_eq!(index.get(k), Some(at as u32), "{k}");
            }
            assert_eq!(index.get(0), None);
            assert_eq!(index.get(270), None);
        }
        index.rebuild(std::iter::empty());
        assert_eq!(index.get(3), None);
        index.insert(12, 0, 0);
        assert_eq!(index.get(12), Some(0));
    }

    #[test]
    fn short_names_compare_by_words() {
        for len in 0..=22usize {
            let a: Vec<u8> = (0..len as u8).map(|b| b'a' + b).collect();
            assert!(same_short(&a, &a.clone()));
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_short(&a, &b), "{len} {at}");
            }
            let name = std::str::from_utf8(&a).expect("ascii");
            assert!(Name::new(name).is(name));
            assert!(!Name::new(name).is(&format!("{name}x")));
        }
    }

    /// Reads records back: track names by uuid, and the last value of each
    /// counter track.
    fn read(bytes: &[u8]) -> (HashMap<u64, TrackDescriptor>, HashMap<u64, f64>) {
        let (mut tracks, mut values) = (HashMap::new(), HashMap::new());
        let mut buf = bytes;
        while !buf.is_empty() {
            assert_eq!(buf[0], 0x0a);
            buf = &buf[1..];
            let p = TracePacket::decode_length_delimited(&mut buf).expect("packet");
            if let Some(d) = p.track_descriptor {
                tracks.insert(d.uuid.expect("uuid"), d);
            }
            if let Some(e) = p.track_event {
                values.insert(
                    e.track_uuid.expect("track"),
                    e.double_counter_value.expect("v"),
                );
                for (u, v) in e
                    .extra_double_counter_track_uuids
                    .iter()
                    .zip(&e.extra_double_counter_values)
                {
                    values.insert(*u, *v);
                }
            }
        }
        (tracks, values)
    }

    /// Threads in any order, with scattered serials and a serial listed
    /// twice: each thread's CPU % is its last listing's.
    #[test]
    fn threads_in_any_order_with_scattered_and_repeated_serials() {
        let _workers: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(2))))
            .collect();
        let s = SamplerBuilder::new().build().expect("sampler");
        s.sample().expect("sample");
        s.sample().expect("sample");
        let base = s.latest_interval().expect("interval");
        assert!(base.threads.len() >= 5);
        let mut e = TraceEncoder::new(s.target_identity(), 2);
        let mut out = Vec::new();
        e.header(&mut out);
        for round in 0..4u64 {
            let mut i = base.clone();
            for (n, t) in i.threads.iter_mut().enumerate() {
                // From round 2 on, other serials (new threads with the
                // same TIDs, as reused TIDs), scattered: a map, not a table.
                t.serial = if round >= 2 {
                    n as u64 * 1_000_003 + 1_000
                } else {
                    n as u64
                };
                t.cpu_percent = (round * 100 + n as u64) as f64;
            }
            i.threads.reverse();
            if round % 2 == 1 {
                // Round 1 and 3: the first thread again, later, with
                // another value.
                let mut again = i.threads[0].clone();
                again.cpu_percent = 0.5 + round as f64;
                i.threads.push(again);
            }
            e.interval(&i, &mut out);
            let (tracks, values) = read(&out);
            // A reused TID's newest track (uuids grow).
            let mut by_tid: HashMap<u64, u64> = HashMap::new();
            for (u, d) in &tracks {
                if let Some(tid) = d.thread.as_ref().and_then(|t| t.tid) {
                    let newest = by_tid.entry(tid as u64).or_insert(*u);
                    *newest = (*newest).max(*u);
                }
            }
            let mut want: HashMap<u64, f64> = HashMap::new();
            for t in &i.threads {
                want.insert(t.tid, t.cpu_percent);
            }
            for (tid, v) in want {
                let thread = by_tid[&tid];
                let cpu = tracks
                    .iter()
                    .find(|(_, d)| {
                        d.parent_uuid == Some(thread) && d.name.as_deref() == Some("CPU %")
                    })
                    .map(|(u, _)| *u)
                    .expect("CPU % track");
                assert_eq!(values[&cpu], v, "round {round} tid {tid}");
            }
        }
    }
}
