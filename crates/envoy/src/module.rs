//! The module's state: the sampler of Envoy's own threads, the dispatchers
//! it knows, the publisher thread and the Envoy stats it feeds.
//!
//! Threads and what they do:
//! - Envoy's main thread: `config_new` (builds all this), `admin_request`
//!   (renders a report) and `config_scheduled` (copies the published
//!   figures into Envoy's stats: a lock held for a swap and a few atomic
//!   stores in Envoy, measured in [`HookCost`]).
//! - each worker thread: `worker_thread_initialized` (records its id).
//! - the core's sampling thread (`wakemeter`): samples every interval.
//! - the publisher thread (`wm-publish`): waits for each sample, turns the
//!   dispatchers' rows into figures and posts one event to the main thread.
//!
//! No dispatcher thread ever waits on the sampler: the only lock they take
//! is held for a copy or a swap.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wakemeter::{
    FindingKind, Interval, SampleWait, Sampler, SamplerBuilder, SamplerConfig, SamplingGuard,
    Subject,
};

use crate::abi::{Callbacks, ConfigEnvoyPtr, LogLevel, SchedulerPtr};
use crate::config::{ModuleConfig, PanicSite};
use crate::guard::DISABLED;

// A poisoned lock's data is taken (a panic elsewhere has already disabled
// the module; what matters here is not to panic again).
pub(crate) use wakemeter::sync::lock;

/// One of Envoy's event-loop threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatcher {
    /// Its name in Envoy's own stats: `main_thread` (Envoy's
    /// `server.dispatcher.*`) or `worker_N` (`server.worker_N.dispatcher.*`).
    pub role: String,
    /// Its thread id.
    pub tid: u64,
}

/// A dispatcher's figures over the newest sampling period.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DispatcherFigures {
    /// CPU, percent of one core.
    pub cpu_percent: f64,
    /// Voluntary switches per second (it blocked), when read this interval.
    pub voluntary_switches_per_sec: Option<f64>,
    /// Involuntary switches per second (it was preempted).
    pub involuntary_switches_per_sec: Option<f64>,
    /// Share of the interval it waited runnable for a CPU, percent.
    pub run_queue_wait_percent: Option<f64>,
    /// Poll-family syscalls per second (`epoll_wait` for Envoy's libevent
    /// loops), from the module's eBPF view; `None` without it.
    pub poll_calls_per_sec: Option<f64>,
    /// Poll-family calls over the interval (rounded), from eBPF.
    pub poll_calls: Option<u64>,
}

impl DispatcherFigures {
    /// The figures of thread `tid` in `interval`, if it was there.
    pub fn of(interval: &Interval, tid: u64) -> Option<DispatcherFigures> {
        let t = interval.threads.iter().find(|t| t.tid == tid)?;
        let secs = interval.duration_ns as f64 / 1e9;
        let kernel = t.kernel.as_ref();
        Some(DispatcherFigures {
            cpu_percent: t.cpu_percent,
            voluntary_switches_per_sec: t.voluntary_switches_per_sec,
            involuntary_switches_per_sec: t.involuntary_switches_per_sec,
            run_queue_wait_percent: t.run_queue_wait_percent,
            poll_calls_per_sec: kernel.map(|k| k.poll_calls_per_sec),
            poll_calls: kernel.map(|k| (k.poll_calls_per_sec * secs).round() as u64),
        })
    }
}

/// What the publisher thread hands the main thread after each sample.
#[derive(Debug, Default)]
struct Published {
    /// Figures per dispatcher (by role) of the newest interval.
    dispatchers: Vec<(Dispatcher, DispatcherFigures)>,
    /// Poll calls per dispatcher not yet added to Envoy's counters.
    pending_poll_calls: Vec<(String, u64)>,
    /// Findings of each kind now (index as [`FindingKind::ALL`]).
    findings_now: [u64; FindingKind::ALL.len()],
    /// Findings raised since the last publish (new kind and subject).
    findings_raised: [u64; FindingKind::ALL.len()],
    /// The sampler thread's CPU, percent of one core, over its life.
    sampler_cpu_percent: f64,
    /// New figures since the main thread last took them.
    fresh: bool,
}

/// Wall time of a main-thread hook, in nanoseconds: last, max, count, sum.
#[derive(Debug, Default)]
pub struct HookCost {
    last_ns: AtomicU64,
    max_ns: AtomicU64,
    calls: AtomicU64,
    total_ns: AtomicU64,
}

impl HookCost {
    /// Records one call that began at `since`.
    pub fn record(&self, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_ns.store(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// (last, max, mean) in nanoseconds, and the number of calls.
    pub fn read(&self) -> (u64, u64, u64, u64) {
        let calls = self.calls.load(Ordering::Relaxed);
        let mean = self
            .total_ns
            .load(Ordering::Relaxed)
            .checked_div(calls)
            .unwrap_or(0);
        (
            self.last_ns.load(Ordering::Relaxed),
            self.max_ns.load(Ordering::Relaxed),
            mean,
            calls,
        )
    }
}

/// Envoy stat ids of one dispatcher.
#[derive(Debug)]
struct DispatcherStats {
    role: String,
    cpu_permille: Option<usize>,
    voluntary_switches_per_sec: Option<usize>,
    involuntary_switches_per_sec: Option<usize>,
    run_queue_wait_permille: Option<usize>,
    poll_calls: Option<usize>,
}

/// Envoy stat ids, defined on the main thread only.
#[derive(Debug, Default)]
struct Stats {
    dispatchers: Vec<DispatcherStats>,
    findings_now: Vec<Option<usize>>,
    findings_raised: Vec<Option<usize>>,
    sampler_cpu_ppm: Option<usize>,
    refused: bool,
}

/// State shared with the publisher thread.
struct Shared {
    cb: &'static Callbacks,
    sampler: Sampler,
    dispatchers: Mutex<Vec<Dispatcher>>,
    published: Mutex<Published>,
    stop: AtomicBool,
    /// The scheduler pointer (as an integer: it crosses threads).
    scheduler: usize,
    publisher_cpu_ns: AtomicU64,
}

/// The module config's state: everything the hooks reach through the
/// config pointer Envoy keeps.
pub struct Module {
    shared: Arc<Shared>,
    config_envoy: usize,
    /// The module config.
    pub config: ModuleConfig,
    stats: Mutex<Stats>,
    publisher: Mutex<Option<JoinHandle<()>>>,
    admin_registered: AtomicBool,
    /// Why the eBPF view is off, when it was asked for.
    pub ebpf_note: Option<String>,
    /// Cost of the main-thread stats hook (`config_scheduled`).
    pub publish_cost: HookCost,
    /// Cost of the admin hook (report and rendering).
    pub admin_cost: HookCost,
    /// The process's start, to tell the uptime.
    pub started: Instant,
}

/// The calling thread's id.
pub fn gettid() -> u64 {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    u64::try_from(tid).unwrap_or(0)
}

/// The calling thread's CPU time, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out pointer; the clock id is a constant.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// The role of a worker from its thread name (`wrk:worker_3` → `worker_3`).
pub fn worker_role(comm: &str, fallback_index: usize) -> String {
    match comm.trim().strip_prefix("wrk:worker_") {
        Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => format!("worker_{n}"),
        _ => format!("worker_{fallback_index}"),
    }
}

fn kernel_source(
    config: &ModuleConfig,
) -> (Option<Box<dyn wakemeter::KernelSource>>, Option<String>) {
    if !config.ebpf {
        return (None, None);
    }
    #[cfg(feature = "ebpf")]
    {
        match wakemeter_ebpf::EbpfSource::builder(wakemeter::Target::SelfProcess)
            .with_syscalls(true)
            .attach()
        {
            Ok(src) => (Some(Box::new(src)), None),
            Err(e) => (None, Some(format!("eBPF asked for but not attached: {e}"))),
        }
    }
    #[cfg(not(feature = "ebpf"))]
    {
        (
            None,
            Some("eBPF asked for, but this build has no `ebpf` feature".to_owned()),
        )
    }
}

impl Module {
    /// Builds the sampler, starts sampling and the publisher thread, and
    /// registers the admin path. Runs on Envoy's main thread (the one
    /// recorded as `main_thread`).
    ///
    /// # Errors
    /// A sentence for Envoy's log when the sampler cannot be built.
    ///
    /// # Safety
    /// `config_envoy` must be the config pointer Envoy passed to `config_new`.
    pub unsafe fn new(
        cb: &'static Callbacks,
        config_envoy: ConfigEnvoyPtr,
        config: ModuleConfig,
    ) -> Result<Box<Module>, String> {
        let mut sc = SamplerConfig::default()
            .with_interval(config.interval)
            .with_switch_split_every(1)
            .with_thresholds(config.thresholds.clone());
        if let Some(h) = config.history {
            sc = sc.with_history(h);
        }
        if let Some(n) = config.report_threads {
            sc = sc.with_report_threads(n);
        }
        let (kernel, ebpf_note) = kernel_source(&config);
        let mut builder = SamplerBuilder::from_config(sc);
        if let Some(k) = kernel {
            builder = builder.with_kernel_source(k);
        }
        let sampler = builder
            .build()
            .map_err(|e| format!("wakemeter: cannot build the sampler: {e}"))?;
        let guard = sampler
            .start()
            .map_err(|e| format!("wakemeter: cannot start sampling: {e}"))?;
        // SAFETY: `config_envoy` is live (caller's contract); main thread.
        let scheduler: SchedulerPtr = unsafe { cb.scheduler_new(config_envoy) };
        let shared = Arc::new(Shared {
            cb,
            sampler,
            dispatchers: Mutex::new(vec![Dispatcher {
                role: "main_thread".to_owned(),
                tid: gettid(),
            }]),
            published: Mutex::new(Published::default()),
            stop: AtomicBool::new(false),
            scheduler: scheduler as usize,
            publisher_cpu_ns: AtomicU64::new(0),
        });
        let for_thread = Arc::clone(&shared);
        let publisher = std::thread::Builder::new()
            .name("wm-publish".to_owned())
            .spawn(move || publish_loop(&for_thread, guard))
            .map_err(|e| format!("wakemeter: cannot start its publisher thread: {e}"))?;
        let module = Box::new(Module {
            shared,
            config_envoy: config_envoy as usize,
            config,
            stats: Mutex::new(Stats::default()),
            publisher: Mutex::new(Some(publisher)),
            admin_registered: AtomicBool::new(false),
            ebpf_note,
            publish_cost: HookCost::default(),
            admin_cost: HookCost::default(),
            started: Instant::now(),
        });
        if let Some(note) = &module.ebpf_note {
            cb.log(LogLevel::Warn, &format!("wakemeter: {note}"));
        }
        module.register_admin();
        module.define_fixed_stats();
        if lock(&module.stats).refused {
            cb.log(
                LogLevel::Warn,
                "wakemeter: Envoy refused some of the module's stats; they are left out",
            );
        }
        Ok(module)
    }

    /// The Envoy config pointer.
    pub fn config_envoy(&self) -> ConfigEnvoyPtr {
        self.config_envoy as ConfigEnvoyPtr
    }

    /// The callbacks.
    pub fn cb(&self) -> &'static Callbacks {
        self.shared.cb
    }

    /// The sampler of Envoy's threads.
    pub fn sampler(&self) -> &Sampler {
        &self.shared.sampler
    }

    /// The dispatchers known so far (main thread first, then workers as
    /// they started).
    pub fn dispatchers(&self) -> Vec<Dispatcher> {
        lock(&self.shared.dispatchers).clone()
    }

    /// CPU the publisher thread used, in nanoseconds.
    pub fn publisher_cpu_ns(&self) -> u64 {
        self.shared.publisher_cpu_ns.load(Ordering::Relaxed)
    }

    /// Registers the admin path, once (main thread).
    pub fn register_admin(&self) {
        if self.admin_registered.load(Ordering::Relaxed) {
            return;
        }
        let help = "wakemeter: Envoy's threads (CPU, switches, run-queue wait, loop wakeups) and findings in words; ?format=json for the Report";
        // SAFETY: main thread, live config pointer.
        let ok = unsafe {
            self.cb()
                .register_admin_handler(self.config_envoy(), &self.config.admin_path, help)
        };
        if ok {
            self.admin_registered.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the admin path is registered.
    pub fn admin_registered(&self) -> bool {
        self.admin_registered.load(Ordering::Relaxed)
    }

    /// The counters and gauges every config has (findings, sampler cost).
    fn define_fixed_stats(&self) {
        let cb = self.cb();
        let c = self.config_envoy();
        let mut s = lock(&self.stats);
        for kind in FindingKind::ALL {
            // SAFETY: main thread, live config pointer.
            unsafe {
                s.findings_now
                    .push(cb.define_gauge(c, &format!("wakemeter.findings.{}", kind.as_str())));
                s.findings_raised.push(
                    cb.define_counter(c, &format!("wakemeter.findings_raised.{}", kind.as_str())),
                );
            }
        }
        // SAFETY: as above.
        s.sampler_cpu_ppm = unsafe { cb.define_gauge(c, "wakemeter.sampler_cpu_ppm") };
        // SAFETY: main thread (config_new).
        let workers = unsafe { cb.concurrency() };
        Self::define_dispatcher_stats(cb, c, &mut s, "main_thread");
        for n in 0..workers {
            Self::define_dispatcher_stats(cb, c, &mut s, &format!("worker_{n}"));
        }
        if s.findings_now
            .iter()
            .chain(&s.findings_raised)
            .any(Option::is_none)
            || s.sampler_cpu_ppm.is_none()
        {
            s.refused = true;
        }
    }

    /// Defines the gauges and the counter of dispatcher `role`. Stats
    /// defined once the server runs do not appear in Envoy's `/stats`, so every
    /// dispatcher's are defined in `config_new`: the main thread's and
    /// those of workers 0 to `--concurrency` - 1.
    fn define_dispatcher_stats(cb: &Callbacks, c: ConfigEnvoyPtr, s: &mut Stats, role: &str) {
        let name = |m: &str| format!("wakemeter.{role}.{m}");
        // SAFETY: main thread (config_new), live config pointer.
        let d = unsafe {
            DispatcherStats {
                role: role.to_owned(),
                cpu_permille: cb.define_gauge(c, &name("cpu_permille")),
                voluntary_switches_per_sec: cb.define_gauge(c, &name("voluntary_switches_per_sec")),
                involuntary_switches_per_sec: cb
                    .define_gauge(c, &name("involuntary_switches_per_sec")),
                run_queue_wait_permille: cb.define_gauge(c, &name("run_queue_wait_permille")),
                poll_calls: cb.define_counter(c, &name("poll_calls")),
            }
        };
        if d.cpu_permille.is_none() || d.poll_calls.is_none() {
            s.refused = true;
        }
        s.dispatchers.push(d);
    }

    /// The `config_scheduled` hook's work: copies the newest published
    /// figures into Envoy's stats (main thread).
    pub fn publish_to_envoy(&self) {
        let start = Instant::now();
        if self.config.test_panic == Some(PanicSite::Publish) {
            panic!("test_panic: injected in the stats publish hook");
        }
        let p = {
            let mut p = lock(&self.shared.published);
            if !p.fresh {
                return;
            }
            p.fresh = false;
            Published {
                dispatchers: p.dispatchers.clone(),
                pending_poll_calls: std::mem::take(&mut p.pending_poll_calls),
                findings_now: p.findings_now,
                findings_raised: std::mem::take(&mut p.findings_raised),
                sampler_cpu_percent: p.sampler_cpu_percent,
                fresh: false,
            }
        };
        let cb = self.cb();
        let c = self.config_envoy();
        let s = lock(&self.stats);
        let permille = |v: f64| (v * 10.0).round().max(0.0) as u64;
        let rounded = |v: f64| v.round().max(0.0) as u64;
        for (d, f) in &p.dispatchers {
            let Some(ids) = s.dispatchers.iter().find(|x| x.role == d.role) else {
                continue;
            };
            let set = |id: Option<usize>, v: Option<u64>| {
                if let (Some(id), Some(v)) = (id, v) {
                    // SAFETY: main thread, id from this config.
                    unsafe { cb.set_gauge(c, id, v) };
                }
            };
            set(ids.cpu_permille, Some(permille(f.cpu_percent)));
            set(
                ids.voluntary_switches_per_sec,
                f.voluntary_switches_per_sec.map(rounded),
            );
            set(
                ids.involuntary_switches_per_sec,
                f.involuntary_switches_per_sec.map(rounded),
            );
            set(
                ids.run_queue_wait_permille,
                f.run_queue_wait_percent.map(permille),
            );
        }
        for (role, n) in &p.pending_poll_calls {
            if let Some(id) = s
                .dispatchers
                .iter()
                .find(|x| x.role == *role)
                .and_then(|x| x.poll_calls)
            {
                // SAFETY: main thread, id from this config.
                unsafe { cb.increment_counter(c, id, *n) };
            }
        }
        for (i, id) in s.findings_now.iter().enumerate() {
            if let (Some(id), Some(v)) = (id, p.findings_now.get(i)) {
                // SAFETY: main thread, id from this config.
                unsafe { cb.set_gauge(c, *id, *v) };
            }
        }
        for (i, id) in s.findings_raised.iter().enumerate() {
            if let (Some(id), Some(v)) = (id, p.findings_raised.get(i))
                && *v > 0
            {
                // SAFETY: main thread, id from this config.
                unsafe { cb.increment_counter(c, *id, *v) };
            }
        }
        if let Some(id) = s.sampler_cpu_ppm {
            // SAFETY: main thread, id from this config.
            unsafe { cb.set_gauge(c, id, (p.sampler_cpu_percent * 1e4).round().max(0.0) as u64) };
        }
        drop(s);
        self.publish_cost.record(start);
    }

    /// The newest figures of every dispatcher (as last published).
    pub fn dispatcher_figures(&self) -> Vec<(Dispatcher, DispatcherFigures)> {
        let interval = self.sampler().latest_interval_shared();
        self.dispatchers()
            .into_iter()
            .map(|d| {
                let f = interval
                    .as_deref()
                    .and_then(|i| DispatcherFigures::of(i, d.tid))
                    .unwrap_or_default();
                (d, f)
            })
            .collect()
    }

    /// The `worker_thread_initialized` hook: records the calling thread as
    /// a worker dispatcher when it is one. Envoy 1.40 calls the hook once,
    /// on its main thread, before the workers start (seen here: the hook's
    /// thread id is the main thread's), so the workers are found by their
    /// names instead (see [`add_named_workers`]); this keeps working for
    /// an Envoy that calls it on each worker.
    pub fn add_worker(&self) {
        let tid = gettid();
        let comm = u32::try_from(tid)
            .ok()
            .and_then(|t| {
                wakemeter_procfs::process::comm(wakemeter_procfs::process::Process::Pid(t)).ok()
            })
            .map(|raw| String::from_utf8_lossy(&raw).into_owned())
            .unwrap_or_default();
        let mut d = lock(&self.shared.dispatchers);
        if d.iter().any(|x| x.tid == tid) {
            return;
        }
        let index = d.iter().filter(|x| x.role != "main_thread").count();
        d.push(Dispatcher {
            role: worker_role(&comm, index),
            tid,
        });
    }

    /// Stops the publisher and sampling threads and frees the scheduler
    /// (main thread; idempotent).
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let handle = lock(&self.publisher).take();
        if let Some(h) = handle {
            // The publisher waits at most PUBLISH_WAIT for a sample before
            // looking at `stop`, so this returns within that.
            let _ = h.join();
            if self.shared.scheduler != 0 {
                // SAFETY: the scheduler came from scheduler_new; its only
                // other user (the publisher) has ended; deleted once here.
                unsafe {
                    self.cb()
                        .scheduler_delete(self.shared.scheduler as SchedulerPtr)
                };
            }
        }
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long the publisher waits for a sample before looking at `stop`.
const PUBLISH_WAIT: Duration = Duration::from_millis(100);

/// Adds the threads of `interval` that Envoy named as workers
/// (`wrk:worker_N`) and are not known yet; returns every dispatcher.
pub fn add_named_workers(
    dispatchers: &Mutex<Vec<Dispatcher>>,
    interval: &Interval,
) -> Vec<Dispatcher> {
    let mut d = lock(dispatchers);
    for t in &interval.threads {
        if t.name.starts_with("wrk:worker_") && !d.iter().any(|x| x.tid == t.tid) {
            let index = d.iter().filter(|x| x.role != "main_thread").count();
            d.push(Dispatcher {
                role: worker_role(&t.name, index),
                tid: t.tid,
            });
        }
    }
    // A worker that exited (its thread id gone) stays listed: Envoy's
    // workers live as long as the server.
    d.sort_by(|a, b| {
        (a.role != "main_thread", a.role.len(), &a.role).cmp(&(
            b.role != "main_thread",
            b.role.len(),
            &b.role,
        ))
    });
    d.clone()
}

/// Identifies a finding for "raised": its kind and subject.
fn finding_key(kind: FindingKind, subject: &Subject) -> String {
    format!("{}:{subject:?}", kind.as_str())
}

fn publish_loop(shared: &Arc<Shared>, guard: SamplingGuard) {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| publish_loop_inner(shared)));
    drop(guard);
    if run.is_err() {
        crate::guard::disable(shared.cb, "the publisher thread");
    }
}

fn publish_loop_inner(shared: &Arc<Shared>) {
    let mut after = None;
    let mut last_keys: HashSet<String> = HashSet::new();
    while !shared.stop.load(Ordering::Relaxed) && !DISABLED.load(Ordering::Relaxed) {
        let seq = match shared.sampler.wait_for_sample(after, PUBLISH_WAIT) {
            SampleWait::Stored { seq } => seq,
            SampleWait::TimedOut => continue,
            SampleWait::Stopped => break,
            _ => continue,
        };
        after = Some(seq);
        let cpu0 = thread_cpu_ns();
        let Some(interval) = shared.sampler.latest_interval_shared() else {
            continue;
        };
        let dispatchers = add_named_workers(&shared.dispatchers, &interval);
        let figures: Vec<(Dispatcher, DispatcherFigures)> = dispatchers
            .into_iter()
            .filter_map(|d| DispatcherFigures::of(&interval, d.tid).map(|f| (d, f)))
            .collect();
        let mut now = [0u64; FindingKind::ALL.len()];
        let mut raised = [0u64; FindingKind::ALL.len()];
        let mut keys = HashSet::new();
        shared.sampler.with_findings(|findings| {
            for f in findings {
                if let Some(i) = FindingKind::ALL.iter().position(|k| *k == f.kind) {
                    now[i] += 1;
                    let key = finding_key(f.kind, &f.subject);
                    if !last_keys.contains(&key) {
                        raised[i] += 1;
                    }
                    keys.insert(key);
                }
            }
        });
        last_keys = keys;
        let sampler_cpu_percent = shared.sampler.stats().sampler_cpu_percent;
        {
            let mut p = lock(&shared.published);
            for (d, f) in &figures {
                if let Some(n) = f.poll_calls {
                    match p.pending_poll_calls.iter_mut().find(|(r, _)| *r == d.role) {
                        Some((_, total)) => *total += n,
                        None => p.pending_poll_calls.push((d.role.clone(), n)),
                    }
                }
            }
            p.dispatchers = figures;
            p.findings_now = now;
            for (acc, r) in p.findings_raised.iter_mut().zip(raised) {
                *acc += r;
            }
            p.sampler_cpu_percent = sampler_cpu_percent;
            p.fresh = true;
        }
        shared
            .publisher_cpu_ns
            .fetch_add(thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
        if shared.scheduler != 0 && !shared.stop.load(Ordering::Relaxed) {
            // SAFETY: the scheduler lives until `Module::stop` has joined
            // this thread; commit may be called from any thread.
            unsafe {
                shared
                    .cb
                    .scheduler_commit(shared.scheduler as SchedulerPtr, seq)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_named_as_envoy_names_them() {
        assert_eq!(worker_role("wrk:worker_0\n", 5), "worker_0");
        assert_eq!(worker_role("wrk:worker_12", 5), "worker_12");
        assert_eq!(worker_role("envoy", 3), "worker_3");
        assert_eq!(worker_role("wrk:worker_", 1), "worker_1");
    }
}
