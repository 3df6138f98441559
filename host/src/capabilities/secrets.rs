//! Secret values: where they come from, who may resolve them, and redaction.
//!
//! A secret is resolved at call time and only for names in the step's grant. Its value must
//! never be written down by the host: every log line, error text and receipt a plugin
//! produces passes through a [`Redactor`] built from the values that call could see.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A secret's value. `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(Arc<str>);

impl SecretValue {
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        Self(value.into())
    }

    /// The value itself; call only where it is handed to a plugin.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue([redacted])")
    }
}

/// The host's secrets as they stand now: replaced whole when the configuration is
/// reloaded (SIGHUP); a call takes the source in force when it starts.
#[derive(Clone, Default)]
pub struct LiveSecrets(Arc<std::sync::RwLock<Arc<SecretSource>>>);

impl LiveSecrets {
    pub fn new(source: Arc<SecretSource>) -> Self {
        Self(Arc::new(std::sync::RwLock::new(source)))
    }

    /// The source in force.
    pub fn current(&self) -> Arc<SecretSource> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `source` in force for the calls that start from now on.
    pub fn replace(&self, source: SecretSource) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(source);
    }
}

/// The host's secret source: name → value, read from the operator's config, the
/// environment or the command line.
#[derive(Debug, Clone, Default)]
pub struct SecretSource {
    values: BTreeMap<String, SecretValue>,
}

impl SecretSource {
    /// A source holding exactly these pairs.
    pub fn from_pairs<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<Arc<str>>,
    {
        Self {
            values: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), SecretValue::new(v)))
                .collect(),
        }
    }

    /// Adds or replaces one secret.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<Arc<str>>) {
        self.values.insert(name.into(), SecretValue::new(value));
    }

    /// The value of `name`, if the source has one.
    pub fn get(&self, name: &str) -> Option<&SecretValue> {
        self.values.get(name)
    }

    /// A redactor for the values of these names (the ones a call could see).
    pub fn redactor_for<'a>(&self, names: impl IntoIterator<Item = &'a String>) -> Redactor {
        Redactor::new(
            names
                .into_iter()
                .filter_map(|n| self.values.get(n).map(|v| (n.clone(), v.clone()))),
        )
    }
}

/// Replaces secret values with `[redacted:NAME]` in text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest value first, so a secret containing another is replaced whole.
    values: Vec<(String, SecretValue)>,
}

impl Redactor {
    pub fn new(values: impl IntoIterator<Item = (String, SecretValue)>) -> Self {
        let mut values: Vec<_> = values
            .into_iter()
            .filter(|(_, v)| !v.expose().is_empty())
            .collect();
        values.sort_by_key(|(_, v)| std::cmp::Reverse(v.expose().len()));
        Self { values }
    }

    /// `text` with every secret value replaced.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (name, value) in &self.values {
            if out.contains(value.expose()) {
                out = Cow::Owned(out.replace(value.expose(), &format!("[redacted:{name}]")));
            }
        }
        out
    }

    /// Whether there is anything to redact at all.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let v = SecretValue::new("hunter2");
        assert!(!format!("{v:?}").contains("hunter2"));
        let s = SecretSource::from_pairs([("token", "hunter2")]);
        assert!(!format!("{s:?}").contains("hunter2"));
    }

    #[test]
    fn redacts_only_values_the_call_could_see() {
        let s = SecretSource::from_pairs([("a", "abc-secret"), ("b", "other")]);
        let r = s.redactor_for([&"a".to_string()]);
        assert_eq!(r.redact("x abc-secret y other"), "x [redacted:a] y other");
        assert!(matches!(r.redact("clean"), Cow::Borrowed(_)));
    }

    #[test]
    fn longer_values_are_replaced_first() {
        let r = Redactor::new([
            ("short".into(), SecretValue::new("abc")),
            ("long".into(), SecretValue::new("abcdef")),
        ]);
        assert_eq!(r.redact("abcdef abc"), "[redacted:long] [redacted:short]");
    }
}
