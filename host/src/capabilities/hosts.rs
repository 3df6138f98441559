//! Outbound HTTP destinations: parsing host rules and checking resolved addresses.
//!
//! A rule names a scheme (optional), a host and a port. Requests are matched on all three.
//! Because a host name is resolved after the rule check, the address actually connected to
//! is checked again ([`check_resolved_address`]): an IP-literal rule admits only that
//! address, `localhost` only loopback, and any other name never loopback, link-local
//! (cloud metadata), unspecified or multicast addresses — so DNS cannot route a granted
//! name to the host itself or its metadata service.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// The URL scheme of an outbound request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// The port used when a URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// One granted destination: `scheme://host:port`, or `host:port` for either scheme.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostRule {
    scheme: Option<Scheme>,
    /// Lower-cased host name or IP literal (IPv6 without brackets).
    host: String,
    port: u16,
}

/// Why a host rule did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRuleError {
    #[error(
        "outbound host `{0}` has an unsupported scheme; write `http://host:port`, `https://host:port` or `host:port`"
    )]
    Scheme(String),
    #[error("outbound host `{0}` has no host name; write e.g. `http://127.0.0.1:8080`")]
    EmptyHost(String),
    #[error(
        "outbound host `{0}` needs a port (or a scheme that implies one); write e.g. `127.0.0.1:8080` or `https://api.example.com`"
    )]
    MissingPort(String),
    #[error("outbound host `{0}` has an invalid port; use a number from 1 to 65535")]
    BadPort(String),
    #[error(
        "outbound host `{0}` must name only scheme, host and port (no path, query, user or wildcard)"
    )]
    Extra(String),
    #[error(
        "outbound host `{0}` names no valid host: use a DNS name (letters, digits, `-`, `.`), an IPv4 address or a bracketed IPv6 address"
    )]
    BadHost(String),
}

impl HostRule {
    /// A rule for exactly this destination.
    pub fn new(scheme: Option<Scheme>, host: &str, port: u16) -> Self {
        Self {
            scheme,
            host: normalize_host(host),
            port,
        }
    }

    /// The host part (lower-cased, IPv6 without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether a request to `scheme://host:port` matches this rule.
    pub fn matches(&self, scheme: Scheme, host: &str, port: u16) -> bool {
        self.scheme.is_none_or(|s| s == scheme)
            && self.host == normalize_host(host)
            && self.port == port
    }

    /// Whether every request matched by `other` is also matched by `self`.
    pub fn covers(&self, other: &HostRule) -> bool {
        let scheme_ok = match (self.scheme, other.scheme) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        scheme_ok && self.host == other.host && self.port == other.port
    }
}

fn normalize_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

impl FromStr for HostRule {
    type Err = HostRuleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let original = text.to_string();
        let (scheme, rest) = match text.split_once("://") {
            Some(("http", rest)) => (Some(Scheme::Http), rest),
            Some(("https", rest)) => (Some(Scheme::Https), rest),
            Some(_) => return Err(HostRuleError::Scheme(original)),
            None => (None, text),
        };
        // A trailing slash is harmless (`http://h:1/`); anything after it is not.
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@', '*']) {
            return Err(HostRuleError::Extra(original));
        }
        let (host, port) = split_host_port(rest);
        if host.is_empty() {
            return Err(HostRuleError::EmptyHost(original));
        }
        if !valid_host(host, rest.starts_with('[')) {
            return Err(HostRuleError::BadHost(original));
        }
        let port = match (port, scheme) {
            (Some(p), _) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(HostRuleError::BadPort(original)),
            },
            (None, Some(s)) => s.default_port(),
            (None, None) => return Err(HostRuleError::MissingPort(original)),
        };
        Ok(HostRule::new(scheme, host, port))
    }
}

/// Whether `host` is a DNS name, an IPv4 address, or (bracketed or with colons) an IPv6
/// address: what a URL's authority can name.
fn valid_host(host: &str, bracketed: bool) -> bool {
    if bracketed || host.contains(':') {
        return host.parse::<std::net::Ipv6Addr>().is_ok();
    }
    host.len() <= 253
        && !host.starts_with(['.', '-'])
        && !host.contains("..")
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// Splits `host:port`, `[v6]:port`, `host` or `[v6]`.
fn split_host_port(text: &str) -> (&str, Option<&str>) {
    if let Some(rest) = text.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => (rest, None),
        };
    }
    match text.rsplit_once(':') {
        // More than one colon without brackets: a bare IPv6 literal with no port.
        Some((host, _)) if host.contains(':') => (text, None),
        Some((host, port)) => (host, Some(port)),
        None => (text, None),
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = self.scheme {
            write!(f, "{}://", s.as_str())?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The verdict on one resolved address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressDecision {
    Allow,
    Deny(String),
}

/// Whether connecting to `addr` is allowed for a request to the granted `host`.
pub fn check_resolved_address(host: &str, addr: IpAddr) -> AddressDecision {
    let host = normalize_host(host);
    if let Ok(literal) = host.parse::<IpAddr>() {
        return if literal == addr {
            AddressDecision::Allow
        } else {
            AddressDecision::Deny(format!(
                "`{host}` is granted as an address, but {addr} was to be connected"
            ))
        };
    }
    if host == "localhost" {
        return if addr.is_loopback() {
            AddressDecision::Allow
        } else {
            AddressDecision::Deny(format!("`localhost` resolved to non-loopback {addr}"))
        };
    }
    match non_global(addr) {
        Some(kind) => AddressDecision::Deny(format!(
            "`{host}` resolved to {addr}, {kind}: a name reaches only the public internet; grant the address literally if it is really meant"
        )),
        None => AddressDecision::Allow,
    }
}

/// What kind of address `addr` is if it is not on the public internet (`None` if it is).
/// IPv4 embedded in IPv6 — mapped, compatible, NAT64 and 6to4 — is judged as the IPv4 it
/// carries.
pub fn non_global(addr: IpAddr) -> Option<&'static str> {
    match addr {
        IpAddr::V4(v4) => non_global_v4(v4),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if let Some(v4) = v6.to_ipv4_mapped() {
                return non_global_v4(v4);
            }
            let embedded = |hi: u16, lo: u16| {
                std::net::Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8)
            };
            // 64:ff9b::/96, NAT64: the IPv4 in its last 32 bits.
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                return non_global_v4(embedded(s[6], s[7]))
                    .map(|_| "a NAT64 form of a non-public IPv4 address");
            }
            // 2002::/16, 6to4: the IPv4 in bits 16..48.
            if s[0] == 0x2002 {
                return non_global_v4(embedded(s[1], s[2]))
                    .map(|_| "a 6to4 form of a non-public IPv4 address");
            }
            if v6.is_unspecified() {
                return Some("the unspecified address");
            }
            if v6.is_loopback() {
                return Some("a loopback address");
            }
            // ::/96, IPv4-compatible (deprecated): never public.
            if s[..6] == [0; 6] {
                return Some("an IPv4-compatible IPv6 address");
            }
            let first = s[0];
            if first & 0xfe00 == 0xfc00 {
                return Some("a unique local (private) address");
            }
            if first & 0xffc0 == 0xfe80 || first & 0xffc0 == 0xfec0 {
                return Some("a link-local or site-local address");
            }
            if first & 0xff00 == 0xff00 {
                return Some("a multicast address");
            }
            if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
                return Some("a local-use NAT64 address");
            }
            if s[0] == 0x2001 && s[1] == 0x0db8 {
                return Some("a documentation address");
            }
            if s[0] == 0x2001 && s[1] == 0 {
                return Some("a Teredo address");
            }
            if s[..4] == [0x100, 0, 0, 0] {
                return Some("a discard-only address");
            }
            None
        }
    }
}

fn non_global_v4(v4: std::net::Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = v4.octets();
    Some(match (a, b, c) {
        (0, ..) => "in 0.0.0.0/8 (this network)",
        (10, ..) => "a private address (10.0.0.0/8)",
        (100, 64..=127, _) => "a shared (carrier-grade NAT) address (100.64.0.0/10)",
        (127, ..) => "a loopback address",
        (169, 254, _) => "a link-local address",
        (172, 16..=31, _) => "a private address (172.16.0.0/12)",
        (192, 0, 0) => "an IETF protocol assignment (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (192, 88, 99) => "a 6to4 relay address",
        (192, 168, _) => "a private address (192.168.0.0/16)",
        (198, 18..=19, _) => "a benchmarking address (198.18.0.0/15)",
        (224..=239, ..) => "a multicast address",
        (240..=255, ..) => "a reserved or broadcast address (240.0.0.0/4)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_reached_through_a_name() {
        for ip in [
            "10.0.0.1",
            "172.31.255.255",
            "192.168.0.1",
            "100.127.0.1",
            "0.0.0.0",
            "198.19.1.1",
            "240.1.1.1",
            "255.255.255.255",
            "127.0.0.2",
            "169.254.1.1",
            "224.0.0.1",
            "192.0.2.7",
            "fc00::",
            "fdff::1",
            "fe80::2",
            "ff02::1",
            "::",
            "::1",
            "::ffff:192.168.0.1",
            "::192.168.0.1",
            "64:ff9b::c0a8:1",
            "64:ff9b:1::1",
            "2002:c0a8:1::",
            "2001:db8::1",
            "2001::1",
            "100::1",
        ] {
            let addr: IpAddr = ip.parse().unwrap();
            assert!(non_global(addr).is_some(), "{ip} counted as public");
            assert!(
                matches!(
                    check_resolved_address("api.example.com", addr),
                    AddressDecision::Deny(_)
                ),
                "{ip}"
            );
        }
        for ip in [
            "8.8.8.8",
            "93.184.216.34",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            let addr: IpAddr = ip.parse().unwrap();
            assert_eq!(non_global(addr), None, "{ip}");
        }
        // A literal grant is what the operator meant.
        let private: IpAddr = "10.0.0.5".parse().unwrap();
        assert_eq!(
            check_resolved_address("10.0.0.5", private),
            AddressDecision::Allow
        );
    }

    #[test]
    fn parses_the_documented_forms() {
        let r: HostRule = "http://127.0.0.1:8080".parse().unwrap();
        assert!(r.matches(Scheme::Http, "127.0.0.1", 8080));
        let r: HostRule = "https://API.example.com".parse().unwrap();
        assert!(r.matches(Scheme::Https, "api.example.com", 443));
        assert!(!r.matches(Scheme::Http, "api.example.com", 443));
        let r: HostRule = "example.com:9000".parse().unwrap();
        assert!(r.matches(Scheme::Http, "example.com", 9000));
        assert!(r.matches(Scheme::Https, "example.com", 9000));
        let r: HostRule = "http://[::1]:8080/".parse().unwrap();
        assert!(r.matches(Scheme::Http, "::1", 8080));
        assert_eq!(r.to_string(), "http://[::1]:8080");
    }

    #[test]
    fn rejects_what_it_cannot_check() {
        for (text, want) in [
            ("ftp://x:1", "unsupported scheme"),
            ("example.com", "needs a port"),
            ("http://x:0", "invalid port"),
            ("http://x:99999", "invalid port"),
            ("http://x:1/path", "no path"),
            ("*.example.com:443", "wildcard"),
            ("http://:80", "no host name"),
            // Found by the fuzzer: garbage between the brackets and colons was a "host".
            ("http://:]:", "names no valid host"),
            ("http://[example.com]:80", "names no valid host"),
            ("http://exa mple.com:80", "names no valid host"),
            ("http://a..b:80", "names no valid host"),
        ] {
            let err = text.parse::<HostRule>().unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.contains(text), "{text}: {err}");
        }
    }

    #[test]
    fn covers_is_scheme_aware() {
        let any: HostRule = "h:1".parse().unwrap();
        let http: HostRule = "http://h:1".parse().unwrap();
        assert!(any.covers(&http));
        assert!(!http.covers(&any));
        assert!(http.covers(&http));
    }

    #[test]
    fn resolved_addresses_cannot_escape_the_grant() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            check_resolved_address("127.0.0.1", ip("127.0.0.1")),
            AddressDecision::Allow
        );
        assert!(matches!(
            check_resolved_address("127.0.0.1", ip("127.0.0.2")),
            AddressDecision::Deny(_)
        ));
        assert_eq!(
            check_resolved_address("localhost", ip("::1")),
            AddressDecision::Allow
        );
        assert!(matches!(
            check_resolved_address("localhost", ip("10.0.0.1")),
            AddressDecision::Deny(_)
        ));
        for bad in [
            "127.0.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
        ] {
            assert!(
                matches!(
                    check_resolved_address("api.example.com", ip(bad)),
                    AddressDecision::Deny(_)
                ),
                "{bad}"
            );
        }
        assert_eq!(
            check_resolved_address("api.example.com", ip("93.184.216.34")),
            AddressDecision::Allow
        );
    }
}
