//! A Kustomization's spec carried onto a set's spec, field by field, with Flux's meaning.
