//! [`Dir`]: a directory opened once, checked, and every file of an
//! output created, read or removed through its descriptor.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::sys::{
    clear_nonblock, cstring, dir_error, euid, file_type, fstat, fstatat_nofollow, openat,
    unsafe_dir,
};
use crate::{Error, Kind, Options, OutFile, Publish, io_error, split};

/// A directory opened once to create output files in, checked against
/// other users' changes ([`Dir::open`]).
#[derive(Debug)]
pub struct Dir {
    pub(crate) fd: OwnedFd,
    pub(crate) path: PathBuf,
}

impl Dir {
    /// Opens the directory `path` (`""` is the working directory): no link
    /// in its last component, and refused when other users could change
    /// its entries (see [`Error::UnsafeDir`]).
    ///
    /// # Errors
    /// [`Error::Link`], [`Error::UnsafeDir`], [`Error::Io`].
    pub fn open(path: &Path) -> Result<Dir, Error> {
        let shown = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        let c = cstring(shown.as_os_str(), shown)?;
        let fd = openat(
            libc::AT_FDCWD,
            &c,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(|e| dir_error(shown, e))?;
        let st = fstat(&fd).map_err(io_error("open the directory", shown))?;
        if let Some(why) = unsafe_dir(&st) {
            return Err(Error::UnsafeDir {
                dir: shown.to_path_buf(),
                why,
            });
        }
        Ok(Dir {
            fd,
            path: shown.to_path_buf(),
        })
    }

    /// A directory of the caller's own: created with `mkdir` (mode
    /// `0o755` less the umask; missing parents the same way), or, if it
    /// exists, opened and accepted only when the caller owns it and no
    /// one else can write to it. An existing directory of another user is
    /// never taken over.
    ///
    /// # Errors
    /// [`Error::UnsafeDir`] for a directory of another user or one others
    /// can write to; as [`Dir::open`] for its parent.
    pub fn create_own(path: &Path) -> Result<Dir, Error> {
        let Ok((parent, name)) = split(path) else {
            // `.`, `..`, `/`: an existing directory, taken only when own.
            let c = cstring(path.as_os_str(), path)?;
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
            let fd = openat(libc::AT_FDCWD, &c, flags, 0).map_err(|e| dir_error(path, e))?;
            return own_dir(fd, path, false);
        };
        let parent_dir = match Dir::open(parent) {
            Ok(d) => d,
            Err(Error::Io { source, .. })
                if source.kind() == io::ErrorKind::NotFound && !parent.as_os_str().is_empty() =>
            {
                Dir::create_own(parent)?
            }
            Err(e) => return Err(e),
        };
        let c = cstring(name, path)?;
        // SAFETY: `c` is NUL-terminated and the descriptor is open.
        let rc = unsafe { libc::mkdirat(parent_dir.fd.as_raw_fd(), c.as_ptr(), 0o755) };
        let created = rc == 0;
        if !created {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(io_error("create the directory", path)(e));
            }
        }
        let fd = openat(
            parent_dir.fd.as_raw_fd(),
            &c,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(|e| dir_error(path, e))?;
        own_dir(fd, path, created)
    }

    /// The path the directory was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `name` (one path component) in this directory for writing:
    /// see [`OutFile::create`].
    ///
    /// # Errors
    /// As [`OutFile::create`].
    pub fn create(&self, name: &OsStr, options: Options<'_>) -> Result<OutFile, Error> {
        let path = self.path.join(name);
        let cname = cstring(name, &path)?;
        match fstatat_nofollow(&self.fd, &cname) {
            Ok(st) => match file_type(&st) {
                libc::S_IFREG => {}
                libc::S_IFLNK => return Err(Error::Link { path }),
                libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO => {
                    return self.direct(&cname, path, options);
                }
                libc::S_IFDIR => {
                    return Err(Error::NotWritable {
                        path,
                        what: "a directory",
                    });
                }
                libc::S_IFSOCK => {
                    return Err(Error::NotWritable {
                        path,
                        what: "a socket",
                    });
                }
                _ => {
                    return Err(Error::NotWritable {
                        path,
                        what: "not a regular file",
                    });
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("look at", &path)(e)),
        }
        let (tmp, file) = self.create_temp(name, &path, options.mode)?;
        let mut out = OutFile {
            file,
            kind: Kind::Renamed {
                dir: self.fd.try_clone().map_err(io_error("create", &path))?,
                tmp: Some(tmp),
                name: cname,
                replace: options.replace,
            },
            path,
        };
        if options.publish == Publish::Now {
            out.rename_into_place()?;
        }
        Ok(out)
    }

    /// Opens `name` in this directory for reading (a file written there
    /// before, e.g. a child's output): a regular file only, no link
    /// followed.
    ///
    /// # Errors
    /// [`Error::Link`], [`Error::NotWritable`] (not a regular file),
    /// [`Error::Io`].
    pub fn open_read(&self, name: &OsStr) -> Result<File, Error> {
        let path = self.path.join(name);
        let c = cstring(name, &path)?;
        let fd = openat(
            self.fd.as_raw_fd(),
            &c,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        )
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => Error::Link { path: path.clone() },
            _ => io_error("read", &path)(e),
        })?;
        let st = fstat(&fd).map_err(io_error("read", &path))?;
        if file_type(&st) != libc::S_IFREG {
            return Err(Error::NotWritable {
                path,
                what: "not a regular file",
            });
        }
        Ok(File::from(fd))
    }

    /// Removes `name` from this directory (a link is removed, not
    /// followed).
    ///
    /// # Errors
    /// [`Error::Io`] (`ENOENT` when it is not there).
    pub fn remove(&self, name: &OsStr) -> Result<(), Error> {
        let path = self.path.join(name);
        let c = cstring(name, &path)?;
        // SAFETY: `c` is NUL-terminated and the descriptor is open.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            return Err(io_error("remove", &path)(io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Opens the directory `path` when it exists ([`Dir::open`]), else
    /// creates it as [`Dir::create_own`] does.
    ///
    /// # Errors
    /// As [`Dir::open`] and [`Dir::create_own`].
    pub fn open_or_create(path: &Path) -> Result<Dir, Error> {
        match Dir::open(path) {
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Dir::create_own(path)
            }
            r => r,
        }
    }

    /// Creates `NAME.partial-PID` (then `-1`, `-2`, ... when taken) new,
    /// following no link.
    fn create_temp(&self, name: &OsStr, path: &Path, mode: u32) -> Result<(CString, File), Error> {
        let pid = std::process::id();
        let mut last = None;
        for attempt in 0..64u32 {
            let mut tmp: OsString = name.to_os_string();
            tmp.push(format!(".partial-{pid}"));
            if attempt > 0 {
                tmp.push(format!("-{attempt}"));
            }
            let c = cstring(&tmp, path)?;
            match openat(
                self.fd.as_raw_fd(),
                &c,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                mode,
            ) {
                Ok(fd) => return Ok((c, File::from(fd))),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => last = Some(e),
                Err(e) => {
                    return Err(Error::Io {
                        what: "create",
                        path: self.path.join(tmp),
                        source: e,
                    });
                }
            }
        }
        Err(Error::Io {
            what: "create a new file beside",
            path: path.to_path_buf(),
            source: last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EEXIST)),
        })
    }

    /// A device or FIFO named directly: opened without following a link,
    /// its type and owner checked on the descriptor.
    fn direct(&self, name: &CStr, path: PathBuf, options: Options<'_>) -> Result<OutFile, Error> {
        let flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NOCTTY;
        let fd = match options.stop {
            None => openat(self.fd.as_raw_fd(), name, flags, 0),
            Some(stop) => loop {
                // A FIFO without a reader answers ENXIO at once.
                match openat(self.fd.as_raw_fd(), name, flags | libc::O_NONBLOCK, 0) {
                    Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                        if stop.load(Ordering::Relaxed) {
                            return Err(Error::Interrupted { path });
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    r => break r.and_then(|fd| clear_nonblock(&fd).map(|()| fd)),
                }
            },
        }
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => Error::Link { path: path.clone() },
            _ => io_error("write", &path)(e),
        })?;
        let st = fstat(&fd).map_err(io_error("write", &path))?;
        match file_type(&st) {
            libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO => {}
            // Swapped between the look and the open: nothing written.
            _ => {
                return Err(Error::NotWritable {
                    path,
                    what: "no longer a device or FIFO (it changed while being opened)",
                });
            }
        }
        if st.st_uid != euid() && st.st_uid != 0 {
            return Err(Error::NotWritable {
                path,
                what: "a device or FIFO of another user",
            });
        }
        Ok(OutFile {
            file: File::from(fd),
            kind: Kind::Direct,
            path,
        })
    }
}

/// `fd` as a directory of the caller's own: owned by the caller, and
/// writable by nobody else (one just `created` loses the group and other
/// write bits a umask such as 002 left it).
fn own_dir(fd: OwnedFd, path: &Path, created: bool) -> Result<Dir, Error> {
    let st = fstat(&fd).map_err(io_error("open the directory", path))?;
    if st.st_uid != euid() {
        return Err(Error::UnsafeDir {
            dir: path.to_path_buf(),
            why: format!("it exists and belongs to user {}, not to you", st.st_uid),
        });
    }
    let open_to_others = st.st_mode & (libc::S_IWGRP | libc::S_IWOTH);
    if open_to_others != 0 {
        if !created {
            return Err(Error::UnsafeDir {
                dir: path.to_path_buf(),
                why: "it exists and other users can write to it".to_string(),
            });
        }
        let mode = st.st_mode & 0o7777 & !open_to_others;
        // SAFETY: fchmod on an open descriptor, no memory involved.
        if unsafe { libc::fchmod(fd.as_raw_fd(), mode) } != 0 {
            return Err(io_error("create the directory", path)(
                io::Error::last_os_error(),
            ));
        }
    }
    Ok(Dir {
        fd,
        path: path.to_path_buf(),
    })
}
