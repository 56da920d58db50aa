//! The real Mach calls of the Darwin backend (Apple targets only).
//!
//! Kept to the minimum: each function makes one call, copies the fields the
//! logic needs into plain structs, and returns the reply count unchecked;
//! every check lives in `mod.rs`, where it is unit-tested with the fake.

use std::mem::{offset_of, size_of};

use mach2::kern_return::KERN_SUCCESS;
use mach2::mach_port::mach_port_deallocate;
use mach2::mach_time::{mach_timebase_info, mach_timebase_info_data_t};
use mach2::message::mach_msg_type_number_t;
use mach2::port::mach_port_t;
use mach2::task::{task_info, task_threads};
use mach2::task_info::{
    TASK_POWER_INFO, TASK_POWER_INFO_COUNT as MACH2_TASK_POWER_INFO_COUNT, TASK_VM_INFO,
    task_power_info, task_vm_info,
};
use mach2::traps::mach_task_self;
use mach2::vm_types::natural_t;

use super::{
    KernReturn, Port, PowerInfo, Reply, Sys, TASK_POWER_INFO_COUNT, TASK_VM_INFO_REV0_COUNT,
    TASK_VM_INFO_REV1_COUNT, THREAD_BASIC_INFO_COUNT, THREAD_EXTENDED_INFO_COUNT,
    THREAD_IDENTIFIER_INFO_COUNT, THREAD_NAME_BYTES, ThreadTimes, TimeValue, Timebase, VmInfo,
};

/// Size of `T` in `natural_t` words: the count a call is offered.
const fn words<T>() -> u32 {
    (size_of::<T>() / size_of::<natural_t>()) as u32
}

// The logic's reply sizes must match the structs the calls are made with.
const _: () = {
    assert!(words::<libc::thread_basic_info>() == THREAD_BASIC_INFO_COUNT);
    assert!(libc::THREAD_BASIC_INFO_COUNT == THREAD_BASIC_INFO_COUNT);
    assert!(words::<libc::thread_identifier_info>() == THREAD_IDENTIFIER_INFO_COUNT);
    assert!(libc::THREAD_IDENTIFIER_INFO_COUNT == THREAD_IDENTIFIER_INFO_COUNT);
    assert!(words::<libc::thread_extended_info>() == THREAD_EXTENDED_INFO_COUNT);
    assert!(libc::THREAD_EXTENDED_INFO_COUNT == THREAD_EXTENDED_INFO_COUNT);
    assert!(libc::MAXTHREADNAMESIZE == THREAD_NAME_BYTES);
    assert!(words::<task_power_info>() == TASK_POWER_INFO_COUNT);
    assert!(MACH2_TASK_POWER_INFO_COUNT == TASK_POWER_INFO_COUNT);
    // xnu defines the revision counts as these offsets.
    assert!(offset_of!(task_vm_info, phys_footprint) == 4 * TASK_VM_INFO_REV0_COUNT as usize);
    assert!(offset_of!(task_vm_info, min_address) == 4 * TASK_VM_INFO_REV1_COUNT as usize);
    assert!(words::<task_vm_info>() >= TASK_VM_INFO_REV1_COUNT);
};

/// Reply structs of `thread_info`/`task_info` that may be zero-initialized.
///
/// # Safety
/// Implementors must consist only of integer fields (and arrays or structs
/// of integers), so that all-zero bytes are a valid value.
unsafe trait PlainReply: Copy {}

// SAFETY: two time_value_t (two c_int each) and six c_int.
unsafe impl PlainReply for libc::thread_basic_info {}
// SAFETY: three u64.
unsafe impl PlainReply for libc::thread_identifier_info {}
// SAFETY: two u64, eight i32 and a c_char array.
unsafe impl PlainReply for libc::thread_extended_info {}
// SAFETY: six u64.
unsafe impl PlainReply for task_power_info {}
// SAFETY: u64, i64 and c_int fields only.
unsafe impl PlainReply for task_vm_info {}

fn zeroed<T: PlainReply>() -> T {
    // SAFETY: `PlainReply` guarantees all-zero bytes are a valid `T`.
    unsafe { std::mem::zeroed() }
}

fn time_value(t: libc::time_value_t) -> TimeValue {
    TimeValue {
        seconds: t.seconds,
        microseconds: t.microseconds,
    }
}

/// The calling task, through Mach.
pub(crate) struct DarwinSys {
    task: mach_port_t,
    pid: u32,
    timebase: Timebase,
}

impl DarwinSys {
    /// Reads the task port name and the timebase; makes no other call.
    pub(crate) fn new() -> Self {
        // SAFETY: reads `mach_task_self_`, set by the runtime before main and
        // never changed; no reference is added, so nothing is to be released.
        let task = unsafe { mach_task_self() };
        let mut tb = mach_timebase_info_data_t { numer: 0, denom: 0 };
        // SAFETY: `tb` is a valid, writable mach_timebase_info for the call.
        let kr = unsafe { mach_timebase_info(&mut tb) };
        let timebase = if kr == KERN_SUCCESS {
            Timebase {
                numer: tb.numer,
                denom: tb.denom,
            }
        } else {
            Timebase { numer: 0, denom: 0 }
        };
        DarwinSys {
            task,
            pid: std::process::id(),
            timebase,
        }
    }

    /// `thread_info(port, flavor)` into a zeroed `T`, offered `T`'s full size.
    fn thread_info<T: PlainReply>(port: Port, flavor: i32) -> Result<Reply<T>, KernReturn> {
        let mut info: T = zeroed();
        let mut count: mach_msg_type_number_t = words::<T>();
        // SAFETY: `info` is writable for `count` words (its whole size) and
        // `count` is a valid in/out pointer; the kernel writes at most `count`
        // words and stores how many it wrote. A dead or foreign port only
        // makes the call fail.
        let kr = unsafe {
            libc::thread_info(
                port,
                flavor as libc::thread_flavor_t,
                (&raw mut info).cast(),
                &mut count,
            )
        };
        if kr != KERN_SUCCESS {
            return Err(kr);
        }
        Ok(Reply { info, count })
    }

    /// `task_info(self, flavor)` into a zeroed `T`, offered `T`'s full size.
    fn task_info<T: PlainReply>(&self, flavor: u32) -> Result<Reply<T>, KernReturn> {
        let mut info: T = zeroed();
        let mut count: mach_msg_type_number_t = words::<T>();
        // SAFETY: as in `thread_info`: `info` is writable for `count` words,
        // `count` is a valid in/out pointer, and the kernel writes at most
        // `count` words.
        let kr = unsafe { task_info(self.task, flavor, (&raw mut info).cast(), &mut count) };
        if kr != KERN_SUCCESS {
            return Err(kr);
        }
        Ok(Reply { info, count })
    }
}

impl Sys for DarwinSys {
    fn task_threads(&mut self, out: &mut Vec<Port>) -> Result<(), KernReturn> {
        out.clear();
        let mut list: *mut mach_port_t = std::ptr::null_mut();
        let mut count: mach_msg_type_number_t = 0;
        // SAFETY: both out-pointers are valid for writes. On success the
        // kernel maps an array of `count` thread ports into this task; this
        // function owns it and releases it below.
        let kr = unsafe { task_threads(self.task, &mut list, &mut count) };
        if kr != KERN_SUCCESS {
            return Err(kr);
        }
        if list.is_null() || count == 0 {
            return Ok(());
        }
        // SAFETY: on success `list` points to `count` initialized port names
        // that stay mapped until the deallocation below; the slice is not
        // used after it.
        let listed = unsafe { std::slice::from_raw_parts(list, count as usize) };
        out.extend_from_slice(listed);
        let bytes = count as usize * size_of::<mach_port_t>();
        // SAFETY: releases exactly the region the kernel allocated for this
        // reply (address and size of the array); nothing refers to it any more.
        // The ports themselves were copied and are released one by one by the
        // caller. `vm_deallocate` rather than `mach_vm_deallocate`: the
        // `mach_vm_*` headers are not supported on iOS.
        unsafe { libc::vm_deallocate(self.task, list as libc::vm_address_t, bytes) };
        Ok(())
    }

    fn release_port(&mut self, port: Port) {
        // SAFETY: releases one send right this task holds for `port` (handed
        // out by task_threads); an already-dead name only makes the call fail.
        unsafe { mach_port_deallocate(self.task, port) };
    }

    fn thread_id(&mut self, port: Port) -> Result<Reply<u64>, KernReturn> {
        let r: Reply<libc::thread_identifier_info> =
            Self::thread_info(port, libc::THREAD_IDENTIFIER_INFO)?;
        Ok(Reply {
            info: r.info.thread_id,
            count: r.count,
        })
    }

    fn thread_times(&mut self, port: Port) -> Result<Reply<ThreadTimes>, KernReturn> {
        let r: Reply<libc::thread_basic_info> = Self::thread_info(port, libc::THREAD_BASIC_INFO)?;
        Ok(Reply {
            info: ThreadTimes {
                user_time: time_value(r.info.user_time),
                system_time: time_value(r.info.system_time),
            },
            count: r.count,
        })
    }

    fn thread_name(&mut self, port: Port) -> Result<Reply<[u8; THREAD_NAME_BYTES]>, KernReturn> {
        let r: Reply<libc::thread_extended_info> =
            Self::thread_info(port, libc::THREAD_EXTENDED_INFO)?;
        Ok(Reply {
            info: r.info.pth_name.map(|c| c as u8),
            count: r.count,
        })
    }

    fn task_vm_info(&mut self) -> Result<Reply<VmInfo>, KernReturn> {
        let r: Reply<task_vm_info> = self.task_info(TASK_VM_INFO)?;
        Ok(Reply {
            info: VmInfo {
                resident_size: r.info.resident_size,
                resident_size_peak: r.info.resident_size_peak,
                phys_footprint: r.info.phys_footprint,
            },
            count: r.count,
        })
    }

    fn task_power_info(&mut self) -> Result<Reply<PowerInfo>, KernReturn> {
        let r: Reply<task_power_info> = self.task_info(TASK_POWER_INFO)?;
        Ok(Reply {
            info: PowerInfo {
                total_user: r.info.total_user,
                total_system: r.info.total_system,
                task_interrupt_wakeups: r.info.task_interrupt_wakeups,
                task_platform_idle_wakeups: r.info.task_platform_idle_wakeups,
            },
            count: r.count,
        })
    }

    fn timebase(&self) -> Timebase {
        self.timebase
    }

    fn pid(&self) -> u32 {
        self.pid
    }
}
