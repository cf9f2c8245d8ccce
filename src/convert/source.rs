//! A Kustomization's `sourceRef` resolved into the set's own source (git or oci).
