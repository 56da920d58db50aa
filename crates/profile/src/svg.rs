//! Flame graph SVG with inferno.

use std::io::Write;

use crate::error::ProfileError;
use crate::folded::{to_folded_lines, value_unit};
use crate::model::{Profile, kind_label};

/// Writes an interactive flame graph (SVG) of the profile. An empty
/// profile gives an SVG that says so.
///
/// # Errors
/// [`ProfileError::Write`] when inferno or the writer fails.
pub fn write_svg(profile: &Profile, out: impl Write) -> Result<(), ProfileError> {
    let lines = to_folded_lines(profile);
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!(
        "wakemeter {} profile of pid {} ({:.1} s{})",
        kind_label(profile.kind).replace('_', "-"),
        profile.pid,
        profile.duration.as_secs_f64(),
        partial_note(profile)
    );
    options.count_name = value_unit(profile.kind).to_owned();
    // An empty input is an error in inferno; an empty profile is not.
    options.flame_chart = false;
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let input: Vec<&str> = if refs.is_empty() {
        vec!["[no samples] 1"]
    } else {
        refs
    };
    inferno::flamegraph::from_lines(&mut options, input, out).map_err(|source| {
        ProfileError::Write {
            what: "flame graph SVG",
            source,
        }
    })
}

/// The title's note on a partial profile: interrupted (with the share of
/// the window asked for), or partial (the target exited).
fn partial_note(profile: &Profile) -> String {
    let asked = profile.warnings.iter().find_map(|w| match w {
        crate::ProfileWarning::Interrupted { asked_seconds, .. } => Some(*asked_seconds),
        _ => None,
    });
    match asked {
        Some(asked) => format!(" of {asked:.1} s asked, interrupted"),
        None if profile.is_partial() => ", partial".to_owned(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::off_cpu_profile;

    #[test]
    fn svg_names_the_frames_and_an_empty_profile_still_renders() {
        let mut out = Vec::new();
        write_svg(&off_cpu_profile(), &mut out).expect("svg");
        let svg = String::from_utf8_lossy(&out);
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("log_request") && svg.contains("partial"));
        let mut empty = off_cpu_profile();
        empty.samples.clear();
        let mut out = Vec::new();
        write_svg(&empty, &mut out).expect("empty svg");
        assert!(String::from_utf8_lossy(&out).contains("no samples"));
    }
}
