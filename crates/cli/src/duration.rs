//! Durations on the command line, parsed in one place for every flag:
//! plain seconds (`30`, `0.5`) or a number with a unit (`500ms`, `2s`,
//! `5m`), at most [`MAX`]. Each command then checks its own range.

use std::time::Duration;

/// The longest duration any flag accepts: 365 days. Far beyond any use,
/// and far below what would overflow a deadline (`Instant` + duration).
pub const MAX: Duration = Duration::from_secs(365 * 86_400);

/// Parses `s` (see the module docs).
///
/// # Errors
/// Not a number, an unknown unit, negative, or above [`MAX`].
pub fn parse(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (examples: 30, 30s, 500ms, 5m)"))?;
    let secs = v * scale;
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!(
            "{s:?} is not a duration (examples: 30, 30s, 500ms, 5m)"
        ));
    }
    if secs > MAX.as_secs_f64() {
        return Err(format!(
            "{s:?} is too long: at most {} s (365 days)",
            MAX.as_secs()
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// [`parse`], refusing zero (a `--seconds` of nothing).
///
/// # Errors
/// As [`parse`], or zero.
pub fn parse_positive(s: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d.is_zero() {
        return Err(format!("{s:?}: must be more than 0"));
    }
    Ok(d)
}

/// `d` as whole seconds from `min` to `max`, for a period that must end
/// on the sampler's one-second snapshots (`watch --every`, `top
/// --every`, `demo --seconds`); `flag` names it in the error.
///
/// # Errors
/// A fraction of a second, or out of the range.
pub fn whole_seconds(d: Duration, flag: &str, min: u64, max: u64) -> Result<u64, String> {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || !(min..=max).contains(&secs) {
        return Err(format!(
            "{flag} must be between {min} and {max} seconds, whole (e.g. {min}s or {min}); \
             it was {:?}: reports end on the sampler's one-second snapshots",
            d
        ));
    }
    Ok(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_units() {
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse(&MAX.as_secs().to_string()), Ok(MAX));
    }

    #[test]
    fn the_maxima_and_nonsense_are_refused() {
        for bad in [
            "18446744073709551615",
            "31536001",
            "1e300",
            "inf",
            "NaN",
            "-1",
            "5h",
            "",
            "ms",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse_positive("0").is_err());
        let half = parse("500ms").unwrap();
        assert!(whole_seconds(half, "--every", 1, 3600).is_err());
        assert_eq!(whole_seconds(parse("2s").unwrap(), "--every", 1, 60), Ok(2));
        assert!(whole_seconds(parse("61").unwrap(), "--every", 1, 60).is_err());
        assert!(parse_positive("0ms").is_err());
    }
}
