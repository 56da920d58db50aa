//! Locking shared by every wakemeter crate: one poison-recovering `lock`.

/// Locks a mutex, recovering from poisoning: the data behind every lock of
/// wakemeter stays consistent even if a holder panicked, and the host must
/// not crash. Every wakemeter crate takes its locks through this one
/// function.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
