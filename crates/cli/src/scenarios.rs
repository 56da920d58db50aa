//! The demo's workloads: two ways to serve the same requests, twice.
//!
//! A client thread sends one request every 200 ms (a UDP datagram over
//! loopback, like the Envoy Mobile experiment's steady trickle) to:
//! - `spin-poller`: polls its socket with a zero timeout in a loop (what
//!   libevent's poll backend degenerated to), and
//! - `epoll-loop`: blocks in `epoll_wait` until the datagram arrives;
//!
//! and hands one unit of work every 200 ms to:
//! - `usleep-poller`: checks a flag, then `usleep(1000)`, forever, and
//! - `condvar-waiter`: blocks on a condition variable until signalled.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;
use wakemeter::Sampler;

/// Period of the client's requests.
pub const REQUEST_PERIOD: Duration = Duration::from_millis(200);

/// Requests handled by each scenario thread, and their TIDs.
#[derive(Debug, Default, Serialize)]
pub struct Handled {
    /// Requests handled by the spinning poller.
    pub spin_poller: AtomicU64,
    /// Requests handled by the epoll loop.
    pub epoll_loop: AtomicU64,
    /// Work units handled by the usleep poller.
    pub usleep_poller: AtomicU64,
    /// Work units handled by the condition-variable waiter.
    pub condvar_waiter: AtomicU64,
}

/// Thread ids of the scenario threads (0 until started).
#[derive(Debug, Default)]
pub struct Tids {
    pub spin_poller: AtomicU64,
    pub epoll_loop: AtomicU64,
    pub usleep_poller: AtomicU64,
    pub condvar_waiter: AtomicU64,
}

/// The running scenarios; [`Scenarios::stop`] ends them.
pub struct Scenarios {
    stop: Arc<AtomicBool>,
    work: Arc<(Mutex<bool>, Condvar)>,
    handles: Vec<JoinHandle<()>>,
    pub handled: Arc<Handled>,
    pub tids: Arc<Tids>,
}

fn gettid() -> u64 {
    // SAFETY: gettid has no preconditions.
    (unsafe { libc::gettid() }) as u64
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.to_string()).spawn(f)
}

fn bound_socket() -> io::Result<UdpSocket> {
    UdpSocket::bind("127.0.0.1:0")
}

/// Starts the four scenario threads and the client.
pub fn start(sampler: &Sampler) -> io::Result<Scenarios> {
    let stop = Arc::new(AtomicBool::new(false));
    let handled = Arc::new(Handled::default());
    let tids = Arc::new(Tids::default());
    let work = Arc::new((Mutex::new(false), Condvar::new()));
    let usleep_flag = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();

    let spin_sock = bound_socket()?;
    spin_sock.set_nonblocking(true)?;
    let epoll_sock = bound_socket()?;
    epoll_sock.set_nonblocking(true)?;
    let targets = [spin_sock.local_addr()?, epoll_sock.local_addr()?];
    let to_io = |e: wakemeter::Error| io::Error::other(e.to_string());

    let mut spin_probe = sampler.loop_probe("spin-poller").map_err(to_io)?;
    let (s, h, t) = (stop.clone(), handled.clone(), tids.clone());
    handles.push(spawn("spin-poller", move || {
        t.spin_poller.store(gettid(), Ordering::Relaxed);
        let mut buf = [0u8; 64];
        let mut pfd = libc::pollfd {
            fd: spin_sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        while !s.load(Ordering::Relaxed) {
            spin_probe.before_wait(Some(Duration::ZERO));
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, 0) }.max(0) as usize;
            spin_probe.after_wait(n);
            if n > 0 && spin_sock.recv(&mut buf).is_ok() {
                h.spin_poller.fetch_add(1, Ordering::Relaxed);
            }
        }
    })?);

    // SAFETY: epoll_create1 has no memory-safety preconditions.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `ep` is a fresh descriptor owned by nobody else.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    // SAFETY: valid epoll fd, socket fd and event struct.
    if unsafe {
        libc::epoll_ctl(
            ep.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            epoll_sock.as_raw_fd(),
            &mut ev,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    let mut epoll_probe = sampler.loop_probe("epoll-loop").map_err(to_io)?;
    let (s, h, t) = (stop.clone(), handled.clone(), tids.clone());
    handles.push(spawn("epoll-loop", move || {
        t.epoll_loop.store(gettid(), Ordering::Relaxed);
        let mut buf = [0u8; 64];
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        while !s.load(Ordering::Relaxed) {
            epoll_probe.before_wait(Some(Duration::from_secs(1)));
            // SAFETY: `events` is valid for 4 entries for the duration of the call.
            let n = unsafe { libc::epoll_wait(ep.as_raw_fd(), events.as_mut_ptr(), 4, 1000) }.max(0)
                as usize;
            epoll_probe.after_wait(n);
            while epoll_sock.recv(&mut buf).is_ok() {
                h.epoll_loop.fetch_add(1, Ordering::Relaxed);
            }
        }
    })?);

    let mut sleep_probe = sampler.sleep_probe("usleep-poller").map_err(to_io)?;
    let (s, h, t, flag) = (
        stop.clone(),
        handled.clone(),
        tids.clone(),
        usleep_flag.clone(),
    );
    handles.push(spawn("usleep-poller", move || {
        t.usleep_poller.store(gettid(), Ordering::Relaxed);
        while !s.load(Ordering::Relaxed) {
            if flag.swap(false, Ordering::AcqRel) {
                h.usleep_poller.fetch_add(1, Ordering::Relaxed);
            }
            sleep_probe.begin(Duration::from_micros(1000));
            // SAFETY: usleep has no memory-safety preconditions.
            unsafe { libc::usleep(1000) };
            sleep_probe.end();
        }
    })?);

    let (s, h, t, w) = (stop.clone(), handled.clone(), tids.clone(), work.clone());
    handles.push(spawn("condvar-waiter", move || {
        t.condvar_waiter.store(gettid(), Ordering::Relaxed);
        let (m, c) = &*w;
        let mut pending = m.lock().unwrap_or_else(|e| e.into_inner());
        while !s.load(Ordering::Relaxed) {
            if *pending {
                *pending = false;
                h.condvar_waiter.fetch_add(1, Ordering::Relaxed);
            }
            pending = c.wait(pending).unwrap_or_else(|e| e.into_inner());
        }
    })?);

    let client = bound_socket()?;
    let (s, w) = (stop.clone(), work.clone());
    handles.push(spawn("client", move || {
        while !s.load(Ordering::Relaxed) {
            std::thread::sleep(REQUEST_PERIOD);
            for t in &targets {
                let _ = client.send_to(b"request", t);
            }
            usleep_flag.store(true, Ordering::Release);
            let (m, c) = &*w;
            *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
            c.notify_one();
        }
    })?);

    Ok(Scenarios {
        stop,
        work,
        handles,
        handled,
        tids,
    })
}

impl Scenarios {
    /// Stops every scenario thread and waits for them.
    pub fn stop(mut self) {
        {
            // Under the waiter's mutex, so the wakeup cannot be lost.
            let _g = self.work.0.lock().unwrap_or_else(|e| e.into_inner());
            self.stop.store(true, Ordering::Relaxed);
        }
        self.work.1.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}
