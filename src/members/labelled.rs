//! What the member watches know of labelled objects: each object by reference, and the
//! references of each set (the value of their `part-of` label). A set's members are found
//! through its own entries, without looking at any other set's: a reconcile's cost does not
//! grow with the number of sets.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use crate::{
    api::MemberRef,
    applyset::{GroupKind, controls::Marks},
    health::Health,
};

/// One labelled object as its watch (or our own apply) last saw it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Labelled {
    pub rv: String,
    /// Its `part-of` label.
    pub id: Option<String>,
    /// The object's health at `rv`, for kinds assessed from the whole object; `None` for other
    /// kinds, and after our own apply until the watch delivers that version.
    pub health: Option<Health>,
    /// The object's shape (see `members::shape`) at `rv`, for kinds watched whole.
    pub shape: Option<u64>,
    /// Its per-object controls (see [`crate::applyset::controls`]) at `rv` (six flags):
    /// what the apply reads of the live object without a request.
    pub marks: Marks,
}

/// What an event says of an object besides its version: its `part-of` label and its
/// per-object controls.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Tag {
    pub id: Option<String>,
    pub marks: Marks,
}

impl From<Option<String>> for Tag {
    /// An object with a `part-of` label and no controls.
    fn from(id: Option<String>) -> Self {
        Tag {
            id,
            marks: Marks::default(),
        }
    }
}

/// Labelled objects by reference, indexed by `part-of` value.
#[derive(Default)]
pub(super) struct LabelledIndex {
    by_ref: HashMap<Arc<MemberRef>, Labelled>,
    by_id: HashMap<String, HashSet<Arc<MemberRef>>>,
}

impl LabelledIndex {
    pub fn get(&self, r: &MemberRef) -> Option<&Labelled> {
        self.by_ref.get(r)
    }

    /// What is known of `r`, to change its health (nothing else: the index stays true).
    pub fn get_mut(&mut self, r: &MemberRef) -> Option<&mut Labelled> {
        self.by_ref.get_mut(r)
    }

    /// Records `l` as what is known of `r`; returns what was.
    pub fn insert(&mut self, r: MemberRef, l: Labelled) -> Option<Labelled> {
        if let Some(known) = self.by_ref.get_mut(&r)
            && known.id == l.id
        {
            return Some(std::mem::replace(known, l));
        }
        let before = self.remove(&r);
        let r = Arc::new(r);
        if let Some(id) = &l.id {
            self.by_id.entry(id.clone()).or_default().insert(r.clone());
        }
        self.by_ref.insert(r, l);
        before
    }

    /// Forgets `r`; returns what was known of it.
    pub fn remove(&mut self, r: &MemberRef) -> Option<Labelled> {
        let (key, l) = self.by_ref.remove_entry(r)?;
        if let Some(id) = &l.id
            && let Some(refs) = self.by_id.get_mut(id.as_str())
        {
            refs.remove(&key);
            if refs.is_empty() {
                self.by_id.remove(id.as_str());
            }
        }
        Some(l)
    }

    /// Forgets every object of kind `gk` (before its watch lists again, or when it stops).
    pub fn remove_kind(&mut self, gk: &GroupKind) {
        let of_kind: Vec<Arc<MemberRef>> = self
            .by_ref
            .keys()
            .filter(|r| r.group == gk.group && r.kind == gk.kind)
            .cloned()
            .collect();
        for r in of_kind {
            self.remove(&r);
        }
    }

    /// The objects labelled `part-of=<id>`.
    pub fn of_id<'a>(&'a self, id: &str) -> impl Iterator<Item = (&'a MemberRef, &'a Labelled)> {
        self.by_id
            .get(id)
            .into_iter()
            .flatten()
            .filter_map(|r| self.by_ref.get_key_value(&**r))
            .map(|(r, l)| (&**r, l))
    }

    pub fn len(&self) -> usize {
        self.by_ref.len()
    }

    #[cfg(test)]
    pub fn ids(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str) -> MemberRef {
        MemberRef {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    fn labelled(rv: &str, id: Option<&str>) -> Labelled {
        Labelled {
            rv: rv.into(),
            id: id.map(str::to_string),
            health: None,
            shape: None,
            marks: Marks::default(),
        }
    }

    fn names(index: &LabelledIndex, id: &str) -> Vec<String> {
        let mut v: Vec<String> = index.of_id(id).map(|(r, _)| r.name.clone()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_set_finds_only_its_own_objects() {
        let mut index = LabelledIndex::default();
        index.insert(cm("a"), labelled("1", Some("x")));
        index.insert(cm("b"), labelled("2", Some("x")));
        index.insert(cm("c"), labelled("3", Some("y")));
        index.insert(cm("d"), labelled("4", None));
        assert_eq!(names(&index, "x"), ["a", "b"]);
        assert_eq!(names(&index, "y"), ["c"]);
        assert!(names(&index, "z").is_empty());
        assert_eq!(index.get(&cm("d")).map(|l| l.rv.as_str()), Some("4"));
    }

    #[test]
    fn a_new_version_replaces_the_old_and_a_relabel_moves_the_object() {
        let mut index = LabelledIndex::default();
        index.insert(cm("a"), labelled("1", Some("x")));
        let before = index.insert(cm("a"), labelled("2", Some("x")));
        assert_eq!(before.map(|l| l.rv), Some("1".into()));
        assert_eq!(index.get(&cm("a")).map(|l| l.rv.as_str()), Some("2"));
        index.insert(cm("a"), labelled("3", Some("y")));
        assert!(names(&index, "x").is_empty());
        assert_eq!(names(&index, "y"), ["a"]);
        assert_eq!(index.ids(), 1, "an id with no object left is dropped");
        index.insert(cm("a"), labelled("4", None));
        assert!(names(&index, "y").is_empty());
        assert_eq!((index.len(), index.ids()), (1, 0));
    }

    #[test]
    fn removing_forgets_the_object_everywhere() {
        let mut index = LabelledIndex::default();
        index.insert(cm("a"), labelled("1", Some("x")));
        assert_eq!(index.remove(&cm("a")).map(|l| l.rv), Some("1".into()));
        assert_eq!(index.remove(&cm("a")), None);
        assert!(names(&index, "x").is_empty());
        assert_eq!((index.len(), index.ids()), (0, 0));
    }

    #[test]
    fn removing_a_kind_leaves_the_others() {
        let mut index = LabelledIndex::default();
        index.insert(cm("a"), labelled("1", Some("x")));
        let secret = MemberRef {
            kind: "Secret".into(),
            ..cm("s")
        };
        index.insert(secret.clone(), labelled("2", Some("x")));
        index.remove_kind(&GroupKind::new(String::new(), "ConfigMap".to_string()));
        assert_eq!(names(&index, "x"), ["s"]);
        assert!(index.get(&cm("a")).is_none());
        assert!(index.get(&secret).is_some());
    }
}
