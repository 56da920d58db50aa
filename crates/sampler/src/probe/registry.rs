//! The sampler's list of probes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::loop_probe::{LoopCells, LoopProbe, LoopStats};
use super::sleep_probe::{SleepCells, SleepProbe, SleepStats};
use super::{MAX_PROBE_NAME_BYTES, MAX_PROBES};
use crate::{Error, Result, lock};

/// Probes registered with one sampler. A dropped probe is reported in one
/// more snapshot (its final counters) and then forgotten, so the list is
/// bounded by the live probes.
#[derive(Debug, Default)]
pub(crate) struct ProbeRegistry {
    next_id: AtomicU64,
    loops: Mutex<Vec<Arc<LoopCells>>>,
    sleeps: Mutex<Vec<Arc<SleepCells>>>,
}

fn check_room(len: usize) -> Result<()> {
    if len >= MAX_PROBES {
        return Err(Error::TooManyProbes { max: MAX_PROBES });
    }
    Ok(())
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
    pub(crate) fn loop_probe(&self, name: &str) -> Result<LoopProbe> {
        check_name(name)?;
        let mut loops = lock(&self.loops);
        check_room(loops.len())?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cells = Arc::new(LoopCells {
            id,
            name: name.to_string(),
            ..Default::default()
        });
        loops.push(cells.clone());
        Ok(LoopProbe::new(cells))
    }

    pub(crate) fn sleep_probe(&self, name: &str) -> Result<SleepProbe> {
        check_name(name)?;
        let mut sleeps = lock(&self.sleeps);
        check_room(sleeps.len())?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cells = Arc::new(SleepCells {
            id,
            name: name.to_string(),
            ..Default::default()
        });
        sleeps.push(cells.clone());
        Ok(SleepProbe::new(cells))
    }

    /// Reads every probe; forgets the ones whose probe was dropped.
    pub(crate) fn collect(&self) -> (Vec<LoopStats>, Vec<SleepStats>) {
        let mut loops = lock(&self.loops);
        let l = loops.iter().map(|c| c.read()).collect();
        loops.retain(|c| Arc::strong_count(c) > 1);
        drop(loops);
        let mut sleeps = lock(&self.sleeps);
        let s = sleeps.iter().map(|c| c.read()).collect();
        sleeps.retain(|c| Arc::strong_count(c) > 1);
        (l, s)
    }
}
