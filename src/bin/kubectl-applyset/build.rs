//! `build`: render the sets of a file and print their members as the operator would apply
//! them, as a YAML stream on standard output; warnings on standard error.

use std::path::Path;

use applyset_operator::{render::DesiredSet, tenancy::Defaults};

use crate::{Global, conn, error::CliError, file, output::applied_object, render_file::Renderer};

pub async fn run(
    g: &Global,
    path: &Path,
    cluster: bool,
    allow_cross_namespace: bool,
) -> Result<u8, CliError> {
    // Offline, ApplySets without a namespace are in -n's namespace, else "default"; with
    // --cluster, in the context's as kubectl would put them.
    let (client, namespace) = if cluster {
        let c = conn::connect(g).await?;
        (Some(c.client), c.namespace)
    } else {
        (
            None,
            g.namespace.clone().unwrap_or_else(|| "default".into()),
        )
    };
    let file = file::read_sets(path, &namespace)?;
    let defaults = Defaults {
        allow_cross_namespace,
        ..Defaults::default()
    };
    let renderer = Renderer::new(&file, client, defaults, g.kustomize_binary.clone())
        .with_age_keys(
            crate::age_keys::local_keys(g.sops_age_key_file.as_deref())
                .map_err(CliError::AgeKey)?,
        );
    let mut out = String::new();
    let mut errors = 0;
    for doc in &file.sets {
        match renderer.render(&file, doc).await {
            Ok(rendered) => {
                for (group, version, kind) in &rendered.assumed {
                    let api_version = if group.is_empty() {
                        version.clone()
                    } else {
                        format!("{group}/{version}")
                    };
                    let message = format!(
                        "{}: kind {kind} ({api_version}) is neither built in nor defined by a CustomResourceDefinition in the file; assumed namespaced (--cluster resolves it by discovery)",
                        doc.parent
                    );
                    eprintln!("warning: {}", file.at(doc.line, message));
                }
                out.push_str(&format!(
                    "# {} ({}): {} members, field manager {}, acting as {}\n",
                    doc.parent,
                    doc.parent.id(),
                    rendered.set.members.len(),
                    doc.parent.member_field_manager(),
                    rendered.identity
                ));
                out.push_str(&yaml_stream(&rendered.set, &doc.parent.id())?);
            }
            Err(e) => {
                eprintln!("error: {e}");
                errors += 1;
            }
        }
    }
    print!("{out}");
    if errors > 0 {
        return Ok(crate::EXIT_ERROR);
    }
    Ok(0)
}

/// The members of `set`, in apply order, as YAML documents each starting with `---`.
fn yaml_stream(set: &DesiredSet, id: &str) -> Result<String, CliError> {
    let mut out = String::new();
    for m in &set.members {
        out.push_str("---\n");
        out.push_str(&crate::output::to_yaml(&applied_object(m, id))?);
    }
    Ok(out)
}
