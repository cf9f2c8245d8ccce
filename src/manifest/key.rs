//! The identity of a member ([`MemberKey`]) and the duplicate check of a set.

use super::*;

// ---------------------------------------------------------------------------------------------
// MemberKey
// ---------------------------------------------------------------------------------------------

/// The identity of a member: group, kind, namespace, name (the version does not matter: the
/// same object is reachable through every served version).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberKey {
    pub group: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl MemberKey {
    /// `Kind` for the core group, `Kind.group` otherwise (the `contains-group-kinds` spelling).
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// `Deployment.apps ns/name`, `Namespace name`.
impl fmt::Display for MemberKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        match &self.namespace {
            Some(namespace) => write!(f, " {namespace}/{}", self.name),
            None => write!(f, " {}", self.name),
        }
    }
}

/// Fails on the first key (in input order) that was already seen, naming both origins.
///
/// Pass keys whose namespaces are already resolved (defaulted), so that an object without a
/// namespace and the same object with the target namespace are recognised as one.
pub fn check_duplicates<'a>(
    keys: impl IntoIterator<Item = (MemberKey, &'a Origin)>,
) -> Result<(), ManifestError> {
    let mut seen: BTreeMap<MemberKey, &'a Origin> = BTreeMap::new();
    for (key, origin) in keys {
        match seen.entry(key) {
            Entry::Vacant(entry) => {
                entry.insert(origin);
            }
            Entry::Occupied(entry) => {
                return Err(ManifestError::Duplicate {
                    first: Box::new((*entry.get()).clone()),
                    second: Box::new(origin.clone()),
                    key: entry.key().clone(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::*;
    use super::*;

    // ----- duplicates -----

    #[test]
    fn member_key_display_and_group_kind() {
        let deploy = MemberKey {
            group: "apps".into(),
            kind: "Deployment".into(),
            namespace: Some("ns".into()),
            name: "web".into(),
        };
        assert_eq!(deploy.to_string(), "Deployment.apps ns/web");
        assert_eq!(deploy.group_kind(), "Deployment.apps");
        let namespace = MemberKey {
            group: String::new(),
            kind: "Namespace".into(),
            namespace: None,
            name: "team".into(),
        };
        assert_eq!(namespace.to_string(), "Namespace team");
        assert_eq!(namespace.group_kind(), "Namespace");
    }

    #[test]
    fn duplicates_detected_with_both_origins() {
        let text =
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: prod\n";
        let from_file = parse_documents(text, &cm_origin()).expect("valid");
        let inline = manifest(json!({
            "apiVersion": "apps/v1beta1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"}
        }));
        let other = manifest(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": "prod"}
        }));
        let all = [&inline, &other, &from_file[0]];
        let err = check_duplicates(all.iter().map(|m| (m.key(), &m.origin))).expect_err("dup");
        assert!(matches!(err, ManifestError::Duplicate { .. }));
        assert_msg(
            &err,
            &[
                "Deployment.apps prod/web is declared more than once",
                "at spec.manifests[0] and at configMap default/app key deploy.yaml, document 1 (line 1)",
                "remove one of the declarations",
            ],
        );
        assert_eq!(err.origin(), &from_file[0].origin);
    }

    #[test]
    fn no_duplicates_across_namespace_group_kind_name() {
        let a = Origin::inline(0);
        let key = |group: &str, kind: &str, ns: Option<&str>, name: &str| MemberKey {
            group: group.into(),
            kind: kind.into(),
            namespace: ns.map(Into::into),
            name: name.into(),
        };
        let keys = vec![
            (key("", "ConfigMap", Some("a"), "x"), &a),
            (key("", "ConfigMap", Some("b"), "x"), &a),
            (key("", "ConfigMap", None, "x"), &a),
            (key("", "Secret", Some("a"), "x"), &a),
            (key("example.com", "ConfigMap", Some("a"), "x"), &a),
            (key("", "ConfigMap", Some("a"), "y"), &a),
        ];
        assert!(check_duplicates(keys).is_ok());
        assert!(check_duplicates(Vec::<(MemberKey, &Origin)>::new()).is_ok());
    }
}
