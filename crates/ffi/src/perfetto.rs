//! A Perfetto trace file of the sampler's process, for Kotlin and Swift:
//! one object over `wakemeter_perfetto::PerfettoTrace`.

use std::sync::{Arc, Mutex};

use crate::error::WakemeterError;
use wakemeter::sync::lock;

/// What a Perfetto trace file holds so far.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct PerfettoTraceStatus {
    /// The file.
    pub path: String,
    /// Bytes in the file, all of them whole records.
    pub bytes_written: u64,
    /// Sampling periods written.
    pub intervals: u64,
    /// Finding slices begun.
    pub findings: u64,
    /// Why the trace stopped taking intervals early (the size cap, a failed
    /// write such as a full disk), if it did; the file is still a complete
    /// trace of what came before.
    pub ended: Option<String>,
}

impl From<wakemeter_perfetto::TraceStatus> for PerfettoTraceStatus {
    fn from(s: wakemeter_perfetto::TraceStatus) -> Self {
        PerfettoTraceStatus {
            path: s.path.to_string_lossy().into_owned(),
            bytes_written: s.bytes_written,
            intervals: s.intervals,
            findings: s.findings,
            ended: s.ended.map(|e| e.to_string()),
        }
    }
}

/// A Perfetto trace file being written from a sampler's snapshots (open it
/// at ui.perfetto.dev or in Android Studio). Written by a wakemeter thread
/// woken by each sample; `finish()` (or releasing the object) writes the
/// last samples and closes the file. Samples are written in batches (64 KiB
/// or 5 s, whichever comes first), and the file is a complete trace after
/// every batch: a process killed without finishing loses at most the last
/// 5 s.
#[derive(uniffi::Object)]
pub struct PerfettoTrace {
    trace: Mutex<Option<wakemeter_perfetto::PerfettoTrace>>,
    last: Mutex<PerfettoTraceStatus>,
}

impl std::fmt::Debug for PerfettoTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfettoTrace")
            .field("status", &*lock(&self.last))
            .finish()
    }
}

impl PerfettoTrace {
    /// Starts a trace of `core`'s process (`Sampler.start_perfetto_trace`).
    pub(crate) fn start(
        core: &wakemeter::Sampler,
        path: String,
        max_bytes: u64,
    ) -> Result<Arc<PerfettoTrace>, WakemeterError> {
        let config = wakemeter_perfetto::TraceConfig::default().with_max_bytes(max_bytes);
        let trace = wakemeter_perfetto::PerfettoTrace::start(core, &path, config)?;
        let status = trace.status().into();
        Ok(Arc::new(PerfettoTrace {
            trace: Mutex::new(Some(trace)),
            last: Mutex::new(status),
        }))
    }
}

#[uniffi::export]
impl PerfettoTrace {
    /// What the file holds so far.
    pub fn status(&self) -> PerfettoTraceStatus {
        match &*lock(&self.trace) {
            Some(t) => {
                let s: PerfettoTraceStatus = t.status().into();
                lock(&self.last).clone_from(&s);
                s
            }
            None => lock(&self.last).clone(),
        }
    }

    /// Writes the samples taken so far, ends the open finding slices and
    /// closes the file; returns what it holds. Later calls return the same.
    pub fn finish(&self) -> PerfettoTraceStatus {
        let taken = lock(&self.trace).take();
        if let Some(t) = taken {
            *lock(&self.last) = t.finish().into();
        }
        lock(&self.last).clone()
    }
}
