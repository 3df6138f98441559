//! The console's workflow page for a long story: 50 attempts and more than 200 timeline
//! events. It shows the latest 50 events with a link to older ones, and folds attempts.

#[path = "console_page/fixture.rs"]
mod fixture;

#[tokio::test(flavor = "multi_thread")]
async fn a_long_story_shows_the_latest_fifty_events_and_folds_its_attempts() {
    let (app, id, cookie, _dir) = fixture::long_story().await;
    let path = format!("/console/workflows/{}", id.as_str());
    let (status, page) = fixture::get(&app, &cookie, &path).await;
    assert_eq!(status, 200, "{page}");
    let rows = page.matches("<tr class=\"event ").count();
    assert_eq!(rows, 50, "the page shows {rows} events");

    // The total is over 200; the first shown is the 50th from the end.
    let (_, all) = fixture::get(
        &app,
        &cookie,
        &format!("/v1/workflows/{}/timeline?limit=500", id.as_str()),
    )
    .await;
    let all: serde_json::Value = serde_json::from_str(&all).unwrap();
    let seqs: Vec<u64> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.len() > 200, "only {} events", seqs.len());
    let first_shown = seqs[seqs.len() - 50];
    assert!(page.contains(&format!(">{first_shown}</td>")));
    assert!(!page.contains(&format!(">{}</td>", first_shown - 1)));

    // A link to the older events, which pages back.
    let older = format!("{path}?events_before={first_shown}");
    assert!(
        page.contains(&older.replace('&', "&amp;")),
        "no link to older events"
    );
    let (status, older_page) = fixture::get(&app, &cookie, &older).await;
    assert_eq!(status, 200);
    assert_eq!(older_page.matches("<tr class=\"event ").count(), 50);
    assert!(older_page.contains(&format!(">{}</td>", first_shown - 1)));

    // Attempts are folded: one closed <details> per step, holding all 50.
    assert!(
        page.contains(
            "<details class=\"attempts\"><summary>Attempts of Keep trying (50)</summary>"
        ),
        "attempts are not folded"
    );
    assert!(!page.contains("<details class=\"attempts\" open"));
    assert_eq!(page.matches("busy (attempt ").count(), 50);
    // Milestones in words, and the next action a person must take.
    let milestones = page
        .split("<h2>Milestones</h2>")
        .nth(1)
        .and_then(|rest| rest.split("<h2>").next())
        .unwrap();
    assert!(
        milestones.contains("Work done") && !milestones.contains('%'),
        "{milestones}"
    );
    assert!(page.contains("A person must decide"));
}
