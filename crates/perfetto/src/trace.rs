//! A trace file that follows a sampler: the consumer thread, the size cap
//! and what happens when the disk is full.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use wakemeter::{SampleWait, Sampler};

use crate::encode::{CLOSE_BYTES_PER_FINDING, MAX_OPEN_FINDINGS, TraceEncoder};
use crate::error::Error;

/// Default size cap of a trace file: 256 MiB (an hour at 1 Hz of 256 busy
/// threads is about 40 MB; see the README).
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
    /// Findings left out (too many open at once).
    pub findings_dropped: u64,
    /// Set when the trace stopped taking intervals early; the file is
    /// still a complete trace of what came before.
    pub ended: Option<TraceEnd>,
}

/// The file and the encoder, behind the writer's lock.
struct State {
    file: File,
    encoder: TraceEncoder,
    status: TraceStatus,
    max_bytes: u64,
    buf: Vec<u8>,
}

impl State {
    /// Writes `buf` after the last whole record, in one `pwrite` when it
    /// fits (a process killed by a signal never leaves half a record). On
    /// failure the file is cut back to its whole records.
    fn append(&mut self, limit: u64) -> Result<(), TraceEnd> {
        let len = self.buf.len() as u64;
        if self.status.bytes_written.saturating_add(len) > limit {
            return Err(TraceEnd::SizeCap {
                max_bytes: self.max_bytes,
            });
        }
        let at = self.status.bytes_written;
        if let Err(e) = self.file.write_all_at(&self.buf, at) {
            // What was written of this record is cut off, so the file
            // ends on a whole record; if even that fails, the reader
            // sees a truncated last record, which Perfetto skips.
            let _ = self.file.set_len(at);
            return Err(TraceEnd::WriteFailed {
                message: e.to_string(),
            });
        }
        self.status.bytes_written += len;
        Ok(())
    }

    fn sync_status(&mut self) {
        self.status.intervals = self.encoder.intervals();
        self.status.findings = self.encoder.findings_written();
        self.status.findings_dropped = self.encoder.findings_dropped();
    }

    /// Encodes and writes the intervals from `from` to `to` and the
    /// findings then; nothing once the trace has ended.
    fn follow(&mut self, sampler: &Sampler, from: Option<u64>, to: u64) {
        if self.status.ended.is_some() {
            return;
        }
        let interval = match from {
            Some(f) => sampler
                .interval_between(f, to)
                .or_else(|| sampler.latest_interval()),
            None => return,
        };
        let Some(i) = interval else { return };
        let findings = sampler.findings();
        self.buf.clear();
        let mut buf = std::mem::take(&mut self.buf);
        self.encoder.interval(&i, &mut buf);
        self.encoder
            .findings(i.end_monotonic_ns, &findings, &mut buf);
        self.buf = buf;
        let limit = self.max_bytes.saturating_sub(CLOSE_RESERVE);
        if let Err(end) = self.append(limit) {
            self.status.ended = Some(end);
            self.close();
        }
        self.sync_status();
    }

    /// Ends the open finding slices (the last records).
    fn close(&mut self) {
        self.buf.clear();
        let mut buf = std::mem::take(&mut self.buf);
        self.encoder.finish(&mut buf);
        self.buf = buf;
        if !self.buf.is_empty() {
            let max = self.max_bytes;
            if let Err(end) = self.append(max) {
                self.status.ended.get_or_insert(end);
            }
        }
        let _ = self.file.sync_data();
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A Perfetto trace file written from a [`Sampler`]'s snapshots by a
/// thread of its own, which wakes only when the sampler stores one
/// ([`Sampler::wait_for_sample`]). Its work is counted as the sampler's
/// overhead ([`Sampler::account`]). Dropping it (or
/// [`PerfettoTrace::finish`]) writes the last snapshots and ends the
/// open finding slices; after each snapshot the file is already a
/// complete trace, so a process that is killed leaves a readable file.
pub struct PerfettoTrace {
    state: Arc<Mutex<State>>,
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
    /// [`Error::Create`] when the file cannot be created or written (before
    /// anything is sampled); [`Error::CapTooSmall`]; [`Error::Spawn`].
    pub fn start(
        sampler: &Sampler,
        path: impl AsRef<Path>,
        config: TraceConfig,
    ) -> Result<PerfettoTrace, Error> {
        if config.max_bytes < MIN_MAX_BYTES {
            return Err(Error::CapTooSmall {
                max_bytes: config.max_bytes,
                min_bytes: MIN_MAX_BYTES,
            });
        }
        let path = path.as_ref().to_path_buf();
        let create = |source| Error::Create {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(create)?;
        let mut encoder = TraceEncoder::new(sampler.target_identity());
        let mut buf = Vec::new();
        encoder.header(&mut buf);
        file.write_all_at(&buf, 0).map_err(create)?;
        let state = Arc::new(Mutex::new(State {
            file,
            encoder,
            status: TraceStatus {
                path: path.clone(),
                bytes_written: buf.len() as u64,
                ..Default::default()
            },
            max_bytes: config.max_bytes,
            buf,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, flag, s) = (state.clone(), stop.clone(), sampler.clone());
        // The newest snapshot now is where the first interval starts.
        let mut last = s.latest().map(|snap| snap.seq);
        let handle = std::thread::Builder::new()
            .name("wakemeter-perfetto".to_string())
            .spawn(move || {
                loop {
                    let stopping = flag.load(Ordering::Acquire);
                    // Once asked to stop, only what is already stored.
                    let wait = if stopping {
                        Duration::ZERO
                    } else {
                        STOP_CHECK_EVERY
                    };
                    match s.wait_for_sample(last, wait) {
                        SampleWait::Stored { seq } => {
                            s.account(|| lock(&st).follow(&s, last, seq));
                            last = Some(seq);
                        }
                        _ if stopping => break,
                        _ => {}
                    }
                }
                s.account(|| lock(&st).close());
            })
            .map_err(Error::Spawn)?;
        Ok(PerfettoTrace {
            state,
            stop,
            handle: Some(handle),
        })
    }

    /// What the file holds so far.
    pub fn status(&self) -> TraceStatus {
        lock(&self.state).status.clone()
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
