//! The Flux objects `convert` reads, as serde types of their fields (from
//! kustomize-controller's `api/v1` and source-controller's `api/v1`): only what is read;
//! every other field is kept in `rest`, so that it is named as having no equivalent rather
//! than dropped in silence.
