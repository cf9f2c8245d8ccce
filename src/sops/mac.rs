//! SOPS's MAC: SHA-512 over the bytes of every value in tree order (or, with
//! `mac_only_encrypted`, of the encrypted ones only, after a fixed prefix), as upper-case hex;
//! stored encrypted with the data key and the file's `lastmodified` as additional data.

use sha2::{Digest, Sha512};

use super::tree::{Node, go_float};

/// SHA-256 of `sops`: the first bytes hashed when `mac_only_encrypted` is set, so that the two
/// kinds of MAC never agree (SOPS's `MACOnlyEncryptedInitialization`).
const MAC_ONLY_ENCRYPTED_INIT: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b,
    0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

/// The running MAC of one file.
pub struct Mac(Sha512);

impl Mac {
    pub fn new(mac_only_encrypted: bool) -> Mac {
        let mut hash = Sha512::new();
        if mac_only_encrypted {
            hash.update(MAC_ONLY_ENCRYPTED_INIT);
        }
        Mac(hash)
    }

    /// Adds one value's bytes.
    pub fn add(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The MAC as SOPS writes it (upper-case hex).
    pub fn finish(self) -> String {
        hex::encode_upper(self.0.finalize())
    }
}

/// The bytes SOPS hashes for a scalar (its `ToBytes`): strings as they are, integers in
/// decimal, floats in the shortest decimal form without exponent, booleans as `True`/`False`.
/// `None` for null, which SOPS skips.
pub fn scalar_bytes(node: &Node) -> Option<Vec<u8>> {
    match node {
        Node::Str(s) => Some(s.as_bytes().to_vec()),
        Node::Bytes(b) => Some(b.clone()),
        Node::Int(i) => Some(i.to_string().into_bytes()),
        Node::Float(f) => Some(go_float(*f).into_bytes()),
        Node::Bool(true) => Some(b"True".to_vec()),
        Node::Bool(false) => Some(b"False".to_vec()),
        Node::Null | Node::Seq(_) | Node::Map(_) => None,
    }
}

/// Whether two MACs are equal, in time independent of where they differ.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_is_sha256_of_sops() {
        assert_eq!(
            sha2::Sha256::digest(b"sops").as_slice(),
            MAC_ONLY_ENCRYPTED_INIT
        );
    }

    #[test]
    fn scalars_are_hashed_as_go_prints_them() {
        assert_eq!(scalar_bytes(&Node::Int(-3)).unwrap(), b"-3");
        assert_eq!(scalar_bytes(&Node::Float(1.0)).unwrap(), b"1");
        assert_eq!(scalar_bytes(&Node::Float(1.5)).unwrap(), b"1.5");
        assert_eq!(
            scalar_bytes(&Node::Float(1e21)).unwrap(),
            b"1000000000000000000000"
        );
        assert_eq!(scalar_bytes(&Node::Float(1e-7)).unwrap(), b"0.0000001");
        assert_eq!(scalar_bytes(&Node::Float(f64::INFINITY)).unwrap(), b"+Inf");
        assert_eq!(scalar_bytes(&Node::Bool(true)).unwrap(), b"True");
        assert_eq!(scalar_bytes(&Node::Bool(false)).unwrap(), b"False");
        assert_eq!(scalar_bytes(&Node::Null), None);
    }

    #[test]
    fn mac_is_upper_hex_sha512() {
        let mut mac = Mac::new(false);
        mac.add(b"a");
        mac.add(b"b");
        assert_eq!(mac.finish(), hex::encode_upper(Sha512::digest(b"ab")));
        assert!(same("AB", "AB") && !same("AB", "AC") && !same("AB", "ABC"));
    }
}
