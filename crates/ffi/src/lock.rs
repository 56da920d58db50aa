//! The one way this crate takes its locks.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering from poisoning: nothing behind these locks can
/// be left inconsistent, and a host app must never crash because of us.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
