//! A trace file that follows a sampler: the consumer thread, the size cap
//! and what happens when the disk is full.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use wakemeter::{Finding, Interval, SampleWait, Sampler};

use crate::encode::{CLOSE_BYTES_PER_FINDING, MAX_OPEN_FINDINGS, TraceEncoder};
use crate::error::Error;

/// Default size cap of a trace file: 256 MiB (several hours at 1 Hz of 256
/// busy threads: BENCHMARKS.md, "Perfetto trace writer").
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// Bytes kept free under the cap to close every open finding.
const CLOSE_RESERVE: u64 = MAX_OPEN_FINDINGS as u64 * CLOSE_BYTES_PER_FINDING;
/// Smallest cap accepted: the first records and the closing reserve.
pub const MIN_MAX_BYTES: u64 = CLOSE_RESERVE + 4096;
/// How often the writer thread looks at its stop flag while no snapshot
/// comes (it bounds how long dropping the guard waits).
const STOP_CHECK_EVERY: Duration = Duration::from_millis(200);

/// How a trace is written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceConfig {
    /// Size cap of the file, in bytes (default [`DEFAULT_MAX_BYTES`]): the
    /// trace ends, complete, before a snapshot's records would pass it.
    pub max_bytes: u64,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

impl TraceConfig {
    /// Sets the size cap, in bytes (at least [`MIN_MAX_BYTES`]).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
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
    /// trace of everything before.
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

/// What a trace holds so far.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TraceStatus {
    /// The file.
    pub path: PathBuf,
    /// Bytes in the file, all of them whole records.
    pub bytes_written: u64,
    /// Sampling intervals written.
    pub intervals: u64,
    /// Finding slices begun.
    pub findings: u64,
    /// Set when the trace stopped taking intervals early; the file is
    /// still a complete trace of what came before.
    pub ended: Option<TraceEnd>,
}

/// The file, behind one lock shared by every process written to it.
struct Sink {
    file: File,
    status: TraceStatus,
    max_bytes: u64,
    /// The next writer sequence (one per process).
    next_sequence: u32,
    /// Processes whose finding slices may still need closing.
    open_processes: u64,
}

impl Sink {
    /// Writes `buf` after the last whole record, in one `pwrite` when it
    /// fits (a process killed by a signal never leaves half a record),
    /// unless that would pass `limit`. On failure the file is cut back to
    /// its whole records.
    fn append(&mut self, buf: &[u8], limit: u64) -> Result<(), TraceEnd> {
        let len = buf.len() as u64;
        if self.status.bytes_written.saturating_add(len) > limit {
            return Err(TraceEnd::SizeCap {
                max_bytes: self.max_bytes,
            });
        }
        let at = self.status.bytes_written;
        if let Err(e) = self.file.write_all_at(buf, at) {
            // What was written of this record is cut off, so the file
            // ends on a whole record.
            let _ = self.file.set_len(at);
            return Err(TraceEnd::WriteFailed {
                message: e.to_string(),
            });
        }
        self.status.bytes_written += len;
        Ok(())
    }

    /// The limit for intervals: the cap less the room kept to close the
    /// findings of every process written.
    fn interval_limit(&self) -> u64 {
        self.max_bytes
            .saturating_sub(CLOSE_RESERVE.saturating_mul(self.open_processes))
    }
}

fn lock(m: &Mutex<Sink>) -> MutexGuard<'_, Sink> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
    /// Creates (or truncates) the file at `path`.
    ///
    /// # Errors
    /// [`Error::Create`] when the file cannot be created or written (call
    /// it before sampling starts, so a bad path stops everything first);
    /// [`Error::CapTooSmall`] under [`MIN_MAX_BYTES`].
    pub fn create(path: impl AsRef<Path>, config: TraceConfig) -> Result<PerfettoFile, Error> {
        if config.max_bytes < MIN_MAX_BYTES {
            return Err(Error::CapTooSmall {
                max_bytes: config.max_bytes,
                min_bytes: MIN_MAX_BYTES,
            });
        }
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|source| Error::Create {
                path: path.clone(),
                source,
            })?;
        Ok(PerfettoFile {
            sink: Arc::new(Mutex::new(Sink {
                file,
                status: TraceStatus {
                    path,
                    ..Default::default()
                },
                max_bytes: config.max_bytes,
                next_sequence: 1,
                open_processes: 0,
            })),
        })
    }

    /// Starts writing `sampler`'s process: its process track now, then
    /// one interval per [`ProcessTrace::poll`] from the newest snapshot
    /// stored now on.
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
        if let Err(end) = sink.append(&buf, limit) {
            let message = end.to_string();
            sink.status.ended = Some(end);
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
            diverged: false,
        })
    }

    /// What the file holds so far.
    pub fn status(&self) -> TraceStatus {
        lock(&self.sink).status.clone()
    }
}

/// One process's part of a [`PerfettoFile`]: writes the intervals of its
/// sampler when polled. Dropping it ([`ProcessTrace::finish`]) writes
/// what was stored since the last poll and ends its open finding slices.
pub struct ProcessTrace {
    sink: Arc<Mutex<Sink>>,
    encoder: TraceEncoder,
    sampler: Sampler,
    /// The newest snapshot written up to.
    last: Option<u64>,
    buf: Vec<u8>,
    closed: bool,
    /// The finding slices open in the file (not only in the encoder).
    written_open: Vec<(u64, u64)>,
    /// A write of this process failed or was refused: the encoder holds
    /// tracks and slices the file does not, so only `written_open` may be
    /// closed.
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
    /// Writes the interval from the last snapshot written to the newest
    /// one stored, with the findings then (nothing if none is newer, or
    /// once the trace has ended). The work is counted as the sampler's
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
            _ => return true,
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
            .interval_between(from, newest)
            .or_else(|| self.sampler.latest_interval());
        self.last = Some(newest);
        let Some(i) = interval else {
            return true;
        };
        let findings = self.sampler.findings();
        let s = self.sampler.clone();
        s.account(|| self.write(&i, &findings))
    }

    /// Encodes and writes one interval and its findings.
    fn write(&mut self, i: &Interval, findings: &[Finding]) -> bool {
        let findings_before = self.encoder.findings_written();
        self.buf.clear();
        self.encoder.interval(i, &mut self.buf);
        self.encoder
            .findings(i.end_monotonic_ns, findings, &mut self.buf);
        let mut sink = lock(&self.sink);
        let limit = sink.interval_limit();
        match sink.append(&self.buf, limit) {
            Ok(()) => {
                sink.status.intervals += 1;
                sink.status.findings += self.encoder.findings_written() - findings_before;
                drop(sink);
                if self.encoder.open_findings() > 0 || !self.written_open.is_empty() {
                    self.written_open = self.encoder.open_slices();
                }
                true
            }
            Err(end) => {
                sink.status.ended = Some(end);
                self.diverged = true;
                false
            }
        }
    }

    /// Intervals this process has written.
    pub fn intervals(&self) -> u64 {
        self.encoder.intervals()
    }

    /// Writes what was stored since the last poll and ends the open
    /// finding slices; later polls write nothing.
    pub fn finish(mut self) {
        self.close();
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.poll();
        self.buf.clear();
        if self.diverged {
            self.encoder.end_slices(&self.written_open, &mut self.buf);
        } else {
            self.encoder.finish(&mut self.buf);
        }
        let mut sink = lock(&self.sink);
        sink.open_processes = sink.open_processes.saturating_sub(1);
        if !self.buf.is_empty() {
            let max = sink.max_bytes;
            if let Err(end) = sink.append(&self.buf, max) {
                sink.status.ended.get_or_insert(end);
            }
        }
        let _ = sink.file.sync_data();
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
/// finding slices; after each snapshot the file is already a complete
/// trace, so a process that is killed leaves a readable file.
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
    /// Creates (or truncates) the file at `path`, writes the trace's first
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
                    if let SampleWait::Stored { seq } = s.wait_for_sample(last, STOP_CHECK_EVERY) {
                        last = Some(seq);
                        if !process.poll() {
                            break;
                        }
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

    /// What the file holds so far.
    pub fn status(&self) -> TraceStatus {
        self.file.status()
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
