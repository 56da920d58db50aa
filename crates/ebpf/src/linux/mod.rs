//! The Linux implementation: loads the embedded object with aya, attaches
//! it, and turns its maps into [`KernelSample`]s.

mod abi;
mod pid_ns;
pub(crate) mod stacks;
mod store;
mod sys;

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap, MapData, MapError};
use aya::programs::{BtfTracePoint, Iter, Program, ProgramError, RawTracePoint, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use wakemeter::histogram::Log2Histogram;
use wakemeter::kernel::{
    OffCpuTime, PollSyscallStats, SleepSyscallStats, Syscall, SyscallCalls, Waker,
};
use wakemeter::{FdKind, KernelSample, KernelSourceError, KernelThreadStats, ReadyFd};

use self::abi::{WmTarget, WmThread};
use self::store::Store;
use self::sys::ExitWatch;
use crate::{
    AttachKind, DEFAULT_MAX_THREADS, EbpfError, EbpfSourceBuilder, MAX_THREADS_LIMIT, MapUsage,
    ProgramRunStats, SyscallHook, Target,
};

mod convert;
mod hooks;
mod pool;
mod session;

use convert::*;
pub(crate) use hooks::RunStats;
pub(crate) use hooks::forget_kernel_btf;
use hooks::*;
use pool::*;
pub(crate) use session::Session;
use session::*;
#[cfg(test)]
mod tests;
