//! The sampler's list of probes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::loop_probe::{LoopCells, LoopProbe};
use super::sleep_probe::{SleepCells, SleepProbe};
use super::{MAX_PROBE_NAME_BYTES, MAX_PROBES};
use crate::error::{Error, Result};
use crate::model::{LoopKind, LoopStats, SleepStats};
use crate::sync::lock;

/// Probes registered with one sampler. A dropped probe is reported in one
/// more snapshot (its final counters) and then forgotten, so the list is
/// bounded by the live probes.
///
/// A dropped probe's slot is free at once: when the list is full, creating
/// a probe first moves the dropped ones' final counters out of the list
/// (see [`Kind::make_room`]), so a host that makes a probe per request
/// and never samples in between is not refused.
#[derive(Debug, Default)]
pub(crate) struct ProbeRegistry {
    next_id: AtomicU64,
    loops: Mutex<Kind<LoopCells, LoopStats>>,
    sleeps: Mutex<Kind<SleepCells, SleepStats>>,
}

/// The probes of one kind.
#[derive(Debug)]
struct Kind<C, S> {
    /// Probes alive, or dropped and not yet moved to `retired`.
    cells: Vec<Arc<C>>,
    /// Final counters of dropped probes moved out of `cells` before a
    /// snapshot could report them: reported by the next one. At most
    /// [`MAX_PROBES`]; beyond that the oldest are forgotten unreported (a
    /// host that drops more than 4,096 probes between two snapshots).
    retired: Vec<S>,
}

impl<C, S> Default for Kind<C, S> {
    fn default() -> Self {
        Kind {
            cells: Vec::new(),
            retired: Vec::new(),
        }
    }
}

/// Cells that can be read into their stats.
trait Read {
    type Stats;
    fn read_stats(&self) -> Self::Stats;
}

impl Read for LoopCells {
    type Stats = LoopStats;
    fn read_stats(&self) -> LoopStats {
        self.read()
    }
}

impl Read for SleepCells {
    type Stats = SleepStats;
    fn read_stats(&self) -> SleepStats {
        self.read()
    }
}

/// Whether the probe owning `cells` was dropped (the registry holds the
/// only reference left).
fn dropped<C>(cells: &Arc<C>) -> bool {
    Arc::strong_count(cells) == 1
}

impl<C: Read<Stats = S>, S> Kind<C, S> {
    /// Makes room for one more probe: when the list is full, the dropped
    /// probes leave it with their final counters kept for the next snapshot.
    ///
    /// # Errors
    /// [`Error::TooManyProbes`] when [`MAX_PROBES`] probes are alive.
    fn make_room(&mut self) -> Result<()> {
        if self.cells.len() < MAX_PROBES {
            return Ok(());
        }
        let retired = &mut self.retired;
        self.cells.retain(|c| {
            if dropped(c) {
                retired.push(c.read_stats());
                false
            } else {
                true
            }
        });
        if let Some(excess) = retired.len().checked_sub(MAX_PROBES) {
            retired.drain(..excess);
        }
        if self.cells.len() >= MAX_PROBES {
            return Err(Error::TooManyProbes { max: MAX_PROBES });
        }
        Ok(())
    }

    /// Reads every probe (and the final counters of those retired since
    /// the last call); forgets the dropped ones.
    fn collect(&mut self) -> Vec<S> {
        let mut out = std::mem::take(&mut self.retired);
        out.extend(self.cells.iter().map(|c| c.read_stats()));
        self.cells.retain(|c| !dropped(c));
        out
    }
}

fn check_name(name: &str) -> Result<()> {
    if name.len() > MAX_PROBE_NAME_BYTES {
        return Err(Error::ProbeNameTooLong {
            len: name.len(),
            max: MAX_PROBE_NAME_BYTES,
        });
    }
    Ok(())
}

impl ProbeRegistry {
    pub(crate) fn loop_probe(&self, name: &str, kind: LoopKind) -> Result<LoopProbe> {
        check_name(name)?;
        let mut loops = lock(&self.loops);
        loops.make_room()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cells = Arc::new(LoopCells {
            id,
            name: name.to_string(),
            kind,
            ..Default::default()
        });
        loops.cells.push(cells.clone());
        Ok(LoopProbe::new(cells))
    }

    pub(crate) fn sleep_probe(&self, name: &str) -> Result<SleepProbe> {
        check_name(name)?;
        let mut sleeps = lock(&self.sleeps);
        sleeps.make_room()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cells = Arc::new(SleepCells {
            id,
            name: name.to_string(),
            ..Default::default()
        });
        sleeps.cells.push(cells.clone());
        Ok(SleepProbe::new(cells))
    }

    /// Reads every probe; forgets the ones whose probe was dropped.
    /// Each kind comes sorted by probe id (retired and live probes merge).
    pub(crate) fn collect(&self) -> (Vec<LoopStats>, Vec<SleepStats>) {
        let mut l = lock(&self.loops).collect();
        l.sort_by_key(|s| s.id);
        let mut s = lock(&self.sleeps).collect();
        s.sort_by_key(|s| s.id);
        (l, s)
    }
}
