//! Processes recorded into one output: started together, polled, stopped,
//! and closed with the `load` and end records.

use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;

use wakemeter::compare::{LoadRecord, RecordLine, RecordingEnd};

use super::output::Output;
use super::section::{Section, now_unix_ns};
use crate::print;
use crate::target::{self, Liveness};

/// Why a recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    Deadline,
    Interrupted,
    Exited,
    LoadDone,
}

impl EndReason {
    fn as_str(self) -> &'static str {
        match self {
            EndReason::Deadline => "deadline",
            EndReason::Interrupted => "interrupted",
            EndReason::Exited => "exited",
            EndReason::LoadDone => "load_done",
        }
    }
}

/// Processes being recorded into one output.
pub struct Recorder {
    pub out: Output,
    live: BTreeMap<u32, Section>,
    done: Vec<Section>,
    pub intervals: u64,
    /// The first write error; recording stops at it.
    write_error: Option<String>,
    /// `--perfetto`: every section's process is added to it.
    pub perfetto: Option<crate::perfetto::Trace>,
}

impl Recorder {
    /// Starts every prepared section at once.
    pub fn start(out: Output, sections: Vec<Section>) -> Recorder {
        Recorder::start_traced(out, sections, None)
    }

    /// As [`Recorder::start`], with every process also in a Perfetto trace.
    pub fn start_traced(
        mut out: Output,
        sections: Vec<Section>,
        perfetto: Option<crate::perfetto::Trace>,
    ) -> Recorder {
        // A full disk: the trace's blocks allocated ahead go first.
        if let Some(t) = &perfetto {
            out.set_on_full(t.give_back());
        }
        let mut r = Recorder {
            out,
            live: BTreeMap::new(),
            done: Vec::new(),
            intervals: 0,
            write_error: None,
            perfetto,
        };
        for s in sections {
            r.add(s);
        }
        r
    }

    /// Starts one more section (a process that appeared).
    pub fn add(&mut self, mut s: Section) {
        if let Some(t) = &self.perfetto {
            match t.file.add(&s.sampler) {
                Ok(p) => s.trace = Some(p),
                Err(e) => print::note(&format!("wakemeter: {}: {e}", s.label())),
            }
        }
        match s.start() {
            Ok(()) => {
                self.live.insert(s.target.pid, s);
            }
            Err(e) => print::note(&format!("wakemeter: {}: {e}", s.label())),
        }
    }

    pub fn has(&self, pid: u32) -> bool {
        self.live.contains_key(&pid)
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    fn wrote(&mut self, r: Result<u64, Box<dyn Error>>) {
        match r {
            Ok(n) => self.intervals += n,
            Err(e) => {
                if self.write_error.is_none() {
                    self.write_error = Some(e.to_string());
                }
            }
        }
    }

    /// Writes what every process has stored; moves those that exited to
    /// the done list (returned, to be announced). `false` after a write
    /// error.
    pub fn poll(&mut self) -> (bool, Vec<String>) {
        let mut ended = Vec::new();
        let pids: Vec<u32> = self.live.keys().copied().collect();
        for pid in pids {
            let Some(mut s) = self.live.remove(&pid) else {
                continue;
            };
            let r = s.write_new(&mut self.out);
            self.wrote(r);
            if let Some(p) = &mut s.trace {
                p.poll();
            }
            if let Some(t) = &mut self.perfetto {
                t.note_end();
            }
            if target::liveness(pid) != Liveness::Alive || !s.sampler.is_running() {
                s.exited = true;
                let r = s.stop(&mut self.out);
                self.wrote(r);
                ended.push(s.label());
                self.done.push(s);
            } else {
                self.live.insert(pid, s);
            }
        }
        (self.write_error.is_none(), ended)
    }

    /// Stops every process, writes the `load` record and the end record,
    /// and makes the file visible. Returns the sections (for the summary).
    ///
    /// # Errors
    /// Nothing was recorded (the output is removed when it can be), or a
    /// write failed (what was written is kept, without end record).
    pub fn finish(
        mut self,
        reason: EndReason,
        load: Option<LoadRecord>,
    ) -> Result<(Vec<Section>, PathBuf), Box<dyn Error>> {
        for (_, mut s) in std::mem::take(&mut self.live) {
            let r = s.stop(&mut self.out);
            self.wrote(r);
            self.done.push(s);
        }
        let target = self.out.target().to_path_buf();
        let shown = print::safe(&target.to_string_lossy()).into_owned();
        if let Some(e) = self.write_error.take() {
            // Keep what reached the disk: every line before is complete.
            let kept = self.intervals;
            let _ = self.out.finish();
            return Err(format!(
                "writing {shown}: {e}; it keeps the {kept} intervals written before \
                 (no end record: diff reads it as partial)"
            )
            .into());
        }
        if self.intervals == 0 {
            self.out.abandon();
            return Err(format!(
                "nothing recorded: {} before two samples were taken; {shown} not written",
                match &self.done[..] {
                    [one] if one.exited => format!("{} exited", one.label()),
                    [one] => format!("{} was not sampled", one.label()),
                    _ => "the processes gave no two samples in a row".to_string(),
                }
            )
            .into());
        }
        let mut tail = Vec::new();
        if let Some(l) = load {
            tail.push(print::json(&RecordLine::Load(l))?);
        }
        tail.push(print::json(&RecordLine::End(RecordingEnd::new(
            self.intervals,
            reason.as_str(),
            now_unix_ns(),
        )))?);
        for t in &tail {
            if let Err(e) = self.out.line(t) {
                let _ = self.out.finish();
                return Err(format!("writing {shown}: {e}").into());
            }
        }
        self.out.finish()?;
        let mut done = self.done;
        done.sort_by_key(|s| s.target.pid);
        Ok((done, target))
    }
}
