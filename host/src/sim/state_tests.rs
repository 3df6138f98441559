//! Protocol decisions of [`World`] without sockets: a fixed clock, plain calls.

use super::*;
use serde_json::json;

const T0: Duration = Duration::from_secs(1_700_000_000);

fn at(offset_ms: u64) -> SystemTime {
    UNIX_EPOCH + T0 + Duration::from_millis(offset_ms)
}

fn world(faults: Faults) -> World {
    World::new(faults, Duration::from_secs(24 * 3600))
}

fn body(reference: &str, recipient: &str) -> Vec<u8> {
    json!({
        "client_reference": reference,
        "recipient": recipient,
        "document_digest": "sha256:00",
        "document": "hello",
    })
    .to_string()
    .into_bytes()
}

fn post(world: &mut World, key: Option<&str>, body: &[u8], now: SystemTime) -> CreateDecision {
    world.create(
        CreateRequest {
            idempotency_key: key,
            body,
        },
        now,
    )
}

#[test]
fn create_then_replay_then_conflict() {
    let mut w = world(Faults::default());
    let first = post(&mut w, Some("k1"), &body("r1", "a@b"), at(0));
    let CreateOutcome::Created(accepted) = first.outcome else {
        panic!("expected created, got {first:?}");
    };
    assert_eq!(accepted.id, "dlv_1");
    // Same body with keys in another order and other whitespace is a replay.
    let reordered = br#"{ "document": "hello", "document_digest": "sha256:00",
        "recipient": "a@b", "client_reference": "r1" }"#;
    let replay = post(&mut w, Some("k1"), reordered, at(1));
    assert_eq!(replay.outcome, CreateOutcome::Replayed(accepted));
    let conflict = post(&mut w, Some("k1"), &body("r1", "c@d"), at(2));
    assert_eq!(conflict.outcome, CreateOutcome::KeyReused);
    assert_eq!(w.deliveries().len(), 1);
}

#[test]
fn bad_bodies_and_recipients_create_nothing() {
    let mut w = world(Faults::default());
    for recipient in ["", "nobody", "   "] {
        let d = post(&mut w, Some(recipient), &body("r", recipient), at(0));
        assert_eq!(d.outcome, CreateOutcome::InvalidRecipient);
    }
    let d = post(&mut w, None, b"{not json", at(0));
    assert!(
        matches!(d.outcome, CreateOutcome::BadRequest { .. }),
        "{d:?}"
    );
    let d = post(&mut w, None, br#"{"recipient": "a@b"}"#, at(0));
    let CreateOutcome::BadRequest { message } = d.outcome else {
        panic!("expected bad request, got {d:?}");
    };
    assert!(message.contains("client_reference"), "{message}");
    assert!(w.deliveries().is_empty());
}

#[test]
fn key_expires_after_retention() {
    let mut w = World::new(Faults::default(), Duration::from_secs(10));
    post(&mut w, Some("k"), &body("r", "a@b"), at(0));
    let again = post(&mut w, Some("k"), &body("r", "a@b"), at(9_999));
    assert!(matches!(again.outcome, CreateOutcome::Replayed(_)));
    let later = post(&mut w, Some("k"), &body("r", "a@b"), at(10_000));
    assert!(matches!(later.outcome, CreateOutcome::Created(_)));
    assert_eq!(w.deliveries().len(), 2);
}

#[test]
fn idempotency_off_ignores_the_key() {
    let mut w = world(Faults {
        idempotency: false,
        ..Faults::default()
    });
    post(&mut w, Some("k"), &body("r", "a@b"), at(0));
    let second = post(&mut w, Some("k"), &body("r", "a@b"), at(1));
    assert!(matches!(second.outcome, CreateOutcome::Created(_)));
    assert_eq!(w.deliveries().len(), 2);
}

#[test]
fn infrastructure_faults_create_nothing_and_count_down() {
    let mut w = world(Faults {
        unavailable_next: 1,
        rate_limit_next: 1,
        retry_after_s: 7,
        ..Faults::default()
    });
    let b = body("r", "a@b");
    assert_eq!(
        post(&mut w, None, &b, at(0)).outcome,
        CreateOutcome::Unavailable
    );
    assert_eq!(
        post(&mut w, None, &b, at(0)).outcome,
        CreateOutcome::RateLimited { retry_after_s: 7 }
    );
    assert!(w.deliveries().is_empty());
    assert!(matches!(
        post(&mut w, None, &b, at(0)).outcome,
        CreateOutcome::Created(_)
    ));
}

#[test]
fn lose_applies_only_to_committed_requests() {
    let mut w = world(Faults {
        lose_next: 1,
        ..Faults::default()
    });
    // A rejected request does not use up the pending lost response.
    let rejected = post(&mut w, None, &body("r", "nobody"), at(0));
    assert!(!rejected.lose);
    let lost = post(&mut w, None, &body("r", "a@b"), at(0));
    assert!(lost.lose && matches!(lost.outcome, CreateOutcome::Created(_)));
    let next = post(&mut w, None, &body("r", "a@b"), at(0));
    assert!(!next.lose);
    assert_eq!(w.faults().lose_next, 0);
    assert_eq!(w.deliveries().len(), 2);
}

#[test]
fn a_lost_answer_or_a_hidden_delivery_can_be_aimed_at_one_recipient() {
    let mut w = world(Faults::default());
    w.patch_faults(&json!({"lose_for": ["b@x"], "hidden_for": ["c@x"]}))
        .unwrap();
    assert!(!post(&mut w, None, &body("a", "a@x"), at(0)).lose);
    // Once: the same-key retry after it is answered.
    assert!(post(&mut w, None, &body("b", "b@x"), at(0)).lose);
    assert!(!post(&mut w, None, &body("b2", "b@x"), at(0)).lose);
    assert!(w.faults().lose_for.is_empty());
    post(&mut w, None, &body("c", "c@x"), at(0));
    assert_eq!(w.lookup("c", at(86_400_000)), Some(vec![]));
    assert_eq!(w.lookup("a", at(0)).unwrap().len(), 1);
}

#[test]
fn slow_commits_first_and_delays_the_answer() {
    let mut w = world(Faults {
        slow_next: 1,
        slow_ms: 250,
        ..Faults::default()
    });
    let d = post(&mut w, None, &body("r", "a@b"), at(0));
    assert_eq!(d.delay, Some(Duration::from_millis(250)));
    assert_eq!(w.deliveries().len(), 1);
}

#[test]
fn lookup_respects_visibility_and_query_switch() {
    let mut w = world(Faults {
        visibility_delay_ms: 300,
        ..Faults::default()
    });
    post(&mut w, None, &body("r", "a@b"), at(0));
    post(&mut w, None, &body("other", "a@b"), at(0));
    assert_eq!(w.lookup("r", at(299)), Some(vec![]));
    let found = w.lookup("r", at(300)).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].client_reference, "r");
    w.patch_faults(&json!({"query": false})).unwrap();
    assert_eq!(w.lookup("r", at(300)), None);
}

#[test]
fn a_lookup_finds_each_reference_s_deliveries_in_creation_order_among_many() {
    let mut w = world(Faults::default());
    for i in 0..1_000 {
        post(&mut w, None, &body(&format!("r{}", i % 10), "a@b"), at(0));
    }
    let found = w.lookup("r3", at(0)).unwrap();
    assert_eq!(found.len(), 100);
    assert!(found.iter().all(|d| d.client_reference == "r3"));
    let ids: Vec<usize> = found
        .iter()
        .map(|d| d.id.trim_start_matches("dlv_").parse().unwrap())
        .collect();
    assert_eq!(ids, (0..100).map(|n| n * 10 + 4).collect::<Vec<_>>());
    assert_eq!(w.lookup("r10", at(0)), Some(vec![]));
    // A cancel finds its delivery by id; ids that name none are unknown.
    assert_eq!(cancelled(w.cancel("dlv_504", at(1))).client_reference, "r3");
    for unknown in ["dlv_0", "dlv_1001", "dlv_x", "504", "dlv_-1"] {
        assert_eq!(
            w.cancel(unknown, at(2)).outcome,
            CancelOutcome::UnknownDelivery,
            "{unknown}"
        );
    }
}

fn cancelled(decision: CancelDecision) -> Delivery {
    match decision.outcome {
        CancelOutcome::Cancelled(delivery) => delivery,
        other => panic!("expected a cancel, got {other:?}"),
    }
}

#[test]
fn cancel_is_idempotent_and_shows_in_the_world() {
    let mut w = world(Faults::default());
    post(&mut w, None, &body("r", "a@b"), at(0));
    let once = cancelled(w.cancel("dlv_1", at(10)));
    let twice = cancelled(w.cancel("dlv_1", at(20)));
    assert_eq!(once.status, DeliveryStatus::Cancelled);
    // The second cancel changed nothing but the count: it took effect once, at 10 ms.
    assert_eq!(
        once.cancelled_at.as_deref(),
        Some("2023-11-14T22:13:20.010Z")
    );
    assert_eq!(twice.cancelled_at, once.cancelled_at);
    assert_eq!((once.cancel_requests, twice.cancel_requests), (1, 2));
    let recorded = &w.deliveries()[0];
    assert_eq!(recorded.status, DeliveryStatus::Cancelled);
    assert_eq!(recorded.cancel_requests, 2);
    assert_eq!(
        w.cancel("dlv_2", at(30)).outcome,
        CancelOutcome::UnknownDelivery
    );
    // The lookup shows the cancelled delivery.
    assert_eq!(
        w.lookup("r", at(30)).unwrap()[0].status,
        DeliveryStatus::Cancelled
    );
}

#[test]
fn a_lost_cancel_response_hides_a_cancel_that_took_effect() {
    let mut w = world(Faults {
        lose_next_cancel: 1,
        ..Faults::default()
    });
    post(&mut w, None, &body("r", "a@b"), at(0));
    let lost = w.cancel("dlv_1", at(10));
    assert!(lost.lose);
    assert_eq!(cancelled(lost).status, DeliveryStatus::Cancelled);
    assert_eq!(w.faults().lose_next_cancel, 0);
    // The retry is answered and changes nothing.
    let retried = w.cancel("dlv_1", at(20));
    assert!(!retried.lose);
    let delivery = cancelled(retried);
    assert_eq!(delivery.cancel_requests, 2);
    assert_eq!(
        delivery.cancelled_at.as_deref(),
        Some("2023-11-14T22:13:20.010Z")
    );
}

#[test]
fn an_unavailable_cancel_counts_and_cancels_nothing() {
    let mut w = world(Faults {
        unavailable_next_cancel: 1,
        ..Faults::default()
    });
    post(&mut w, None, &body("r", "a@b"), at(0));
    let refused = w.cancel("dlv_1", at(10));
    assert_eq!(refused.outcome, CancelOutcome::Unavailable);
    assert!(!refused.lose);
    let recorded = &w.deliveries()[0];
    assert_eq!(recorded.status, DeliveryStatus::Accepted);
    assert_eq!(recorded.cancelled_at, None);
    assert_eq!(recorded.cancel_requests, 1);
    assert_eq!(cancelled(w.cancel("dlv_1", at(20))).cancel_requests, 2);
}

#[test]
fn cancels_draw_no_shares() {
    // A share of 1 would fire on every draw; cancels must not consume or apply it.
    let mut w = world(Faults {
        lose: 1.0,
        unavailable: 0.0,
        ..Faults::default()
    });
    post(&mut w, None, &body("r", "a@b"), at(0));
    let decision = w.cancel("dlv_1", at(10));
    assert!(!decision.lose);
    assert_eq!(cancelled(decision).status, DeliveryStatus::Cancelled);
}

#[test]
fn rfc3339_formats_utc() {
    assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(at(123)), "2023-11-14T22:13:20.123Z");
    assert_eq!(
        rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
        "2000-02-29T00:00:00.000Z"
    );
    assert_eq!(
        rfc3339(UNIX_EPOCH + Duration::from_secs(4_102_444_799)),
        "2099-12-31T23:59:59.000Z"
    );
}

#[test]
fn a_saved_world_loads_with_its_deliveries_and_keys_and_ages_them_as_before() {
    let mut w = world(Faults::default());
    post(&mut w, Some("k1"), &body("r1", "a@b"), at(0));
    post(&mut w, None, &body("r2", "c@d"), at(5));
    let saved = w.snapshot();
    assert_eq!((saved.deliveries.len(), saved.keys.len()), (2, 1));
    let text = serde_json::to_string(&saved).unwrap();

    let mut loaded = world(Faults::default());
    loaded
        .restore(serde_json::from_str(&text).unwrap())
        .unwrap();
    assert_eq!(loaded.deliveries(), w.deliveries());
    assert_eq!(loaded.lookup("r2", at(6)).unwrap().len(), 1);
    // Within the retention the key replays; a new delivery is numbered after the saved.
    let replay = post(&mut loaded, Some("k1"), &body("r1", "a@b"), at(10));
    assert!(matches!(replay.outcome, CreateOutcome::Replayed(a) if a.id == "dlv_1"));
    let fresh = post(&mut loaded, Some("k2"), &body("r3", "e@f"), at(11));
    assert!(matches!(fresh.outcome, CreateOutcome::Created(a) if a.id == "dlv_3"));
    // A day after it was stored, the key is free again, as it would have been.
    let later = post(
        &mut loaded,
        Some("k1"),
        &body("r1", "a@b"),
        at(24 * 3_600_000),
    );
    assert!(matches!(later.outcome, CreateOutcome::Created(_)));

    // Deliveries out of their numbering are refused, naming the first one.
    let mut broken = saved.clone();
    broken.deliveries.swap(0, 1);
    let e = world(Faults::default()).restore(broken).unwrap_err();
    assert!(
        e.to_string().contains("delivery dlv_2 is at position 1"),
        "{e}"
    );
}

fn item(key: &str, reference: &str, recipient: &str) -> Value {
    let mut item: Value = serde_json::from_slice(&body(reference, recipient)).unwrap();
    item["idempotency_key"] = json!(key);
    item
}

fn batch(items: &[Value]) -> Vec<u8> {
    json!({ "items": items }).to_string().into_bytes()
}

fn answers(decision: &BatchDecision) -> &[CreateOutcome] {
    match &decision.outcome {
        BatchOutcome::Items(items) => items,
        other => panic!("expected item answers, got {other:?}"),
    }
}

#[test]
fn each_item_of_a_batch_is_decided_under_its_own_key() {
    let mut w = world(Faults::default());
    // A single create first: an item with its key and body replays it.
    let single = post(&mut w, Some("k1"), &body("r1", "a@b"), at(0));
    let CreateOutcome::Created(first) = single.outcome else {
        panic!("{single:?}")
    };
    let d = w.create_batch(
        &batch(&[
            item("k1", "r1", "a@b"),
            item("k2", "r2", "c@d"),
            item("k3", "r3", "nobody"),
            item("k1", "r1", "other@b"),
        ]),
        at(1),
    );
    let got = answers(&d);
    assert_eq!(got[0], CreateOutcome::Replayed(first));
    assert!(
        matches!(&got[1], CreateOutcome::Created(a) if a.id == "dlv_2"),
        "{got:?}"
    );
    assert_eq!(got[2], CreateOutcome::InvalidRecipient);
    assert_eq!(got[3], CreateOutcome::KeyReused);
    assert!(!d.lose && d.delay.is_none());
    assert_eq!(w.deliveries().len(), 2);
}

#[test]
fn a_provider_takes_part_of_a_batch_and_the_rest_on_a_retry() {
    let mut w = world(Faults {
        item_unavailable_next: 2,
        ..Faults::default()
    });
    let items: Vec<Value> = (0..5)
        .map(|i| item(&format!("k{i}"), &format!("r{i}"), "a@b"))
        .collect();
    let d = w.create_batch(&batch(&items), at(0));
    let got = answers(&d);
    assert_eq!(
        got[..2],
        [CreateOutcome::Unavailable, CreateOutcome::Unavailable]
    );
    assert!(
        got[2..]
            .iter()
            .all(|o| matches!(o, CreateOutcome::Created(_))),
        "{got:?}"
    );
    assert_eq!(w.deliveries().len(), 3);
    // The same batch again: the taken items replay, the others are created, once each.
    let again = w.create_batch(&batch(&items), at(1));
    let got = answers(&again);
    assert!(
        got[..2]
            .iter()
            .all(|o| matches!(o, CreateOutcome::Created(_))),
        "{got:?}"
    );
    assert!(
        got[2..]
            .iter()
            .all(|o| matches!(o, CreateOutcome::Replayed(_))),
        "{got:?}"
    );
    assert_eq!(w.deliveries().len(), 5);
}

#[test]
fn a_lost_batch_answer_commits_every_item_it_took() {
    let mut w = world(Faults {
        lose_next: 1,
        ..Faults::default()
    });
    let items = [item("k1", "r1", "a@b"), item("k2", "r2", "a@b")];
    let d = w.create_batch(&batch(&items), at(0));
    assert!(d.lose);
    assert_eq!(w.deliveries().len(), 2);
    let again = w.create_batch(&batch(&items), at(1));
    assert!(!again.lose);
    assert!(
        answers(&again)
            .iter()
            .all(|o| matches!(o, CreateOutcome::Replayed(_)))
    );
    assert_eq!(w.deliveries().len(), 2);
}

#[test]
fn a_batch_the_infrastructure_refuses_or_that_is_malformed_creates_nothing() {
    let mut w = world(Faults {
        unavailable_next: 1,
        rate_limit_next: 1,
        ..Faults::default()
    });
    let one = batch(&[item("k1", "r1", "a@b")]);
    assert_eq!(
        w.create_batch(&one, at(0)).outcome,
        BatchOutcome::Unavailable
    );
    assert!(matches!(
        w.create_batch(&one, at(0)).outcome,
        BatchOutcome::RateLimited { .. }
    ));
    let too_many: Vec<Value> = (0..=MAX_BATCH_ITEMS)
        .map(|i| item(&format!("k{i}"), "r", "a@b"))
        .collect();
    for bad in [
        batch(&too_many),
        batch(&[]),
        b"{}".to_vec(),
        b"nope".to_vec(),
    ] {
        assert!(matches!(
            w.create_batch(&bad, at(0)).outcome,
            BatchOutcome::BadRequest { .. }
        ));
    }
    let odd = w.create_batch(br#"{"items": [3, {"idempotency_key": 4}]}"#, at(0));
    assert!(
        answers(&odd)
            .iter()
            .all(|o| matches!(o, CreateOutcome::BadRequest { .. }))
    );
    assert!(w.deliveries().is_empty());
}
