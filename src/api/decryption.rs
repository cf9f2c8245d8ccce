//! `spec.decryption`: how a set decrypts its SOPS-encrypted members (the provider and the
//! Secret with the age identities).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::SecretReference;

/// How a set decrypts its members (spec.decryption).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decryption {
    /// The decryption provider: sops (the only one).
    pub provider: DecryptionProvider,
    /// The Secret with the age identities (entries ending in .agekey). An ApplySet's is in its
    /// own namespace; a ClusterApplySet must set namespace.
    pub secret_ref: SecretReference,
}

/// A decryption provider.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DecryptionProvider {
    /// SOPS with age keys.
    #[serde(rename = "sops")]
    Sops,
}
