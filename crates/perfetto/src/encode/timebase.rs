//! The clock snapshot that ties the trace's timestamps to Perfetto's clocks.

use super::*;

/// A clock snapshot: MONOTONIC (the trace's timestamps), BOOTTIME
/// (Perfetto's default trace clock) and REALTIME, read together.
pub(super) fn clock_snapshot(out: &mut Vec<u8>, seq: u32) {
    let ids = [
        Some((clock::MONOTONIC, libc::CLOCK_MONOTONIC)),
        Some((clock::REALTIME, libc::CLOCK_REALTIME)),
        // Apple systems have no BOOTTIME (their MONOTONIC counts sleep).
        #[cfg(any(target_os = "linux", target_os = "android"))]
        Some((clock::BOOTTIME, libc::CLOCK_BOOTTIME)),
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        None,
    ];
    let clocks = ids
        .into_iter()
        .flatten()
        .filter_map(|(id, c)| {
            Some(Clock {
                clock_id: Some(id),
                timestamp: Some(read_clock(c)?),
            })
        })
        .collect();
    push(
        out,
        &TracePacket {
            trusted_packet_sequence_id: Some(seq),
            clock_snapshot: Some(ClockSnapshot { clocks }),
            ..Default::default()
        },
    );
}

pub(super) fn read_clock(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return None;
    }
    Some((ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64)
}
