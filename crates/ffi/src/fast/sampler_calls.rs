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

/// Declares the operations once: doc, variant, number and the name of
/// its constant in Kotlin's `FastSampler`. The enum, [`SamplerOp::ALL`],
/// [`SamplerOp::from_number`] and [`SamplerOp::kotlin_name`] are derived;
/// the dispatch in `call` matches the enum, so an operation without an arm
/// does not compile, and `tests/kotlin_constants.rs` walks `ALL` against
/// `FastSampler.kt`.
macro_rules! sampler_ops {
    ($($(#[$doc:meta])* $op:ident = $number:literal, $kotlin:literal;)*) => {
        /// An operation of `wakemeter_sampler_call`: one method of the
        /// sampler, by number (the numbers Kotlin's `FastSampler` sends).
        #[repr(u32)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum SamplerOp {
            $($(#[$doc])* $op = $number,)*
        }

        impl SamplerOp {
            /// Every operation, in number order.
            pub const ALL: &'static [SamplerOp] = &[$(SamplerOp::$op,)*];

            /// The operation numbered `number`, if there is one.
            pub fn from_number(number: u32) -> Option<SamplerOp> {
                match number {
                    $($number => Some(SamplerOp::$op),)*
                    _ => None,
                }
            }

            /// The name of its constant in Kotlin's `FastSampler`.
            pub fn kotlin_name(self) -> &'static str {
                match self {
                    $(SamplerOp::$op => $kotlin,)*
                }
            }
        }
    };
}

sampler_ops! {
    /// `Sampler.stats()` → `SamplerStats`.
    Stats = 1, "STATS";
    /// `Sampler.report()` → `Report`.
    Report = 2, "REPORT";
    /// `Sampler.report_json()` → `String`.
    ReportJson = 3, "REPORT_JSON";
    /// `Sampler.findings()` → `Vec<Finding>`.
    Findings = 4, "FINDINGS";
    /// `Sampler.findings_with(thresholds)`, input a `Thresholds` → `Vec<Finding>`.
    FindingsWith = 5, "FINDINGS_WITH";
    /// `Sampler.latest_interval()` → `Option<Interval>`.
    LatestInterval = 6, "LATEST_INTERVAL";
    /// `Sampler.interval_over(window)`, input a `Duration` → `Option<Interval>`.
    IntervalOver = 7, "INTERVAL_OVER";
    /// `Sampler.sample_now()` → `Snapshot`.
    SampleNow = 8, "SAMPLE_NOW";
    /// `Sampler.latest()` → `Option<Snapshot>`.
    Latest = 9, "LATEST";
    /// `Sampler.snapshots()` → `Vec<Snapshot>`.
    Snapshots = 10, "SNAPSHOTS";
    /// `Sampler.listener_stats()` → `ListenerStats`.
    ListenerStats = 11, "LISTENER_STATS";
    /// `Sampler.is_running()` → `bool`.
    IsRunning = 12, "IS_RUNNING";
    /// `Sampler.config()` → `SamplerConfig`.
    Config = 13, "CONFIG";
    /// `Sampler.system()` → `SystemInfo`.
    System = 14, "SYSTEM";
    /// `Sampler.thresholds()` → `Thresholds`.
    Thresholds = 15, "THRESHOLDS";
    /// `Sampler.loop_probe(name)`, input a `String` → the `LoopProbe` object,
    /// then a `u64` raw handle of it (released with `wakemeter_loop_probe_release`).
    LoopProbe = 16, "LOOP_PROBE";
    /// `Sampler.sleep_probe(name)`, input a `String` → the `SleepProbe` object,
    /// then a `u64` raw handle of it (released with `wakemeter_sleep_probe_release`).
    SleepProbe = 17, "SLEEP_PROBE";
}

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
    let Some(op) = SamplerOp::from_number(op) else {
        return Err(BAD_INPUT);
    };
    match op {
        SamplerOp::Stats => put(s.stats()),
        SamplerOp::Report => put(s.report()),
        SamplerOp::ReportJson => put(s.report_json()),
        SamplerOp::Findings => put(s.findings()),
        SamplerOp::FindingsWith => put(s.findings_with(input::<Thresholds>(bytes)?)),
        SamplerOp::LatestInterval => put(s.latest_interval()),
        SamplerOp::IntervalOver => put(s.interval_over(input::<Duration>(bytes)?)),
        SamplerOp::SampleNow => put(s.sample_now()),
        SamplerOp::Latest => put(s.latest()),
        SamplerOp::Snapshots => put(s.snapshots()),
        SamplerOp::ListenerStats => put(Ok(s.listener_stats())),
        SamplerOp::IsRunning => put(Ok(s.is_running())),
        SamplerOp::Config => put(Ok(s.config())),
        SamplerOp::System => put(Ok(s.system())),
        SamplerOp::Thresholds => put(Ok(s.thresholds())),
        SamplerOp::LoopProbe => new_probe(s.loop_probe(input(bytes)?)),
        SamplerOp::SleepProbe => new_probe(s.sleep_probe(input(bytes)?)),
    }
}

/// Sampler method `op` (a [`SamplerOp`] number) on a raw handle,
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
        let snap: wakemeter::Snapshot = ok(h, SamplerOp::SampleNow as u32, &[]);
        assert!(!snap.threads.is_empty());
        s.sample_now().unwrap();
        let stats: SamplerStats = ok(h, SamplerOp::Stats as u32, &[]);
        assert_eq!(stats.total_samples, 2);
        assert_eq!(
            ok::<Vec<wakemeter::Snapshot>>(h, SamplerOp::Snapshots as u32, &[]).len(),
            2
        );
        assert_eq!(
            ok::<Option<wakemeter::Snapshot>>(h, SamplerOp::Latest as u32, &[]),
            s.latest().unwrap()
        );
        assert!(
            ok::<Option<wakemeter::Interval>>(h, SamplerOp::LatestInterval as u32, &[]).is_some()
        );
        let window = written(Duration::from_secs(10));
        assert!(
            ok::<Option<wakemeter::Interval>>(h, SamplerOp::IntervalOver as u32, &window).is_some()
        );
        let report: wakemeter::Report = ok(h, SamplerOp::Report as u32, &[]);
        assert_eq!(report.stats.total_samples, 2);
        let json: String = ok(h, SamplerOp::ReportJson as u32, &[]);
        assert!(json.contains("\"schema_version\""), "{json}");
        let _: Vec<Finding> = ok(h, SamplerOp::Findings as u32, &[]);
        let _: Vec<Finding> = ok(
            h,
            SamplerOp::FindingsWith as u32,
            &written(Thresholds::default()),
        );
        assert!(!ok::<bool>(h, SamplerOp::IsRunning as u32, &[]));
        assert_eq!(
            ok::<SamplerConfig>(h, SamplerOp::Config as u32, &[]),
            s.config()
        );
        assert_eq!(
            ok::<wakemeter::SystemInfo>(h, SamplerOp::System as u32, &[]),
            s.system()
        );
        assert_eq!(
            ok::<Thresholds>(h, SamplerOp::Thresholds as u32, &[]),
            s.thresholds()
        );
        assert_eq!(
            ok::<crate::ListenerStats>(h, SamplerOp::ListenerStats as u32, &[]),
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
        let (needed, _) = call_with(h, SamplerOp::Snapshots as u32, &[], 1 << 20);
        let (n, buf) = call_with(h, SamplerOp::Snapshots as u32, &[], MIN_CAPACITY as usize);
        assert_eq!(n, needed);
        assert!(buf.iter().all(|&b| b == 0xAA), "nothing written");
        let (n, buf) = call_with(h, SamplerOp::Stats as u32, &[], MIN_CAPACITY as usize - 1);
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
        assert_eq!(
            err(h, SamplerOp::FindingsWith as u32, &bad),
            1,
            "InvalidConfig"
        );
        let long = written("x".repeat(65));
        assert_eq!(
            err(h, SamplerOp::LoopProbe as u32, &long),
            7,
            "ProbeNameTooLong"
        );
        // Unknown operation, missing, truncated or trailing input.
        assert_eq!(call_with(h, 999, &[], 4096).0, -i64::from(BAD_INPUT));
        assert_eq!(
            call_with(h, SamplerOp::FindingsWith as u32, &[], 4096).0,
            -i64::from(BAD_INPUT)
        );
        assert_eq!(
            call_with(h, SamplerOp::FindingsWith as u32, &bad[..3], 4096).0,
            -i64::from(BAD_INPUT)
        );
        let mut trailing = written(Duration::from_secs(1));
        trailing.push(0);
        assert_eq!(
            call_with(h, SamplerOp::IntervalOver as u32, &trailing, 4096).0,
            -i64::from(BAD_INPUT)
        );
        // A null buffer and an input longer than the buffer.
        // SAFETY: both are refused before `buf` is read.
        unsafe {
            assert_eq!(
                wakemeter_sampler_call(h, SamplerOp::Stats as u32, std::ptr::null_mut(), 4096, 0),
                -i64::from(BAD_INPUT)
            );
            let mut buf = [0u8; 128];
            assert_eq!(
                wakemeter_sampler_call(h, SamplerOp::Stats as u32, buf.as_mut_ptr(), 128, 129),
                -i64::from(BAD_INPUT)
            );
        }
        s.shutdown();
        assert_eq!(err(h, SamplerOp::Stats as u32, &[]), 10, "Closed");
        // SAFETY: live handle, released once.
        assert_eq!(unsafe { wakemeter_sampler_release(h) }, OK);
    }

    #[test]
    fn new_probes_come_with_a_working_raw_handle() {
        let s = Sampler::new(SamplerConfig::default()).unwrap();
        let h = s.clone().raw_handle();
        let (n, buf) = call_with(
            h,
            SamplerOp::LoopProbe as u32,
            &written("io".to_string()),
            4096,
        );
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
                wakemeter_sampler_call(raw, SamplerOp::Stats as u32, stats.as_mut_ptr(), 256, 0),
                -i64::from(WRONG_KIND)
            );
            assert_eq!(wakemeter_sampler_release(raw), WRONG_KIND);
            assert_eq!(wakemeter_loop_probe_release(raw), OK);
        }
        assert_eq!(Arc::strong_count(&probe), 1);
        let (n, buf) = call_with(
            h,
            SamplerOp::SleepProbe as u32,
            &written("nap".to_string()),
            4096,
        );
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
