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

use self::abi::{LeafRow, LeafTableHalf, StackCountValue, StackKey, StoredStack};
use self::leaf::{LeafBuilder, MAX_LEAF_ROWS};
use self::perf::CpuClockEvents;
use super::sys::{self, ExitWatch};
use super::{Hook, attach_hook, kernel_btf, program_error, program_of, take_map};
use crate::EbpfError;
use crate::stacks::{
    LostStacks, MissingStack, SamplingTimer, Stack, StackCount, StackCounts, StackKind,
    StackSessionBuilder, TimerCounts, TimerFallback,
};

pub(crate) use self::perf::fd_budget;

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

/// Attached with the on-CPU program: the target's time between switch-in
/// and switch-out, to tell samples a timer could take from CPU time the
/// scheduler charged while the thread was not on a CPU (see
/// `WM_COUNT_SWITCH_NS` in stacks.h).
const ON_CPU_SWITCH_HOOK: Hook = Hook {
    tracepoint: "sched_switch",
    btf_program: "tpbtf_on_cpu_switch",
    raw_program: "rawtp_on_cpu_switch",
};

const WAKEUP_HOOKS: [Hook; 1] = [Hook {
    tracepoint: "sched_waking",
    btf_program: "tpbtf_stack_waking",
    raw_program: "rawtp_stack_waking",
}];

/// Rows a half of the unwind table holds beyond those of the modules
/// mapped at attach, for modules mapped later (`dlopen`): 512 KiB of
/// kernel memory per half at least.
const MIN_LEAF_HEADROOM: usize = 32_768;

/// Rows per half of the unwind table for a process whose modules have
/// `rows` rows at attach: room for as many again, at least
/// [`MIN_LEAF_HEADROOM`] more, at most [`MAX_LEAF_ROWS`]; 0 (no table)
/// where the table is not used (other architectures than x86_64).
fn leaf_capacity(rows: usize) -> u32 {
    if !cfg!(target_arch = "x86_64") {
        return 0;
    }
    let rows = rows
        .saturating_add(rows.max(MIN_LEAF_HEADROOM))
        .min(MAX_LEAF_ROWS);
    u32::try_from(rows).unwrap_or(0)
}

/// The unwind table while the programs run: two halves of `capacity`
/// rows in `rows`; the programs search the one `table` names, the loader
/// writes the other and then switches (see `leaf_table` in stacks.bpf.c).
struct LeafState {
    builder: LeafBuilder,
    capacity: u32,
    /// The half in use (0 or 1) and its row count.
    active: u32,
    row_count: u32,
    /// The target's execs the table in use was built after.
    execs_built: u64,
    /// `leaf_rows`, an array of [`LeafRow`].
    rows: aya::maps::Map,
    table: Array<MapData, LeafTableHalf>,
    execs: Array<MapData, u64>,
}

impl LeafState {
    /// Builds the table again when the target's executable mappings
    /// changed or it execed, and switches the programs to it: `true` then.
    fn refresh(&mut self) -> Result<bool, EbpfError> {
        let execs = self.execs.get(&0, 0).map_err(map_error("target_execs"))?;
        // Read before the mappings: a table built from mappings read after
        // an exec serves the new image.
        let Some(table) = self
            .builder
            .build_if_changed(self.capacity as usize, execs != self.execs_built)
        else {
            return Ok(false);
        };
        let next = 1 - self.active;
        let first = next * self.capacity;
        write_rows(&mut self.rows, first, &table.rows)?;
        let count = u32::try_from(table.rows.len()).unwrap_or(0);
        self.table
            .set(0, &LeafTableHalf::new(first, count, execs), 0)
            .map_err(map_error("leaf_table"))?;
        self.active = next;
        self.row_count = count;
        self.execs_built = execs;
        Ok(true)
    }
}

/// Writes `rows` at `first`, `first + 1`, ... of the `leaf_rows` map.
fn write_rows(map: &mut aya::maps::Map, first: u32, rows: &[LeafRow]) -> Result<(), EbpfError> {
    let aya::maps::Map::Array(data) = &*map else {
        return Err(EbpfError::ObjectMismatch { name: "leaf_rows" });
    };
    // One call for the ~30,000 rows of a C library, where one call per row
    // took most of the attach.
    let batched = sys::update_array_batch(data.fd().as_fd(), first, rows).map_err(|source| {
        EbpfError::Io {
            what: "writing the leaf table".into(),
            source,
        }
    })?;
    if !batched {
        let mut array: Array<&mut MapData, LeafRow> =
            Array::try_from(map).map_err(map_error("leaf_rows"))?;
        for (index, row) in (first..).zip(rows) {
            array.set(index, row, 0).map_err(map_error("leaf_rows"))?;
        }
    }
    Ok(())
}

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
    /// On-CPU: the timers that sample, why per thread was not used when
    /// asked for, and the per-thread events opened at attach.
    timer: (SamplingTimer, Option<TimerFallback>, u32),
    attach_duration: Duration,
    /// `None` without a table (other architectures than x86_64).
    leaf: Option<LeafState>,
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
        let mut builder = LeafBuilder::new(pid);
        let initial = builder
            .build_if_changed(MAX_LEAF_ROWS, true)
            .unwrap_or_default();
        let capacity = leaf_capacity(initial.rows.len());
        let period_ns: u64 = if options.kind == StackKind::OnCpu {
            1_000_000_000 / options.frequency_hz.max(1)
        } else {
            0
        };
        let mut ebpf = EbpfLoader::new()
            .btf(btf)
            .override_global("target_tgid", &kernel_tgid, true)
            .override_global("target_tid", &kernel_tid, true)
            .override_global("pidns_ino", &pidns_ino, true)
            .override_global("sample_period_ns", &period_ns, true)
            .map_max_entries("stacks", options.max_stacks)
            .map_max_entries("stack_counts", options.max_entries)
            .map_max_entries("off_start", threads)
            .override_global("leaf_capacity", &capacity, true)
            .map_max_entries("leaf_rows", capacity.saturating_mul(2).max(1))
            .load(object)
            .map_err(|source| EbpfError::Load { source })?;
        // Half 0 is filled, and named in leaf_table, before any program is
        // attached.
        let leaf = if capacity > 0 {
            let mut rows = take_map(&mut ebpf, "leaf_rows")?;
            let mut table: Array<MapData, LeafTableHalf> =
                Array::try_from(take_map(&mut ebpf, "leaf_table")?)
                    .map_err(map_error("leaf_table"))?;
            let execs: Array<MapData, u64> = Array::try_from(take_map(&mut ebpf, "target_execs")?)
                .map_err(map_error("target_execs"))?;
            let rows_now = &initial.rows[..initial.rows.len().min(capacity as usize)];
            write_rows(&mut rows, 0, rows_now)?;
            let count = u32::try_from(rows_now.len()).unwrap_or(0);
            table
                .set(0, &LeafTableHalf::new(0, count, 0), 0)
                .map_err(map_error("leaf_table"))?;
            Some(LeafState {
                builder,
                capacity,
                active: 0,
                row_count: count,
                execs_built: 0,
                rows,
                table,
                execs,
            })
        } else {
            None
        };

        if leaf.is_some() {
            attach_hook(&mut ebpf, &EXEC_HOOK, options.attach_kind, btf)?;
        }
        let events = match options.kind {
            StackKind::OnCpu => {
                attach_hook(&mut ebpf, &ON_CPU_SWITCH_HOOK, options.attach_kind, btf)?;
                let program: &mut PerfEvent = program_of(&mut ebpf, ON_CPU_PROGRAM)?;
                program.load().map_err(program_error(ON_CPU_PROGRAM))?;
                let fd = program.fd().map_err(program_error(ON_CPU_PROGRAM))?;
                Some(CpuClockEvents::open(
                    fd.as_fd(),
                    options.frequency_hz,
                    options.timer,
                    pid,
                    options.thread,
                )?)
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
        let timer = events
            .as_ref()
            .map_or((SamplingTimer::PerCpu, None, 0), |e| {
                (e.timer(), e.fallback(), e.thread_events())
            });
        Ok(StackSession {
            pid,
            kind: options.kind,
            frequency_hz: if options.kind == StackKind::OnCpu {
                options.frequency_hz
            } else {
                0
            },
            timer,
            attach_duration: started.elapsed(),
            leaf,
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
        self.leaf.as_ref().map_or(0, |l| l.row_count)
    }

    pub(crate) fn leaf_table_bytes(&self) -> u64 {
        self.leaf.as_ref().map_or(0, |l| {
            2 * u64::from(l.capacity) * size_of::<LeafRow>() as u64
                + size_of::<LeafTableHalf>() as u64
        })
    }

    /// Builds the unwind table again when the target mapped or unmapped an
    /// executable module (`dlopen`, `dlclose`) or execed since the last
    /// table, and switches the programs to it. `Ok(true)` when it did;
    /// `Ok(false)` when nothing changed, without a table, or once stopped.
    pub(crate) fn refresh_modules(&mut self) -> Result<bool, EbpfError> {
        if self.attached.is_none() {
            return Ok(false);
        }
        match self.leaf.as_mut() {
            Some(leaf) => leaf.refresh(),
            None => Ok(false),
        }
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
        let samples_taken = lost_of(abi::COUNT_SAMPLES)?;
        Ok(StackCounts {
            samples_taken,
            timer: if self.kind == StackKind::OnCpu {
                Some(TimerCounts {
                    skipped_periods: lost_of(abi::COUNT_TIMER_SKIPPED)?,
                    switch_ns: lost_of(abi::COUNT_SWITCH_NS)?,
                    program_ns: lost_of(abi::COUNT_PROGRAM_NS)?,
                    sampling_timer: self.timer.0,
                    fallback: self.timer.1,
                    thread_events: self.timer.2,
                })
            } else {
                None
            },
            kind: self.kind,
            pid: self.pid,
            entries,
            lost,
            target_exited,
            frequency_hz: self.frequency_hz,
        })
    }
}
