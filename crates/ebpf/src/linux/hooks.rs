//! The kernel programs and how they attach: the hooks, the embedded object,
//! the kernel's BTF, what the running kernel offers, and the run statistics
//! switch.

use super::*;

/// One tracepoint and the two flavours of its program in the object.
pub(super) struct Hook {
    pub(super) tracepoint: &'static str,
    pub(super) btf_program: &'static str,
    pub(super) raw_program: &'static str,
}

/// Attach order: exit and exec cleanup first, so no entry is created that
/// nothing would delete; the scheduler switch last, as it is the busiest.
pub(super) const HOOKS: [Hook; 5] = [
    Hook {
        tracepoint: "sched_process_exit",
        btf_program: "tpbtf_sched_process_exit",
        raw_program: "rawtp_sched_process_exit",
    },
    Hook {
        tracepoint: "sched_process_exec",
        btf_program: "tpbtf_sched_process_exec",
        raw_program: "rawtp_sched_process_exec",
    },
    Hook {
        tracepoint: "sys_exit",
        btf_program: "tpbtf_sys_exit",
        raw_program: "rawtp_sys_exit",
    },
    Hook {
        tracepoint: "sched_waking",
        btf_program: "tpbtf_sched_waking",
        raw_program: "rawtp_sched_waking",
    },
    Hook {
        tracepoint: "sched_switch",
        btf_program: "tpbtf_sched_switch",
        raw_program: "rawtp_sched_switch",
    },
];

/// The empty program attached with [`EbpfSourceBuilder::with_calibration_program`].
pub(super) const CALIBRATION: Hook = Hook {
    tracepoint: "sched_switch",
    btf_program: "tpbtf_calibrate",
    raw_program: "rawtp_calibrate",
};

/// The program for the per-syscall exit tracepoints ([`SyscallHook::PerSyscall`]).
pub(super) const PER_SYSCALL_PROGRAM: &str = "tp_sys_exits";

/// The `syscalls/sys_exit_<name>` tracepoints it goes on: the poll, sleep
/// and rename families of the kernel side's `syscall_class`, and `futex`
/// (its timed waits and their timeouts)...
pub(super) const PER_SYSCALL_EXITS: &[&str] = &[
    "epoll_pwait",
    "epoll_pwait2",
    "ppoll",
    "pselect6",
    "nanosleep",
    "clock_nanosleep",
    "prctl",
    "execve",
    "execveat",
    "futex",
];
/// ...and those only x86_64 has (aarch64 has no `poll`, `select` or `epoll_wait`).
#[cfg(target_arch = "x86_64")]
pub(super) const PER_SYSCALL_EXITS_X86: &[&str] = &["poll", "select", "epoll_wait"];
#[cfg(not(target_arch = "x86_64"))]
pub(super) const PER_SYSCALL_EXITS_X86: &[&str] = &[];

/// Whether a mounted tracefs offers the per-syscall exit tracepoints.
pub(super) fn per_syscall_tracepoints_available() -> bool {
    wakemeter_procfs::system::tracepoint_exists("syscalls", "sys_exit_nanosleep")
}

/// The compiled kernel programs, embedded with 8-byte alignment: with
/// the per-thread entries in task storage, or in a hash map.
#[cfg(not(wakemeter_ebpf_no_clang))]
pub(super) fn object(task_store: bool) -> Result<&'static [u8], EbpfError> {
    Ok(if task_store {
        aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/wakemeter_task_store.bpf.o"))
    } else {
        aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/wakemeter.bpf.o"))
    })
}

#[cfg(wakemeter_ebpf_no_clang)]
pub(super) fn object(_task_store: bool) -> Result<&'static [u8], EbpfError> {
    Err(EbpfError::BuiltWithoutClang)
}

/// The kernel's BTF parsed from `/sys/kernel/btf/vmlinux`, kept for the
/// next attach until [`forget_kernel_btf`] (about 13 MB on a 6.18 kernel).
static KERNEL_BTF: Mutex<Option<Arc<Btf>>> = Mutex::new(None);

/// The kernel's BTF: from `/sys/kernel/btf/vmlinux`, parsed once and reused
/// until [`forget_kernel_btf`] (parsing is most of the first attach:
/// BENCHMARKS.md, eBPF section, "Against the targets"), or from the file
/// `path`, parsed at each attach.
pub(super) fn kernel_btf(path: Option<&std::path::Path>) -> Result<Arc<Btf>, EbpfError> {
    if let Some(path) = path {
        return Btf::parse_file(path, aya::Endianness::default())
            .map(Arc::new)
            .map_err(|source| EbpfError::Btf { source });
    }
    if let Some(btf) = lock(&KERNEL_BTF).as_ref() {
        return Ok(Arc::clone(btf));
    }
    // Parsed outside the lock: a second attach meanwhile parses its own.
    let parsed = Arc::new(Btf::from_sys_fs().map_err(|source| EbpfError::Btf { source })?);
    Ok(Arc::clone(
        lock(&KERNEL_BTF).get_or_insert_with(|| Arc::clone(&parsed)),
    ))
}

/// Drops the kernel's BTF kept for later attaches: about 13 MB (a 6.18
/// kernel's `/sys/kernel/btf/vmlinux` parsed) that a process attaching no
/// more targets need not hold. The next attach parses it again (a second
/// or more on a busy machine). Attached sources are unaffected.
pub(crate) fn forget_kernel_btf() {
    lock(&KERNEL_BTF).take();
}

/// Capacity of the per-thread map for a target with `threads` threads:
/// twice that, at least [`DEFAULT_MAX_THREADS`], at most [`MAX_THREADS_LIMIT`].
pub(super) fn auto_max_threads(threads: Option<u32>) -> u32 {
    threads
        .unwrap_or(0)
        .saturating_mul(2)
        .clamp(DEFAULT_MAX_THREADS, MAX_THREADS_LIMIT)
}
/// Attaches one hook as `kind` asks; returns the name of the program that
/// is now attached.
pub(super) fn attach_hook(
    ebpf: &mut Ebpf,
    hook: &Hook,
    kind: AttachKind,
    btf: &Btf,
) -> Result<&'static str, EbpfError> {
    let btf_result = if kind == AttachKind::RawTracepoint {
        None
    } else {
        Some(attach_btf(ebpf, hook, btf))
    };
    match btf_result {
        Some(Ok(())) => Ok(hook.btf_program),
        Some(Err(e)) if kind == AttachKind::BtfTracepoint => Err(e),
        _ => attach_raw(ebpf, hook).map(|()| hook.raw_program),
    }
}

/// The error of program `name`.
pub(super) fn program_error(name: &'static str) -> impl Fn(ProgramError) -> EbpfError {
    move |source| EbpfError::Program {
        program: name,
        source,
    }
}

/// Program `name` of the object, as the program type `P`.
pub(super) fn program_of<'a, P>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut P, EbpfError>
where
    &'a mut P: TryFrom<&'a mut Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(EbpfError::ObjectMismatch { name })?
        .try_into()
        .map_err(program_error(name))
}

pub(super) fn attach_btf(ebpf: &mut Ebpf, hook: &Hook, btf: &Btf) -> Result<(), EbpfError> {
    let wrap = program_error(hook.btf_program);
    let program: &mut BtfTracePoint = program_of(ebpf, hook.btf_program)?;
    program.load(hook.tracepoint, btf).map_err(&wrap)?;
    if let Err(e) = program.attach() {
        // Free the verified program before falling back; the error is what matters.
        let _ = program.unload();
        return Err(wrap(e));
    }
    Ok(())
}

pub(super) fn attach_raw(ebpf: &mut Ebpf, hook: &Hook) -> Result<(), EbpfError> {
    let wrap = program_error(hook.raw_program);
    let program: &mut RawTracePoint = program_of(ebpf, hook.raw_program)?;
    program.load().map_err(&wrap)?;
    program.attach(hook.tracepoint).map_err(&wrap)?;
    Ok(())
}

/// Loads the per-syscall program and attaches it to every tracepoint of
/// [`PER_SYSCALL_EXITS`]; on any failure nothing stays attached.
pub(super) fn attach_per_syscall(ebpf: &mut Ebpf) -> Result<(), EbpfError> {
    let wrap = program_error(PER_SYSCALL_PROGRAM);
    let program: &mut TracePoint = program_of(ebpf, PER_SYSCALL_PROGRAM)?;
    program.load().map_err(&wrap)?;
    for call in PER_SYSCALL_EXITS.iter().chain(PER_SYSCALL_EXITS_X86) {
        if let Err(e) = program.attach("syscalls", &format!("sys_exit_{call}")) {
            // Unloading detaches the tracepoints attached so far.
            let _ = program.unload();
            return Err(wrap(e));
        }
    }
    Ok(())
}
/// Holds the `BPF_ENABLE_STATS` fd; statistics stay on while any holder lives.
#[derive(Debug)]
pub(crate) struct RunStats {
    _fd: OwnedFd,
}

impl RunStats {
    pub(crate) fn enable() -> Result<RunStats, EbpfError> {
        aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .map(|fd| RunStats { _fd: fd })
            .map_err(|source| EbpfError::Stats { source })
    }
}
