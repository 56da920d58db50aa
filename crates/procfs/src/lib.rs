//! wakemeter's one owner of `/proc` and `/sys`: every path any wakemeter
//! crate reads there, the sampling path's kept-descriptor reads, and the
//! parsers of what those files hold. No other crate names a `/proc` or
//! `/sys` path (`scripts/test.sh` greps for one).
//!
//! - [`parse`]: pure, allocation-free parsers over bytes (`stat` after the
//!   last `)`, `status` fields, `schedstat`, `statm`, `getdents64`
//!   records, `syscall`, `mounts`, `cgroup.procs`, ...); [`maps`] for
//!   `maps` lines.
//! - [`task`] (Linux, Android): a process's task directory kept open,
//!   thread files opened relative to it and read with `pread`: what the
//!   sampler's `platform/linux` does on every sample.
//! - [`process`]: whole-file reads of `/proc/<pid>` files, for callers off
//!   the sampling path; [`system`]: machine-wide files (BTF, tracefs,
//!   clocksource, boot time); [`cgroup`]: the cgroup v2 hierarchy;
//!   [`fd`]: what a process's file descriptor is (a TCP, UDP or Unix
//!   socket, a pipe, an eventfd, a timerfd, a file, a terminal).
//!
//! # Why not the `procfs` crate
//!
//! The crates.io `procfs` crate (0.18) parses the same files, well kept
//! and complete. It is not used here because of its cost on the sampling
//! path, measured with the project's own bench (`cargo bench -p
//! wakemeter-benches --bench sample`, which runs both on the same threads
//! in the same run): it opens each file by path at every read, builds a
//! `String` per file and a struct per thread. Per thread of the target it
//! cost 6 to 20 times a whole wakemeter sample at a 100 ms gap (65 and
//! 257 threads) and 40 to 55 times back to back, in three paired runs on
//! 2026-11-28 (`-- --quick`, the `procfs/x` column; BENCHMARKS.md, "One
//! sample at the cadence users sample", has the full run).
//! Its per-process readers would serve the cold callers ([`process`]), but
//! one parser per file, shared by hot and cold callers, keeps one
//! behaviour per file (the hostile `comm` in `stat`, a truncated
//! `status`), held by one set of property tests; a second dependency
//! reading the same files would not.

pub mod cgroup;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod fd;
pub mod maps;
pub mod parse;
pub mod process;
pub mod system;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod task;
