//! Property tests of the `/proc` parsers (`wakemeter_procfs::parse`): arbitrary bytes never panic, and
//! files laid out as the kernel writes them give back the numbers in them.

use proptest::collection::vec;
use proptest::prelude::*;

use wakemeter_procfs::parse::*;

/// Cases per property: enough to find an off-by-one, fast enough for every `cargo test`.
const CASES: u32 = 512;

/// Bytes drawn mostly from what /proc files are made of, so the parsers get
/// past their first checks more often than with uniform bytes.
fn proc_like() -> impl Strategy<Value = Vec<u8>> {
    let alphabet = b"0123456789 \t\n:()kBNameVmHWThrdsvoluntary_ctxt_switches".to_vec();
    vec(
        prop_oneof![4 => prop::sample::select(alphabet), 1 => any::<u8>()],
        0..300,
    )
}

fn any_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![vec(any::<u8>(), 0..600), proc_like()]
}

/// A thread name as `status` shows it: the kernel escapes `\n` and `\t`
/// (and other control whitespace); spaces and any other byte stay raw.
fn status_name_bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(
        any::<u8>().prop_filter("escaped by the kernel", |b| {
            !matches!(b, b'\n' | b'\t' | b'\r' | 0x0b | 0x0c)
        }),
        0..16,
    )
}

/// One `linux_dirent64` record as getdents64 writes it (8-byte aligned).
fn dirent(ino: u64, name: &[u8]) -> Vec<u8> {
    let reclen = (19 + name.len() + 1).next_multiple_of(8);
    let mut r = Vec::with_capacity(reclen);
    r.extend_from_slice(&ino.to_ne_bytes());
    r.extend_from_slice(&0i64.to_ne_bytes());
    r.extend_from_slice(&u16::try_from(reclen).expect("short name").to_ne_bytes());
    r.push(4); // DT_DIR
    r.extend_from_slice(name);
    r.resize(reclen, 0);
    r
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn arbitrary_bytes_never_panic(buf in any_bytes(), key in vec(any::<u8>(), 0..12)) {
        let _ = schedstat(&buf);
        let _ = statm_resident_pages(&buf);
        let _ = status_field(&buf, &key);
        let _ = status_line(&buf, &key);
        let _ = status_switches(&buf);
        let _ = status_name(&buf);
        let _ = stat_cpu_ticks(&buf);
        let _ = tid_name(&buf);
        let _ = stat_state(&buf);
        let _ = stat_start_ticks(&buf);
        let _ = stat_parent(&buf);
        let _ = status_hex(&buf, &key);
        let _ = boot_time_secs(&buf);
        let _ = comm(&buf);
        let _ = cmdline(&buf);
        let _ = task_syscall(&buf);
        let text = String::from_utf8_lossy(&buf);
        let _ = pid_namespace_inode(&text);
        let _ = cgroup2_mount_point(&text);
        let _ = cgroup_procs(&text).count();
        let _ = loadavg(&text);
        let _ = cgroup_v2_path(&text);
        let _ = cpu_max(&text);
        let _ = flat_keyed(&text, &String::from_utf8_lossy(&key));
        let _ = cpu_list_len(&text);
        let _ = cpu_list_contains(&text, 3);
        let _ = stat_last_cpu(&buf);
        let _ = cgroup_v1_path(&text, "cpu");
        let _ = cgroup1_mount_point(&text, "cpu");
        prop_assert!(wakemeter_procfs::maps::lines(&text).count() <= text.lines().count());
        let mut out = Vec::new();
        dirent_tids(&buf, &mut out);
        prop_assert!(out.len() <= buf.len() / 19 + 1);
    }

    #[test]
    fn loadavg_round_trips(hundredths in 0u32..10_000_000, runnable: u32, tasks: u32, last: u32) {
        let load = f64::from(hundredths) / 100.0;
        let text = format!("{load:.2} 0.58 0.59 {runnable}/{tasks} {last}\n");
        let l = loadavg(&text).expect("the kernel's layout parses");
        prop_assert!((l.load1 - load).abs() < 1e-9);
        prop_assert_eq!((l.runnable, l.tasks), (runnable, tasks));
    }

    #[test]
    fn cgroup_files_round_trip(
        path in "(/[a-z0-9._-]{1,12}){0,4}",
        quota in proptest::option::of(1u64..u64::MAX),
        period in 1u64..=1_000_000,
        nr: u64,
        usec: u64,
    ) {
        let path = if path.is_empty() { "/".to_string() } else { path };
        let text = format!("12:cpuset:/v1\n0::{path}\n");
        prop_assert_eq!(cgroup_v2_path(&text), Some(path.as_str()));
        let v1 = format!("4:memory:/m\n2:cpu,cpuacct:{path}\n0::/\n");
        prop_assert_eq!(cgroup_v1_path(&v1, "cpu"), Some(path.as_str()));
        prop_assert_eq!(cgroup_v1_path(&v1, "cpuset"), None);
        let q = quota.map_or_else(|| "max".to_string(), |q| q.to_string());
        prop_assert_eq!(cpu_max(&format!("{q} {period}\n")), Some((quota, period)));
        let stat = format!("usage_usec 9\nnr_periods 3\nnr_throttled {nr}\nthrottled_usec {usec}\n");
        prop_assert_eq!(flat_keyed(&stat, "nr_throttled"), Some(nr));
        prop_assert_eq!(flat_keyed(&stat, "throttled_usec"), Some(usec));
        prop_assert_eq!(flat_keyed(&stat, "nr_bursts"), None);
    }

    #[test]
    fn cpu_lists_count_their_cpus(ranges in vec((0u32..4096, 0u32..64), 1..8)) {
        let text: Vec<String> = ranges
            .iter()
            .map(|(a, len)| if *len == 0 { a.to_string() } else { format!("{a}-{}", a + len) })
            .collect();
        let expected: u32 = ranges.iter().map(|(_, len)| len + 1).sum();
        let list = format!("{}\n", text.join(","));
        prop_assert_eq!(cpu_list_len(&list), Some(expected));
        for (a, len) in &ranges {
            prop_assert!(cpu_list_contains(&list, *a) && cpu_list_contains(&list, a + len));
        }
        let outside = ranges.iter().map(|(a, len)| a + len).max().unwrap_or(0) + 1;
        prop_assert!(!cpu_list_contains(&list, outside));
    }

    #[test]
    fn schedstat_round_trips(run: u64, wait: u64, slices: u64, newline: bool) {
        let text = format!("{run} {wait} {slices}{}", if newline { "\n" } else { "" });
        prop_assert_eq!(schedstat(text.as_bytes()), Some((run, wait, slices)));
        // Truncated anywhere before the last digit: never a wrong triple.
        let cut = text.len() - 1 - usize::from(newline);
        let parsed = schedstat(&text.as_bytes()[..cut]);
        prop_assert!(parsed.is_none() || parsed.is_some_and(|(r, w, s)| r == run && w == wait && s < slices.max(1)));
    }

    #[test]
    fn statm_round_trips(fields in vec(any::<u64>(), 7)) {
        let text: Vec<String> = fields.iter().map(u64::to_string).collect();
        let text = format!("{}\n", text.join(" "));
        prop_assert_eq!(statm_resident_pages(text.as_bytes()), Some(fields[1]));
    }

    #[test]
    fn status_round_trips(
        name in status_name_bytes(),
        threads: u32,
        hwm: u64,
        vol: u64,
        invol: u64,
        other in vec((prop::sample::select(vec!["Umask", "State", "Tgid", "VmRSS", "Cpus_allowed_list"]), any::<u64>()), 0..6),
        order in any::<prop::sample::Index>(),
    ) {
        let mut lines: Vec<Vec<u8>> = other
            .iter()
            .map(|(k, v)| format!("{k}:\t{v}").into_bytes())
            .collect();
        let known = [
            format!("Threads:\t{threads}").into_bytes(),
            format!("VmHWM:\t{hwm:>8} kB").into_bytes(),
            format!("voluntary_ctxt_switches:\t{vol}").into_bytes(),
            format!("nonvoluntary_ctxt_switches:\t{invol}").into_bytes(),
        ];
        for line in known {
            let at = order.index(lines.len() + 1);
            lines.insert(at, line);
        }
        // The kernel writes Name first.
        let mut first = b"Name:\t".to_vec();
        first.extend_from_slice(&name);
        lines.insert(0, first);
        let text = lines.join(&b'\n');
        prop_assert_eq!(status_name(&text), Some(&name[..]));
        prop_assert_eq!(status_field(&text, b"Threads"), Some(u64::from(threads)));
        prop_assert_eq!(status_field(&text, b"VmHWM"), Some(hwm));
        prop_assert_eq!(status_switches(&text), Some((vol, invol)));
    }

    #[test]
    fn stat_round_trips(
        comm in vec(any::<u8>(), 0..16),
        pid: u32,
        fields in vec(any::<u32>(), 10),
        utime in 0..u64::MAX / 2,
        stime in 0..u64::MAX / 2,
        rest in vec(any::<u64>(), 0..30),
    ) {
        // comm is raw in `stat`: any byte, ')' and spaces included.
        let mut text = format!("{pid} (").into_bytes();
        text.extend_from_slice(&comm);
        text.extend_from_slice(b") S");
        for f in fields {
            text.extend_from_slice(format!(" {f}").as_bytes());
        }
        text.extend_from_slice(format!(" {utime} {stime}").as_bytes());
        for f in &rest {
            text.extend_from_slice(format!(" {f}").as_bytes());
        }
        text.push(b'\n');
        prop_assert_eq!(stat_cpu_ticks(&text), Some(utime + stime));
        // Field 39 (`processor`) is the 24th after stime (field 15).
        let last_cpu = rest.get(23).and_then(|c| u32::try_from(*c).ok());
        prop_assert_eq!(stat_last_cpu(&text), last_cpu);
    }

    #[test]
    fn maps_lines_round_trip(
        start: u64,
        len in 1u64..1 << 40,
        exec: bool,
        offset: u64,
        inode: u64,
        path in prop_oneof![Just(String::new()), "/[a-z]{1,8}( [a-z]{1,8}){0,2}", Just("[vdso]".to_string())],
        pad in 1usize..30,
    ) {
        let end = start.saturating_add(len);
        let perms = if exec { "r-xp" } else { "rw-p" };
        let line = format!("{start:x}-{end:x} {perms} {offset:08x} 08:01 {inode}{}{path}", " ".repeat(pad));
        let m = wakemeter_procfs::maps::line(&line).expect("a kernel-shaped line parses");
        prop_assert_eq!((m.start, m.end, m.executable, m.offset, m.inode, m.path), (start, end, exec, offset, inode, path.as_str()));
    }

    #[test]
    fn stat_states_and_start_times_round_trip(
        comm in vec(any::<u8>(), 0..16),
        state in prop::sample::select(b"RSDZTXI".to_vec()),
        ppid: u32,
        start: u64,
    ) {
        let mut text = b"42 (".to_vec();
        text.extend_from_slice(&comm);
        text.extend_from_slice(format!(") {} {ppid}", char::from(state)).as_bytes());
        // Fields 5 to 21, then starttime (22) and a few more.
        for f in 5..22 {
            text.extend_from_slice(format!(" {f}").as_bytes());
        }
        text.extend_from_slice(format!(" {start} 1 2 3\n").as_bytes());
        prop_assert_eq!(stat_state(&text), Some(state));
        prop_assert_eq!(stat_parent(&text), Some(ppid));
        prop_assert_eq!(stat_start_ticks(&text), Some(start));
    }

    #[test]
    fn tid_names_round_trip(tid: u32, other in "[^0-9]{0,8}") {
        prop_assert_eq!(tid_name(tid.to_string().as_bytes()), Some(tid));
        if !other.is_empty() {
            prop_assert_eq!(tid_name(other.as_bytes()), None);
        }
    }

    #[test]
    fn dirents_round_trip(entries in vec(prop_oneof![
        any::<u32>().prop_map(|t| t.to_string()),
        Just(".".to_string()),
        Just("..".to_string()),
        "[a-z]{1,12}",
    ], 0..40), ino: u64) {
        let buf: Vec<u8> = entries.iter().flat_map(|n| dirent(ino, n.as_bytes())).collect();
        let mut out = vec![7];
        dirent_tids(&buf, &mut out);
        let expected: Vec<u32> = std::iter::once(7)
            .chain(entries.iter().filter_map(|n| n.parse().ok()))
            .collect();
        prop_assert_eq!(out, expected);
    }

    #[test]
    fn damaged_dirents_never_panic(
        entries in vec(any::<u32>(), 1..20),
        record in any::<prop::sample::Index>(),
        reclen in prop_oneof![0u16..40, any::<u16>()],
        at in any::<prop::sample::Index>(),
        byte: u8,
        cut in any::<prop::sample::Index>(),
    ) {
        let records: Vec<Vec<u8>> = entries
            .iter()
            .map(|t| dirent(1, t.to_string().as_bytes()))
            .collect();
        let start: usize = records[..record.index(records.len())].iter().map(Vec::len).sum();
        let mut buf: Vec<u8> = records.concat();
        buf[start + 16..start + 18].copy_from_slice(&reclen.to_ne_bytes());
        let i = at.index(buf.len());
        buf[i] = byte;
        let cut = cut.index(buf.len() + 1);
        let mut out = Vec::new();
        dirent_tids(&buf[..cut], &mut out);
        prop_assert!(out.len() <= entries.len());
    }
}

#[test]
fn cgroup_and_cpu_list_edge_cases() {
    assert_eq!(cpu_list_len("0"), Some(1));
    assert_eq!(cpu_list_len("0-1\n"), Some(2));
    assert_eq!(cpu_list_len(""), None);
    assert_eq!(cpu_list_len("3-1"), None, "a backwards range");
    assert_eq!(cpu_list_len("0-x"), None);
    assert_eq!(cpu_max("max 100000\n"), Some((None, 100_000)));
    assert_eq!(cpu_max("50000 0"), None, "a zero period");
    assert_eq!(cgroup_v2_path("0::\n"), None);
    assert_eq!(loadavg("0.5 0.5 0.5 1/x 9"), None);
    let mounts = "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n\
                  cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu,cpuacct 0 0\n";
    assert_eq!(
        cgroup1_mount_point(mounts, "cpu"),
        Some("/sys/fs/cgroup/cpu")
    );
    assert_eq!(cgroup1_mount_point(mounts, "memory"), None);
}

#[test]
fn schedstat_edge_cases() {
    assert_eq!(schedstat(b"1 2 3\n"), Some((1, 2, 3)));
    assert_eq!(
        schedstat(b"  1\t 2\n3"),
        Some((1, 2, 3)),
        "a tab after digits is tail"
    );
    assert_eq!(schedstat(b"1 \t2 3"), Some((1, 2, 3)));
    assert_eq!(
        schedstat(b"1x 2 3"),
        Some((1, 2, 3)),
        "the tail of a field is ignored"
    );
    assert_eq!(schedstat(b"1 2"), None);
    assert_eq!(schedstat(b"1 x2 3"), None);
    assert_eq!(schedstat(b"18446744073709551616 1 1"), None, "overflow");
    assert_eq!(schedstat(b"1 2 3 4\n"), Some((1, 2, 3)));
    assert_eq!(schedstat(b""), None);
}
