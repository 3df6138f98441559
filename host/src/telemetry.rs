//! Where the host's spans go: the log on stderr always, and OpenTelemetry (OTLP over HTTP)
//! when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) is set — and
//! how a workflow's trace travels with it: the W3C `traceparent` an admission takes (or
//! starts) is kept with the workflow, and every attempt's span, on any host, is its child.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::collections::HashMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// What must outlive the process's work: the exporter, flushed when dropped.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Spans still batched go out before the process ends.
            let _ = provider.shutdown();
        }
    }
}

/// Whether the environment asks for OTLP export.
fn otlp_requested() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|v| !v.trim().is_empty()))
}

/// Installs the global subscriber: the log filtered by `DOCKET_LOG` (else `default`), and
/// the OTLP exporter when asked for. Must run before any async runtime starts (the
/// exporter's HTTP client is a blocking one, on its own thread).
pub fn init(default: &str) -> Telemetry {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DOCKET_LOG")
        .unwrap_or_else(|_| default.into());
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let provider = otlp_requested()
        .then(|| {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .build()
                .map_err(|e| eprintln!("warning: OTLP export is off: {e}"))
                .ok()?;
            Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(
                        opentelemetry_sdk::Resource::builder()
                            .with_service_name("docket")
                            .build(),
                    )
                    .build(),
            )
        })
        .flatten();
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("docket")));
    tracing_subscriber::registry()
        .with(filter)
        .with(log)
        .with(otel)
        .init();
    Telemetry { provider }
}

/// A W3C `traceparent` value, checked: `00-<32 hex>-<16 hex>-<2 hex>`, ids not all zero.
pub fn valid_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.trim().split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    matches!(parts.as_slice(), [v, t, p, f]
        if hex(v, 2) && *v != "ff" && hex(t, 32) && hex(p, 16) && hex(f, 2)
            && t.bytes().any(|b| b != b'0') && p.bytes().any(|b| b != b'0'))
}

/// Makes `span` a child of the context `traceparent` names.
pub fn adopt(span: &tracing::Span, traceparent: &str) {
    let carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(cx);
}

/// The `traceparent` of `span` when spans are exported (`None` otherwise).
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    carrier
        .remove("traceparent")
        .filter(|t| valid_traceparent(t))
}

#[cfg(test)]
mod tests {
    use super::valid_traceparent;

    #[test]
    fn only_well_formed_traceparents_pass() {
        assert!(valid_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert!(!valid_traceparent(bad), "{bad:?}");
        }
    }
}
