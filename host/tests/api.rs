//! The HTTP API's admission and read contract (API.md), over real HTTP on loopback.
//!
//! Each test serves the router on 127.0.0.1:0 with its own SQLite file and a deployed
//! definition, and talks to it with reqwest. No scheduler runs: where a test needs a
//! workflow to move, it claims and finishes steps through the executor store, as the
//! scheduler would.

#[path = "api/admission.rs"]
mod admission;
#[path = "api/common.rs"]
mod common;
#[path = "api/reads.rs"]
mod reads;
