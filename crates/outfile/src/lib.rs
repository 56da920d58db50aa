//! One way to write an output file, for every writer of wakemeter (the
//! CLI's recordings, `ab` logs, Perfetto traces, profiles, flame graphs,
//! the demo's report; the library crates' trace and profile files).
//!
//! wakemeter often runs as root with its output in a directory other
//! users can write to. A path opened the ordinary way follows a link that
//! another user planted (or flips) there, and truncates whatever it points
//! to. Here:
//!
//! - The directory of the output is opened once ([`Dir::open`]: no link
//!   in its last component, `O_DIRECTORY|O_NOFOLLOW`) and refused when
//!   another user could rename or replace entries in it: writable by
//!   others without the sticky bit, or owned by a user other than the
//!   caller or root. Every later step works on that descriptor
//!   (`openat`, `renameat`), never on the path again.
//! - The file is created new beside its name (`NAME.partial-PID`, with
//!   `O_CREAT|O_EXCL|O_NOFOLLOW`: a name that exists, a planted link
//!   included, is skipped for the next one, never opened), written,
//!   synced, and renamed over the name. A rename replaces the name's
//!   directory entry, never what a link there points to, so nothing but
//!   the output's name changes. [`Publish`] says when the rename happens:
//!   at [`OutFile::finish`] (a file of that name is the old one or the
//!   whole new one) or at once (a trace that must be readable under its
//!   name while it grows, and after a `SIGKILL`).
//! - A device or FIFO that exists under the name is written to directly,
//!   only when the name itself is one (opened with `O_NOFOLLOW`, its type
//!   checked with `fstat` after the open) and it belongs to the caller or
//!   root: never through a link.
//! - `-` (and `/dev/stdout`, `/dev/fd/1`, `/proc/self/fd/1`) is standard
//!   output.
//!
//! What a `SIGKILL` leaves: with [`Publish::AtFinish`] the old file under
//! the name, untouched, and beside it `NAME.partial-PID` with what was
//! written (whole records, if the writer writes whole records in one
//! `write`); with [`Publish::Now`] the new file under the name with what
//! was written. A [`OutFile`] dropped without [`OutFile::finish`] removes
//! its temporary file ([`Publish::AtFinish`]).

#![cfg_attr(docsrs, feature(doc_cfg))]

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Why an output file cannot be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed on `path` (`what` says which step).
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// The step: "open the directory of", "create", "write", ...
        what: &'static str,
        /// The path given (or the directory, for a directory step).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The name (or the directory's last component) is a symbolic link;
    /// nothing is written through a link.
    #[error(
        "{} is a symbolic link; give the file or directory it points to \
         (an output is never written through a link)",
        path.display()
    )]
    Link {
        /// The link.
        path: PathBuf,
    },
    /// The directory can be changed by other users: writable by them
    /// without the sticky bit, or owned by another user.
    #[error(
        "{}: {why}; another user could swap the output for a link there \
         (write into a directory of your own, or one with the sticky bit like /tmp)",
        dir.display()
    )]
    UnsafeDir {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The name exists and is something that is not written to (a
    /// directory, a socket), or a device or FIFO of another user.
    #[error("{} is {what}; give a file name (or a device, FIFO or - for standard output)", path.display())]
    NotWritable {
        /// The path given.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },
    /// The wait for a FIFO's reader was stopped ([`Options::stop`]).
    #[error("{}: stopped while waiting for a reader of the FIFO", path.display())]
    Interrupted {
        /// The FIFO.
        path: PathBuf,
    },
}

impl Error {
    /// The OS error number, when a system call failed (e.g. `ENOSPC`,
    /// `EMFILE`).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> Error + 'a {
    move |source| Error::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// When a new file appears under its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// At [`OutFile::finish`]: until then the name keeps what it held (a
    /// recording, a profile, a report: whole or not at all).
    AtFinish,
    /// At once, before anything is written: the name shows the file as it
    /// grows (a trace that is complete after every write, also when the
    /// writer is killed).
    Now,
}

/// How to open an output.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// When the file appears under its name.
    pub publish: Publish,
    /// Permission bits of a new file (less the umask); default `0o644`.
    pub mode: u32,
    /// While it waits for a FIFO's reader, the open looks at this flag
    /// every 50 ms and gives up ([`Error::Interrupted`]) once it is set;
    /// without one it blocks until a reader comes.
    pub stop: Option<&'a AtomicBool>,
    /// Whether the file may replace one of the same name (default true);
    /// false leaves an existing one alone and fails with `EEXIST` at the
    /// rename (the temporary file is linked to the name, which never
    /// replaces, then removed).
    pub replace: bool,
}

impl Options<'_> {
    /// `publish`, mode `0o644`, no stop flag.
    pub fn new(publish: Publish) -> Options<'static> {
        Options {
            publish,
            mode: 0o644,
            stop: None,
            replace: true,
        }
    }
}

impl<'a> Options<'a> {
    /// Sets [`Options::stop`].
    pub fn with_stop(self, stop: &'a AtomicBool) -> Options<'a> {
        Options {
            stop: Some(stop),
            ..self
        }
    }

    /// Sets [`Options::replace`].
    pub fn with_replace(self, replace: bool) -> Options<'a> {
        Options { replace, ..self }
    }

    /// Sets [`Options::mode`].
    pub fn with_mode(self, mode: u32) -> Options<'a> {
        Options { mode, ..self }
    }
}

/// Whether `path` names this process's standard output.
pub fn is_stdout(path: &Path) -> bool {
    matches!(
        path.as_os_str().as_bytes(),
        b"-" | b"/dev/stdout" | b"/dev/fd/1" | b"/proc/self/fd/1"
    )
}

/// A directory opened once to create output files in, checked against
/// other users' changes ([`Dir::open`]).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn cstring(s: &OsStr, path: &Path) -> Result<CString, Error> {
    CString::new(s.as_bytes()).map_err(|_| Error::Io {
        what: "use",
        path: path.to_path_buf(),
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })
}

fn fstat(fd: &impl AsRawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable stat buffer; fstat fills it on success.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so it wrote the whole structure.
    Ok(unsafe { st.assume_init() })
}

fn fstatat_nofollow(dir: &OwnedFd, name: &CStr) -> io::Result<libc::stat> {
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

fn openat(dir: libc::c_int, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; the mode is passed as the
    // variadic third argument openat expects with O_CREAT.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

fn egid() -> u32 {
    // SAFETY: getegid cannot fail and touches no memory.
    unsafe { libc::getegid() }
}

fn file_type(st: &libc::stat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

/// Why other users could change entries of a directory with `st`, if
/// they could.
fn unsafe_dir(st: &libc::stat) -> Option<String> {
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
fn dir_error(path: &Path, e: io::Error) -> Error {
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
        let (parent, name) = split(path)?;
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
        if rc != 0 {
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
        let st = fstat(&fd).map_err(io_error("open the directory", path))?;
        if st.st_uid != euid() {
            return Err(Error::UnsafeDir {
                dir: path.to_path_buf(),
                why: format!("it exists and belongs to user {}, not to you", st.st_uid),
            });
        }
        if st.st_mode & (libc::S_IWGRP | libc::S_IWOTH) != 0 {
            return Err(Error::UnsafeDir {
                dir: path.to_path_buf(),
                why: "it exists and other users can write to it".to_string(),
            });
        }
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
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

fn clear_nonblock(fd: &OwnedFd) -> io::Result<()> {
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

/// The directory and the file name of `path`; refused when `path` ends in
/// something that cannot be a file's name (`/`, `.`, `..`).
fn split(path: &Path) -> Result<(&Path, &OsStr), Error> {
    let bad = || Error::NotWritable {
        path: path.to_path_buf(),
        what: "a directory",
    };
    if path.as_os_str().as_bytes().ends_with(b"/") {
        return Err(bad());
    }
    match path.components().next_back() {
        Some(Component::Normal(name)) => {
            let parent = path.parent().unwrap_or(Path::new(""));
            Ok((parent, name))
        }
        _ => Err(bad()),
    }
}

/// Where an [`OutFile`] writes.
#[derive(Debug)]
enum Kind {
    /// A new file in `dir`: `tmp` until it is renamed over `name`.
    Renamed {
        dir: OwnedFd,
        tmp: Option<CString>,
        name: CString,
        replace: bool,
    },
    /// A device or FIFO, or standard output.
    Direct,
}

/// An output file being written ([`OutFile::create`]); [`Write`] writes
/// to it, [`OutFile::file`] gives the descriptor (for `pwrite`, or a
/// child's stdout).
#[derive(Debug)]
pub struct OutFile {
    file: File,
    kind: Kind,
    path: PathBuf,
}

impl OutFile {
    /// Opens `path` for writing, the one safe way (see the crate docs): a
    /// new file created beside the name and renamed over it (when
    /// [`Options::publish`] says), a device or FIFO the name itself is,
    /// or standard output for `-`.
    ///
    /// # Errors
    /// [`Error::Link`] when the name (or its directory's last component)
    /// is a link; [`Error::UnsafeDir`]; [`Error::NotWritable`] for a
    /// directory, a socket or another user's device; [`Error::Io`] (the
    /// directory is missing, the disk is full, out of descriptors, ...).
    pub fn create(path: &Path, options: Options<'_>) -> Result<OutFile, Error> {
        if is_stdout(path) {
            let fd = io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .map_err(io_error("write", path))?;
            return Ok(OutFile {
                file: File::from(fd),
                kind: Kind::Direct,
                path: path.to_path_buf(),
            });
        }
        let (dir, name) = split(path)?;
        Dir::open(dir)?.create(name, options)
    }

    /// The path given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether it is a regular file (written at offsets, cut back after a
    /// failed write); false for a device, a FIFO or standard output.
    pub fn is_regular(&self) -> bool {
        matches!(self.kind, Kind::Renamed { .. })
    }

    /// Whether the file is already under its name.
    pub fn is_published(&self) -> bool {
        !matches!(self.kind, Kind::Renamed { tmp: Some(_), .. })
    }

    fn rename_into_place(&mut self) -> Result<(), Error> {
        if let Kind::Renamed {
            dir,
            tmp,
            name,
            replace,
        } = &mut self.kind
            && let Some(t) = tmp.as_ref()
        {
            let rc = if *replace {
                // SAFETY: both names are NUL-terminated and `dir` is open;
                // renameat replaces the entry `name`, never what a link
                // there points to.
                unsafe {
                    libc::renameat(dir.as_raw_fd(), t.as_ptr(), dir.as_raw_fd(), name.as_ptr())
                }
            } else {
                // SAFETY: as above; linkat fails with EEXIST on any entry
                // at `name` (a link included, not followed: no
                // AT_SYMLINK_FOLLOW), then the temporary name goes.
                unsafe {
                    let rc = libc::linkat(
                        dir.as_raw_fd(),
                        t.as_ptr(),
                        dir.as_raw_fd(),
                        name.as_ptr(),
                        0,
                    );
                    if rc == 0 {
                        libc::unlinkat(dir.as_raw_fd(), t.as_ptr(), 0);
                    }
                    rc
                }
            };
            if rc != 0 {
                return Err(io_error("rename into", &self.path)(
                    io::Error::last_os_error(),
                ));
            }
            *tmp = None;
            // The rename is durable once the directory is synced.
            let _ = fsync(dir);
        }
        Ok(())
    }

    /// Makes the output whole under its name: synced and renamed
    /// ([`Publish::AtFinish`]) or synced. A device or FIFO is not synced.
    ///
    /// # Errors
    /// [`Error::Io`] when the sync or the rename fails; the temporary
    /// file is then kept, with what was written (removed when
    /// [`Options::replace`] is false and the name was taken: `EEXIST`).
    pub fn finish(mut self) -> Result<(), Error> {
        if self.is_regular() {
            self.file
                .sync_all()
                .map_err(io_error("write", &self.path))?;
        }
        let r = self.rename_into_place();
        match &mut self.kind {
            // Not put in place without replacing: nothing is kept.
            Kind::Renamed { replace: false, .. } if r.is_err() => self.remove(),
            // Nothing left for Drop to remove, also after a failed rename.
            Kind::Renamed { tmp, .. } => *tmp = None,
            Kind::Direct => {}
        }
        r
    }

    /// Gives up the output: the temporary file is removed (the name
    /// keeps what it held); a file already under its name is removed when
    /// the name still is this file; a device or FIFO is closed.
    pub fn abandon(mut self) {
        self.remove();
    }

    fn remove(&mut self) {
        let Kind::Renamed { dir, tmp, name, .. } = &mut self.kind else {
            return;
        };
        let which = match tmp.take() {
            Some(t) => t,
            None => {
                let (Ok(mine), Ok(there)) = (fstat(&self.file), fstatat_nofollow(dir, name)) else {
                    return;
                };
                if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino) {
                    return;
                }
                name.clone()
            }
        };
        // SAFETY: `which` is NUL-terminated and `dir` is open.
        let _ = unsafe { libc::unlinkat(dir.as_raw_fd(), which.as_ptr(), 0) };
        // Removed once: a later drop leaves the name alone.
        self.kind = Kind::Direct;
    }

    /// Writes `bytes` and finishes ([`Publish::AtFinish`]): a file under
    /// `path` is the old one or exactly `bytes`.
    ///
    /// # Errors
    /// As [`OutFile::create`], a failed write, and [`OutFile::finish`].
    pub fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), Error> {
        let mut out = OutFile::create(path, Options::new(Publish::AtFinish))?;
        out.write_all(bytes).map_err(io_error("write", path))?;
        out.finish()
    }
}

fn fsync(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fsync on an open descriptor, no memory involved.
    if unsafe { libc::fsync(fd.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Write for OutFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for OutFile {
    /// A temporary file never finished is removed.
    fn drop(&mut self) {
        if matches!(self.kind, Kind::Renamed { tmp: Some(_), .. }) {
            self.remove();
        }
    }
}

#[cfg(test)]
mod tests;
