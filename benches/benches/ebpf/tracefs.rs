//! tracefs for bpftrace and for our per-syscall hook: mounted for the
//! bench when missing, unmounted after.

use std::process::Command;

const TRACEFS: &str = "/sys/kernel/tracing";

/// Mounts tracefs if it is missing; unmounts on drop.
pub struct TracefsMount {
    mounted_here: bool,
}

impl TracefsMount {
    pub fn ensure() -> Result<TracefsMount, String> {
        if std::path::Path::new(TRACEFS).join("events").exists() {
            return Ok(TracefsMount {
                mounted_here: false,
            });
        }
        let ok = Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            println!("(mounted tracefs on {TRACEFS} for bpftrace; unmounted at the end)");
            Ok(TracefsMount { mounted_here: true })
        } else {
            Err(format!(
                "tracefs is not mounted and `mount -t tracefs nodev {TRACEFS}` failed"
            ))
        }
    }
}

impl Drop for TracefsMount {
    fn drop(&mut self) {
        if self.mounted_here {
            let _ = Command::new("umount").arg(TRACEFS).status();
        }
    }
}
