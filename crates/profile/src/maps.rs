//! `/proc/<pid>/maps`: which file an address belongs to, so a frame without
//! a symbol (a stripped binary) is still named `file+0xoffset`.

/// One executable mapping of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub path: String,
}

/// The executable file mappings of a maps text, sorted by start.
pub(crate) fn parse(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = text.lines().filter_map(parse_line).collect();
    out.sort_by_key(|m| m.start);
    out
}

fn parse_line(line: &str) -> Option<Mapping> {
    // start-end perms offset dev inode path
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.collect::<Vec<_>>().join(" ");
    if !perms.contains('x') || path.is_empty() {
        return None;
    }
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path,
    })
}

/// The mapping holding `addr` and the file offset of `addr` in it.
pub(crate) fn locate(maps: &[Mapping], addr: u64) -> Option<(&Mapping, u64)> {
    let i = maps.partition_point(|m| m.start <= addr);
    let m = maps.get(i.checked_sub(1)?)?;
    (addr < m.end).then(|| (m, addr - m.start + m.offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0a0000000-55d0a0001000 r--p 00000000 08:01 123 /usr/bin/app
55d0a0001000-55d0a0005000 r-xp 00001000 08:01 123 /usr/bin/app
7f0000000000-7f0000100000 r-xp 00028000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000201000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
7ffe00000000-7ffe00001000 r-xp 00000000 08:01 789 /tmp/a dir/with space
";

    #[test]
    fn executable_file_mappings_only() {
        let maps = parse(MAPS);
        assert_eq!(maps.len(), 4);
        let (m, off) = locate(&maps, 0x55d0a0001234).expect("in app");
        assert_eq!((m.path.as_str(), off), ("/usr/bin/app", 0x1234));
        let (m, off) = locate(&maps, 0x7f0000000010).expect("in libc");
        assert!(m.path.ends_with("libc.so.6"));
        assert_eq!(off, 0x28010);
        assert!(locate(&maps, 0x7f0000200010).is_none());
        assert!(locate(&maps, 0x10).is_none());
        assert_eq!(maps[3].path, "/tmp/a dir/with space");
    }

    #[test]
    fn garbage_lines_are_skipped() {
        assert!(parse("not a maps line\n\nzz-yy r-xp 0 0 0 /x\n").is_empty());
    }
}
