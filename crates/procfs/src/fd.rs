//! What one of a process's file descriptors is: the link
//! `/proc/<pid>/fd/<n>`, and for a socket, the protocol table of the
//! process's network namespace that lists its inode
//! (`/proc/<pid>/net/{tcp,tcp6,udp,udp6,unix}`). Off the sampling path:
//! read for the few descriptors a finding names.

use std::io;

use crate::process::Process;

/// The kind of a file descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FdKind {
    /// A TCP socket (IPv4 or IPv6).
    TcpSocket,
    /// A UDP socket (IPv4 or IPv6).
    UdpSocket,
    /// A Unix-domain socket.
    UnixSocket,
    /// Another socket (netlink, raw, a protocol the tables above do not list).
    Socket,
    /// A pipe or FIFO.
    Pipe,
    /// An `eventfd`.
    Eventfd,
    /// A `timerfd`.
    Timerfd,
    /// A `signalfd`.
    Signalfd,
    /// An epoll instance.
    Epoll,
    /// A terminal (`/dev/pts/*`, `/dev/tty*`, `/dev/console`).
    Tty,
    /// A regular file or another path in the file system (a device).
    File,
    /// Anything else (another anonymous inode).
    Other,
}

/// What a descriptor's link says, before a socket's protocol is looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdLink {
    /// `socket:[inode]`.
    Socket(u64),
    /// Any other kind.
    Kind(FdKind),
}

/// Classifies the target of a `/proc/<pid>/fd/<n>` link.
pub fn classify_link(link: &str) -> FdLink {
    let inode = |prefix: &str| {
        link.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('['))
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|n| n.parse::<u64>().ok())
    };
    if let Some(inode) = inode("socket:") {
        return FdLink::Socket(inode);
    }
    let kind = if link.starts_with("pipe:") {
        FdKind::Pipe
    } else if let Some(anon) = link.strip_prefix("anon_inode:") {
        match anon.trim_start_matches('[').trim_end_matches(']') {
            "eventfd" => FdKind::Eventfd,
            "timerfd" => FdKind::Timerfd,
            "signalfd" => FdKind::Signalfd,
            "eventpoll" => FdKind::Epoll,
            _ => FdKind::Other,
        }
    } else if link.starts_with("/dev/pts/")
        || link.starts_with("/dev/tty")
        || link == "/dev/console"
    {
        FdKind::Tty
    } else if link.starts_with('/') {
        FdKind::File
    } else {
        FdKind::Other
    };
    FdLink::Kind(kind)
}

/// Whether a protocol table (`net/tcp`, `net/udp`: the inode is the 10th
/// column; `net/unix`: the 7th) lists socket `inode`.
pub fn table_lists(table: &str, inode: u64, column: usize) -> bool {
    table.lines().skip(1).any(|line| {
        line.split_whitespace()
            .nth(column)
            .and_then(|n| n.parse::<u64>().ok())
            == Some(inode)
    })
}

/// What the link of descriptor `fd` of process `pid` says.
///
/// # Errors
/// The error of reading the link: `NotFound` when the descriptor is
/// closed or the process gone, `PermissionDenied` without the privilege to
/// look into the process.
pub fn fd_link(pid: u32, fd: i32) -> io::Result<FdLink> {
    let link = std::fs::read_link(Process::Pid(pid).dir().join(format!("fd/{fd}")))?;
    Ok(classify_link(&link.to_string_lossy()))
}

/// The kind of socket `inode` of process `pid`, from the protocol tables
/// of its network namespace ([`FdKind::Socket`] when none lists it). Reads
/// up to five tables, each as long as the namespace's sockets: callers
/// keep the answer per inode.
pub fn socket_kind(pid: u32, inode: u64) -> FdKind {
    let dir = Process::Pid(pid).dir();
    let tables = [
        ("net/tcp", 9, FdKind::TcpSocket),
        ("net/tcp6", 9, FdKind::TcpSocket),
        ("net/udp", 9, FdKind::UdpSocket),
        ("net/udp6", 9, FdKind::UdpSocket),
        ("net/unix", 6, FdKind::UnixSocket),
    ];
    for (table, column, kind) in tables {
        if let Ok(text) = std::fs::read_to_string(dir.join(table))
            && table_lists(&text, inode, column)
        {
            return kind;
        }
    }
    FdKind::Socket
}

/// The kind of descriptor `fd` of process `pid` ([`fd_link`], then
/// [`socket_kind`] for a socket).
///
/// # Errors
/// As [`fd_link`].
pub fn fd_kind(pid: u32, fd: i32) -> io::Result<FdKind> {
    Ok(match fd_link(pid, fd)? {
        FdLink::Kind(kind) => kind,
        FdLink::Socket(inode) => socket_kind(pid, inode),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_as_the_kernel_writes_them() {
        assert_eq!(classify_link("socket:[12345]"), FdLink::Socket(12345));
        assert_eq!(classify_link("pipe:[77]"), FdLink::Kind(FdKind::Pipe));
        assert_eq!(
            classify_link("anon_inode:[eventfd]"),
            FdLink::Kind(FdKind::Eventfd)
        );
        assert_eq!(
            classify_link("anon_inode:[timerfd]"),
            FdLink::Kind(FdKind::Timerfd)
        );
        assert_eq!(
            classify_link("anon_inode:[eventpoll]"),
            FdLink::Kind(FdKind::Epoll)
        );
        assert_eq!(
            classify_link("anon_inode:bpf-map"),
            FdLink::Kind(FdKind::Other)
        );
        assert_eq!(classify_link("/dev/pts/3"), FdLink::Kind(FdKind::Tty));
        assert_eq!(
            classify_link("/var/log/x (deleted)"),
            FdLink::Kind(FdKind::File)
        );
    }

    #[test]
    fn this_processs_own_descriptors() {
        use std::os::fd::AsRawFd;
        let me = std::process::id();
        let (r, w) = std::io::pipe().expect("pipe");
        assert_eq!(fd_kind(me, r.as_raw_fd()).ok(), Some(FdKind::Pipe));
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        assert_eq!(fd_kind(me, tcp.as_raw_fd()).ok(), Some(FdKind::TcpSocket));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        assert_eq!(fd_kind(me, udp.as_raw_fd()).ok(), Some(FdKind::UdpSocket));
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        assert_eq!(fd_kind(me, a.as_raw_fd()).ok(), Some(FdKind::UnixSocket));
        let file = std::fs::File::open(std::env::current_exe().expect("exe")).expect("open");
        assert_eq!(fd_kind(me, file.as_raw_fd()).ok(), Some(FdKind::File));
        // SAFETY: eventfd has no memory preconditions; the descriptor is closed below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(efd >= 0);
        assert_eq!(fd_kind(me, efd).ok(), Some(FdKind::Eventfd));
        // SAFETY: `efd` is ours and closed once.
        unsafe { libc::close(efd) };
        drop(w);
    }
}
