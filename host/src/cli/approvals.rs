//! `docket approvals`, `docket approve`, `docket reject`: an approver's side of approval
//! steps, as thin HTTP clients of the API.

use super::client::{Server, print, step_path};
use anyhow::Context;
use std::process::ExitCode;

/// `docket approvals`: what the caller may decide, oldest first, as a table.
pub async fn list(server: &Server) -> anyhow::Result<ExitCode> {
    let response = server
        .request(reqwest::Method::GET, "/v1/approvals")?
        .send()
        .await
        .with_context(|| format!("cannot reach {}", server.server))?;
    if !response.status().is_success() {
        return print(response).await;
    }
    let body: serde_json::Value = response
        .json()
        .await
        .context("the server's answer is not JSON")?;
    let rows = body["approvals"].as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        println!("No approval waits for you.");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<32}  {:<10}  {:<24}  {:<24}  SUMMARY",
        "WORKFLOW", "STEP", "ASKED", "EXPIRES"
    );
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    for row in rows {
        println!(
            "{:<32}  {:<10}  {:<24}  {:<24}  {}",
            text(&row["workflow_id"]),
            text(&row["step"]),
            text(&row["asked_at"]),
            text(&row["expires_at"]),
            text(&row["summary"])
        );
        // Whole, on a line of its own: it is what an approval must name.
        println!("  digest {}", text(&row["digest"]));
    }
    println!(
        "\nRead a consequence whole with GET /v1/workflows/<WORKFLOW>/steps/<STEP>/consequence; approve it with: docket approve <WORKFLOW> <STEP> --digest <digest>"
    );
    Ok(ExitCode::SUCCESS)
}

/// `docket approve`: consent to the consequence with `digest`.
pub async fn approve(
    server: &Server,
    id: &str,
    step: &str,
    digest: &str,
    note: Option<&str>,
    key: Option<String>,
) -> anyhow::Result<ExitCode> {
    let key = key.unwrap_or_else(|| format!("cli-approve-{:016x}", rand::random::<u64>()));
    let response = server
        .request(
            reqwest::Method::POST,
            &format!("{}/approve", step_path(id, step)?),
        )?
        .header("Idempotency-Key", key)
        .json(&serde_json::json!({"digest": digest, "note": note}))
        .send()
        .await
        .with_context(|| format!("cannot reach {}", server.server))?;
    print(response).await
}

/// `docket reject`: refuse the consequence, with why.
pub async fn reject(
    server: &Server,
    id: &str,
    step: &str,
    reason: &str,
    key: Option<String>,
) -> anyhow::Result<ExitCode> {
    let key = key.unwrap_or_else(|| format!("cli-reject-{:016x}", rand::random::<u64>()));
    let response = server
        .request(
            reqwest::Method::POST,
            &format!("{}/reject", step_path(id, step)?),
        )?
        .header("Idempotency-Key", key)
        .json(&serde_json::json!({"reason": reason}))
        .send()
        .await
        .with_context(|| format!("cannot reach {}", server.server))?;
    print(response).await
}
