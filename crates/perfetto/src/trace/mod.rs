//! A trace file that follows a sampler: the consumer thread, the write
//! buffer, the size cap and what happens when the disk is full.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use wakemeter::{Finding, Interval, SampleWait, Sampler};

use crate::encode::{CLOSE_BYTES_PER_FINDING, MAX_OPEN_FINDINGS, TraceEncoder};
use crate::error::Error;

mod sink;

use sink::{Sink, lock};

/// Default size cap of a trace file: 256 MiB (several hours at 1 Hz of 256
/// busy threads: BENCHMARKS.md, "Perfetto trace writer").
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// Bytes kept free under the cap to close every open finding.
const CLOSE_RESERVE: u64 = MAX_OPEN_FINDINGS as u64 * CLOSE_BYTES_PER_FINDING;
/// Smallest cap accepted: the first records and the closing reserve.
pub const MIN_MAX_BYTES: u64 = CLOSE_RESERVE + 4096;
/// Default of [`TraceConfig::flush_bytes`]: 64 KiB (about seven intervals
/// of 256 busy threads).
pub const DEFAULT_FLUSH_BYTES: u64 = 64 * 1024;
/// Default of [`TraceConfig::flush_every`]: 5 s, the most a crash loses.
pub const DEFAULT_FLUSH_EVERY: Duration = Duration::from_secs(5);
/// How often the writer thread looks at its stop flag while no snapshot
/// comes (it bounds how long dropping the guard waits, and how late a
/// buffer past its age is written when sampling has stopped).
const STOP_CHECK_EVERY: Duration = Duration::from_millis(200);
/// Most of the write buffer allocated up front (a larger
/// [`TraceConfig::flush_bytes`] grows it as records come).
const PENDING_CAPACITY_MAX: u64 = 4 * 1024 * 1024;
/// Room in the write buffer past [`TraceConfig::flush_bytes`]: the last
/// interval's records before it is written (about 40 KB for the first of
/// 256 threads, with every track's descriptor; 8 KB after).
const PENDING_SLACK: u64 = 48 * 1024;

/// How a trace is written.
///
/// The records of each interval are buffered in memory and written with
/// one `pwrite` when the buffer passes [`TraceConfig::flush_bytes`] or
/// its oldest record [`TraceConfig::flush_every`] (checked at each poll:
/// at each snapshot, and every 200 ms on [`PerfettoTrace`]'s thread), at
/// [`PerfettoFile::flush`], and always when the trace is finished or
/// dropped. A write of about 10 KB costs 25 to 40 µs on a loaded ext4,
/// more than encoding the interval: buffering takes it out of most
/// snapshots. What a crash (`SIGKILL`, a power cut) loses is the buffer:
/// at most the intervals of the last `flush_every`; the file is still a
/// complete trace of everything before. Set both to zero to write each
/// interval as it comes. On Linux and Android the file's blocks are
/// allocated ahead of its writes, four writes' worth (at most 1 MiB; its
/// size unchanged, so a reader always finds it ending on a whole record):
/// a killed process leaves that much allocated past the end, which a
/// finished trace lets go, as does [`PerfettoFile::give_back`] (for a
/// sibling output that finds the disk full).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceConfig {
    /// Size cap of the file, in bytes (default [`DEFAULT_MAX_BYTES`]): the
    /// trace ends, complete, before a snapshot's records would pass it.
    /// Buffered records count: the file never passes the cap.
    pub max_bytes: u64,
    /// Bytes of records held in memory before they are written (default
    /// [`DEFAULT_FLUSH_BYTES`]); 0 writes at every poll.
    pub flush_bytes: u64,
    /// Longest time a record is held in memory before it is written
    /// (default [`DEFAULT_FLUSH_EVERY`]); zero writes at every poll. What a
    /// crash loses at most.
    pub flush_every: Duration,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            max_bytes: DEFAULT_MAX_BYTES,
            flush_bytes: DEFAULT_FLUSH_BYTES,
            flush_every: DEFAULT_FLUSH_EVERY,
        }
    }
}

impl TraceConfig {
    /// Sets the size cap, in bytes (at least [`MIN_MAX_BYTES`]).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Sets [`TraceConfig::flush_bytes`].
    pub fn with_flush_bytes(mut self, flush_bytes: u64) -> Self {
        self.flush_bytes = flush_bytes;
        self
    }

    /// Sets [`TraceConfig::flush_every`].
    pub fn with_flush_every(mut self, flush_every: Duration) -> Self {
        self.flush_every = flush_every;
        self
    }
}

/// Why a trace stopped taking new intervals before it was finished.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceEnd {
    /// The next snapshot's records would have passed the size cap.
    SizeCap {
        /// The cap, in bytes.
        max_bytes: u64,
    },
    /// A write failed (a full disk: `ENOSPC`, a quota, an I/O error); the
    /// file was cut back to the last whole record, so it is a readable
    /// trace of everything written before (the buffered records that
    /// write carried are lost, and no longer counted in the status).
    WriteFailed {
        /// The OS error, as text.
        message: String,
    },
}

impl std::fmt::Display for TraceEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TraceEnd::SizeCap { max_bytes } => {
                write!(f, "the size cap of {max_bytes} bytes was reached")
            }
            TraceEnd::WriteFailed { message } => write!(f, "a write failed: {message}"),
        }
    }
}

/// What a trace holds so far: in the file, or buffered to go into it
/// with the next write ([`TraceConfig`]). Once the trace is finished (or
/// dropped), everything counted is in the file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TraceStatus {
    /// The file.
    pub path: PathBuf,
    /// Bytes in the file, all of them whole records (the buffered bytes
    /// are not counted here, but in [`TraceStatus::bytes_buffered`]).
    pub bytes_written: u64,
    /// Bytes of whole records taken and held in memory, written with the
    /// next write; what a crash would lose.
    pub bytes_buffered: u64,
    /// Sampling periods taken, in the file or buffered; a failed write
    /// takes back those it carried.
    pub intervals: u64,
    /// Finding slices begun, in the file or buffered (as `intervals`).
    pub findings: u64,
    /// Set when the trace stopped taking intervals early; the file is
    /// still a complete trace of what came before.
    pub ended: Option<TraceEnd>,
}

/// A Perfetto trace file of one or more processes: each added
/// [`Sampler`] becomes a [`ProcessTrace`] writing on its own sequence,
/// with its own tracks, into the one file. Cheap to clone.
#[derive(Clone)]
pub struct PerfettoFile {
    sink: Arc<Mutex<Sink>>,
}

impl std::fmt::Debug for PerfettoFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfettoFile")
            .field("status", &self.status())
            .finish()
    }
}

impl PerfettoFile {
    /// Creates the file at `path`, the one safe way of
    /// [`wakemeter_outfile`]: a new file made beside the name (no link
    /// followed, in a directory other users cannot change) and renamed
    /// over it at once, so the name shows a complete trace from the first
    /// write on, also after a `SIGKILL`; a device or FIFO only when the
    /// name itself is one (written in sequence); never through a link.
    ///
    /// # Errors
    /// [`Error::Create`] when the file cannot be created or written (call
    /// it before sampling starts, so a bad path stops everything first):
    /// a link at the name, a directory other users can change, ...;
    /// [`Error::CapTooSmall`] under [`MIN_MAX_BYTES`].
    pub fn create(path: impl AsRef<Path>, config: TraceConfig) -> Result<PerfettoFile, Error> {
        PerfettoFile::create_until(path, config, None)
    }

    /// As [`PerfettoFile::create`]; a wait for a FIFO's reader gives up
    /// once `stop` is set (looked at every 50 ms).
    ///
    /// # Errors
    /// As [`PerfettoFile::create`].
    pub fn create_until(
        path: impl AsRef<Path>,
        config: TraceConfig,
        stop: Option<&AtomicBool>,
    ) -> Result<PerfettoFile, Error> {
        if config.max_bytes < MIN_MAX_BYTES {
            return Err(Error::CapTooSmall {
                max_bytes: config.max_bytes,
                min_bytes: MIN_MAX_BYTES,
            });
        }
        let path = path.as_ref().to_path_buf();
        let mut options = wakemeter_outfile::Options::new(wakemeter_outfile::Publish::Now);
        options.stop = stop;
        let out = wakemeter_outfile::OutFile::create(&path, options).map_err(|e| {
            let source = match e {
                wakemeter_outfile::Error::Io { source, .. } => source,
                other => std::io::Error::other(other.to_string()),
            };
            Error::Create {
                path: path.clone(),
                source,
            }
        })?;
        let regular = out.is_regular();
        // Published at once: the file is under its name already, and a
        // finish has nothing more to do than the syncs the trace makes.
        let file = out.file().try_clone().map_err(|source| Error::Create {
            path: path.clone(),
            source,
        })?;
        drop(out);
        Ok(PerfettoFile {
            sink: Arc::new(Mutex::new(Sink {
                file,
                regular,
                status: TraceStatus {
                    path,
                    ..Default::default()
                },
                max_bytes: config.max_bytes,
                flush_bytes: config.flush_bytes,
                flush_every: config.flush_every,
                next_sequence: 1,
                open_processes: 0,
                // Sized once for a full buffer and an interval past it:
                // growing it by doubling over the first writes cost 13-23
                // us a poll (copies, and pages the process touches for the
                // first time), against 2 us for the same records once it
                // has its size.
                pending: Vec::with_capacity(
                    (config.flush_bytes.min(PENDING_CAPACITY_MAX) + PENDING_SLACK) as usize,
                ),
                pending_since: None,
                pending_intervals: 0,
                pending_findings: 0,
                writes: 0,
                reserved: 0,
                reserve: regular,
            })),
        })
    }

    /// Starts writing `sampler`'s process: its process track now (written
    /// at once, with what is buffered), then one interval per
    /// [`ProcessTrace::poll`] from the newest snapshot stored now on.
    ///
    /// # Errors
    /// [`Error::Create`] when its first records cannot be written; a trace
    /// that already ended ([`TraceStatus::ended`]) takes no new process.
    pub fn add(&self, sampler: &Sampler) -> Result<ProcessTrace, Error> {
        let mut sink = lock(&self.sink);
        let path = sink.status.path.clone();
        let create = |message: String| Error::Create {
            path,
            source: std::io::Error::other(message),
        };
        if let Some(end) = &sink.status.ended {
            return Err(create(format!("the trace has ended: {end}")));
        }
        let sequence = sink.next_sequence;
        let mut encoder = TraceEncoder::new(sampler.target_identity(), sequence);
        let mut buf = Vec::new();
        encoder.header(&mut buf);
        let limit = sink.interval_limit().saturating_sub(CLOSE_RESERVE);
        // Written now, so that a path that cannot take it fails here.
        if let Err(end) = sink.push(&buf, limit, 0, 0).and_then(|()| sink.flush()) {
            let message = end.to_string();
            sink.end(end);
            return Err(create(message));
        }
        sink.next_sequence += 1;
        sink.open_processes += 1;
        drop(sink);
        Ok(ProcessTrace {
            sink: self.sink.clone(),
            encoder,
            sampler: sampler.clone(),
            last: sampler.latest().map(|s| s.seq),
            buf,
            closed: false,
            written_open: Vec::new(),
            buffered_open: None,
            diverged: false,
        })
    }

    /// What the file holds so far, with what is buffered for it.
    pub fn status(&self) -> TraceStatus {
        lock(&self.sink).status.clone()
    }

    /// Lets go of the blocks allocated ahead of the file's writes, and
    /// allocates none from now on: for a sibling output (a recording
    /// beside the trace) that finds the disk full. Returns whether blocks
    /// were given back (worth trying that write again).
    pub fn give_back(&self) -> bool {
        let mut sink = lock(&self.sink);
        sink.reserve = false;
        sink.release()
    }

    /// Writes the buffered records now, so that the file holds every
    /// interval taken (and a crash loses nothing taken so far).
    ///
    /// # Errors
    /// The [`TraceEnd::WriteFailed`] of a write that failed: the trace has
    /// ended ([`TraceStatus::ended`]), the file is cut back to its whole
    /// records.
    pub fn flush(&self) -> Result<(), TraceEnd> {
        let mut sink = lock(&self.sink);
        sink.flush().inspect_err(|end| sink.end(end.clone()))
    }
}

/// One process's part of a [`PerfettoFile`]: takes the intervals of its
/// sampler when polled (into the file's buffer: [`TraceConfig`]).
/// Dropping it ([`ProcessTrace::finish`]) takes what was stored since the
/// last poll, ends its open finding slices and writes the buffer.
pub struct ProcessTrace {
    sink: Arc<Mutex<Sink>>,
    encoder: TraceEncoder,
    sampler: Sampler,
    /// The newest snapshot written up to.
    last: Option<u64>,
    buf: Vec<u8>,
    closed: bool,
    /// The finding slices open in the file (not only in the encoder or
    /// the buffer).
    written_open: Vec<(u64, u64)>,
    /// The slices open after this process's newest buffered records, with
    /// the sink's write count when they were taken: once it has moved,
    /// they are in the file and become `written_open`.
    buffered_open: Option<(u64, Vec<(u64, u64)>)>,
    /// Records of this process were refused or lost with a failed write:
    /// the encoder holds tracks and slices the file does not, so only
    /// `written_open` may be closed.
    diverged: bool,
}

impl std::fmt::Debug for ProcessTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessTrace")
            .field("pid", &self.sampler.target_identity().pid)
            .field("intervals", &self.encoder.intervals())
            .finish()
    }
}

impl ProcessTrace {
    /// Takes the interval from the last snapshot taken to the newest one
    /// stored, with the findings then (nothing if none is newer, or once
    /// the trace has ended), and writes the buffer when it is due
    /// ([`TraceConfig`]), also when nothing was new. The interval is the
    /// one the sampler shares with every follower of its snapshots
    /// ([`Sampler::interval_between_shared`]): computed here only when no
    /// other follower did first. The work is counted as the sampler's
    /// overhead: the interval and the findings count themselves, the
    /// encoding and the write through [`Sampler::account`]. Returns
    /// whether the trace still takes intervals.
    pub fn poll(&mut self) -> bool {
        if lock(&self.sink).status.ended.is_some() {
            return false;
        }
        // The newest seq without copying the snapshot out of history.
        let newest = match self.sampler.wait_for_sample(self.last, Duration::ZERO) {
            SampleWait::Stored { seq } => seq,
            _ => return self.flush_if_due(),
        };
        // Added before the first snapshot: the first interval starts at
        // the oldest one (copied once).
        let from = match self.last {
            Some(from) => from,
            None => {
                let s = &self.sampler;
                match s.account(|| s.snapshots().first().map(|first| first.seq)) {
                    Some(seq) => seq,
                    None => return true,
                }
            }
        };
        if newest <= from {
            self.last = Some(newest);
            return true;
        }
        let interval = self
            .sampler
            .interval_between_shared(from, newest)
            .or_else(|| self.sampler.latest_interval_shared());
        self.last = Some(newest);
        let Some(i) = interval else {
            return true;
        };
        // The findings kept for every reader, read in place.
        let s = self.sampler.clone();
        s.with_findings(|findings| s.account(|| self.write(&i, findings)))
    }

    /// Writes the buffer if its oldest record is past its age (when no
    /// snapshot comes, the buffer still goes out). Returns whether the
    /// trace still takes intervals.
    fn flush_if_due(&mut self) -> bool {
        let mut sink = lock(&self.sink);
        if sink.due()
            && let Err(end) = sink.flush()
        {
            sink.end(end);
        }
        settle(&mut self.buffered_open, &mut self.written_open, &sink);
        sink.status.ended.is_none()
    }

    /// Encodes one interval and its findings into the file's buffer
    /// (straight after its records, under its lock: one copy of the
    /// records fewer).
    fn write(&mut self, i: &Interval, findings: &[Finding]) -> bool {
        let findings_before = self.encoder.findings_written();
        let mut guard = lock(&self.sink);
        let sink = &mut *guard;
        settle(&mut self.buffered_open, &mut self.written_open, sink);
        let limit = sink.interval_limit();
        let writes = sink.writes;
        let start = sink.pending.len();
        let mut taking = Taking {
            pending: &mut sink.pending,
            start,
            done: false,
        };
        self.encoder.interval(i, taking.pending);
        self.encoder
            .findings(i.end_monotonic_ns, findings, taking.pending);
        taking.done = true;
        drop(taking);
        let begun = self.encoder.findings_written() - findings_before;
        match sink.take(start, limit, 1, begun) {
            Ok(()) => {
                // No allocation while no finding is open.
                let open = match self.encoder.open_findings() {
                    0 => Vec::new(),
                    _ => self.encoder.open_slices(),
                };
                self.buffered_open = Some((writes, open));
                settle(&mut self.buffered_open, &mut self.written_open, sink);
                true
            }
            Err(end) => {
                sink.end(end);
                self.diverged = true;
                false
            }
        }
    }

    /// Intervals this process has taken (written, or buffered to be).
    pub fn intervals(&self) -> u64 {
        self.encoder.intervals()
    }

    /// Takes what was stored since the last poll, ends the open finding
    /// slices and writes the buffer (with what other processes of the
    /// file buffered); later polls write nothing.
    pub fn finish(mut self) {
        self.close();
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.poll();
        let mut sink = lock(&self.sink);
        // What this process took is written first, so that which of its
        // slices the file holds open is known.
        if let Err(end) = sink.flush() {
            sink.end(end);
        }
        settle(&mut self.buffered_open, &mut self.written_open, &sink);
        if self.buffered_open.is_some() {
            // Its last records were lost with a failed write.
            self.diverged = true;
        }
        self.buf.clear();
        if self.diverged {
            self.encoder.end_slices(&self.written_open, &mut self.buf);
        } else {
            self.encoder.finish(&mut self.buf);
        }
        sink.open_processes = sink.open_processes.saturating_sub(1);
        if !self.buf.is_empty() {
            let max = sink.max_bytes;
            if let Err(end) = sink.push(&self.buf, max, 0, 0).and_then(|()| sink.flush()) {
                sink.end(end);
            }
        }
        if sink.open_processes == 0 {
            let _ = sink.release();
        }
        let _ = sink.file.sync_data();
    }
}

/// Records being encoded into the file's buffer: cut off again if the
/// encoding unwinds before it is `done`, so that the buffer (written when
/// the file is dropped) holds whole records only.
struct Taking<'a> {
    pending: &'a mut Vec<u8>,
    start: usize,
    done: bool,
}

impl Drop for Taking<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.pending.truncate(self.start);
        }
    }
}

/// Notes that a process's buffered records reached the file (their open
/// slices are now the file's), once the sink has written since they were
/// taken.
fn settle(
    buffered: &mut Option<(u64, Vec<(u64, u64)>)>,
    written: &mut Vec<(u64, u64)>,
    sink: &Sink,
) {
    if let Some((at, _)) = buffered
        && sink.writes > *at
        && let Some((_, open)) = buffered.take()
    {
        *written = open;
    }
}

impl Drop for ProcessTrace {
    fn drop(&mut self) {
        self.close();
    }
}

/// A Perfetto trace file of one [`Sampler`]'s process, written by a
/// thread of its own that wakes only when the sampler stores a snapshot
/// ([`Sampler::wait_for_sample`]); its work is counted as the sampler's
/// overhead ([`Sampler::account`]). Dropping it (or
/// [`PerfettoTrace::finish`]) writes the last snapshots and ends the open
/// finding slices. The intervals are buffered and written every
/// [`TraceConfig::flush_every`] (5 s) or [`TraceConfig::flush_bytes`]
/// (64 KiB); the file is a complete trace after every write, so a process
/// that is killed leaves a readable file, without the intervals of at
/// most the last `flush_every`.
pub struct PerfettoTrace {
    file: PerfettoFile,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for PerfettoTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfettoTrace")
            .field("status", &self.status())
            .finish()
    }
}

impl PerfettoTrace {
    /// Creates the file at `path` ([`PerfettoFile::create`]), writes the trace's first
    /// records and starts following `sampler`: one interval per stored
    /// snapshot, from the next one on. Start sampling
    /// ([`Sampler::start`]) before or after.
    ///
    /// # Errors
    /// As [`PerfettoFile::create`] and [`PerfettoFile::add`] (before
    /// anything is sampled); [`Error::Spawn`].
    pub fn start(
        sampler: &Sampler,
        path: impl AsRef<Path>,
        config: TraceConfig,
    ) -> Result<PerfettoTrace, Error> {
        let file = PerfettoFile::create(path, config)?;
        let mut process = file.add(sampler)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, s) = (stop.clone(), sampler.clone());
        let handle = std::thread::Builder::new()
            .name("wakemeter-perfetto".to_string())
            .spawn(move || {
                let mut last = process.last;
                while !flag.load(Ordering::Acquire) {
                    // The timeout only bounds how long a dropped guard
                    // waits for this thread; writes follow the sampler.
                    let taking = match s.wait_for_sample(last, STOP_CHECK_EVERY) {
                        SampleWait::Stored { seq } => {
                            last = Some(seq);
                            process.poll()
                        }
                        // No snapshot: the buffer still goes out at its age.
                        _ => process.flush_if_due(),
                    };
                    if !taking {
                        break;
                    }
                }
                process.finish();
            })
            .map_err(Error::Spawn)?;
        Ok(PerfettoTrace {
            file,
            stop,
            handle: Some(handle),
        })
    }

    /// What the file holds so far, with what is buffered for it.
    pub fn status(&self) -> TraceStatus {
        self.file.status()
    }

    /// Writes the buffered records now ([`PerfettoFile::flush`]); the
    /// snapshot the writer thread is taking, if any, may stay buffered.
    ///
    /// # Errors
    /// As [`PerfettoFile::flush`].
    pub fn flush(&self) -> Result<(), TraceEnd> {
        self.file.flush()
    }

    /// Writes the snapshots stored so far, ends the open finding slices,
    /// stops the writer thread and returns the final status.
    pub fn finish(mut self) -> TraceStatus {
        self.stop_thread();
        self.status()
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for PerfettoTrace {
    fn drop(&mut self) {
        self.stop_thread();
    }
}
