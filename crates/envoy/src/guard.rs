//! Panic containment: no panic crosses Envoy's ABI. A caught panic is
//! logged through Envoy as one error line and disables the module; every
//! hook and the module's own threads then do nothing, and Envoy keeps
//! serving.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use wakemeter::sync::lock;

use crate::abi::{Callbacks, LogLevel};

/// Set once a panic was caught: every hook then does nothing (the admin
/// path answers 503), and the module's threads stop.
pub(crate) static DISABLED: AtomicBool = AtomicBool::new(false);

/// The message and place of the last panic, kept by the panic hook
/// installed at program init (which prints nothing: the one line about it
/// goes through Envoy's log).
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

pub(crate) fn install_panic_hook() {
    // This hook is this library's own: the cdylib carries its own copy of
    // std, so Envoy's process and other modules are not affected.
    std::panic::set_hook(Box::new(|info| {
        let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
            (*s).to_owned()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "a panic".to_owned()
        };
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        *lock(&LAST_PANIC) = Some(format!("{msg}{place}"));
    }));
}

/// Disables the module after a caught panic in `site`, and says so in one
/// error line of Envoy's log.
pub(crate) fn disable(cb: &Callbacks, site: &str) {
    let first = !DISABLED.swap(true, Ordering::SeqCst);
    let what = lock(&LAST_PANIC)
        .take()
        .unwrap_or_else(|| "a panic".to_owned());
    if first {
        cb.log(
            LogLevel::Error,
            &format!("wakemeter: internal error in {site} ({what}); the module is disabled, Envoy keeps serving"),
        );
    }
}

/// Runs `f` unless the module is disabled; a panic inside becomes
/// `fallback`, one log line and a disabled module.
pub(crate) fn guarded<R>(site: &str, fallback: R, f: impl FnOnce() -> R) -> R {
    if DISABLED.load(Ordering::Relaxed) {
        return fallback;
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            if let Ok(cb) = Callbacks::get() {
                disable(cb, site);
            } else {
                DISABLED.store(true, Ordering::SeqCst);
            }
            fallback
        }
    }
}
