//! Rules about the source itself, checked like any behaviour: each store rule is written
//! once, not once per database; test code never orders events by sleeping. A test waits on what it means — a tick count, a signal, a state it
//! can observe — through the wait helpers (`crate::wait`); the few waits that must pass
//! real time are listed here, each with its reason.

use std::path::{Path, PathBuf};

/// The wait helpers: their polls pause between looks, which is what waiting is.
const WAIT_HELPERS: &[&str] = &["host/tests/support/wait.rs"];

/// A sleep in test code that stays, and why.
struct Allowed {
    /// The file, from the repository's root.
    file: &'static str,
    /// The name of the function the sleep is in, or a snippet of its line.
    at: &'static str,
    why: &'static str,
}

/// Waits in test code that must pass real time: nothing to wait on would mean the same.
const ALLOWED: &[Allowed] = &[
    Allowed {
        file: "host/tests/all/security.rs",
        at: "a_client_too_slow_with_its_headers_is_disconnected",
        why: "a slow client: it must really stall between bytes, past the server's header \
              deadline, for the server to cut it off",
    },
    Allowed {
        file: "host/src/clock.rs",
        at: "a_manual_clock_ends_its_sleepers_when_moved_past_them_and_names_the_next",
        why: "sleeps on a manual clock pass no real time: they end when the test moves the \
              clock, which is what the test is about",
    },
    Allowed {
        file: "host/tests/all/hostile_soak.rs",
        at: "hostile_components_beside_normal_deliveries_for_a_minute",
        why: "a soak runs for its duration: its rounds are paced in real time, and nothing \
              is asserted on the pause",
    },
];

/// A sleep found in test code.
#[derive(Debug)]
struct Found {
    /// From the repository's root.
    file: String,
    /// 1-based.
    line: usize,
    text: String,
    /// The function it is in, as far as the nearest `fn` before it tells.
    function: Option<String>,
}

#[test]
fn tests_never_order_events_by_sleeping() {
    let found = sleeps_in_test_code();
    let mut used = vec![false; ALLOWED.len()];
    let mut offending = Vec::new();
    for f in &found {
        if WAIT_HELPERS.contains(&f.file.as_str()) {
            continue;
        }
        let allowed = ALLOWED.iter().position(|a| {
            a.file == f.file && (f.function.as_deref() == Some(a.at) || f.text.contains(a.at))
        });
        match allowed {
            Some(i) => used[i] = true,
            None => offending.push(format!("{}:{}: {}", f.file, f.line, f.text.trim())),
        }
    }
    assert!(
        offending.is_empty(),
        "test code orders events by sleeping; wait on what is meant instead (a tick count, a \
         signal or an observable state, through crate::wait), or, for a wait that must pass \
         real time, list it in ALLOWED in {} with its reason:\n{}",
        file!(),
        offending.join("\n")
    );
    let stale: Vec<String> = ALLOWED
        .iter()
        .zip(&used)
        .filter(|(_, used)| !**used)
        .map(|(a, _)| format!("{} at `{}` ({})", a.file, a.at, a.why))
        .collect();
    assert!(
        stale.is_empty(),
        "allowed sleeps that are no longer there; remove them from ALLOWED:\n{}",
        stale.join("\n")
    );
    for helper in WAIT_HELPERS {
        assert!(
            found.iter().any(|f| f.file == *helper),
            "the scan did not see the wait helper {helper} pause: it misses test code"
        );
    }
}

/// The scan tells test code as the compiler does, erring towards more: a file of tests, an
/// out-of-line module under `#[cfg(test)]`, and everything from an inline one to the end.
#[test]
fn the_scan_sees_what_only_tests_compile() {
    let test_files = test_files(&all_sources());
    for file in [
        "host/src/runtime/tests.rs",
        "host/src/fuzz.rs",
        "host/tests/all/main.rs",
        "host/tests/support/wait.rs",
    ] {
        assert!(
            test_files.iter().any(|f| repo_path(f) == file),
            "{file} is test code"
        );
    }
    for file in ["host/src/runtime/mod.rs", "host/src/lib.rs"] {
        assert!(
            !test_files.iter().any(|f| repo_path(f) == file),
            "{file} is not test code"
        );
    }
    let pause = format!("std::thread::{}(EVERY);", "sleep");
    let source = [
        "fn run() {",
        &format!("    {pause}"),
        "}",
        "#[cfg(test)]",
        "mod tests_elsewhere;",
        "#[cfg(test)]",
        "pub(crate) fn start() {}",
        "#[cfg(test)]",
        "#[allow(dead_code)]",
        "mod tests {",
        &format!("    // {pause}"),
        &format!("    async fn waits() {{ {pause} }}"),
        "}",
    ]
    .join("\n");
    let lines: Vec<&str> = source.lines().collect();
    assert_eq!(inline_tests(&lines), Some((7, "tests")));
    let found: Vec<usize> = (7..lines.len()).filter(|&i| sleeps(lines[i])).collect();
    assert_eq!(found, vec![11], "a comment is not a sleep");
    assert_eq!(function_at(&lines, 11).as_deref(), Some("waits"));
    assert!(sleeps(&format!("tokio::time::{}_until (t)", "sleep")));
    assert!(!sleeps(&format!("let {}y = 1;", "sleep")));
    assert!(!sleeps(&format!("fn no_{}() {{}}", "sleep")));
}

/// Every sleep in test code: in a file of tests, or after the start of an inline
/// `#[cfg(test)]` module.
fn sleeps_in_test_code() -> Vec<Found> {
    let sources = all_sources();
    let test_files = test_files(&sources);
    let mut found = Vec::new();
    for path in &sources {
        let text = std::fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let from = if test_files.contains(path) {
            0
        } else {
            match inline_tests(&lines) {
                Some((start, _)) => start,
                None => continue,
            }
        };
        for (i, line) in lines.iter().enumerate().skip(from) {
            if sleeps(line) {
                found.push(Found {
                    file: repo_path(path),
                    line: i + 1,
                    text: line.to_string(),
                    function: function_at(&lines, i),
                });
            }
        }
    }
    found
}

/// The host crate's directory.
fn host_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `path` from the repository's root, with `/` between its parts.
fn repo_path(path: &Path) -> String {
    let relative = path.strip_prefix(host_dir()).unwrap();
    let parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    format!("host/{}", parts.join("/"))
}

/// Every Rust file under `host/src` and `host/tests`, sorted.
fn all_sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["src", "tests"] {
        rust_files(&host_dir().join(dir), &mut files);
    }
    files.sort();
    files
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The files only tests compile: everything under `host/tests`, files named `tests.rs` or
/// under a `tests` directory, the files of out-of-line modules declared under
/// `#[cfg(test)]`, and the modules those declare in turn.
fn test_files(sources: &[PathBuf]) -> Vec<PathBuf> {
    let tests_dir = host_dir().join("tests");
    let mut test: Vec<PathBuf> = sources
        .iter()
        .filter(|p| {
            p.starts_with(&tests_dir)
                || p.file_name().is_some_and(|n| n == "tests.rs")
                || p.strip_prefix(host_dir())
                    .is_ok_and(|p| p.components().any(|c| c.as_os_str() == "tests"))
        })
        .cloned()
        .collect();
    loop {
        let mut more = Vec::new();
        for path in sources {
            let text = std::fs::read_to_string(path).unwrap();
            let whole = test.contains(path);
            for declared in declared_modules(path, &text, whole) {
                if sources.contains(&declared) && !test.contains(&declared) {
                    more.push(declared);
                }
            }
        }
        if more.is_empty() {
            return test;
        }
        test.extend(more);
    }
}

/// The files of the out-of-line modules `path` declares that only tests compile: those
/// under `#[cfg(test)]` or inside an inline test module, or all of them when `path` is
/// itself test code.
fn declared_modules(path: &Path, text: &str, all: bool) -> Vec<PathBuf> {
    let dir = path.parent().unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    // A module's children sit beside `mod.rs`, `lib.rs` and `main.rs`, and under a
    // directory named as the file otherwise.
    let children = if ["mod.rs", "lib.rs", "main.rs"].contains(&name.as_ref()) {
        dir.to_path_buf()
    } else {
        dir.join(path.file_stem().unwrap())
    };
    let lines: Vec<&str> = text.lines().collect();
    let inline = inline_tests(&lines);
    let mut declared = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(module) = out_of_line_module(line) else {
            continue;
        };
        let attributes = attributes_before(&lines, i);
        let in_inline = inline.filter(|(start, _)| i > *start);
        if !all && in_inline.is_none() && !attributes.iter().any(|a| is_cfg_test(a)) {
            continue;
        }
        let at = attributes.iter().find_map(|a| {
            let value = a.strip_prefix("#[path")?.trim_start().strip_prefix('=')?;
            Some(value.trim().trim_end_matches(']').trim().trim_matches('"'))
        });
        // Inside an inline module, children sit one directory further down; either place
        // is taken, erring towards more test code.
        let mut bases = vec![(dir.to_path_buf(), children.clone())];
        if let Some((_, inline)) = in_inline {
            bases.push((dir.join(inline), children.join(inline)));
        }
        for (dir, children) in bases {
            match at {
                // `#[path]` is relative to the declaring file's directory.
                Some(at) => declared.push(lexical(&dir.join(at))),
                None => {
                    declared.push(children.join(format!("{module}.rs")));
                    declared.push(children.join(module).join("mod.rs"));
                }
            }
        }
    }
    declared
}

/// `path` with its `..` parts resolved against the parts before them.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The attribute lines right above line `i` (comments between them skipped), trimmed.
fn attributes_before<'a>(lines: &[&'a str], i: usize) -> Vec<&'a str> {
    lines[..i]
        .iter()
        .rev()
        .map(|l| l.trim())
        .filter(|l| !l.starts_with("//"))
        .take_while(|l| l.starts_with("#["))
        .collect()
}

/// The line of the `#[cfg(test)]` of the first inline module that only tests compile, and
/// the module's name; from there to the end of the file is taken as test code.
fn inline_tests<'a>(lines: &[&'a str]) -> Option<(usize, &'a str)> {
    (0..lines.len()).find_map(|i| {
        if !is_cfg_test(lines[i].trim()) {
            return None;
        }
        let item = lines[i + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !l.starts_with("#[") && !l.starts_with("//"))?;
        let (name, rest) = module_name(item)?;
        rest.starts_with('{').then_some((i, name))
    })
}

/// Whether an attribute (trimmed) compiles its item only for tests.
fn is_cfg_test(attribute: &str) -> bool {
    attribute.starts_with("#[cfg(")
        && !attribute.contains("not(")
        && attribute
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .any(|word| word == "test")
}

/// `NAME` of a `mod NAME;` line (with any visibility).
fn out_of_line_module(line: &str) -> Option<&str> {
    module_name(line.trim()).and_then(|(name, rest)| rest.starts_with(';').then_some(name))
}

/// The name of a `mod` item (trimmed line, any visibility) and what follows it.
fn module_name(line: &str) -> Option<(&str, &str)> {
    let mut rest = line;
    if let Some(after) = rest.strip_prefix("pub") {
        rest = after.trim_start();
        if rest.starts_with('(') {
            rest = rest[rest.find(')')? + 1..].trim_start();
        }
    }
    let rest = rest.strip_prefix("mod ")?.trim_start();
    let end = rest
        .find(|c: char| !c.is_alphanumeric() && c != '_')
        .unwrap_or(rest.len());
    (end > 0).then(|| (&rest[..end], rest[end..].trim_start()))
}

/// Whether a line of code calls a sleep (`sleep(…)` or `sleep_until(…)`, by any path);
/// comment lines never do.
fn sleeps(line: &str) -> bool {
    const WORD: &str = "sleep";
    if line.trim_start().starts_with("//") {
        return false;
    }
    line.match_indices(WORD).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return false;
        }
        let after = &line[at + WORD.len()..];
        let after = after.strip_prefix("_until").unwrap_or(after);
        after.trim_start().starts_with('(')
    })
}

/// The name of the nearest function declared at or before line `i`.
fn function_at(lines: &[&str], i: usize) -> Option<String> {
    lines[..=i].iter().rev().find_map(|line| {
        if line.trim_start().starts_with("//") {
            return None;
        }
        line.match_indices("fn ").find_map(|(at, _)| {
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                return None;
            }
            let rest = &line[at + 3..];
            let end = rest
                .find(|c: char| !c.is_alphanumeric() && c != '_')
                .unwrap_or(rest.len());
            (end > 0).then(|| rest[..end].to_string())
        })
    })
}

/// What each database backend may define for itself: how it runs the shared transactions
/// (connection set-up, `Backend::{read, write, poke}`, `Tx::{sql, rows, exec, apply}` and
/// its binding of values), the writes its `apply` executes (each a multi-row insert in its
/// dialect: the timeline's entries, numbered or from a given number, a new workflow's
/// steps, the tallies' rows), and how it claims steps (with the share between subjects it
/// holds).
const BACKEND_OWN: &[&str] = &[
    // Running the shared transactions.
    "apply",
    "bind",
    "exec",
    "from",
    "new",
    "on",
    "poke",
    "read",
    "rows",
    "sql",
    "start",
    "watch",
    "write",
    // `Tx::apply`'s writes.
    "add_tallies",
    "append_events",
    "insert_events",
    "insert_steps",
    // The claim (what it takes is `store::claims::ClaimPlan`'s, once; each dialect writes
    // the statement of one pick), and the host's share of claims between subjects it keeps.
    "claim",
    "claim_tx",
    "pick_sql",
    "fairness",
];

#[test]
fn each_store_rule_is_written_once_not_once_per_backend() {
    // A backend's own code: its module (`store/sqlite/`) and its statements beside each
    // concept's (`store/<concept>/sqlite.rs`).
    let store = host_dir().join("src/store");
    let sqlite = functions_under(&store, "sqlite");
    let postgres = functions_under(&store, "postgres");
    let both: Vec<&String> = sqlite.intersection(&postgres).collect();
    let twice: Vec<&&String> = both
        .iter()
        .filter(|f| !BACKEND_OWN.contains(&f.as_str()))
        .collect();
    assert!(
        twice.is_empty(),
        "functions defined by both store backends: {twice:?}; write the rule once over \
         `store::tx::Tx` (a transaction by concept under host/src/store/<concept>/), with \
         only the statements that differ in the backend's module beside it"
    );
}

/// The names of the functions defined in the Rust files under `dir` whose path names
/// `backend` (a directory or a file of that name).
fn functions_under(dir: &Path, backend: &str) -> std::collections::BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.retain(|f| {
        f.strip_prefix(dir).unwrap().components().any(|c| {
            let c = c.as_os_str().to_string_lossy();
            c == backend || c == format!("{backend}.rs")
        })
    });
    let mut names = std::collections::BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let mut words = line.split_whitespace().peekable();
            while let Some(word) = words.next() {
                if word == "fn"
                    && let Some(next) = words.peek()
                {
                    let name: String = next
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        names.insert(name);
                    }
                    break;
                }
                if word.starts_with("//") {
                    break;
                }
            }
        }
    }
    names
}
