//! An in-memory Mach [`Sys`] for unit tests: threads, exits, short replies
//! and failing calls are scripted; every send right handed out is counted,
//! so a leaked or twice-released port shows.

use std::collections::HashMap;

use super::{
    KernReturn, Port, PowerInfo, Reply, Sys, TASK_POWER_INFO_COUNT, THREAD_BASIC_INFO_COUNT,
    THREAD_EXTENDED_INFO_COUNT, THREAD_IDENTIFIER_INFO_COUNT, THREAD_NAME_BYTES, ThreadTimes,
    Timebase, VmInfo,
};

/// `KERN_INVALID_ARGUMENT`, what thread_info answers for a terminated thread.
pub(crate) const KERN_INVALID_ARGUMENT: KernReturn = 4;
/// `KERN_FAILURE`.
pub(crate) const KERN_FAILURE: KernReturn = 5;
/// Count of the full `task_vm_info` of current SDKs (revision 7).
pub(crate) const TASK_VM_INFO_REV7_COUNT: u32 = 93;

/// A scripted thread of the fake task.
#[derive(Debug, Clone)]
pub(crate) struct FakeThread {
    pub thread_id: u64,
    /// Name bytes as the kernel would store them (may lack a NUL).
    pub name: Vec<u8>,
    pub times: ThreadTimes,
    /// Exited after being listed: every thread_info call fails.
    pub exited: bool,
    /// Only THREAD_EXTENDED_INFO fails.
    pub name_fails: bool,
    /// Reply counts the "kernel" reports.
    pub identifier_count: u32,
    pub basic_count: u32,
    pub extended_count: u32,
}

/// The fake task.
pub(crate) struct FakeSys {
    /// Threads in listing order, by port name.
    pub threads: Vec<(Port, FakeThread)>,
    /// Send rights handed out by `task_threads` and not yet released.
    pub refs: HashMap<Port, u32>,
    /// Releases of a port this task held no right for (double releases).
    pub bad_releases: u32,
    /// Every release, in order.
    pub released: Vec<Port>,
    /// `thread_info` calls per flavor: identifier, basic, extended.
    pub info_calls: [u32; 3],
    pub task_threads_kr: Option<KernReturn>,
    pub vm: VmInfo,
    pub vm_count: u32,
    pub vm_kr: Option<KernReturn>,
    pub power: PowerInfo,
    pub power_count: u32,
    pub power_kr: Option<KernReturn>,
    pub timebase: Timebase,
    pub pid: u32,
}

impl FakeSys {
    /// A task with one thread ("main", port 0x103, thread id 1000) on an
    /// Apple-silicon timebase (125/3: 24 MHz ticks).
    pub(crate) fn new(pid: u32) -> Self {
        let mut s = FakeSys {
            threads: Vec::new(),
            refs: HashMap::new(),
            bad_releases: 0,
            released: Vec::new(),
            info_calls: [0; 3],
            task_threads_kr: None,
            vm: VmInfo {
                resident_size: 40 << 20,
                resident_size_peak: 50 << 20,
                phys_footprint: 30 << 20,
            },
            vm_count: TASK_VM_INFO_REV7_COUNT,
            vm_kr: None,
            power: PowerInfo::default(),
            power_count: TASK_POWER_INFO_COUNT,
            power_kr: None,
            timebase: Timebase {
                numer: 125,
                denom: 3,
            },
            pid,
        };
        s.spawn(0x103, 1000, "main");
        s
    }

    /// Starts a thread on port name `port` (replacing any thread that had it).
    pub(crate) fn spawn(&mut self, port: Port, thread_id: u64, name: &str) {
        self.threads.retain(|(p, _)| *p != port);
        self.threads.push((
            port,
            FakeThread {
                thread_id,
                name: name.as_bytes().to_vec(),
                times: ThreadTimes::default(),
                exited: false,
                name_fails: false,
                identifier_count: THREAD_IDENTIFIER_INFO_COUNT,
                basic_count: THREAD_BASIC_INFO_COUNT,
                extended_count: THREAD_EXTENDED_INFO_COUNT,
            },
        ));
    }

    /// The thread exits and is no longer listed.
    pub(crate) fn exit(&mut self, port: Port) {
        self.threads.retain(|(p, _)| *p != port);
    }

    pub(crate) fn thread(&mut self, port: Port) -> &mut FakeThread {
        self.threads
            .iter_mut()
            .find(|(p, _)| *p == port)
            .map(|(_, t)| t)
            .expect("scripted thread exists")
    }

    /// Send rights handed out and not released.
    pub(crate) fn outstanding(&self) -> u32 {
        self.refs.values().sum()
    }

    fn live(&self, port: Port) -> Result<&FakeThread, KernReturn> {
        self.threads
            .iter()
            .find(|(p, _)| *p == port)
            .map(|(_, t)| t)
            .filter(|t| !t.exited)
            .ok_or(KERN_INVALID_ARGUMENT)
    }
}

impl Sys for FakeSys {
    fn task_threads(&mut self, out: &mut Vec<Port>) -> Result<(), KernReturn> {
        out.clear();
        if let Some(kr) = self.task_threads_kr {
            return Err(kr);
        }
        for (port, _) in &self.threads {
            *self.refs.entry(*port).or_insert(0) += 1;
            out.push(*port);
        }
        Ok(())
    }

    fn release_port(&mut self, port: Port) {
        self.released.push(port);
        match self.refs.get_mut(&port) {
            Some(n) if *n > 0 => *n -= 1,
            _ => self.bad_releases += 1,
        }
    }

    fn thread_id(&mut self, port: Port) -> Result<Reply<u64>, KernReturn> {
        self.info_calls[0] += 1;
        let t = self.live(port)?;
        Ok(Reply {
            info: t.thread_id,
            count: t.identifier_count,
        })
    }

    fn thread_times(&mut self, port: Port) -> Result<Reply<ThreadTimes>, KernReturn> {
        self.info_calls[1] += 1;
        let t = self.live(port)?;
        Ok(Reply {
            info: t.times,
            count: t.basic_count,
        })
    }

    fn thread_name(&mut self, port: Port) -> Result<Reply<[u8; THREAD_NAME_BYTES]>, KernReturn> {
        self.info_calls[2] += 1;
        let t = self.live(port)?;
        if t.name_fails {
            return Err(KERN_FAILURE);
        }
        let mut info = [0u8; THREAD_NAME_BYTES];
        let n = t.name.len().min(THREAD_NAME_BYTES);
        info[..n].copy_from_slice(&t.name[..n]);
        Ok(Reply {
            info,
            count: t.extended_count,
        })
    }

    fn task_vm_info(&mut self) -> Result<Reply<VmInfo>, KernReturn> {
        if let Some(kr) = self.vm_kr {
            return Err(kr);
        }
        Ok(Reply {
            info: self.vm,
            count: self.vm_count,
        })
    }

    fn task_power_info(&mut self) -> Result<Reply<PowerInfo>, KernReturn> {
        if let Some(kr) = self.power_kr {
            return Err(kr);
        }
        Ok(Reply {
            info: self.power,
            count: self.power_count,
        })
    }

    fn timebase(&self) -> Timebase {
        self.timebase
    }

    fn pid(&self) -> u32 {
        self.pid
    }
}
