//! What a scenario run tells: a table of cases, the story of each failure (the assertions
//! that did not hold, what the run did, each timeline and the world record), and JUnit XML
//! for CI systems.

use std::fmt::Write;

use super::Outcome;

/// One line per case: `PASS`/`FAIL`, the name, the file, the real time it took.
pub fn table(outcomes: &[Outcome]) -> String {
    let width = outcomes.iter().map(|o| o.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for o in outcomes {
        let mark = if o.passed() { "PASS" } else { "FAIL" };
        let _ = writeln!(
            out,
            "{mark}  {:width$}  {}  ({} ms)",
            o.name, o.file, o.real_ms
        );
    }
    let failed = outcomes.iter().filter(|o| !o.passed()).count();
    let _ = writeln!(
        out,
        "\n{} cases: {} passed, {failed} failed",
        outcomes.len(),
        outcomes.len() - failed
    );
    out
}

/// A failed case's story.
pub fn details(o: &Outcome) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "--- {} ({})", o.name, o.file);
    for f in &o.failures {
        let _ = writeln!(out, "  ✗ {f}");
    }
    if !o.log.is_empty() {
        let _ = writeln!(out, "\n  what the run did:");
        for line in &o.log {
            let _ = writeln!(out, "    {line}");
        }
    }
    for (i, timeline) in o.timelines.iter().enumerate() {
        let _ = writeln!(out, "\n  timeline of intent {}:", i + 1);
        for line in timeline.lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    let world = serde_json::to_string_pretty(&o.world).unwrap_or_default();
    let _ = writeln!(out, "\n  the world record:");
    for line in world.lines() {
        let _ = writeln!(out, "    {line}");
    }
    out
}

/// The cases as a JUnit XML report, one test case per scenario case.
pub fn junit(outcomes: &[Outcome]) -> String {
    let failed = outcomes.iter().filter(|o| !o.passed()).count();
    let seconds: f64 = outcomes.iter().map(|o| o.real_ms as f64 / 1000.0).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuite name=\"docket scenario\" tests=\"{}\" failures=\"{failed}\" time=\"{seconds:.3}\">",
        outcomes.len()
    );
    for o in outcomes {
        let _ = write!(
            out,
            "  <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
            escape(&o.file),
            escape(&o.name),
            o.real_ms as f64 / 1000.0
        );
        if o.passed() {
            out.push_str("/>\n");
        } else {
            let _ = writeln!(
                out,
                ">\n    <failure message=\"{}\">{}</failure>\n  </testcase>",
                escape(o.failures.first().map_or("", String::as_str)),
                escape(&details(o))
            );
        }
    }
    out.push_str("</testsuite>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
