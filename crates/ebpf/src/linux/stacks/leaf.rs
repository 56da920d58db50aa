//! The leaf table: one step of `.eh_frame` unwinding for the innermost
//! (leaf) frame of a user stack, done in the kernel by `leaf_caller()` of
//! `stacks.bpf.c`.
//!
//! The kernel's user-stack walk follows frame pointers. A leaf frame in a
//! function built without them (Debian's C library: `epoll_wait`, `write`,
//! the futex wrappers) has not pushed `%rbp`, so the walk goes from the
//! leaf's address straight to its caller's *return* address: the direct
//! caller, the call site a user wants named, is skipped. Its return
//! address lies on the stack at `sp + n`, with `n` given by the function's
//! call frame information (CFI) for the exact instruction.
//!
//! Why a table in the kernel rather than copies of the stack unwound in
//! user space (with framehop or gimli's `UnwindTable` per sample): the
//! counts are aggregated in the kernel, one entry per distinct stack, with
//! no per-event work in user space. Two samples with the same
//! frame-pointer stack can have different direct callers (callbacks called
//! through one pointer that each call `write`), so the caller must be part
//! of the key, found when the event happens. The table gives, for every
//! address range of the target's code without a frame pointer, where the
//! return address is; the program looks the leaf's address up (a binary
//! search) and reads that one word.
//!
//! Built once per attach from the modules mapped executable in the target
//! then (a module loaded later gets no rows: its leaf frames keep the walk
//! as it is). Modules whose functions mostly set up `%rbp` as the frame
//! pointer get no rows: the walk is right there. x86_64 only: on aarch64 a
//! leaf's return address is in the link register, not on the stack, and
//! the table stays empty.

use std::fs::{self, File};

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use object::read::elf::ElfFile64;
use object::{Object, ObjectSection, ObjectSegment, ReadCache, SegmentFlags};

use super::abi::{LeafRow, NO_RA_OFFSET};

/// Most rows uploaded (16 bytes of kernel memory each: at most 2 MiB). The
/// C library takes about 7,000 after merging.
pub(crate) const MAX_LEAF_ROWS: usize = 131_072;

/// Largest distance from `sp` to a return address that the table keeps, in
/// bytes: beyond it the frame is left to the walk.
const MAX_RA_OFFSET: i64 = 4096;

/// `PF_X`: an executable segment.
const PF_X: u32 = 1;

/// What building a table found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LeafTableStats {
    /// Executable file mappings looked at.
    pub modules: u32,
    /// Modules with rows in the table.
    pub modules_with_rows: u32,
    /// Modules left out because their functions keep frame pointers.
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
    path: String,
}

/// The executable file mappings of a `/proc/<pid>/maps` text, first one per
/// path.
fn exec_mappings(maps: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(offset)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // dev and inode, then the path (which may hold spaces).
        let path = fields.skip(2).collect::<Vec<_>>().join(" ");
        if !perms.contains('x') || !path.starts_with('/') || out.iter().any(|m| m.path == path) {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let hex = |s: &str| u64::from_str_radix(s, 16).ok();
        if let (Some(start), Some(end), Some(offset)) = (hex(start), hex(end), hex(offset)) {
            out.push(Mapping {
                start,
                end,
                offset,
                path,
            });
        }
    }
    out
}

/// The table of process `pid`'s executable modules (empty when its
/// mappings cannot be read, and on other architectures than x86_64).
pub(crate) fn build(pid: u32) -> LeafTable {
    let mut table = LeafTable::default();
    if !cfg!(target_arch = "x86_64") {
        return table;
    }
    let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return table;
    };
    let mut rows = Vec::new();
    let mut mappings = exec_mappings(&maps);
    // The C library first: its syscall wrappers are the leaf frames of
    // almost every off-CPU stack and of a poller's on-CPU ones, and a
    // process linked against large libraries (OpenSSL, libstdc++) has more
    // rows than the table holds. Then the others, in address order.
    mappings.sort_by_key(|m| !is_c_library(&m.path));
    for mapping in mappings {
        table.stats.modules += 1;
        // map_files opens what is mapped even from another mount namespace
        // or when the file was replaced; the path is the fallback.
        let file = File::open(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            mapping.start, mapping.end
        ))
        .or_else(|_| File::open(format!("/proc/{pid}/root{}", mapping.path)));
        let module = file
            .ok()
            .and_then(|f| module_rows(&ReadCache::new(f), &mapping));
        match module {
            Some(ModuleRows::FramePointers) => table.stats.frame_pointer_modules += 1,
            Some(ModuleRows::Rows(new)) if rows.len() + new.len() <= MAX_LEAF_ROWS => {
                table.stats.modules_with_rows += 1;
                rows.extend(new);
            }
            Some(ModuleRows::Rows(_)) | None => table.stats.skipped_modules += 1,
        }
    }
    table.rows = normalize(rows);
    table
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

/// The rows of one module, or why it has none.
enum ModuleRows {
    /// Most of its functions set up a frame pointer.
    FramePointers,
    /// Its rows, merged, at the addresses of the mapping.
    Rows(Vec<LeafRow>),
}

/// The rows of the ELF file `data` mapped by `mapping`; `None` when it has
/// no usable `.eh_frame`.
fn module_rows<'a, R: object::ReadRef<'a>>(data: R, mapping: &Mapping) -> Option<ModuleRows> {
    let elf = ElfFile64::<object::Endianness, R>::parse(data).ok()?;
    // The load bias: the executable segment holding the mapping's file
    // offset is mapped at mapping.start + (its offset - mapping.offset).
    let bias = elf.segments().find_map(|segment| {
        let SegmentFlags::Elf { p_flags } = segment.flags() else {
            return None;
        };
        let (offset, size) = segment.file_range();
        (p_flags & PF_X != 0 && (offset..offset.saturating_add(size)).contains(&mapping.offset))
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
    cfi_rows(bytes, &bases, bias).ok()
}

/// The rows of an `.eh_frame` section, at addresses + `bias`.
fn cfi_rows(eh_frame: &[u8], bases: &BaseAddresses, bias: u64) -> gimli::Result<ModuleRows> {
    let section = EhFrame::new(eh_frame, LittleEndian);
    let mut context = Box::new(UnwindContext::new());
    let mut entries = section.entries(bases);
    let mut rows = Vec::new();
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
            let ra_offset = match (row.cfa(), row.register(return_address)) {
                (
                    CfaRule::RegisterAndOffset { register, offset },
                    Some(RegisterRule::Offset(at)),
                ) if *register == X86_64::RSP => offset
                    .checked_add(at)
                    .filter(|n| (0..=MAX_RA_OFFSET).contains(n))
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(NO_RA_OFFSET),
                (CfaRule::RegisterAndOffset { register, .. }, _) => {
                    sets_frame_pointer |= *register == X86_64::RBP;
                    NO_RA_OFFSET
                }
                _ => NO_RA_OFFSET,
            };
            rows.push(row_at(row.start_address().wrapping_add(bias), ra_offset));
        }
        rows.push(row_at(fde.end_address().wrapping_add(bias), NO_RA_OFFSET));
        with_frame_pointer += u32::from(sets_frame_pointer);
    }
    if functions > 0 && with_frame_pointer >= functions / 2 {
        return Ok(ModuleRows::FramePointers);
    }
    Ok(ModuleRows::Rows(normalize(rows)))
}

fn row_at(start: u64, ra_offset: u32) -> LeafRow {
    LeafRow {
        start,
        ra_offset,
        pad: 0,
    }
}

/// Sorts rows by start, keeps one row per start (a function's first row
/// over the end marker of the function before it) and merges runs with the
/// same offset: what the program's binary search needs.
fn normalize(mut rows: Vec<LeafRow>) -> Vec<LeafRow> {
    rows.sort_by_key(|r| (r.start, r.ra_offset != NO_RA_OFFSET));
    let mut out: Vec<LeafRow> = Vec::with_capacity(rows.len());
    for row in rows {
        match out.last_mut() {
            Some(last) if last.start == row.start => *last = row,
            _ => out.push(row),
        }
    }
    out.dedup_by(|next, kept| next.ra_offset == kept.ra_offset);
    out
}

/// Where the return address of a leaf frame at `ip` lies, as `sp + n`: the
/// lookup `leaf_caller()` makes in the kernel.
#[cfg(test)]
pub(crate) fn ra_offset(rows: &[LeafRow], ip: u64) -> Option<u32> {
    let at = rows.partition_point(|r| r.start <= ip).checked_sub(1)?;
    let n = rows[at].ra_offset;
    (n != NO_RA_OFFSET).then_some(n)
}

/// Puts `caller`, the leaf's direct caller found by `leaf_caller()`, into a
/// frame-pointer stack (innermost first) right after the leaf, unless the
/// walk already has it there or there is no leaf. Returns whether it did.
pub(crate) fn splice_leaf_caller(frames: &mut Vec<u64>, caller: u64) -> bool {
    if caller == 0 || frames.is_empty() || frames.get(1) == Some(&caller) {
        return false;
    }
    frames.insert(1, caller);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn maps_lines_give_executable_file_mappings_once_per_path() {
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
                    path: "/usr/bin/busy poll".into()
                },
                Mapping {
                    start: 0x7f00_0000_0000,
                    end: 0x7f00_0002_0000,
                    offset: 0x26000,
                    path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into()
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
        let maps = fs::read_to_string("/proc/self/maps").expect("maps");
        let libc = exec_mappings(&maps)
            .into_iter()
            .find(|m| m.path.contains("/libc.so"))
            .expect("this test links the C library");
        let file = File::open(&libc.path).expect("open the C library");
        let cache = ReadCache::new(file);
        let elf = ElfFile64::<object::Endianness, _>::parse(&cache).expect("ELF");
        // Bias 0: the file's own addresses, as readelf prints them.
        let Some(ModuleRows::Rows(rows)) = eh_frame_rows(&elf, 0) else {
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
        let mut expect = |loc: u64, cfa: &str, ra: &str| {
            let want = cfa
                .strip_prefix("rsp+")
                .and_then(|n| n.parse::<i64>().ok())
                .filter(|_| ra == "c-8")
                .map(|n| n - 8)
                .filter(|n| (0..=MAX_RA_OFFSET).contains(n))
                .map(|n| u32::try_from(n).expect("small"));
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

    /// A fake leaf frame: a stack window as the kernel would read it, the
    /// return address where the table says, spliced after the leaf.
    #[test]
    fn the_caller_read_at_the_table_offset_is_spliced_after_the_leaf() {
        let rows = normalize(vec![row_at(0x1000, 0x28), row_at(0x1080, NO_RA_OFFSET)]);
        let sp = 0x7ffd_0000_1000u64;
        let mut window = [0u64; 16];
        window[0x28 / 8] = 0x40_1234; // return address into the direct caller
        window[0x30 / 8] = 0x7ffd_0000_2000; // saved data, not an address
        let read = |addr: u64| -> Option<u64> {
            let index = usize::try_from(addr.checked_sub(sp)? / 8).ok()?;
            window.get(index).copied()
        };
        let leaf_ip = 0x1042;
        let caller = ra_offset(&rows, leaf_ip)
            .and_then(|n| read(sp + u64::from(n)))
            .unwrap_or(0);
        assert_eq!(caller, 0x40_1234);
        // The walk went from the leaf to the caller's caller.
        let mut frames = vec![leaf_ip, 0x40_0500, 0x40_0100];
        assert!(splice_leaf_caller(&mut frames, caller));
        assert_eq!(frames, vec![leaf_ip, 0x40_1234, 0x40_0500, 0x40_0100]);
        // Already there, nothing recovered, or no stack: unchanged.
        assert!(!splice_leaf_caller(&mut frames, 0x40_1234));
        assert!(!splice_leaf_caller(&mut frames, 0));
        let mut empty = Vec::new();
        assert!(!splice_leaf_caller(&mut empty, 0x40_1234));
        // A window that does not reach the offset recovers nothing.
        let short = |addr: u64| (addr < sp + 0x20).then_some(0u64);
        assert_eq!(
            ra_offset(&rows, leaf_ip).and_then(|n| short(sp + u64::from(n))),
            None
        );
        // A leaf the table leaves to the walk (a frame pointer) neither.
        assert_eq!(ra_offset(&rows, 0x1090), None);
    }
}
