//! SIGHUP: the configuration file read again, its tokens, secrets and allowances put in
//! force without a restart. A configuration that does not load, or that would need a
//! restart, changes nothing and the one in force stays.

use super::{AppError, SetupContext, Supervisor, auth, point_at_simulator};
use crate::access::Auth;
use crate::capabilities::LiveSecrets;
use crate::catalog::Components;
use crate::config::HostConfig;
use crate::sim::RunningSim;
use std::path::PathBuf;
use std::sync::Arc;

/// What a SIGHUP reloads, and from where.
pub(super) struct Reload {
    path: PathBuf,
    auth: Auth,
    secrets: LiveSecrets,
    components: Arc<Components>,
    /// The embedded simulator's address, token and event secret, which a reload keeps
    /// pointing at.
    sim: Option<(String, String, Option<String>)>,
}

impl Reload {
    /// Reloads `path` into the parts that hold what it configures; `config` is the one in
    /// force, whose simulator token a reload keeps.
    pub(super) fn new(
        path: PathBuf,
        config: &HostConfig,
        auth: &Auth,
        secrets: LiveSecrets,
        components: Arc<Components>,
        sim: Option<&RunningSim>,
    ) -> Self {
        let sim = sim.map(|s| {
            let token = config.secrets.get("provider_token");
            let token = token.map(|t| t.expose().to_string()).unwrap_or_default();
            let events = config.secrets.get(super::SIM_WEBHOOK_SECRET);
            (s.base_url(), token, events.map(|e| e.expose().to_string()))
        });
        Self {
            path,
            auth: auth.clone(),
            secrets,
            components,
            sim,
        }
    }

    /// Reads the configuration again and puts its tokens, secrets and allowances in force;
    /// a configuration that does not load, or that would switch between open mode and
    /// tokens (which needs a restart), changes nothing.
    fn apply(&self) -> Result<String, String> {
        let mut config = HostConfig::load(Some(&self.path)).map_err(|e| e.to_string())?;
        if config.tokens.is_empty() != self.auth.is_open() {
            return Err(
                "the reloaded configuration switches between open mode and tokens; restart the host for that"
                    .into(),
            );
        }
        if let Some((url, token, events)) = &self.sim
            && !config.policy.adapters.contains_key("http-delivery")
        {
            if let Some(events) = events
                && config.secrets.get(super::SIM_WEBHOOK_SECRET).is_none()
            {
                config
                    .secrets
                    .insert(super::SIM_WEBHOOK_SECRET, events.as_str());
            }
            point_at_simulator(&mut config, url, token).map_err(|e| e.to_string())?;
        }
        self.auth.replace(&auth(&config));
        self.secrets.replace(config.secrets.clone());
        self.components.set_policy(config.policy.clone());
        Ok(format!(
            "reloaded {}: {} tokens, the secrets and the allowances of {} adapters are in force",
            self.path.display(),
            config.tokens.len(),
            config.policy.adapters.len()
        ))
    }
}

/// Starts the `reload` task: each SIGHUP applies `reload` until the host stops.
pub(super) fn on_hangup(tasks: &mut Supervisor, reload: Reload) -> Result<(), AppError> {
    // Listened for before the host announces itself: a SIGHUP is never the default (a
    // kill).
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .setup(|| "listening for SIGHUP".into())?;
    let stop = tasks.stopper();
    tasks.spawn("reload", async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = hangups.recv() => {}
            }
            match reload.apply() {
                Ok(done) => tracing::info!("{done}"),
                Err(e) => tracing::error!(
                    "SIGHUP: the configuration was not reloaded, the one in force stays: {e}"
                ),
            }
        }
    });
    Ok(())
}
