//! An in-memory [`Sys`] for unit tests: threads, files, exits and TID reuse
//! are scripted; every open descriptor is counted so leaks show, and gets
//! the lowest free number like open(2), so limits behave as in a real table.

use std::collections::HashMap;
use std::io;

use super::{Sys, TaskFile};

/// A scripted thread of the fake process.
#[derive(Debug, Clone)]
pub(crate) struct FakeThread {
    /// Incarnation: bumped when the TID is reused, so old descriptors go stale.
    pub incarnation: u64,
    pub name: String,
    pub cpu_ns: u64,
    pub wait_ns: u64,
    pub slices: u64,
    pub vol: u64,
    pub invol: u64,
    /// CPU time of the slice in progress (the thread is on a CPU): in the
    /// clock, not yet in schedstat.
    pub pending_ns: u64,
}

/// A kept descriptor of the fake: which file of which thread incarnation.
pub(crate) struct FakeFile {
    tid: Option<u32>,
    incarnation: u64,
    kind: String,
    number: usize,
}

pub(crate) struct FakeSys {
    pub threads: HashMap<u32, FakeThread>,
    pub order: Vec<u32>,
    pub has_schedstat: bool,
    /// Kernels without sched_info print "0 0 0" in every schedstat.
    pub schedstat_zeros: bool,
    /// Open descriptors (of this test thread) at which open fails with EMFILE.
    pub max_files: usize,
    /// The soft `RLIMIT_NOFILE`: open fails with EMFILE when no number
    /// below it is free. `None`: unlimited.
    pub nofile: Option<u64>,
    pub rss_pages: u64,
    pub hwm_kib: u64,
    pub pid: u32,
    pub self_process: bool,
    /// Reads made, to check which ones are skipped.
    pub status_reads: usize,
    pub schedstat_reads: usize,
    pub clock_reads: usize,
    /// Samples that took the thread count from `task_count`.
    pub process_status_reads_avoided: usize,
    /// Successful opens, to tell kept descriptors from open-read-close.
    pub opens: usize,
    /// The descriptor budget: its own unless a test shares one between
    /// several fake samplers of one "process".
    pub pool: std::sync::Arc<super::DescriptorPool>,
    next_incarnation: u64,
}

impl FakeSys {
    pub(crate) fn new(pid: u32) -> Self {
        let mut s = FakeSys {
            threads: HashMap::new(),
            order: Vec::new(),
            has_schedstat: true,
            schedstat_zeros: false,
            max_files: usize::MAX,
            nofile: None,
            rss_pages: 100,
            hwm_kib: 800,
            pid,
            self_process: true,
            status_reads: 0,
            schedstat_reads: 0,
            clock_reads: 0,
            process_status_reads_avoided: 0,
            opens: 0,
            pool: std::sync::Arc::default(),
            next_incarnation: 0,
        };
        s.spawn(pid, "main");
        s
    }

    /// Starts a thread (or reuses `tid` for a new thread if it existed).
    pub(crate) fn spawn(&mut self, tid: u32, name: &str) {
        self.next_incarnation += 1;
        let t = FakeThread {
            incarnation: self.next_incarnation,
            name: name.to_string(),
            // Every real thread has run a little before anyone samples it.
            cpu_ns: 1_000,
            wait_ns: 0,
            slices: 0,
            vol: 0,
            invol: 0,
            pending_ns: 0,
        };
        self.threads.insert(tid, t);
        if !self.order.contains(&tid) {
            self.order.push(tid);
        }
    }

    pub(crate) fn exit(&mut self, tid: u32) {
        self.threads.remove(&tid);
        self.order.retain(|t| *t != tid);
    }

    pub(crate) fn thread(&mut self, tid: u32) -> &mut FakeThread {
        self.threads.get_mut(&tid).expect("scripted thread exists")
    }

    fn live(&self, f: &FakeFile) -> Option<&FakeThread> {
        let t = self.threads.get(&f.tid?)?;
        (t.incarnation == f.incarnation).then_some(t)
    }
}

impl Drop for FakeFile {
    fn drop(&mut self) {
        OPEN.with(|c| c.set(c.get() - 1));
        SLOTS.with(|s| {
            if let Some(used) = s.borrow_mut().get_mut(self.number) {
                *used = false;
            }
        });
    }
}

thread_local! {
    /// Descriptors currently open through any FakeSys of this test thread.
    pub(crate) static OPEN: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
    /// The descriptor table of this test thread: which numbers are in use.
    static SLOTS: std::cell::RefCell<Vec<bool>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The number open(2) would return now: the lowest free one.
fn lowest_free() -> usize {
    SLOTS.with(|s| {
        let s = s.borrow();
        s.iter().position(|used| !used).unwrap_or(s.len())
    })
}

fn take_slot(n: usize) {
    SLOTS.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() <= n {
            s.resize(n + 1, false);
        }
        s[n] = true;
    });
}

fn esrch() -> io::Error {
    io::Error::from_raw_os_error(libc::ESRCH)
}

impl Sys for FakeSys {
    type File = FakeFile;

    fn open(&mut self, rel: &str) -> io::Result<FakeFile> {
        let number = lowest_free();
        if OPEN.with(|c| c.get()) as usize >= self.max_files
            || self.nofile.is_some_and(|l| number as u64 >= l)
        {
            return Err(io::Error::from_raw_os_error(libc::EMFILE));
        }
        let parts: Vec<&str> = rel.split('/').collect();
        let file = match parts.as_slice() {
            ["task", tid, kind] => {
                let tid: u32 = tid
                    .parse()
                    .map_err(|_| io::Error::from_raw_os_error(libc::ENOENT))?;
                if *kind == "schedstat" && !self.has_schedstat {
                    return Err(io::Error::from_raw_os_error(libc::ENOENT));
                }
                let t = self
                    .threads
                    .get(&tid)
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
                FakeFile {
                    tid: Some(tid),
                    incarnation: t.incarnation,
                    kind: kind.to_string(),
                    number,
                }
            }
            [kind] => FakeFile {
                tid: None,
                incarnation: 0,
                kind: kind.to_string(),
                number,
            },
            _ => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
        };
        take_slot(number);
        OPEN.with(|c| c.set(c.get() + 1));
        self.opens += 1;
        Ok(file)
    }

    fn open_task(&mut self, tid: u32, file: TaskFile) -> io::Result<FakeFile> {
        self.open(&format!("task/{tid}/{}", file.name()))
    }

    fn open_process(&mut self, file: super::sys::ProcessFile) -> io::Result<FakeFile> {
        use super::sys::ProcessFile;
        self.open(match file {
            ProcessFile::Statm => "statm",
            ProcessFile::Status => "status",
            ProcessFile::Stat => "stat",
        })
    }

    fn descriptor_number(&self, file: &FakeFile) -> u64 {
        file.number as u64
    }

    fn descriptor_pool(&self) -> std::sync::Arc<super::DescriptorPool> {
        self.pool.clone()
    }

    fn fixed_descriptors(&self) -> u64 {
        0
    }

    fn nofile_limit(&mut self) -> Option<u64> {
        self.nofile
    }

    fn pread(&mut self, f: &FakeFile, buf: &mut [u8]) -> io::Result<usize> {
        if f.tid.is_some() && f.kind == "status" {
            self.status_reads += 1;
        }
        if f.tid.is_some() && f.kind == "schedstat" {
            self.schedstat_reads += 1;
        }
        let text = match (f.tid, f.kind.as_str()) {
            (None, "statm") => format!("1000 {} 10 1 0 100 0\n", self.rss_pages),
            (None, "status") => format!(
                "Name:\tmain\nThreads:\t{}\nVmHWM:\t {} kB\n",
                self.order.len(),
                self.hwm_kib
            ),
            (Some(_), kind) => {
                let t = self.live(f).ok_or_else(esrch)?;
                match kind {
                    "schedstat" if self.schedstat_zeros => "0 0 0\n".to_string(),
                    "schedstat" => format!("{} {} {}\n", t.cpu_ns, t.wait_ns, t.slices),
                    "stat" => format!(
                        "1 ({}) S 1 1 1 0 -1 0 0 0 0 0 {} {} 0 0 20 0 1 0 5 0 0\n",
                        t.name,
                        t.cpu_ns / 10_000_000,
                        0
                    ),
                    "status" => {
                        format!(
                            "Name:\t{}\nState:\tS\nvoluntary_ctxt_switches:\t{}\nnonvoluntary_ctxt_switches:\t{}\n",
                            t.name, t.vol, t.invol
                        )
                    }
                    _ => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
                }
            }
            _ => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
        };
        let n = text.len().min(buf.len());
        buf[..n].copy_from_slice(&text.as_bytes()[..n]);
        Ok(n)
    }

    fn list_tasks(&mut self, out: &mut Vec<u32>) -> io::Result<()> {
        out.clear();
        out.extend(self.order.iter().copied());
        if out.is_empty() { Err(esrch()) } else { Ok(()) }
    }

    fn task_count(&mut self) -> Option<u64> {
        self.process_status_reads_avoided += 1;
        Some(self.order.len() as u64)
    }

    fn thread_cpu_ns(&mut self, tid: u32) -> Option<u64> {
        // The clock follows the TID, whichever thread has it now.
        self.clock_reads += 1;
        self.threads.get(&tid).map(|t| t.cpu_ns + t.pending_ns)
    }

    fn process_cpu_ns(&mut self) -> Option<u64> {
        Some(self.threads.values().map(|t| t.cpu_ns).sum())
    }

    fn target_alive(&mut self) -> bool {
        !self.threads.is_empty()
    }

    fn page_size(&self) -> u64 {
        4096
    }

    fn ticks_per_sec(&self) -> u64 {
        100
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn base(&self) -> &str {
        "/proc/fake"
    }
}
