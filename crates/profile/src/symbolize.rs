//! Addresses to names with blazesym: ELF symbols, DWARF where present,
//! JIT perf maps (`/tmp/perf-<pid>.map`) and kernel symbols. One
//! [`Symbolizer`] keeps blazesym's per-binary caches across captures;
//! addresses without a symbol are kept (as `module+0xoffset` when the
//! mapping is known).

use std::collections::HashMap;

use crate::maps::{self, Mapping};
use crate::model::Frame;

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
    pub maps: Vec<Mapping>,
    /// Why blazesym could not cache the process, if it could not.
    pub cache_error: Option<String>,
    /// The process has exited: symbolize from the cached mappings and the
    /// files' paths (its `/proc/<pid>/map_files` are gone).
    pub exited: bool,
}

impl Symbolizer {
    /// A symbolizer with demangling, DWARF line info and perf maps on.
    pub fn new() -> Symbolizer {
        Symbolizer {
            #[cfg(target_os = "linux")]
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_demangling(true)
                .enable_code_info(true)
                .build(),
        }
    }

    /// Records the process's mappings now (and has blazesym cache them),
    /// so that its addresses can be symbolized after it exits.
    pub(crate) fn view(&self, pid: u32) -> ProcessView {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .map(|t| maps::parse(&t))
            .unwrap_or_default();
        ProcessView {
            pid,
            maps,
            cache_error: self.cache_process(pid),
            exited: false,
        }
    }

    /// Before symbolizing: a live process's mappings and perf map are read
    /// again (a JIT adds symbols as it runs); an exited one keeps what
    /// [`Symbolizer::view`] recorded.
    pub(crate) fn refresh(&self, view: &mut ProcessView, exited: bool) {
        view.exited = exited;
        if exited {
            return;
        }
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{}/maps", view.pid)) {
            view.maps = maps::parse(&text);
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
