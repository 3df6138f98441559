//! The per-call store state: WASI with an empty context, egress hooks, limits, and docket's
//! host interfaces (log, clock, settings, secrets).
//!
//! One `HostState` lives for exactly one call; nothing a plugin does survives it.

use super::bindings::adapter::docket::plugin0_3_0::{clock, log, secrets, settings};
use super::egress::Egress;
use super::pipe::CappedPipe;
use crate::capabilities::{Grant, Redactor, SecretSource};
use crate::clock::Clock;
use std::collections::BTreeMap;
use std::sync::Arc;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// Most log lines kept per call; later lines are counted, not kept.
const MAX_LOG_LINES: usize = 200;
/// Longest log line kept, in bytes.
const MAX_LOG_LINE: usize = 4096;
/// Capacity of the captured stdout and stderr, each.
pub(super) const PIPE_CAPACITY: usize = 64 * 1024;

/// Most host resources (streams, pollables, `wasi:http` fields, requests, bodies) one call
/// may hold at once. wasmtime's default is a million: a guest in a loop could pin host
/// memory without growing its own. An HTTP exchange needs about a dozen, most dropped
/// as it goes.
pub(super) const MAX_TABLE_ENTRIES: usize = 256;
/// Most bytes one `wasi:http` `fields` map may hold, by wasmtime's accounting (names and
/// values plus their in-memory headers; proxies allow about 8 KiB on the wire).
pub(super) const MAX_FIELDS_BYTES: usize = 16 * 1024;
/// Bytes of an outgoing body the host buffers per chunk (one chunk plus one in flight).
pub(super) const OUTGOING_CHUNK_BYTES: usize = 16 * 1024;
/// The most host memory one table entry can hold: a `fields` map, or an outgoing body's
/// two buffered chunks, whichever is larger.
const MAX_ENTRY_BYTES: usize = if MAX_FIELDS_BYTES > 2 * OUTGOING_CHUNK_BYTES {
    MAX_FIELDS_BYTES
} else {
    2 * OUTGOING_CHUNK_BYTES
};
/// Host memory reserved for a call's resources, counted in its memory budget: the guest's
/// linear memory may grow only to the budget less this.
pub const HOST_RESERVED_BYTES: usize = MAX_TABLE_ENTRIES * MAX_ENTRY_BYTES;

/// Severity of a plugin log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Where a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogSource {
    /// docket's `log` interface.
    Plugin,
    Stdout,
    Stderr,
    /// The host itself (denials, limits).
    Host,
}

/// One line of a call's bounded log, already redacted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogLine {
    pub level: LogLevel,
    pub source: LogSource,
    pub message: String,
}

/// Everything a call may see besides its input: settings, secrets, clock, identifiers.
#[derive(Clone)]
pub struct CallEnv {
    /// Read-only operator settings for this adapter.
    pub settings: Arc<BTreeMap<String, String>>,
    /// The host's secret source; only names in the grant resolve.
    pub secrets: Arc<SecretSource>,
    pub clock: Arc<dyn Clock>,
    /// Identifies the call in host logs (e.g. `wf_…/deliver/att_…`).
    pub label: Arc<str>,
}

/// A memory limiter that remembers why it refused to grow.
#[derive(Debug)]
pub(super) struct Limits {
    /// The call's memory budget: its linear memories, summed, plus the host's reserve for
    /// its resources ([`HOST_RESERVED_BYTES`]).
    pub(super) memory_cap: usize,
    /// Budget taken so far: the host's reserve, then linear memory as it is granted.
    pub(super) used: usize,
    /// The size a refused grow asked for.
    pub(super) refused: Option<usize>,
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // The cap is on the sum: a component may have several memories, and each under the
        // cap could still add up to several times it.
        let total = self.used + desired.saturating_sub(current);
        if total > self.memory_cap {
            self.refused = Some(total);
            return Ok(false);
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// The `T` of every `Store<T>`.
pub(super) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    egress: Egress,
    pub(super) limits: Limits,
    /// The call's external request identity (idempotency key or stable reference), which
    /// the host's log shows only shortened.
    pub(super) identity: Option<String>,
    env: CallEnv,
    grant: Arc<Grant>,
    pub(super) redactor: Redactor,
    pub(super) log: Vec<LogLine>,
    pub(super) dropped_lines: usize,
    pub(super) stdout: CappedPipe,
    pub(super) stderr: CappedPipe,
}

/// The host's [`Clock`] as the guest's WASI wall clock.
struct HostWallClock(Arc<dyn Clock>);

impl wasmtime_wasi::HostWallClock for HostWallClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_millis(1)
    }

    fn now(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.0.now_ms())
    }
}

/// The longest prefix of `text` of at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl HostState {
    pub(super) fn new(
        env: CallEnv,
        grant: Arc<Grant>,
        memory_cap: usize,
        call_timeout: std::time::Duration,
        outbound: &super::RuntimeConfig,
        connections: Arc<super::keepalive::Pool>,
    ) -> Self {
        let stdout = CappedPipe::new(PIPE_CAPACITY);
        let stderr = CappedPipe::new(PIPE_CAPACITY);
        // Deny by default: no environment, no arguments, no preopened directory, no socket
        // address allowed, no name lookup. The baseline is importable but grants nothing.
        // The wall clock is the host's, so a plugin sees the same time as the host's records
        // (and a test that moves the host's clock moves the plugin's).
        let wasi = WasiCtx::builder()
            .wall_clock(HostWallClock(env.clock.clone()))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build();
        let redactor = env.secrets.redactor_for(grant.secrets());
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_TABLE_ENTRIES);
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(MAX_FIELDS_BYTES);
        Self {
            wasi,
            table,
            http,
            egress: Egress::new(
                grant.clone(),
                call_timeout,
                env.label.clone(),
                redactor.clone(),
                outbound,
                connections,
            ),
            limits: Limits {
                memory_cap,
                used: HOST_RESERVED_BYTES,
                refused: None,
            },
            identity: None,
            env,
            grant,
            redactor,
            log: Vec::new(),
            dropped_lines: 0,
            stdout,
            stderr,
        }
    }

    /// The call's label for host logs.
    pub(super) fn label(&self) -> &str {
        &self.env.label
    }

    pub(super) fn denials(&self) -> super::egress::Denials {
        self.egress.denials().lock().unwrap().clone()
    }

    /// Records one line, redacted and bounded, and forwards it to `tracing`. Past the line
    /// cap a line is only counted: a guest in a loop must not fill the host's log.
    pub(super) fn push_log(&mut self, level: LogLevel, source: LogSource, message: &str) {
        if self.log.len() >= MAX_LOG_LINES {
            self.dropped_lines += 1;
            return;
        }
        // Cut before redacting, so a huge line costs bounded work; twice the kept length,
        // so a secret that straddles this cut is removed by the final one below.
        let message = cut(message, 2 * MAX_LOG_LINE);
        let mut message = self.redactor.redact(message).into_owned();
        if message.len() > MAX_LOG_LINE {
            let mut cut = MAX_LOG_LINE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let label = &*self.env.label;
        // The host's log never carries the external request identity in full: whoever reads
        // the logs could replay it. The attempt's own record keeps it.
        let logged = match &self.identity {
            Some(identity)
                if identity.len() >= MIN_SHORTENED && message.contains(identity.as_str()) =>
            {
                std::borrow::Cow::Owned(message.replace(identity.as_str(), &shortened(identity)))
            }
            _ => std::borrow::Cow::Borrowed(message.as_str()),
        };
        match level {
            LogLevel::Trace => tracing::trace!(call = label, ?source, "{logged}"),
            LogLevel::Debug => tracing::debug!(call = label, ?source, "{logged}"),
            LogLevel::Info => tracing::info!(call = label, ?source, "{logged}"),
            LogLevel::Warn => tracing::warn!(call = label, ?source, "{logged}"),
            LogLevel::Error => tracing::error!(call = label, ?source, "{logged}"),
        }
        self.log.push(LogLine {
            level,
            source,
            message,
        });
    }

    /// Moves captured stdout and stderr into the log, line by line; what the pipes dropped
    /// is counted.
    pub(super) fn drain_pipes(&mut self) {
        let dropped = self.stdout.dropped() + self.stderr.dropped();
        if dropped > 0 {
            self.push_log(
                LogLevel::Warn,
                LogSource::Host,
                &format!(
                    "{dropped} bytes of stdout/stderr past {PIPE_CAPACITY} bytes were dropped"
                ),
            );
        }
        for (pipe, source, level) in [
            (self.stdout.contents(), LogSource::Stdout, LogLevel::Info),
            (self.stderr.contents(), LogSource::Stderr, LogLevel::Warn),
        ] {
            let text = String::from_utf8_lossy(&pipe).into_owned();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                self.push_log(level, source, line);
            }
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.egress,
        }
    }
}

impl log::Host for HostState {
    fn write(&mut self, level: log::Level, message: String) {
        let level = match level {
            log::Level::Trace => LogLevel::Trace,
            log::Level::Debug => LogLevel::Debug,
            log::Level::Info => LogLevel::Info,
            log::Level::Warn => LogLevel::Warn,
            log::Level::Error => LogLevel::Error,
        };
        self.push_log(level, LogSource::Plugin, &message);
    }
}

impl clock::Host for HostState {
    fn now_ms(&mut self) -> u64 {
        self.env.clock.now_ms()
    }
}

impl settings::Host for HostState {
    fn get(&mut self, name: String) -> Option<String> {
        self.env.settings.get(&name).cloned()
    }
}

impl secrets::Host for HostState {
    fn get(&mut self, name: String) -> Result<String, secrets::SecretError> {
        if !self.grant.secrets().contains(&name) {
            self.push_log(
                LogLevel::Warn,
                LogSource::Host,
                &format!("secret `{name}` requested but not granted to this step"),
            );
            return Err(secrets::SecretError::NotGranted(name));
        }
        match self.env.secrets.get(&name) {
            Some(value) => Ok(value.expose().to_string()),
            None => Err(secrets::SecretError::NotFound(name)),
        }
    }
}

impl super::bindings::adapter::docket::plugin0_3_0::types::Host for HostState {}

/// Shorter identities are left as they are: a few characters are no capability, and
/// replacing them would garble every word that contains them.
const MIN_SHORTENED: usize = 16;

/// The first characters of a request identity, enough to tell it apart in a log.
fn shortened(identity: &str) -> String {
    let end = identity
        .char_indices()
        .nth(12)
        .map_or(identity.len(), |(i, _)| i);
    format!("{}…", &identity[..end])
}

#[cfg(test)]
mod tests {
    use super::Limits;
    use wasmtime::ResourceLimiter;

    /// Two memories, each under the cap, may not add up to more than it.
    #[test]
    fn the_memory_cap_is_on_the_sum_of_a_calls_memories() {
        let mut limits = Limits {
            memory_cap: 10 << 20,
            used: 0,
            refused: None,
        };
        assert!(limits.memory_growing(0, 6 << 20, None).unwrap());
        assert!(!limits.memory_growing(0, 6 << 20, None).unwrap());
        assert_eq!(limits.refused, Some(12 << 20));
        // Growing the first memory further counts only what it adds.
        assert!(limits.memory_growing(6 << 20, 10 << 20, None).unwrap());
        assert!(!limits.memory_growing(0, 64 << 10, None).unwrap());
    }

    #[test]
    fn an_identity_is_shortened_never_shown_whole() {
        assert_eq!(
            super::shortened("dk-76127e6e322415765d2563aab4beddfb31e08ae1"),
            "dk-76127e6e3…"
        );
        const { assert!(super::MIN_SHORTENED > 12) };
    }
}
