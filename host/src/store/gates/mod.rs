//! Adapter gates: each adapter's in-flight attempts counted across every host on the
//! store, and the pauses a provider's rate limit puts on all of an adapter's claims. A
//! claim asks here how many steps of each gated adapter it may take ([`rooms`]); an
//! attempt answered `429` records the pause ([`pause`]); the projection and `/metrics`
//! read both ([`view`]).
//!
//! Hosts on one database count the same rows but each claims under its own configured
//! `max_in_flight`: with different limits, a host claims while the count is under its own,
//! so the largest limit is the one the provider may see.

mod postgres;

use super::plan::values;
use super::rows::Columns;
use super::tx::Tx;
use super::{AdapterGate, AdapterPause, AdapterState, ClaimRequest, StoreResult};
use crate::intent::Millis;
use std::collections::BTreeMap;

pub(crate) use postgres::SQL as POSTGRES;

/// The statements of adapter gates. Parameters, in order:
/// - `paused` (the adapters paused at `$1`, with until when): now;
/// - `hold_adapter` (serialises the claims that count one adapter): adapter;
/// - `in_flight` (as `n`): adapter;
/// - `pause`: adapter, until, cause, reason, host, now;
/// - `states` (every adapter with attempts in flight or a pause on record): none.
pub(crate) struct Sql {
    pub paused: &'static str,
    pub hold_adapter: &'static str,
    pub in_flight: &'static str,
    pub pause: &'static str,
    pub states: &'static str,
}

/// The statements as both databases run them (see [`super::tx`] on placeholders).
pub(crate) const SQL: Sql = Sql {
    paused: "SELECT adapter, paused_until FROM adapter_pauses WHERE paused_until > $1",
    // SQLite's one writer already claims one at a time.
    hold_adapter: "SELECT $1",
    // A batch step whose items run holds no lease: its items are the attempts counted.
    in_flight: "SELECT COUNT(*) AS n FROM steps
                WHERE adapter = $1 AND state = 'running' AND lease_token IS NOT NULL",
    // A later pause extends an earlier one; an earlier one never shortens it.
    pause: "INSERT INTO adapter_pauses (adapter, paused_until, cause, reason, paused_by,
                paused_at)
            VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (adapter) DO UPDATE SET paused_until = excluded.paused_until,
                cause = excluded.cause, reason = excluded.reason, paused_by = excluded.paused_by,
                paused_at = excluded.paused_at
            WHERE excluded.paused_until > adapter_pauses.paused_until",
    states: "SELECT a.adapter,
                    (SELECT COUNT(*) FROM steps s WHERE s.adapter = a.adapter
                        AND s.state = 'running' AND s.lease_token IS NOT NULL) AS in_flight,
                    p.paused_until, p.cause, p.reason, p.paused_by, p.paused_at
             FROM (SELECT DISTINCT adapter FROM steps
                   WHERE state = 'running' AND adapter IS NOT NULL
                   UNION SELECT adapter FROM adapter_pauses) a
             LEFT JOIN adapter_pauses p ON p.adapter = a.adapter
             ORDER BY a.adapter",
};

/// What one claim may take of the gated adapters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Rooms {
    /// Each gated adapter with room, and how many of its steps the claim may take.
    pub open: Vec<(String, usize)>,
    /// Every gated adapter (paused, limited or rate-bound): the claim's other picks never
    /// take their steps.
    pub gated: Vec<String>,
}

/// How many steps of each gated adapter `req` may claim now: none of a paused one (on any
/// host), at most its limit less the attempts in flight on every host of one counted,
/// at most its rate's room of one this host paces. Counting holds the adapter until the
/// claim commits, so two hosts never both fill the same room.
pub(crate) async fn rooms<T: Tx>(tx: &mut T, req: &ClaimRequest) -> StoreResult<Rooms> {
    let sql = &tx.sql().gates;
    let (paused_sql, hold, in_flight) = (sql.paused, sql.hold_adapter, sql.in_flight);
    let paused: Vec<String> = tx
        .rows(paused_sql, &values![req.now as i64], |r| r.text("adapter"))
        .await?;
    if paused.is_empty() && req.gates.is_empty() {
        return Ok(Rooms::default());
    }
    let mut rooms: BTreeMap<String, usize> = BTreeMap::new();
    for adapter in &paused {
        rooms.insert(adapter.clone(), 0);
    }
    // In name order, so that claims holding several adapters never wait in a cycle.
    let mut gates: Vec<&AdapterGate> = req.gates.iter().collect();
    gates.sort_by(|a, b| a.adapter.cmp(&b.adapter));
    for gate in gates {
        if rooms.get(&gate.adapter) == Some(&0) {
            continue;
        }
        let mut room = usize::MAX;
        if let Some(max) = gate.max_in_flight {
            tx.rows(hold, &values![gate.adapter.as_str()], |_| Ok(()))
                .await?;
            let flying = tx
                .row(in_flight, &values![gate.adapter.as_str()], |r| r.uint("n"))
                .await?
                .unwrap_or(0);
            room = room.min((max as u64).saturating_sub(flying) as usize);
        }
        if let Some(rate) = gate.rate_room {
            room = room.min(rate as usize);
        }
        rooms.insert(gate.adapter.clone(), room);
    }
    Ok(Rooms {
        open: rooms
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(a, n)| (a.clone(), *n))
            .collect(),
        gated: rooms.into_keys().collect(),
    })
}

/// Records that `p.adapter`'s claims wait until `p.until` on every host.
pub(crate) async fn pause<T: Tx>(tx: &mut T, p: &AdapterPause) -> StoreResult<()> {
    let sql = tx.sql().gates.pause;
    tx.exec(
        sql,
        &values![
            p.adapter.as_str(),
            p.until as i64,
            p.cause.as_str(),
            p.reason.as_str(),
            p.host.as_str(),
            p.at as i64
        ],
    )
    .await?;
    Ok(())
}

/// Every adapter with attempts in flight or a pause on record, as of `now`.
pub(crate) async fn view<T: Tx>(tx: &mut T, now: &Millis) -> StoreResult<Vec<AdapterState>> {
    let sql = tx.sql().gates.states;
    tx.rows(sql, &values![], |r| {
        let until = r.opt_uint("paused_until")?;
        let pause = match until {
            Some(until) if until > *now => Some(AdapterPause {
                adapter: r.text("adapter")?,
                until,
                cause: r.text("cause")?,
                reason: r.text("reason")?,
                host: r.text("paused_by")?,
                at: r.uint("paused_at")?,
            }),
            _ => None,
        };
        Ok(AdapterState {
            adapter: r.text("adapter")?,
            in_flight: r.uint("in_flight")?,
            pause,
        })
    })
    .await
}
