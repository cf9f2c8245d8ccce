//! YAML files as SOPS reads them (go-yaml v3 into untyped values): every document a mapping,
//! YAML 1.2 booleans, `0755` octal, `<<` an ordinary key; comments are dropped (SOPS leaves
//! them out of the MAC). Decrypted documents are written as JSON documents (valid YAML) in a
//! `---` separated stream, keys in file order.

use super::Format;
use super::Limits;
use super::error::SopsError;
use super::json::{Capped, write_document};
use super::tree::Node;

/// Reads the documents of a YAML file (empty documents are skipped, as SOPS does).
pub fn load(text: &str, file: &str, limits: &Limits) -> Result<Vec<Node>, SopsError> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.legacy_octal_numbers = true;
    options.strict_booleans = true;
    options.emit_comments = false;
    options.merge_keys = serde_saphyr::MergeKeyPolicy::AsOrdinary;
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = limits.max_depth + 1;
    budget.max_nodes = limits.max_values.saturating_mul(2).saturating_add(16);
    budget.max_documents = limits.max_values.saturating_add(1);
    budget.max_events = limits.max_values.saturating_mul(8).saturating_add(64);
    budget.max_reader_input_bytes = Some(limits.max_bytes);
    budget.max_total_scalar_bytes = limits.max_bytes;
    options.budget = Some(budget);
    let documents: Vec<Node> = serde_saphyr::from_str_multiple_with_options(text, options)
        .map_err(|e| match e {
            serde_saphyr::Error::Budget { .. } => SopsError::TooManyValues {
                file: file.to_string(),
                limit: limits.max_values,
            },
            e => SopsError::Parse {
                file: file.to_string(),
                format: Format::Yaml,
                message: e.without_snippet().to_string(),
            },
        })?;
    let documents: Vec<Node> = documents.into_iter().filter(|d| *d != Node::Null).collect();
    if documents.iter().any(|d| !matches!(d, Node::Map(_))) {
        return Err(SopsError::Parse {
            file: file.to_string(),
            format: Format::Yaml,
            message: "every document must be a mapping".to_string(),
        });
    }
    Ok(documents)
}

/// Writes decrypted documents: one JSON document each, `---` between them; at most `limit`
/// bytes (the writing stops at the bound).
pub fn emit(documents: &[Node], file: &str, limit: usize) -> Result<Vec<u8>, SopsError> {
    let mut out = Capped::new(limit);
    for (index, document) in documents.iter().enumerate() {
        if index > 0 {
            out.put(b"---\n", file)?;
        }
        write_document(&mut out, document, file, Format::Yaml)?;
        out.put(b"\n", file)?;
    }
    Ok(out.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_one(text: &str) -> Node {
        let mut docs = load(text, "f.yaml", &Limits::default()).unwrap();
        assert_eq!(docs.len(), 1);
        docs.remove(0)
    }

    #[test]
    fn scalars_are_typed_as_go_yaml_v3_types_them() {
        let doc =
            load_one("a: yes\nb: true\nc: 0755\nd: '12'\ne: 1.50\nf: ~\ng: 2026-01-01\nh: 1_000\n");
        assert_eq!(doc.get("a"), Some(&Node::Str("yes".into())));
        assert_eq!(doc.get("b"), Some(&Node::Bool(true)));
        assert_eq!(doc.get("c"), Some(&Node::Int(493)));
        assert_eq!(doc.get("d"), Some(&Node::Str("12".into())));
        assert_eq!(doc.get("e"), Some(&Node::Float(1.5)));
        assert_eq!(doc.get("f"), Some(&Node::Null));
        assert_eq!(doc.get("g"), Some(&Node::Str("2026-01-01".into())));
        assert_eq!(doc.get("h"), Some(&Node::Int(1000)));
    }

    #[test]
    fn merge_keys_stay_ordinary_and_aliases_are_expanded() {
        let doc = load_one("base: &b {x: 1}\nother:\n  <<: *b\n");
        assert_eq!(
            doc.get("other"),
            Some(&Node::Map(vec![(
                "<<".into(),
                Node::Map(vec![("x".into(), Node::Int(1))])
            )]))
        );
    }

    #[test]
    fn documents_must_be_mappings_and_within_bounds() {
        assert!(matches!(
            load("- a\n", "f", &Limits::default()),
            Err(SopsError::Parse { .. })
        ));
        assert_eq!(
            load("---\n---\na: 1\n", "f", &Limits::default())
                .unwrap()
                .len(),
            1
        );
        let deep = format!("{}1{}", "[".repeat(80), "]".repeat(80));
        let limits = Limits {
            max_depth: 64,
            ..Limits::default()
        };
        assert!(load(&format!("a: {deep}\n"), "f", &limits).is_err());
        let many = (0..200).map(|i| format!("k{i}: v\n")).collect::<String>();
        let small = Limits {
            max_values: 50,
            ..Limits::default()
        };
        assert!(matches!(
            load(&many, "f", &small),
            Err(SopsError::TooManyValues { .. })
        ));
    }

    #[test]
    fn emits_json_documents_in_order() {
        let docs = load("b: 1\na: [x]\n---\nc: true\n", "f", &Limits::default()).unwrap();
        assert_eq!(
            emit(&docs, "f", 1 << 10).unwrap(),
            b"{\"b\":1,\"a\":[\"x\"]}\n---\n{\"c\":true}\n"
        );
    }
}
