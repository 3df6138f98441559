//! The `[adapters.*]` configuration a bench's host needs: every delivery variant the
//! shipped workflows name, pointed at the bench's provider simulator (a host refuses to
//! start with a shipped workflow's adapter left unconfigured outside development mode).

/// The delivery variants of `workflows/`.
const DELIVERY: [&str; 3] = [
    "http-delivery",
    "http-delivery-query-only",
    "http-delivery-fire-and-forget",
];

/// `[adapters.X]` for each delivery variant, allowed `provider` and the `provider_token`
/// secret, with `provider` as its base URL.
pub fn delivery(provider: &str) -> String {
    DELIVERY
        .iter()
        .map(|name| {
            format!(
                "[adapters.{name}]\nallow_hosts = [{provider:?}]\nallow_secrets = [\"provider_token\"]\n\
                 settings = {{ base_url = {provider:?} }}\n"
            )
        })
        .collect()
}
