//! The values the store's statements take ([`Param`], bound by each driver its own way),
//! and the JSON columns every concept writes.

use super::StoreError;
use super::StoreResult;

/// A step's `reads` column: the JSON array of the steps whose receipts its input reads.
pub(crate) fn reads_text(reads: Option<&[String]>) -> StoreResult<Option<String>> {
    reads
        .map(|r| {
            serde_json::to_string(r)
                .map_err(|e| StoreError::never(format!("encoding a step's reads: {e}")))
        })
        .transpose()
}

/// A claimed step's `reads` column, back as step ids (see [`reads_text`]).
pub(crate) fn reads_list(text: Option<&str>) -> StoreResult<Option<Vec<String>>> {
    text.map(|t| {
        serde_json::from_str(t).map_err(|e| StoreError::Corrupt(format!("a step's reads: {e}")))
    })
    .transpose()
}

/// JSON text of a value the store keeps (an answer, a list).
pub(crate) fn json_text(value: &impl serde::Serialize) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("stored JSON: {e}")))
}

/// A value for a statement parameter, as both drivers bind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
    Flag(bool),
    Bytes(&'a [u8]),
}

impl<'a> From<&'a [u8]> for Param<'a> {
    fn from(v: &'a [u8]) -> Self {
        Param::Bytes(v)
    }
}

impl<'a> From<&'a Vec<u8>> for Param<'a> {
    fn from(v: &'a Vec<u8>) -> Self {
        Param::Bytes(v)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Param::Text(Some(v))
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(v: &'a String) -> Self {
        Param::Text(Some(v))
    }
}

impl<'a> From<Option<&'a str>> for Param<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Param::Text(v)
    }
}

impl From<i64> for Param<'_> {
    fn from(v: i64) -> Self {
        Param::Int(Some(v))
    }
}

impl From<Option<i64>> for Param<'_> {
    fn from(v: Option<i64>) -> Self {
        Param::Int(v)
    }
}

impl From<bool> for Param<'_> {
    fn from(v: bool) -> Self {
        Param::Flag(v)
    }
}

/// Statement parameters, in order, each converted to a [`Param`].
macro_rules! values {
    ($($value:expr),* $(,)?) => {
        [$($crate::store::plan::Param::from($value)),*]
    };
}

pub(crate) use values;
