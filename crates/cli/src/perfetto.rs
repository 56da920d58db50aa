//! `--perfetto FILE` of `watch` and `record`: the file is created before
//! anything is sampled (a bad path is one clear error), each process is a
//! `ProcessTrace` polled by the command's own loop, and stderr says once
//! if the trace ended early (size cap, full disk) and, at the end, what
//! the file holds. Feature `perfetto`; without it `--perfetto` is refused.

#[cfg(feature = "perfetto")]
use std::path::Path;
use std::path::PathBuf;
#[cfg(feature = "perfetto")]
use std::sync::atomic::AtomicBool;

#[cfg(feature = "perfetto")]
use crate::record::output::OnFull;

#[cfg(feature = "perfetto")]
pub use wakemeter_perfetto::ProcessTrace;
#[cfg(feature = "perfetto")]
use wakemeter_perfetto::{PerfettoFile, TraceConfig};

#[cfg(not(feature = "perfetto"))]
pub use off::{PerfettoFile, ProcessTrace};

#[cfg(feature = "perfetto")]
use crate::print;

/// The `--perfetto` options, shared by `watch` and `record`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PerfettoArgs {
    /// Also write a Perfetto trace (open it at https://ui.perfetto.dev or
    /// in Android Studio): per-thread CPU, switches, run-queue wait and
    /// wakes, loop and sleep probes, RSS and findings on a timeline.
    /// Samples are buffered and written every 5 s (or 64 KiB); the file
    /// is a complete trace after every write, and at the end, also when
    /// stopped by Ctrl-C or SIGTERM (a SIGKILL loses 5 s at most).
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<PathBuf>,
    /// Size cap of the --perfetto file in MiB: the trace ends there,
    /// complete (an hour at 1 Hz of 256 busy threads is about 35 MB).
    #[arg(long, value_name = "MIB", default_value_t = 256, requires = "perfetto")]
    pub perfetto_max_mib: u64,
}

/// The trace file and whether its early end was said.
#[cfg_attr(not(feature = "perfetto"), allow(dead_code))]
pub struct Trace {
    pub file: PerfettoFile,
    end_said: bool,
    /// The summary was said; if not, dropping the trace says it (an error
    /// that ends the command early still names what the file holds).
    summarized: bool,
}

#[cfg(feature = "perfetto")]
impl PerfettoArgs {
    /// Creates the file (before any sampling); a wait for a FIFO's
    /// reader ends when `stop` is set.
    pub fn create(&self, stop: Option<&AtomicBool>) -> Result<Option<Trace>, String> {
        let Some(path) = &self.perfetto else {
            return Ok(None);
        };
        let max = self.perfetto_max_mib.saturating_mul(1024 * 1024);
        if max < wakemeter_perfetto::MIN_MAX_BYTES {
            return Err(format!(
                "--perfetto-max-mib must be at least 1 (MiB); {} MiB is too small",
                self.perfetto_max_mib
            ));
        }
        let file =
            PerfettoFile::create_until(path, TraceConfig::default().with_max_bytes(max), stop)
                .map_err(|e| format!("--perfetto: {}", print::safe(&e.to_string())))?;
        Ok(Some(Trace {
            file,
            end_said: false,
            summarized: false,
        }))
    }
}

#[cfg(feature = "perfetto")]
impl Trace {
    /// Says once, on stderr, that the trace stopped taking samples.
    pub fn note_end(&mut self) {
        if self.end_said {
            return;
        }
        let status = self.file.status();
        if let Some(end) = &status.ended {
            self.end_said = true;
            print::note(&format!(
                "wakemeter: the Perfetto trace stopped: {end}; {} is a complete trace of the {} intervals before",
                shown(&status.path),
                status.intervals
            ));
        }
    }

    /// What the file holds, said at the end (also on a failed run).
    /// False when the trace was asked for but not written: nothing
    /// reached the file, or a write failed (a full disk, `/dev/full`).
    pub fn summary(&mut self) -> bool {
        self.summarized = true;
        self.note_end();
        let s = self.file.status();
        print::note(&format!(
            "wakemeter: Perfetto trace {}: {} intervals, {} findings, {} bytes (open it at https://ui.perfetto.dev)",
            shown(&s.path),
            s.intervals,
            s.findings,
            s.bytes_written
        ));
        let failed = matches!(
            s.ended,
            Some(wakemeter_perfetto::TraceEnd::WriteFailed { .. })
        );
        if s.bytes_written == 0 || failed {
            print::note(&format!(
                "wakemeter: error: the Perfetto trace {} was {}",
                shown(&s.path),
                if s.bytes_written == 0 {
                    "never written"
                } else {
                    "cut short by a failed write"
                }
            ));
            return false;
        }
        true
    }

    /// For a sibling output that finds the disk full: gives back the
    /// trace's blocks allocated ahead of its writes ([`OnFull`]).
    pub fn give_back(&self) -> OnFull {
        let file = self.file.clone();
        Box::new(move || file.give_back())
    }
}

/// Every way out says what the trace holds.
#[cfg(feature = "perfetto")]
impl Drop for Trace {
    fn drop(&mut self) {
        if !self.summarized {
            self.summary();
        }
    }
}

#[cfg(feature = "perfetto")]
fn shown(p: &Path) -> String {
    print::safe(&p.to_string_lossy()).into_owned()
}

/// The build without traces: `--perfetto` is refused before anything is
/// sampled, so no trace or file is ever made.
#[cfg(not(feature = "perfetto"))]
mod off {
    use wakemeter::Sampler;

    use super::{PerfettoArgs, Trace};

    /// No trace file is ever created in this build.
    pub enum PerfettoFile {}

    /// No process is ever traced in this build.
    pub enum ProcessTrace {}

    impl PerfettoFile {
        pub fn add(&self, _: &Sampler) -> Result<ProcessTrace, String> {
            match *self {}
        }
    }

    impl ProcessTrace {
        pub fn poll(&mut self) {
            match *self {}
        }
    }

    /// As the real one, which finishes the process's part when dropped.
    impl Drop for ProcessTrace {
        fn drop(&mut self) {
            match *self {}
        }
    }

    impl PerfettoArgs {
        /// `Ok(None)` without `--perfetto`; refuses it otherwise.
        pub fn create(
            &self,
            _stop: Option<&std::sync::atomic::AtomicBool>,
        ) -> Result<Option<Trace>, String> {
            match &self.perfetto {
                None => Ok(None),
                Some(_) => Err(
                    "--perfetto: this build has no Perfetto traces (feature `perfetto` off)".into(),
                ),
            }
        }
    }

    impl Trace {
        pub fn note_end(&mut self) {
            match self.file {}
        }

        pub fn summary(&mut self) -> bool {
            match self.file {}
        }

        pub fn give_back(&self) -> crate::record::output::OnFull {
            match self.file {}
        }
    }
}
