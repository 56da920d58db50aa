//! Locking shared by every module of the crate.

/// Locks a mutex, recovering from poisoning: the data behind every lock of
/// this crate stays consistent even if a holder panicked, and the host must
/// not crash.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
