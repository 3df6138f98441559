//! Paginated lists: `?limit=` (default 50, 1–500) and `?cursor=`, answered as
//! `{"data": [...], "next_cursor": "…" | null}`.
//!
//! A cursor is opaque to clients: it is the position after the last item of a page, as hex
//! text. Each list has its own cursor kind, so a cursor from one list is refused by another
//! instead of silently skipping items. Pages are read one item longer than asked, so
//! `next_cursor` is `null` exactly when nothing follows.

use super::error::{ApiError, ApiResult};
use crate::intent::{Millis, WorkflowId};
use serde::Serialize;

/// Items per page when `limit` is not given.
pub const DEFAULT_LIMIT: u32 = 50;
/// The largest `limit` accepted.
pub const MAX_LIMIT: u32 = 500;

/// Where the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursor {
    /// Timeline entries after this `seq`.
    Seq(u64),
    /// Attempts after this attempt number.
    Attempt(u32),
    /// Workflows older than this `(created_at, workflow_id)` position (lists are newest first).
    Workflow(Millis, WorkflowId),
    /// Notifications after this outbox `seq`.
    Notification(u64),
    /// Observations after this id.
    Observation(String),
    /// A batch step's items after this place in its list.
    Item(u64),
}

impl Cursor {
    /// The opaque text handed to clients.
    pub fn encode(&self) -> String {
        let plain = match self {
            Cursor::Seq(seq) => format!("t:{seq}"),
            Cursor::Attempt(number) => format!("a:{number}"),
            Cursor::Workflow(at, id) => format!("w:{at}:{id}"),
            Cursor::Notification(seq) => format!("n:{seq}"),
            Cursor::Observation(id) => format!("o:{id}"),
            Cursor::Item(index) => format!("i:{index}"),
        };
        hex::encode(plain)
    }

    /// The cursor behind `text`, if it is one [`Cursor::encode`] could have written.
    pub fn decode(text: &str) -> Option<Cursor> {
        let plain = String::from_utf8(hex::decode(text).ok()?).ok()?;
        let (kind, rest) = plain.split_once(':')?;
        match kind {
            // Stored numbers are signed 64-bit: a larger one was never written here.
            "t" => stored_number(rest).map(Cursor::Seq),
            "a" => rest.parse().ok().map(Cursor::Attempt),
            "n" => stored_number(rest).map(Cursor::Notification),
            "i" => stored_number(rest).map(Cursor::Item),
            "o" => (rest.starts_with("obs_")
                && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            .then(|| Cursor::Observation(rest.to_string())),
            "w" => {
                let (at, id) = rest.split_once(':')?;
                let valid_id = id.starts_with("wf_")
                    && id.len() > 3
                    && id.bytes().all(|b| b.is_ascii_graphic());
                valid_id.then_some(())?;
                Some(Cursor::Workflow(
                    stored_number(at)?,
                    WorkflowId(id.to_string()),
                ))
            }
            _ => None,
        }
    }
}

/// A number as the store keeps them (at most `i64::MAX`).
fn stored_number(text: &str) -> Option<u64> {
    text.parse::<u64>()
        .ok()
        .filter(|v| i64::try_from(*v).is_ok())
}

/// The `limit` and decoded `cursor` of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest<C> {
    pub limit: u32,
    /// `None` for the first page.
    pub after: Option<C>,
}

/// Parses `limit` and `cursor`; `pick` accepts the cursor kind of this list.
pub fn page_request<C>(
    limit: Option<&str>,
    cursor: Option<&str>,
    pick: impl Fn(Cursor) -> Option<C>,
) -> ApiResult<PageRequest<C>> {
    let limit = match limit.filter(|l| !l.is_empty()) {
        None => DEFAULT_LIMIT,
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::invalid_parameter(
                    "limit",
                    text,
                    &format!(
                        "it must be a whole number from 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})"
                    ),
                )
            })?,
    };
    let after = match cursor.filter(|c| !c.is_empty()) {
        None => None,
        Some(text) => Some(Cursor::decode(text).and_then(pick).ok_or_else(|| {
            ApiError::invalid_parameter(
                "cursor",
                text,
                "it is not a cursor this list issued; pass `next_cursor` from the previous page of \
                 the same list unchanged, or leave it out to start at the first page",
            )
        })?),
    };
    Ok(PageRequest { limit, after })
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// A page from `rows` read with a limit of `limit + 1`: the extra row only tells that
    /// another page follows. `cursor_of` gives the position after a row.
    pub fn from_probe<R>(
        mut rows: Vec<R>,
        limit: u32,
        cursor_of: impl Fn(&R) -> Cursor,
        map: impl FnMut(R) -> T,
    ) -> Self {
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = if more {
            rows.last().map(|r| cursor_of(r).encode())
        } else {
            None
        };
        Self {
            data: rows.into_iter().map(map).collect(),
            next_cursor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::error::ErrorCode;

    #[test]
    fn cursors_round_trip_and_are_opaque() {
        for c in [
            Cursor::Seq(42),
            Cursor::Attempt(3),
            Cursor::Workflow(1_700_000_000_000, WorkflowId("wf_0123abcd".into())),
        ] {
            let text = c.encode();
            assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
            assert_eq!(Cursor::decode(&text), Some(c));
        }
        for bad in [
            "",
            "zz",
            "abc",
            &hex::encode("x:1"),
            &hex::encode("t:-1"),
            &hex::encode("t:9223372036854775808"),
            &hex::encode("w:18446744073709551615:wf_0123abcd"),
            &hex::encode("w:1:nope"),
        ] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn limits_default_and_are_bounded() {
        let seq = |c| match c {
            Cursor::Seq(s) => Some(s),
            _ => None,
        };
        assert_eq!(
            page_request(None, None, seq).unwrap(),
            PageRequest {
                limit: 50,
                after: None
            }
        );
        assert_eq!(page_request(Some("500"), None, seq).unwrap().limit, 500);
        for bad in ["0", "501", "-1", "ten", "1.5"] {
            let err = page_request(Some(bad), None, seq).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidParameter);
            assert!(err.message.contains(&format!("`{bad}`")), "{}", err.message);
        }
        let cursor = Cursor::Seq(7).encode();
        assert_eq!(
            page_request(None, Some(&cursor), seq).unwrap().after,
            Some(7)
        );
        // A cursor of another list is refused.
        let other = Cursor::Attempt(7).encode();
        assert_eq!(
            page_request(None, Some(&other), seq).unwrap_err().code,
            ErrorCode::InvalidParameter
        );
    }

    #[test]
    fn a_page_has_a_cursor_only_when_more_follows() {
        let page = Page::from_probe(vec![1u64, 2, 3], 2, |r| Cursor::Seq(*r), |r| r * 10);
        assert_eq!(page.data, [10, 20]);
        assert_eq!(page.next_cursor, Some(Cursor::Seq(2).encode()));
        let page = Page::from_probe(vec![1u64, 2], 2, |r| Cursor::Seq(*r), |r| r);
        assert_eq!(page.next_cursor, None);
    }
}
