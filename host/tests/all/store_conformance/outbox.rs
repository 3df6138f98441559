//! The notification outbox: a row per meaningful transition written with it, claimed by one
//! host at a time under a lease, settled in a batch only by its holder, expired when no
//! host took it within the window, and pruned after its retention.

use super::backends::Store;
use super::fixtures::{claim, succeed, workflow};
use docket::store::{NotificationFilter, NotificationUpdate};

const T0: u64 = 1_800_000_000_000;
const DAY: u64 = 24 * 3_600_000;

fn all() -> NotificationFilter {
    NotificationFilter {
        limit: 100,
        ..Default::default()
    }
}

pub async fn notifications_are_claimed_once_settled_by_their_holder_and_pruned<S: Store>(s: S) {
    let id = workflow(&s, "n", &[("only", &[])], T0).await;
    // Admission wrote `workflow.recorded`, with its body fixed then.
    let rows = s.notifications(all()).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0].kind, "workflow.recorded");
    assert_eq!(rows[0].state, "pending");
    let body: serde_json::Value = serde_json::from_str(&rows[0].body).unwrap();
    assert_eq!(body["id"], rows[0].id.as_str());
    assert_eq!(body["workflow_id"], id.as_str());
    assert_eq!(body["workflow"]["state"], "running");

    // The completion writes `workflow.completed` in its transaction.
    let c = claim(&s, "w", T0 + 1, 1).await;
    succeed(&s, &c[0], T0 + 2).await;
    let rows = s.notifications(all()).await.unwrap();
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds, ["workflow.recorded", "workflow.completed"]);
    assert!(rows[1].revision > rows[0].revision);

    // One holder at a time: a second host finds nothing while the lease lives.
    let a = s
        .claim_notifications("a", T0 + 3, 60_000, 10)
        .await
        .unwrap();
    assert_eq!(a.len(), 2);
    let b = s
        .claim_notifications("b", T0 + 4, 60_000, 10)
        .await
        .unwrap();
    assert!(b.is_empty(), "{b:#?}");
    // Only the holder settles; a stranger's settlement is ignored.
    let stranger = s
        .settle_notifications(
            "b",
            vec![(
                a[0].seq,
                NotificationUpdate::Suppressed {
                    reason: "no".into(),
                },
            )],
            T0 + 5,
        )
        .await
        .unwrap();
    assert_eq!(stranger, 0);
    let settled = s
        .settle_notifications(
            "a",
            vec![
                (
                    a[0].seq,
                    NotificationUpdate::Delivered {
                        delivered_to: vec!["http://hooks/".into()],
                    },
                ),
                (
                    a[1].seq,
                    NotificationUpdate::Retry {
                        next_at: T0 + 10_000,
                        error: "answered 500".into(),
                        delivered_to: vec![],
                        attempted: true,
                    },
                ),
            ],
            T0 + 6,
        )
        .await
        .unwrap();
    assert_eq!(settled, 2);
    let delivered = s
        .notifications(NotificationFilter {
            state: Some("delivered".into()),
            ..all()
        })
        .await
        .unwrap();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].delivered_to, ["http://hooks/"]);
    assert_eq!(delivered[0].attempts, 1);
    // The retry is due again at its time, to any host.
    assert!(
        s.claim_notifications("b", T0 + 9_999, 60_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let again = s
        .claim_notifications("b", T0 + 10_000, 60_000, 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempts, 1);
    assert_eq!(again[0].last_error.as_deref(), Some("answered 500"));

    // Nothing taken within the window (its lease lapsed) is recorded failed.
    let expired = s.expire_notifications(T0 + 3, T0 + DAY, 100).await.unwrap();
    assert_eq!(expired, 1);
    let failed = s
        .notifications(NotificationFilter {
            state: Some("failed".into()),
            workflow_id: Some(id.clone()),
            ..all()
        })
        .await
        .unwrap();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0]
            .last_error
            .as_deref()
            .unwrap()
            .contains("24 hours")
    );

    // Pruning takes finished rows past the retention, in bounded batches.
    assert_eq!(s.prune_notifications(T0, 100).await.unwrap(), 0);
    assert_eq!(s.prune_notifications(T0 + 2 * DAY, 1).await.unwrap(), 1);
    assert_eq!(s.prune_notifications(T0 + 2 * DAY, 100).await.unwrap(), 1);
    assert!(s.notifications(all()).await.unwrap().is_empty());
}
