//! SOPS's decrypting tree walk: every scalar in file order, its path the mapping keys above it
//! (list positions are not part of it); encrypted scalars (by the file's rule) are decrypted
//! with the path as additional data; the values, as decrypted, go into the MAC.

use super::cipher::{self, CipherError, Plain, ValueType};
use super::error::SopsError;
use super::mac::{self, Mac};
use super::rules::Rule;
use super::tree::Node;

/// One walk over a file's documents.
pub struct Walk<'a> {
    pub file: &'a str,
    pub key: &'a [u8; 32],
    pub rule: &'a Rule,
    pub mac_only_encrypted: bool,
}

/// What a walk found: the MAC and the decrypted values as text (for redacting messages).
pub struct Walked {
    /// Upper-case hex, as SOPS writes it.
    pub mac: String,
    pub plaintexts: Vec<String>,
}

/// The running state of a walk.
struct Tally {
    mac: Mac,
    plaintexts: Vec<String>,
}

impl Walk<'_> {
    /// Decrypts `documents` in place; returns their MAC and the decrypted values.
    pub fn run(&self, documents: &mut [Node]) -> Result<Walked, SopsError> {
        let mut tally = Tally {
            mac: Mac::new(self.mac_only_encrypted),
            plaintexts: Vec::new(),
        };
        let mut path = Vec::new();
        for document in documents {
            self.value(document, &mut path, &mut tally)?;
        }
        Ok(Walked {
            mac: tally.mac.finish(),
            plaintexts: tally.plaintexts,
        })
    }

    fn value(
        &self,
        node: &mut Node,
        path: &mut Vec<String>,
        tally: &mut Tally,
    ) -> Result<(), SopsError> {
        match node {
            Node::Null => Ok(()),
            Node::Seq(items) => items
                .iter_mut()
                .try_for_each(|item| self.value(item, path, tally)),
            Node::Map(entries) => entries.iter_mut().try_for_each(|(key, value)| {
                path.push(key.clone());
                let result = self.value(value, path, tally);
                path.pop();
                result
            }),
            _ => self.leaf(node, path, tally),
        }
    }

    fn leaf(&self, node: &mut Node, path: &[String], tally: &mut Tally) -> Result<(), SopsError> {
        let encrypted = self.rule.encrypts(path);
        if encrypted {
            let Node::Str(text) = &*node else {
                return Err(self.malformed(path, "an encrypted value must be a string".into()));
            };
            let aad = format!("{}:", path.join(":"));
            let plain = cipher::decrypt(text, self.key, &aad).map_err(|e| match e {
                CipherError::Unauthentic => SopsError::TamperedValue {
                    file: self.file.to_string(),
                    path: path.join("."),
                },
                CipherError::Malformed(problem) => self.malformed(path, problem),
            })?;
            *node = typed(plain).map_err(|problem| self.malformed(path, problem))?;
            if let Some(bytes) = mac::scalar_bytes(node) {
                tally
                    .plaintexts
                    .push(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
        if (!self.mac_only_encrypted || encrypted)
            && let Some(bytes) = mac::scalar_bytes(node)
        {
            tally.mac.add(&bytes);
        }
        Ok(())
    }

    fn malformed(&self, path: &[String], problem: String) -> SopsError {
        SopsError::MalformedValue {
            file: self.file.to_string(),
            path: path.join("."),
            problem,
        }
    }
}

/// The decrypted value with the type SOPS recorded (Go's `strconv` rules; the problem never
/// quotes the value).
fn typed(plain: Plain) -> Result<Node, String> {
    let text = || std::str::from_utf8(&plain.bytes).map_err(|_| "not UTF-8".to_string());
    Ok(match plain.kind {
        ValueType::Str | ValueType::Bytes | ValueType::Time | ValueType::Comment => {
            match String::from_utf8(plain.bytes) {
                Ok(s) => Node::Str(s),
                Err(e) => Node::Bytes(e.into_bytes()),
            }
        }
        ValueType::Int => Node::Int(text()?.parse().map_err(|_| "type int, not an integer")?),
        ValueType::Float => Node::Float(parse_go_float(text()?).ok_or("type float, not a number")?),
        ValueType::Bool => Node::Bool(parse_go_bool(text()?).ok_or("type bool, not a boolean")?),
    })
}

/// Go's `strconv.ParseBool`.
pub fn parse_go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.ParseFloat` for what SOPS writes (`FormatFloat(f, 'f', -1, 64)`, and the
/// special values).
fn parse_go_float(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => text.parse().ok(),
    }
}

/// Verifies the file's stored MAC against the computed one. The stored MAC is encrypted with
/// the `lastmodified` time (as Go formats it) as additional data.
pub fn verify_mac(
    file: &str,
    key: &[u8; 32],
    stored: &str,
    lastmodified: &str,
    computed: &str,
) -> Result<(), SopsError> {
    let mismatch = || SopsError::MacMismatch {
        file: file.to_string(),
    };
    let plain = cipher::decrypt(stored, key, &go_rfc3339(lastmodified)).map_err(|e| match e {
        CipherError::Unauthentic => mismatch(),
        CipherError::Malformed(problem) => SopsError::BadMetadata {
            file: file.to_string(),
            field: "mac".to_string(),
            problem,
        },
    })?;
    if mac::same(&String::from_utf8_lossy(&plain.bytes), computed) {
        Ok(())
    } else {
        Err(mismatch())
    }
}

/// `lastmodified` as SOPS re-formats it before using it as additional data (Go's
/// `time.Parse(RFC3339)` then `Format(RFC3339)`): fractional seconds dropped, a zero offset
/// written `Z`.
pub fn go_rfc3339(text: &str) -> String {
    let (stamp, zone) = match text.rfind(['Z', 'z', '+', '-']) {
        Some(at) if at > 10 => text.split_at(at),
        _ => return text.to_string(),
    };
    let stamp = stamp.split('.').next().unwrap_or(stamp);
    let zone = match zone {
        "z" | "+00:00" | "-00:00" => "Z",
        other => other,
    };
    format!("{stamp}{zone}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sops::cipher::tests::encrypt;

    const KEY: [u8; 32] = [3; 32];

    fn walk(rule: &Rule, mac_only: bool, doc: &mut Node) -> Result<String, SopsError> {
        let walk = Walk {
            file: "f",
            key: &KEY,
            rule,
            mac_only_encrypted: mac_only,
        };
        walk.run(std::slice::from_mut(doc)).map(|w| w.mac)
    }

    #[test]
    fn decrypts_typed_values_with_their_paths() {
        let mut doc = Node::Map(vec![
            ("a".into(), Node::Str(encrypt(b"x", "str", &KEY, "a:", 1))),
            (
                "n".into(),
                Node::Seq(vec![Node::Str(encrypt(b"42", "int", &KEY, "n:", 2))]),
            ),
            (
                "b".into(),
                Node::Str(encrypt(b"True", "bool", &KEY, "b:", 3)),
            ),
            (
                "f".into(),
                Node::Str(encrypt(b"1.5", "float", &KEY, "f:", 4)),
            ),
            ("z".into(), Node::Null),
            ("k_unencrypted".into(), Node::Int(7)),
        ]);
        let mac = walk(&Rule::default(), false, &mut doc).unwrap();
        assert_eq!(doc.get("a"), Some(&Node::Str("x".into())));
        assert_eq!(doc.get("n"), Some(&Node::Seq(vec![Node::Int(42)])));
        assert_eq!(doc.get("b"), Some(&Node::Bool(true)));
        assert_eq!(doc.get("f"), Some(&Node::Float(1.5)));
        let mut expected = Mac::new(false);
        for part in ["x", "42", "True", "1.5", "7"] {
            expected.add(part.as_bytes());
        }
        assert_eq!(mac, expected.finish());
    }

    #[test]
    fn mac_only_encrypted_skips_plain_values() {
        let mut doc = Node::Map(vec![
            ("a".into(), Node::Str(encrypt(b"x", "str", &KEY, "a:", 1))),
            ("k_unencrypted".into(), Node::Int(7)),
        ]);
        let mac = walk(&Rule::default(), true, &mut doc).unwrap();
        let mut expected = Mac::new(true);
        expected.add(b"x");
        assert_eq!(mac, expected.finish());
    }

    #[test]
    fn a_value_moved_to_another_path_or_not_a_string_is_refused() {
        let mut moved = Node::Map(vec![(
            "b".into(),
            Node::Str(encrypt(b"x", "str", &KEY, "a:", 1)),
        )]);
        assert!(
            matches!(walk(&Rule::default(), false, &mut moved), Err(SopsError::TamperedValue { path, .. }) if path == "b")
        );
        let mut number = Node::Map(vec![("a".into(), Node::Int(1))]);
        assert!(matches!(
            walk(&Rule::default(), false, &mut number),
            Err(SopsError::MalformedValue { .. })
        ));
        let mut bad_int = Node::Map(vec![(
            "a".into(),
            Node::Str(encrypt(b"x1", "int", &KEY, "a:", 1)),
        )]);
        let err = walk(&Rule::default(), false, &mut bad_int).unwrap_err();
        assert!(!err.to_string().contains("x1"), "{err}");
    }

    #[test]
    fn lastmodified_is_reformatted_as_go_does() {
        assert_eq!(go_rfc3339("2026-11-25T16:00:00Z"), "2026-11-25T16:00:00Z");
        assert_eq!(
            go_rfc3339("2026-11-25T16:00:00.123Z"),
            "2026-11-25T16:00:00Z"
        );
        assert_eq!(
            go_rfc3339("2026-11-25T16:00:00+00:00"),
            "2026-11-25T16:00:00Z"
        );
        assert_eq!(
            go_rfc3339("2026-11-25T16:00:00.5+02:00"),
            "2026-11-25T16:00:00+02:00"
        );
    }

    #[test]
    fn verify_mac_compares_the_decrypted_mac() {
        let stored = encrypt(b"ABC", "str", &KEY, "2026-11-25T16:00:00Z", 5);
        assert!(verify_mac("f", &KEY, &stored, "2026-11-25T16:00:00Z", "ABC").is_ok());
        assert!(matches!(
            verify_mac("f", &KEY, &stored, "2026-11-25T16:00:00Z", "ABD"),
            Err(SopsError::MacMismatch { .. })
        ));
        assert!(matches!(
            verify_mac("f", &KEY, &stored, "2026-11-25T16:00:01Z", "ABC"),
            Err(SopsError::MacMismatch { .. })
        ));
    }
}
