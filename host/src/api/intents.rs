//! Admission: `POST /v1/intents` and `GET /v1/intents/{key}`.
//!
//! One client key in scope (subject, workflow, key) is one workflow. The checks run in the
//! contract's order — auth, key syntax, body syntax, key lookup, definition, schema —
//! and the commit itself re-checks the key inside its transaction, so concurrent
//! submissions of one key yield one `201` and replays of it.

use super::Ctx;
use super::auth::Caller;
use super::error::{ApiError, ApiResult, ErrorCode, quote};
use crate::access::Role;
use crate::intake::IntakeRefusal;
use crate::intent::{CanonicalInput, Millis, WorkflowId, canonicalize};
use crate::store::{
    AdmitOutcome, AdmitRequest, KeyRecord, KeyScope, NewWorkflow, StoreError, WorkflowRecord,
};
use crate::view::IntentView;
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::collections::HashMap;

/// The longest idempotency key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// The header carrying the client's key.
const KEY_HEADER: &str = "idempotency-key";

/// After refusing an oversized body, read and discard up to this much more of it, so the
/// client receives the `413` instead of a reset connection.
const DRAIN_CAP: usize = 8 << 20;

const KEY_RULE: &str = "keys are 1–255 visible ASCII characters (0x21–0x7E: no spaces or control \
                        characters), optionally sent as a quoted string; a UUID is a good key";

/// The key named by an `Idempotency-Key` value (or a path segment): 1–255 characters
/// 0x21–0x7E. A value sent as a quoted string (`"abc"`, with `\"` and `\\` escapes, the
/// IETF draft's form) is unquoted first, so `"abc"` and `abc` are the same key. `Err`
/// says what is wrong, quoting the value.
pub fn parse_idempotency_key(raw: &[u8]) -> Result<String, String> {
    let shown = quote(&String::from_utf8_lossy(raw));
    let key = if raw.first() == Some(&b'"') {
        unquote(raw).ok_or_else(|| {
            format!(
                "the key `{shown}` starts with `\"` but is not a well-formed quoted string (a closing `\"`, \
                 inner `\"` and `\\` escaped with `\\`); {KEY_RULE}"
            )
        })?
    } else {
        raw.to_vec()
    };
    if key.is_empty() {
        return Err(format!("the key is empty; {KEY_RULE}"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(format!(
            "the key `{shown}` is {} characters long; {KEY_RULE}",
            key.len()
        ));
    }
    if let Some(pos) = key.iter().position(|b| !(0x21..=0x7e).contains(b)) {
        let bad = match key[pos] {
            b @ 0..=0x7f => format!("{:?}", b as char),
            b => format!("the byte 0x{b:02X}"),
        };
        return Err(format!(
            "the key `{shown}` contains {bad} at position {}; {KEY_RULE}",
            pos + 1
        ));
    }
    // Every byte is visible ASCII, so this is valid UTF-8.
    Ok(String::from_utf8(key).unwrap_or_default())
}

/// The content of an RFC 8941 string: `"` … `"` with `\"` and `\\` escapes.
fn unquote(raw: &[u8]) -> Option<Vec<u8>> {
    let inner = raw.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(e),
                _ => return None,
            },
            b'"' => return None,
            _ => out.push(b),
        }
    }
    Some(out)
}

/// The key of a `POST`: exactly one `Idempotency-Key` header, well formed.
pub(super) fn key_from_headers(headers: &HeaderMap) -> ApiResult<String> {
    let mut values = headers.get_all(KEY_HEADER).iter();
    let Some(value) = values.next() else {
        return Err(ApiError::new(
            ErrorCode::MissingParameter,
            format!(
                "this POST has no `Idempotency-Key` header; send one naming this request, the same \
                 one on every retry of it ({KEY_RULE})"
            ),
        )
        .with_details(vec![json!({"parameter": "Idempotency-Key"})]));
    };
    if values.next().is_some() {
        return Err(ApiError::new(
            ErrorCode::InvalidKey,
            "the request has more than one `Idempotency-Key` header; send exactly one",
        ));
    }
    let key = parse_idempotency_key(value.as_bytes())
        .map_err(|m| ApiError::new(ErrorCode::InvalidKey, m))?;
    if let Some(prefix) = crate::intent::reserved_key_prefix(&key) {
        return Err(ApiError::new(
            ErrorCode::InvalidKey,
            format!(
                "keys starting with `{prefix}` are reserved for the host's own requests; choose another key"
            ),
        ));
    }
    Ok(key)
}

/// Reads the body, refusing more than `limit` bytes with `413`.
pub(super) async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> ApiResult<Bytes> {
    let too_large = || {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "the body is larger than this host's limit of {limit} bytes; send a smaller input"
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit.saturating_add(DRAIN_CAP) as u64) {
        return Err(too_large());
    }
    let mut body = body;
    let mut buf = Vec::new();
    let mut over = declared.is_some_and(|n| n > limit as u64);
    let mut drained = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("the request body could not be read ({e}); send it again"),
            )
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if over {
            drained += data.len();
            if drained > DRAIN_CAP {
                break;
            }
        } else if buf.len() + data.len() > limit {
            over = true;
            buf = Vec::new();
        } else {
            buf.extend_from_slice(&data);
        }
    }
    if over {
        Err(too_large())
    } else {
        Ok(Bytes::from(buf))
    }
}

/// A parsed `POST /v1/intents` body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Submission {
    workflow: String,
    input: Value,
}

const BODY_SHAPE: &str = r#"send {"workflow": "<definition name>", "input": {…}}"#;

fn shape_error(message: String, pointer: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
        .with_details(vec![json!({"pointer": pointer})])
}

/// The body as JSON of the right shape; any `Content-Type` is accepted.
pub(crate) fn parse_submission(bytes: &[u8]) -> ApiResult<Submission> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is empty; {BODY_SHAPE}"),
        ));
    }
    let value: Value = crate::intent::parse_json(bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {e}; {BODY_SHAPE}"),
        )
    })?;
    let Value::Object(mut fields) = value else {
        return Err(shape_error(
            format!(
                "the body is a JSON {}, not an object; {BODY_SHAPE}",
                json_type(&value)
            ),
            "",
        ));
    };
    if let Some(unknown) = fields.keys().find(|k| *k != "workflow" && *k != "input") {
        return Err(shape_error(
            format!(
                "the body has an unknown field `{}`; it has only `workflow` and `input`: {BODY_SHAPE}",
                quote(unknown)
            ),
            &format!("/{}", unknown.replace('~', "~0").replace('/', "~1")),
        ));
    }
    let workflow = match fields.remove("workflow") {
        Some(Value::String(name)) if !name.is_empty() => name,
        Some(other) => {
            return Err(shape_error(
                format!(
                    "`workflow` is {}, but it must be the name of a deployed definition as a non-empty \
                     string; {BODY_SHAPE}",
                    describe(&other)
                ),
                "/workflow",
            ));
        }
        None => {
            return Err(shape_error(
                format!("the body has no `workflow`; {BODY_SHAPE}"),
                "/workflow",
            ));
        }
    };
    let input = match fields.remove("input") {
        Some(input @ Value::Object(_)) => input,
        Some(other) => {
            return Err(shape_error(
                format!(
                    "`input` is {}, but it must be a JSON object; {BODY_SHAPE}",
                    describe(&other)
                ),
                "/input",
            ));
        }
        None => {
            return Err(shape_error(
                format!("the body has no `input`; {BODY_SHAPE}"),
                "/input",
            ));
        }
    };
    Ok(Submission { workflow, input })
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// "an empty string", "the number 5", "an array", ….
fn describe(value: &Value) -> String {
    match value {
        Value::String(s) if s.is_empty() => "an empty string".to_string(),
        Value::String(s) => format!("the string `{}`", quote(s)),
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("`{b}`"),
        Value::Null => "`null`".to_string(),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

/// The `200`/`201` answer with its `Location`.
pub(super) fn intent_response(
    status: StatusCode,
    record: &WorkflowRecord,
    replayed: bool,
) -> ApiResult<Response> {
    let location = HeaderValue::from_str(&format!("/v1/workflows/{}", record.workflow_id))
        .map_err(ApiError::internal)?;
    let mut response = (status, Json(IntentView::new(record, Some(replayed)))).into_response();
    response.headers_mut().insert(header::LOCATION, location);
    Ok(response)
}

fn conflict(scope: &KeyScope, workflow_id: &WorkflowId) -> ApiError {
    ApiError::new(
        ErrorCode::KeyConflict,
        format!(
            "the Idempotency-Key `{}` was already used for a `{}` request with a different input \
             (workflow {workflow_id}); nothing was changed. Resend the original input to get that \
             workflow, or use a new key for a new request",
            quote(&scope.key),
            quote(&scope.workflow)
        ),
    )
    .with_details(vec![json!({"workflow_id": workflow_id})])
}

/// `POST /v1/intents`.
pub(super) async fn submit<
    S: crate::store::DefinitionStore + crate::store::ReadStore + crate::store::AdmissionStore,
>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    super::auth::require(&caller, &[Role::Client], "submitting an intent")?;
    let key = key_from_headers(&headers)?;
    let bytes = read_body(&headers, body, ctx.limits.max_body_bytes).await?;
    let Submission { workflow, input } = parse_submission(&bytes)?;
    let canonical = canonicalize(&input).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("{e}; send plain JSON values"),
        )
        .with_details(vec![json!({"pointer": "/input"})])
    })?;
    let scope = KeyScope {
        subject: caller.subject,
        workflow,
        key,
    };
    let now = ctx.clock.now_ms();
    // A known key answers from a read, without queueing behind the writer — where the
    // store's admission does not find it as cheaply itself.
    if ctx.store.key_read_first()
        && let Some(known) = ctx.store.lookup_key(&scope, now).await?
    {
        return answer_known(&ctx, &scope, known, &canonical).await;
    }
    // The key is free (or unread): check the definition and the input, then create the
    // intent in one transaction (a concurrent submission may have won the key meanwhile).
    for _ in 0..OUTDATED_TRIES {
        let new = match new_workflow(&ctx, &scope, &input, &canonical, now).await? {
            Ok(new) => new,
            Err(refusal) => {
                // A known key answers even when a new intent would be refused.
                if !ctx.store.key_read_first()
                    && let Some(known) = ctx.store.lookup_key(&scope, now).await?
                {
                    return answer_known(&ctx, &scope, known, &canonical).await;
                }
                return Err(refusal);
            }
        };
        match admit_new(&ctx, &scope, &headers, &canonical, now, new).await? {
            Some(response) => return response,
            // Another host deployed a newer version: build the intent again on it.
            None => ctx.deployments.forget_newest(&scope.workflow),
        }
    }
    Err(StoreError::safe(format!(
        "the definition `{}` kept being redeployed while this intent was admitted; nothing \
         was created, retry",
        scope.workflow
    ))
    .into())
}

/// How often a submission is built again because its definition version was outdated.
const OUTDATED_TRIES: usize = 4;

/// The answer for a key already known: a replay, or a conflict when the input differs.
async fn answer_known<S: crate::store::ReadStore>(
    ctx: &Ctx<S>,
    scope: &KeyScope,
    known: KeyRecord,
    canonical: &CanonicalInput,
) -> ApiResult<Response> {
    if known.input_digest != canonical.digest {
        ctx.metrics.intent("conflict");
        return Err(conflict(scope, &known.workflow_id));
    }
    let record = ctx
        .store
        .workflow(&known.workflow_id)
        .await?
        .ok_or_else(|| {
            ApiError::internal(format!(
                "key points at missing workflow {}",
                known.workflow_id
            ))
        })?;
    ctx.metrics.intent("replayed");
    intent_response(StatusCode::OK, &record, true)
}

/// Admits `new` under `scope` and answers the client; `None` when the store found the
/// intent's definition version outdated and wrote nothing.
async fn admit_new<S: crate::store::AdmissionStore>(
    ctx: &Ctx<S>,
    scope: &KeyScope,
    headers: &HeaderMap,
    canonical: &CanonicalInput,
    now: Millis,
    mut new: NewWorkflow,
) -> ApiResult<Option<ApiResult<Response>>> {
    // The workflow's trace: the admission's span, a child of the client's `traceparent`
    // when it sent a valid one; every attempt's span will be the admission's child.
    let client_trace = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .filter(|v| crate::telemetry::valid_traceparent(v))
        .map(|v| v.trim().to_string());
    let admission = tracing::info_span!(
        "admission",
        workflow = %new.workflow_id,
        name = %scope.workflow,
    );
    if let Some(parent) = &client_trace {
        crate::telemetry::adopt(&admission, parent);
    }
    new.trace_parent = crate::telemetry::traceparent_of(&admission).or(client_trace);
    let first_steps = new.steps.iter().filter(|s| s.depends_on.is_empty()).count();
    let request = AdmitRequest {
        scope: scope.clone(),
        input: canonical.clone(),
        now,
        create: Some(new),
    };
    // A free slot lets the admission claim a first step in its own commit and start it here.
    let slot = ctx.starter.as_ref().and_then(|s| s.reserve(now));
    let next = slot.as_ref().map(|s| s.claim.clone());
    let admitted = async {
        match next {
            Some(next) => ctx.store.admit_and_claim(request, next).await,
            None => Ok((ctx.store.admit(request).await?, None)),
        }
    };
    let (outcome, claimed) = tracing::Instrument::instrument(admitted, admission).await?;
    Ok(Some(match outcome {
        AdmitOutcome::Created(record) => {
            let started = match (slot, claimed) {
                (Some(slot), Some(claimed)) => {
                    slot.start(claimed);
                    1
                }
                _ => 0,
            };
            // The steps not started here are the loop's.
            if first_steps > started {
                ctx.wake.notify_one();
            }
            ctx.metrics.intent("created");
            intent_response(StatusCode::CREATED, &record, false)
        }
        AdmitOutcome::Replayed(record) => {
            ctx.metrics.intent("replayed");
            intent_response(StatusCode::OK, &record, true)
        }
        AdmitOutcome::Conflict { workflow_id } => {
            ctx.metrics.intent("conflict");
            Err(conflict(scope, &workflow_id))
        }
        AdmitOutcome::KeyFree => Err(ApiError::internal(
            "the store created nothing although an intent was given",
        )),
        AdmitOutcome::Outdated => return Ok(None),
    }))
}

/// The intent to create for a free key, or why none may be created (`404`: no such
/// definition, `422`: the input does not satisfy its schema).
pub(super) async fn new_workflow<S: crate::store::DefinitionStore>(
    ctx: &Ctx<S>,
    scope: &KeyScope,
    input: &Value,
    canonical: &CanonicalInput,
    now: Millis,
) -> ApiResult<Result<NewWorkflow, ApiError>> {
    Ok(
        crate::intake::new_workflow(ctx, scope, input, canonical, now, None)
            .await?
            .map_err(ApiError::from),
    )
}

impl From<IntakeRefusal> for ApiError {
    fn from(r: IntakeRefusal) -> Self {
        match r {
            IntakeRefusal::UnknownDefinition(message) => ApiError::not_found(message),
            IntakeRefusal::InvalidInput { message, details } => {
                ApiError::new(ErrorCode::InvalidInput, message).with_details(details)
            }
        }
    }
}

/// `GET /v1/intents/{key}?workflow=<name>`: the caller's own intent under that key.
pub(super) async fn by_key<S: crate::store::AdmissionStore + crate::store::ReadStore>(
    State(ctx): State<Ctx<S>>,
    Caller(caller): Caller,
    key: Result<Path<String>, PathRejection>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> ApiResult<Json<IntentView>> {
    super::auth::require(&caller, &[Role::Client], "reading an intent by its key")?;
    let Path(raw_key) = key.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidKey,
            format!("{e}; percent-encode the key in the path"),
        )
    })?;
    let Query(params) = query.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidParameter,
            format!("{e}; check the query string"),
        )
    })?;
    let key = parse_idempotency_key(raw_key.as_bytes())
        .map_err(|m| ApiError::new(ErrorCode::InvalidKey, m))?;
    let Some(workflow) = params.get("workflow").filter(|w| !w.is_empty()) else {
        return Err(ApiError::new(
            ErrorCode::MissingParameter,
            "keys are scoped per workflow: add `?workflow=<definition name>` to name the workflow the key \
             was used with",
        )
        .with_details(vec![json!({"parameter": "workflow"})]));
    };
    let scope = KeyScope {
        subject: caller.subject,
        workflow: workflow.clone(),
        key,
    };
    let not_found = || {
        ApiError::not_found(format!(
            "you have no `{}` intent under the key `{}`, or its retention has passed; check the key \
             and the workflow name",
            quote(&scope.workflow),
            quote(&scope.key)
        ))
    };
    let Some(known) = ctx.store.lookup_key(&scope, ctx.clock.now_ms()).await? else {
        return Err(not_found());
    };
    let record = ctx
        .store
        .workflow(&known.workflow_id)
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(IntentView::new(&record, None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii_and_quotes_are_removed() {
        assert_eq!(parse_idempotency_key(b"abc").unwrap(), "abc");
        assert_eq!(parse_idempotency_key(b"\"abc\"").unwrap(), "abc");
        assert_eq!(parse_idempotency_key(br#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
        assert_eq!(parse_idempotency_key(b"!~").unwrap(), "!~");
        let longest = "k".repeat(MAX_KEY_LEN);
        assert_eq!(parse_idempotency_key(longest.as_bytes()).unwrap(), longest);
        // Quotes do not count against the length.
        assert!(parse_idempotency_key(format!("\"{longest}\"").as_bytes()).is_ok());
    }

    #[test]
    fn malformed_keys_say_what_is_wrong() {
        let err = |raw: &[u8]| parse_idempotency_key(raw).unwrap_err();
        assert!(err(b"").contains("empty"));
        assert!(err(b"\"\"").contains("empty"));
        assert!(err("k".repeat(256).as_bytes()).contains("256 characters"));
        assert!(err(b"a b").contains("' ' at position 2"), "{}", err(b"a b"));
        assert!(
            err(b"a\tb").contains("'\\t' at position 2"),
            "{}",
            err(b"a\tb")
        );
        assert!(err("caf\u{e9}".as_bytes()).contains("0xC3"));
        assert!(err(b"\"abc").contains("quoted string"));
        assert!(err(br#""a"b""#).contains("quoted string"));
        assert!(err(br#""a\b""#).contains("quoted string"));
        assert!(err(b"a\x7f").contains("position 2"));
    }

    #[test]
    fn bodies_need_a_workflow_and_an_object_input() {
        let ok = parse_submission(br#"{"workflow": "w", "input": {"a": 1}}"#).unwrap();
        assert_eq!(ok.workflow, "w");
        assert_eq!(ok.input, json!({"a": 1}));
        let code = |body: &str| parse_submission(body.as_bytes()).unwrap_err().code;
        assert_eq!(code(""), ErrorCode::InvalidJson);
        assert_eq!(code("{"), ErrorCode::InvalidJson);
        assert_eq!(code("workflow=w"), ErrorCode::InvalidJson);
        assert_eq!(code("[]"), ErrorCode::InvalidRequest);
        assert_eq!(code(r#"{"input": {}}"#), ErrorCode::InvalidRequest);
        assert_eq!(
            code(r#"{"workflow": "", "input": {}}"#),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(r#"{"workflow": 5, "input": {}}"#),
            ErrorCode::InvalidRequest
        );
        assert_eq!(code(r#"{"workflow": "w"}"#), ErrorCode::InvalidRequest);
        assert_eq!(
            code(r#"{"workflow": "w", "input": [1]}"#),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(r#"{"workflow": "w", "input": {}, "inputs": {}}"#),
            ErrorCode::InvalidRequest
        );
        let err = parse_submission(br#"{"workflow": "w", "input": "x"}"#).unwrap_err();
        assert!(err.message.contains("the string `x`"), "{}", err.message);
        assert_eq!(err.details, [json!({"pointer": "/input"})]);
    }

    #[test]
    fn the_body_limit_is_exact() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let headers = HeaderMap::new();
        let read = |n: usize| rt.block_on(read_body(&headers, Body::from(vec![b' '; n]), 10));
        assert_eq!(read(10).unwrap().len(), 10);
        assert_eq!(read(11).unwrap_err().code, ErrorCode::PayloadTooLarge);
    }
}
