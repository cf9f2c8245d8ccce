//! `applyset_info`: one series per parent, labelled with where it stands (its Ready
//! condition, reason, suspension, revision).
//!
//! Promises: one series per parent at any time (a change replaces it, a parent gone removes
//! it), so the series count follows the number of sets.

use super::Metrics;

/// The labels of `applyset_info`, in order.
pub const INFO_LABELS: [&str; 7] = [
    "name",
    "namespace",
    "kind",
    "ready",
    "reason",
    "suspended",
    "revision",
];

/// What `applyset_info` says of one parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    pub name: String,
    /// Empty for a ClusterApplySet.
    pub namespace: String,
    pub kind: String,
    /// The Ready condition's status ("True", "False", "Unknown").
    pub ready: String,
    pub reason: String,
    pub suspended: bool,
    /// The revision last applied (empty when none).
    pub revision: String,
}

impl Info {
    fn values(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.namespace.clone(),
            self.kind.clone(),
            self.ready.clone(),
            self.reason.clone(),
            self.suspended.to_string(),
            self.revision.clone(),
        ]
    }
}

impl Metrics {
    /// Sets the `applyset_info` series of `parent` (replacing its earlier one), or removes it
    /// (`None`: the parent is gone).
    pub fn set_info(&self, parent: &str, info: Option<&Info>) {
        let mut labels = self.info_labels.lock();
        let new = info.map(Info::values);
        let old = labels.get(parent).cloned();
        if old == new {
            return;
        }
        if let Some(old) = old {
            let old: Vec<&str> = old.iter().map(String::as_str).collect();
            let _ = self.info.remove_label_values(&old);
        }
        match new {
            Some(values) => {
                let v: Vec<&str> = values.iter().map(String::as_str).collect();
                self.info.with_label_values(&v).set(1);
                labels.insert(parent.to_string(), values);
            }
            None => {
                labels.remove(parent);
            }
        }
    }
}
