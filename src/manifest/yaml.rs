//! Parsing text: YAML/JSON documents within the per-set budget ([`YamlBudget`]), their cost
//! and their errors.

use super::*;

// ---------------------------------------------------------------------------------------------
// Parsing text
// ---------------------------------------------------------------------------------------------

/// What a text or value costs: nodes (every mapping, list and scalar, keys included) and
/// bytes of text (for an inline manifest or a parsed value: of its compact JSON).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct YamlCost {
    pub nodes: usize,
    pub bytes: usize,
}

/// Default of `--max-yaml-nodes-per-set`: about 100 nodes for each of 10,000 members.
pub const DEFAULT_SET_YAML_NODES: usize = 1_000_000;
/// Default of `--max-yaml-mib-per-set` (64 MiB), in bytes.
pub const DEFAULT_SET_YAML_BYTES: usize = 64 << 20;

/// The parsed YAML/JSON one set may hold, summed over its inline manifests and every file of
/// every source (flags `--max-yaml-nodes-per-set` and `--max-yaml-mib-per-set`), and what
/// was taken from it so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YamlBudget {
    pub limit: YamlCost,
    pub used: YamlCost,
}

impl Default for YamlBudget {
    fn default() -> Self {
        YamlBudget::new(YamlCost {
            nodes: DEFAULT_SET_YAML_NODES,
            bytes: DEFAULT_SET_YAML_BYTES,
        })
    }
}

impl YamlBudget {
    /// A budget of `limit`, nothing used.
    pub fn new(limit: YamlCost) -> Self {
        YamlBudget {
            limit,
            used: YamlCost::default(),
        }
    }

    /// What is left.
    pub fn left(&self) -> YamlCost {
        YamlCost {
            nodes: self.limit.nodes.saturating_sub(self.used.nodes),
            bytes: self.limit.bytes.saturating_sub(self.used.bytes),
        }
    }

    /// Takes `cost` from the budget; `Err(what ran out)`, the budget unchanged, when it does
    /// not fit.
    pub fn charge(&mut self, cost: YamlCost) -> Result<(), BudgetExceeded> {
        let left = self.left();
        if cost.bytes > left.bytes {
            return Err(BudgetExceeded::Bytes);
        }
        if cost.nodes > left.nodes {
            return Err(BudgetExceeded::Nodes);
        }
        self.used.bytes += cost.bytes;
        self.used.nodes += cost.nodes;
        Ok(())
    }

    /// Why `exceeded` stops a set, naming the flag and its value.
    pub fn describe(&self, exceeded: BudgetExceeded) -> String {
        match exceeded {
            BudgetExceeded::Nodes => format!(
                "the set's manifests hold more than {} YAML/JSON nodes (the operator's --max-yaml-nodes-per-set); split the set or raise the flag",
                self.limit.nodes
            ),
            BudgetExceeded::Bytes => format!(
                "the set's manifests hold more than {} bytes ({} MiB) of YAML/JSON (the operator's --max-yaml-mib-per-set); split the set or raise the flag",
                self.limit.bytes,
                self.limit.bytes >> 20
            ),
        }
    }
}

/// The budget every parse starts from (one text, or all the files of one source): the
/// per-set bound the operator was started with ([`set_parse_limit`]), so that a source that
/// could never fit its set fails while it is parsed, before it fills memory.
static PARSE_LIMIT_NODES: AtomicUsize = AtomicUsize::new(DEFAULT_SET_YAML_NODES);
static PARSE_LIMIT_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_SET_YAML_BYTES);

/// Sets the budget of every parse (the operator's per-set flags; called once at start-up).
pub fn set_parse_limit(limit: YamlCost) {
    PARSE_LIMIT_NODES.store(limit.nodes, Ordering::Relaxed);
    PARSE_LIMIT_BYTES.store(limit.bytes, Ordering::Relaxed);
}

impl YamlBudget {
    /// A fresh budget for parsing one text or all the files of one source.
    pub fn for_parsing() -> Self {
        YamlBudget::new(YamlCost {
            nodes: PARSE_LIMIT_NODES.load(Ordering::Relaxed),
            bytes: PARSE_LIMIT_BYTES.load(Ordering::Relaxed),
        })
    }
}

/// Which bound of a [`YamlBudget`] ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetExceeded {
    Nodes,
    Bytes,
}

/// The cost of a parsed value: its nodes (keys included) and the bytes of its compact JSON.
/// Iterative, so that any depth is measured without recursion.
pub fn value_cost(value: &Value) -> YamlCost {
    let mut cost = YamlCost::default();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        cost.nodes += 1;
        match v {
            Value::Null => cost.bytes += 4,
            Value::Bool(b) => cost.bytes += if *b { 4 } else { 5 },
            Value::Number(n) => cost.bytes += n.to_string().len(),
            Value::String(s) => cost.bytes += s.len() + 2,
            Value::Array(items) => {
                cost.bytes += 1 + items.len().max(1);
                stack.extend(items.iter());
            }
            Value::Object(map) => {
                cost.bytes += 1 + map.len().max(1);
                for (key, item) in map {
                    cost.nodes += 1;
                    cost.bytes += key.len() + 3;
                    stack.push(item);
                }
            }
        }
    }
    cost
}

/// The cost of an object (see [`value_cost`]), without copying it into a value.
pub fn object_cost(object: &Map<String, Value>) -> YamlCost {
    let mut cost = YamlCost {
        nodes: 1,
        bytes: 1 + object.len().max(1),
    };
    for (key, item) in object {
        let item = value_cost(item);
        cost.nodes += 1 + item.nodes;
        cost.bytes += key.len() + 3 + item.bytes;
    }
    cost
}

/// Parses multi-document YAML (JSON is YAML) and validates every object, within a fresh
/// parse budget ([`YamlBudget::for_parsing`]; see [`parse_documents_within`]).
pub fn parse_documents(text: &str, origin: &Origin) -> Result<Vec<Manifest>, ManifestError> {
    parse_documents_within(text, origin, &mut YamlBudget::for_parsing())
}

/// Parses multi-document YAML (JSON is YAML) and validates every object, taking what the
/// text costs from `budget` (shared by the texts of one set or source).
///
/// The budget is enforced while parsing: a text longer than the bytes left is refused before
/// it is read, and the parser stops at the nodes left, so a huge input fails before it fills
/// memory. Nesting deeper than [`MAX_MANIFEST_DEPTH`] is refused too.
///
/// Empty documents (`---` with nothing, comments only, `null`) are skipped. Each object's
/// origin gets the document number (counting non-empty documents) and the line where the
/// document starts. Syntax errors name the origin and the line/column the parser reports.
///
/// Scalars are read the way kubectl's YAML reader (go-yaml v2, YAML 1.1) reads them: `yes`/`on`
/// are booleans and `0644` is octal (420), so e.g. `defaultMode: 0644` means what users
/// expect. Duplicate mapping keys are an error.
pub fn parse_documents_within(
    text: &str,
    origin: &Origin,
    budget: &mut YamlBudget,
) -> Result<Vec<Manifest>, ManifestError> {
    let full = *budget;
    let exceeded = |what: BudgetExceeded| ManifestError::Budget {
        origin: Box::new(origin.clone()),
        problem: full.describe(what),
    };
    let left = budget.left();
    if text.len() > left.bytes {
        return Err(exceeded(BudgetExceeded::Bytes));
    }
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.legacy_octal_numbers = true;
    let mut limits = serde_saphyr::Budget::default();
    limits.max_depth = MAX_MANIFEST_DEPTH;
    // The parser's node count differs a little from ours (it counts events); it stops a
    // runaway parse, and the charge below is exact.
    limits.max_nodes = left.nodes.saturating_add(16);
    limits.max_total_scalar_bytes = left.bytes;
    limits.max_reader_input_bytes = Some(left.bytes);
    // Documents and parser events are bounded by the nodes (a document is at least one node,
    // a node at most a few events), not by the parser's own defaults (1,024 documents,
    // 1,000,000 events), which a large bundle within the budget would exceed.
    limits.max_documents = left.nodes.saturating_add(1);
    limits.max_events = left.nodes.saturating_mul(4).saturating_add(64);
    options.budget = Some(limits);
    let documents = serde_saphyr::from_str_multiple_with_options::<
        serde_saphyr::Spanned<Value>,
        Vec<_>,
    >(text, options)
    .map_err(|error| match budget_breach(&error) {
        Some(serde_saphyr::budget::BudgetBreach::Nodes { .. }) => exceeded(BudgetExceeded::Nodes),
        Some(serde_saphyr::budget::BudgetBreach::ScalarBytes { .. }) => {
            exceeded(BudgetExceeded::Bytes)
        }
        Some(serde_saphyr::budget::BudgetBreach::Depth { .. }) => too_deep(origin),
        // The scanner's own bound on flow collections (`[[[…`, 255 levels), reported as the
        // scanner's error kind.
        _ if scanner_recursion_limit(&error) => too_deep(origin),
        // Another of the parser's bounds (aliases, anchors, merge keys, …).
        Some(breach) => ManifestError::Budget {
            origin: Box::new(origin.clone()),
            problem: format!(
                "the YAML parser's bound was reached ({breach:?}); simplify the text (fewer anchors, aliases or merge keys)"
            ),
        },
        None => yaml_error(&error, origin),
    })?;

    let nodes: usize = documents.iter().map(|d| value_cost(&d.value).nodes).sum();
    budget
        .charge(YamlCost {
            nodes,
            bytes: text.len(),
        })
        .map_err(exceeded)?;
    let mut out = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        let mut document_origin = origin.clone().with_document(index + 1);
        let line = document.referenced.line();
        if line > 0 {
            document_origin = document_origin.with_line(line);
        }
        out.extend(Manifest::from_value(document.value, document_origin)?);
    }
    Ok(out)
}

/// The error of a text nested more than [`MAX_MANIFEST_DEPTH`] levels deep.
fn too_deep(origin: &Origin) -> ManifestError {
    ManifestError::Budget {
        origin: Box::new(origin.clone()),
        problem: format!("nested more than {MAX_MANIFEST_DEPTH} levels deep; flatten the manifest"),
    }
}

/// The budget breach behind a parser error, if that is what stopped it.
fn budget_breach(error: &serde_saphyr::Error) -> Option<serde_saphyr::budget::BudgetBreach> {
    match innermost(error) {
        serde_saphyr::Error::Budget { breach, .. } => Some(breach.clone()),
        _ => None,
    }
}

/// The error without the wrappers the parser adds around it (snippets, alias context).
fn innermost(mut error: &serde_saphyr::Error) -> &serde_saphyr::Error {
    while let serde_saphyr::Error::WithSnippet { error: inner, .. }
    | serde_saphyr::Error::AliasError { error: inner, .. } = error
    {
        error = inner;
    }
    error
}

/// Whether the scanner stopped at its own nesting bound (its error kind
/// `RecursionLimitExceeded`, carried as the structured source of the parser's message).
fn scanner_recursion_limit(error: &serde_saphyr::Error) -> bool {
    use serde_saphyr::{granit_parser::ErrorKind, localizer::ExternalMessageSource};
    match innermost(error) {
        serde_saphyr::Error::ExternalMessage { source, .. } => matches!(
            source.as_ref(),
            ExternalMessageSource::Parser(scan)
                if matches!(scan.kind(), ErrorKind::RecursionLimitExceeded)
        ),
        _ => false,
    }
}

fn yaml_error(error: &serde_saphyr::Error, origin: &Origin) -> ManifestError {
    let location = error.location().filter(|l| l.line() > 0);
    let mut message = error.without_snippet().to_string();
    if let Some(location) = location {
        // The parser appends the position; the error shows it once, after the origin.
        let suffix = format!(" at line {}, column {}", location.line(), location.column());
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_string();
        }
    }
    ManifestError::Yaml {
        origin: Box::new(origin.clone()),
        line: location.map(|l| l.line()),
        column: location.map(|l| l.column()),
        message,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::tests::*;
    use super::*;

    // ----- parse_documents -----

    #[test]
    fn parse_single_document() {
        let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: prod\nspec:\n  replicas: 2\n";
        let all = parse_documents(text, &cm_origin()).expect("valid");
        assert_eq!(all.len(), 1);
        let m = &all[0];
        assert_eq!(
            (m.group.as_str(), m.kind.as_str(), m.name.as_str()),
            ("apps", "Deployment", "web")
        );
        assert_eq!(m.namespace.as_deref(), Some("prod"));
        assert_eq!(m.object["spec"]["replicas"], json!(2));
        assert_eq!(m.origin, cm_origin().with_document(1).with_line(1));
        assert_eq!(
            m.origin.to_string(),
            "configMap default/app key deploy.yaml, document 1 (line 1)"
        );
    }

    #[test]
    fn parse_multi_document_with_empty_documents() {
        let text = "---\n# leading comment\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n---\n# only a comment\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n...\n---\nnull\n";
        let all = parse_documents(text, &cm_origin()).expect("valid");
        let names: Vec<_> = all
            .iter()
            .map(|m| (m.kind.as_str(), m.name.as_str()))
            .collect();
        assert_eq!(names, [("ConfigMap", "a"), ("Secret", "b")]);
        assert_eq!(all[0].origin.document(), Some(1));
        assert_eq!(all[0].origin.line(), Some(3));
        assert_eq!(all[1].origin.document(), Some(2));
        assert_eq!(all[1].origin.line(), Some(11));
    }

    #[test]
    fn parse_empty_inputs() {
        for text in [
            "",
            "\n",
            "---",
            "---\n",
            "---\n---\n",
            "# nothing\n",
            "---\n...\n",
            "~\n",
        ] {
            assert!(
                parse_documents(text, &cm_origin())
                    .expect("valid")
                    .is_empty(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn parse_json_input() {
        let text = "{\n\t\"apiVersion\": \"v1\",\n\t\"kind\": \"ConfigMap\",\n\t\"metadata\": {\"name\": \"j\"},\n\t\"data\": {\"n\": \"1\"}\n}\n";
        let all =
            parse_documents(text, &Origin::file("oci ghcr.io/x/y:1", "cm.json")).expect("valid");
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].name, "j");
        assert_eq!(all[0].object["data"], json!({"n": "1"}));
    }

    #[test]
    fn parse_json_list() {
        let text = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}},{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"y"}}]}]}"#;
        let all = parse_documents(text, &cm_origin()).expect("valid");
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].name, "y");
        assert_eq!(
            all[1].origin.to_string(),
            "configMap default/app key deploy.yaml, document 1 (line 1), items[1].items[0]"
        );
    }

    #[test]
    fn parse_yaml_list_kinds() {
        let text = "apiVersion: v1\nkind: ConfigMapList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: b\n";
        let all = parse_documents(text, &cm_origin()).expect("valid");
        let names: Vec<_> = all.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn parse_scalars_like_kubectl() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  mode: 0644\n  quoted: '0644'\n  flag: yes\n  ratio: 1.5\n";
        let all = parse_documents(text, &cm_origin()).expect("valid");
        let spec = &all[0].object["spec"];
        assert_eq!(spec["mode"], json!(420));
        assert_eq!(spec["quoted"], json!("0644"));
        assert_eq!(spec["flag"], json!(true));
        assert_eq!(spec["ratio"], json!(1.5));
    }

    #[test]
    fn parse_yaml_syntax_error_names_origin_and_line() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\ndata: [a, b\n";
        let err = parse_documents(text, &cm_origin()).expect_err("invalid");
        let ManifestError::Yaml { line, .. } = &err else {
            panic!("unexpected {err}");
        };
        assert!(line.is_some_and(|l| l >= 8), "line {line:?}");
        assert_msg(
            &err,
            &[
                "configMap default/app key deploy.yaml, line ",
                "invalid YAML",
                "fix the syntax",
            ],
        );
        // The position is shown once, after the origin.
        assert_eq!(err.to_string().matches("line ").count(), 1, "{err}");
    }

    #[test]
    fn parse_yaml_indentation_error_line() {
        let text = "metadata:\n  name: x\n   labels: y\n";
        let err = parse_documents(text, &Origin::source("http https://example.com/a.yaml"))
            .expect_err("invalid");
        assert_msg(
            &err,
            &[
                "http https://example.com/a.yaml, line 3, column ",
                "invalid YAML",
                "mapping values are not allowed",
            ],
        );
    }

    #[test]
    fn parse_duplicate_keys_error() {
        let text = "apiVersion: v1\nkind: ConfigMap\nkind: Secret\nmetadata:\n  name: a\n";
        let err = parse_documents(text, &cm_origin()).expect_err("invalid");
        assert!(
            matches!(err, ManifestError::Yaml { line: Some(3), .. }),
            "{err}"
        );
        assert_msg(&err, &["deploy.yaml, line 3", "duplicate mapping key"]);
    }

    #[test]
    fn parse_validation_error_names_document() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: b-\n";
        let err = parse_documents(text, &cm_origin()).expect_err("invalid");
        assert!(matches!(err, ManifestError::GenerateName { .. }), "{err}");
        assert_msg(
            &err,
            &[
                "configMap default/app key deploy.yaml, document 2 (line 7): ConfigMap:",
                "set metadata.name",
            ],
        );
    }

    #[test]
    fn parse_unquoted_yaml11_boolean_namespace_says_quote_it() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: no\n";
        let err = parse_documents(text, &cm_origin()).expect_err("invalid");
        assert!(matches!(err, ManifestError::Namespace { .. }), "{err}");
        assert_msg(
            &err,
            &[
                "deploy.yaml, document 1 (line 1): ConfigMap/a:",
                "is a boolean (quote it)",
            ],
        );
    }

    #[test]
    fn parse_scalar_document_is_not_an_object() {
        let err = parse_documents("just some text\n", &cm_origin()).expect_err("invalid");
        assert!(
            matches!(
                err,
                ManifestError::NotAnObject {
                    found: "a string",
                    ..
                }
            ),
            "{err}"
        );
        assert_msg(
            &err,
            &[
                "deploy.yaml, document 1 (line 1)",
                "expected a Kubernetes object",
            ],
        );
    }

    // ----- budgets -----

    fn configmaps(n: usize) -> String {
        (0..n)
            .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\n---\n"))
            .collect()
    }

    #[test]
    fn value_cost_counts_nodes_keys_and_json_bytes() {
        let v = json!({"a": [1, "xy", null, true], "b": {}});
        let cost = value_cost(&v);
        // The object, 2 keys, the list, 4 scalars, the empty object.
        assert_eq!(cost.nodes, 9);
        assert_eq!(cost.bytes, v.to_string().len());
        let Value::Object(map) = &v else {
            unreachable!()
        };
        assert_eq!(object_cost(map), cost);
        // Any depth, without recursion.
        let mut deep = Value::from(1);
        for _ in 0..5_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(value_cost(&deep).nodes, 5_001);
    }

    #[test]
    fn budget_charges_and_refuses_what_does_not_fit() {
        let mut b = YamlBudget::new(YamlCost {
            nodes: 10,
            bytes: 100,
        });
        assert_eq!(
            b.charge(YamlCost {
                nodes: 4,
                bytes: 60
            }),
            Ok(())
        );
        assert_eq!(
            b.left(),
            YamlCost {
                nodes: 6,
                bytes: 40
            }
        );
        assert_eq!(
            b.charge(YamlCost {
                nodes: 1,
                bytes: 41
            }),
            Err(BudgetExceeded::Bytes)
        );
        assert_eq!(
            b.charge(YamlCost { nodes: 7, bytes: 1 }),
            Err(BudgetExceeded::Nodes)
        );
        assert_eq!(
            b.left(),
            YamlCost {
                nodes: 6,
                bytes: 40
            },
            "unchanged on refusal"
        );
        assert_eq!(
            b.charge(YamlCost {
                nodes: 6,
                bytes: 40
            }),
            Ok(())
        );
        assert!(
            b.describe(BudgetExceeded::Nodes)
                .contains("--max-yaml-nodes-per-set")
        );
        assert!(
            b.describe(BudgetExceeded::Bytes)
                .contains("--max-yaml-mib-per-set")
        );
    }

    #[test]
    fn parsing_shares_one_budget_and_names_the_file_that_crossed_it() {
        let text = configmaps(3);
        let one = {
            let mut b = YamlBudget::new(YamlCost {
                nodes: 1000,
                bytes: 1 << 20,
            });
            parse_documents_within(&text, &cm_origin(), &mut b).expect("fits");
            b.used
        };
        assert_eq!(one.bytes, text.len());
        // Room for exactly two texts: the third fails, naming its origin and the flag.
        let mut b = YamlBudget::new(YamlCost {
            nodes: 1000,
            bytes: 2 * text.len(),
        });
        parse_documents_within(&text, &Origin::file("git x", "a.yaml"), &mut b).expect("fits");
        parse_documents_within(&text, &Origin::file("git x", "b.yaml"), &mut b).expect("fits");
        let err = parse_documents_within(&text, &Origin::file("git x", "c.yaml"), &mut b)
            .expect_err("over");
        assert!(matches!(err, ManifestError::Budget { .. }), "{err}");
        assert_msg(&err, &["git x file c.yaml: ", "--max-yaml-mib-per-set"]);
        // Nodes: the parser stops, and the error names the flag.
        let mut b = YamlBudget::new(YamlCost {
            nodes: one.nodes - 1,
            bytes: 1 << 20,
        });
        let err = parse_documents_within(&text, &cm_origin(), &mut b).expect_err("over");
        assert_msg(&err, &["deploy.yaml: ", "--max-yaml-nodes-per-set"]);
    }

    #[test]
    fn a_huge_text_is_refused_before_it_is_parsed() {
        let text = format!("{}garbage: [", configmaps(1));
        let mut b = YamlBudget::new(YamlCost {
            nodes: 1000,
            bytes: 10,
        });
        let err = parse_documents_within(&text, &cm_origin(), &mut b).expect_err("over");
        // A budget error, not the syntax error further on: the text was not read.
        assert!(matches!(err, ManifestError::Budget { .. }), "{err}");
    }

    #[test]
    fn deep_nesting_is_refused_in_yaml_and_json() {
        let flow = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\nx: {}{}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        let err = parse_documents(&flow, &cm_origin()).expect_err("too deep");
        assert_msg(&err, &["deploy.yaml: ", "nested more than 64 levels"]);
        let mut block = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\nx:\n");
        for level in 1..100 {
            block.push_str(&format!("{}a:\n", "  ".repeat(level)));
        }
        let err = parse_documents(&block, &cm_origin()).expect_err("too deep");
        assert_msg(&err, &["nested more than 64 levels"]);
        // Just under the bound is fine.
        let ok = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"a\"}},\"x\":{}1{}}}",
            "[".repeat(MAX_MANIFEST_DEPTH - 1),
            "]".repeat(MAX_MANIFEST_DEPTH - 1)
        );
        parse_documents(&ok, &cm_origin()).expect("at the bound");
    }

    #[test]
    fn a_large_bundle_within_the_budget_parses() {
        // More documents than the YAML parser allows by default (1,024).
        let all = parse_documents(&configmaps(3000), &cm_origin()).expect("within the budget");
        assert_eq!(all.len(), 3000);
        assert_eq!(all[2999].origin.document(), Some(3000));
    }
}
