//! Decrypted values withheld from messages: an API server's error about a decrypted member may
//! echo a value (an invalid field's content), and such a message reaches status, events and
//! logs.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Values shorter than this are not withheld (`1`, `on` would blank ordinary words).
pub const MIN_LEN: usize = 3;

/// What is written in place of a withheld value.
pub const MASK: &str = "<redacted>";

/// The decrypted values of a member, and their base64 forms (`stringData` is echoed as
/// `data`), longest first.
#[derive(Default, Clone, PartialEq, Eq)]
pub struct Redaction {
    texts: Vec<String>,
}

/// How many texts, never the texts (an error's debug form must not show them).
impl std::fmt::Debug for Redaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redaction({} texts withheld)", self.texts.len())
    }
}

impl Redaction {
    pub fn new(plaintexts: Vec<String>) -> Redaction {
        let mut texts: Vec<String> = plaintexts
            .into_iter()
            .filter(|t| t.len() >= MIN_LEN)
            .flat_map(|t| {
                let encoded = STANDARD.encode(&t);
                [t, encoded]
            })
            .collect();
        texts.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        texts.dedup();
        Redaction { texts }
    }

    /// `message` with every withheld value replaced by [`MASK`].
    pub fn apply(&self, message: &str) -> String {
        let mut out = message.to_string();
        for text in &self.texts {
            if out.contains(text.as_str()) {
                out = out.replace(text.as_str(), MASK);
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// Withholds what `other` withholds too.
    pub fn extend(&mut self, other: &Redaction) {
        if other.texts.is_empty() {
            return;
        }
        self.texts.extend(other.texts.iter().cloned());
        self.texts
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.texts.dedup();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn withholds_values_and_their_base64() {
        let r = Redaction::new(vec!["hunter2".into(), "on".into()]);
        let message = format!(
            "Invalid value: \"hunter2\" ({}), turned on",
            STANDARD.encode("hunter2")
        );
        assert_eq!(
            r.apply(&message),
            "Invalid value: \"<redacted>\" (<redacted>), turned on"
        );
        assert!(Redaction::new(vec!["ab".into()]).is_empty());
    }

    #[test]
    fn longer_values_are_withheld_first() {
        let r = Redaction::new(vec!["abc".into(), "abcdef".into()]);
        assert_eq!(r.apply("x abcdef y abc"), "x <redacted> y <redacted>");
    }
}
