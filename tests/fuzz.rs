//! Property tests of the parsers that read tenant input (docs/security.md, "Budgets and isolation"): manifest YAML/JSON, the
//! inline manifests of a parent's spec, the parent's ApplySet annotations, durations, and the
//! `.tar.gz` reader of the sources. For any input: no panic, a clear error (it names where,
//! and is not empty), and bounded memory (deep nesting and large expansions are refused, not
//! followed).
//!
//! `make test` runs a bounded number of cases per property (64, a few seconds in all); set
//! `PROPTEST_CASES` for more, e.g. `PROPTEST_CASES=100000 cargo test --test fuzz`. proptest
//! shrinks a failing input to a small one and prints it.

use std::{io::Write, time::Duration};

use applyset_operator::{
    api::{self, ApplySetSpec, InlineManifest, MAX_MANIFEST_DEPTH},
    applyset::{self, GroupKind},
    manifest::{self, ManifestError, Origin},
    sources::{Limits, archive, paths},
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// 64 cases per property, unless PROPTEST_CASES says otherwise.
fn config() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 64;
    }
    config
}

fn origin() -> Origin {
    Origin::file("git https://example.com/repo.git@main", "apps/web.yaml")
}

/// Strings made of YAML's structural characters, so that the parser's corners are reached
/// far more often than with arbitrary text.
fn yamlish() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("---\n".to_string()),
        Just("...\n".to_string()),
        Just("- ".to_string()),
        Just(": ".to_string()),
        Just("\n  ".to_string()),
        Just("\n".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(", ".to_string()),
        Just("&a ".to_string()),
        Just("*a".to_string()),
        Just("<<: *a\n".to_string()),
        Just("!!str ".to_string()),
        Just("!custom ".to_string()),
        Just("|\n  ".to_string()),
        Just(">-\n  ".to_string()),
        Just("'q'".to_string()),
        Just("\"d\\u00e9\"".to_string()),
        Just("# c\n".to_string()),
        Just("%YAML 1.2\n".to_string()),
        Just("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n".to_string()),
        Just("kind: List\nitems:\n".to_string()),
        Just("0644".to_string()),
        Just("~".to_string()),
        Just("\t".to_string()),
        "[a-z0-9.]{1,8}",
    ];
    prop::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

/// A manifest parse either succeeds or fails with an error that names the origin.
fn check_parse(text: &str) {
    match manifest::parse_documents(text, &origin()) {
        Ok(manifests) => {
            for m in manifests {
                assert!(!m.kind.is_empty() && !m.name.is_empty());
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with("git https://example.com/repo.git@main"),
                "the error names the origin: {msg:?}"
            );
        }
    }
}

/// `{"a":` / `[` nesting `depth` levels deep around `1`, as JSON text.
fn nested_json(shape: &[bool]) -> String {
    let mut open = String::new();
    let mut close = String::new();
    for &mapping in shape {
        if mapping {
            open.push_str("{\"a\":");
            close.insert(0, '}');
        } else {
            open.push('[');
            close.insert(0, ']');
        }
    }
    format!("{open}1{close}")
}

/// Arbitrary JSON values, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map("[a-zA-Z]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn tar_gz(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        // Written raw, so that hostile paths ("..", absolute) get in as they are.
        let name = path.as_bytes();
        let n = name.len().min(99);
        header.as_old_mut().name[..n].copy_from_slice(&name[..n]);
        header.set_cksum();
        builder.append(&header, data.as_slice()).expect("append");
    }
    let tar = builder.into_inner().expect("tar");
    gzip(&tar)
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).expect("gzip");
    gz.finish().expect("gzip")
}

fn small_limits() -> Limits {
    Limits {
        max_unpacked: 64 * 1024,
        max_entries: 32,
        ..Limits::default()
    }
}

proptest! {
    #![proptest_config(config())]

    // ----- manifest YAML / JSON -----

    #[test]
    fn manifest_parsing_never_panics_on_any_text(text in ".{0,300}") {
        check_parse(&text);
    }

    #[test]
    fn manifest_parsing_never_panics_on_yaml_shaped_text(text in yamlish()) {
        check_parse(&text);
    }

    #[test]
    fn valid_objects_read_back_from_yaml_and_json(
        name in "[a-z0-9]([-a-z0-9.]{0,40}[a-z0-9])?",
        // Printable text: YAML refuses raw control characters (DEL included) even inside a
        // JSON string, so JSON with such characters is not read (see docs/security.md).
        data in prop::collection::btree_map("[a-zA-Z0-9_.-]{1,20}", "[ -~\u{a0}-\u{d7ff}]{0,40}", 0..8),
    ) {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": data});
        let yaml = serde_saphyr::to_string(&object).expect("yaml");
        for text in [object.to_string(), yaml] {
            let parsed = manifest::parse_documents(&text, &origin())
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            prop_assert_eq!(parsed.len(), 1);
            prop_assert_eq!(&parsed[0].name, &name);
            prop_assert_eq!(&Value::Object(parsed[0].object.clone()), &object);
        }
    }

    #[test]
    fn nesting_beyond_the_bound_is_refused_and_within_it_is_read(
        shape in prop::collection::vec(any::<bool>(), 1..400),
    ) {
        // The object itself is one level: its field `x` holds the nested value.
        let text = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"n"}},"x":{}}}"#,
            nested_json(&shape)
        );
        let depth = shape.len() + 1;
        match manifest::parse_documents(&text, &origin()) {
            Ok(_) => prop_assert!(depth <= MAX_MANIFEST_DEPTH, "depth {} was read", depth),
            Err(e) => {
                prop_assert!(depth > MAX_MANIFEST_DEPTH, "depth {}: {}", depth, e);
                prop_assert!(matches!(e, ManifestError::Budget { .. }), "{}", e);
                prop_assert!(e.to_string().contains("nested more than"), "{}", e);
            }
        }
    }

    #[test]
    fn anchors_and_aliases_cannot_expand_past_the_budget(fanout in 2usize..12, levels in 2usize..12) {
        // A "billion laughs": each level refers to the previous one `fanout` times.
        let mut text = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\na0: &a0 [\"lol\"]\n");
        for level in 1..levels {
            let refs = vec![format!("*a{}", level - 1); fanout].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{refs}]\n"));
        }
        let mut budget = manifest::YamlBudget::new(manifest::YamlCost { nodes: 10_000, bytes: 1 << 20 });
        match manifest::parse_documents_within(&text, &origin(), &mut budget) {
            Ok(_) => prop_assert!(budget.used.nodes <= 10_000),
            Err(e) => prop_assert!(e.to_string().starts_with("git https://example.com/repo.git@main"), "{}", e),
        }
    }

    // ----- inline manifests of a parent's spec -----

    #[test]
    fn a_parent_spec_always_reads_whatever_its_manifests_hold(
        values in prop::collection::vec(json_value(), 0..4),
        shape in prop::collection::vec(any::<bool>(), 0..300),
    ) {
        let deep = nested_json(&shape);
        let mut entries: Vec<String> = values.iter().map(Value::to_string).collect();
        entries.push(deep.clone());
        let text = format!(r#"{{"manifests":[{}]}}"#, entries.join(","));
        let spec: ApplySetSpec = serde_json::from_str(&text).expect("a parent always reads");
        prop_assert_eq!(spec.manifests.len(), values.len() + 1);
        for (entry, value) in spec.manifests.iter().zip(&values) {
            // As serde_json reads the same text (its float parsing is not exact).
            let read: Value = serde_json::from_str(&value.to_string()).expect("json");
            prop_assert_eq!(entry.value(), Ok(read));
        }
        let last = &spec.manifests[values.len()];
        prop_assert_eq!(
            matches!(last, InlineManifest::Json(_)),
            shape.len() <= MAX_MANIFEST_DEPTH,
            "depth {}", shape.len()
        );
        // Written back as it was read.
        let back = serde_json::to_string(&spec).expect("serializes");
        prop_assert!(back.contains(&deep));
        // Every entry renders to manifests or to an error naming spec.manifests[i].
        if let Err(e) = applyset_operator::render::inline_manifests(&spec) {
            prop_assert!(e.to_string().starts_with("spec.manifests["), "{}", e);
        }
    }

    // ----- the parent's ApplySet annotations -----

    #[test]
    fn group_kind_annotations_parse_or_fail_without_panic(value in ".{0,120}") {
        if let Ok(kinds) = applyset::parse_group_kinds(&value) {
            // What parses encodes to a value that parses to the same set.
            let encoded = applyset::encode_group_kinds(&kinds);
            prop_assert_eq!(applyset::parse_group_kinds(&encoded).expect("re-parses"), kinds);
        } else if let Err(e) = applyset::parse_group_kinds(&value) {
            prop_assert!(!e.to_string().is_empty());
        }
        let _ = applyset::parse_group_resources(&value);
        let namespaces = applyset::parse_namespaces(&value);
        prop_assert!(namespaces.iter().all(|ns| !ns.is_empty()));
        let _ = applyset::tooling_base_name(&value);
    }

    #[test]
    fn group_kinds_round_trip_through_the_annotation(
        kinds in prop::collection::btree_set(("[A-Z][a-zA-Z0-9]{0,10}", "([a-z0-9-]{1,10}(\\.[a-z0-9-]{1,10}){0,2})?"), 0..8),
    ) {
        let kinds: std::collections::BTreeSet<GroupKind> =
            kinds.into_iter().map(|(k, g)| GroupKind::new(g, k)).collect();
        let encoded = applyset::encode_group_kinds(&kinds);
        prop_assert_eq!(applyset::parse_group_kinds(&encoded).expect("parses"), kinds);
    }

    // ----- durations (spec.interval, retryInterval, timeout) -----

    #[test]
    fn durations_parse_or_fail_and_the_spec_always_bounds_them(text in ".{0,40}") {
        let _ = api::parse_duration(&text);
        let spec = ApplySetSpec {
            interval: text.clone(),
            retry_interval: text.clone(),
            timeout: text,
            ..ApplySetSpec::default()
        };
        prop_assert!(spec.interval() >= api::MIN_DURATION && spec.interval() <= api::MAX_INTERVAL);
        prop_assert!(spec.retry_interval() >= api::MIN_DURATION && spec.retry_interval() <= spec.interval());
        prop_assert!(spec.timeout() >= api::MIN_DURATION && spec.timeout() <= api::MAX_TIMEOUT);
    }

    #[test]
    fn go_durations_add_up(parts in prop::collection::vec((0u64..100_000, 0usize..4), 1..5)) {
        let units = [("ms", 1u64), ("s", 1000), ("m", 60_000), ("h", 3_600_000)];
        let text: String = parts.iter().map(|(n, u)| format!("{n}{}", units[*u].0)).collect();
        let millis: u64 = parts.iter().map(|(n, u)| n * units[*u].1).sum();
        let parsed = api::parse_duration(&text).expect("a Go duration parses");
        // Summed in floating point: within a millisecond.
        let diff = parsed.abs_diff(Duration::from_millis(millis));
        prop_assert!(diff < Duration::from_millis(1), "{} -> {:?}", text, parsed);
    }

    // ----- .tar.gz bundles -----

    #[test]
    fn archive_reading_never_panics_on_any_bytes(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        if let Err(e) = archive::read_tar_gz(&data, "", &small_limits()) {
            prop_assert!(!e.to_string().is_empty());
        }
        // The same bytes gzipped: a stream that decompresses, to anything.
        if let Err(e) = archive::read_tar_gz(&gzip(&data), "", &small_limits()) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn archive_entries_come_back_clean_or_the_archive_is_refused(
        entries in prop::collection::vec(
            (prop_oneof!["[a-z]{1,6}(/[a-z]{1,6}){0,2}\\.(yaml|yml|json|txt)", "(\\.\\./|/|[a-z]{1,4}/\\.\\./\\.\\./)[a-z]{1,6}\\.yaml"],
             prop::collection::vec(any::<u8>(), 0..256)),
            0..12),
    ) {
        let bundle = tar_gz(&entries);
        match archive::read_tar_gz(&bundle, "", &small_limits()).map_err(|e| e.to_string()) {
            Ok(files) => {
                for f in &files {
                    prop_assert!(paths::clean_relative(&f.path).as_deref() == Some(f.path.as_str()), "{}", f.path);
                    prop_assert!(paths::is_manifest_file(&f.path));
                }
            }
            Err(e) => prop_assert!(e.contains("refusing") || e.contains("archive") || e.contains("UTF-8"), "{}", e),
        }
    }

    #[test]
    fn a_decompression_bomb_is_stopped_at_the_budget(megabytes in 1usize..4) {
        // Zeros compress about a thousandfold: a few KiB that inflate to megabytes.
        let mut tar = vec![0u8; megabytes << 20];
        tar[0] = b'a';
        let bundle = gzip(&tar);
        let e = archive::read_tar_gz(&bundle, "", &small_limits()).expect_err("refused").to_string();
        prop_assert!(e.contains("decompresses to more than") || e.contains("archive"), "{}", e);
    }
}
