//! URL handling: splitting an absolute URL for `wasi:http` and encoding query values.

use wasip2::http::types::Scheme;

/// Percent-encodes `value` for use as a query-string name or value.
pub fn encode_query_component(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// The parts of an absolute `http`/`https` URL that `wasi:http` takes separately.
#[derive(Debug)]
pub(super) struct Target {
    pub(super) scheme: Scheme,
    pub(super) authority: String,
    pub(super) path_and_query: String,
}

pub(super) fn parse_url(url: &str) -> Result<Target, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("`{url}` has no scheme; expected http://host:port/path"))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => {
            return Err(format!(
                "scheme `{other}` is not supported; use http or https"
            ));
        }
    };
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path_and_query) = rest.split_at(split);
    if authority.is_empty() {
        return Err(format!("`{url}` has no host"));
    }
    if authority.contains('@') {
        return Err(format!(
            "`{url}` carries credentials; send them in a header instead"
        ));
    }
    let path_and_query = match path_and_query.chars().next() {
        None => "/".to_string(),
        Some('?') => format!("/{path_and_query}"),
        Some(_) => path_and_query.to_string(),
    };
    Ok(Target {
        scheme,
        authority: authority.to_string(),
        path_and_query,
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_urls() {
        let t = parse_url("http://127.0.0.1:8080/v1/deliveries?client_reference=a").unwrap();
        assert!(matches!(t.scheme, Scheme::Http));
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert_eq!(t.path_and_query, "/v1/deliveries?client_reference=a");
        assert_eq!(parse_url("https://h").unwrap().path_and_query, "/");
        assert_eq!(parse_url("http://h?x=1#f").unwrap().path_and_query, "/?x=1");
        assert!(parse_url("ftp://h/").is_err());
        assert!(parse_url("127.0.0.1:8080/x").is_err());
        assert!(parse_url("http://user:pw@h/").is_err());
    }

    #[test]
    fn encodes_query_components() {
        assert_eq!(
            encode_query_component("a b/c?d=é"),
            "a%20b%2Fc%3Fd%3D%C3%A9"
        );
        assert_eq!(encode_query_component("wf-1_step.2~"), "wf-1_step.2~");
    }
}
