//! The system calls behind the crate, each with its `// SAFETY:` note,
//! and the checks made on what `fstat` says.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::{Error, io_error};

pub(crate) fn cstring(s: &OsStr, path: &Path) -> Result<CString, Error> {
    CString::new(s.as_bytes()).map_err(|_| Error::Io {
        what: "use",
        path: path.to_path_buf(),
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })
}

pub(crate) fn fstat(fd: &impl AsRawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable stat buffer; fstat fills it on success.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so it wrote the whole structure.
    Ok(unsafe { st.assume_init() })
}

pub(crate) fn fstatat_nofollow(dir: &OwnedFd, name: &CStr) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `name` is NUL-terminated, `st` is a writable stat buffer,
    // and `dir` is an open descriptor.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat returned 0, so it wrote the whole structure.
    Ok(unsafe { st.assume_init() })
}

pub(crate) fn openat(
    dir: libc::c_int,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; the mode is passed as the
    // variadic third argument openat expects with O_CREAT.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

pub(crate) fn egid() -> u32 {
    // SAFETY: getegid cannot fail and touches no memory.
    unsafe { libc::getegid() }
}

pub(crate) fn file_type(st: &libc::stat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

/// Why other users could change entries of a directory with `st`, if
/// they could.
pub(crate) fn unsafe_dir(st: &libc::stat) -> Option<String> {
    let me = euid();
    if st.st_uid != me && st.st_uid != 0 {
        return Some(format!("owned by user {}, not by you or root", st.st_uid));
    }
    if st.st_mode & libc::S_ISVTX != 0 {
        return None;
    }
    if st.st_mode & libc::S_IWOTH != 0 {
        return Some("writable by every user, without the sticky bit".to_string());
    }
    if st.st_mode & libc::S_IWGRP != 0 && st.st_gid != egid() && st.st_gid != 0 {
        return Some(format!(
            "writable by group {}, without the sticky bit",
            st.st_gid
        ));
    }
    None
}

/// The error of opening directory `path` with `O_DIRECTORY|O_NOFOLLOW`:
/// a link there answers `ENOTDIR` (or `ELOOP`), said as [`Error::Link`].
pub(crate) fn dir_error(path: &Path, e: io::Error) -> Error {
    let linked = matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR))
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if linked {
        Error::Link {
            path: path.to_path_buf(),
        }
    } else {
        io_error("open the directory", path)(e)
    }
}

pub(crate) fn clear_nonblock(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on an open descriptor, no memory involved.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn fsync(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fsync on an open descriptor, no memory involved.
    if unsafe { libc::fsync(fd.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
