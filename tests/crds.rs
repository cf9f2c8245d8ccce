//! The committed CRDs are what the code generates, and they install and explain on a real
//! API server.

mod support;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use support::{cluster, wait_for};

const COMMITTED: &str = include_str!("../config/crd/applyset.dev.yaml");

#[test]
fn committed_crds_match_the_generated_ones() {
    let generated = applyset_operator::api::crds_yaml().expect("generate");
    assert!(
        generated == COMMITTED,
        "config/crd/applyset.dev.yaml is stale: run `make crds` and commit the result"
    );
}

#[test]
fn both_crds_are_marked_as_applyset_parent_types() {
    for crd in applyset_operator::api::crds() {
        let labels = crd.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels
                .get("applyset.kubernetes.io/is-parent-type")
                .map(String::as_str),
            Some("true")
        );
    }
}

#[tokio::test]
async fn crds_install_and_every_spec_field_is_explained() {
    let client = cluster().client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for crd in applyset_operator::api::crds() {
        let name = crd.metadata.name.clone().expect("name");
        crds.patch(
            &name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("install crd");
        wait_for("the CRD to be Established", Duration::from_secs(60), || {
            let crds = crds.clone();
            let name = name.clone();
            async move {
                let c = crds.get(&name).await.ok()?;
                c.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            }
        })
        .await;
    }
    let fields = [
        "manifests",
        "targetNamespace",
        "prune",
        "allowEmpty",
        "force",
        "mode",
        "interval",
        "retryInterval",
        "timeout",
        "suspend",
        "deletionPolicy",
    ];
    for kind in ["applyset", "clusterapplyset"] {
        for field in fields {
            // The API server publishes the schema to OpenAPI a little after Established.
            let out = wait_for(
                "kubectl explain to know the field",
                Duration::from_secs(60),
                || {
                    let mut cmd = cluster().kubectl();
                    cmd.args(["explain", &format!("{kind}.spec.{field}")]);
                    async move {
                        let out = cmd.output().ok()?;
                        out.status
                            .success()
                            .then(|| String::from_utf8_lossy(&out.stdout).to_string())
                    }
                },
            )
            .await;
            let description = out
                .split("DESCRIPTION:")
                .nth(1)
                .unwrap_or_default()
                .trim()
                .to_string();
            assert!(
                description.len() > 20 && !description.starts_with("<empty>"),
                "{kind}.spec.{field} has no description:\n{out}"
            );
            // Paragraphs wrapped by kubectl, not broken where the source's comment lines
            // ended: within a paragraph only its last line is short.
            for paragraph in description.split("\n\n") {
                let lines: Vec<&str> = paragraph.lines().map(str::trim).collect();
                for line in lines.iter().take(lines.len().saturating_sub(1)) {
                    assert!(
                        line.len() >= 40 || line.starts_with("- ") || line.starts_with("* "),
                        "{kind}.spec.{field}: a line broken mid-sentence ({line:?}):\n{description}"
                    );
                }
            }
        }
    }
}
