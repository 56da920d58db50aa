//! macOS and iOS backend: Mach `task_threads`, `thread_info` and `task_info`
//! on the calling task.
//!
//! One sample makes these Mach calls (all on `mach_task_self()`, no
//! entitlement needed, allowed in the iOS sandbox):
//!
//! - `task_threads`: one send right per thread, plus a kernel-allocated array.
//!   The array is released with `vm_deallocate` inside [`Sys::task_threads`]
//!   right after it is copied; every port is released with
//!   `mach_port_deallocate` right after that thread is measured, whether its
//!   info calls succeeded or not, so nothing leaks on any path.
//! - per thread, `thread_info(THREAD_IDENTIFIER_INFO)`: the 64-bit
//!   `thread_id`, unique system-wide and never reused. It is the thread's
//!   `tid`, and serials are assigned by it, so two threads are never merged
//!   (Mach port *names* can be reused; thread ids cannot).
//! - per thread, `thread_info(THREAD_BASIC_INFO)`: `user_time + system_time`
//!   as `time_value_t` (seconds + microseconds), converted to ns
//!   ([`CpuTimeSource::MachThreadInfo`], microsecond resolution).
//! - per thread, when it is first seen and on samples that read the switch
//!   split (the sampler's "heavier read" cadence), `thread_info(THREAD_EXTENDED_INFO)`
//!   for `pth_name`: the name `pthread_setname_np` gave the kernel. It is used
//!   instead of `pthread_from_mach_thread_np` + `pthread_getname_np` because
//!   the kernel answers with an error for a thread that has exited, whereas a
//!   `pthread_t` of an exited thread may already be freed.
//! - `task_info(TASK_VM_INFO)`: `resident_size`, `resident_size_peak`, and
//!   `phys_footprint` only when the returned count says the kernel filled
//!   revision 1 or later.
//! - `task_info(TASK_POWER_INFO)`: `task_interrupt_wakeups`,
//!   `task_platform_idle_wakeups`, and the process CPU time as
//!   `total_user + total_system`. Those two are cumulative over the task's
//!   whole life (exited threads included) and are in Mach absolute-time units
//!   (1 ns on Intel, 1/24 MHz on Apple silicon), converted with
//!   `mach_timebase_info`. `MACH_TASK_BASIC_INFO` is not used for this: its
//!   times cover *terminated* threads only.
//!
//! A thread whose identifier or basic info call fails (it exited between
//! `task_threads` and `thread_info`), or whose reply is shorter than the
//! flavor's struct, is left out of the sample; that is not an error.
//!
//! Not available per thread on Apple platforms, so always absent: run-queue
//! wait, switches, voluntary and involuntary context switches.
//!
//! Only the calling process can be sampled: reading another task needs
//! `task_for_pid`, which requires the `com.apple.security.cs.debugger`
//! entitlement (macOS, and root) and is never granted to iOS apps.
//! `Target::Pid` of another process is [`Error::Unsupported`].
//!
//! The Mach calls sit behind [`Sys`] (real implementation in `sys.rs`, Apple
//! targets only), so the logic here — time conversions, reply-count checks,
//! thread identity and port bookkeeping — is unit-tested on any host with
//! the fake in `fake.rs`.

#[cfg(target_vendor = "apple")]
mod sys;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

#[cfg(target_vendor = "apple")]
pub(crate) use sys::DarwinSys;

use crate::error::{Error, Result};
use crate::model::{ABSENT, Target, ThreadIdent, ThreadRow};
use crate::model::{CpuTimeSource, ProcessSample, SampleWarning};
use crate::platform::{Backend, SampleRequest};

/// A Mach port name (`mach_port_t`) in the calling task.
pub(crate) type Port = u32;

/// A Mach `kern_return_t`; `KERN_SUCCESS` (0) is never reported as an error.
pub(crate) type KernReturn = i32;

// Reply sizes in `natural_t` words (4 bytes), from xnu's `mach/thread_info.h`
// and `mach/task_info.h`. `sys.rs` checks them against the structs at compile time.

/// `THREAD_BASIC_INFO_COUNT`: two `time_value_t` and six `integer_t`.
pub(crate) const THREAD_BASIC_INFO_COUNT: u32 = 10;
/// `THREAD_IDENTIFIER_INFO_COUNT`: three `uint64_t`.
pub(crate) const THREAD_IDENTIFIER_INFO_COUNT: u32 = 6;
/// `THREAD_EXTENDED_INFO_COUNT`: two `uint64_t`, eight `int32_t`, a 64-byte name.
pub(crate) const THREAD_EXTENDED_INFO_COUNT: u32 = 28;
/// `TASK_POWER_INFO_COUNT`: six `uint64_t`.
pub(crate) const TASK_POWER_INFO_COUNT: u32 = 12;
/// `TASK_VM_INFO_REV0_COUNT` = `offsetof(task_vm_info, phys_footprint) / 4`:
/// the shortest reply the kernel gives (resident sizes, no footprint).
pub(crate) const TASK_VM_INFO_REV0_COUNT: u32 = 36;
/// `TASK_VM_INFO_REV1_COUNT` = `offsetof(task_vm_info, min_address) / 4`:
/// a reply at least this long has `phys_footprint` filled in.
pub(crate) const TASK_VM_INFO_REV1_COUNT: u32 = 38;
/// `MAXTHREADNAMESIZE`: bytes of `pth_name`, NUL included.
pub(crate) const THREAD_NAME_BYTES: usize = 64;

/// A Mach `time_value_t`: whole seconds plus microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TimeValue {
    pub seconds: i32,
    pub microseconds: i32,
}

impl TimeValue {
    /// The value in nanoseconds. Negative parts (never written by the
    /// kernel) count as zero rather than wrapping.
    pub(crate) fn as_ns(self) -> u64 {
        let s = u64::try_from(self.seconds).unwrap_or(0);
        let us = u64::try_from(self.microseconds).unwrap_or(0);
        s.saturating_mul(1_000_000_000)
            .saturating_add(us.saturating_mul(1_000))
    }
}

/// What `THREAD_BASIC_INFO` gives that the backend uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ThreadTimes {
    /// User-mode CPU time.
    pub user_time: TimeValue,
    /// Kernel-mode CPU time.
    pub system_time: TimeValue,
}

impl ThreadTimes {
    /// `user_time + system_time` in nanoseconds.
    pub(crate) fn cpu_ns(self) -> u64 {
        self.user_time
            .as_ns()
            .saturating_add(self.system_time.as_ns())
    }
}

/// What `TASK_VM_INFO` gives that the backend uses, in bytes. `phys_footprint`
/// is meaningful only when the reply count is at least [`TASK_VM_INFO_REV1_COUNT`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct VmInfo {
    pub resident_size: u64,
    pub resident_size_peak: u64,
    pub phys_footprint: u64,
}

/// What `TASK_POWER_INFO` gives that the backend uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PowerInfo {
    /// User time of the task's whole life, in Mach absolute-time units.
    pub total_user: u64,
    /// System time of the task's whole life, in Mach absolute-time units.
    pub total_system: u64,
    /// Wakeups of the task's threads by interrupts (timers included).
    pub task_interrupt_wakeups: u64,
    /// Wakeups that took a CPU package out of idle.
    pub task_platform_idle_wakeups: u64,
}

/// A reply of `thread_info`/`task_info`: the data and the count (in
/// `natural_t` words) the kernel says it filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply<T> {
    pub info: T,
    pub count: u32,
}

/// `mach_timebase_info`: Mach absolute-time ticks × `numer` / `denom` = ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timebase {
    pub numer: u32,
    pub denom: u32,
}

impl Timebase {
    /// Converts Mach absolute-time ticks to nanoseconds, saturating. A zero
    /// ratio (a failed `mach_timebase_info`) is treated as 1:1.
    pub(crate) fn ticks_to_ns(self, ticks: u64) -> u64 {
        if self.numer == 0 || self.denom == 0 {
            return ticks;
        }
        let ns = u128::from(ticks) * u128::from(self.numer) / u128::from(self.denom);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// The Mach calls the Darwin backend makes, all on the calling task.
pub(crate) trait Sys: Send {
    /// `task_threads`: lists the task's threads into `out` (cleared first).
    /// The kernel's array is already released when this returns; each port
    /// in `out` carries one send right that the caller must release with
    /// [`Sys::release_port`] exactly once.
    fn task_threads(&mut self, out: &mut Vec<Port>) -> Result<(), KernReturn>;
    /// `mach_port_deallocate`: releases one send right from [`Sys::task_threads`].
    fn release_port(&mut self, port: Port);
    /// `thread_info(THREAD_IDENTIFIER_INFO)`: the thread's `thread_id`.
    fn thread_id(&mut self, port: Port) -> Result<Reply<u64>, KernReturn>;
    /// `thread_info(THREAD_BASIC_INFO)`: the thread's user and system time.
    fn thread_times(&mut self, port: Port) -> Result<Reply<ThreadTimes>, KernReturn>;
    /// `thread_info(THREAD_EXTENDED_INFO)`: the thread's `pth_name` bytes.
    fn thread_name(&mut self, port: Port) -> Result<Reply<[u8; THREAD_NAME_BYTES]>, KernReturn>;
    /// `task_info(TASK_VM_INFO)`, asked with the largest revision known at build time.
    fn task_vm_info(&mut self) -> Result<Reply<VmInfo>, KernReturn>;
    /// `task_info(TASK_POWER_INFO)`.
    fn task_power_info(&mut self) -> Result<Reply<PowerInfo>, KernReturn>;
    /// The Mach absolute-time ratio (read once; it never changes).
    fn timebase(&self) -> Timebase;
    /// The calling process's PID.
    fn pid(&self) -> u32;
}

/// A readable name for the common `kern_return_t` values, for error messages.
fn kern_return_name(kr: KernReturn) -> &'static str {
    match kr {
        0 => "KERN_SUCCESS",
        1 => "KERN_INVALID_ADDRESS",
        2 => "KERN_PROTECTION_FAILURE",
        3 => "KERN_NO_SPACE",
        4 => "KERN_INVALID_ARGUMENT",
        5 => "KERN_FAILURE",
        6 => "KERN_RESOURCE_SHORTAGE",
        8 => "KERN_NO_ACCESS",
        15 => "KERN_INVALID_NAME",
        17 => "KERN_INVALID_RIGHT",
        37 => "KERN_TERMINATED",
        0x1000_0003 => "MACH_SEND_INVALID_DEST",
        _ => "unknown kern_return_t",
    }
}

/// A failed Mach call, as the crate's error. Mach calls have no path; the
/// call and flavor stand in for it.
fn mach_error(call: &'static str, detail: String) -> Error {
    Error::Unreadable {
        path: call.to_string(),
        source: io::Error::other(detail),
    }
}

fn kern_error(call: &'static str, kr: KernReturn) -> Error {
    mach_error(
        call,
        format!("kern_return_t {kr} ({})", kern_return_name(kr)),
    )
}

fn short_reply(call: &'static str, count: u32, expected: u32) -> Error {
    mach_error(
        call,
        format!("reply has {count} words, expected at least {expected}"),
    )
}

/// The name in a `pth_name` buffer: up to the first NUL, invalid UTF-8 replaced.
pub(crate) fn name_from_bytes(raw: &[u8]) -> Box<str> {
    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into()
}

struct Tracked {
    ident: Arc<ThreadIdent>,
    /// Generation of the last sample that saw this thread.
    seen: u64,
}

/// The Darwin backend, generic over its Mach calls.
pub(crate) struct DarwinBackend<S: Sys> {
    sys: S,
    /// Tracked threads by Mach `thread_id`.
    tracked: HashMap<u64, Tracked>,
    /// Reused buffer for the port list.
    ports: Vec<Port>,
    generation: u64,
    next_serial: u64,
}

impl<S: Sys> DarwinBackend<S> {
    /// Creates the backend for `target`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for `Target::Pid` of another process: reading
    /// another task needs `task_for_pid` and its entitlement. `Target::Pid`
    /// of the calling process is the same as [`Target::SelfProcess`].
    pub(crate) fn new(sys: S, target: Target) -> Result<Self> {
        match target {
            Target::SelfProcess => {}
            Target::Pid(pid) if pid == sys.pid() => {}
            Target::Pid(_) => {
                return Err(Error::Unsupported {
                    what: "sampling another process on macOS/iOS \
                           (task_for_pid needs a debugger entitlement; iOS never grants it)",
                });
            }
        }
        Ok(DarwinBackend {
            sys,
            tracked: HashMap::new(),
            ports: Vec::new(),
            generation: 0,
            next_serial: 0,
        })
    }

    /// The thread's `pth_name`, or `None` when the call fails or its reply is short.
    fn read_name(&mut self, port: Port) -> Option<Box<str>> {
        let reply = self.sys.thread_name(port).ok()?;
        (reply.count >= THREAD_EXTENDED_INFO_COUNT).then(|| name_from_bytes(&reply.info))
    }

    /// Measures one listed thread; `None` if it exited mid-sample (or was
    /// already measured in this sample). Does not release the port.
    fn measure(&mut self, port: Port, request: SampleRequest<'_>) -> Option<ThreadRow> {
        let id = self.sys.thread_id(port).ok()?;
        if id.count < THREAD_IDENTIFIER_INFO_COUNT {
            return None;
        }
        let thread_id = id.info;
        let times = self.sys.thread_times(port).ok()?;
        if times.count < THREAD_BASIC_INFO_COUNT {
            return None;
        }
        let generation = self.generation;
        let known = self.tracked.get(&thread_id).map(|t| t.seen);
        if known == Some(generation) {
            return None; // listed twice: measured already
        }
        // Names are read when a thread is first seen and on "split" samples,
        // so a rename (pthread_setname_np) shows within a few samples.
        let name = if known.is_none() || request.switch_split {
            self.read_name(port)
        } else {
            None
        };
        let t = match self.tracked.entry(thread_id) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let t = e.into_mut();
                if let Some(name) = name
                    && *name != *t.ident.name
                {
                    // Renamed: new identity record, same serial.
                    t.ident = Arc::new(ThreadIdent {
                        tid: thread_id,
                        serial: t.ident.serial,
                        name,
                        cpu_time_source: CpuTimeSource::MachThreadInfo,
                    });
                }
                t
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                let serial = self.next_serial;
                self.next_serial += 1;
                e.insert(Tracked {
                    ident: Arc::new(ThreadIdent {
                        tid: thread_id,
                        serial,
                        name: name.unwrap_or_default(),
                        cpu_time_source: CpuTimeSource::MachThreadInfo,
                    }),
                    seen: generation,
                })
            }
        };
        t.seen = generation;
        Some(ThreadRow {
            ident: t.ident.clone(),
            total_cpu_time_ns: times.info.cpu_ns(),
            // No per-thread form on Apple platforms.
            total_run_queue_wait_ns: ABSENT,
            total_switches: ABSENT,
            total_voluntary_switches: ABSENT,
            total_involuntary_switches: ABSENT,
        })
    }

    fn process_sample(&mut self, thread_count: u32) -> Result<ProcessSample> {
        const VM: &str = "task_info(TASK_VM_INFO)";
        const POWER: &str = "task_info(TASK_POWER_INFO)";
        let vm = self.sys.task_vm_info().map_err(|kr| kern_error(VM, kr))?;
        if vm.count < TASK_VM_INFO_REV0_COUNT {
            return Err(short_reply(VM, vm.count, TASK_VM_INFO_REV0_COUNT));
        }
        let phys_footprint =
            (vm.count >= TASK_VM_INFO_REV1_COUNT).then_some(vm.info.phys_footprint);
        let power = self
            .sys
            .task_power_info()
            .map_err(|kr| kern_error(POWER, kr))?;
        if power.count < TASK_POWER_INFO_COUNT {
            return Err(short_reply(POWER, power.count, TASK_POWER_INFO_COUNT));
        }
        let ticks = power
            .info
            .total_user
            .saturating_add(power.info.total_system);
        Ok(ProcessSample {
            pid: self.sys.pid(),
            rss_bytes: vm.info.resident_size,
            peak_rss_bytes: Some(vm.info.resident_size_peak),
            phys_footprint_bytes: phys_footprint,
            total_cpu_time_ns: self.sys.timebase().ticks_to_ns(ticks),
            thread_count,
            total_interrupt_wakeups: Some(power.info.task_interrupt_wakeups),
            total_platform_idle_wakeups: Some(power.info.task_platform_idle_wakeups),
        })
    }

    /// Number of threads currently tracked.
    #[cfg(test)]
    pub(crate) fn tracked_len(&self) -> usize {
        self.tracked.len()
    }
}

impl<S: Sys> Backend for DarwinBackend<S> {
    fn sample(
        &mut self,
        request: SampleRequest<'_>,
        threads: &mut Vec<ThreadRow>,
        _warnings: &mut Vec<SampleWarning>,
    ) -> Result<ProcessSample> {
        threads.clear();
        let mut ports = std::mem::take(&mut self.ports);
        if let Err(kr) = self.sys.task_threads(&mut ports) {
            ports.clear();
            self.ports = ports;
            return Err(kern_error("task_threads(mach_task_self())", kr));
        }
        self.generation = self.generation.wrapping_add(1);
        for &port in &ports {
            let measured = self.measure(port, request);
            // Released on every path, measured or not; never touched after.
            self.sys.release_port(port);
            if let Some(p) = measured {
                threads.push(p);
            }
        }
        ports.clear();
        self.ports = ports;
        let generation = self.generation;
        self.tracked.retain(|_, t| t.seen == generation);
        let count = u32::try_from(threads.len()).unwrap_or(u32::MAX);
        self.process_sample(count)
    }
}
