//! `docket submit`, `docket status`, `docket timeline`, `docket cancel`, `docket revise`:
//! thin HTTP clients of the API.

use anyhow::{Context, bail};
use clap::Args;
use std::process::ExitCode;

/// Where the API is and who is calling.
#[derive(Debug, Args)]
pub struct Server {
    /// Base URL of a running `docket serve`.
    #[arg(long, env = "DOCKET_URL", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// API token (omit for a host without tokens).
    #[arg(long, env = "DOCKET_TOKEN")]
    pub token: Option<String>,
    /// CA certificates (PEM) to trust for an `https://` server besides the public roots
    /// (a host with its own certificate authority).
    #[arg(long, env = "DOCKET_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    #[arg(skip)]
    client: std::sync::OnceLock<reqwest::Client>,
}

impl Server {
    pub(super) fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> anyhow::Result<reqwest::RequestBuilder> {
        let client = match self.client.get() {
            Some(client) => client,
            None => {
                let built = crate::outbound::client(self.ca_file.as_deref(), None)?;
                self.client.get_or_init(|| built)
            }
        };
        let url = format!("{}{}", self.server.trim_end_matches('/'), path);
        let r = client.request(method, url);
        Ok(match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        })
    }
}

/// Prints an API answer (pretty JSON) and turns an error status into a failing exit code.
pub(super) async fn print(response: reqwest::Response) -> anyhow::Result<ExitCode> {
    let status = response.status();
    let body: serde_json::Value = response
        .json()
        .await
        .context("the server's answer is not JSON")?;
    println!("{}", serde_json::to_string_pretty(&body)?);
    Ok(if status.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub async fn submit(
    server: &Server,
    workflow: &str,
    key: &str,
    input: &str,
) -> anyhow::Result<ExitCode> {
    let input: serde_json::Value =
        serde_json::from_str(input).context("--input is not valid JSON")?;
    let response = server
        .request(reqwest::Method::POST, "/v1/intents")?
        .header("Idempotency-Key", key)
        .json(&serde_json::json!({"workflow": workflow, "input": input}))
        .send()
        .await
        .with_context(|| format!("cannot reach {}", server.server))?;
    print(response).await
}

pub async fn status(server: &Server, id: &str) -> anyhow::Result<ExitCode> {
    let response = server
        .request(reqwest::Method::GET, &workflow_path(id)?)?
        .send()
        .await
        .with_context(|| format!("cannot reach {}", server.server))?;
    print(response).await
}

/// A step of a workflow, fit for a path.
pub(super) fn step_path(id: &str, step: &str) -> anyhow::Result<String> {
    if step.is_empty() || step.contains('/') || step.contains('?') {
        bail!("`{step}` is not a step id; ids look like `approve`");
    }
    Ok(format!("{}/steps/{step}", workflow_path(id)?))
}

/// A workflow id fit for a path.
fn workflow_path(id: &str) -> anyhow::Result<String> {
    if id.is_empty() || id.contains('/') || id.contains('?') {
        bail!("`{id}` is not a workflow id; ids look like wf_…");
    }
    Ok(format!("/v1/workflows/{id}"))
}

pub async fn cancel(
    server: &Server,
    id: &str,
    reason: &str,
    withdraw: bool,
    key: Option<String>,
) -> anyhow::Result<ExitCode> {
    let key = key.unwrap_or_else(|| format!("cli-cancel-{:016x}", rand::random::<u64>()));
    let response = server
        .request(
            reqwest::Method::POST,
            &format!("{}/cancel", workflow_path(id)?),
        )?
        .header("Idempotency-Key", key)
        .json(&serde_json::json!({"reason": reason, "withdraw": withdraw}))
        .send()
        .await
        .with_context(|| format!("cannot reach {}", server.server))?;
    print(response).await
}

pub async fn revise(
    server: &Server,
    id: &str,
    input: &str,
    reason: &str,
    key: Option<String>,
) -> anyhow::Result<ExitCode> {
    let input: serde_json::Value =
        serde_json::from_str(input).context("--input is not valid JSON")?;
    let key = key.unwrap_or_else(|| format!("cli-revise-{:016x}", rand::random::<u64>()));
    let response = server
        .request(
            reqwest::Method::POST,
            &format!("{}/revisions", workflow_path(id)?),
        )?
        .header("Idempotency-Key", key)
        .json(&serde_json::json!({"input": input, "reason": reason}))
        .send()
        .await
        .with_context(|| format!("cannot reach {}", server.server))?;
    print(response).await
}

pub async fn timeline(server: &Server, id: &str) -> anyhow::Result<ExitCode> {
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/workflows/{id}/timeline?limit=500");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let response = server
            .request(reqwest::Method::GET, &path)?
            .send()
            .await
            .with_context(|| format!("cannot reach {}", server.server))?;
        if !response.status().is_success() {
            return print(response).await;
        }
        let page: serde_json::Value = response.json().await?;
        for e in page["data"].as_array().into_iter().flatten() {
            println!(
                "{:>4}  {}  {:<11}  {:<10}  {}",
                e["seq"],
                e["at"].as_str().unwrap_or(""),
                e["kind"].as_str().unwrap_or(""),
                e["step"].as_str().unwrap_or("-"),
                e["text"].as_str().unwrap_or("")
            );
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return Ok(ExitCode::SUCCESS),
        }
    }
}
