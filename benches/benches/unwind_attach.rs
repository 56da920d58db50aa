//! What the unwind table costs at attach: the time `StackSession::attach`
//! takes (reading every executable module's `.eh_frame`, building and
//! loading the table, loading the programs) on a target with 50 shared
//! libraries loaded besides its own, against the same attach on a target
//! with only the C library (`sleep`), measured in the same run, with the
//! rows of each table and the kernel memory it holds (two halves with
//! room for modules loaded later, see `StackSession::leaf_table_bytes`).
//!
//! Needs root and kernel BTF; x86_64 (elsewhere the table is empty).
//!
//! Run: `cargo bench -p wakemeter-benches --bench unwind_attach`
//! (`WAKEMETER_BENCH_ROUNDS=N` attaches per target, default 7).

fn main() {
    #[cfg(target_os = "linux")]
    linux::main();
    #[cfg(not(target_os = "linux"))]
    println!("unwind_attach bench: Linux hosts only; skipped");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io::{BufRead, BufReader};
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    use wakemeter_ebpf::{StackKind, StackSession, Target};

    /// Libraries wanted in the big target.
    const LIBRARIES: usize = 50;

    struct Killed(Child);

    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Shared libraries of the system's library directory, by name.
    fn candidate_libraries() -> Vec<String> {
        let dir = Path::new("/usr/lib/x86_64-linux-gnu");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .map(|e| e.path().to_string_lossy().into_owned())
                    .filter(|p| p.contains(".so."))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Starts the many-libraries program; `None` when it cannot be built.
    fn many_libraries() -> Option<(Killed, usize)> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/many_libraries.c");
        let exe = std::env::temp_dir().join("wakemeter-bench-many-libraries");
        let built = Command::new("cc")
            .args(["-O1", "-o"])
            .arg(&exe)
            .arg(&src)
            .arg("-ldl")
            .status()
            .ok()?;
        if !built.success() {
            return None;
        }
        let mut child = Command::new(&exe)
            .arg(LIBRARIES.to_string())
            .args(candidate_libraries())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take()?)
            .read_line(&mut line)
            .ok()?;
        let loaded = line.trim().strip_prefix("ready ")?.parse().ok()?;
        Some((Killed(child), loaded))
    }

    fn executable_modules(pid: u32) -> usize {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        let mut paths: Vec<&str> = maps
            .lines()
            .filter(|l| l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
            .filter_map(|l| l.split_whitespace().nth(5))
            .filter(|p| p.starts_with('/'))
            .collect();
        paths.sort_unstable();
        paths.dedup();
        paths.len()
    }

    /// Median attach time (s) and the table's rows over `rounds` attaches.
    fn attach(pid: u32, rounds: usize) -> Option<(f64, u32, u64)> {
        let mut times = Vec::new();
        let (mut rows, mut bytes) = (0, 0);
        for _ in 0..rounds {
            let session = match StackSession::builder(Target::Pid(pid), StackKind::OnCpu).attach() {
                Ok(s) => s,
                Err(e) => {
                    println!("unwind_attach: attach failed: {e}");
                    return None;
                }
            };
            times.push(session.attach_duration().as_secs_f64());
            rows = session.leaf_rows();
            bytes = session.leaf_table_bytes();
        }
        times.sort_by(f64::total_cmp);
        Some((times[times.len() / 2], rows, bytes))
    }

    pub fn main() {
        let rounds = std::env::var("WAKEMETER_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(7usize)
            .max(1);
        let Ok(small) = Command::new("sleep").arg("600").spawn() else {
            println!("unwind_attach: cannot start sleep");
            return;
        };
        let small = Killed(small);
        let Some((big, loaded)) = many_libraries() else {
            println!("unwind_attach: cannot build or start c/many_libraries.c");
            return;
        };
        std::thread::sleep(Duration::from_millis(200));
        let (small_pid, big_pid) = (small.0.id(), big.0.id());
        let Some((base, base_rows, base_bytes)) = attach(small_pid, rounds) else {
            return;
        };
        let Some((many, many_rows, many_bytes)) = attach(big_pid, rounds) else {
            return;
        };
        println!(
            "unwind_attach: baseline `sleep` ({} executable modules): attach median {:.3} s, {} rows, {:.2} MiB of kernel memory",
            executable_modules(small_pid),
            base,
            base_rows,
            base_bytes as f64 / 1048576.0
        );
        println!(
            "unwind_attach: {loaded} libraries loaded ({} executable modules): attach median {:.3} s, {} rows, {:.2} MiB of kernel memory; ratio to baseline {:.2}",
            executable_modules(big_pid),
            many,
            many_rows,
            many_bytes as f64 / 1048576.0,
            many / base.max(1e-9)
        );
    }
}
