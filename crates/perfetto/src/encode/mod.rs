//! Snapshots' intervals and findings to Perfetto `TracePacket` records.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use prost::Message;
use wakemeter::{Finding, Interval, Subject, TargetIdentity, ThreadInterval};

use crate::proto::{
    self, Clock, ClockSnapshot, CounterDescriptor, DebugAnnotation, ProcessDescriptor,
    ThreadDescriptor, TracePacket, TrackDescriptor, TrackEvent, clock, event_type, unit,
};

mod counters;
use counters::*;
mod tracks;
use tracks::*;
mod writer;
use writer::*;
mod timebase;
use timebase::*;
#[cfg(test)]
mod tests;

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
