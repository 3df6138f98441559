//! Console sessions: stored under the digest of the cookie, found until they expire or
//! end, and expired ones forgotten.

use super::backends::Store;
use docket::store::ConsoleSession;

const T0: u64 = 1_800_000_000_000;
const HOUR: u64 = 3_600_000;

fn session(id: &str, subject: &str, started_at: u64) -> ConsoleSession {
    ConsoleSession {
        id_digest: format!("sha256:{id}"),
        subject: subject.into(),
        role: "operator".into(),
        csrf: format!("csrf-of-{id}"),
        started_at,
        expires_at: started_at + 12 * HOUR,
    }
}

pub async fn console_sessions_are_found_by_digest_until_they_expire_or_end<S: Store>(s: S) {
    let alice = session("a", "alice", T0);
    s.start_session(alice.clone()).await.unwrap();
    assert_eq!(
        s.session("sha256:a", T0 + HOUR).await.unwrap(),
        Some(alice.clone())
    );
    assert_eq!(s.session("sha256:unknown", T0).await.unwrap(), None);
    // Expired at its end: not found, though still stored until forgotten.
    assert_eq!(s.session("sha256:a", T0 + 12 * HOUR).await.unwrap(), None);

    // Ending one session leaves the others.
    let bob = session("b", "bob", T0 + HOUR);
    s.start_session(bob.clone()).await.unwrap();
    s.end_session("sha256:a", T0 + 2 * HOUR).await.unwrap();
    assert_eq!(s.session("sha256:a", T0 + 2 * HOUR).await.unwrap(), None);
    assert_eq!(
        s.session("sha256:b", T0 + 2 * HOUR).await.unwrap(),
        Some(bob.clone())
    );

    // A later start forgets expired sessions: bob's ended at T0 + 13 h.
    let carol = session("c", "carol", T0 + 14 * HOUR);
    s.start_session(carol.clone()).await.unwrap();
    assert_eq!(s.session("sha256:b", T0).await.unwrap(), None, "forgotten");
    assert_eq!(
        s.session("sha256:c", T0 + 14 * HOUR).await.unwrap(),
        Some(carol)
    );
}
