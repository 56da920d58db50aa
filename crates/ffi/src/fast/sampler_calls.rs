//! The sampler's record calls for the JVM: one C function, an operation
//! number per method (numbers mirrored by the Kotlin `FastSampler`).

use std::sync::Arc;
use std::time::Duration;

use uniffi::{Lift, Lower};
use wakemeter::Thresholds;

use super::{Answer, BAD_INPUT, answer, put, release};
use crate::UniFfiTag;
use crate::error::WakemeterError;
use crate::handle::{Kind, into_handle};
use crate::sampler_object::Sampler;

/// `Sampler.stats()` → `SamplerStats`.
pub const SAMPLER_STATS: u32 = 1;
/// `Sampler.report()` → `Report`.
pub const SAMPLER_REPORT: u32 = 2;
/// `Sampler.report_json()` → `String`.
pub const SAMPLER_REPORT_JSON: u32 = 3;
/// `Sampler.findings()` → `Vec<Finding>`.
pub const SAMPLER_FINDINGS: u32 = 4;
/// `Sampler.findings_with(thresholds)`, input a `Thresholds` → `Vec<Finding>`.
pub const SAMPLER_FINDINGS_WITH: u32 = 5;
/// `Sampler.latest_interval()` → `Option<Interval>`.
pub const SAMPLER_LATEST_INTERVAL: u32 = 6;
/// `Sampler.interval_over(window)`, input a `Duration` → `Option<Interval>`.
pub const SAMPLER_INTERVAL_OVER: u32 = 7;
/// `Sampler.sample_now()` → `Snapshot`.
pub const SAMPLER_SAMPLE_NOW: u32 = 8;
/// `Sampler.latest()` → `Option<Snapshot>`.
pub const SAMPLER_LATEST: u32 = 9;
/// `Sampler.snapshots()` → `Vec<Snapshot>`.
pub const SAMPLER_SNAPSHOTS: u32 = 10;
/// `Sampler.listener_stats()` → `ListenerStats`.
pub const SAMPLER_LISTENER_STATS: u32 = 11;
/// `Sampler.is_running()` → `bool`.
pub const SAMPLER_IS_RUNNING: u32 = 12;
/// `Sampler.config()` → `SamplerConfig`.
pub const SAMPLER_CONFIG: u32 = 13;
/// `Sampler.system()` → `SystemInfo`.
pub const SAMPLER_SYSTEM: u32 = 14;
/// `Sampler.thresholds()` → `Thresholds`.
pub const SAMPLER_THRESHOLDS: u32 = 15;
/// `Sampler.loop_probe(name)`, input a `String` → the `LoopProbe` object,
/// then a `u64` raw handle of it (released with `wakemeter_loop_probe_release`).
pub const SAMPLER_LOOP_PROBE: u32 = 16;
/// `Sampler.sleep_probe(name)`, input a `String` → the `SleepProbe` object,
/// then a `u64` raw handle of it (released with `wakemeter_sleep_probe_release`).
pub const SAMPLER_SLEEP_PROBE: u32 = 17;

/// Reads a call's whole input, as the generated Kotlin converter wrote it.
fn input<T: Lift<UniFfiTag>>(mut bytes: &[u8]) -> Result<T, i32> {
    match T::try_read(&mut bytes) {
        Ok(value) if bytes.is_empty() => Ok(value),
        _ => Err(BAD_INPUT),
    }
}

/// A new probe's answer: the uniffi object (for the generated Kotlin class)
/// followed by a raw handle of it (for the fast path).
fn new_probe<P: Kind>(probe: Result<Arc<P>, WakemeterError>) -> Answer
where
    Arc<P>: Lower<UniFfiTag>,
{
    let Ok(probe) = probe else { return put(probe) };
    let raw = into_handle(probe.clone());
    let mut out = put(Ok::<_, WakemeterError>(probe))?;
    <u64 as Lower<UniFfiTag>>::write(raw, &mut out);
    Ok(out)
}

/// Runs operation `op` on the sampler with `input` (empty for most).
fn call(s: &Sampler, op: u32, bytes: &[u8]) -> Answer {
    match op {
        SAMPLER_STATS => put(s.stats()),
        SAMPLER_REPORT => put(s.report()),
        SAMPLER_REPORT_JSON => put(s.report_json()),
        SAMPLER_FINDINGS => put(s.findings()),
        SAMPLER_FINDINGS_WITH => put(s.findings_with(input::<Thresholds>(bytes)?)),
        SAMPLER_LATEST_INTERVAL => put(s.latest_interval()),
        SAMPLER_INTERVAL_OVER => put(s.interval_over(input::<Duration>(bytes)?)),
        SAMPLER_SAMPLE_NOW => put(s.sample_now()),
        SAMPLER_LATEST => put(s.latest()),
        SAMPLER_SNAPSHOTS => put(s.snapshots()),
        SAMPLER_LISTENER_STATS => put(Ok(s.listener_stats())),
        SAMPLER_IS_RUNNING => put(Ok(s.is_running())),
        SAMPLER_CONFIG => put(Ok(s.config())),
        SAMPLER_SYSTEM => put(Ok(s.system())),
        SAMPLER_THRESHOLDS => put(Ok(s.thresholds())),
        SAMPLER_LOOP_PROBE => new_probe(s.loop_probe(input(bytes)?)),
        SAMPLER_SLEEP_PROBE => new_probe(s.sleep_probe(input(bytes)?)),
        _ => Err(BAD_INPUT),
    }
}

/// Sampler method `op` (one of the `SAMPLER_*` numbers) on a raw handle,
/// as a record call: the input, if the method takes one, is the first
/// `in_len` bytes of `buf`; the answer is a `Result<_, WakemeterError>`.
/// Returns as `answer` in the parent module (a length, or a negative code).
///
/// # Safety
/// `handle` is any number; a live one is not released during the call; `buf` is valid for reads and writes of `cap` bytes,
/// used by nothing else during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_sampler_call(
    handle: u64,
    op: u32,
    buf: *mut u8,
    cap: u64,
    in_len: u64,
) -> i64 {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        answer(handle, buf, cap, in_len, |s: &Sampler, bytes| {
            call(s, op, bytes)
        })
    }
}

/// Releases a handle from `Sampler.raw_handle()`; the sampler is shut
/// down once its last reference (this one, or the generated object's) goes.
///
/// Returns as `wakemeter_loop_probe_release`.
///
/// # Safety
/// `handle` is any number; no call on a live one is in flight.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wakemeter_sampler_release(handle: u64) -> i32 {
    // SAFETY: forwarded from this function's contract.
    unsafe { release::<Sampler>(handle) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::{
        MIN_CAPACITY, OK, WRONG_KIND, wakemeter_loop_probe_after_wait,
        wakemeter_loop_probe_before_wait, wakemeter_loop_probe_release, wakemeter_loop_probe_stats,
        wakemeter_sleep_probe_release,
    };
    use crate::probe::{LoopProbe, SleepProbe};
    use wakemeter::{Finding, LoopStats, SamplerConfig, SamplerStats};

    /// Calls `op` with `input` in a buffer of `cap` bytes; the return value and the buffer.
    fn call_with(handle: u64, op: u32, input: &[u8], cap: usize) -> (i64, Vec<u8>) {
        let mut buf = vec![0xAA_u8; cap.max(input.len())];
        buf[..input.len()].copy_from_slice(input);
        // SAFETY: `buf` is valid for `buf.len()` bytes and used by nothing
        // else; `handle` is live (the callers release it after the calls).
        let n = unsafe {
            wakemeter_sampler_call(
                handle,
                op,
                buf.as_mut_ptr(),
                buf.len() as u64,
                input.len() as u64,
            )
        };
        (n, buf)
    }

    /// The value of an `Ok` answer of `op`.
    fn ok<T: Lift<UniFfiTag>>(handle: u64, op: u32, input: &[u8]) -> T {
        let (n, buf) = call_with(handle, op, input, 1 << 20);
        let n = usize::try_from(n).expect("an answer, not a code");
        assert_eq!(buf[0], 0, "an Ok answer");
        let mut rest = &buf[1..n];
        let value = T::try_read(&mut rest).unwrap();
        assert!(rest.is_empty(), "the answer is exactly one value");
        value
    }

    /// The variant number (as uniffi numbers them, from 1) of an `Err` answer of `op`.
    fn err(handle: u64, op: u32, input: &[u8]) -> i32 {
        let (n, buf) = call_with(handle, op, input, 4096);
        assert!(n > 0);
        assert_eq!(buf[0], 1, "an Err answer");
        i32::from_be_bytes(buf[1..5].try_into().unwrap())
    }

    fn written<T: Lower<UniFfiTag>>(value: T) -> Vec<u8> {
        let mut out = Vec::new();
        T::write(value, &mut out);
        out
    }

    #[test]
    fn every_operation_answers_what_the_method_returns() {
        let s = Sampler::new(SamplerConfig::default()).unwrap();
        let h = s.clone().raw_handle();
        let snap: wakemeter::Snapshot = ok(h, SAMPLER_SAMPLE_NOW, &[]);
        assert!(!snap.threads.is_empty());
        s.sample_now().unwrap();
        let stats: SamplerStats = ok(h, SAMPLER_STATS, &[]);
        assert_eq!(stats.total_samples, 2);
        assert_eq!(
            ok::<Vec<wakemeter::Snapshot>>(h, SAMPLER_SNAPSHOTS, &[]).len(),
            2
        );
        assert_eq!(
            ok::<Option<wakemeter::Snapshot>>(h, SAMPLER_LATEST, &[]),
            s.latest().unwrap()
        );
        assert!(ok::<Option<wakemeter::Interval>>(h, SAMPLER_LATEST_INTERVAL, &[]).is_some());
        let window = written(Duration::from_secs(10));
        assert!(ok::<Option<wakemeter::Interval>>(h, SAMPLER_INTERVAL_OVER, &window).is_some());
        let report: wakemeter::Report = ok(h, SAMPLER_REPORT, &[]);
        assert_eq!(report.stats.total_samples, 2);
        let json: String = ok(h, SAMPLER_REPORT_JSON, &[]);
        assert!(json.contains("\"schema_version\""), "{json}");
        let _: Vec<Finding> = ok(h, SAMPLER_FINDINGS, &[]);
        let _: Vec<Finding> = ok(h, SAMPLER_FINDINGS_WITH, &written(Thresholds::default()));
        assert!(!ok::<bool>(h, SAMPLER_IS_RUNNING, &[]));
        assert_eq!(ok::<SamplerConfig>(h, SAMPLER_CONFIG, &[]), s.config());
        assert_eq!(
            ok::<wakemeter::SystemInfo>(h, SAMPLER_SYSTEM, &[]),
            s.system()
        );
        assert_eq!(ok::<Thresholds>(h, SAMPLER_THRESHOLDS, &[]), s.thresholds());
        assert_eq!(
            ok::<crate::ListenerStats>(h, SAMPLER_LISTENER_STATS, &[]),
            s.listener_stats()
        );
        // SAFETY: live handle, released once.
        assert_eq!(unsafe { wakemeter_sampler_release(h) }, OK);
        assert_eq!(Arc::strong_count(&s), 1);
    }

    #[test]
    fn a_short_buffer_gets_the_size_needed_and_nothing_written() {
        let s = Sampler::new(SamplerConfig::default()).unwrap();
        s.sample_now().unwrap();
        let h = s.clone().raw_handle();
        let (needed, _) = call_with(h, SAMPLER_SNAPSHOTS, &[], 1 << 20);
        let (n, buf) = call_with(h, SAMPLER_SNAPSHOTS, &[], MIN_CAPACITY as usize);
        assert_eq!(n, needed);
        assert!(buf.iter().all(|&b| b == 0xAA), "nothing written");
        let (n, buf) = call_with(h, SAMPLER_STATS, &[], MIN_CAPACITY as usize - 1);
        assert_eq!(n, MIN_CAPACITY as i64);
        assert!(buf.iter().all(|&b| b == 0xAA), "nothing run or written");
        // SAFETY: live handle, released once.
        assert_eq!(unsafe { wakemeter_sampler_release(h) }, OK);
    }

    #[test]
    fn errors_are_answers_and_bad_calls_are_codes() {
        let s = Sampler::new(SamplerConfig::default()).unwrap();
        let h = s.clone().raw_handle();
        let bad = written(Thresholds::default().with_busy_poll_idle_ratio(2.0));
        assert_eq!(err(h, SAMPLER_FINDINGS_WITH, &bad), 1, "InvalidConfig");
        let long = written("x".repeat(65));
        assert_eq!(err(h, SAMPLER_LOOP_PROBE, &long), 7, "ProbeNameTooLong");
        // Unknown operation, missing, truncated or trailing input.
        assert_eq!(call_with(h, 999, &[], 4096).0, -i64::from(BAD_INPUT));
        assert_eq!(
            call_with(h, SAMPLER_FINDINGS_WITH, &[], 4096).0,
            -i64::from(BAD_INPUT)
        );
        assert_eq!(
            call_with(h, SAMPLER_FINDINGS_WITH, &bad[..3], 4096).0,
            -i64::from(BAD_INPUT)
        );
        let mut trailing = written(Duration::from_secs(1));
        trailing.push(0);
        assert_eq!(
            call_with(h, SAMPLER_INTERVAL_OVER, &trailing, 4096).0,
            -i64::from(BAD_INPUT)
        );
        // A null buffer and an input longer than the buffer.
        // SAFETY: both are refused before `buf` is read.
        unsafe {
            assert_eq!(
                wakemeter_sampler_call(h, SAMPLER_STATS, std::ptr::null_mut(), 4096, 0),
                -i64::from(BAD_INPUT)
            );
            let mut buf = [0u8; 128];
            assert_eq!(
                wakemeter_sampler_call(h, SAMPLER_STATS, buf.as_mut_ptr(), 128, 129),
                -i64::from(BAD_INPUT)
            );
        }
        s.shutdown();
        assert_eq!(err(h, SAMPLER_STATS, &[]), 10, "Closed");
        // SAFETY: live handle, released once.
        assert_eq!(unsafe { wakemeter_sampler_release(h) }, OK);
    }

    #[test]
    fn new_probes_come_with_a_working_raw_handle() {
        let s = Sampler::new(SamplerConfig::default()).unwrap();
        let h = s.clone().raw_handle();
        let (n, buf) = call_with(h, SAMPLER_LOOP_PROBE, &written("io".to_string()), 4096);
        let mut rest = &buf[1..usize::try_from(n).unwrap()];
        let probe = <Arc<LoopProbe> as Lift<UniFfiTag>>::try_read(&mut rest).unwrap();
        let raw = <u64 as Lift<UniFfiTag>>::try_read(&mut rest).unwrap();
        assert!(rest.is_empty());
        assert_eq!(probe.name(), "io");
        let mut stats = [0u8; 256];
        // SAFETY: live handles, each released once; `stats` is ours.
        unsafe {
            assert_eq!(wakemeter_loop_probe_before_wait(raw, 0), OK);
            assert_eq!(wakemeter_loop_probe_after_wait(raw, 2), OK);
            // The answer grows with the poll-delay histogram (trimmed
            // after its last non-zero bucket): a slow machine (qemu) can
            // need more than 256 bytes, and then the caller asks again
            // with what the first call said it needs.
            let mut n = wakemeter_loop_probe_stats(raw, stats.as_mut_ptr(), 256);
            let mut grown = Vec::new();
            let answer: &[u8] = if n > 256 {
                grown.resize(usize::try_from(n).unwrap(), 0);
                n = wakemeter_loop_probe_stats(raw, grown.as_mut_ptr(), u64::try_from(n).unwrap());
                assert!(n <= i64::try_from(grown.len()).unwrap(), "{n} bytes");
                &grown
            } else {
                &stats
            };
            let mut rest = &answer[1..usize::try_from(n).unwrap()];
            assert_eq!(
                <LoopStats as Lift<UniFfiTag>>::try_read(&mut rest)
                    .unwrap()
                    .total_events,
                2
            );
            assert_eq!(
                wakemeter_loop_probe_stats(h, stats.as_mut_ptr(), 256),
                -i64::from(WRONG_KIND)
            );
            assert_eq!(
                wakemeter_sampler_call(raw, SAMPLER_STATS, stats.as_mut_ptr(), 256, 0),
                -i64::from(WRONG_KIND)
            );
            assert_eq!(wakemeter_sampler_release(raw), WRONG_KIND);
            assert_eq!(wakemeter_loop_probe_release(raw), OK);
        }
        assert_eq!(Arc::strong_count(&probe), 1);
        let (n, buf) = call_with(h, SAMPLER_SLEEP_PROBE, &written("nap".to_string()), 4096);
        let mut rest = &buf[1..usize::try_from(n).unwrap()];
        let nap = <Arc<SleepProbe> as Lift<UniFfiTag>>::try_read(&mut rest).unwrap();
        let raw = <u64 as Lift<UniFfiTag>>::try_read(&mut rest).unwrap();
        // SAFETY: live handles, each released once.
        unsafe {
            assert_eq!(wakemeter_sleep_probe_release(raw), OK);
            assert_eq!(wakemeter_sampler_release(h), OK);
        }
        assert_eq!(Arc::strong_count(&nap), 1);
    }
}
