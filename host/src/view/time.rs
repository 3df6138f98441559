//! Times on the wire: RFC 3339, UTC, millisecond precision (`2025-01-02T03:04:05.678Z`).
//!
//! The store keeps milliseconds since the Unix epoch; only views turn them into text.

use crate::intent::Millis;
pub use crate::intent::rfc3339;

/// [`rfc3339`] of an optional time.
pub fn rfc3339_opt(ms: Option<Millis>) -> Option<String> {
    ms.map(rfc3339)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_with_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_735_787_045_678), "2025-01-02T03:04:05.678Z");
        assert_eq!(rfc3339_opt(None), None);
    }
}
