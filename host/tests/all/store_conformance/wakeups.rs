//! What an idle scheduler needs: the next deadline, wake-ups from other hosts, and the
//! component bytes any host may need to run a step.

use super::backends::Store;
use super::fixtures::*;
use docket::intent::{StepState, Trigger};
use docket::store::{ActiveChange, ActiveTarget, NewComponent, StoreError, Verification};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

pub async fn next_due_names_the_earliest_retry_time_or_lease_expiry<S: Store>(s: S) {
    assert_eq!(s.next_due(T0).await.unwrap(), None, "an empty store");
    workflow(&s, "a", &[("only", &[])], T0).await;
    workflow(&s, "b", &[("only", &[])], T0).await;
    // Ready now: claimable, not a future deadline.
    assert_eq!(s.next_due(T0).await.unwrap(), None);

    let claimed = claim(&s, "w1", T0 + 10, 10).await;
    assert_eq!(claimed.len(), 2);
    // Both leased: due when the first lease runs out.
    assert_eq!(
        s.next_due(T0 + 10).await.unwrap(),
        Some(T0 + 10 + LEASE + 1)
    );
    // One scheduled to retry before that.
    s.finish(finish_request(
        &claimed[0],
        retry(T0 + 500, Trigger::Retry, None),
        T0 + 20,
    ))
    .await
    .unwrap();
    assert_eq!(s.next_due(T0 + 20).await.unwrap(), Some(T0 + 500));
    // Past the retry time it is claimable, no longer a deadline ahead.
    assert_eq!(
        s.next_due(T0 + 600).await.unwrap(),
        Some(T0 + 10 + LEASE + 1)
    );
    end(&s, &claimed[1], StepState::FailedTerminal, T0 + 700).await;
    assert_eq!(s.next_due(T0 + 700).await.unwrap(), None);
}

pub async fn admissions_wake_the_hosts_that_watch<S: Store>(s: S) {
    let wake = Arc::new(Notify::new());
    let hears_others = s.watch(wake.clone()).await.unwrap();
    // One host per database (SQLite): nobody else writes, so there is nothing to hear and
    // the store says so; PostgreSQL serves many hosts and must listen.
    let many_hosts = std::any::type_name::<S>().ends_with("PgStore");
    assert_eq!(
        hears_others,
        many_hosts,
        "watch on {}",
        std::any::type_name::<S>()
    );
    if !hears_others {
        return;
    }
    workflow(&s, "a", &[("only", &[])], T0).await;
    tokio::time::timeout(Duration::from_secs(10), wake.notified())
        .await
        .expect("the admission's notification wakes the watcher");
}

pub async fn component_bytes_are_kept_once_per_digest<S: Store>(s: S) {
    let component = |digest: &str, version: &str, bytes: &[u8]| NewComponent {
        digest: digest.into(),
        name: "http-delivery".into(),
        version: version.into(),
        kind: "adapter".into(),
        bytes: bytes.to_vec(),
        registered_at: T0,
        author: "deployer".into(),
    };
    assert!(s.stored_components().await.unwrap().is_empty());
    assert!(
        s.store_component(component("sha256:aa", "1.0.0", b"\0asm one"))
            .await
            .unwrap()
    );
    assert!(
        !s.store_component(component("sha256:aa", "1.0.0", b"\0asm one"))
            .await
            .unwrap(),
        "the same digest again is a no-op"
    );
    assert!(
        s.store_component(component("sha256:bb", "2.0.0", &[0, 159, 146, 150]))
            .await
            .unwrap()
    );
    let stored = s.stored_components().await.unwrap();
    assert_eq!(
        stored
            .iter()
            .map(|c| (c.digest.as_str(), c.version.as_str(), c.size_bytes))
            .collect::<Vec<_>>(),
        [("sha256:aa", "1.0.0", 8), ("sha256:bb", "2.0.0", 4)]
    );
    assert_eq!(
        s.component_bytes("sha256:bb").await.unwrap().as_deref(),
        Some(&[0u8, 159, 146, 150][..])
    );
    assert_eq!(s.component_bytes("sha256:cc").await.unwrap(), None);
}

/// Stores each `(digest, version)` as a version of the adapter `http-delivery`.
async fn store_versions<S: Store>(s: &S, versions: &[(&str, &str)]) {
    for (digest, version) in versions {
        s.store_component(NewComponent {
            digest: (*digest).into(),
            name: "http-delivery".into(),
            version: (*version).into(),
            kind: "adapter".into(),
            bytes: vec![1, 2, 3],
            registered_at: T0,
            author: "alice".into(),
        })
        .await
        .unwrap();
    }
}

pub async fn the_registry_activates_rolls_back_and_keeps_its_history<S: Store>(s: S) {
    store_versions(&s, &[("sha256:v1", "1.0.0"), ("sha256:v2", "2.0.0")]).await;
    let change = |target: ActiveTarget, author: &str, at: u64| ActiveChange {
        name: "http-delivery".into(),
        target,
        author: author.into(),
        now: T0 + at,
    };
    assert!(s.active_components().await.unwrap().is_empty());
    // Rollback with nothing active names what is missing.
    match s.set_active(change(ActiveTarget::Previous, "ops", 1)).await {
        Err(StoreError::NotFound(what)) => assert!(what.contains("to roll back from"), "{what}"),
        other => panic!("{other:?}"),
    }
    // A first registration activates; a second one leaves the choice alone.
    let first = s
        .set_active(change(
            ActiveTarget::IfNone("sha256:v1".into()),
            "host a",
            2,
        ))
        .await
        .unwrap();
    assert!(first.changed);
    assert_eq!(first.active.version, "1.0.0");
    let second = s
        .set_active(change(
            ActiveTarget::IfNone("sha256:v2".into()),
            "host b",
            3,
        ))
        .await
        .unwrap();
    assert!(!second.changed);
    assert_eq!(second.active.digest, "sha256:v1");
    // Activate 2.0.0, then roll back to 1.0.0.
    let up = s
        .set_active(change(ActiveTarget::Digest("sha256:v2".into()), "ops", 4))
        .await
        .unwrap();
    assert_eq!(
        (up.active.version.as_str(), up.previous.as_deref()),
        ("2.0.0", Some("sha256:v1"))
    );
    let active = s.active_components().await.unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(
        (active[0].digest.as_str(), active[0].since),
        ("sha256:v2", T0 + 4)
    );
    let back = s
        .set_active(change(ActiveTarget::Previous, "ops", 5))
        .await
        .unwrap();
    assert_eq!(back.active.digest, "sha256:v1");
    // An unknown digest (or one of another name) is refused and changes nothing.
    match s
        .set_active(change(ActiveTarget::Digest("sha256:nope".into()), "ops", 6))
        .await
    {
        Err(StoreError::NotFound(what)) => assert!(what.contains("sha256:nope"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.active_components().await.unwrap()[0].digest, "sha256:v1");
    let history: Vec<(String, String, String)> = s
        .component_events(Some("http-delivery"), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.action, e.version, e.author))
        .collect();
    let expect = |a: &str, v: &str, who: &str| (a.to_string(), v.to_string(), who.to_string());
    assert_eq!(
        history,
        [
            expect("rolled_back", "1.0.0", "ops"),
            expect("activated", "2.0.0", "ops"),
            expect("activated", "1.0.0", "host a"),
            expect("deployed", "2.0.0", "alice"),
            expect("deployed", "1.0.0", "alice"),
        ]
    );
    assert!(
        s.component_events(Some("other"), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn the_latest_verification_of_each_component_is_kept<S: Store>(s: S) {
    let verification = |digest: &str, passed: bool, at: u64| docket::store::Verification {
        digest: digest.into(),
        name: "http-delivery".into(),
        version: if digest == "sha256:v1" {
            "1.0.0"
        } else {
            "2.0.0"
        }
        .into(),
        passed,
        verdicts: vec![
            (
                "idempotency".into(),
                if passed { "held" } else { "failed" }.into(),
            ),
            ("query".into(), "held".into()),
        ],
        author: "ci".into(),
        verified_at: T0 + at,
    };
    assert!(s.verifications().await.unwrap().is_empty());
    s.record_verification(verification("sha256:v1", false, 1))
        .await
        .unwrap();
    s.record_verification(verification("sha256:v1", true, 2))
        .await
        .unwrap();
    s.record_verification(verification("sha256:v2", false, 3))
        .await
        .unwrap();
    let latest = s.verifications().await.unwrap();
    assert_eq!(latest.len(), 2);
    assert_eq!(
        (
            latest[0].digest.as_str(),
            latest[0].passed,
            latest[0].verified_at
        ),
        ("sha256:v1", true, T0 + 2)
    );
    assert_eq!(latest[0].verdicts[0], ("idempotency".into(), "held".into()));
    assert_eq!(
        (latest[1].digest.as_str(), latest[1].passed),
        ("sha256:v2", false)
    );
}

/// Once the database requires verified versions, every activation — by digest, a rollback,
/// or a first registration — needs the version's latest verdict to have passed; the
/// versions active when the rule came into force are recorded as grandfathered and keep
/// running, never counted as verified; a later failing verdict revokes a passing one.
pub async fn activations_need_a_passing_verdict_once_the_database_requires_it<S: Store>(s: S) {
    store_versions(
        &s,
        &[
            ("sha256:v1", "1.0.0"),
            ("sha256:v2", "2.0.0"),
            ("sha256:v3", "3.0.0"),
        ],
    )
    .await;
    let change = |target: ActiveTarget, at: u64| ActiveChange {
        name: "http-delivery".into(),
        target,
        author: "ops".into(),
        now: T0 + at,
    };
    let verdict = |digest: &str, version: &str, passed: bool, at: u64| Verification {
        digest: digest.into(),
        name: "http-delivery".into(),
        version: version.into(),
        passed,
        verdicts: vec![(
            "idempotency".into(),
            if passed { "held" } else { "failed" }.into(),
        )],
        author: "ops".into(),
        verified_at: T0 + at,
    };
    let refused = |r: Result<docket::store::ActiveOutcome, StoreError>, version: &str| match r {
        Err(StoreError::Unverified { version: v, .. }) => assert_eq!(v, version),
        other => panic!("{version} must need a verdict: {other:?}"),
    };
    // Without the rule, anything may be activated.
    s.set_active(change(ActiveTarget::IfNone("sha256:v1".into()), 1))
        .await
        .unwrap();
    // The rule comes into force: v1, active and never verified, is grandfathered.
    let grandfathered = s
        .require_verified(true, "host a".into(), T0 + 2)
        .await
        .unwrap();
    assert_eq!(
        grandfathered
            .iter()
            .map(|a| a.version.as_str())
            .collect::<Vec<_>>(),
        ["1.0.0"]
    );
    let verdicts = s.verifications().await.unwrap();
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert!(!verdicts[0].passed, "grandfathered is never verified");
    assert_eq!(verdicts[0].verdicts[0].0, "grandfathered");
    // Again: nothing new to grandfather.
    assert!(
        s.require_verified(true, "host b".into(), T0 + 3)
            .await
            .unwrap()
            .is_empty()
    );

    refused(
        s.set_active(change(ActiveTarget::Digest("sha256:v2".into()), 4))
            .await,
        "2.0.0",
    );
    s.record_verification(verdict("sha256:v2", "2.0.0", true, 5))
        .await
        .unwrap();
    s.set_active(change(ActiveTarget::Digest("sha256:v2".into()), 6))
        .await
        .unwrap();
    // Back to the grandfathered version: it was never verified.
    refused(
        s.set_active(change(ActiveTarget::Previous, 7)).await,
        "1.0.0",
    );
    // A later failing verdict revokes v3's passing one.
    s.record_verification(verdict("sha256:v3", "3.0.0", true, 8))
        .await
        .unwrap();
    s.record_verification(verdict("sha256:v3", "3.0.0", false, 9))
        .await
        .unwrap();
    refused(
        s.set_active(change(ActiveTarget::Digest("sha256:v3".into()), 10))
            .await,
        "3.0.0",
    );
    assert_eq!(s.active_components().await.unwrap()[0].version, "2.0.0");

    // Turned off, the rule no longer applies.
    s.require_verified(false, "host c".into(), T0 + 11)
        .await
        .unwrap();
    s.set_active(change(ActiveTarget::Digest("sha256:v3".into()), 12))
        .await
        .unwrap();
}
