//! `--perfetto FILE` of `watch` and `record`: the file is created before
//! anything is sampled (a bad path is one clear error), each process is a
//! `ProcessTrace` polled by the command's own loop, and stderr says once
//! if the trace ended early (size cap, full disk) and, at the end, what
//! the file holds.

use std::path::{Path, PathBuf};

use wakemeter_perfetto::{PerfettoFile, TraceConfig};

use crate::print;

/// The `--perfetto` options, shared by `watch` and `record`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PerfettoArgs {
    /// Also write a Perfetto trace (open it at https://ui.perfetto.dev or
    /// in Android Studio): per-thread CPU, switches, run-queue wait and
    /// wakes, loop and sleep probes, RSS and findings on a timeline. The
    /// file is a complete trace after every sample, and at the end when
    /// stopped by Ctrl-C.
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<PathBuf>,
    /// Size cap of the --perfetto file in MiB: the trace ends there,
    /// complete (an hour at 1 Hz of 256 busy threads is about 35 MB).
    #[arg(long, value_name = "MIB", default_value_t = 256, requires = "perfetto")]
    pub perfetto_max_mib: u64,
}

/// The trace file and whether its early end was said.
pub struct Trace {
    pub file: PerfettoFile,
    end_said: bool,
}

impl PerfettoArgs {
    /// Creates the file (before any sampling).
    pub fn create(&self) -> Result<Option<Trace>, String> {
        let Some(path) = &self.perfetto else {
            return Ok(None);
        };
        let max = self.perfetto_max_mib.saturating_mul(1024 * 1024);
        let file = PerfettoFile::create(path, TraceConfig::default().with_max_bytes(max))
            .map_err(|e| format!("--perfetto: {}", print::safe(&e.to_string())))?;
        Ok(Some(Trace {
            file,
            end_said: false,
        }))
    }
}

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

    /// What the file holds, said at the end.
    pub fn summary(&mut self) {
        self.note_end();
        let s = self.file.status();
        print::note(&format!(
            "wakemeter: Perfetto trace {}: {} intervals, {} findings, {} bytes (open it at https://ui.perfetto.dev)",
            shown(&s.path),
            s.intervals,
            s.findings,
            s.bytes_written
        ));
    }
}

fn shown(p: &Path) -> String {
    print::safe(&p.to_string_lossy()).into_owned()
}
