#![doc = include_str!("../README.md")]

mod ab;
mod autoprofile;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod demo;
mod diff;
mod duration;
mod kernel;
mod loadgen;
mod metrics;
mod multi;
mod perfetto;
mod print;
#[cfg(feature = "profile")]
mod profile;
mod record;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod scenarios;
mod selection;
mod session;
mod signals;
mod target;
#[cfg(feature = "tui")]
mod top;
mod watch;

#[cfg(not(feature = "tui"))]
mod top {
    use std::time::Duration;

    /// What the user asked for (parsed, then refused by [`run`]).
    #[allow(dead_code)]
    pub struct Options {
        pub pid: u32,
        pub every: Duration,
        pub seconds: Option<Duration>,
        pub kernel: crate::kernel::Choice,
    }

    /// The terminal view is behind the `tui` feature.
    pub fn run(_: &Options) -> Result<std::process::ExitCode, Box<dyn std::error::Error>> {
        Err("this build has no `top` (feature `tui` off); use `wakemeter watch`".into())
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod demo {
    /// The demo's scenarios use epoll and gettid: Linux and Android only.
    pub fn run(
        _: u64,
        _: &std::path::Path,
        _: bool,
    ) -> Result<std::process::ExitCode, Box<dyn std::error::Error>> {
        Err("the demo runs on Linux and Android (its scenarios use epoll)".into())
    }
}

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Measures event-loop wakeups, sleep overhead and thread CPU, and says in
/// plain words what wastes battery and CPU.
#[derive(Parser, Debug)]
#[command(name = "wakemeter", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs built-in scenarios (a spinning poller beside an efficient epoll
    /// loop, a usleep polling thread beside a condition-variable waiter),
    /// prints what wakemeter finds and writes the full report as JSON.
    Demo {
        /// How long to run: whole seconds, 5 to 600 (`12`, `12s`, `1m`).
        #[arg(long, value_name = "DURATION", default_value = "12s", value_parser = duration::parse_positive)]
        seconds: std::time::Duration,
        /// Where to write the JSON report.
        #[arg(long, default_value = "wakemeter-report.json")]
        report: PathBuf,
        #[command(flatten)]
        kernel: kernel::Args,
    },
    /// Watches other processes (e.g. an Envoy sidecar, every process of a
    /// pod): per-thread CPU, switches and run-queue wait, plus the eBPF
    /// kernel view when privileges allow; prints findings every report period.
    #[command(after_help = WATCH_HELP)]
    Watch {
        #[command(flatten)]
        selection: selection::Selection,
        /// Report period, the time between reports: whole seconds, 1 to
        /// 3600 (`5s`, `5`, `1m`).
        #[arg(long, alias = "interval", value_name = "DURATION", default_value = "5s", value_parser = duration::parse_positive)]
        every: std::time::Duration,
        /// Threads each report lists one by one: those the findings name,
        /// then the busiest by CPU, switches and wakes. Every other thread
        /// is counted in the report's groups by name. 0 lists none.
        #[arg(long, value_name = "N", default_value_t = wakemeter::config::DEFAULT_REPORT_THREADS)]
        report_threads: u32,
        /// Stop after this long, with a last report then (default: until
        /// the process exits): seconds, or `500ms`, `30s`, `5m`; at most
        /// 365 days. Counted from when every process is measured (after
        /// the eBPF attach).
        #[arg(long, value_parser = duration::parse_positive)]
        seconds: Option<std::time::Duration>,
        /// Print each report as one JSON line instead of tables.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        kernel: kernel::Args,
        #[command(flatten)]
        profile: ProfileWatchArgs,
        /// Serve Prometheus / OpenMetrics metrics at http://ADDR/metrics
        /// (ADDR: PORT, HOST:PORT or [IPv6]:PORT; a bare port is on 127.0.0.1).
        /// With several processes, every series is labelled pid and process.
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Allow --listen on an address other than loopback (the metrics
        /// are then reachable from other hosts).
        #[arg(long, requires = "listen")]
        allow_non_loopback: bool,
        #[command(flatten)]
        perfetto: perfetto::PerfettoArgs,
        /// Exit 0 even when some selected processes were never watched
        /// (e.g. out of file descriptors); without it the exit status is 1
        /// then, as for `record`.
        #[arg(long)]
        allow_partial: bool,
    },
    /// A live view of a process, like `top -H`: threads sorted by CPU
    /// (or switches, wakes, run-queue wait), the kernel view (eBPF) when
    /// privileges allow, probes, and the current findings in plain words.
    /// Keys: q/Esc/Ctrl-C quit; c, s, w, r (or Tab) sort; arrows, PgUp,
    /// PgDn, Home, End scroll.
    #[command(after_help = TOP_HELP)]
    Top {
        /// Process to watch (a thread id works too: its process is watched).
        #[arg(long)]
        pid: u32,
        /// Report period, the time between refreshes: whole seconds, 1 to
        /// 60 (`2s`, `2`, `1m`).
        #[arg(long, alias = "interval", value_name = "DURATION", default_value = "1s", value_parser = duration::parse_positive)]
        every: std::time::Duration,
        /// Stop after this long (default: until `q`, or until the process
        /// exits): seconds, or `500ms`, `30s`, `5m`; at most 365 days.
        #[arg(long, value_parser = duration::parse_positive)]
        seconds: Option<std::time::Duration>,
        #[command(flatten)]
        kernel: kernel::Args,
    },
    /// Records processes for A/B comparison: NDJSON, the versioned header
    /// (target, configuration, library) on the first line, then one line
    /// per sampling period (threads grouped by name); with several
    /// processes, one such section per process in the one file.
    Record {
        #[command(flatten)]
        selection: selection::Selection,
        /// How long to record (at most one day): seconds, or `500ms`,
        /// `30s`, `5m`. Counted from when every selected process is
        /// measured (after the eBPF attach, which stderr reports).
        #[arg(long, default_value = "60", value_parser = duration::parse_positive)]
        seconds: std::time::Duration,
        /// Sampling period, the time between samples, one line of the
        /// recording each: 0.01 to 60 seconds (`500ms`, `1s`, `1`).
        #[arg(long, aliases = ["interval", "every"], value_name = "DURATION", default_value = "1s", value_parser = duration::parse)]
        period: std::time::Duration,
        /// Where to write the recording: a file (written beside it and
        /// renamed at the end; each interval reaches the disk as it is
        /// taken), or a device, FIFO or /dev/stdout (written directly).
        #[arg(short, long)]
        output: PathBuf,
        /// Exit 0 even when some selected processes could not be recorded
        /// (e.g. out of file descriptors); without it such a recording is
        /// still written but the exit status is 1.
        #[arg(long)]
        allow_partial: bool,
        #[command(flatten)]
        kernel: kernel::Args,
        #[command(flatten)]
        perfetto: perfetto::PerfettoArgs,
    },
    /// Compares recordings: `diff CONTROL VARIANT`, or repeated runs
    /// `diff a1 a2 a3 -- b1 b2 b3` with their spread, so noise is not
    /// mistaken for a change.
    Diff {
        /// The control recording(s); with `--`, every file before it.
        #[arg(required = true)]
        control: Vec<PathBuf>,
        /// The variant recordings, after `--`.
        #[arg(last = true)]
        variant: Vec<PathBuf>,
        /// One JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// How processes are matched across runs and sides: `role` (name
        /// plus command line, the parent's first when it has the same
        /// name; processes of one run that share it are summed) or `name`.
        #[arg(long = "match", value_name = "BY", default_value = "role", value_parser = ["role", "name"])]
        match_by: String,
    },
    /// Runs a whole control-vs-variant experiment: per side, starts the
    /// side's command (optional), waits for the selected processes, runs
    /// the load (wrk, hey, redis-benchmark, ab, any program) and records
    /// the processes over the load window only, keeping the load tool's
    /// output; repeats --runs times alternating sides, then prints the
    /// comparison (requests/s, latency, CPU, CPU per request, memory,
    /// switches, wakes; the change and its verdict).
    #[command(after_help = AB_HELP)]
    Ab(AbArgs),
    /// Where in the code, off-CPU or wakeup stacks of a process
    /// (eBPF, needs root or CAP_BPF+CAP_PERFMON), as a flame graph SVG,
    /// folded stacks or pprof. Without an output file, prints the
    /// heaviest stacks. SIGINT or SIGTERM ends the capture early and
    /// writes what it holds, marked partial; a second one exits at once.
    #[cfg(feature = "profile")]
    Profile(ProfileArgs),
}

/// Arguments of `wakemeter ab`.
#[derive(clap::Args, Debug)]
struct AbArgs {
    #[command(flatten)]
    selection: selection::Selection,
    /// The load of both sides (run by `sh -c`), e.g.
    /// `wrk -t2 -c50 -d10s --latency http://127.0.0.1:8080/`.
    #[arg(long, value_name = "CMD", required_unless_present_all = ["control_load", "variant_load"])]
    load: Option<String>,
    /// The control's load, when it differs (another port, another URL).
    #[arg(long, value_name = "CMD")]
    control_load: Option<String>,
    /// The variant's load, when it differs.
    #[arg(long, value_name = "CMD")]
    variant_load: Option<String>,
    /// Starts the control's processes before each of its runs (`sh -c`,
    /// its own process group, stopped with SIGTERM after the run; a
    /// server must stay in the foreground, e.g. nginx -g 'daemon off;').
    #[arg(long, value_name = "CMD")]
    control: Option<String>,
    /// Starts the variant's processes before each of its runs.
    #[arg(long, value_name = "CMD")]
    variant: Option<String>,
    /// Runs per side (1 to 100); with 2 or more the verdicts are tested
    /// over runs.
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// Sampling period, the time between samples (0.01 to 60 s; `500ms`
    /// works).
    #[arg(long, alias = "interval", value_name = "DURATION", default_value = "500ms", value_parser = duration::parse)]
    period: std::time::Duration,
    /// How long the selected processes must stay the same before a run
    /// starts (warm-up).
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    settle: std::time::Duration,
    /// Longest wait for the selected processes to appear.
    #[arg(long, default_value = "30s", value_parser = duration::parse_positive)]
    ready_timeout: std::time::Duration,
    /// Longest a load command may run (then it is stopped).
    #[arg(long, default_value = "10m", value_parser = duration::parse_positive)]
    load_timeout: std::time::Duration,
    /// Where the recordings go (one per run and side, read by `diff`).
    #[arg(long, default_value = "wakemeter-ab")]
    dir: PathBuf,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// How processes are matched: `role` or `name` (see `diff --match`).
    #[arg(long = "match", value_name = "BY", default_value = "role", value_parser = ["role", "name"])]
    match_by: String,
    #[command(flatten)]
    kernel: kernel::Args,
}

const AB_HELP: &str = "\
Example (a reverse proxy in front of nginx, against nginx alone):
  wakemeter ab --name nginx --runs 3 \\
    --control-load 'wrk -t2 -c50 -d10s --latency http://127.0.0.1:8081/' \\
    --variant-load 'wrk -t2 -c50 -d10s --latency http://127.0.0.1:8080/' \\
    --variant \"nginx -c /etc/proxy.conf -g 'daemon off;'\"

Exit status: 0 compared; 2 bad arguments, processes that never appeared, a
load or recording that failed, or interrupted (the recordings so far are kept).";

fn identity_rule(by: &str) -> wakemeter::compare::IdentityRule {
    if by == "name" {
        wakemeter::compare::IdentityRule::Name
    } else {
        wakemeter::compare::IdentityRule::NameAndRole
    }
}

/// Continuous profiling options of `wakemeter watch`.
#[derive(clap::Args, Debug)]
struct ProfileWatchArgs {
    /// When a finding fires (busy poller, CPU hog, sleep overhead, periodic
    /// wakeups) or a --profile-*-cpu-percent threshold is crossed, capture
    /// a profile (eBPF: root, or CAP_BPF+CAP_PERFMON) and write it here as
    /// folded stacks, SVG and pprof; the SVG's path is printed under the
    /// finding.
    #[arg(long, value_name = "DIR")]
    profile_dir: Option<PathBuf>,
    /// Length of one capture (`10s`, `500ms`, `1m`, or plain seconds).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::parse_positive, requires = "profile_dir")]
    profile_seconds: std::time::Duration,
    /// Also capture when the process uses this much CPU (percent of one
    /// core) over 10 s.
    #[arg(long, value_name = "PERCENT", requires = "profile_dir")]
    profile_cpu_percent: Option<f64>,
    /// Also capture a thread that uses this much CPU (percent of one core)
    /// over 10 s.
    #[arg(long, value_name = "PERCENT", requires = "profile_dir")]
    profile_thread_cpu_percent: Option<f64>,
}

impl ProfileWatchArgs {
    fn options(self) -> Option<autoprofile::Options> {
        Some(autoprofile::Options {
            dir: self.profile_dir?,
            seconds: self.profile_seconds.as_secs_f64(),
            process_cpu_percent: self.profile_cpu_percent,
            thread_cpu_percent: self.profile_thread_cpu_percent,
        })
    }
}

/// Arguments of `wakemeter profile`.
#[cfg(feature = "profile")]
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("kind").required(true).args(["on_cpu", "off_cpu", "wakeups"])))]
struct ProfileArgs {
    /// Process to profile (a thread id works too: its process is profiled).
    #[arg(long)]
    pid: u32,
    /// Stacks of the running threads, sampled by a cpu-clock perf event.
    #[arg(long)]
    on_cpu: bool,
    /// Stacks where threads leave the CPU, with off-CPU time and switch
    /// count by cause (sleep, lock, poll, io, preempted, other).
    #[arg(long)]
    off_cpu: bool,
    /// Stacks of the threads that wake the process's threads.
    #[arg(long)]
    wakeups: bool,
    /// Capture length (`10s`, `500ms`, `1m`, or plain seconds).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::parse_positive)]
    seconds: std::time::Duration,
    /// On-CPU samples per second per CPU.
    #[arg(long, default_value_t = 99)]
    frequency: u64,
    /// Capacity of the kernel's stack map, in distinct stacks (user and
    /// kernel stacks each take one; 1 KiB of kernel memory each, at most
    /// 262144). By default the samples one CPU takes in the capture
    /// (frequency x seconds), from 8192 to 32768. A sample whose stack finds
    /// the map full keeps its count but not its stack (`[lost user
    /// stack]`, said at the end).
    #[arg(long, value_name = "N")]
    max_stacks: Option<u32>,
    /// On-CPU timers: `thread` (the default, as `perf record -p`: one
    /// cpu-clock event per thread of the process, a timer of that thread's
    /// own CPU time, so samples kept = its time on a CPU x frequency, a few
    /// of them taken as a thread is switched back in) or `cpu` (one event
    /// per CPU sampling whatever runs, as `perf record -a`: no descriptor
    /// per thread, but a bursty thread is sampled 0.9 to 1.2 times its CPU
    /// time). `thread` raises the soft open-file limit to the hard one and
    /// falls back to `cpu` when the process has more threads than half of it.
    #[arg(long, value_name = "thread|cpu", default_value = "thread", value_parser = ["thread", "cpu"])]
    timer: String,
    /// Write an SVG flame graph here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Write folded stacks here (`-` for stdout).
    #[arg(long)]
    folded: Option<PathBuf>,
    /// Write a gzipped pprof protobuf here (go tool pprof, Pyroscope, Grafana).
    #[arg(long)]
    pprof: Option<PathBuf>,
    /// Also look for separate debug files of stripped binaries here
    /// (repeatable; laid out as /usr/lib/debug: .build-id/xx/yyyy.debug),
    /// before /usr/lib/debug and /lib/debug.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dirs: Vec<PathBuf>,
}

const WATCH_HELP: &str = "\
When the process exits, sampling stops, a final report is printed (in JSON,
\"running\": false) and stderr says \"target exited\", within about a second.

Names of threads and processes are written by others: in tables, findings
and messages, control characters are shown as escapes (\\x1b, \\u{9b}).
JSON escapes them too.

Memory: with eBPF, each process's history keeps at most 32 MiB less 2 KiB
for each of its threads at start, but never less than what a report needs
(--every, at least 2 s, plus one snapshot: 112 bytes a thread each): a
watcher of a 20,000-thread process stays within 64 MiB, and its history
then holds fewer seconds (rules with longer windows see what it holds).

Exit status:
  0  --seconds elapsed; or the process exited after something was measured;
     or stdout was closed (e.g. piped into `head`)
  1  the process exited before a first measurement; or sampling failed
  2  bad arguments; no such process; the process is a zombie (exited, not
     yet reaped by its parent); a --name that matches nothing; a --cgroup
     that does not exist or cannot be read; the sampler could not start; --profile-dir
     without eBPF (no privilege, no BTF)";

/// The PID when `watch` names exactly one process by PID (the
/// single-process watch: unlabelled `--listen` series, `--profile-dir`).
fn single_pid(s: &selection::Selection) -> Option<u32> {
    match (s.pids.as_slice(), &s.name, &s.cgroup) {
        (&[pid], None, None) => Some(pid),
        _ => None,
    }
}

const TOP_HELP: &str = "\
When stdout is not a terminal (a pipe, a file, TERM=dumb), it prints the
same screen as plain text instead, one frame per report period, 160 columns wide
with the 40 busiest threads.

When the process exits, the screen is given back, its last numbers are
printed with \"target exited\", and the exit status is 0. The terminal is
restored (raw mode off, alternate screen left, cursor shown) on q, on an
error, on a panic and on SIGTERM, SIGINT, SIGHUP and SIGQUIT.

Exit status:
  0  quit with q/Esc/Ctrl-C; --seconds elapsed; the process exited after
     something was measured; or stdout was closed
  1  the process exited before a first measurement; or sampling failed
  2  bad arguments; no such process; the process is a zombie; the sampler
     could not start
  128+N  ended by signal N (143 for SIGTERM), terminal restored";

/// Large buffers (a sample or an interval of thousands of threads, several
/// MB each) are given back to the system when freed. glibc raises its mmap
/// threshold to the size of each freed mapping (up to 32 MiB), after which
/// such buffers come from the heaps of the sampler's and the reporting
/// threads and stay resident once freed: a watcher of 20,000 threads with
/// eBPF peaked at 119,188 kB with the dynamic threshold, 99,696 kB with
/// this one (RELIABILITY.md). Setting it fixes it at glibc's default.
fn keep_large_buffers_mapped() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MMAP_THRESHOLD_BYTES: libc::c_int = 128 * 1024;
        // SAFETY: mallopt only sets an allocator parameter; called first in
        // main, before this process allocates from other threads.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        }
    }
}

fn main() -> ExitCode {
    keep_large_buffers_mapped();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo {
            seconds,
            report,
            kernel,
        } => duration::whole_seconds(seconds, "--seconds", 5, 600)
            .map_err(Into::into)
            .and_then(|secs| demo::run(secs, &report, kernel.choice())),
        Command::Watch {
            selection,
            every,
            report_threads,
            seconds,
            json,
            kernel,
            profile,
            listen,
            allow_non_loopback,
            perfetto,
            allow_partial,
        } => match duration::whole_seconds(every, "--every", 1, 3600) {
            Err(e) => Err(e.into()),
            Ok(every) => match single_pid(&selection) {
                Some(pid) => watch::run(&watch::Options {
                    pid,
                    every,
                    report_threads,
                    seconds,
                    json,
                    kernel: kernel.choice(),
                    profile: profile.options(),
                    listen,
                    allow_non_loopback,
                    perfetto,
                }),
                _ if profile.profile_dir.is_some() => {
                    Err("--profile-dir profiles one process: give a single --pid".into())
                }
                _ => multi::run(&multi::Options {
                    selection,
                    every,
                    report_threads,
                    seconds,
                    json,
                    kernel: kernel.choice(),
                    listen,
                    allow_non_loopback,
                    perfetto,
                    allow_partial,
                }),
            },
        },
        Command::Top {
            pid,
            every,
            seconds,
            kernel,
        } => top::run(&top::Options {
            pid,
            every,
            seconds,
            kernel: kernel.choice(),
        }),
        Command::Record {
            selection,
            seconds,
            period,
            output,
            allow_partial,
            kernel,
            perfetto,
        } => record::record(&record::RecordOptions {
            selection,
            duration: seconds,
            period,
            output,
            kernel: kernel.choice(),
            perfetto,
            allow_partial,
        }),
        Command::Diff {
            control,
            variant,
            json,
            match_by,
        } => diff::diff(&control, &variant, json, identity_rule(&match_by)),
        Command::Ab(a) => {
            let both = a.load.clone().unwrap_or_default();
            ab::run(&ab::Options {
                selection: a.selection,
                control: a.control,
                variant: a.variant,
                control_load: a.control_load.unwrap_or_else(|| both.clone()),
                variant_load: a.variant_load.unwrap_or(both),
                runs: a.runs,
                period: a.period,
                settle: a.settle,
                ready_timeout: a.ready_timeout,
                load_timeout: a.load_timeout,
                dir: a.dir,
                json: a.json,
                rule: identity_rule(&a.match_by),
                kernel: a.kernel.choice(),
            })
        }
        #[cfg(feature = "profile")]
        Command::Profile(a) => profile::run(&profile::Options {
            pid: a.pid,
            kind: if a.on_cpu {
                wakemeter_profile::StackKind::OnCpu
            } else if a.off_cpu {
                wakemeter_profile::StackKind::OffCpu
            } else {
                wakemeter_profile::StackKind::Wakeups
            },
            seconds: a.seconds,
            frequency_hz: a.frequency,
            max_stacks: a
                .max_stacks
                .unwrap_or_else(|| profile::default_max_stacks(a.frequency, a.seconds)),
            timer: if a.timer == "thread" {
                wakemeter_profile::SamplingTimer::PerThread
            } else {
                wakemeter_profile::SamplingTimer::PerCpu
            },
            svg: a.svg,
            folded: a.folded,
            pprof: a.pprof,
            debug_dirs: a.debug_dirs,
        }),
    };
    match result {
        Ok(code) => code,
        // Whoever read our output has stopped reading (`| head`): not an
        // error worth a word, and nothing more to say.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            print::note(&format!("wakemeter: {e}"));
            ExitCode::from(2)
        }
    }
}
