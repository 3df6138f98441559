//! `docket migrate`: moves every running workflow of one definition version to another by
//! one plan file, through the API (`POST /v1/workflows/{id}/migration`), and prints a table
//! of what moved and what was refused and why. `--dry-run` asks the same question and
//! changes nothing.
//!
//! The plan file:
//!
//! ```toml
//! reason = "deliver is now send; audit added; notify dropped"
//! drop = ["notify"]          # steps that never began, dropped
//! [steps]                    # old step id = new step id (others keep their ids)
//! deliver = "send"
//! ```
//!
//! Each workflow's request carries a key derived from the workflow, the target version and
//! the plan, so running the same command again answers what the first run did.

use super::client::Server;
use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

/// The plan file's fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    reason: String,
    #[serde(default)]
    steps: BTreeMap<String, String>,
    #[serde(default)]
    drop: Vec<String>,
}

/// The plan's `steps` as the API takes them: old id → new id, or null to drop.
fn plan_steps(path: &Path) -> anyhow::Result<(String, BTreeMap<String, Option<String>>)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let plan: PlanFile = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a migration plan: {e}\na plan has `reason = \"…\"`, an optional `drop = [\"step\"]` and an optional `[steps]` table of `old = \"new\"`",
            path.display()
        )
    })?;
    if plan.reason.trim().is_empty() {
        bail!(
            "{}: `reason` must say why the workflows move",
            path.display()
        );
    }
    let mut steps: BTreeMap<String, Option<String>> = plan
        .steps
        .into_iter()
        .map(|(from, to)| (from, Some(to)))
        .collect();
    for dropped in plan.drop {
        if steps.insert(dropped.clone(), None).is_some() {
            bail!(
                "{}: `{dropped}` is both moved in [steps] and dropped; name it once",
                path.display()
            );
        }
    }
    Ok((plan.reason, steps))
}

/// What `docket migrate` was asked.
pub struct Migration<'a> {
    pub workflow: &'a str,
    pub from: u32,
    pub to: u32,
    pub plan: &'a Path,
    pub dry_run: bool,
}

/// The workflows of `name` at version `from` that have not ended, oldest first.
async fn running_at(
    server: &Server,
    name: &str,
    from: u32,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut found = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/workflows?workflow={name}&limit=100");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let response = server
            .request(reqwest::Method::GET, &path)?
            .send()
            .await
            .with_context(|| format!("cannot reach {}", server.server))?;
        let status = response.status();
        let page: Value = response
            .json()
            .await
            .context("the server's answer is not JSON")?;
        if !status.is_success() {
            bail!(
                "listing the workflows of `{name}` was refused ({status}): {}",
                page["error"]["message"].as_str().unwrap_or("no message")
            );
        }
        for w in page["data"].as_array().into_iter().flatten() {
            let state = w["state"].as_str().unwrap_or_default();
            if w["definition_version"].as_u64() == Some(u64::from(from))
                && !matches!(state, "completed" | "failed" | "cancelled")
            {
                found.push((
                    w["workflow_id"].as_str().unwrap_or_default().to_string(),
                    state.to_string(),
                ));
            }
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    found.reverse();
    Ok(found)
}

/// One line of the table: what the plan does to a workflow.
fn summary(plan: &Value) -> String {
    let mut parts: Vec<String> = plan["moved"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["from"] != m["to"])
        .map(|m| {
            format!(
                "{} → {}",
                m["from"].as_str().unwrap_or("?"),
                m["to"].as_str().unwrap_or("?")
            )
        })
        .collect();
    for (field, word) in [("added", "added"), ("dropped", "dropped")] {
        let ids: Vec<&str> = plan[field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !ids.is_empty() {
            parts.push(format!("{word} {}", ids.join(", ")));
        }
    }
    if parts.is_empty() {
        "every step kept".into()
    } else {
        parts.join("; ")
    }
}

/// The reasons of a refusal, one per line's detail.
fn reasons(details: &Value, message: &str) -> String {
    let listed: Vec<String> = details
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["reason"].as_str().map(str::to_string))
        .collect();
    if listed.is_empty() {
        message.to_string()
    } else {
        listed.join("; ")
    }
}

pub async fn run(server: &Server, m: Migration<'_>) -> anyhow::Result<ExitCode> {
    let (reason, steps) = plan_steps(m.plan)?;
    let body = json!({"to_version": m.to, "steps": steps, "reason": reason, "dry_run": m.dry_run});
    let plan_digest =
        crate::intent::canonicalize(&json!({"to": m.to, "steps": steps, "reason": reason}))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .digest;
    let workflows = running_at(server, m.workflow, m.from).await?;
    if workflows.is_empty() {
        println!(
            "no running workflow of `{}` is at v{}; nothing to migrate",
            m.workflow, m.from
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows: Vec<[String; 4]> = Vec::with_capacity(workflows.len());
    let mut refused = 0;
    for (id, state) in &workflows {
        let mut request = server
            .request(
                reqwest::Method::POST,
                &format!("/v1/workflows/{id}/migration"),
            )?
            .json(&body);
        if !m.dry_run {
            // The same command run again is the same request: it answers what it did.
            let digest = plan_digest.trim_start_matches("sha256:");
            request = request.header(
                "Idempotency-Key",
                format!("migrate-{id}-v{}-{}", m.to, &digest[..16.min(digest.len())]),
            );
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {}", server.server))?;
        let status = response.status();
        let answer: Value = response
            .json()
            .await
            .context("the server's answer is not JSON")?;
        let (result, detail) = match (status.as_u16(), answer["would"].as_str()) {
            (200, Some("migrate")) => ("would move".to_string(), summary(&answer["plan"])),
            (200, Some("refuse")) => {
                refused += 1;
                (
                    "would be refused".to_string(),
                    reasons(&answer["reasons"], answer["message"].as_str().unwrap_or("")),
                )
            }
            (201, _) => ("moved".to_string(), summary(&answer)),
            _ => {
                refused += 1;
                let error = &answer["error"];
                (
                    if error["code"] == "migration_refused" {
                        "refused".to_string()
                    } else {
                        format!("error ({})", error["code"].as_str().unwrap_or("unknown"))
                    },
                    reasons(
                        &error["details"],
                        error["message"].as_str().unwrap_or("no message"),
                    ),
                )
            }
        };
        rows.push([id.clone(), state.clone(), result, detail]);
    }
    print_table(&rows);
    let moved = rows.len() - refused;
    println!(
        "{} workflow(s) of `{}` v{}: {moved} {} to v{}, {refused} {}{}",
        rows.len(),
        m.workflow,
        m.from,
        if m.dry_run { "would move" } else { "moved" },
        m.to,
        if m.dry_run {
            "would be refused"
        } else {
            "refused"
        },
        if m.dry_run {
            " (dry run: nothing changed)"
        } else {
            ""
        }
    );
    Ok(if refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_table(rows: &[[String; 4]]) {
    let header = ["WORKFLOW", "STATE", "RESULT", "DETAIL"];
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 4]| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i == 3 {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header);
    for row in rows {
        line([&row[0], &row[1], &row[2], &row[3]]);
    }
}
