//! Ending a long command cleanly on Ctrl-C or `kill`: the watch and record
//! loops poll a flag instead of being killed mid-write.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Longest a wait goes without looking at the stop flag: a command ends
/// within about this long of SIGINT or SIGTERM.
pub const STOP_POLL: Duration = Duration::from_millis(100);

/// SIGINT and SIGTERM set the returned flag instead of ending the process.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>, String> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&flag))
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }
    Ok(flag)
}
