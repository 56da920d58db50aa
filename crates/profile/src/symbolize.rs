//! Addresses to names with blazesym: ELF symbols, DWARF where present,
//! JIT perf maps (`/tmp/perf-<pid>.map`) and kernel symbols. One
//! [`Symbolizer`] keeps blazesym's per-binary caches across captures;
//! addresses without a symbol are kept (as `module+0xoffset` when the
//! mapping is known).

use std::collections::HashMap;

use wakemeter_procfs::process;

use crate::maps::{self, Mapping};
use crate::model::Frame;

/// Where separate debug files are looked for after the caller's own
/// directories (blazesym's defaults, which an explicit list replaces).
#[cfg(target_os = "linux")]
const DEFAULT_DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// Symbolizes the frames of captures; reuse one for many captures of the
/// same binaries (its caches are per binary file).
pub struct Symbolizer {
    #[cfg(target_os = "linux")]
    inner: blazesym::symbolize::Symbolizer,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer").finish_non_exhaustive()
    }
}

impl Default for Symbolizer {
    fn default() -> Self {
        Symbolizer::new()
    }
}

/// What is known of a process's memory for symbolizing its addresses:
/// taken at the start of a capture, so a target that exits meanwhile can
/// still be symbolized from its files.
pub(crate) struct ProcessView {
    pub pid: u32,
    /// Every executable mapping seen at the start or the end of the
    /// capture (see [`maps::union`]).
    pub maps: Vec<Mapping>,
    /// The path of the main executable, when it could be read.
    pub exe: Option<String>,
    /// Why blazesym could not cache the process, if it could not.
    pub cache_error: Option<String>,
    /// The process has exited: symbolize from the cached mappings and the
    /// files' paths (its `/proc/<pid>/map_files` are gone).
    pub exited: bool,
}

impl Symbolizer {
    /// A symbolizer with demangling, DWARF line info and perf maps on.
    /// Separate debug files are looked up in `/usr/lib/debug` and
    /// `/lib/debug` (see [`Symbolizer::with_debug_dirs`]).
    pub fn new() -> Symbolizer {
        Symbolizer::with_debug_dirs(&[])
    }

    /// As [`Symbolizer::new`], and looks for the separate debug file of a
    /// stripped module (one with a `.gnu_debuglink` section, as Debian's
    /// binaries have) in `dirs` first, then in `/usr/lib/debug` and
    /// `/lib/debug`: in each, under `.build-id/xx/yyyy.debug` (the first
    /// byte of the module's GNU build ID, then the rest, in hex: the layout
    /// of Debian's `-dbgsym` packages and of debuginfod caches) and by the
    /// debug link's file name.
    pub fn with_debug_dirs(dirs: &[std::path::PathBuf]) -> Symbolizer {
        #[cfg(not(target_os = "linux"))]
        let _ = dirs;
        Symbolizer {
            #[cfg(target_os = "linux")]
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_demangling(true)
                .enable_code_info(true)
                .set_debug_dirs(Some(
                    dirs.iter()
                        .map(|d| d.as_path())
                        .chain(DEFAULT_DEBUG_DIRS.iter().map(std::path::Path::new)),
                ))
                .build(),
        }
    }

    /// Records the process's mappings now (and has blazesym cache them),
    /// so that its addresses can be symbolized after it exits.
    pub(crate) fn view(&self, pid: u32) -> ProcessView {
        let maps = process::maps(process::Process::Pid(pid))
            .map(|t| maps::parse(&t))
            .unwrap_or_default();
        let exe = process::exe(pid)
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        ProcessView {
            pid,
            maps,
            exe,
            cache_error: self.cache_process(pid),
            exited: false,
        }
    }

    /// Before symbolizing: a live process's mappings and perf map are read
    /// again (a JIT adds symbols as it runs, a library loaded during the
    /// capture adds a mapping) and added to those seen at the start; an
    /// exited one keeps what [`Symbolizer::view`] recorded.
    pub(crate) fn refresh(&self, view: &mut ProcessView, exited: bool) {
        view.exited = exited;
        if exited {
            return;
        }
        if let Ok(text) = process::maps(process::Process::Pid(view.pid)) {
            view.maps = maps::union(&view.maps, &maps::parse(&text));
        }
        if self.cache_process(view.pid).is_none() {
            view.cache_error = None;
        }
    }

    #[cfg(target_os = "linux")]
    fn cache_process(&self, pid: u32) -> Option<String> {
        use blazesym::symbolize::cache;
        let mut process = cache::Process::new(blazesym::Pid::from(pid));
        process.cache_vmas = true;
        process.cache_perf_map = true;
        self.inner
            .cache(&cache::Cache::Process(process))
            .err()
            .map(|e| e.to_string())
    }

    #[cfg(not(target_os = "linux"))]
    fn cache_process(&self, _pid: u32) -> Option<String> {
        Some("symbolization needs Linux".into())
    }

    /// Frames for user addresses of `view`'s process, in input order. The
    /// first address is the innermost frame (an exact instruction); the
    /// others are return addresses, looked up one byte earlier so that a
    /// call at the end of a function is named after it.
    pub(crate) fn user_frames(
        &self,
        view: &ProcessView,
        addrs: &[u64],
        memo: &mut HashMap<u64, Frame>,
    ) -> Vec<Frame> {
        let mut out = Vec::with_capacity(addrs.len());
        let mut missing = Vec::new();
        for (i, a) in addrs.iter().enumerate() {
            let lookup = if i == 0 { *a } else { a.saturating_sub(1) };
            if !memo.contains_key(&lookup) {
                missing.push(lookup);
            }
        }
        missing.sort_unstable();
        missing.dedup();
        for (addr, frame) in missing.iter().zip(self.lookup_user(view, &missing)) {
            memo.insert(*addr, frame);
        }
        for (i, a) in addrs.iter().enumerate() {
            let lookup = if i == 0 { *a } else { a.saturating_sub(1) };
            let mut frame = memo
                .get(&lookup)
                .cloned()
                .unwrap_or_else(|| Frame::unresolved(lookup, false));
            frame.address = *a;
            out.push(frame);
        }
        out
    }

    /// Frames for kernel addresses, in input order (same conventions).
    pub(crate) fn kernel_frames(
        &self,
        addrs: &[u64],
        memo: &mut HashMap<u64, Frame>,
    ) -> Vec<Frame> {
        let lookups: Vec<u64> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| if i == 0 { *a } else { a.saturating_sub(1) })
            .collect();
        let mut missing: Vec<u64> = lookups
            .iter()
            .copied()
            .filter(|a| !memo.contains_key(a))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        for (addr, frame) in missing.iter().zip(self.lookup_kernel(&missing)) {
            memo.insert(*addr, frame);
        }
        lookups
            .iter()
            .zip(addrs)
            .map(|(l, a)| {
                let mut f = memo
                    .get(l)
                    .cloned()
                    .unwrap_or_else(|| Frame::unresolved(*l, true));
                f.address = *a;
                f
            })
            .collect()
    }

    #[cfg(target_os = "linux")]
    fn lookup_user(&self, view: &ProcessView, addrs: &[u64]) -> Vec<Frame> {
        use blazesym::symbolize::source::{Process, Source};
        let mut process = Process::new(blazesym::Pid::from(view.pid));
        process.map_files = !view.exited;
        let src = Source::Process(process);
        let symbolized = self.symbolize_each(&src, addrs);
        addrs
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let mut frame = Frame::unresolved(*addr, false);
                if let Some((m, off)) = maps::locate(&view.maps, *addr) {
                    frame.module = Some(m.path.clone());
                    frame.module_offset = Some(off);
                }
                if let Some(Some(blazesym::symbolize::Symbolized::Sym(sym))) = symbolized.get(i) {
                    fill(&mut frame, sym);
                }
                frame
            })
            .collect()
    }

    /// One result per address: a batch, or address by address when the
    /// batch fails as a whole (one bad address, e.g. in a file that cannot
    /// be parsed, must not cost the others their names).
    #[cfg(target_os = "linux")]
    fn symbolize_each(
        &self,
        src: &blazesym::symbolize::source::Source<'_>,
        addrs: &[u64],
    ) -> Vec<Option<blazesym::symbolize::Symbolized<'_>>> {
        use blazesym::symbolize::Input;
        match self.inner.symbolize(src, Input::AbsAddr(addrs)) {
            Ok(all) => all.into_iter().map(Some).collect(),
            Err(_) => addrs
                .iter()
                .map(|a| self.inner.symbolize_single(src, Input::AbsAddr(*a)).ok())
                .collect(),
        }
    }

    #[cfg(target_os = "linux")]
    fn lookup_kernel(&self, addrs: &[u64]) -> Vec<Frame> {
        use blazesym::symbolize::source::{Kernel, Source};
        // kallsyms only: a vmlinux with DWARF is rarely installed and slow to parse.
        let kernel = Kernel {
            vmlinux: blazesym::MaybeDefault::None,
            debug_syms: false,
            ..Kernel::default()
        };
        let symbolized = self.symbolize_each(&Source::Kernel(kernel), addrs);
        addrs
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let mut frame = Frame::unresolved(*addr, true);
                frame.module = Some("[kernel]".into());
                if let Some(Some(blazesym::symbolize::Symbolized::Sym(sym))) = symbolized.get(i) {
                    fill(&mut frame, sym);
                }
                frame
            })
            .collect()
    }

    #[cfg(not(target_os = "linux"))]
    fn lookup_user(&self, _view: &ProcessView, addrs: &[u64]) -> Vec<Frame> {
        addrs.iter().map(|a| Frame::unresolved(*a, false)).collect()
    }

    #[cfg(not(target_os = "linux"))]
    fn lookup_kernel(&self, addrs: &[u64]) -> Vec<Frame> {
        addrs.iter().map(|a| Frame::unresolved(*a, true)).collect()
    }
}

/// The GNU build ID (lowercase hex) of the file mapped by `m` in `view`'s
/// process: read through `/proc/<pid>/map_files` while the process lives
/// (the file as mapped, even if replaced or in another mount namespace),
/// else from its path.
#[cfg(target_os = "linux")]
pub(crate) fn build_id(view: &ProcessView, m: &Mapping) -> Option<String> {
    let through_proc = process::map_file_path(view.pid, m.start, m.end);
    let read = |path: &std::path::Path| blazesym::helper::read_elf_build_id(path).ok().flatten();
    let id = (!view.exited)
        .then(|| read(&through_proc))
        .flatten()
        .or_else(|| read(std::path::Path::new(&m.path)))?;
    Some(hex(&id))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn build_id(_view: &ProcessView, _m: &Mapping) -> Option<String> {
    None
}

/// The running kernel's GNU build ID (lowercase hex), from the ELF notes
/// in `/sys/kernel/notes`.
pub(crate) fn kernel_build_id() -> Option<String> {
    let notes = wakemeter_procfs::system::kernel_notes().ok()?;
    gnu_build_id_note(&notes).map(hex)
}

/// The descriptor of the first `NT_GNU_BUILD_ID` note named `GNU` in a
/// sequence of ELF notes (native-endian 4-byte name size, descriptor size
/// and type; name and descriptor padded to 4 bytes). Written here because
/// blazesym reads build IDs of ELF files only, and this is a bare note
/// list of a few dozen bytes.
fn gnu_build_id_note(mut notes: &[u8]) -> Option<&[u8]> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |b: &[u8], at: usize| -> Option<usize> {
        let bytes: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        usize::try_from(u32::from_ne_bytes(bytes)).ok()
    };
    let padded = |n: usize| n.checked_add(3).map(|n| n & !3);
    while notes.len() >= 12 {
        let (name_len, desc_len, kind) = (word(notes, 0)?, word(notes, 4)?, word(notes, 8)?);
        let name_end = 12usize.checked_add(padded(name_len)?)?;
        let desc_end = name_end.checked_add(desc_len)?;
        let name = notes.get(12..12 + name_len)?;
        let desc = notes.get(name_end..desc_end)?;
        if kind == NT_GNU_BUILD_ID as usize && name == b"GNU\0" {
            return Some(desc);
        }
        notes = notes.get(name_end.checked_add(padded(desc_len)?)?..)?;
    }
    None
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(target_os = "linux")]
fn fill(frame: &mut Frame, sym: &blazesym::symbolize::Sym<'_>) {
    frame.function = Some(sym.name.to_string());
    if let Some(module) = &sym.module
        && frame.module.is_none()
    {
        frame.module = Some(module.to_string_lossy().into_owned());
    }
    if let Some(code) = &sym.code_info {
        let file = code.file.to_string_lossy().into_owned();
        frame.source = Some((file, code.line.unwrap_or(0)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&u32::try_from(name.len()).expect("len").to_ne_bytes());
        out.extend_from_slice(&u32::try_from(desc.len()).expect("len").to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(name);
        out.resize(out.len().next_multiple_of(4), 0);
        out.extend_from_slice(desc);
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    #[test]
    fn build_id_note_found_after_other_notes() {
        let mut notes = note(b"Xen\0", 3, &[1, 2, 3]);
        notes.extend(note(b"GNU\0", 1, &[9; 16]));
        notes.extend(note(b"GNU\0", 3, &[0xab, 0x01, 0xff]));
        assert_eq!(
            gnu_build_id_note(&notes).map(hex).as_deref(),
            Some("ab01ff")
        );
        assert_eq!(gnu_build_id_note(&notes[..notes.len() - 2]), None);
        assert_eq!(gnu_build_id_note(b"short"), None);
        // A size that runs past the end is not followed.
        let mut bad = note(b"GNU\0", 3, &[1; 20]);
        bad[4] = 0xff;
        assert_eq!(gnu_build_id_note(&bad), None);
    }

    #[test]
    fn the_running_kernel_has_a_build_id() {
        if wakemeter_procfs::system::kernel_notes().is_ok() {
            let id = kernel_build_id().expect("build id note");
            assert!(
                id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()),
                "{id}"
            );
        }
    }
}
