//! The ledger simulator: a second, deliberately different provider protocol, so that
//! `docket adapter verify` is shown to judge any adapter by what it observes rather than by
//! one protocol's record. The `ledger` example adapter speaks it (`docket sim-ledger`).
//!
//! - `POST /api/v2/entries` with `X-Api-Key` and `X-Request-Id` (deduplication), body
//!   `{"account", "amount_cents", "memo", "reference"}`: `200 {"entry": {…}}` for a new entry
//!   and for a replay (then with `X-Replayed: true`); the same request id with another body
//!   is `422 {"code": "request_id_reused"}`; a bad entry `400 {"code": "invalid_entry"}`.
//! - `GET /api/v2/entries?reference=R`: `200 {"entries": [...]}`.
//! - `POST /api/v2/entries/{entry_id}/reversals`: `200 {"reversal": {…}}`, the same reversal
//!   however often it is asked; an unknown entry is `404 {"code": "no_such_entry"}`.
//! - A missing or wrong key is `403 {"code": "forbidden"}`.
//!
//! An entry is `{"entry_id": "E-000001", "account", "amount_cents", "memo", "reference",
//! "state": "posted" | "reversed"}`. `GET /_ledger` (no key) lists every entry, for tests.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The ledger's state: entries in order, request ids seen with their body and answer.
#[derive(Default)]
struct Books {
    entries: Vec<Value>,
    requests: HashMap<String, (Value, Value)>,
    reversals: HashMap<String, Value>,
}

#[derive(Clone)]
struct Ledger {
    key: Arc<str>,
    books: Arc<Mutex<Books>>,
}

/// A running ledger simulator.
pub struct RunningLedger {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl RunningLedger {
    /// `http://<addr>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for RunningLedger {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The API key the ledger expects unless told otherwise.
pub const DEFAULT_KEY: &str = "docket-ledger-key";

/// Serves a new, empty ledger on `addr` that accepts `key`.
pub async fn start(key: &str, addr: SocketAddr) -> std::io::Result<RunningLedger> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let app = router(key);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(RunningLedger { addr, task })
}

fn router(key: &str) -> Router {
    let ledger = Ledger {
        key: key.into(),
        books: Arc::default(),
    };
    Router::new()
        .route("/api/v2/entries", post(create).get(lookup))
        .route("/api/v2/entries/{entry_id}/reversals", post(reverse))
        .route("/_ledger", get(everything))
        .with_state(ledger)
}

fn answer(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

fn refused(status: StatusCode, code: &str, message: &str) -> Response {
    answer(status, json!({"code": code, "message": message}))
}

impl Ledger {
    fn allowed(&self, headers: &HeaderMap) -> bool {
        headers.get("x-api-key").and_then(|v| v.to_str().ok()) == Some(&*self.key)
    }
}

async fn create(State(ledger): State<Ledger>, headers: HeaderMap, body: String) -> Response {
    if !ledger.allowed(&headers) {
        return refused(
            StatusCode::FORBIDDEN,
            "forbidden",
            "wrong or missing X-Api-Key",
        );
    }
    let Ok(body) = serde_json::from_str::<Value>(&body) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "invalid_entry",
            "the body is not JSON",
        );
    };
    let account = body["account"].as_str().unwrap_or_default();
    let amount = body["amount_cents"].as_i64().unwrap_or(0);
    if account.is_empty() || amount <= 0 {
        return refused(
            StatusCode::BAD_REQUEST,
            "invalid_entry",
            "an entry needs an account and a positive amount_cents",
        );
    }
    let request_id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut books = ledger.books.lock().unwrap();
    if let Some(id) = &request_id
        && let Some((seen, entry)) = books.requests.get(id)
    {
        if *seen != body {
            return refused(
                StatusCode::UNPROCESSABLE_ENTITY,
                "request_id_reused",
                "this X-Request-Id was used with another entry",
            );
        }
        let mut replay = answer(StatusCode::OK, json!({"entry": entry}));
        replay
            .headers_mut()
            .insert("x-replayed", "true".parse().unwrap());
        return replay;
    }
    let entry = json!({
        "entry_id": format!("E-{:06}", books.entries.len() + 1),
        "account": account,
        "amount_cents": amount,
        "memo": body["memo"],
        "reference": body["reference"],
        "state": "posted",
    });
    books.entries.push(entry.clone());
    if let Some(id) = request_id {
        books.requests.insert(id, (body, entry.clone()));
    }
    answer(StatusCode::OK, json!({"entry": entry}))
}

async fn lookup(
    State(ledger): State<Ledger>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if !ledger.allowed(&headers) {
        return refused(
            StatusCode::FORBIDDEN,
            "forbidden",
            "wrong or missing X-Api-Key",
        );
    }
    let reference = query.get("reference").cloned().unwrap_or_default();
    let books = ledger.books.lock().unwrap();
    let entries: Vec<&Value> = books
        .entries
        .iter()
        .filter(|e| e["reference"] == reference.as_str())
        .collect();
    answer(StatusCode::OK, json!({"entries": entries}))
}

async fn reverse(
    State(ledger): State<Ledger>,
    headers: HeaderMap,
    Path(entry_id): Path<String>,
) -> Response {
    if !ledger.allowed(&headers) {
        return refused(
            StatusCode::FORBIDDEN,
            "forbidden",
            "wrong or missing X-Api-Key",
        );
    }
    let mut books = ledger.books.lock().unwrap();
    if let Some(reversal) = books.reversals.get(&entry_id) {
        return answer(StatusCode::OK, json!({"reversal": reversal}));
    }
    let n = books.reversals.len() + 1;
    let Some(entry) = books
        .entries
        .iter_mut()
        .find(|e| e["entry_id"] == entry_id.as_str())
    else {
        return refused(
            StatusCode::NOT_FOUND,
            "no_such_entry",
            "no entry has this id",
        );
    };
    entry["state"] = json!("reversed");
    let reversal = json!({
        "reversal_id": format!("R-{n:06}"),
        "entry_id": entry_id,
        "state": "reversed",
    });
    books.reversals.insert(entry_id, reversal.clone());
    answer(StatusCode::OK, json!({"reversal": reversal}))
}

async fn everything(State(ledger): State<Ledger>) -> Json<Value> {
    Json(json!({"entries": ledger.books.lock().unwrap().entries}))
}
