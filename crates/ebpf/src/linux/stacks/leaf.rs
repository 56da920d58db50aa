//! The unwind table: the target's user stacks unwound in the kernel from
//! its modules' `.eh_frame`, by `unwind_step()` of `stacks.bpf.c`.
//!
//! The kernel's user-stack walk follows frame pointers. Code built without
//! them (Debian's C library, nginx, redis, most distribution packages) uses
//! `%rbp` as a general register: the walk skips callers and reads data
//! words as return addresses. Each row of the table says, for an address
//! range, where the frame's canonical frame address (CFA) is (`%rsp` or
//! `%rbp` plus an offset), that the return address lies at CFA - 8, and
//! where the caller's `%rbp` was saved, from the call frame information
//! (CFI) for the exact instruction; the program looks each frame's address
//! up (a binary search) and steps to its caller, up to `WM_STACK_DEPTH`
//! frames. An address without a rule takes the frame-pointer step.
//!
//! Why a table in the kernel rather than copies of the stack unwound in
//! user space (with framehop or gimli's `UnwindTable` per sample): the
//! counts are aggregated in the kernel, one entry per distinct stack, with
//! no per-event work in user space and no stack copies (8 to 64 KiB per
//! event).
//!
//! Built at attach from the modules mapped executable in the target then:
//! the C library first, then the other modules without frame pointers in
//! address order, then those with frame pointers while there is room (the
//! walk is right in most of their code; the rows make leaf functions and
//! prologues exact). [`LeafBuilder`] builds it again when the target's
//! executable mappings change (a `dlopen`, a `dlclose`, an exec), reading
//! only the modules it has not read before; the loader then switches the
//! programs to the new table (see `refresh_modules` in `mod.rs`). JIT code
//! has no `.eh_frame`: its frames take the frame-pointer step, and where
//! that fails the stack is marked truncated. The row's `ra_offset` also
//! serves the table's checks against readelf. x86_64 only: on aarch64 the
//! table stays empty and the kernel's frame-pointer walk is used.

use std::collections::HashMap;

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use object::read::elf::ElfFile64;
use object::{Object, ObjectSection, ObjectSegment, ReadCache, SegmentFlags};

use wakemeter_procfs::process;

use super::abi::{
    CFA_END, CFA_NONE, CFA_RBP, CFA_RSP, LeafRow, NO_RA_OFFSET, RULE_UNENCODED, rule,
};

/// Most rows uploaded per half of the table (16 bytes of kernel memory
/// each: at most 8 MiB a half; a half is sized to the target's rows, see
/// `leaf_capacity`). Debian 12's C library takes about 28,000 after
/// merging, libstdc++ 34,000, squid 112,000: squid's 36 modules need about
/// 300,000, and with half as many its TLS and Kerberos libraries were
/// left out (their stacks cut in nettle's MD5).
pub(crate) const MAX_LEAF_ROWS: usize = 524_288;

/// Largest distance from `sp` to a return address that the table keeps, in
/// bytes: beyond it the frame is left to the walk. 8 MiB, the default stack
/// size (`ulimit -s`) of a main thread and of a thread's stack: no frame of a
/// running program is larger, so only corrupt CFI is refused. Real frames
/// are far larger than a page: Debian's memcached 1.6 keeps a 16 KiB buffer
/// on the stack of the function that calls `sendmsg` (CFA = `%rsp` +
/// 16,496), and with the earlier bound of 4 KiB every stack through it
/// ended there.
const MAX_RA_OFFSET: i64 = 8 << 20;

/// `PF_X`: an executable segment.
const PF_X: u32 = 1;

/// x86_64's page size, in bytes: mappings start at multiples of it.
const PAGE_SIZE: u64 = 4096;

/// What building a table found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LeafTableStats {
    /// Executable file mappings looked at.
    pub modules: u32,
    /// Modules with rows in the table.
    pub modules_with_rows: u32,
    /// Modules whose functions keep frame pointers (their rows are added
    /// after the others', when there is room).
    pub frame_pointer_modules: u32,
    /// Modules left out: no `.eh_frame`, not a 64-bit ELF file, unreadable
    /// or corrupt CFI, or too many rows for what was left of
    /// [`MAX_LEAF_ROWS`].
    pub skipped_modules: u32,
}

/// Rows sorted by start address, ready for the `leaf_rows` map.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeafTable {
    pub rows: Vec<LeafRow>,
    pub stats: LeafTableStats,
}

/// An executable file mapping of `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    /// The file's inode: a module replaced on disk and mapped again at the
    /// same place is another module.
    inode: u64,
    path: String,
}

impl Mapping {
    /// What makes two mappings the same module at the same addresses.
    fn key(&self) -> (u64, u64, u64, String) {
        (self.start, self.offset, self.inode, self.path.clone())
    }
}

/// The name of the vDSO's mapping in a maps text.
const VDSO: &str = "[vdso]";

/// The executable file mappings of a `/proc/<pid>/maps` text, and the
/// vDSO's, first one per path.
fn exec_mappings(maps: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for m in wakemeter_procfs::maps::lines(maps) {
        if !m.executable
            || !(m.path.starts_with('/') || m.path == VDSO)
            || out.iter().any(|o| o.path == m.path)
        {
            continue;
        }
        out.push(Mapping {
            start: m.start,
            end: m.end,
            offset: m.offset,
            inode: m.inode,
            path: m.path.to_string(),
        });
    }
    out
}

/// Builds the table of one process, again whenever its executable mappings
/// change, from the rows of the modules it read before plus those of the
/// new ones.
#[derive(Debug)]
pub(crate) struct LeafBuilder {
    pid: u32,
    /// The executable mappings the last table was built from (`None`
    /// before the first).
    mappings: Option<Vec<Mapping>>,
    /// The rows of each module mapped then, by [`Mapping::key`]; `None`
    /// for a module without usable CFI. A module left out of the table for
    /// lack of room keeps only its outermost-frame rows
    /// ([`ModuleRows::ends`]), not the others: what the builder holds is
    /// bounded by the table's size, whatever the process maps; such a
    /// module stays out until it is mapped again.
    modules: HashMap<(u64, u64, u64, String), Option<ModuleRows>>,
}

impl LeafBuilder {
    pub(crate) fn new(pid: u32) -> LeafBuilder {
        LeafBuilder {
            pid,
            mappings: None,
            modules: HashMap::new(),
        }
    }

    /// The table of the process's executable modules as they are mapped
    /// now, with at most `capacity` rows; `None` when they are the ones of
    /// the last table (unless `force`), when its mappings cannot be read,
    /// and on other architectures than x86_64.
    pub(crate) fn build_if_changed(&mut self, capacity: usize, force: bool) -> Option<LeafTable> {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let maps = process::maps(process::Process::Pid(self.pid)).ok()?;
        let mappings = exec_mappings(&maps);
        if !force && self.mappings.as_ref() == Some(&mappings) {
            return None;
        }
        // Modules no longer mapped are forgotten: the cache holds what the
        // process maps now, no more.
        let mut modules = std::mem::take(&mut self.modules);
        for mapping in &mappings {
            let key = mapping.key();
            let rows = modules
                .remove(&key)
                .unwrap_or_else(|| self.read_module(mapping));
            self.modules.insert(key, rows);
        }
        let table = self.table(&mappings, capacity);
        self.mappings = Some(mappings);
        Some(table)
    }

    /// The rows of one module, from the file the process maps (the vDSO:
    /// from this process's own copy of it).
    fn read_module(&self, mapping: &Mapping) -> Option<ModuleRows> {
        if mapping.path == VDSO {
            return own_vdso()
                .filter(|image| {
                    u64::try_from(image.len()).ok() == Some(mapping.end - mapping.start)
                })
                .and_then(|image| module_rows(image, mapping));
        }
        // map_files opens what is mapped even from another mount namespace
        // or when the file was replaced; the path is the fallback.
        let file = process::open_mapped_file(self.pid, mapping.start, mapping.end, &mapping.path);
        file.ok()
            .and_then(|f| module_rows(&ReadCache::new(f), mapping))
    }

    /// The table from the rows read, at most `capacity` rows; the rows of
    /// modules left out for lack of room are dropped, but for their
    /// outermost frames' ([`ModuleRows::ends`]), added while there is room.
    fn table(&mut self, mappings: &[Mapping], capacity: usize) -> LeafTable {
        let mut table = LeafTable::default();
        let mut rows = Vec::new();
        let mut mappings: Vec<&Mapping> = mappings.iter().collect();
        // The C library first: its syscall wrappers are the leaf frames of
        // almost every off-CPU stack and of a poller's on-CPU ones, and a
        // process linked against large libraries (OpenSSL, libstdc++) has
        // more rows than the table holds. Then the others, in address order.
        mappings.sort_by_key(|m| !is_c_library(&m.path));
        // Modules with frame pointers come after the others: the walk is
        // right in most of their code, the rows make it exact in their leaf
        // functions and prologues when there is room.
        let mut deferred: Vec<(&Mapping, &ModuleRows)> = Vec::new();
        let mut left_out: Vec<(&Mapping, &ModuleRows)> = Vec::new();
        for mapping in mappings {
            table.stats.modules += 1;
            match self.modules.get(&mapping.key()).and_then(Option::as_ref) {
                Some(m) if m.frame_pointers => {
                    table.stats.frame_pointer_modules += 1;
                    deferred.push((mapping, m));
                }
                Some(m) if !m.rows.is_empty() && rows.len() + m.rows.len() <= capacity => {
                    table.stats.modules_with_rows += 1;
                    rows.extend_from_slice(&m.rows);
                }
                Some(m) => {
                    table.stats.skipped_modules += 1;
                    left_out.push((mapping, m));
                }
                None => table.stats.skipped_modules += 1,
            }
        }
        for (mapping, m) in deferred {
            if !m.rows.is_empty() && rows.len() + m.rows.len() <= capacity {
                table.stats.modules_with_rows += 1;
                rows.extend_from_slice(&m.rows);
            } else {
                left_out.push((mapping, m));
            }
        }
        // A module left out still ends its stacks where its CFI says the
        // outermost frame is (`_start`, a thread's entry): without these
        // rows the walk, right through the module by its frame pointers,
        // stepped past `_start` with a null %rbp and marked every stack
        // truncated (Debian's postgres, built with frame pointers, comes
        // after OpenSSL, ICU and the others and did not fit).
        let mut ends_only = Vec::new();
        for (mapping, m) in left_out {
            if rows.len() + m.ends.len() <= capacity {
                rows.extend_from_slice(&m.ends);
            }
            ends_only.push((mapping.key(), m.ends.clone()));
        }
        table.rows = normalize(rows);
        for (key, ends) in ends_only {
            self.modules.insert(
                key,
                Some(ModuleRows {
                    frame_pointers: false,
                    rows: Vec::new(),
                    ends,
                }),
            );
        }
        table
    }
}

/// This process's vDSO image, as the kernel mapped it: the same image the
/// kernel maps into every 64-bit process (a target's own copy cannot be
/// read without reading its memory; its mapping's size is checked against
/// this one's before it is used). Its `.eh_frame` covers `clock_gettime`
/// and the other calls a loop makes without entering the kernel.
fn own_vdso() -> Option<&'static [u8]> {
    // SAFETY: getauxval reads this process's auxiliary vector; it has no
    // preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if base == 0 {
        return None;
    }
    let maps = process::maps(process::Process::Current).ok()?;
    let own = wakemeter_procfs::maps::lines(&maps).find(|m| m.path == VDSO && m.start == base)?;
    let len = usize::try_from(own.end.checked_sub(own.start)?).ok()?;
    // SAFETY: [base, base + len) is this process's vDSO mapping, as its
    // maps list it: readable, mapped by the kernel at exec and never
    // unmapped for the life of the process, never written.
    Some(unsafe { std::slice::from_raw_parts(base as *const u8, len) })
}

/// Whether `path` is the C library or its dynamic loader (glibc, musl).
fn is_c_library(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    [
        "libc.so",
        "libc-",
        "libpthread",
        "ld-linux",
        "ld-musl",
        "libc.musl",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// The rows of one module.
#[derive(Debug)]
struct ModuleRows {
    /// Most of its functions set up a frame pointer: its rows are added
    /// after the other modules', when there is room.
    frame_pointers: bool,
    /// Its rows, merged, at the addresses of the mapping (empty once the
    /// module was left out of a table for lack of room).
    rows: Vec<LeafRow>,
    /// The rows of its outermost frames only (a return address the CFI
    /// says is undefined: `_start`, a new thread's first frame), each
    /// followed by a row that ends it: what a table gets of a module left
    /// out, a few rows.
    ends: Vec<LeafRow>,
}

/// The rows of the ELF file `data` mapped by `mapping`; `None` when it has
/// no usable `.eh_frame`.
fn module_rows<'a, R: object::ReadRef<'a>>(data: R, mapping: &Mapping) -> Option<ModuleRows> {
    let elf = ElfFile64::<object::Endianness, R>::parse(data).ok()?;
    // The load bias: the executable segment holding the mapping's file
    // offset is mapped at mapping.start + (its offset - mapping.offset).
    // The mapping starts at the page holding the segment's first byte: LLD
    // (Rust's default linker on x86_64 Linux since 1.90) does not align
    // the executable segment's file offset to a page (0x80be0, mapped from
    // 0x80000), so the segment is matched from its first page.
    let bias = elf.segments().find_map(|segment| {
        let SegmentFlags::Elf { p_flags } = segment.flags() else {
            return None;
        };
        let (offset, size) = segment.file_range();
        let first_page = offset & !(PAGE_SIZE - 1);
        (p_flags & PF_X != 0 && (first_page..offset.saturating_add(size)).contains(&mapping.offset))
            .then(|| {
                mapping
                    .start
                    .wrapping_sub(mapping.offset)
                    .wrapping_add(offset)
                    .wrapping_sub(segment.address())
            })
    })?;
    eh_frame_rows(&elf, bias)
}

/// The rows of an ELF file's `.eh_frame`, at addresses + `bias`.
fn eh_frame_rows<'a, R: object::ReadRef<'a>>(
    elf: &ElfFile64<'a, object::Endianness, R>,
    bias: u64,
) -> Option<ModuleRows> {
    let section = elf.section_by_name(".eh_frame")?;
    let bytes = section.data().ok()?;
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = elf.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    // The PLT's stubs: their CFI is a DWARF expression (the CFA depends on
    // the instruction's offset in its 16-byte entry).
    let plt: Vec<(u64, u64)> = elf
        .sections()
        .filter(|s| s.name().is_ok_and(|n| n.starts_with(".plt")))
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .collect();
    cfi_rows(bytes, &bases, bias, &plt).ok()
}

/// The rows of an `.eh_frame` section, at addresses + `bias`.
fn cfi_rows(
    eh_frame: &[u8],
    bases: &BaseAddresses,
    bias: u64,
    plt: &[(u64, u64)],
) -> gimli::Result<ModuleRows> {
    let section = EhFrame::new(eh_frame, LittleEndian);
    let mut context = Box::new(UnwindContext::new());
    let mut entries = section.entries(bases);
    let mut rows = Vec::new();
    let mut ends = Vec::new();
    let (mut functions, mut with_frame_pointer) = (0u32, 0u32);
    while let Some(entry) = entries.next()? {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial.parse(EhFrame::cie_from_offset)?;
        let return_address = fde.cie().return_address_register();
        functions += 1;
        let mut sets_frame_pointer = false;
        let mut table = fde.rows(&section, bases, &mut context)?;
        while let Some(row) = table.next_row()? {
            if let CfaRule::RegisterAndOffset { register, .. } = row.cfa() {
                sets_frame_pointer |= *register == X86_64::RBP;
            }
            let in_plt = plt
                .iter()
                .any(|(start, end)| (*start..*end).contains(&row.start_address()));
            let (ra_offset, rule) = if in_plt && matches!(row.cfa(), CfaRule::Expression(_)) {
                // A PLT stub jumps through the GOT with the return address
                // at %rsp (the lazy-binding path pushes one more word, and
                // its reading then lies outside every mapping: the stack is
                // cut there, not continued).
                (0, rule(CFA_RSP, 0))
            } else {
                row_rule(
                    row.cfa(),
                    row.register(return_address),
                    row.register(X86_64::RBP),
                )
            };
            let start = row.start_address().wrapping_add(bias);
            if rule == CFA_END {
                ends.push(LeafRow {
                    start,
                    ra_offset,
                    rule,
                });
                ends.push(row_at(row.end_address().wrapping_add(bias), NO_RA_OFFSET));
            }
            rows.push(LeafRow {
                start,
                ra_offset,
                rule,
            });
        }
        rows.push(row_at(fde.end_address().wrapping_add(bias), NO_RA_OFFSET));
        with_frame_pointer += u32::from(sets_frame_pointer);
    }
    Ok(ModuleRows {
        frame_pointers: functions > 0 && with_frame_pointer >= functions / 2,
        rows: normalize(rows),
        ends,
    })
}

/// One row's `ra_offset` and `rule` from its CFI: the CFA as `%rsp` or
/// `%rbp` plus an offset, the return address at CFA - 8 (always so on
/// x86_64), `%rbp` unchanged or saved at CFA + n. Anything else (a DWARF
/// expression, a register rule the kernel program does not follow) is
/// `WM_CFA_NONE`: the frame-pointer step, as without a table, flagged
/// [`RULE_UNENCODED`] so that a walk stopped there says why.
fn row_rule(
    cfa: &CfaRule<usize>,
    ra: Option<RegisterRule<usize>>,
    rbp: Option<RegisterRule<usize>>,
) -> (u32, u32) {
    const NONE: (u32, u32) = (NO_RA_OFFSET, CFA_NONE | RULE_UNENCODED);
    if ra == Some(RegisterRule::Undefined) {
        return (NO_RA_OFFSET, CFA_END);
    }
    let CfaRule::RegisterAndOffset { register, offset } = cfa else {
        return NONE;
    };
    let kind = match *register {
        X86_64::RSP => CFA_RSP,
        X86_64::RBP => CFA_RBP,
        _ => return NONE,
    };
    let Some(ra_offset) = (match ra {
        Some(RegisterRule::Offset(-8)) => offset
            .checked_sub(8)
            .filter(|n| (0..=MAX_RA_OFFSET).contains(n))
            .and_then(|n| u32::try_from(n).ok()),
        _ => None,
    }) else {
        return NONE;
    };
    // Not mentioned: unchanged (x86_64's %rbp is callee-saved).
    let rbp_offset = match rbp {
        None | Some(RegisterRule::SameValue) => 0,
        Some(RegisterRule::Offset(n)) => match i16::try_from(n) {
            Ok(n) if n != 0 => n,
            _ => return NONE,
        },
        _ => return NONE,
    };
    (ra_offset, rule(kind, rbp_offset))
}

fn row_at(start: u64, ra_offset: u32) -> LeafRow {
    LeafRow {
        start,
        ra_offset,
        rule: if ra_offset == NO_RA_OFFSET {
            CFA_NONE
        } else {
            CFA_RSP
        },
    }
}

/// Sorts rows by start, keeps one row per start (a function's first row
/// over the end marker of the function before it) and merges runs with the
/// same offset: what the program's binary search needs.
fn normalize(mut rows: Vec<LeafRow>) -> Vec<LeafRow> {
    rows.sort_by_key(|r| (r.start, r.rule != CFA_NONE));
    let mut out: Vec<LeafRow> = Vec::with_capacity(rows.len());
    for row in rows {
        match out.last_mut() {
            Some(last) if last.start == row.start => *last = row,
            _ => out.push(row),
        }
    }
    out.dedup_by(|next, kept| next.ra_offset == kept.ra_offset && next.rule == kept.rule);
    out
}

/// Where the return address of a frame at `ip` lies, as `sp + n`, when its
/// CFA is `%rsp`-based: the lookup `unwind_step()` makes in the kernel.
#[cfg(test)]
pub(crate) fn ra_offset(rows: &[LeafRow], ip: u64) -> Option<u32> {
    let at = rows.partition_point(|r| r.start <= ip).checked_sub(1)?;
    let n = rows[at].ra_offset;
    (rows[at].rule & 0xff == CFA_RSP && n != NO_RA_OFFSET).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, File};

    #[test]
    fn the_c_library_and_its_loader_are_known_by_name() {
        for p in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/ld-musl-x86_64.so.1",
            "/usr/lib64/ld-linux-x86-64.so.2",
            "/lib/x86_64-linux-gnu/libpthread.so.0",
        ] {
            assert!(is_c_library(p), "{p}");
        }
        for p in [
            "/usr/lib/x86_64-linux-gnu/libcrypto.so.3",
            "/usr/bin/redis-server",
            "/usr/lib/libcap.so.2",
        ] {
            assert!(!is_c_library(p), "{p}");
        }
    }

    #[test]
    fn maps_lines_give_executable_file_mappings_and_the_vdso_once_per_path() {
        let maps = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 123 /usr/bin/busy poll
55d0c0a01000-55d0c0a02000 r-xp 00001000 fe:01 123 /usr/bin/busy poll
7f0000000000-7f0000020000 r-xp 00026000 fe:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000020000-7f0000021000 r-xp 00046000 fe:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0 [vdso]
";
        assert_eq!(
            exec_mappings(maps),
            vec![
                Mapping {
                    start: 0x55d0_c0a0_1000,
                    end: 0x55d0_c0a0_2000,
                    offset: 0x1000,
                    inode: 123,
                    path: "/usr/bin/busy poll".into()
                },
                Mapping {
                    start: 0x7f00_0000_0000,
                    end: 0x7f00_0002_0000,
                    offset: 0x26000,
                    inode: 456,
                    path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into()
                },
                Mapping {
                    start: 0x7ffd_0010_0000,
                    end: 0x7ffd_0010_2000,
                    offset: 0,
                    inode: 0,
                    path: VDSO.into()
                },
            ]
        );
    }

    /// The C library's rows (Debian's has no frame pointers) against an
    /// independent reader of the same CFI: at every row binutils' readelf
    /// prints, the return address is where it says (`rsp+N` with the
    /// return address at `c-8`: N - 8), or the table leaves the frame to
    /// the walk.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn c_library_rows_agree_with_readelf() {
        let maps = process::maps(process::Process::Current).expect("maps");
        let libc = exec_mappings(&maps)
            .into_iter()
            .find(|m| m.path.contains("/libc.so"))
            .expect("this test links the C library");
        let file = File::open(&libc.path).expect("open the C library");
        let cache = ReadCache::new(file);
        let elf = ElfFile64::<object::Endianness, _>::parse(&cache).expect("ELF");
        // Bias 0: the file's own addresses, as readelf prints them.
        let Some(ModuleRows {
            frame_pointers: false,
            rows,
            ..
        }) = eh_frame_rows(&elf, 0)
        else {
            panic!("the C library should get rows (it has no frame pointers)");
        };
        let output = std::process::Command::new("readelf")
            .args(["--debug-dump=frames-interp", "-W", &libc.path])
            .output()
            .expect("readelf (Debian package binutils) is needed by this test");
        // readelf exits with 1 here even when it printed the table (no
        // .debug_frame): the table itself is the check.
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains("Contents of the .eh_frame section"),
            "{text:.400}"
        );
        let (mut checked, mut recoverable) = (0usize, 0usize);
        let mut fde_start: Option<u64> = None;
        let mut fde_rows = 0usize;
        // The PLT's expression rows: the return address at %rsp.
        let plt: Vec<(u64, u64)> = elf
            .sections()
            .filter(|s| s.name().is_ok_and(|n| n.starts_with(".plt")))
            .map(|s| (s.address(), s.address() + s.size()))
            .collect();
        let mut expect = |loc: u64, cfa: &str, ra: &str| {
            let in_plt = plt.iter().any(|(a, b)| (*a..*b).contains(&loc));
            let want = if cfa == "exp" && in_plt {
                Some(0)
            } else {
                cfa.strip_prefix("rsp+")
                    .and_then(|n| n.parse::<i64>().ok())
                    .filter(|_| ra == "c-8")
                    .map(|n| n - 8)
                    .filter(|n| (0..=MAX_RA_OFFSET).contains(n))
                    .map(|n| u32::try_from(n).expect("small"))
            };
            assert_eq!(
                ra_offset(&rows, loc),
                want,
                "at {loc:#x}: CFA {cfa}, ra {ra}"
            );
            checked += 1;
            recoverable += usize::from(want.is_some());
        };
        for line in text.lines().chain(std::iter::once("")) {
            if line.contains(" FDE ") || line.is_empty() {
                // An FDE without rows keeps the CIE's: CFA = rsp+8.
                if let (Some(start), 0) = (fde_start.take(), fde_rows) {
                    expect(start, "rsp+8", "c-8");
                }
                fde_rows = 0;
                fde_start = line
                    .split_once(" pc=")
                    .and_then(|(_, range)| range.split_once(".."))
                    .and_then(|(start, _)| u64::from_str_radix(start, 16).ok());
                continue;
            }
            let columns: Vec<&str> = line.split_whitespace().collect();
            let (Some(loc), Some(cfa), Some(ra)) = (
                columns
                    .first()
                    .and_then(|c| u64::from_str_radix(c, 16).ok()),
                columns.get(1),
                columns.last(),
            ) else {
                continue;
            };
            if fde_start.is_some() && columns[0].len() == 16 {
                fde_rows += 1;
                expect(loc, cfa, ra);
            }
        }
        println!(
            "{checked} readelf rows checked, {recoverable} with a return address on the stack"
        );
        assert!(
            checked > 10_000 && recoverable > checked / 2,
            "{checked} {recoverable}"
        );
    }

    /// What the builder keeps between rebuilds is bounded by the table:
    /// the rows of modules left out for lack of room are dropped, but for
    /// the few of their outermost frames.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn rows_of_modules_left_out_are_not_kept() {
        let kept =
            |b: &LeafBuilder| -> usize { b.modules.values().flatten().map(|m| m.rows.len()).sum() };
        let mut full = LeafBuilder::new(std::process::id());
        let table = full
            .build_if_changed(MAX_LEAF_ROWS, true)
            .expect("own maps");
        assert!(table.stats.modules_with_rows > 0, "{:?}", table.stats);
        assert!(kept(&full) >= table.rows.len());
        let mut small = LeafBuilder::new(std::process::id());
        let table = small.build_if_changed(1, true).expect("own maps");
        assert!(table.rows.len() <= 1);
        assert_eq!(kept(&small), 0);
        assert_eq!(table.stats.modules_with_rows, 0);
    }

    /// The vDSO gets rows from its `.eh_frame`, at its mapping: the row of
    /// `clock_gettime` (a dynamic symbol of the image) has the return
    /// address at `%rsp` + n, as `__vdso_clock_gettime`'s CFI says.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_vdso_gets_rows() {
        use object::ObjectSymbol;
        let maps = process::maps(process::Process::Current).expect("maps");
        let vdso = exec_mappings(&maps)
            .into_iter()
            .find(|m| m.path == VDSO)
            .expect("a vDSO mapping");
        let builder = LeafBuilder::new(std::process::id());
        let Some(rows) = builder.read_module(&vdso) else {
            panic!("no rows for the vDSO");
        };
        assert!(!rows.rows.is_empty());
        assert!(
            rows.rows
                .iter()
                .all(|r| (vdso.start..=vdso.end).contains(&r.start))
        );
        let image = own_vdso().expect("own vDSO");
        let elf = ElfFile64::<object::Endianness, _>::parse(image).expect("ELF");
        let clock_gettime = elf
            .dynamic_symbols()
            .find(|s| s.name() == Ok("__vdso_clock_gettime"))
            .expect("__vdso_clock_gettime");
        let at = vdso.start + clock_gettime.address();
        assert!(ra_offset(&rows.rows, at).is_some(), "no row at {at:#x}");
    }

    /// Modules left out for lack of room still end their stacks: with room
    /// for no module's rows, the table holds the outermost frames' rows
    /// (this test binary's `_start`, the C library's thread entry), each
    /// closed by a row for the walk, and nothing else; a rebuild keeps them.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn modules_left_out_keep_their_outermost_frames() {
        let mut builder = LeafBuilder::new(std::process::id());
        let table = builder.build_if_changed(64, true).expect("own maps");
        // The vDSO's few rows fit; no file module's do.
        let maps = process::maps(process::Process::Current).expect("maps");
        let vdso = exec_mappings(&maps)
            .into_iter()
            .find(|m| m.path == VDSO)
            .map_or(0..0, |m| m.start..m.end + 1);
        assert!(table.stats.modules_with_rows <= 1, "{:?}", table.stats);
        let ends = table.rows.iter().filter(|r| r.rule == CFA_END).count();
        assert!(ends >= 2, "{:?}", table.rows);
        assert!(
            table.rows.iter().all(|r| vdso.contains(&r.start)
                || r.rule == CFA_END
                || (r.rule == CFA_NONE && r.ra_offset == NO_RA_OFFSET)),
            "{:?}",
            table.rows
        );
        // Our own entry point: the ELF header's, at the mapping's bias.
        let exe = std::env::current_exe().expect("exe");
        let data = fs::read(&exe).expect("read own executable");
        let elf = ElfFile64::<object::Endianness, _>::parse(&data[..]).expect("ELF");
        let entry = elf.entry();
        let own = exec_mappings(&maps)
            .into_iter()
            .find(|m| std::path::Path::new(&m.path) == exe)
            .expect("own mapping");
        // This binary is linked by LLD: its executable segment's file
        // offset is not a page's (the bias is found from its first page).
        let Some(rows) = module_rows(&data[..], &own) else {
            panic!(
                "own CFI, mapped at {:#x} from offset {:#x}",
                own.start, own.offset
            );
        };
        let at_entry = rows
            .ends
            .first()
            .map(|r| r.start)
            .expect("_start has an undefined return address");
        let row = table.rows[table.rows.partition_point(|r| r.start <= at_entry) - 1];
        assert_eq!(row.rule, CFA_END);
        assert_eq!(at_entry.wrapping_sub(own.start) & 0xfff, entry & 0xfff);
        let again = builder.build_if_changed(64, true).expect("own maps");
        assert_eq!(again.rows, table.rows);
    }

    /// Bad input gives no rows, never made-up ones: a file that is no ELF
    /// file, an `.eh_frame` of garbage or cut short.
    #[test]
    fn malformed_input_gives_no_rows() {
        let mapping = Mapping {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            inode: 0,
            path: "/x".into(),
        };
        assert!(module_rows(&b"not an ELF file at all"[..], &mapping).is_none());
        let bases = BaseAddresses::default();
        let garbage = [0xffu8; 64];
        assert!(!matches!(
            cfi_rows(&garbage, &bases, 0, &[]),
            Ok(ModuleRows { ref rows, .. }) if !rows.is_empty()
        ));
        // The C library's own .eh_frame, cut in the middle of an entry.
        #[cfg(target_arch = "x86_64")]
        {
            let maps = process::maps(process::Process::Current).expect("maps");
            let libc = exec_mappings(&maps)
                .into_iter()
                .find(|m| m.path.contains("/libc.so"))
                .expect("this test links the C library");
            let data = fs::read(&libc.path).expect("read the C library");
            let elf = ElfFile64::<object::Endianness, _>::parse(&data[..]).expect("ELF");
            let section = elf.section_by_name(".eh_frame").expect(".eh_frame");
            let bytes = section.data().expect("data");
            let bases = BaseAddresses::default().set_eh_frame(section.address());
            let cut = &bytes[..bytes.len() / 2 + 3];
            assert!(cfi_rows(cut, &bases, 0, &[]).is_err());
        }
    }

    #[test]
    fn row_rules_follow_the_cfi() {
        let rsp = |offset| CfaRule::RegisterAndOffset {
            register: X86_64::RSP,
            offset,
        };
        let rbp = |offset| CfaRule::RegisterAndOffset {
            register: X86_64::RBP,
            offset,
        };
        let ra = || Some(RegisterRule::Offset(-8));
        // A function's entry: CFA = rsp+8, %rbp untouched.
        assert_eq!(row_rule(&rsp(8), ra(), None), (0, rule(CFA_RSP, 0)));
        // After `push %rbp; mov %rsp,%rbp`: CFA = rbp+16, %rbp at CFA-16.
        assert_eq!(
            row_rule(&rbp(16), ra(), Some(RegisterRule::Offset(-16))),
            (8, rule(CFA_RBP, -16))
        );
        // A 16 KiB buffer on the stack (memcached's transmit path).
        assert_eq!(
            row_rule(&rsp(16_496), ra(), Some(RegisterRule::Offset(-16))),
            (16_488, rule(CFA_RSP, -16))
        );
        // A frameless function that saved %rbp among other registers.
        let (off, r) = row_rule(&rsp(0x38), ra(), Some(RegisterRule::Offset(-24)));
        assert_eq!(
            (off, r & 0xff, (r >> 16) as u16 as i16),
            (0x30, CFA_RSP, -24)
        );
        // The outermost frame (_start, a thread's clone): the end.
        assert_eq!(
            row_rule(&rsp(8), Some(RegisterRule::Undefined), None),
            (NO_RA_OFFSET, CFA_END)
        );
        // What the program does not follow: the frame-pointer step.
        let none = (NO_RA_OFFSET, CFA_NONE | RULE_UNENCODED);
        let other = CfaRule::RegisterAndOffset {
            register: X86_64::RBX,
            offset: 8,
        };
        assert_eq!(row_rule(&other, ra(), None), none);
        assert_eq!(
            row_rule(&rsp(8), Some(RegisterRule::Offset(-16)), None),
            none
        );
        assert_eq!(row_rule(&rsp(8), None, None), none);
        assert_eq!(row_rule(&rsp(MAX_RA_OFFSET + 16), ra(), None), none);
        assert_eq!(
            row_rule(&rsp(8), ra(), Some(RegisterRule::Offset(1 << 20))),
            none
        );
        assert_eq!(
            row_rule(&rsp(8), ra(), Some(RegisterRule::Register(X86_64::RBX))),
            none
        );
    }

    #[test]
    fn rows_are_sorted_one_per_start_and_merged() {
        let rows = normalize(vec![
            row_at(0x200, 8),
            row_at(0x100, 8),
            row_at(0x104, 8),
            row_at(0x110, NO_RA_OFFSET), // end of the first function
            row_at(0x110, 8),            // start of the next one
            row_at(0x118, 0x38),
            row_at(0x130, NO_RA_OFFSET),
            row_at(0x300, NO_RA_OFFSET),
        ]);
        let starts: Vec<(u64, u32)> = rows.iter().map(|r| (r.start, r.ra_offset)).collect();
        assert_eq!(
            starts,
            vec![
                (0x100, 8),
                (0x118, 0x38),
                (0x130, NO_RA_OFFSET),
                (0x200, 8),
                (0x300, NO_RA_OFFSET)
            ]
        );
        assert_eq!(ra_offset(&rows, 0xff), None);
        assert_eq!(ra_offset(&rows, 0x100), Some(8));
        assert_eq!(ra_offset(&rows, 0x117), Some(8));
        assert_eq!(ra_offset(&rows, 0x118), Some(0x38));
        assert_eq!(ra_offset(&rows, 0x150), None);
        assert_eq!(ra_offset(&rows, 0x2ff), Some(8));
        assert_eq!(ra_offset(&rows, u64::MAX), None);
    }
}
