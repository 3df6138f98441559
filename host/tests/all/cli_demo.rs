//! `docket demo` as a user runs it: the real binary, its embedded host and simulator, and
//! the story it prints from them.

use crate::host_process::repo_root;
use crate::wait;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A child process killed when dropped unless it already ended, so that a failed wait
/// leaves no demo running.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn the_demo_shows_recovery_by_query_one_delivery_and_review() {
    let dir = tempfile::tempdir().unwrap();
    // Reuse the tests' compiled components so the demo does not compile them again.
    let cache = repo_root().join("target/test-serve-component-cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::symlink(&cache, dir.path().join("components")).unwrap();
    let stdout = dir.path().join("stdout.txt");
    let stderr = dir.path().join("stderr.txt");
    let child = Command::new(env!("CARGO_BIN_EXE_docket"))
        .args(["demo", "--dir", dir.path().to_str().unwrap()])
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let status = wait::until_blocking(
        "docket demo ending within a minute",
        Duration::from_secs(60),
        || {
            child
                .0
                .try_wait()
                .unwrap()
                .ok_or_else(|| std::fs::read_to_string(&stdout).unwrap_or_default())
        },
    );
    let out = std::fs::read_to_string(&stdout).unwrap();
    let err = std::fs::read_to_string(&stderr).unwrap();
    assert!(status.success(), "{status}\n{out}\n{err}");

    let (lost, rest) = out
        .split_once("\n2. ")
        .unwrap_or_else(|| panic!("the demo has no second part:\n{out}"));
    let (fire_and_forget, observed) = rest
        .split_once("\n3. ")
        .unwrap_or_else(|| panic!("the demo has no third part:\n{out}"));
    // Part 1: the host's own timeline tells the recovery by query; the provider holds one.
    for text in [
        "Workflow state: completed",
        "evidence query for dlv_",
        "query by the stable reference",
        "Lookup by reference found dlv_",
        "verified by query",
        "trigger recovery_query",
        "record holds 1 delivery for this intent",
    ] {
        assert!(lost.contains(text), "part 1 lacks {text:?}:\n{out}");
    }
    // Part 2: fire-and-forget ends in review and nothing retries it.
    for text in [
        "Workflow state: needs_review",
        "step `deliver`: outcome_unknown",
        "needs review, no automatic retry",
        "1 attempt (was 1)",
        "record holds 1 delivery for this intent",
    ] {
        assert!(
            fire_and_forget.contains(text),
            "part 2 lacks {text:?}:\n{out}"
        );
    }
    // Part 3: the same adapter, and the provider's own event settles it without a person.
    for text in [
        "Workflow state: completed",
        "evidence observation for dlv_",
        "Settled by the provider's event",
        "record holds 1 delivery for this intent",
        "recorded 3 deliveries for 3 intents",
    ] {
        assert!(observed.contains(text), "part 3 lacks {text:?}:\n{out}");
    }
}
