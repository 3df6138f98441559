//! `docket scenario`: the shipped scenarios pass through the real binary (and JUnit reports
//! them), a failing case exits non-zero telling its assertion, timeline and world record,
//! and invalid scenario files get golden `file:line:col` diagnostics
//! (`tests/scenario_ui/<name>.toml` against `<name>.err`; `DOCKET_BLESS=1` rewrites them).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `docket scenario run ARGS…` in the repository root: exit success, stdout, stderr.
fn scenario_run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_docket"))
        .current_dir(repo_root())
        .args(["scenario", "run"])
        .args(args)
        .output()
        .expect("docket runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_shipped_scenarios_pass_and_junit_lists_each_case() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("scenarios.xml");
    let (ok, stdout, stderr) = scenario_run(&["--junit", junit.to_str().unwrap()]);
    assert!(ok, "{stdout}\n{stderr}");
    let shipped = std::fs::read_dir(repo_root().join("scenarios"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "toml")
        })
        .count();
    assert!(shipped >= 12, "{shipped} shipped scenarios");
    assert!(
        stdout.contains(&format!("{shipped} cases: {shipped} passed, 0 failed")),
        "{stdout}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), shipped, "{xml}");
    assert!(xml.contains("failures=\"0\""), "{xml}");
    for name in [
        "core-lost-answer-recovered-by-query",
        "fire-and-forget-lost-answer-waits-for-a-person",
        "failover-accepted-then-down-stops-for-a-manual-check",
        "retention-passes-while-paused",
        "cancellation-races-an-accepted-effect",
    ] {
        assert!(stdout.contains(&format!("PASS  {name}")), "{stdout}");
    }
}

/// A scenario whose expectation does not hold: exit status 1, the assertion, the timeline
/// and the world record; a `checkpoint = "each"` kill runs once per checkpoint.
#[test]
fn a_failing_case_tells_its_assertion_timeline_and_world() {
    let dir = tempfile::tempdir().unwrap();
    let core = std::fs::read_to_string(
        repo_root().join("scenarios/core-lost-answer-recovered-by-query.toml"),
    )
    .unwrap();
    let wrong = core
        .replace("effects = 1", "effects = 2")
        .replace("checkpoint = 4", "checkpoint = \"each\"");
    assert_ne!(wrong, core);
    let file = dir.path().join("wrong.toml");
    std::fs::write(&file, wrong).unwrap();
    let (ok, stdout, stderr) = scenario_run(&[file.to_str().unwrap()]);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("6 cases: 0 passed, 6 failed"), "{stdout}");
    for n in 1..=6 {
        assert!(
            stdout.contains(&format!("FAIL  wrong [checkpoint {n}]")),
            "{stdout}"
        );
    }
    assert!(
        stdout.contains("the world holds 1 effects of this intent, expected 2"),
        "{stdout}"
    );
    assert!(stdout.contains("timeline of intent 1:"), "{stdout}");
    assert!(
        stdout.contains("Request recorded: document-delivery"),
        "{stdout}"
    );
    assert!(stdout.contains("the world record:"), "{stdout}");
    assert!(stdout.contains("\"route\": \"create\""), "{stdout}");
    assert!(
        stdout.contains("host-1 killed after checkpoint 4 of `deliver`"),
        "{stdout}"
    );
}

/// A deployer's activation during a run: the next attempt runs the new version where the
/// definition's requirement allows it, and the version it asked for where it does not
/// (`host/tests/scenarios/`, with http-delivery 2.0.0 loaded by `--components`).
#[test]
fn an_activation_during_a_run_moves_only_what_the_requirement_allows() {
    let dir = tempfile::tempdir().unwrap();
    for f in files(&repo_root().join("workflows"), "toml") {
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let any = std::fs::read_to_string(repo_root().join("workflows/document-delivery.toml"))
        .unwrap()
        .replace(
            "name = \"document-delivery\"",
            "name = \"delivery-any-version\"",
        )
        .replace("version = \"^1\"", "version = \">=1\"");
    assert!(any.contains(">=1") && any.contains("delivery-any-version"));
    std::fs::write(dir.path().join("delivery-any-version.toml"), any).unwrap();
    let v2 = docket::guests::path("http-delivery-2").unwrap();
    let (ok, stdout, stderr) = scenario_run(&[
        "host/tests/scenarios",
        "--workflows",
        dir.path().to_str().unwrap(),
        "--components",
        v2,
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("2 cases: 2 passed, 0 failed"), "{stdout}");
    for name in [
        "activation-between-attempts",
        "activation-outside-the-requirement",
    ] {
        assert!(stdout.contains(&format!("PASS  {name}")), "{stdout}");
    }
    // The same scenario without version 2 loaded is refused before it runs, naming what is.
    let (ok, stdout, stderr) = scenario_run(&[
        "host/tests/scenarios/activation-outside-the-requirement.toml",
        "--workflows",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("no version 2.0.0 of `http-delivery` is loaded"),
        "{stderr}"
    );
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    out
}

#[test]
fn scenario_errors_match_golden_files() {
    let bless = std::env::var("DOCKET_BLESS").is_ok_and(|v| v == "1");
    let definitions = docket::scenario::definitions_in(&repo_root().join("workflows")).unwrap();
    let defs = definitions
        .iter()
        .map(|(k, (_, _, d))| (k.clone(), d.clone()))
        .collect();
    let components: Vec<(String, String)> = [
        "http-delivery",
        "http-delivery-query-only",
        "http-delivery-fire-and-forget",
        "render-document",
        "validate-document",
    ]
    .map(|n| (n.to_string(), "1.0.0".to_string()))
    .to_vec();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scenario_ui");
    let cases = files(&dir, "toml");
    assert!(cases.len() >= 5, "{cases:?}");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let shown = format!("tests/scenario_ui/{name}");
        let source = std::fs::read_to_string(case).unwrap();
        let actual = match docket::scenario::parse(&shown, &source, &defs, &components) {
            Ok(_) => {
                failures.push(format!("{shown}: expected errors, but it checked clean"));
                continue;
            }
            Err(d) => d.to_string(),
        };
        let golden = case.with_extension("err");
        if bless {
            std::fs::write(&golden, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if actual != expected {
            failures.push(format!(
                "{shown}: diagnostics differ\n--- expected\n{expected}--- actual\n{actual}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\n(set DOCKET_BLESS=1 to accept the new output)",
        failures.join("\n\n")
    );
}

/// `docket scenario run` on an invalid file prints the diagnostic and exits non-zero.
#[test]
fn an_invalid_scenario_file_is_a_located_error() {
    let (ok, stdout, stderr) = scenario_run(&["host/tests/scenario_ui/unknown_workflow.toml"]);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("host/tests/scenario_ui/unknown_workflow.toml:1:12"),
        "{stderr}"
    );
    assert!(
        stderr.contains("did you mean `document-delivery`?"),
        "{stderr}"
    );
    assert!(stdout.contains("1 scenario files are invalid"), "{stdout}");
}

/// `docket scenario explore ARGS…` in the repository root: exit success and stdout+stderr.
fn explore(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_docket"))
        .current_dir(repo_root())
        .args(["scenario", "explore"])
        .args(args)
        .output()
        .expect("docket runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// docket's own deterministic-simulation test: seeded fault schedules over the shipped
/// workflows — both contract kinds and the query-less one — break no invariant. Each
/// workflow's exploration is bounded by a time budget so CI stays bounded on a slow machine.
#[test]
fn exploring_the_shipped_workflows_breaks_no_invariant() {
    let mut explored = 0;
    for workflow in [
        "document-delivery",
        "document-delivery-query-only",
        "document-delivery-fire-and-forget",
    ] {
        let (ok, out) = explore(&[workflow, "--seeds", "200", "--budget", "100s"]);
        assert!(ok, "{out}");
        let ran: u64 = out
            .lines()
            .find(|l| l.contains(" schedules of "))
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no summary: {out}"));
        assert!(
            out.contains(&format!("schedules of {workflow} explored from seed 0")),
            "{out}"
        );
        assert!(out.contains(": 0 broke an invariant"), "{out}");
        explored += ran;
    }
    assert!(
        explored >= 500,
        "only {explored} schedules ran within the budget"
    );
}

/// A deliberately broken host — it retries an unknown outcome without asking the contract —
/// is caught within 200 seeds, and the replay command printed for the failing seed
/// reproduces the failure.
#[test]
fn a_broken_host_is_caught_and_its_seed_replays() {
    let (ok, out) = explore(&[
        "document-delivery-fire-and-forget",
        "--seeds",
        "200",
        "--broken-host",
        "blind-retry",
    ]);
    assert!(!ok, "{out}");
    assert!(out.contains("effects of one intent"), "{out}");
    let replay = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: docket scenario explore "))
        .unwrap_or_else(|| panic!("no replay command: {out}"))
        .to_string();
    let mut args: Vec<&str> = replay.split_whitespace().collect();
    args.extend(["--broken-host", "blind-retry"]);
    let (ok, again) = explore(&args);
    assert!(!ok, "{again}");
    assert!(again.contains("1 schedules of"), "{again}");
    assert!(again.contains(": 1 broke an invariant"), "{again}");
    // The same seed injects the same schedule.
    let schedule = |text: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.contains("its schedule:"))
            .skip(1)
            .take_while(|l| l.trim_start().starts_with("- "))
            .map(str::to_string)
            .collect()
    };
    let seed = args[2];
    let first_report: String = out
        .split(&format!("seed {seed} broke an invariant:"))
        .nth(1)
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        schedule(&first_report),
        schedule(&again),
        "{out}\n---\n{again}"
    );
    // Kept as a regression seed, it runs first however the range is chosen.
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("seeds.toml");
    std::fs::write(
        &kept,
        format!(
            "[[seed]]\nworkflow = \"document-delivery-fire-and-forget\"\nseed = {seed}\nbroke = \"a blind retry made a second delivery\"\n\n[[seed]]\nworkflow = \"document-delivery\"\nseed = 7\nbroke = \"another workflow's: not run here\"\n"
        ),
    )
    .unwrap();
    let (ok, kept_run) = explore(&[
        "document-delivery-fire-and-forget",
        "--from",
        "100000",
        "--seeds",
        "0",
        "--regressions",
        kept.to_str().unwrap(),
        "--broken-host",
        "blind-retry",
    ]);
    assert!(!ok, "{kept_run}");
    assert!(
        kept_run.contains(&format!("seed {seed} broke an invariant:")),
        "{kept_run}"
    );
    assert!(
        kept_run.contains("1 schedules of document-delivery-fire-and-forget explored from seed 100000 and 1 regression seeds"),
        "{kept_run}"
    );
    assert!(kept_run.contains("add [[seed]]"), "{kept_run}");
}

/// The same seeds explored twice write the same trace, byte for byte — the injected
/// schedule, every final projection (ids drawn from the seeded source) and the world record
/// — on SQLite, with schedules that run several hosts on the store among them.
#[test]
fn the_same_seeds_give_the_same_trace_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let mut traces = Vec::new();
    for n in 0..2 {
        let path = dir.path().join(format!("trace-{n}.jsonl"));
        let (ok, out) = explore(&[
            "document-delivery",
            "--seeds",
            "60",
            "--trace",
            path.to_str().unwrap(),
        ]);
        assert!(ok, "{out}");
        traces.push(std::fs::read(&path).unwrap());
    }
    let text = String::from_utf8(traces[0].clone()).unwrap();
    // The 60 seeds, after the workflow's kept regression seeds.
    assert!(text.lines().count() >= 60, "{}", text.lines().count());
    assert!(
        text.contains("hosts share the store"),
        "no multi-host schedule"
    );
    assert!(text.contains("\"workflow_id\":\"wf_"), "{text}");
    if traces[0] != traces[1] {
        let second = String::from_utf8_lossy(&traces[1]).into_owned();
        let differ = text
            .lines()
            .zip(second.lines())
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("{a}\n---\n{b}"))
            .unwrap_or_default();
        panic!("the traces differ:\n{differ}");
    }
}
