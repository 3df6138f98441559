//! The operator's evidence page: what providers posted about their effects — the inbox of
//! observations that matched no step or could not be read first, then the latest matched
//! ones, each with the step it met and what it did there.

use super::pages::{PageError, layout, path_part};
use super::session::Session;
use crate::context::Context;
use crate::store::{EvidenceFilter, EvidenceStore};
use crate::view::ObservationView;
use maud::{Markup, html};

/// Most observations each table shows.
const SHOWN: u32 = 200;

/// `GET /console/evidence`: the inbox, then what matched.
pub async fn page<S: EvidenceStore>(ctx: &Context<S>, who: &Session) -> Result<Markup, PageError> {
    let read = |matched| EvidenceFilter {
        matched: Some(matched),
        limit: SHOWN,
        ..EvidenceFilter::default()
    };
    let inbox: Vec<ObservationView> = (ctx.store.observations(read(false)).await?)
        .into_iter()
        .map(ObservationView::from)
        .collect();
    let matched: Vec<ObservationView> = (ctx.store.observations(read(true)).await?)
        .into_iter()
        .map(ObservationView::from)
        .collect();
    Ok(layout(
        Some(who),
        "Evidence",
        html! {
            h1 { "Evidence from providers" }
            p.muted { "What providers posted about their effects (POST /v1/evidence/<adapter>), as each adapter read it." }
            h2 { "Inbox: matched no step" }
            @if inbox.is_empty() {
                div.box { "Nothing waits here: every observation met the step it names." }
            } @else {
                table #inbox {
                    tr { th { "Received" } th { "Adapter" } th { "Event" } th { "Reference" } th { "Said" } th { "Why it is here" } }
                    @for o in &inbox {
                        tr {
                            td { (o.recorded_at) }
                            td { (o.adapter) }
                            td { code { (o.event_id.as_deref().unwrap_or(&o.webhook_id)) } }
                            td { (o.external_reference.as_deref().unwrap_or("—")) }
                            td { (o.effect_status.as_deref().unwrap_or("—")) " " span.muted { (o.provider_status) } }
                            td { strong { (o.verdict) } ": " (o.note.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
            h2 { "Matched" }
            @if matched.is_empty() {
                div.box { "No observation has met a step yet." }
            } @else {
                table #matched {
                    tr { th { "Received" } th { "Event" } th { "Step" } th { "Said" } th { "What it did" } }
                    @for o in matched.iter().rev() {
                        tr {
                            td { (o.recorded_at) }
                            td { code { (o.event_id.as_deref().unwrap_or(&o.webhook_id)) } br; span.muted { (o.adapter) } }
                            td {
                                @if let (Some(w), Some(s)) = (&o.workflow_id, &o.step) {
                                    a href={ "/console/workflows/" (path_part(w)) } { code { (w) } } " · " (s)
                                }
                            }
                            td { (o.effect_status.as_deref().unwrap_or("—")) " " (o.external_reference.as_deref().unwrap_or("")) " " span.muted { (o.provider_status) } }
                            td { strong { (o.verdict) } ": " (o.note.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        },
    ))
}
