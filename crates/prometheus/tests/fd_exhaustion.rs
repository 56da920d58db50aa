//! The endpoint when its host holds every file descriptor: the server
//! accepts one connection with the descriptor it keeps in reserve and
//! serves it; a second queued connection cannot be accepted (`EMFILE`),
//! and the server's thread must pause instead of retrying at once (it used
//! to spin on `accept4` at 97 % of a core), count the failures, and serve
//! the connection once a descriptor is free again (its reserve's, when
//! the first connection is done).
//!
//! Alone in its file: it lowers this test process's descriptor limit.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use wakemeter_prometheus::{Exporter, ExporterConfig, MetricsServer, ServerOptions};

const PATIENCE: Duration = Duration::from_secs(60);

/// The `stat` file of this process's thread named `name`, opened now:
/// out of descriptors, it could not be opened any more.
/// (The thread names itself once it runs: waits for that, bounded.)
fn thread_stat(name: &str) -> File {
    let start = Instant::now();
    loop {
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let dir = task.unwrap().path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if comm.trim_end() == name {
                return File::open(dir.join("stat")).unwrap();
            }
        }
        assert!(start.elapsed() < PATIENCE, "no thread named {name}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// utime + stime of the thread whose `stat` is open in `f`, in clock ticks.
fn thread_ticks(f: &File) -> u64 {
    let mut buf = vec![0u8; 4096];
    let n = f.read_at(&mut buf, 0).unwrap();
    let stat = String::from_utf8_lossy(&buf[..n]);
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A TCP socket over IPv4, not connected yet.
fn tcp_socket() -> OwnedFd {
    // SAFETY: socket takes no pointers; its result is checked below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just returned by socket and is owned by no one else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `socket` connected to `addr` (an IPv4 address), as a stream.
fn connect(socket: OwnedFd, addr: SocketAddr) -> TcpStream {
    let SocketAddr::V4(v4) = addr else {
        panic!("the server listens on IPv4: {addr}")
    };
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*v4.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `sin` is a valid sockaddr_in that outlives the call, and its
    // size is the length passed.
    let r = unsafe {
        libc::connect(
            socket.as_raw_fd(),
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
    TcpStream::from(socket)
}

fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions and touches no memory of ours.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(t > 0);
    t as u64
}

#[test]
fn out_of_descriptors_the_server_pauses_counts_and_recovers() {
    // A low limit (256), so that holding every descriptor is quick.
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write structs we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut old), 0);
        let soft = libc::rlimit {
            rlim_cur: old.rlim_max.min(256),
            rlim_max: old.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &soft), 0);
    }
    let exporter = Exporter::new(ExporterConfig::default()).unwrap();
    // The first connection waits in the server through the whole test
    // (the 3 s below, more on a loaded machine): a deadline that never cuts
    // it, so that what is checked is the reserve, not the clock.
    let server = MetricsServer::bind_with(
        "127.0.0.1:0".parse().unwrap(),
        exporter,
        ServerOptions::default().with_request_deadline(Duration::from_secs(3600)),
    )
    .unwrap();
    let addr = server.local_addr();
    let stat = thread_stat("wakemeter-http");

    // Hold every free descriptor but two, make both clients' sockets with
    // those, then connect: both connections are queued (the kernel
    // completed the handshakes); the server accepts the first with its
    // reserve and cannot accept the second. (Both sockets exist before
    // either connects: the server, woken by the first, would otherwise
    // take the descriptor the second client needs, as it once did in CI.)
    let mut hoard: Vec<File> = Vec::new();
    while let Ok(f) = File::open("/dev/null") {
        hoard.push(f);
    }
    assert!(hoard.len() > 10, "could not fill the descriptor table");
    hoard.pop();
    hoard.pop();
    let sockets = [tcp_socket(), tcp_socket()];
    // Fill those the clients did not need again, if any.
    while let Ok(f) = File::open("/dev/null") {
        hoard.push(f);
    }
    let [mut first, mut second] = sockets.map(|s| connect(s, addr));
    let start = Instant::now();
    while server.stats().accept_errors == 0 {
        assert!(
            start.elapsed() < PATIENCE,
            "the server never tried to accept"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(server.stats().connections, 1, "{:?}", server.stats());

    // Over a few seconds out of descriptors: a handful of retries (pauses
    // of 10 ms doubling to 1 s), not a spin; and next to no CPU.
    let (errors_before, ticks_before) = (server.stats().accept_errors, thread_ticks(&stat));
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let elapsed = window.elapsed();
    let errors = server.stats().accept_errors - errors_before;
    let ticks = thread_ticks(&stat) - ticks_before;
    let elapsed_ticks = elapsed.as_secs_f64() * clock_ticks_per_sec() as f64;
    eprintln!(
        "out of descriptors for {elapsed:?}: {errors} failed accepts, {ticks} ticks of CPU \
         (of {elapsed_ticks:.0} elapsed)"
    );
    // Pauses of 10 ms doubling to 1 s: about 8 retries in the first
    // 1.3 s, then one a second; a spinning loop makes thousands. Each
    // retry also tries to take its reserve back: one more open.
    assert!(
        errors <= 10 + elapsed.as_secs(),
        "{errors} failed accepts in {elapsed:?}: a spin"
    );
    assert!(
        (ticks as f64) < elapsed_ticks / 10.0,
        "{ticks} ticks of CPU in {elapsed_ticks:.0}"
    );

    // The host still holds every descriptor: the first connection, taken
    // with the reserve, is served; its descriptor, given back, becomes the
    // reserve that takes the second.
    for client in [&mut first, &mut second] {
        client.set_read_timeout(Some(PATIENCE)).unwrap();
        client
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        client.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    }
    drop(hoard);
    // Descriptors free again: a new connection is served at once.
    let mut third = TcpStream::connect(addr).unwrap();
    third.set_read_timeout(Some(PATIENCE)).unwrap();
    third
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    third.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    drop(server);
    // SAFETY: setrlimit reads the struct we own.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) };
}
