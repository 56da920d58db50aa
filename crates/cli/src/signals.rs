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

/// As [`stop_on_signals`], and a second SIGINT or SIGTERM ends the process
/// at once (status 128 + the signal), for a command whose work after the
/// first signal (reading and symbolizing a profile) can take a while.
pub fn stop_then_exit_on_signals() -> Result<Arc<AtomicBool>, String> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registered first, so it runs before the flag is set: the first
        // signal finds the flag clear and only sets it, the second exits.
        signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&flag))
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
        signal_hook::flag::register(sig, Arc::clone(&flag))
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }
    Ok(flag)
}
