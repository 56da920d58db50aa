//! Loads `stacks.bpf.o`, attaches the programs of one [`StackKind`] and
//! reads the counts with their stacks.

mod abi;
mod leaf;
mod perf;

use std::collections::HashMap as StdHashMap;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use aya::programs::PerfEvent;
use aya::{Ebpf, EbpfLoader};

use self::abi::{StackCountValue, StackKey, StoredStack};
use self::perf::CpuClockEvents;
use super::sys::{self, ExitWatch};
use super::{Hook, attach_hook, kernel_btf, program_error, program_of, take_map};
use crate::EbpfError;
use crate::stacks::{
    LostStacks, MissingStack, Stack, StackCount, StackCounts, StackKind, StackSessionBuilder,
};

/// The compiled stack programs, embedded with 8-byte alignment.
#[cfg(not(wakemeter_ebpf_no_clang))]
fn object() -> Result<&'static [u8], EbpfError> {
    Ok(aya::include_bytes_aligned!(concat!(
        env!("OUT_DIR"),
        "/stacks.bpf.o"
    )))
}

#[cfg(wakemeter_ebpf_no_clang)]
fn object() -> Result<&'static [u8], EbpfError> {
    Err(EbpfError::BuiltWithoutClang)
}

const ON_CPU_PROGRAM: &str = "on_cpu_sample";

/// Exit cleanup first, so no start entry is created that nothing deletes.
const OFF_CPU_HOOKS: [Hook; 2] = [
    Hook {
        tracepoint: "sched_process_exit",
        btf_program: "tpbtf_stack_exit",
        raw_program: "rawtp_stack_exit",
    },
    Hook {
        tracepoint: "sched_switch",
        btf_program: "tpbtf_stack_switch",
        raw_program: "rawtp_stack_switch",
    },
];

/// Attached for every kind when the unwind table has rows: an exec of the
/// target makes the table stale (see `on_exec()` in stacks.bpf.c).
const EXEC_HOOK: Hook = Hook {
    tracepoint: "sched_process_exec",
    btf_program: "tpbtf_stack_exec",
    raw_program: "rawtp_stack_exec",
};

const WAKEUP_HOOKS: [Hook; 1] = [Hook {
    tracepoint: "sched_waking",
    btf_program: "tpbtf_stack_waking",
    raw_program: "rawtp_stack_waking",
}];

/// Programs and their perf events; dropped to detach.
struct Attached {
    /// On-CPU sampling events (closed before the object, which holds the
    /// program they run).
    _events: Option<CpuClockEvents>,
    _ebpf: Ebpf,
}

pub(crate) struct StackSession {
    pid: u32,
    kind: StackKind,
    frequency_hz: u64,
    attach_duration: Duration,
    leaf_rows: u32,
    /// `None` when observing this very process.
    watch: Option<ExitWatch>,
    /// `None` once stopped.
    attached: Option<Attached>,
    counts: HashMap<MapData, StackKey, StackCountValue>,
    stacks: HashMap<MapData, u32, StoredStack>,
    lost: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for StackSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackSession")
            .field("pid", &self.pid)
            .field("kind", &self.kind)
            .field("attached", &self.attached.is_some())
            .finish()
    }
}

fn map_error(map: &'static str) -> impl Fn(aya::maps::MapError) -> EbpfError {
    move |source| EbpfError::Map { map, source }
}

impl StackSession {
    pub(crate) fn attach(options: &StackSessionBuilder) -> Result<StackSession, EbpfError> {
        let started = Instant::now();
        let (pid, watch) = super::resolve_target(options.target)?;
        let object = object()?;
        sys::check_kernel_btf(options.kernel_btf.as_deref())?;
        sys::check_privileges()?;
        let btf = kernel_btf(options.kernel_btf.as_deref())?;
        let btf = btf.as_ref();
        // In a PID namespace of its own, the programs compare the
        // initial-namespace ids and write keys with this namespace's.
        let namespace = super::pid_ns::proc_namespace();
        let (kernel_tgid, kernel_tid) = match namespace {
            Some(ns) if options.thread != 0 => {
                let ids = ns.host_ids(options.thread, btf)?;
                (ns.host_ids(pid, btf)?.tgid, ids.tid)
            }
            Some(ns) => (ns.host_ids(pid, btf)?.tgid, 0),
            None => (pid, options.thread),
        };
        let pidns_ino = namespace.map_or(0u64, |ns| ns.ino);
        // One off-CPU start entry per thread: sized as the counters' map.
        let threads = super::auto_max_threads(sys::thread_count(pid));
        let leaf_table = leaf::build(pid);
        let leaf_rows = u32::try_from(leaf_table.rows.len()).unwrap_or(0);
        let mut ebpf = EbpfLoader::new()
            .btf(btf)
            .override_global("target_tgid", &kernel_tgid, true)
            .override_global("target_tid", &kernel_tid, true)
            .override_global("pidns_ino", &pidns_ino, true)
            .map_max_entries("stacks", options.max_stacks)
            .map_max_entries("stack_counts", options.max_entries)
            .map_max_entries("off_start", threads)
            .override_global("leaf_row_count", &leaf_rows, true)
            .map_max_entries("leaf_rows", leaf_rows.max(1))
            .load(object)
            .map_err(|source| EbpfError::Load { source })?;
        // Filled before any program is attached: the programs search the
        // first leaf_row_count rows.
        if leaf_rows > 0 {
            // Borrowed, not taken: the programs still to be loaded refer
            // to the map by the object's descriptor.
            let map = ebpf
                .map_mut("leaf_rows")
                .ok_or(EbpfError::ObjectMismatch { name: "leaf_rows" })?;
            let aya::maps::Map::Array(data) = &*map else {
                return Err(EbpfError::ObjectMismatch { name: "leaf_rows" });
            };
            // One call for the ~30,000 rows of a C library, where one call
            // per row took most of the attach.
            let batched =
                sys::update_array_batch(data.fd().as_fd(), &leaf_table.rows).map_err(|source| {
                    EbpfError::Io {
                        what: "writing the leaf table".into(),
                        source,
                    }
                })?;
            if !batched {
                let mut rows: Array<&mut MapData, abi::LeafRow> =
                    Array::try_from(map).map_err(map_error("leaf_rows"))?;
                for (index, row) in (0u32..).zip(&leaf_table.rows) {
                    rows.set(index, row, 0).map_err(map_error("leaf_rows"))?;
                }
            }
        }

        if leaf_rows > 0 {
            attach_hook(&mut ebpf, &EXEC_HOOK, options.attach_kind, btf)?;
        }
        let events = match options.kind {
            StackKind::OnCpu => {
                let program: &mut PerfEvent = program_of(&mut ebpf, ON_CPU_PROGRAM)?;
                program.load().map_err(program_error(ON_CPU_PROGRAM))?;
                let fd = program.fd().map_err(program_error(ON_CPU_PROGRAM))?;
                Some(CpuClockEvents::open(fd.as_fd(), options.frequency_hz)?)
            }
            StackKind::OffCpu | StackKind::Wakeups => {
                let hooks: &[Hook] = if options.kind == StackKind::OffCpu {
                    &OFF_CPU_HOOKS
                } else {
                    &WAKEUP_HOOKS
                };
                for hook in hooks {
                    attach_hook(&mut ebpf, hook, options.attach_kind, btf)?;
                }
                None
            }
        };

        let counts = HashMap::try_from(take_map(&mut ebpf, "stack_counts")?)
            .map_err(map_error("stack_counts"))?;
        let stacks =
            HashMap::try_from(take_map(&mut ebpf, "stacks")?).map_err(map_error("stacks"))?;
        let lost = PerCpuArray::try_from(take_map(&mut ebpf, "stack_lost")?)
            .map_err(map_error("stack_lost"))?;
        Ok(StackSession {
            pid,
            kind: options.kind,
            frequency_hz: if options.kind == StackKind::OnCpu {
                options.frequency_hz
            } else {
                0
            },
            attach_duration: started.elapsed(),
            leaf_rows,
            watch,
            attached: Some(Attached {
                _events: events,
                _ebpf: ebpf,
            }),
            counts,
            stacks,
            lost,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn kind(&self) -> StackKind {
        self.kind
    }

    pub(crate) fn attach_duration(&self) -> Duration {
        self.attach_duration
    }

    pub(crate) fn leaf_rows(&self) -> u32 {
        self.leaf_rows
    }

    pub(crate) fn target_exited(&self) -> bool {
        self.watch.as_ref().is_some_and(ExitWatch::has_exited)
    }

    pub(crate) fn stop(&mut self) {
        self.attached = None;
    }

    pub(crate) fn read(&mut self) -> Result<StackCounts, EbpfError> {
        let target_exited = self.target_exited();
        if target_exited {
            // Nothing more can come: detach now, keep the maps to read.
            self.stop();
        }
        let mut frames: StdHashMap<u32, Option<Vec<u64>>> = StdHashMap::new();
        let mut entries = Vec::new();
        for item in self.counts.iter() {
            let (key, value) = item.map_err(map_error("stack_counts"))?;
            let mut stack = |raw: i32| -> Stack {
                let id = abi::stack_id(raw)?;
                frames
                    .entry(id)
                    .or_insert_with(|| self.stacks.get(&id, 0).ok().map(|t| t.frames()))
                    .clone()
                    .ok_or(MissingStack::Evicted)
            };
            let user_stack = stack(key.user_stack);
            let kernel_stack = stack(key.kernel_stack);
            entries.push(StackCount {
                tid: key.tid,
                thread_name: super::abi::comm_str(&key.comm),
                cause: (key.kind == abi::KIND_OFF_CPU).then(|| abi::cause(key.cause)),
                waker: (key.kind == abi::KIND_WAKEUP)
                    .then(|| (key.waker_tid, super::abi::comm_str(&key.waker_comm))),
                user_stack,
                kernel_stack,
                count: value.count,
                total_ns: value.total_ns,
            });
        }
        let lost_of = |index: u32| -> Result<u64, EbpfError> {
            Ok(self
                .lost
                .get(&index, 0)
                .map_err(map_error("stack_lost"))?
                .iter()
                .fold(0u64, |a, b| a.saturating_add(*b)))
        };
        let lost = LostStacks {
            counts_full: lost_of(abi::LOST_COUNTS_FULL)?,
            stack_collisions: lost_of(abi::LOST_COLLISION)?,
            stacks_full: lost_of(abi::LOST_STACKS_FULL)?,
            off_cpu_spans: lost_of(abi::LOST_OFF_START_FULL)?,
            truncated_unwinds: lost_of(abi::LOST_UNWIND_TRUNCATED)?,
        };
        Ok(StackCounts {
            kind: self.kind,
            pid: self.pid,
            entries,
            lost,
            target_exited,
            frequency_hz: self.frequency_hz,
        })
    }
}
