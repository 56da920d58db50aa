//! Folded stacks (`frame;frame;frame value` per line), the input of
//! flamegraph.pl, inferno, speedscope and most flame graph tools.

use std::io::Write;

use crate::error::ProfileError;
use crate::model::{Frame, Profile, StackGap, StackKind, StackSample};

/// The root-side marker of a user stack cut at a return address outside
/// every executable mapping ([`StackGap::UserTruncated`]).
pub const TRUNCATED: &str = "[truncated]";

/// The frames of a sample as folded names, root first: the thread, for
/// wakeups `[woken by <waker>]`, the stack, a `[lost ...]` marker for a
/// missing part, `[truncated]` where a user stack was cut (its outer frames
/// unknown), and for off-CPU the cause as the leaf (`[off-cpu: lock]`).
/// `;` in names becomes `:` (it separates frames).
pub fn folded_frames(s: &StackSample) -> Vec<String> {
    folded_parts(s).into_iter().map(|(name, _)| name).collect()
}

/// [`folded_frames`] with the real frame behind each name (`None` for the
/// synthetic ones: thread, waker, gaps, cause).
pub(crate) fn folded_parts(s: &StackSample) -> Vec<(String, Option<&Frame>)> {
    let clean = |n: &str| n.replace(';', ":").replace(['\n', '\r'], " ");
    let mut out = Vec::with_capacity(s.frames.len() + 3);
    out.push((clean(&s.thread_name), None));
    if let Some((tid, name)) = &s.waker {
        out.push((clean(&format!("[woken by {name} ({tid})]")), None));
    }
    if s.gaps.contains(&StackGap::UserLost) {
        out.push(("[lost user stack]".to_owned(), None));
    }
    if s.gaps.contains(&StackGap::UserTruncated) {
        out.push((TRUNCATED.to_owned(), None));
    }
    out.extend(s.frames.iter().map(|f| (clean(&f.label()), Some(f))));
    if s.gaps.contains(&StackGap::KernelLost) {
        out.push(("[lost kernel stack]".to_owned(), None));
    }
    if let Some(cause) = s.cause {
        out.push((format!("[off-cpu: {}]", cause.name()), None));
    }
    out
}

/// The value of a folded line: samples (on-CPU), microseconds off CPU
/// (off-CPU), wakeups (wakeups).
pub fn folded_value(kind: StackKind, s: &StackSample) -> u64 {
    match kind {
        StackKind::OffCpu => s.total_ns / 1000,
        _ => s.count,
    }
}

/// What a folded value counts, for titles: `samples`, `us` or `wakeups`.
pub fn value_unit(kind: StackKind) -> &'static str {
    match kind {
        StackKind::OnCpu => "samples",
        StackKind::OffCpu => "us",
        _ => "wakeups",
    }
}

/// The profile as folded lines, heaviest first; lines with value 0 are
/// left out. Identical stacks (e.g. the same stack under two stack-map
/// ids) stay separate lines, which folded readers add up.
pub fn to_folded_lines(profile: &Profile) -> Vec<String> {
    profile
        .samples
        .iter()
        .filter_map(|s| {
            let v = folded_value(profile.kind, s);
            (v > 0).then(|| format!("{} {v}", folded_frames(s).join(";")))
        })
        .collect()
}

/// Writes the folded lines.
///
/// # Errors
/// [`ProfileError::Write`] on an I/O error.
pub fn write_folded(profile: &Profile, mut out: impl Write) -> Result<(), ProfileError> {
    let wrap = |source| ProfileError::Write {
        what: "folded stacks",
        source,
    };
    for line in to_folded_lines(profile) {
        writeln!(out, "{line}").map_err(wrap)?;
    }
    out.flush().map_err(wrap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::off_cpu_profile;

    #[test]
    fn folded_lines_root_first_with_cause_leaf_in_us() {
        let lines = to_folded_lines(&off_cpu_profile());
        assert_eq!(
            lines,
            [
                "worker:1;main;log_request;/usr/bin/app+0x55;pipe_write_[k];[off-cpu: other] 3000",
                "worker:1;main;contended_path;[off-cpu: lock] 1000",
            ]
        );
        let mut out = Vec::new();
        write_folded(&off_cpu_profile(), &mut out).expect("write");
        assert_eq!(String::from_utf8_lossy(&out).lines().count(), 2);
    }
}
