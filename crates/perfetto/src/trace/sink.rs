//! The file and its write buffer, behind one lock: what is pending, the
//! size cap, the writes, and the blocks allocated ahead of them.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use super::{CLOSE_RESERVE, TraceEnd, TraceStatus};

/// The file's blocks are allocated ahead of its writes by this many times
/// the bytes of the write that needed them (`fallocate`, the size kept:
/// [`Sink::reserve_for`]): one allocation every few writes, and never
/// more held than a few writes' worth (at most [`RESERVE_MAX`]).
const RESERVE_WRITES: u64 = 4;
/// Most bytes allocated ahead of the file's end.
const RESERVE_MAX: u64 = 1024 * 1024;

/// The file and its write buffer, behind one lock shared by every
/// process written to it.
pub(super) struct Sink {
    pub(super) file: File,
    /// A regular file, written at offsets; false for a device or FIFO
    /// (written in sequence, nothing allocated ahead or cut back).
    pub(super) regular: bool,
    pub(super) status: TraceStatus,
    pub(super) max_bytes: u64,
    pub(super) flush_bytes: u64,
    pub(super) flush_every: Duration,
    /// The next writer sequence (one per process).
    pub(super) next_sequence: u32,
    /// Processes whose finding slices may still need closing.
    pub(super) open_processes: u64,
    /// Whole records taken and not yet written: they go after the file's
    /// `status.bytes_written` bytes with the next write.
    pub(super) pending: Vec<u8>,
    /// When the oldest pending record was taken.
    pub(super) pending_since: Option<Instant>,
    /// Intervals and finding slices counted in `status` whose records are
    /// pending, taken back if their write fails.
    pub(super) pending_intervals: u64,
    pub(super) pending_findings: u64,
    /// Successful writes so far: records taken before the count moved
    /// are in the file.
    pub(super) writes: u64,
    /// The file has blocks allocated up to here, past its end (its size
    /// is `status.bytes_written`): a write below it finds its blocks.
    pub(super) reserved: u64,
    /// Whether to allocate ahead (cleared when the file system refuses).
    pub(super) reserve: bool,
}

impl Sink {
    /// Takes whole records `buf` (with the intervals and finding slices
    /// they hold) to be written after the file's bytes, unless the file
    /// and the buffer would then pass `limit`; writes the buffer once it
    /// passes its size or age. On a refusal, what was taken before is
    /// written, so the file ends complete under the cap.
    pub(super) fn push(
        &mut self,
        buf: &[u8],
        limit: u64,
        intervals: u64,
        findings: u64,
    ) -> Result<(), TraceEnd> {
        let start = self.pending.len();
        self.pending.extend_from_slice(buf);
        self.take(start, limit, intervals, findings)
    }

    /// As [`Sink::push`], for records already appended to `pending` from
    /// `start` on (encoded there, rather than copied from a buffer of
    /// their own): taken, or cut off again on a refusal.
    pub(super) fn take(
        &mut self,
        start: usize,
        limit: u64,
        intervals: u64,
        findings: u64,
    ) -> Result<(), TraceEnd> {
        let held = self.status.bytes_written + self.pending.len() as u64;
        if held > limit {
            self.pending.truncate(start);
            self.flush()?;
            return Err(TraceEnd::SizeCap {
                max_bytes: self.max_bytes,
            });
        }
        let since = *self.pending_since.get_or_insert_with(Instant::now);
        self.pending_intervals += intervals;
        self.pending_findings += findings;
        self.status.intervals += intervals;
        self.status.findings += findings;
        self.status.bytes_buffered = self.pending.len() as u64;
        if self.pending.len() as u64 >= self.flush_bytes || since.elapsed() >= self.flush_every {
            self.flush()?;
        }
        Ok(())
    }

    /// Whether the oldest pending record is older than the buffer's age.
    pub(super) fn due(&self) -> bool {
        self.pending_since
            .is_some_and(|since| since.elapsed() >= self.flush_every)
    }

    /// Writes the pending records after the last whole record, in one
    /// `pwrite` when it takes them all (a process killed by a signal never
    /// leaves half a record). On failure the file is cut back to its
    /// whole records and the pending ones are dropped, uncounted.
    pub(super) fn flush(&mut self) -> Result<(), TraceEnd> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let at = self.status.bytes_written;
        let len = self.pending.len() as u64;
        let written = if self.regular {
            self.reserve_for(at, len);
            self.file.write_all_at(&self.pending, at)
        } else {
            (&self.file).write_all(&self.pending)
        };
        self.pending.clear();
        self.pending_since = None;
        self.status.bytes_buffered = 0;
        let (intervals, findings) = (self.pending_intervals, self.pending_findings);
        (self.pending_intervals, self.pending_findings) = (0, 0);
        match written {
            Ok(()) => {
                self.status.bytes_written += len;
                self.writes += 1;
                Ok(())
            }
            Err(e) => {
                // What was written of these records is cut off, so the
                // file ends on a whole record (and what was allocated
                // ahead is let go).
                if self.regular {
                    let _ = self.file.set_len(at);
                }
                (self.reserved, self.reserve) = (0, false);
                self.status.intervals -= intervals;
                self.status.findings -= findings;
                Err(TraceEnd::WriteFailed {
                    message: e.to_string(),
                })
            }
        }
    }

    /// Allocates the file's blocks ahead of a write of `len` bytes at
    /// `at`, when the last allocation does not reach its end: up to
    /// [`RESERVE_WRITES`] times `len` past `at` (at most [`RESERVE_MAX`],
    /// within the cap), without changing the
    /// file's size, so that a reader (and a process killed at any point)
    /// still finds a file that ends on its last whole record. An append
    /// then finds its blocks allocated: on ext4 the write no longer
    /// reserves and maps each block of a delayed allocation, a fifth of
    /// a 40 KB write's CPU time (BENCHMARKS.md, "Perfetto trace writer").
    /// Where the file system refuses (or the disk is full), it is not
    /// asked again, and writes go on as before. The blocks past the end
    /// are let go when the last process's part ends ([`Sink::release`])
    /// or a sibling output finds the disk full ([`PerfettoFile::give_back`]);
    /// a killed process leaves them to the file.
    pub(super) fn reserve_for(&mut self, at: u64, len: u64) {
        let end = at.saturating_add(len);
        if !self.reserve || end <= self.reserved {
            return;
        }
        let ahead = len
            .saturating_mul(RESERVE_WRITES)
            .clamp(len, RESERVE_MAX.max(len));
        let to = at.saturating_add(ahead).min(self.max_bytes.max(end));
        let from = self.status.bytes_written.max(self.reserved);
        self.reserve = allocate(&self.file, from, to - from);
        if self.reserve {
            self.reserved = to;
        }
    }

    /// Lets go of the blocks allocated past the file's end (the size is
    /// unchanged); whether there were any.
    pub(super) fn release(&mut self) -> bool {
        let held = self.reserved > self.status.bytes_written;
        if held {
            let _ = self.file.set_len(self.status.bytes_written);
        }
        self.reserved = 0;
        held
    }

    /// Records why the trace ended, unless it already had.
    pub(super) fn end(&mut self, end: TraceEnd) {
        self.status.ended.get_or_insert(end);
    }

    /// The limit for intervals: the cap less the room kept to close the
    /// findings of every process written.
    pub(super) fn interval_limit(&self) -> u64 {
        self.max_bytes
            .saturating_sub(CLOSE_RESERVE.saturating_mul(self.open_processes))
    }
}

impl Drop for Sink {
    /// Every process's part writes its records when it ends; this is for
    /// records left by a part that could not (a panic while writing).
    fn drop(&mut self) {
        let _ = self.flush();
        let _ = self.release();
    }
}

/// Allocates `len` bytes of `file` from `at` without changing its size
/// (`fallocate` with `FALLOC_FL_KEEP_SIZE`); false when refused.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn allocate(file: &File, at: u64, len: u64) -> bool {
    use std::os::fd::AsRawFd;
    let (Ok(at), Ok(len)) = (libc::off_t::try_from(at), libc::off_t::try_from(len)) else {
        return false;
    };
    // SAFETY: the descriptor is open for the life of `file`; fallocate
    // reads no memory of ours.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, at, len) };
    rc == 0
}

/// Elsewhere the file grows with its writes.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn allocate(_file: &File, _at: u64, _len: u64) -> bool {
    false
}

pub(super) use wakemeter::sync::lock;
