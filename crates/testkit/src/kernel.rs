//! What the kernel says of a test's processes: a thread found by name,
//! the BPF programs a process holds.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use wakemeter_procfs::process;

/// The tid of the thread named `name` in process `pid`, waiting (up to two
/// minutes) for the process to start it.
pub fn thread_named(pid: u32, name: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        for tid in process::tids(pid).unwrap_or_default() {
            let comm = process::task_file(pid, tid, "comm").unwrap_or_default();
            if comm.trim_ascii_end() == name.as_bytes() {
                return tid;
            }
        }
        assert!(Instant::now() < deadline, "no thread {name} in {pid}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Ids of the BPF programs process `pid` (`None`: this process) holds a
/// descriptor of, a program or a link (`prog_id` in its fdinfo). Other
/// processes on a shared machine load programs of the same names at the
/// same time: the programs a test attached are the new ones its attaching
/// process holds.
pub fn held_bpf_program_ids(pid: Option<u32>) -> HashSet<u32> {
    process::fdinfos(pid)
        .iter()
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|id| id.trim().parse().ok())
        })
        .collect()
}
