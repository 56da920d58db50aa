//! `/proc/<pid>/maps`: one line per mapping, `start-end perms offset dev
//! inode path`. Parsed here once for the profiler (which file an address
//! belongs to) and the eBPF unwinder (which modules to read `.eh_frame`
//! from); each keeps the mappings it needs.

/// One line of a `maps` text. Borrowed from the text: no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapsLine<'a> {
    /// First address of the mapping.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// Whether its pages are executable (`x` in the permissions).
    pub executable: bool,
    /// File offset of `start`, in bytes.
    pub offset: u64,
    /// The file's inode (0 for anonymous mappings).
    pub inode: u64,
    /// The file's path, `[vdso]`-style pseudo names, or empty for an
    /// anonymous mapping. Everything after the inode, so a path with
    /// spaces is kept whole (a deleted file keeps its ` (deleted)` suffix).
    pub path: &'a str,
}

/// One line of a `maps` text; `None` when it is not one.
pub fn line(line: &str) -> Option<MapsLine<'_>> {
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let mut rest = line;
    let mut field = || -> Option<&str> {
        let trimmed = rest.trim_start_matches(' ');
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (f, r) = trimmed.split_at(end);
        rest = r;
        (!f.is_empty()).then_some(f)
    };
    let range = field()?;
    let perms = field()?;
    let offset = field()?;
    let _dev = field()?;
    let inode = field()?;
    let (start, end) = range.split_once('-')?;
    Some(MapsLine {
        start: hex(start)?,
        end: hex(end)?,
        executable: perms.contains('x'),
        offset: hex(offset)?,
        inode: inode.parse().ok()?,
        path: rest.trim_start_matches(' '),
    })
}

/// Every line of a `maps` text that parses, in the text's order.
pub fn lines(text: &str) -> impl Iterator<Item = MapsLine<'_>> {
    text.lines().filter_map(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_paths_with_spaces() {
        let text = "\
55d0a0001000-55d0a0005000 r-xp 00001000 08:01 123                        /usr/bin/app
7f0000200000-7f0000201000 rw-p 00000000 00:00 0 
7ffe00000000-7ffe00001000 r-xp 00000000 08:01 789 /tmp/a dir/with space (deleted)
not a maps line
zz-yy r-xp 0 0 0 /x
";
        let all: Vec<_> = lines(text).collect();
        assert_eq!(all.len(), 3);
        assert_eq!(
            all[0],
            MapsLine {
                start: 0x55d0_a000_1000,
                end: 0x55d0_a000_5000,
                executable: true,
                offset: 0x1000,
                inode: 123,
                path: "/usr/bin/app",
            }
        );
        assert!(!all[1].executable && all[1].path.is_empty());
        assert_eq!(all[2].path, "/tmp/a dir/with space (deleted)");
    }
}
