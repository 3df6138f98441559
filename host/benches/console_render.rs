//! Server-side render time of the console's workflow page for a long story: 50 attempts
//! of one step and more than 200 timeline events (the page shows the latest 50 and folds
//! the attempts). The request goes through the router in-process, so the time is the
//! server's: reads from SQLite, projection, template.
//!
//! Run: `cargo bench --bench console_render` (optional argument: renders, default 200).

#[path = "../tests/console_page/fixture.rs"]
mod fixture;

use std::time::{Duration, Instant};

fn main() {
    let renders: usize = std::env::args()
        .skip(1)
        .find(|a| a != "--bench")
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (app, id, cookie, _dir) = fixture::long_story().await;
        let path = format!("/console/workflows/{}", id.as_str());
        let step = format!("/console/workflows/{}/steps/work", id.as_str());
        for (name, path) in [("workflow page", &path), ("step page", &step)] {
            // Warm up caches (definition parse, prepared statements).
            for _ in 0..10 {
                fixture::get(&app, &cookie, path).await;
            }
            let mut times: Vec<Duration> = Vec::with_capacity(renders);
            let mut bytes = 0;
            for _ in 0..renders {
                let start = Instant::now();
                let (status, page) = fixture::get(&app, &cookie, path).await;
                times.push(start.elapsed());
                assert_eq!(status, 200);
                bytes = page.len();
            }
            times.sort();
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "console {name} (50 attempts, {} renders, {} KiB): median {:.2} ms, p90 {:.2} ms, max {:.2} ms",
                renders,
                bytes / 1024,
                ms(times[renders / 2]),
                ms(times[renders * 9 / 10]),
                ms(times[renders - 1])
            );
        }
    });
}
