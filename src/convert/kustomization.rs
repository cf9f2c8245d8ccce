//! A Kustomization's spec carried onto a set's spec, field by field, with Flux's meaning.
//! Two fields share Flux's names but not its meaning: Flux's `targetNamespace` (every
//! namespaced object is put there) is our `spec.kustomize.targetNamespace`, never our
//! `spec.targetNamespace`; Flux's `force` (re-create on an immutable-field change) is the
//! per-object annotation `applyset.dev/force: enabled` (through
//! `spec.kustomize.commonMetadata.annotations`), never our `spec.force`. Flux's defaults are
//! made explicit (retryInterval and timeout: the interval; deletionPolicy: MirrorPrune).
//! Every converted set adopts what exists (`adoptExisting`) and takes over
//! `kustomize-controller`'s fields (`takeOverFieldManagers`).

use std::{collections::BTreeMap, time::Duration};

use super::{
    FluxRef, Note, Scope, Severity, Written,
    flux::{DependencyRef, Fields, LocalRef, Object, ObjectKindRef, SourceRef},
    scope, source,
};
use crate::api::{
    ApplySetSpec, CommonMetadata, CustomHealthCheck, Decryption, DecryptionProvider,
    DeletionPolicy, HealthCheck, IgnoreRule, KustomizeImage, KustomizeOverrides, KustomizePatch,
    MAX_INTERVAL, MAX_TIMEOUT, MIN_DURATION, PostBuild, SecretReference, SubstituteReference,
    parse_duration,
};

/// The field manager of kustomize-controller, whose fields a converted set takes over.
pub const FLUX_FIELD_MANAGER: &str = "kustomize-controller";
/// The annotation that makes a member re-created on an immutable-field change (Flux's force).
pub const FORCE_ANNOTATION: &str = "applyset.dev/force";

/// A Kustomization converted, before its name (a ClusterApplySet's may change on a collision)
/// and its dependencies (which depend on the other Kustomizations' scopes) are settled.
#[derive(Clone, Debug)]
pub struct Draft {
    pub from: FluxRef,
    pub source: FluxRef,
    pub scope: Scope,
    pub spec: ApplySetSpec,
    /// The Kustomizations of `spec.dependsOn`, in order.
    pub depends_on: Vec<FluxRef>,
}

/// What converting one Kustomization reads besides it.
pub struct Context<'a> {
    pub sources: &'a BTreeMap<FluxRef, Object>,
    pub written: Option<&'a Written>,
    pub cluster_service_account: Option<&'a (String, String)>,
}

/// Converts the Kustomization `k` (its notes pushed on `notes`); `None` when it is refused
/// (a [`Severity::Refused`] note says why).
pub fn convert(k: &Object, cx: &Context, notes: &mut Vec<Note>) -> Option<Draft> {
    match draft(k, cx, notes) {
        Ok(d) => Some(d),
        Err(refused) => {
            notes.push(*refused);
            None
        }
    }
}

fn draft(k: &Object, cx: &Context, notes: &mut Vec<Note>) -> Result<Draft, Box<Note>> {
    let mut f = Fields::new(&k.id, "spec", k.spec.clone());
    if f.has("kubeConfig") {
        return Err(Box::new(f.note(
            "kubeConfig",
            Severity::Refused,
            "it applies to a remote cluster, which a set cannot: a converted set would apply to this cluster instead; install the operator in the remote cluster and convert there",
        )));
    }
    let sref: SourceRef = f
        .take("sourceRef")?
        .ok_or_else(|| f.note("sourceRef", Severity::Refused, "missing"))?;
    let sid = FluxRef {
        kind: sref.kind.clone(),
        namespace: sref.namespace.clone().unwrap_or(k.id.namespace.clone()),
        name: sref.name.clone(),
    };
    let (scope, scope_note) = decide_scope(&f, cx.written);
    let path: Option<String> = f.take("path")?;
    let why = match sid.kind.as_str() {
        "Bucket" => Some(source::BUCKET),
        "ExternalArtifact" => Some(source::EXTERNAL_ARTIFACT),
        _ => None,
    };
    if let Some(why) = why {
        return Err(f
            .note("sourceRef", Severity::Refused, format!("{sid}: {why}"))
            .into());
    }
    let source = cx.sources.get(&sid).ok_or_else(|| {
        f.note(
            "sourceRef",
            Severity::Refused,
            format!("{sid} is not among the objects read; add it to the input, or convert with --from-cluster"),
        )
    })?;
    let target = source::Target {
        path: clean_path(path.as_deref()),
        scope,
        namespace: &k.id.namespace,
    };
    let resolved = source::resolve(source, &target)
        .map_err(|why| f.note("sourceRef", Severity::Refused, format!("{sid}: {why}")))?;
    notes.extend(resolved.notes);
    let mut spec = ApplySetSpec {
        sources: vec![resolved.source],
        adopt_existing: true,
        take_over_field_managers: vec![FLUX_FIELD_MANAGER.to_string()],
        ..ApplySetSpec::default()
    };
    timing(&mut f, &mut spec, notes)?;
    notes.extend(source_interval(source, &spec.interval));
    lifecycle(&mut f, &mut spec, notes)?;
    health(&mut f, &mut spec, notes)?;
    spec.kustomize = Some(kustomize(&mut f, notes)?);
    spec.post_build = post_build(&mut f, scope, notes)?;
    spec.decryption = decryption(&mut f, scope, notes)?;
    identity(&mut f, &mut spec, scope, cx, notes)?;
    let depends_on = dependencies(&mut f, notes)?;
    f.drop_field(
        "buildMetadata",
        "a set's build keeps no kustomize build metadata (origin and transformer annotations)",
        notes,
    );
    f.drop_field(
        "ignoreMissingComponents",
        "a set's build fails on a missing component: remove it from spec.kustomize.components",
        notes,
    );
    f.rest(notes);
    notes.push(scope_note);
    Ok(Draft {
        from: k.id.clone(),
        source: sid,
        scope,
        spec,
        depends_on,
    })
}

/// The scope: from what it writes or its targetNamespace ([`scope::decide`]); a
/// ClusterApplySet cannot read substituteFrom, so a Kustomization with a ServiceAccount and
/// substituteFrom stays an ApplySet (one with a ServiceAccount may write in other
/// namespaces).
fn decide_scope(f: &Fields, written: Option<&Written>) -> (Scope, Note) {
    let ns = &f.object.namespace;
    let target = f.get("targetNamespace").and_then(|v| v.as_str());
    let (scope, why) = scope::decide(ns, target, written);
    let substitute_from = f
        .get("postBuild")
        .and_then(|p| p.get("substituteFrom"))
        .and_then(|s| s.as_array())
        .is_some_and(|a| !a.is_empty());
    let sa = f.get("serviceAccountName").and_then(|v| v.as_str());
    if scope == Scope::Cluster
        && substitute_from
        && let Some(sa) = sa
    {
        return (
            Scope::Namespaced,
            whole(
                f,
                format!(
                    "{why}; but a ClusterApplySet cannot read postBuild.substituteFrom, so it becomes an ApplySet acting as its ServiceAccount {ns}/{sa}, which may write where that ServiceAccount's RBAC allows"
                ),
            ),
        );
    }
    (scope, whole(f, format!("becomes {why}")))
}

/// An Info note about the object as a whole.
fn whole(f: &Fields, why: String) -> Note {
    Note {
        object: f.object.clone(),
        field: String::new(),
        severity: Severity::Info,
        why,
    }
}

/// `./apps/prod/` -> `apps/prod`; the root (`""`, `.`, `./`) -> `None`.
pub fn clean_path(path: Option<&str>) -> Option<String> {
    let mut p = path?.trim();
    loop {
        let before = p;
        p = p.trim_start_matches('/');
        if let Some(rest) = p.strip_prefix("./") {
            p = rest;
        }
        if p == before {
            break;
        }
    }
    let p = p.trim_end_matches('/');
    (!p.is_empty() && p != ".").then(|| p.to_string())
}

/// interval, retryInterval and timeout: Flux's defaults (the interval) made explicit, each
/// bounded as ours are (interval and retryInterval 1s..7d, timeout 1s..24h).
fn timing(f: &mut Fields, spec: &mut ApplySetSpec, notes: &mut Vec<Note>) -> Result<(), Box<Note>> {
    let interval: String = f
        .take("interval")?
        .ok_or_else(|| f.note("interval", Severity::Refused, "missing (Flux requires it)"))?;
    spec.interval = bounded(f, "interval", &interval, MAX_INTERVAL, notes)?;
    let retry: Option<String> = f.take("retryInterval")?;
    spec.retry_interval = match retry {
        Some(r) => bounded(f, "retryInterval", &r, MAX_INTERVAL, notes)?,
        None => {
            notes.push(f.note(
                "retryInterval",
                Severity::Info,
                format!(
                    "not set: Flux's default, the interval ({}), made explicit",
                    spec.interval
                ),
            ));
            spec.interval.clone()
        }
    };
    let timeout: Option<String> = f.take("timeout")?;
    let timeout = match timeout {
        Some(t) => t,
        None => {
            notes.push(f.note(
                "timeout",
                Severity::Info,
                format!("not set: Flux's default, the interval ({interval}), made explicit"),
            ));
            interval
        }
    };
    spec.timeout = bounded(f, "timeout", &timeout, MAX_TIMEOUT, notes)?;
    Ok(())
}

/// A note when the source was polled more often than the set will read it: Flux applied a
/// new revision when the source saw it; a set reads its source at its own interval.
fn source_interval(source: &Object, interval: &str) -> Option<Note> {
    let polled = source.spec.get("interval")?.as_str()?;
    if parse_duration(polled)? >= parse_duration(interval)? {
        return None;
    }
    Some(Note {
        object: source.id.clone(),
        field: "spec.interval".into(),
        severity: Severity::Info,
        why: format!(
            "Flux applied a new revision as soon as this source saw it (every {polled}); the set reads it at its own interval ({interval}): lower spec.interval, or run `kubectl applyset reconcile` after a push"
        ),
    })
}

/// `value` of `key` as a duration within 1s..`max` (clamped, with a note).
fn bounded(
    f: &Fields,
    key: &str,
    value: &str,
    max: Duration,
    notes: &mut Vec<Note>,
) -> Result<String, Box<Note>> {
    let d = parse_duration(value).ok_or_else(|| {
        f.note(
            key,
            Severity::Refused,
            format!("{value:?} is not a duration such as 30s, 5m or 1h30m"),
        )
    })?;
    let (clamped, limit) = if d > max {
        (max, "at most")
    } else if d < MIN_DURATION {
        (MIN_DURATION, "at least")
    } else {
        return Ok(value.to_string());
    };
    let text = humantime_go(clamped);
    notes.push(f.note(
        key,
        Severity::Info,
        format!("{value} is bounded to {text}: a set's {key} is {limit} {text}"),
    ));
    Ok(text)
}

/// A whole number of seconds as a Go duration (`24h`, `168h`, `1s`).
fn humantime_go(d: Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// prune, deletionPolicy (Flux's default MirrorPrune made explicit) and suspend.
fn lifecycle(
    f: &mut Fields,
    spec: &mut ApplySetSpec,
    notes: &mut Vec<Note>,
) -> Result<(), Box<Note>> {
    spec.prune = match f.take("prune")? {
        Some(p) => p,
        None => {
            notes.push(f.note(
                "prune",
                Severity::Info,
                "not set (Flux requires it): false, as Flux reads a missing prune",
            ));
            false
        }
    };
    let policy: Option<String> = f.take("deletionPolicy")?;
    spec.deletion_policy = match policy.as_deref().filter(|p| !p.is_empty()) {
        None => {
            notes.push(f.note("deletionPolicy", Severity::Info, "not set: Flux's default, MirrorPrune (delete the objects on deletion when prune is true), made explicit"));
            DeletionPolicy::MirrorPrune
        }
        Some(p) => serde_json::from_value(serde_json::Value::String(p.into())).map_err(|_| {
            f.note(
                "deletionPolicy",
                Severity::Refused,
                format!("{p:?} is not one of MirrorPrune, Delete, WaitForTermination, Orphan"),
            )
        })?,
    };
    spec.suspend = f.take("suspend")?.unwrap_or(false);
    Ok(())
}

/// wait, healthChecks, healthCheckExprs and ignore (the same shapes). With `wait: true`
/// kustomize-controller waits for every object it applied and ignores healthChecks; the set
/// waits for its members and its healthChecks both, so healthChecks are left out there (the
/// objects waited for stay Flux's), with a note. Without wait they are carried
/// ([`health_check`]).
fn health(f: &mut Fields, spec: &mut ApplySetSpec, notes: &mut Vec<Note>) -> Result<(), Box<Note>> {
    spec.wait = f.take("wait")?.unwrap_or(false);
    let checks: Vec<ObjectKindRef> = f.take("healthChecks")?.unwrap_or_default();
    if spec.wait && !checks.is_empty() {
        notes.push(f.note("healthChecks", Severity::Info, HEALTH_CHECKS_WITH_WAIT));
    } else {
        for (i, c) in checks.into_iter().enumerate() {
            spec.health_checks.push(health_check(f, i, c, notes));
        }
    }
    let exprs: Option<Vec<CustomHealthCheck>> = f.take("healthCheckExprs")?;
    spec.health_check_exprs = exprs.unwrap_or_default();
    let ignore: Option<Vec<IgnoreRule>> = f.take("ignore")?;
    spec.ignore = ignore.unwrap_or_default();
    Ok(())
}

/// Why healthChecks are left out of a set made from a Kustomization with `wait: true`.
pub const HEALTH_CHECKS_WITH_WAIT: &str = "ignored by kustomize-controller when wait is true (it waits for every object it applied, and only for those); a set with wait waits for its members and its healthChecks both, so they are left out and the set waits for the same objects as Flux did";

/// Why a health check without a namespace is noted.
pub const HEALTH_CHECK_NO_NAMESPACE: &str = "no namespace: kustomize-controller looks the object up with no namespace (right for a cluster-scoped kind; an object of a namespaced kind is never found there, so its check never passes); a set looks an object of a namespaced kind up in the ApplySet's own namespace (a ClusterApplySet refuses it): name the namespace if the object is namespaced";

/// One health check: a missing apiVersion is apps/v1, as in Flux; a missing namespace is
/// left missing (a cluster-scoped kind means the same in both), with a note on what a
/// namespaced kind means in each.
fn health_check(f: &Fields, i: usize, c: ObjectKindRef, notes: &mut Vec<Note>) -> HealthCheck {
    // kustomize-controller reads a missing apiVersion as apps/v1 (Kustomization v1beta1's).
    let api_version = c.api_version.filter(|a| !a.is_empty()).unwrap_or_else(|| {
        notes.push(f.note(
            &format!("healthChecks[{i}].apiVersion"),
            Severity::Info,
            "not set: apps/v1, as kustomize-controller reads it, made explicit",
        ));
        "apps/v1".into()
    });
    let namespace = c.namespace.filter(|n| !n.is_empty());
    if namespace.is_none() {
        notes.push(f.note(
            &format!("healthChecks[{i}].namespace"),
            Severity::Info,
            HEALTH_CHECK_NO_NAMESPACE,
        ));
    }
    HealthCheck {
        api_version,
        kind: c.kind,
        name: c.name,
        namespace,
    }
}

/// spec.kustomize: targetNamespace, namePrefix, nameSuffix, commonMetadata, patches,
/// images, components, and Flux's force as the annotation `applyset.dev/force: enabled`.
fn kustomize(f: &mut Fields, notes: &mut Vec<Note>) -> Result<KustomizeOverrides, Box<Note>> {
    let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let mut k = KustomizeOverrides {
        target_namespace: nonempty(f.take("targetNamespace")?),
        name_prefix: nonempty(f.take("namePrefix")?),
        name_suffix: nonempty(f.take("nameSuffix")?),
        common_metadata: f.take("commonMetadata")?,
        patches: f
            .take::<Vec<KustomizePatch>>("patches")?
            .unwrap_or_default(),
        images: f.take::<Vec<KustomizeImage>>("images")?.unwrap_or_default(),
        components: f.take("components")?.unwrap_or_default(),
    };
    if f.take::<bool>("force")?.unwrap_or(false) {
        k.common_metadata
            .get_or_insert_with(CommonMetadata::default)
            .annotations
            .insert(FORCE_ANNOTATION.into(), "enabled".into());
        notes.push(f.note("force", Severity::Info, "Flux's force (re-create an object when an immutable field changes) is the annotation applyset.dev/force: enabled on every object (spec.kustomize.commonMetadata.annotations); the set's spec.force (take over conflicting fields) stays false"));
    }
    Ok(k)
}

/// Flux's `PostBuild`.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct FluxPostBuild {
    #[serde(default)]
    substitute: BTreeMap<String, String>,
    #[serde(default)]
    substitute_from: Vec<SubstituteReference>,
    #[serde(default)]
    substitute_strategy: Option<String>,
}

/// postBuild: substitute and substituteFrom (not for a ClusterApplySet); Flux substitutes
/// only when a variable is given (WithVariables, its default) unless substituteStrategy is
/// Always.
fn post_build(
    f: &mut Fields,
    scope: Scope,
    notes: &mut Vec<Note>,
) -> Result<Option<PostBuild>, Box<Note>> {
    let Some(mut pf) = f.take_map("postBuild")? else {
        return Ok(None);
    };
    let strategy: Option<String> = pf.take("substituteStrategy")?;
    let mut pb = FluxPostBuild {
        substitute: pf.take("substitute")?.unwrap_or_default(),
        substitute_from: pf.take("substituteFrom")?.unwrap_or_default(),
        substitute_strategy: strategy,
    };
    pf.rest(notes);
    if scope == Scope::Cluster && !pb.substitute_from.is_empty() {
        notes.push(f.note("postBuild.substituteFrom", Severity::Dropped, "a ClusterApplySet has no namespace to read ConfigMaps and Secrets from, and the Kustomization has no serviceAccountName to make it an ApplySet; copy the variables into postBuild.substitute"));
        pb.substitute_from.clear();
    }
    let always = pb.substitute_strategy.as_deref() == Some("Always");
    if pb.substitute.is_empty() && pb.substitute_from.is_empty() && !always {
        return Ok(None);
    }
    Ok(Some(PostBuild {
        substitute: pb.substitute,
        substitute_from: pb.substitute_from,
    }))
}

/// decryption: provider sops and its secretRef (a ClusterApplySet names the Kustomization's
/// namespace); without a secretRef (cloud KMS through the controller's identity) it is
/// dropped.
fn decryption(
    f: &mut Fields,
    scope: Scope,
    notes: &mut Vec<Note>,
) -> Result<Option<Decryption>, Box<Note>> {
    let Some(mut d) = f.take_map("decryption")? else {
        return Ok(None);
    };
    let provider: Option<String> = d.take("provider")?;
    let secret: Option<LocalRef> = d.take("secretRef")?;
    d.drop_field("serviceAccountName", "a set decrypts with the age keys of its secretRef Secret only (no KMS through a ServiceAccount)", notes);
    d.rest(notes);
    if provider.as_deref() != Some("sops") {
        notes.push(f.note(
            "decryption.provider",
            Severity::Dropped,
            format!("provider {provider:?} is not sops, the only one a set has"),
        ));
        return Ok(None);
    }
    let Some(secret) = secret else {
        notes.push(f.note("decryption", Severity::Dropped, "no secretRef: a set decrypts with the age keys of a Secret only; put the age keys in a Secret and set spec.decryption.secretRef"));
        return Ok(None);
    };
    notes.push(f.note("decryption.secretRef", Severity::Info, "a set reads the age identities (entries ending in .agekey) of this Secret; Flux's OpenPGP (.asc), Vault and cloud KMS entries are not read"));
    Ok(Some(Decryption {
        provider: DecryptionProvider::Sops,
        secret_ref: SecretReference {
            name: secret.name,
            namespace: (scope == Scope::Cluster).then(|| f.object.namespace.clone()),
        },
    }))
}

/// serviceAccountName: an ApplySet's own; a ClusterApplySet's with the Kustomization's
/// namespace, or `--service-account` when it has none (else the operator's identity).
fn identity(
    f: &mut Fields,
    spec: &mut ApplySetSpec,
    scope: Scope,
    cx: &Context,
    notes: &mut Vec<Note>,
) -> Result<(), Box<Note>> {
    let sa: Option<String> = f
        .take::<String>("serviceAccountName")?
        .filter(|s| !s.is_empty());
    let ns = f.object.namespace.clone();
    match (scope, sa) {
        (Scope::Namespaced, sa) => spec.service_account_name = sa,
        (Scope::Cluster, Some(sa)) => {
            spec.service_account_name = Some(sa);
            spec.service_account_namespace = Some(ns);
        }
        (Scope::Cluster, None) => match cx.cluster_service_account {
            Some((sa_ns, sa)) => {
                spec.service_account_name = Some(sa.clone());
                spec.service_account_namespace = Some(sa_ns.clone());
                notes.push(f.note("serviceAccountName", Severity::Info, format!("not set: the ClusterApplySet acts as ServiceAccount {sa_ns}/{sa} (--service-account)")));
            }
            None => notes.push(f.note("serviceAccountName", Severity::Info, "not set: the ClusterApplySet acts as the operator's own identity (as Flux acted as kustomize-controller's); name a ServiceAccount with --service-account NAMESPACE/NAME to bound what it may write")),
        },
    }
    Ok(())
}

/// dependsOn: the Kustomizations depended on (their namespace defaults to this one's);
/// readyExpr has no equivalent.
fn dependencies(f: &mut Fields, notes: &mut Vec<Note>) -> Result<Vec<FluxRef>, Box<Note>> {
    let deps: Vec<DependencyRef> = f.take("dependsOn")?.unwrap_or_default();
    let mut out = Vec::new();
    for (i, d) in deps.into_iter().enumerate() {
        if d.ready_expr.as_deref().is_some_and(|e| !e.is_empty()) {
            notes.push(f.note(&format!("dependsOn[{i}].readyExpr"), Severity::Dropped, "a set waits for its dependencies' Ready (and Healthy) conditions; a custom readiness expression has no equivalent"));
        }
        out.push(FluxRef {
            kind: "Kustomization".into(),
            namespace: d
                .namespace
                .filter(|n| !n.is_empty())
                .unwrap_or(f.object.namespace.clone()),
            name: d.name,
        });
    }
    Ok(out)
}
