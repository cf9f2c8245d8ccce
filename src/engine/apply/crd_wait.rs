//! The wait for CRDs: the definitions stage ends when every CRD it applied is Established, so
//! that their custom resources can be applied next.
//!
//! Promises: one GET for a CRD already Established; otherwise a watch of that one object (GETs
//! every 100 ms if the watch fails); a CRD gone or being deleted fails at once, one not
//! Established by the deadline fails naming its false conditions; either way its custom
//! resources are not applied.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;

use crate::{
    engine::{
        SetScope,
        outcome::{MemberResult, Outcome},
    },
    kind_order,
};

/// Waits until every CRD applied in `results` is Established (polling its status), turning a
/// CRD that is not by `deadline` into a failure: its custom resources are not applied.
pub(super) async fn wait_for_crds(
    scope: &SetScope,
    results: &mut [MemberResult],
    deadline: Instant,
) {
    let crds: Api<CustomResourceDefinition> = Api::all(scope.client.clone());
    for result in results.iter_mut() {
        let r = &result.reference;
        if !kind_order::is_crd(&r.group, &r.kind) || !result.outcome.is_applied() {
            continue;
        }
        let failure = match wait_for_crd(&crds, &r.name, deadline).await {
            CrdState::Established => continue,
            // It will not become Established: fail now (the reconcile is retried, and
            // creates it again), not at the reconcile's timeout.
            CrdState::Gone(why) => format!("{r}: {why}; applied again on the next attempt"),
            CrdState::Waiting(why) => format!(
                "{r}: not Established before the reconcile timeout ({why}); its custom resources were not applied"
            ),
        };
        result.outcome = Outcome::Failed { message: failure };
    }
}

/// Waits until CRD `name` is Established, gone or being deleted, or `deadline` passes. One
/// GET first: a CRD applied unchanged is Established already, and a reconcile that changed
/// nothing costs no more than that. Otherwise a watch of that one object (kube's
/// `await_condition`); should the watch fail (e.g. the set's identity may get but not watch
/// CRDs), it is looked at every 100 ms instead.
async fn wait_for_crd(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    deadline: Instant,
) -> CrdState {
    let now = look(crds, name).await;
    if !matches!(now, CrdState::Waiting(_)) {
        return now;
    }
    let decided =
        |crd: Option<&CustomResourceDefinition>| !matches!(crd_state(crd), CrdState::Waiting(_));
    let watched = tokio::time::timeout_at(
        tokio::time::Instant::from_std(deadline),
        kube::runtime::wait::await_condition(crds.clone(), name, decided),
    )
    .await;
    match watched {
        Ok(Ok(crd)) => crd_state(crd.as_ref()),
        Ok(Err(e)) => {
            tracing::debug!(crd = name, error = %e, "watching a CRD failed; polling it");
            poll_crd(crds, name, deadline).await
        }
        // The deadline passed: one last look says why.
        Err(_) => look(crds, name).await,
    }
}

/// [`wait_for_crd`] by GETs every 100 ms.
async fn poll_crd(crds: &Api<CustomResourceDefinition>, name: &str, deadline: Instant) -> CrdState {
    loop {
        let state = look(crds, name).await;
        if !matches!(state, CrdState::Waiting(_)) || Instant::now() >= deadline {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Where CRD `name` stands now (one GET; a failed GET is waited on).
async fn look(crds: &Api<CustomResourceDefinition>, name: &str) -> CrdState {
    match crds.get_opt(name).await {
        Ok(crd) => crd_state(crd.as_ref()),
        Err(e) => CrdState::Waiting(e.to_string()),
    }
}

/// Where a CRD just applied stands, as far as waiting for it goes.
#[derive(Debug, PartialEq, Eq)]
enum CrdState {
    Established,
    /// Gone or being deleted: it will not become Established (a foreign actor deleted it
    /// while this reconcile applied it — the apply of an object being deleted succeeds).
    Gone(String),
    /// Not yet: why.
    Waiting(String),
}

/// The state of a CRD read back after applying it (`None`: not found).
fn crd_state(crd: Option<&CustomResourceDefinition>) -> CrdState {
    match crd {
        None => CrdState::Gone("deleted while being applied".into()),
        Some(c) if c.metadata.deletion_timestamp.is_some() => {
            CrdState::Gone("being deleted (deletionTimestamp is set)".into())
        }
        Some(c) if established(c) => CrdState::Established,
        Some(c) => CrdState::Waiting(not_established_reason(c)),
    }
}

/// The messages of a CRD's false conditions (e.g. NamesAccepted=False: a name clash).
fn not_established_reason(crd: &CustomResourceDefinition) -> String {
    let conditions = crd.status.as_ref().and_then(|s| s.conditions.as_ref());
    let problems: Vec<String> = conditions
        .into_iter()
        .flatten()
        .filter(|c| c.status != "True")
        .map(|c| {
            format!(
                "{}={}: {}",
                c.type_,
                c.status,
                c.message.clone().unwrap_or_default()
            )
        })
        .collect();
    if problems.is_empty() {
        "waiting for Established".into()
    } else {
        problems.join("; ")
    }
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(conditions: &[(&str, &str)], deleting: bool) -> CustomResourceDefinition {
        let mut c: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gadgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "gadgets", "kind": "Gadget"}, "versions": []},
            "status": {"conditions": conditions.iter().map(|(t, s)| serde_json::json!(
                {"type": t, "status": s, "message": format!("{t} is {s}")})).collect::<Vec<_>>()},
        }))
        .expect("a CRD");
        if deleting {
            c.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ));
        }
        c
    }

    #[test]
    fn a_crd_gone_or_being_deleted_is_not_waited_for() {
        assert_eq!(
            crd_state(None),
            CrdState::Gone("deleted while being applied".into())
        );
        // Being deleted, even while still Established: it goes away, with its resources.
        assert!(matches!(
            crd_state(Some(&crd(&[("Established", "True")], true))),
            CrdState::Gone(_)
        ));
        assert_eq!(
            crd_state(Some(&crd(&[("Established", "True")], false))),
            CrdState::Established
        );
        assert_eq!(
            crd_state(Some(&crd(&[("NamesAccepted", "False")], false))),
            CrdState::Waiting("NamesAccepted=False: NamesAccepted is False".into())
        );
        assert_eq!(
            crd_state(Some(&crd(&[], false))),
            CrdState::Waiting("waiting for Established".into())
        );
    }
}
