//! Parsers for the `/proc` files the Linux backend reads. Pure functions
//! over bytes: no allocation, no panics on malformed input (they return `None`).

/// Parses an unsigned decimal at the start of `s` (after optional spaces/tabs).
fn leading_u64(s: &[u8]) -> Option<u64> {
    let s = trim_start(s);
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut v: u64 = 0;
    for b in &s[..digits] {
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| **b == b' ' || **b == b'\t').count();
    &s[n..]
}

/// `schedstat`: "run_ns wait_ns switches\n".
///
/// One pass, each byte looked at once: the split-filter-parse form took
/// ~700 instructions per call (callgrind; each digit was visited three
/// times), a large share of the user time of a sample of threads that ran.
/// Fields are separated by spaces or newlines; tabs before a number are
/// skipped; anything after a number's digits up to the next separator is
/// ignored; a field that does not start with a digit, or overflows, is `None`.
pub(crate) fn schedstat(buf: &[u8]) -> Option<(u64, u64, u64)> {
    let mut fields = [0u64; 3];
    let mut done = 0;
    // In a field: its digits so far, or the ignored tail after them.
    let (mut in_number, mut in_tail) = (false, false);
    for &b in buf {
        match b {
            b' ' | b'\n' => {
                if in_number {
                    done += 1;
                    if done == fields.len() {
                        break;
                    }
                }
                (in_number, in_tail) = (false, false);
            }
            b'0'..=b'9' if !in_tail => {
                let f = fields.get_mut(done)?;
                *f = f.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
                in_number = true;
            }
            b'\t' if !in_number => {}
            _ if in_number => in_tail = true,
            _ => return None,
        }
    }
    if in_number && done < fields.len() {
        done += 1;
    }
    (done == fields.len()).then_some((fields[0], fields[1], fields[2]))
}

/// `statm`: the second field, resident pages.
pub(crate) fn statm_resident_pages(buf: &[u8]) -> Option<u64> {
    let mut it = buf.split(|b| *b == b' ').filter(|f| !f.is_empty());
    it.next()?;
    leading_u64(it.next()?)
}

/// The value of `key:` in a `status`-style file (first field only), e.g.
/// `VmHWM:\t 1234 kB` gives 1234.
pub(crate) fn status_field(buf: &[u8], key: &[u8]) -> Option<u64> {
    status_line(buf, key).and_then(leading_u64)
}

/// The rest of the line after `key:` in a `status`-style file.
pub(crate) fn status_line<'a>(buf: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    buf.split(|b| *b == b'\n').find_map(|line| {
        let rest = line.strip_prefix(key)?;
        let rest = rest.strip_prefix(b":")?;
        Some(trim_start(rest))
    })
}

/// Switch counts of a thread's `status`: (voluntary, involuntary).
///
/// The kernel prints them as the last two lines, so the lines are scanned
/// from the end: two lines instead of ~55 searched twice (any order still
/// parses, at the cost of a full scan).
pub(crate) fn status_switches(buf: &[u8]) -> Option<(u64, u64)> {
    let (mut vol, mut invol) = (None, None);
    for line in buf.rsplit(|b| *b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"voluntary_ctxt_switches:") {
            vol = vol.or_else(|| leading_u64(rest));
        } else if let Some(rest) = line.strip_prefix(b"nonvoluntary_ctxt_switches:") {
            invol = invol.or_else(|| leading_u64(rest));
        }
        if let (Some(v), Some(i)) = (vol, invol) {
            return Some((v, i));
        }
    }
    None
}

/// The thread name of a `status` file (`Name:` line), raw bytes. The
/// kernel writes `Name:\t` and the name, which may itself start with
/// spaces: only that one tab is stripped.
pub(crate) fn status_name(buf: &[u8]) -> Option<&[u8]> {
    buf.split(|b| *b == b'\n').find_map(|line| {
        let rest = line.strip_prefix(b"Name:")?;
        Some(rest.strip_prefix(b"\t").unwrap_or(rest))
    })
}

/// Field `n` (1-based, as in proc(5); `n` >= 3) of a `stat` file. The
/// command name (field 2) may contain spaces and parentheses, so fields are
/// counted after the last ')'.
pub(crate) fn stat_field(buf: &[u8], n: usize) -> Option<u64> {
    stat_fields_from(buf, n)?.next().and_then(leading_u64)
}

/// The fields of a `stat` file from field `n` on (`n` >= 3).
fn stat_fields_from(buf: &[u8], n: usize) -> Option<impl Iterator<Item = &[u8]>> {
    let close = buf.iter().rposition(|b| *b == b')')?;
    // After ')' come fields 3, 4, ...
    let mut it = buf[close + 1..]
        .split(|b| *b == b' ')
        .filter(|f| !f.is_empty());
    if n > 3 {
        it.nth(n.checked_sub(4)?)?;
    }
    Some(it)
}

/// `stat`: (utime + stime) in clock ticks (fields 14 and 15).
pub(crate) fn stat_cpu_ticks(buf: &[u8]) -> Option<u64> {
    let mut it = stat_fields_from(buf, 14)?;
    let utime = leading_u64(it.next()?)?;
    let stime = leading_u64(it.next()?)?;
    utime.checked_add(stime)
}

/// Parses a decimal TID from a directory entry name; `None` for "." and "..".
pub(crate) fn tid_name(name: &[u8]) -> Option<u32> {
    if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    u32::try_from(leading_u64(name)?).ok()
}

/// Appends the TIDs named by a buffer of `linux_dirent64` records, as
/// getdents64 fills it, to `out`; stops at the first malformed record.
pub(crate) fn dirent_tids(filled: &[u8], out: &mut Vec<u32>) {
    // linux_dirent64: u64 d_ino, i64 d_off, u16 d_reclen, u8 d_type, name...
    const NAME_AT: usize = 19;
    let mut off = 0usize;
    while off + NAME_AT <= filled.len() {
        let reclen = u16::from_ne_bytes([filled[off + 16], filled[off + 17]]) as usize;
        // A record shorter than its header would slice backwards.
        if reclen < NAME_AT || off + reclen > filled.len() {
            break;
        }
        let name = &filled[off + NAME_AT..off + reclen];
        let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
        if let Some(tid) = tid_name(name) {
            out.push(tid);
        }
        off += reclen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_fields() {
        assert_eq!(schedstat(b"123456 789 42\n"), Some((123456, 789, 42)));
        assert_eq!(schedstat(b"1 2\n"), None);
        assert_eq!(schedstat(b""), None);
        assert_eq!(schedstat(b"x y z"), None);
        assert_eq!(schedstat(b"99999999999999999999999 1 1"), None);
    }

    #[test]
    fn status_fields() {
        let s = b"Name:\tworker 1\nUmask:\t0022\nState:\tS (sleeping)\nVmHWM:\t   10240 kB\n\
voluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(status_switches(s), Some((17, 3)));
        assert_eq!(status_name(s), Some(&b"worker 1"[..]));
        // Found by the property tests: leading spaces belong to the name.
        assert_eq!(status_name(b"Name:\t  x\n"), Some(&b"  x"[..]));
        assert_eq!(status_field(s, b"VmHWM"), Some(10240));
        assert_eq!(status_field(s, b"VmRSS"), None);
        // A truncated file misses the fields instead of misreading them.
        assert_eq!(status_switches(&s[..70]), None);
    }

    #[test]
    fn stat_with_hostile_comm() {
        let s = b"4242 (a) b) c) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 1 0 99 0 0\n";
        assert_eq!(stat_cpu_ticks(s), Some(325));
        assert_eq!(stat_cpu_ticks(b"4242 (x) S 1"), None);
    }

    #[test]
    fn a_dirent_shorter_than_its_header_stops_the_listing() {
        // Found by the property tests: d_reclen 1..=18 used to panic.
        let mut rec = [0u8; 24];
        rec[16..18].copy_from_slice(&5u16.to_ne_bytes());
        let mut out = Vec::new();
        dirent_tids(&rec, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn statm_and_tids() {
        assert_eq!(statm_resident_pages(b"1000 250 30 1 0 400 0\n"), Some(250));
        assert_eq!(tid_name(b"1234"), Some(1234));
        assert_eq!(tid_name(b"."), None);
        assert_eq!(tid_name(b"99999999999"), None);
    }
}
