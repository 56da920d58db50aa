//! Facts about the machine, read once when a sampler is built: total
//! physical memory and the number of CPUs this process may use.
//!
//! Why not the `sysinfo` crate: these two numbers are all the core needs,
//! and sysinfo pulled IOKit into iOS builds and Windows crates into the
//! dependency tree; one `sysconf` or `sysctl` call gives the same answer.

/// Total physical memory in bytes; 0 when the OS does not say.
pub(crate) fn total_memory_bytes() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: sysconf has no memory-safety preconditions.
        let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
        // SAFETY: as above.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        return match (u64::try_from(pages), u64::try_from(page)) {
            (Ok(pages), Ok(page)) => pages.saturating_mul(page),
            _ => 0,
        };
    }
    #[cfg(target_vendor = "apple")]
    {
        let mut bytes: u64 = 0;
        let mut len = std::mem::size_of::<u64>();
        // SAFETY: the name is a NUL-terminated literal; `bytes` is a valid
        // out-buffer of `len` bytes (hw.memsize is a 64-bit integer); no new
        // value is set (null pointer, length 0).
        let rc = unsafe {
            libc::sysctlbyname(
                c"hw.memsize".as_ptr(),
                (&raw mut bytes).cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        return if rc == 0 && len == std::mem::size_of::<u64>() {
            bytes
        } else {
            0
        };
    }
    #[allow(unreachable_code)]
    0
}

/// Clock ticks per second (`_SC_CLK_TCK`), the unit of `/proc` `stat`
/// times; 100 when the C library does not say.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(tck).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// Logical CPUs this process may run on (its affinity mask and cgroup
/// quota, as `std::thread::available_parallelism` reads them); 1 when unknown.
pub(crate) fn cpu_count() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_facts_are_plausible() {
        assert!(cpu_count() >= 1);
        if cfg!(any(target_os = "linux", target_os = "android")) {
            // Every machine that runs these tests has more than 16 MiB.
            assert!(total_memory_bytes() > 16 << 20);
        }
    }
}
