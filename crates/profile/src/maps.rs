//! The executable mappings of `/proc/<pid>/maps` (parsed by
//! `wakemeter_procfs::maps`): which file an address belongs to, so a frame without
//! a symbol (a stripped binary) is still named `file+0xoffset`, and which
//! addresses can be return addresses at all (a word outside every
//! executable mapping is data, not a frame).

/// One executable mapping: of a file, or anonymous (`path` empty: JIT
/// code, trampolines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub path: String,
}

/// The executable mappings of a maps text (of files and anonymous), sorted
/// by start.
pub(crate) fn parse(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = text.lines().filter_map(parse_line).collect();
    out.sort_by_key(|m| m.start);
    out
}

fn parse_line(line: &str) -> Option<Mapping> {
    let m = wakemeter_procfs::maps::line(line)?;
    m.executable.then(|| Mapping {
        start: m.start,
        end: m.end,
        offset: m.offset,
        path: m.path.to_string(),
    })
}

/// The file mapping holding `addr` and the file offset of `addr` in it
/// (`None` in an anonymous mapping).
pub(crate) fn locate(maps: &[Mapping], addr: u64) -> Option<(&Mapping, u64)> {
    let m = containing(maps, addr)?;
    (!m.path.is_empty()).then(|| (m, addr - m.start + m.offset))
}

/// The mapping holding `addr`, file-backed or anonymous.
pub(crate) fn containing(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    let i = maps.partition_point(|m| m.start <= addr);
    let m = maps.get(i.checked_sub(1)?)?;
    (addr < m.end).then_some(m)
}

/// `maps` with the mappings of `more` that it lacks (same start, end and
/// path), sorted by start: every executable mapping seen in either
/// snapshot, so that code unmapped between two reads of the maps (a
/// `dlclose`) still counts as code.
pub(crate) fn union(maps: &[Mapping], more: &[Mapping]) -> Vec<Mapping> {
    let mut out = maps.to_vec();
    for m in more {
        if !out.contains(m) {
            out.push(m.clone());
        }
    }
    out.sort_by_key(|m| m.start);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0a0000000-55d0a0001000 r--p 00000000 08:01 123 /usr/bin/app
55d0a0001000-55d0a0005000 r-xp 00001000 08:01 123 /usr/bin/app
7f0000000000-7f0000100000 r-xp 00028000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000201000 rw-p 00000000 00:00 0
7f0000300000-7f0000301000 rwxp 00000000 00:00 0
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
7ffe00000000-7ffe00001000 r-xp 00000000 08:01 789 /tmp/a dir/with space
";

    #[test]
    fn executable_mappings_only() {
        let maps = parse(MAPS);
        assert_eq!(maps.len(), 5);
        let (m, off) = locate(&maps, 0x55d0a0001234).expect("in app");
        assert_eq!((m.path.as_str(), off), ("/usr/bin/app", 0x1234));
        let (m, off) = locate(&maps, 0x7f0000000010).expect("in libc");
        assert!(m.path.ends_with("libc.so.6"));
        assert_eq!(off, 0x28010);
        assert!(locate(&maps, 0x7f0000200010).is_none());
        assert!(locate(&maps, 0x10).is_none());
        assert_eq!(maps[4].path, "/tmp/a dir/with space");
        // Anonymous code (a JIT): code, but of no file.
        assert!(locate(&maps, 0x7f0000300010).is_none());
        assert!(containing(&maps, 0x7f0000300010).is_some_and(|m| m.path.is_empty()));
        assert!(containing(&maps, 0x7f0000200010).is_none());
    }

    #[test]
    fn union_keeps_code_unmapped_between_snapshots() {
        let before = parse(MAPS);
        let after =
            parse("7f0000400000-7f0000401000 r-xp 00000000 08:01 9 /usr/lib/libplugin.so\n");
        let all = union(&before, &after);
        assert_eq!(all.len(), 6);
        assert!(containing(&all, 0x7f0000400010).is_some());
        assert!(containing(&all, 0x55d0a0001234).is_some());
        assert_eq!(union(&all, &before).len(), 6);
    }

    #[test]
    fn garbage_lines_are_skipped() {
        assert!(parse("not a maps line\n\nzz-yy r-xp 0 0 0 /x\n").is_empty());
    }
}
