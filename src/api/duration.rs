//! The durations of a spec (`interval`, `retryInterval`, `timeout`): Go-style text parsed
//! without panicking on tenant input, and clamped to the operator's bounds.

use std::time::Duration;

use super::ApplySetSpec;

/// Parses a Go-style duration (`10m`, `1h30m`, `500ms`, `1.5h`); `None` when it is not one
/// or does not fit. Not kube's `kube::core::Duration` parser: it accepts the same text, but
/// panics on an amount too large for a `std::time::Duration` (it multiplies with
/// `Duration::mul_f64`), e.g. `99999999999999999999h`, and a spec is tenant input.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        if num_end == 0 {
            return None;
        }
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_end] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * factor;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Bounds on the durations (a zero interval would reconcile in a hot loop; a huge timeout
/// would overflow a deadline).
pub const MIN_DURATION: Duration = Duration::from_secs(1);
pub const MAX_INTERVAL: Duration = Duration::from_secs(7 * 24 * 3600);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

impl ApplySetSpec {
    /// `interval`, at least 1s and at most 7 days (10m if unparsable; the CRD's pattern
    /// prevents that).
    pub fn interval(&self) -> Duration {
        parse_duration(&self.interval)
            .unwrap_or(Duration::from_secs(600))
            .clamp(MIN_DURATION, MAX_INTERVAL)
    }

    /// The interval the operator uses: [`Self::interval`], at least `min` (the operator's
    /// `--min-interval`).
    pub fn interval_at_least(&self, min: Duration) -> Duration {
        self.interval().max(min)
    }

    /// What status says when `interval` is raised to `min`; `None` when it is not.
    pub fn interval_raised(&self, min: Duration) -> Option<String> {
        (self.interval() < min).then(|| {
            format!(
                "spec.interval {} is raised to the operator's minimum, {}s (--min-interval)",
                self.interval,
                min.as_secs()
            )
        })
    }
    /// `retryInterval`, at least 1s and at most `interval`.
    pub fn retry_interval(&self) -> Duration {
        parse_duration(&self.retry_interval)
            .unwrap_or(Duration::from_secs(30))
            .clamp(MIN_DURATION, self.interval())
    }
    /// `timeout`, at least 1s and at most 24h.
    pub fn timeout(&self) -> Duration {
        parse_duration(&self.timeout)
            .unwrap_or(Duration::from_secs(300))
            .clamp(MIN_DURATION, MAX_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        for bad in ["", "10", "m", "10x", "1h m", "-1s", "99999999999999999999h"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn durations_are_clamped() {
        let spec = |i: &str, r: &str, t: &str| ApplySetSpec {
            interval: i.into(),
            retry_interval: r.into(),
            timeout: t.into(),
            ..Default::default()
        };
        let s = spec("0s", "0s", "0s");
        assert_eq!(
            (s.interval(), s.retry_interval(), s.timeout()),
            (MIN_DURATION, MIN_DURATION, MIN_DURATION)
        );
        let s = spec("3000000000000000h", "1m", "3000000000000000h");
        assert_eq!(s.interval(), MAX_INTERVAL);
        assert_eq!(s.timeout(), MAX_TIMEOUT);
        let s = spec("10s", "1h", "5m");
        assert_eq!(
            s.retry_interval(),
            Duration::from_secs(10),
            "retry never exceeds interval"
        );
    }
}
