//! Go duration strings (`"30s"`, `"1h30m"`, `"1.5h"`, `"500ms"`).
//!
//! Nomad job files write every duration the way Go's `time.ParseDuration`
//! reads it, so herder accepts exactly that grammar: one or more decimal
//! numbers, each with an optional fraction and a required unit (`ns`, `us`,
//! `µs`, `ms`, `s`, `m`, `h`); a bare `0` needs no unit. Negative durations
//! parse in Go but mean nothing for any job field, so they are refused.
//!
//! [`format_go_duration`] writes one back as Go's `Duration.String` does,
//! for the API fields Nomad encodes that way (`"200ms"`, `"1m30s"`).

use std::time::Duration;

const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a Go duration string; the error says what is wrong with it.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let quoted = || format!("{text:?}");
    let mut rest = text;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if rest.starts_with('-') {
        return Err(format!("duration {} must not be negative", quoted()));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(format!("invalid duration {}", quoted()));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (nanos, after) = parse_term(rest).ok_or_else(|| {
            format!(
                "invalid duration {} (expected numbers with units ns, us, ms, s, m, h, like \"1h30m\")",
                quoted()
            )
        })?;
        total = total
            .checked_add(nanos)
            .ok_or_else(|| format!("duration {} is too large", quoted()))?;
        rest = after;
    }
    let nanos = u64::try_from(total).map_err(|_| format!("duration {} is too large", quoted()))?;
    Ok(Duration::from_nanos(nanos))
}

/// Formats `d` as Go's `time.Duration.String` does: `0s`; below a
/// second in the largest unit that keeps an integer part (`1.5ms`,
/// `200ms`, `3µs`, `10ns`); else hours, minutes and seconds with the
/// seconds' fraction trimmed (`10s`, `1m30s`, `1h0m0.5s`).
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 {
        let (scale, unit) = match nanos {
            n if n < 1_000 => (1, "ns"),
            n if n < 1_000_000 => (1_000, "\u{b5}s"),
            _ => (1_000_000, "ms"),
        };
        return format!("{}{unit}", decimal(nanos, scale));
    }
    let secs = nanos / 1_000_000_000;
    let (hours, minutes) = (secs / 3600, (secs % 3600) / 60);
    let seconds = decimal(nanos % 60_000_000_000, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `value / scale` in decimal, without trailing zeros in the fraction.
fn decimal(value: u128, scale: u128) -> String {
    let (whole, frac) = (value / scale, value % scale);
    if frac == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// One `<number><unit>` term: its value in nanoseconds and the rest.
fn parse_term(text: &str) -> Option<(u128, &str)> {
    let int_len = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (int_part, rest) = text.split_at(int_len);
    let (frac_part, rest) = match rest.strip_prefix('.') {
        Some(r) => {
            let n = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            r.split_at(n)
        }
        None => ("", rest),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    // Longest unit first so "ms" is not read as "m" followed by "s".
    let (unit, scale) = UNITS
        .iter()
        .filter(|(u, _)| rest.starts_with(u))
        .max_by_key(|(u, _)| u.len())?;
    let whole: u128 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().ok()?
    };
    let mut nanos = whole.checked_mul(*scale)?;
    // Fractions are truncated to whole nanoseconds, as Go does.
    let mut place = *scale;
    for digit in frac_part.bytes().take(30) {
        place /= 10;
        nanos += u128::from(digit - b'0') * place;
    }
    Some((nanos, &rest[unit.len()..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_go_durations() {
        let cases = [
            ("30s", Duration::from_secs(30)),
            ("1h30m", Duration::from_secs(5400)),
            ("500ms", Duration::from_millis(500)),
            ("1.5h", Duration::from_secs(5400)),
            ("2us", Duration::from_micros(2)),
            ("2\u{b5}s", Duration::from_micros(2)),
            ("10ns", Duration::from_nanos(10)),
            ("0", Duration::ZERO),
            (".5s", Duration::from_millis(500)),
            ("1m0.25s", Duration::from_millis(60_250)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn writes_durations_as_go_prints_them() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(200), "200ms"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_micros(3), "3\u{b5}s"),
            (Duration::from_nanos(10), "10ns"),
            (Duration::from_millis(3_600_500), "1h0m0.5s"),
        ];
        for (d, want) in cases {
            assert_eq!(format_go_duration(d), want, "{d:?}");
            assert_eq!(parse_go_duration(want), Ok(d), "{want}");
        }
    }

    #[test]
    fn refuses_what_go_refuses_and_negatives() {
        for bad in ["", "10", "s", "10 seconds", "1x", "1h-5m", "--1s", "."] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should fail");
        }
        let err = parse_go_duration("-5s").unwrap_err();
        assert!(err.contains("negative"), "{err}");
    }
}
