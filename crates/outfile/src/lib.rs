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

mod dir;
mod sys;

pub use dir::Dir;
use sys::{fstat, fstatat_nofollow, fsync};

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::AtomicBool;

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

pub(crate) fn io_error<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> Error + 'a {
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

/// The directory and the file name of `path`; refused when `path` ends in
/// something that cannot be a file's name (`/`, `.`, `..`).
pub(crate) fn split(path: &Path) -> Result<(&Path, &OsStr), Error> {
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
pub(crate) enum Kind {
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
