//! The console's pages served in-process: the workflow page of a long story (50 attempts,
//! more than 200 timeline events) shows the latest 50 events with a link to older ones and
//! folds the attempts; the list puts the review queue first, filters and paginates.

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

#[tokio::test(flavor = "multi_thread")]
async fn the_list_puts_review_first_then_filters_and_pages_newest_first() {
    let (app, stuck, cookie, _dir) = fixture::long_story_and(60).await;
    let ids = |page: &str| -> Vec<String> {
        page.split("<a href=\"/console/workflows/wf_")
            .skip(1)
            .map(|rest| format!("wf_{}", rest.split('"').next().unwrap()))
            .collect()
    };

    // Review first, then everything newest first, 50 to a page.
    let (status, page) = fixture::get(&app, &cookie, "/console/workflows").await;
    assert_eq!(status, 200);
    let review_at = page.find("Needs review (1)").expect("no review queue");
    let all_at = page.find("<h1>Workflows</h1>").unwrap();
    assert!(review_at < all_at);
    let listed = ids(&page[all_at..]);
    assert_eq!(listed.len(), 50);
    let mut sorted = listed.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(listed, sorted, "not newest first");
    assert!(
        !listed.contains(&stuck.as_str().to_string()),
        "the oldest is on page 2"
    );
    let next = page
        .split("href=\"")
        .find(|h| h.starts_with("/console/workflows?cursor="))
        .and_then(|h| h.split('"').next())
        .expect("no link to older workflows")
        .replace("&amp;", "&");
    let (_, second) = fixture::get(&app, &cookie, &next).await;
    let rest = ids(&second[second.find("<h1>Workflows</h1>").unwrap()..]);
    assert_eq!(rest.len(), 11, "60 fresh and the long story: {rest:?}");
    assert_eq!(rest.last().unwrap(), stuck.as_str());
    assert!(!second.contains("Older workflows"));

    // By state, by definition, by age.
    let (_, review) = fixture::get(&app, &cookie, "/console/workflows?state=needs_review").await;
    let body = &review[review.find("<h1>Workflows</h1>").unwrap()..];
    assert_eq!(ids(body), [stuck.as_str().to_string()]);
    let (_, none) = fixture::get(&app, &cookie, "/console/workflows?workflow=other").await;
    assert!(none.contains("No workflows match."));
    let (_, recent) = fixture::get(&app, &cookie, "/console/workflows?age=1h").await;
    let body = &recent[recent.find("<h1>Workflows</h1>").unwrap()..];
    assert!(
        !body.contains(stuck.as_str()),
        "two hours old is not within the last hour"
    );
    let (status, bad) = fixture::get(&app, &cookie, "/console/workflows?state=sleeping").await;
    assert_eq!(status, 400);
    assert!(bad.contains("sleeping"), "the refusal names the bad value");
}
