//! Definition errors and their rustc-style rendering.
//!
//! A [`Diagnostic`] says what is wrong (quoting the value), where (a byte span into the
//! source) and how to fix it. [`Diagnostics`] owns the file name and text they refer to, so
//! it can render `file:line:col` with the offending line and carets, and it is what
//! [`super::parse`] and [`super::check`] return. Also here: turning `toml` errors into
//! diagnostics with a fix, and the "did you mean" helper.

use std::fmt;
use std::ops::Range;

use serde::Serialize;

use super::values::HELP_MARKER;

/// One problem in a definition file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// What is wrong, quoting the offending value.
    pub message: String,
    /// Byte offsets of the offending text in the source, when known.
    pub span: Option<Range<usize>>,
    /// How to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic with no location and no help yet.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            span: None,
            help: None,
        }
    }

    /// Points the diagnostic at `span` (when known).
    pub fn at(mut self, span: impl Into<Option<Range<usize>>>) -> Self {
        self.span = span.into();
        self
    }

    /// Says how to fix it.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// A diagnostic with its position resolved, for machine-readable output (e.g. JSON from
/// the API or `docket workflow check --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocatedDiagnostic {
    /// The file name given to [`super::parse`].
    pub file: String,
    /// 1-based line, when the diagnostic has a span.
    pub line: Option<usize>,
    /// 1-based column in characters, when the diagnostic has a span.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
}

/// All problems found in one file, with the file's name and text so they can be rendered.
///
/// `Display` renders every diagnostic like rustc does, separated by blank lines:
///
/// ```text
/// error: unknown field `retries`, expected one of `id`, `label`, ...
///   --> workflows/bad.toml:12:1
///    |
/// 12 | retries = 3
///    | ^^^^^^^
///    = help: ...
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostics {
    file: String,
    source: String,
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// Diagnostics for `file` (whose text is `source`), ordered by position; diagnostics
    /// without a span come last.
    pub fn new(file: &str, source: &str, mut items: Vec<Diagnostic>) -> Self {
        items.sort_by_key(|d| d.span.as_ref().map_or(usize::MAX, |s| s.start));
        items.dedup();
        Self {
            file: file.to_string(),
            source: source.to_string(),
            items,
        }
    }

    /// The file name the diagnostics refer to.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The diagnostics, ordered by position.
    pub fn items(&self) -> &[Diagnostic] {
        &self.items
    }

    /// How many problems were found.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when there are none (never the case for an `Err` from this module).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Each diagnostic with its line and column resolved.
    pub fn located(&self) -> Vec<LocatedDiagnostic> {
        self.items
            .iter()
            .map(|d| {
                let position = d.span.as_ref().map(|s| line_col(&self.source, s.start));
                LocatedDiagnostic {
                    file: self.file.clone(),
                    line: position.map(|(line, _)| line),
                    column: position.map(|(_, column)| column),
                    message: d.message.clone(),
                    help: d.help.clone(),
                }
            })
            .collect()
    }

    fn render_one(&self, d: &Diagnostic, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "error: {}", d.message)?;
        let Some(span) = &d.span else {
            writeln!(f, " --> {}", self.file)?;
            if let Some(help) = &d.help {
                writeln!(f, "  = help: {help}")?;
            }
            return Ok(());
        };
        let source = self.source.as_str();
        let start = floor_char_boundary(source, span.start);
        let (line, column) = line_col(source, start);
        let width = line.to_string().len();
        let pad = " ".repeat(width);
        let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
        let text = line_text(source, start);
        // Carets cover the span's part of its first line, at least one character.
        // (A span may start past the text of its line, e.g. at a lone `\r`.)
        let line_end = (line_start + text.len()).max(start);
        let end = floor_char_boundary(source, span.end).clamp(start, line_end);
        let carets = source[start..end].chars().count().max(1);
        let indent = source[line_start..start].chars().count();
        writeln!(f, "{pad}--> {}:{line}:{column}", self.file)?;
        writeln!(f, "{pad} |")?;
        writeln!(f, "{line} | {}", text.replace('\t', " "))?;
        writeln!(f, "{pad} | {}{}", " ".repeat(indent), "^".repeat(carets))?;
        if let Some(help) = &d.help {
            writeln!(f, "{pad} = help: {help}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.items.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            self.render_one(d, f)?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// 1-based line and column (in characters) of byte `offset`.
pub(super) fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = floor_char_boundary(source, offset);
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, source[line_start..offset].chars().count() + 1)
}

/// The text of the line holding `offset`, without its line break.
fn line_text(source: &str, offset: usize) -> &str {
    let offset = floor_char_boundary(source, offset);
    let start = source[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = source[offset..]
        .find('\n')
        .map_or(source.len(), |i| offset + i);
    source[start..end].trim_end_matches('\r')
}

fn floor_char_boundary(source: &str, offset: usize) -> usize {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// A diagnostic for an error from the `toml` crate: a syntax error, or a shape error
/// raised while deserializing (unknown field, wrong type, invalid value).
pub fn from_toml(err: &toml::de::Error, syntax: bool) -> Diagnostic {
    let raw = err.message().trim_end();
    let (message, help) = match raw.split_once(HELP_MARKER) {
        Some((message, help)) => (message.to_string(), Some(help.to_string())),
        None if syntax => (
            format!("invalid TOML: {raw}"),
            Some("fix the TOML syntax (strings in double quotes, one `key = value` per line); see https://toml.io/en/v1.0.0".to_string()),
        ),
        None => (raw.to_string(), shape_help(raw)),
    };
    // A field missing from the document itself is reported at its start.
    let at_root = err.span().is_some_and(|s| s.start == 0);
    let help = match quoted_after(raw, "missing field `") {
        Some(field) if at_root => Some(format!(
            "add `{field} = ...` at the top of the file, before the first [table]"
        )),
        _ => help,
    };
    let message = message.replace('\n', "; ");
    Diagnostic {
        message,
        span: err.span(),
        help,
    }
}

/// How to fix a serde shape error, judged from its standard message.
fn shape_help(message: &str) -> Option<String> {
    if let Some(field) = quoted_after(message, "unknown field `") {
        let expected = expected_names(message);
        if let Some(hint) = known_mistake(field) {
            return Some(format!("remove `{field}`; {hint}"));
        }
        return Some(match closest(field, expected.iter().map(String::as_str)) {
            Some(near) => format!("did you mean `{near}`? Otherwise remove `{field}`"),
            None => format!("remove `{field}`; only the fields listed above are allowed here"),
        });
    }
    if let Some(variant) = quoted_after(message, "unknown variant `") {
        let expected = expected_names(message);
        return Some(
            match closest(variant, expected.iter().map(String::as_str)) {
                Some(near) => format!("did you mean `{near}`?"),
                None => "use one of the values listed above".to_string(),
            },
        );
    }
    if let Some(field) = quoted_after(message, "missing field `") {
        return Some(format!("add `{field} = ...` to this table"));
    }
    if message.starts_with("invalid type") || message.starts_with("invalid value") {
        let expected = message.split("expected ").nth(1).unwrap_or("");
        let help = if expected.starts_with('i') || expected.starts_with('u') {
            "write a whole number without quotes, e.g. `3`"
        } else if expected.starts_with("f32") || expected.starts_with("f64") {
            "write a number without quotes, e.g. `2.0`"
        } else if expected.contains("string") {
            "write the value in double quotes"
        } else if expected.contains("sequence") {
            "write a list in brackets, e.g. [\"a\", \"b\"]"
        } else if expected.contains("map") || expected.contains("struct") {
            "write a table, e.g. under a [section] header"
        } else if expected.contains("bool") {
            "write `true` or `false` without quotes"
        } else {
            return None;
        };
        return Some(help.to_string());
    }
    None
}

/// Fixes for field names people commonly reach for.
fn known_mistake(field: &str) -> Option<&'static str> {
    Some(match field {
        "retries" | "max_retries" | "attempts" | "max_attempts" => {
            "set the step's retry policy under [steps.retry], e.g. max_attempts = 3"
        }
        "depends_on" | "dependencies" | "needs" | "requires" => {
            "list the steps this one runs after in `after`, e.g. after = [\"validate\"]"
        }
        "timeout_ms" | "timeout_secs" | "timeout_seconds" => {
            "write the per-attempt timeout with a unit, e.g. timeout = \"5s\""
        }
        "adapter" | "handler" => {
            "name the component in `component` and its kind in `kind` (\"handler\" or \"adapter\")"
        }
        "schema" => "write the input JSON Schema under [input_schema]",
        _ => return None,
    })
}

/// The text between `prefix` and the next backtick.
fn quoted_after<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = &message[message.find(prefix)? + prefix.len()..];
    rest.find('`').map(|end| &rest[..end])
}

/// The backtick-quoted names after "expected" in a serde message.
fn expected_names(message: &str) -> Vec<String> {
    let Some(index) = message.find("expected") else {
        return Vec::new();
    };
    message[index..]
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The candidate closest to `word` by edit distance, when it is close enough to be a typo.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

/// Edit distance in characters, counting a swap of two neighbours as one edit (the
/// commonest typo).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// `a`, `b` and `c` — for listing names in a message.
pub fn list(names: impl IntoIterator<Item = impl fmt::Display>) -> String {
    let names: Vec<String> = names.into_iter().map(|n| format!("`{n}`")).collect();
    match names.as_slice() {
        [] => "none".to_string(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_past_its_lines_text_still_renders() {
        // Found by `fuzz::definitions_never_panic_and_point_inside_the_file`.
        let err = crate::workflow::parse("cr.toml", "\r").unwrap_err();
        assert!(err.to_string().contains("cr.toml"), "{err}");
    }

    #[test]
    fn renders_like_rustc() {
        let source = "name = \"x\"\n\n[[steps]]\nretries = 3\n";
        let start = source.find("retries").unwrap();
        let d = Diagnostic::new("unknown field `retries`")
            .at(start..start + 7)
            .help("remove it");
        let out = Diagnostics::new("w.toml", source, vec![d]).to_string();
        assert_eq!(
            out,
            "error: unknown field `retries`\n --> w.toml:4:1\n  |\n4 | retries = 3\n  | ^^^^^^^\n  = help: remove it\n"
        );
    }

    #[test]
    fn pads_the_gutter_for_wide_line_numbers_and_sorts() {
        let source = format!("{}x = 1\n", "\n".repeat(11));
        let late = Diagnostic::new("late").at(11..12);
        let unplaced = Diagnostic::new("nowhere");
        let early = Diagnostic::new("early").at(0..0);
        let out = Diagnostics::new("f", &source, vec![unplaced, late, early]).to_string();
        assert!(out.starts_with("error: early\n --> f:1:1\n"), "{out}");
        assert!(
            out.contains("error: late\n  --> f:12:1\n   |\n12 | x = 1\n   | ^\n"),
            "{out}"
        );
        assert!(out.ends_with("error: nowhere\n --> f\n"), "{out}");
    }

    #[test]
    fn columns_count_characters() {
        assert_eq!(line_col("é = 1\nab", 8), (2, 2));
        assert_eq!(line_col("abc", 0), (1, 1));
    }

    #[test]
    fn suggests_close_names() {
        assert_eq!(closest("retyr", ["retry", "label"]), Some("retry"));
        assert_eq!(closest("zzz", ["retry", "label"]), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("lable", "label"), 1);
    }

    #[test]
    fn helps_with_serde_messages() {
        let help = shape_help("unknown field `lable`, expected one of `id`, `label`").unwrap();
        assert_eq!(help, "did you mean `label`? Otherwise remove `lable`");
        let help = shape_help("unknown variant `adaptor`, expected `handler` or `adapter`");
        assert_eq!(help.unwrap(), "did you mean `adapter`?");
        assert!(
            shape_help("missing field `kind`")
                .unwrap()
                .contains("kind = ")
        );
        assert_eq!(list(["a", "b", "c"]), "`a`, `b` and `c`");
    }
}
