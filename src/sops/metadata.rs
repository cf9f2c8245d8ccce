//! The `sops` metadata of a file: the age recipients with the wrapped data key, the MAC, the
//! time it was stored under, and the encryption rule. Other key types (PGP, cloud KMS) are
//! read only to be named when no age key matches.

use regex::{Regex, RegexBuilder};

use super::error::SopsError;
use super::rules::Rule;
use super::tree::Node;

/// One age recipient and the data key wrapped for it (an armored age file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgeStanza {
    pub recipient: String,
    pub enc: String,
}

/// What decryption needs from a file's metadata.
#[derive(Debug, Clone)]
pub struct Metadata {
    pub age: Vec<AgeStanza>,
    /// Key types other than age the file names (`pgp`, `kms`, …), for the error message.
    pub other_keys: Vec<String>,
    pub lastmodified: String,
    pub mac: String,
    pub rule: Rule,
    pub mac_only_encrypted: bool,
}

/// Key types SOPS knows besides age.
const OTHER_KEY_TYPES: [&str; 6] = ["pgp", "kms", "gcp_kms", "azure_kv", "hc_vault", "hckms"];

/// The path rules; a file may name at most one.
const RULES: [&str; 4] = [
    "unencrypted_suffix",
    "encrypted_suffix",
    "unencrypted_regex",
    "encrypted_regex",
];

/// Bound on a rule's compiled regular expression (a tenant writes it).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Reads the metadata mapping (the value of the `sops` key, unflattened for dotenv).
pub fn parse(node: &Node, file: &str) -> Result<Metadata, SopsError> {
    let bad = |field: &str, problem: &str| SopsError::BadMetadata {
        file: file.to_string(),
        field: field.to_string(),
        problem: problem.to_string(),
    };
    if !matches!(node, Node::Map(_)) {
        return Err(bad("sops", "is not a mapping"));
    }
    for field in ["encrypted_comment_regex", "unencrypted_comment_regex"] {
        if text(node, field).is_some_and(|t| !t.is_empty()) {
            return Err(SopsError::Unsupported {
                file: file.to_string(),
                what: format!("`{field}` (rules on comments)"),
            });
        }
    }
    let group = key_group(node, file)?;
    let required = |field: &str| {
        text(node, field)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .ok_or_else(|| bad(field, "is missing"))
    };
    Ok(Metadata {
        age: age_stanzas(group, file)?,
        other_keys: OTHER_KEY_TYPES
            .iter()
            .filter(|k| group.get(k).is_some_and(|v| !matches!(v, Node::Null)))
            .map(|k| k.to_string())
            .collect(),
        lastmodified: required("lastmodified")?,
        mac: required("mac")?,
        rule: rule(node, file)?,
        mac_only_encrypted: flag(node, "mac_only_encrypted")
            .map_err(|p| bad("mac_only_encrypted", p))?,
    })
}

/// The mapping that holds the keys: the metadata itself, or its one key group. Several key
/// groups (Shamir's secret sharing) are not supported.
fn key_group<'a>(node: &'a Node, file: &str) -> Result<&'a Node, SopsError> {
    match node.get("key_groups") {
        None | Some(Node::Null) => Ok(node),
        Some(Node::Seq(groups)) if groups.len() == 1 => Ok(&groups[0]),
        Some(Node::Seq(groups)) => Err(SopsError::Unsupported {
            file: file.to_string(),
            what: format!("{} key groups (Shamir's secret sharing)", groups.len()),
        }),
        Some(_) => Err(SopsError::BadMetadata {
            file: file.to_string(),
            field: "key_groups".to_string(),
            problem: "is not a list".to_string(),
        }),
    }
}

fn age_stanzas(group: &Node, file: &str) -> Result<Vec<AgeStanza>, SopsError> {
    let bad = |problem: &str| SopsError::BadMetadata {
        file: file.to_string(),
        field: "age".to_string(),
        problem: problem.to_string(),
    };
    let entries = match group.get("age") {
        None | Some(Node::Null) => return Ok(Vec::new()),
        Some(Node::Seq(entries)) => entries,
        Some(_) => return Err(bad("is not a list")),
    };
    entries
        .iter()
        .map(|entry| {
            let field = |name| text(entry, name).map(str::to_string);
            match (field("recipient"), field("enc")) {
                (Some(recipient), Some(enc)) => Ok(AgeStanza { recipient, enc }),
                _ => Err(bad("an entry lacks `recipient` or `enc`")),
            }
        })
        .collect()
}

fn rule(node: &Node, file: &str) -> Result<Rule, SopsError> {
    let set: Vec<(&str, &str)> = RULES
        .iter()
        .filter_map(|&name| {
            text(node, name)
                .filter(|t| !t.is_empty())
                .map(|t| (name, t))
        })
        .collect();
    let compile = |name: &str, pattern: &str| -> Result<Regex, SopsError> {
        RegexBuilder::new(pattern)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| SopsError::BadMetadata {
                file: file.to_string(),
                field: name.to_string(),
                problem: format!("not a valid regular expression: {e}"),
            })
    };
    match set.as_slice() {
        [] => Ok(Rule::default()),
        [("unencrypted_suffix", s)] => Ok(Rule::UnencryptedSuffix(s.to_string())),
        [("encrypted_suffix", s)] => Ok(Rule::EncryptedSuffix(s.to_string())),
        [("unencrypted_regex", p)] => Ok(Rule::UnencryptedRegex(compile("unencrypted_regex", p)?)),
        [(name, p)] => Ok(Rule::EncryptedRegex(compile(name, p)?)),
        _ => Err(SopsError::BadMetadata {
            file: file.to_string(),
            field: set.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            problem: "a file may use only one of these rules".to_string(),
        }),
    }
}

/// A string field (dotenv and INI metadata hold every value as a string).
fn text<'a>(node: &'a Node, field: &str) -> Option<&'a str> {
    node.get(field).and_then(Node::as_str)
}

/// A boolean field, also written as a string (as Go's `strconv.ParseBool` reads it).
fn flag(node: &Node, field: &str) -> Result<bool, &'static str> {
    match node.get(field) {
        None | Some(Node::Null) => Ok(false),
        Some(Node::Bool(b)) => Ok(*b),
        Some(Node::Str(s)) => match s.as_str() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" | "" => Ok(false),
            _ => Err("is not a boolean"),
        },
        Some(_) => Err("is not a boolean"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(yaml: &str) -> Result<Metadata, SopsError> {
        parse(&serde_saphyr::from_str::<Node>(yaml).unwrap(), "f.yaml")
    }

    const BASE: &str = "age: [{recipient: age1x, enc: ENCKEY}]\nlastmodified: '2026-01-01T00:00:00Z'\nmac: ENC[x]\n";

    #[test]
    fn reads_age_keys_mac_and_default_rule() {
        let m = meta(BASE).unwrap();
        assert_eq!(
            m.age,
            vec![AgeStanza {
                recipient: "age1x".into(),
                enc: "ENCKEY".into()
            }]
        );
        assert_eq!(m.lastmodified, "2026-01-01T00:00:00Z");
        assert!(matches!(m.rule, Rule::UnencryptedSuffix(ref s) if s == "_unencrypted"));
        assert!(!m.mac_only_encrypted);
    }

    #[test]
    fn one_key_group_is_read_several_are_unsupported() {
        let one = "key_groups: [{age: [{recipient: age1y, enc: E}], pgp: [{fp: F}]}]\nlastmodified: x\nmac: m\n";
        let m = meta(one).unwrap();
        assert_eq!(m.age[0].recipient, "age1y");
        assert_eq!(m.other_keys, vec!["pgp".to_string()]);
        let two = "key_groups: [{age: []}, {age: []}]\nlastmodified: x\nmac: m\n";
        assert!(matches!(meta(two), Err(SopsError::Unsupported { .. })));
    }

    #[test]
    fn rules_flags_and_missing_fields() {
        let m = meta(&format!(
            "{BASE}encrypted_regex: ^data$\nmac_only_encrypted: 'true'\n"
        ))
        .unwrap();
        assert!(matches!(m.rule, Rule::EncryptedRegex(_)));
        assert!(m.mac_only_encrypted);
        let two = format!("{BASE}encrypted_regex: a\nencrypted_suffix: b\n");
        assert!(matches!(meta(&two), Err(SopsError::BadMetadata { .. })));
        let bad_re = format!("{BASE}encrypted_regex: '('\n");
        assert!(
            matches!(meta(&bad_re), Err(SopsError::BadMetadata { field, .. }) if field == "encrypted_regex")
        );
        let comments = format!("{BASE}encrypted_comment_regex: sops\n");
        assert!(matches!(
            meta(&comments),
            Err(SopsError::Unsupported { .. })
        ));
        assert!(
            matches!(meta("age: []\nmac: m\n"), Err(SopsError::BadMetadata { field, .. }) if field == "lastmodified")
        );
    }
}
