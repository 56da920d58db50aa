//! Where a recording goes: one [`wakemeter_outfile::OutFile`], written a
//! whole line at a time.

use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::AtomicBool;

use wakemeter_outfile::{Dir, Options, OutFile, Publish};

use crate::print;

/// Called when a write finds the disk full: gives back space held by a
/// sibling output (the `--perfetto` trace's blocks allocated ahead);
/// true when it freed some, and the write is tried once more.
pub type OnFull = Box<dyn FnMut() -> bool + Send>;

/// A recording being written: a new file renamed over its name at the end
/// ([`Publish::AtFinish`]: the name holds the previous file or a whole
/// recording; a `SIGKILL` leaves `NAME.partial-PID` beside it with every
/// whole line written), a device or FIFO the name itself is, or standard
/// output.
pub struct Output {
    out: OutFile,
    /// Bytes written so far (a regular file): a failed write is cut back
    /// to here, so the file always ends on a whole line.
    len: u64,
    on_full: Option<OnFull>,
}

/// The message a user reads for an output that cannot be opened.
fn refused(e: &wakemeter_outfile::Error) -> String {
    print::safe(&e.to_string()).into_owned()
}

impl Output {
    /// Opens `path` for a recording; a wait for a FIFO's reader ends when
    /// `stop` is set.
    ///
    /// # Errors
    /// One line for the user: what the path is and why it is refused, or
    /// why it cannot be created.
    pub fn open(path: &Path, stop: Option<&AtomicBool>) -> Result<Output, String> {
        let mut options = Options::new(Publish::AtFinish);
        options.stop = stop;
        let out = OutFile::create(path, options).map_err(|e| refused(&e))?;
        Ok(Output {
            out,
            len: 0,
            on_full: None,
        })
    }

    /// Opens `name` in `dir` (an `ab` directory) for a recording.
    ///
    /// # Errors
    /// As [`Output::open`].
    pub fn open_in(dir: &Dir, name: &str) -> Result<Output, String> {
        let out = dir
            .create(name.as_ref(), Options::new(Publish::AtFinish))
            .map_err(|e| refused(&e))?;
        Ok(Output {
            out,
            len: 0,
            on_full: None,
        })
    }

    /// Sets what gives back space when the disk is full ([`OnFull`]).
    pub fn set_on_full(&mut self, on_full: OnFull) {
        self.on_full = Some(on_full);
    }

    /// Writes one line with one `write` call (a line is never split
    /// between two writes, so a reader never sees half a record). When
    /// the disk is full, what was written of the line is cut off, space
    /// held by a sibling output is given back ([`Output::set_on_full`])
    /// and the line is tried once more.
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        let mut buf = Vec::with_capacity(text.len() + 1);
        buf.extend_from_slice(text.as_bytes());
        buf.push(b'\n');
        match self.write_line(&buf) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                let freed = self.on_full.as_mut().is_some_and(|f| f());
                if freed { self.write_line(&buf) } else { Err(e) }
            }
            r => r,
        }
    }

    fn write_line(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.out.write_all(buf) {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                if self.out.is_regular() {
                    // The file ends on its last whole line again.
                    let mut file = self.out.file();
                    let _ = file.set_len(self.len);
                    // The next write goes on after the cut.
                    let _ = io::Seek::seek(&mut file, io::SeekFrom::Start(self.len));
                }
                Err(e)
            }
        }
    }

    /// The path the user gave.
    pub fn target(&self) -> &Path {
        self.out.path()
    }

    /// Makes the recording visible under its name: synced and renamed (a
    /// regular file).
    ///
    /// # Errors
    /// When the sync or the rename fails.
    pub fn finish(self) -> Result<(), String> {
        self.out.finish().map_err(|e| refused(&e))
    }

    /// Removes what was written, when it can be (a regular file); the
    /// name keeps what it held.
    pub fn abandon(self) {
        self.out.abandon();
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("wakemeter-output-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_symlink_planted_at_the_temporary_name_is_skipped_not_followed() {
        let d = scratch("planted");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let out = d.join("rec.ndjson");
        let tmp = d.join(format!("rec.ndjson.partial-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        let mut o = Output::open(&out, None).unwrap();
        o.line("{}").unwrap();
        o.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{}\n");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_symlink_at_the_name_is_refused() {
        let d = scratch("link");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let out = d.join("rec.ndjson");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        let e = Output::open(&out, None).err().unwrap();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_regular_file_is_replaced_whole_at_the_end_only() {
        let d = scratch("regular");
        let out = d.join("rec.ndjson");
        std::fs::write(&out, "old").unwrap();
        let mut o = Output::open(&out, None).unwrap();
        o.line("{\"a\":1}").unwrap();
        // Until the end, the old file is what the name holds.
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
        o.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"a\":1}\n");
        let left: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().collect();
        assert_eq!(left.len(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }
}
