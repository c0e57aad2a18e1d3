//! Go-style durations (`24h`, `90m`, `1h30m`, `1.5s`, `0s`), the format of metav1.Duration and
//! of `internalStateRefreshCycleDuration`.

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: {reason} (use a number with a unit: ns, us, ms, s, m, h — e.g. 24h, 90m, 1h30m)"
)]
pub struct DurationError {
    pub input: String,
    pub reason: &'static str,
}

/// Parses a Go duration. Negative durations are rejected: nothing here can run backwards.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total: f64 = 0.0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        if start == i {
            return Err(err("expected a number"));
        }
        let number: f64 = s[start..i].parse().map_err(|_| err("malformed number"))?;
        let unit_start = i;
        while i < bytes.len() && !(bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let seconds = match &s[unit_start..i] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        total += number * seconds;
    }
    // Beyond ~292 years Duration::from_secs_f64 would panic; no refresh cycle needs that.
    if !total.is_finite() || total > 1e10 {
        return Err(err("too large"));
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("90m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "h", "10", "1d", "-5m", "1h x", "1..5s", "99999999999h"] {
            assert!(parse(bad).is_err(), "{bad} should be rejected");
        }
        let e = parse("1d").unwrap_err();
        assert!(e.to_string().contains("unknown unit") && e.to_string().contains("1d"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = parse(&s);
        }
    }
}
