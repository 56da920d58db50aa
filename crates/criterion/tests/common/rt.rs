// Shared by the ping-pong tests (included with `include!`).

/// Puts the calling thread on CPU 0 with SCHED_FIFO priority 1, so two such
/// threads alternate deterministically: a woken thread waits until the
/// waker blocks (FIFO does not preempt at equal priority), and no ordinary
/// thread of the machine preempts either. Returns false without the
/// privilege (CAP_SYS_NICE, root here).
fn pin_fifo() -> bool {
    // SAFETY: plain syscalls on the calling thread (pid 0) with pointers to
    // live locals.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return false;
        }
        let p = libc::sched_param { sched_priority: 1 };
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0
    }
}
