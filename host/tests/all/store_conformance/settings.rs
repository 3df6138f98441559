//! The database's own settings: the environment recorded by the first host, refused to
//! another unless adopted, copied into each workflow at admission so its idempotency keys
//! are derived in it for good.

use super::backends::Store;
use super::fixtures::{claim, finish_request, retry, succeed, workflow};
use docket::intent::{Millis, Trigger, WorkflowId};
use docket::store::{Claimed, EnvironmentRecord, StoreError};

const T0: Millis = 1_800_000_000_000;

pub async fn the_environment_is_recorded_once_and_moved_only_when_adopted<S: Store>(s: S) {
    // Admitted before any host recorded an environment: its keys keep the earlier
    // derivation (no environment).
    let before = workflow(&s, "before", &[("deliver", &[])], T0).await;
    assert_eq!(s.environment().await.unwrap(), None);
    let record = |env: &str, adopt: bool, at: Millis| {
        let s = s.clone();
        let env = env.to_string();
        async move { s.record_environment(env, adopt, "host-a".into(), at).await }
    };
    assert_eq!(
        record("staging", false, T0 + 1).await.unwrap(),
        EnvironmentRecord::First
    );
    assert_eq!(
        record("staging", false, T0 + 2).await.unwrap(),
        EnvironmentRecord::Same
    );
    let staged = workflow(&s, "staged", &[("deliver", &[])], T0 + 3).await;

    // Another environment is refused, naming both, and nothing changes.
    match record("production", false, T0 + 4).await {
        Err(StoreError::EnvironmentChanged {
            recorded,
            configured,
        }) => assert_eq!(
            (recorded.as_str(), configured.as_str()),
            ("staging", "production")
        ),
        other => panic!("expected EnvironmentChanged, got {other:?}"),
    }
    assert_eq!(s.environment().await.unwrap().as_deref(), Some("staging"));

    // Each claim carries its own workflow's environment.
    let claims = claim(&s, "w1", T0 + 5, 10).await;
    assert_eq!(environment_of(&claims, &before), None);
    assert_eq!(environment_of(&claims, &staged).as_deref(), Some("staging"));
    let (done, again) = if claims[0].fence.workflow_id == before {
        (&claims[0], &claims[1])
    } else {
        (&claims[1], &claims[0])
    };
    succeed(&s, done, T0 + 6).await;
    s.finish(finish_request(
        again,
        retry(T0 + 6, Trigger::Retry, None),
        T0 + 6,
    ))
    .await
    .unwrap();

    // Told to adopt: the database moves, and the one unfinished workflow is told.
    assert_eq!(
        record("production", true, T0 + 7).await.unwrap(),
        EnvironmentRecord::Adopted {
            from: "staging".into(),
            workflows: 1
        }
    );
    assert_eq!(
        s.environment().await.unwrap().as_deref(),
        Some("production")
    );
    let adopted = |id| {
        let s = s.clone();
        async move {
            s.timeline(&id, 0, 1_000)
                .await
                .unwrap()
                .iter()
                .filter(|e| {
                    e.text
                        .contains("adopted this database for environment `production`")
                })
                .count()
        }
    };
    assert_eq!(adopted(staged.clone()).await, 1);
    assert_eq!(
        adopted(before.clone()).await,
        0,
        "an ended workflow is not touched"
    );

    // The staged workflow keeps its environment; a new one takes the adopted one.
    let later = workflow(&s, "later", &[("deliver", &[])], T0 + 8).await;
    let claims = claim(&s, "w1", T0 + 9, 10).await;
    assert_eq!(environment_of(&claims, &staged).as_deref(), Some("staging"));
    assert_eq!(
        environment_of(&claims, &later).as_deref(),
        Some("production")
    );
}

/// The environment the claim of `id`'s step carries.
fn environment_of(claims: &[Claimed], id: &WorkflowId) -> Option<String> {
    claims
        .iter()
        .find(|c| c.fence.workflow_id == *id)
        .map(|c| c.environment.clone())
        .expect("claimed")
}
