//! Parsers of the `/proc` and `/sys` files wakemeter reads. Pure functions
//! over bytes: no allocation, no panics on malformed input (they return
//! `None`). The sampling path calls them on every sample, so each reads its
//! bytes once and never allocates; `tests/parse_properties.rs` and the fuzz
//! harness (`crates/fuzz/tests/procfs.rs`) hold them to that.

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

/// `schedstat`: "run_ns wait_ns switches\n" as (run ns, run-queue wait ns,
/// times scheduled in).
///
/// One pass, each byte looked at once: the split-filter-parse form took
/// ~700 instructions per call (callgrind; each digit was visited three
/// times), a large share of the user time of a sample of threads that ran.
/// Fields are separated by spaces or newlines; tabs before a number are
/// skipped; anything after a number's digits up to the next separator is
/// ignored; a field that does not start with a digit, or overflows, is `None`.
#[inline]
pub fn schedstat(buf: &[u8]) -> Option<(u64, u64, u64)> {
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

/// `statm`: the second field, resident pages (pages of the system's page size).
pub fn statm_resident_pages(buf: &[u8]) -> Option<u64> {
    let mut it = buf.split(|b| *b == b' ').filter(|f| !f.is_empty());
    it.next()?;
    leading_u64(it.next()?)
}

/// The value of `key:` in a `status`-style file (first field only), e.g.
/// `VmHWM:\t 1234 kB` gives 1234.
pub fn status_field(buf: &[u8], key: &[u8]) -> Option<u64> {
    status_line(buf, key).and_then(leading_u64)
}

/// The rest of the line after `key:` in a `status`-style file.
pub fn status_line<'a>(buf: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
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
#[inline]
pub fn status_switches(buf: &[u8]) -> Option<(u64, u64)> {
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
pub fn status_name(buf: &[u8]) -> Option<&[u8]> {
    buf.split(|b| *b == b'\n').find_map(|line| {
        let rest = line.strip_prefix(b"Name:")?;
        Some(rest.strip_prefix(b"\t").unwrap_or(rest))
    })
}

/// Field `n` (1-based, as in proc(5); `n` >= 3) of a `stat` file. The
/// command name (field 2) may contain spaces and parentheses, so fields are
/// counted after the last ')'.
pub fn stat_field(buf: &[u8], n: usize) -> Option<u64> {
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
#[inline]
pub fn stat_cpu_ticks(buf: &[u8]) -> Option<u64> {
    let mut it = stat_fields_from(buf, 14)?;
    let utime = leading_u64(it.next()?)?;
    let stime = leading_u64(it.next()?)?;
    utime.checked_add(stime)
}

/// The state letter of a `stat` file (field 3: `R`, `S`, `D`, `Z`, ...).
pub fn stat_state(buf: &[u8]) -> Option<u8> {
    let close = buf.iter().rposition(|b| *b == b')')?;
    trim_start(&buf[close + 1..]).first().copied()
}

/// Whether a `stat` state letter says nothing is left to run: `Z`
/// (zombie), `X` or `x` (dead).
pub fn state_finished(state: u8) -> bool {
    matches!(state, b'Z' | b'X' | b'x')
}

/// `starttime` (field 22) of a `stat` file, in clock ticks after boot.
pub fn stat_start_ticks(buf: &[u8]) -> Option<u64> {
    stat_field(buf, 22)
}

/// `ppid` (field 4) of a `stat` file.
pub fn stat_parent(buf: &[u8]) -> Option<u32> {
    stat_field(buf, 4).and_then(|p| u32::try_from(p).ok())
}

/// The value of `key:` in a `status`-style file read as hexadecimal
/// (`CapEff:\t000001ffffffffff`).
pub fn status_hex(buf: &[u8], key: &[u8]) -> Option<u64> {
    let line = status_line(buf, key)?;
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let text = std::str::from_utf8(line.get(..digits)?).ok()?;
    u64::from_str_radix(text, 16).ok()
}

/// `btime` of `/proc/stat`: the boot time, Unix seconds.
pub fn boot_time_secs(proc_stat: &[u8]) -> Option<u64> {
    proc_stat
        .split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(b"btime "))
        .and_then(leading_u64)
}

/// A `comm` file's name: its bytes without the trailing newline.
pub fn comm(buf: &[u8]) -> &[u8] {
    buf.strip_suffix(b"\n").unwrap_or(buf)
}

/// A `cmdline` file as one line: its NUL-separated words joined by single
/// spaces (empty words dropped), lossily decoded.
pub fn cmdline(buf: &[u8]) -> String {
    let mut out = String::with_capacity(buf.len());
    for word in buf.split(|b| *b == 0).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&String::from_utf8_lossy(word));
    }
    out
}

/// What a thread's `syscall` file says it is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSyscall {
    /// `running`: on a CPU.
    Running,
    /// Blocked outside any system call (`-1 ...`).
    NotInSyscall,
    /// Blocked in the system call of this number.
    InSyscall(i64),
}

/// A thread's `syscall` file: `running`, `-1 sp pc`, or the number and
/// arguments of the call it is blocked in.
pub fn task_syscall(buf: &[u8]) -> Option<TaskSyscall> {
    let first = buf
        .split(|b| b.is_ascii_whitespace())
        .find(|w| !w.is_empty())?;
    if first == b"running" {
        return Some(TaskSyscall::Running);
    }
    let text = std::str::from_utf8(first).ok()?;
    let nr: i64 = text.parse().ok()?;
    Some(if nr < 0 {
        TaskSyscall::NotInSyscall
    } else {
        TaskSyscall::InSyscall(nr)
    })
}

/// The inode of a PID namespace link's text, `pid:[4026531836]`.
pub fn pid_namespace_inode(link: &str) -> Option<u64> {
    link.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// The mount point of the first `cgroup2` filesystem in a `mounts` text.
/// Mount points with spaces are octal-escaped; a cgroup2 root has none in
/// practice, and such a line is skipped.
pub fn cgroup2_mount_point(mounts: &str) -> Option<&str> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_ascii_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2" && !dir.contains('\\')).then_some(dir)
    })
}

/// The process ids of a `cgroup.procs` text, one a line.
pub fn cgroup_procs(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.lines().filter_map(|l| l.trim().parse::<u32>().ok())
}

/// The load of `/proc/loadavg`: the 1-minute load average (runnable plus
/// uninterruptible tasks, averaged), and the tasks runnable at the moment
/// of the read (the `4` of `4/321`), including the reader itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadAvg {
    /// 1-minute load average, in tasks.
    pub load1: f64,
    /// Tasks runnable when the file was read.
    pub runnable: u32,
    /// Tasks (threads) on the machine when the file was read.
    pub tasks: u32,
}

/// Parses `/proc/loadavg` (`0.52 0.58 0.59 4/321 12345`).
pub fn loadavg(text: &str) -> Option<LoadAvg> {
    let mut f = text.split_ascii_whitespace();
    let load1 = f
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|l| l.is_finite() && *l >= 0.0)?;
    let (_, _) = (f.next()?, f.next()?);
    let (runnable, tasks) = f.next()?.split_once('/')?;
    Some(LoadAvg {
        load1,
        runnable: runnable.parse().ok()?,
        tasks: tasks.parse().ok()?,
    })
}

/// The cgroup v2 path of a `/proc/<pid>/cgroup` text: the `0::/path` line
/// (relative to the v2 mount point, starting with `/`).
pub fn cgroup_v2_path(text: &str) -> Option<&str> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .filter(|p| p.starts_with('/'))
}

/// The cgroup v1 path of `controller` (`cpu`) in a `/proc/<pid>/cgroup`
/// text: the `N:cpu,cpuacct:/path` line whose controllers include it.
pub fn cgroup_v1_path<'a>(text: &'a str, controller: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        (ctrls.split(',').any(|c| c == controller) && path.starts_with('/')).then_some(path)
    })
}

/// The mount point of the cgroup v1 hierarchy of `controller` in a
/// `mounts` text (a `cgroup` filesystem whose options name it).
pub fn cgroup1_mount_point<'a>(mounts: &'a str, controller: &str) -> Option<&'a str> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_ascii_whitespace();
        let (_, dir, fstype, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup" && !dir.contains('\\') && opts.split(',').any(|o| o == controller))
            .then_some(dir)
    })
}

/// A cgroup v2 `cpu.max` (`max 100000` or `50000 100000`): the quota in
/// microseconds per period (`None`: no quota) and the period in
/// microseconds.
pub fn cpu_max(text: &str) -> Option<(Option<u64>, u64)> {
    let mut f = text.split_ascii_whitespace();
    let quota = match f.next()? {
        "max" => None,
        q => Some(q.parse().ok()?),
    };
    let period = f.next()?.parse().ok().filter(|p| *p > 0)?;
    Some((quota, period))
}

/// The value of `key` in a flat-keyed cgroup file (`cpu.stat`:
/// `nr_throttled 12`, `throttled_usec 3456`).
pub fn flat_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// The number of CPUs in a CPU list (`Cpus_allowed_list:`, the `online`
/// file: `0-3,8,10-11` is 7); `None` when the text is not a CPU list.
pub fn cpu_list_len(text: &str) -> Option<u32> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut n: u32 = 0;
    for part in text.split(',') {
        let count = match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
                b.checked_sub(a)?.checked_add(1)?
            }
            None => {
                part.parse::<u32>().ok()?;
                1
            }
        };
        n = n.checked_add(count)?;
    }
    Some(n)
}

/// Whether CPU `cpu` is in a CPU list (`0-3,8`); false when the text is
/// not a CPU list.
pub fn cpu_list_contains(text: &str, cpu: u32) -> bool {
    text.trim().split(',').any(|part| match part.split_once('-') {
        Some((a, b)) => matches!((a.parse::<u32>(), b.parse::<u32>()), (Ok(a), Ok(b)) if (a..=b).contains(&cpu)),
        None => part.parse::<u32>() == Ok(cpu),
    })
}

/// The CPU a `stat` file's task last ran on (field 39, `processor`).
pub fn stat_last_cpu(buf: &[u8]) -> Option<u32> {
    stat_field(buf, 39).and_then(|c| u32::try_from(c).ok())
}

/// Parses a decimal TID from a directory entry name; `None` for "." and "..".
pub fn tid_name(name: &[u8]) -> Option<u32> {
    if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    u32::try_from(leading_u64(name)?).ok()
}

/// Appends the TIDs named by a buffer of `linux_dirent64` records, as
/// getdents64 fills it, to `out`; stops at the first malformed record.
#[inline]
pub fn dirent_tids(filled: &[u8], out: &mut Vec<u32>) {
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
    fn a_name_never_poses_as_a_field() {
        let status = b"Name:\tTgid: 1\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t77\nPid:\t78\n";
        assert_eq!(status_field(status, b"Tgid"), Some(77));
        assert_eq!(stat_state(b"42 (a) Z (b) R 1 2 3"), Some(b'R'));
        assert_eq!(stat_state(b"42 (sleep) S 1 2 3"), Some(b'S'));
    }

    #[test]
    fn stat_state_start_and_parent() {
        let s = b"42 (a) b (c)) S 7 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 12345 1000 200";
        assert_eq!(stat_state(s), Some(b'S'));
        assert_eq!(stat_parent(s), Some(7));
        assert_eq!(stat_start_ticks(s), Some(12345));
        assert_eq!(stat_start_ticks(b"42 (truncated"), None);
        assert_eq!(stat_state(b"42 (x)"), None);
        assert!(state_finished(b'Z') && !state_finished(b'S'));
    }

    #[test]
    fn small_files() {
        assert_eq!(
            status_hex(b"Name:\tx\nCapEff:\t000001ffffffffff\n", b"CapEff"),
            Some(0x1ff_ffff_ffff)
        );
        assert_eq!(status_hex(b"CapEff:\tzz\n", b"CapEff"), None);
        assert_eq!(
            boot_time_secs(b"cpu 1 2\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
        assert_eq!(comm(b"nginx\n"), b"nginx");
        assert_eq!(
            cmdline(b"nginx: worker\0\0-c\0a b\0"),
            "nginx: worker -c a b"
        );
        assert_eq!(task_syscall(b"running\n"), Some(TaskSyscall::Running));
        assert_eq!(
            task_syscall(b"-1 0x7ffc 0x7f00\n"),
            Some(TaskSyscall::NotInSyscall)
        );
        assert_eq!(
            task_syscall(b"232 0x4 0x7ffc 0x80 0x0 0x0 0x0 0x7ffc 0x7f00\n"),
            Some(TaskSyscall::InSyscall(232))
        );
        assert_eq!(task_syscall(b""), None);
        assert_eq!(pid_namespace_inode("pid:[4026531836]"), Some(4_026_531_836));
        assert_eq!(pid_namespace_inode("mnt:[1]"), None);
        let mounts = "proc /proc proc rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(cgroup2_mount_point(mounts), Some("/sys/fs/cgroup/unified"));
        assert_eq!(
            cgroup2_mount_point("a\\040b /x\\040y cgroup2 rw 0 0\n"),
            None
        );
        assert_eq!(cgroup_procs("1\n 22\nx\n").collect::<Vec<_>>(), vec![1, 22]);
    }

    #[test]
    fn statm_and_tids() {
        assert_eq!(statm_resident_pages(b"1000 250 30 1 0 400 0\n"), Some(250));
        assert_eq!(tid_name(b"1234"), Some(1234));
        assert_eq!(tid_name(b"."), None);
        assert_eq!(tid_name(b"99999999999"), None);
    }
}
