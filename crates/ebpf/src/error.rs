//! The error type of attaching and reading.

/// Why the eBPF source could not attach (or report).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EbpfError {
    /// [`EbpfSourceBuilder::with_max_threads`](crate::EbpfSourceBuilder::with_max_threads)
    /// asked for 0 threads or more than
    /// [`MAX_THREADS_LIMIT`](crate::MAX_THREADS_LIMIT).
    #[error("max threads {requested} is out of range: 1 to {limit} threads")]
    MaxThreadsOutOfRange {
        /// The capacity that was asked for, in threads.
        requested: u32,
        /// The largest capacity allowed, in threads ([`crate::MAX_THREADS_LIMIT`]).
        limit: u32,
    },

    /// An option of [`StackSessionBuilder`](crate::StackSessionBuilder) is
    /// 0 or above its limit.
    #[error("{option} = {value} is out of range: 1 to {max}")]
    StackOptionOutOfRange {
        /// The option, e.g. `frequency_hz`.
        option: &'static str,
        /// The value asked for.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },

    /// A `cpu-clock` sampling event could not be opened, or the on-CPU
    /// program attached to it (`perf_event_open`, `PERF_EVENT_IOC_SET_BPF`).
    #[error("perf event cpu-clock on CPU {cpu}")]
    PerfEvent {
        /// The CPU of the event.
        cpu: u32,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// A per-thread `cpu-clock` sampling event could not be opened, or the
    /// on-CPU program attached to it (a thread that exited before its open
    /// is skipped, not an error).
    #[error("perf event cpu-clock of thread {tid}")]
    ThreadPerfEvent {
        /// The thread of the event.
        tid: u32,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// No process with this id exists (no `/proc/<pid>`), or the id is 0.
    #[error("process {pid} does not exist")]
    NoSuchProcess {
        /// The id that was asked for.
        pid: u32,
    },

    /// The effective capabilities lack what loading tracing programs needs:
    /// `CAP_BPF` and `CAP_PERFMON` (Linux 5.8+), or `CAP_SYS_ADMIN`. Root
    /// has all of them.
    #[error(
        "missing privilege: effective capabilities lack {missing}; run as root or grant CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)"
    )]
    MissingPrivilege {
        /// The capabilities that are missing, e.g. `"CAP_BPF and CAP_PERFMON"`.
        missing: &'static str,
    },

    /// The kernel's BTF is absent (`/sys/kernel/btf/vmlinux`, or the file
    /// given to `with_kernel_btf_path`; the kernel needs
    /// `CONFIG_DEBUG_INFO_BTF=y`), so the programs cannot be relocated.
    /// There is no partial fallback: every program reads kernel structures
    /// through CO-RE relocations, raw tracepoints included.
    #[error(
        "no kernel BTF: {} is absent (kernel built without CONFIG_DEBUG_INFO_BTF); the eBPF programs need it to read kernel structures",
        path.display()
    )]
    NoKernelBtf {
        /// The BTF file that was looked for.
        path: std::path::PathBuf,
    },

    /// This build has no kernel programs: clang was not found when the crate
    /// was compiled (install clang and rebuild).
    #[error("unavailable: built without clang (install clang and rebuild wakemeter-ebpf)")]
    BuiltWithoutClang,

    /// `/proc` numbers processes in a PID namespace other than the initial
    /// one (a container), and the target's ids in the initial namespace,
    /// which the kernel programs compare, could not be found: the kernel
    /// has no task iterators (before Linux 5.8), or the target exited
    /// meanwhile.
    #[error("cannot find the target in PID namespace {namespace}: {reason}")]
    PidNamespace {
        /// The namespace link, e.g. `pid:[4026532201]`.
        namespace: String,
        /// What failed.
        reason: String,
    },

    /// eBPF sources exist only on Linux hosts (not on macOS, iOS, Android
    /// or other targets).
    #[error("unsupported: the eBPF source needs a Linux host")]
    Unsupported,

    /// The target is of a kind this version of the eBPF source cannot
    /// observe (a [`crate::Target`] variant added to the core later).
    #[error("the eBPF source cannot observe target {target}")]
    UnsupportedTarget {
        /// The target, as `Debug` text.
        target: String,
    },

    /// The embedded object lacks a program or map the loader expects (a
    /// build inconsistency between the C programs and the Rust loader).
    #[error("the embedded eBPF object has no program or map named {name}")]
    ObjectMismatch {
        /// The missing program or map.
        name: &'static str,
    },

    /// Reading the target's or this process's `/proc` entries, or a syscall
    /// of the checks, failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The kernel BTF exists but could not be parsed.
    #[cfg(target_os = "linux")]
    #[error("failed to parse kernel BTF")]
    Btf {
        /// aya's error.
        #[source]
        source: aya::BtfError,
    },

    /// The object could not be loaded: map creation or CO-RE relocation failed.
    #[cfg(target_os = "linux")]
    #[error("failed to load the eBPF object")]
    Load {
        /// aya's error.
        #[source]
        source: aya::EbpfError,
    },

    /// A program could not be loaded (verifier) or attached, or its info read.
    #[cfg(target_os = "linux")]
    #[error("eBPF program {program}: load, attach or info failed")]
    Program {
        /// The program (function) name.
        program: &'static str,
        /// aya's error.
        #[source]
        source: aya::programs::ProgramError,
    },

    /// A map of the object is missing or of an unexpected type.
    #[cfg(target_os = "linux")]
    #[error("eBPF map {map} is unusable")]
    Map {
        /// The map name.
        map: &'static str,
        /// aya's error.
        #[source]
        source: aya::maps::MapError,
    },

    /// The kernel refused to enable BPF run-time statistics.
    #[cfg(target_os = "linux")]
    #[error("failed to enable BPF run-time statistics")]
    Stats {
        /// aya's error.
        #[source]
        source: aya::sys::SyscallError,
    },
}
