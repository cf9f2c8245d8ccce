//! SOPS's value cipher: `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`, AES-256-GCM with a
//! 32-byte nonce, the value's path (`a:b:c:`) as additional authenticated data.

use aes_gcm::aead::AeadInOut;
use aes_gcm::aead::array::Array;
use aes_gcm::aead::consts::U32;
use aes_gcm::aes::Aes256;
use aes_gcm::{AesGcm, KeyInit, Tag};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// The type SOPS recorded for a value when it encrypted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    Str,
    Int,
    Float,
    Bool,
    Bytes,
    Time,
    Comment,
}

impl ValueType {
    fn parse(text: &str) -> Option<ValueType> {
        Some(match text {
            "str" => ValueType::Str,
            "int" => ValueType::Int,
            "float" => ValueType::Float,
            "bool" => ValueType::Bool,
            "bytes" => ValueType::Bytes,
            "time" => ValueType::Time,
            "comment" => ValueType::Comment,
            _ => return None,
        })
    }
}

/// The parts of an encrypted value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encrypted {
    pub data: Vec<u8>,
    pub iv: Vec<u8>,
    pub tag: Vec<u8>,
    pub kind: ValueType,
}

/// A decrypted value: its bytes and the type SOPS recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plain {
    pub bytes: Vec<u8>,
    pub kind: ValueType,
}

/// Why a value could not be decrypted; the caller adds the file and path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CipherError {
    /// Not of the form `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`, or a part is malformed.
    Malformed(String),
    /// The AES-GCM tag does not authenticate the value under this key and path.
    Unauthentic,
}

/// Whether `text` looks like a SOPS encrypted value (the prefix SOPS matches on).
pub fn is_encrypted(text: &str) -> bool {
    text.starts_with("ENC[AES256_GCM,")
}

/// Splits an encrypted value into its parts (the rule of SOPS's regular expression
/// `^ENC\[AES256_GCM,data:(.+),iv:(.+),tag:(.+),type:(.+)\]`, with base64 parts, which hold no
/// commas).
pub fn parse(text: &str) -> Result<Encrypted, CipherError> {
    let malformed = |what: &str| CipherError::Malformed(what.to_string());
    let body = text
        .strip_prefix("ENC[AES256_GCM,")
        .and_then(|rest| rest.strip_suffix(']'))
        .ok_or_else(|| malformed("not of the form ENC[AES256_GCM,…]"))?;
    let mut parts = body.split(',');
    let mut field = |name: &str| {
        parts
            .next()
            .and_then(|p| p.strip_prefix(name))
            .and_then(|p| p.strip_prefix(':'))
            .filter(|p| !p.is_empty())
            .ok_or_else(|| CipherError::Malformed(format!("no `{name}` part")))
    };
    let (data, iv, tag, kind) = (field("data")?, field("iv")?, field("tag")?, field("type")?);
    if parts.next().is_some() {
        return Err(malformed("more parts than data, iv, tag and type"));
    }
    let decode = |name: &str, part: &str| {
        STANDARD
            .decode(part)
            .map_err(|_| CipherError::Malformed(format!("`{name}` is not base64")))
    };
    Ok(Encrypted {
        data: decode("data", data)?,
        iv: decode("iv", iv)?,
        tag: decode("tag", tag)?,
        kind: ValueType::parse(kind)
            .ok_or_else(|| CipherError::Malformed(format!("unknown type `{kind}`")))?,
    })
}

/// Decrypts one value with the file's data key; `aad` is the value's path as SOPS joins it
/// (`a:b:c:`). SOPS leaves an empty value empty, so does this.
pub fn decrypt(text: &str, key: &[u8; 32], aad: &str) -> Result<Plain, CipherError> {
    if text.is_empty() {
        return Ok(Plain {
            bytes: Vec::new(),
            kind: ValueType::Str,
        });
    }
    let value = parse(text)?;
    // SOPS writes 32-byte nonces; another length is a file SOPS did not write.
    let nonce = Array::<u8, U32>::try_from(value.iv.as_slice())
        .map_err(|_| CipherError::Malformed(format!("iv of {} bytes, not 32", value.iv.len())))?;
    let tag = Tag::try_from(value.tag.as_slice())
        .map_err(|_| CipherError::Malformed(format!("tag of {} bytes, not 16", value.tag.len())))?;
    let cipher = AesGcm::<Aes256, U32>::new(&(*key).into());
    let mut bytes = value.data;
    cipher
        .decrypt_inout_detached(&nonce, aad.as_bytes(), bytes.as_mut_slice().into(), &tag)
        .map_err(|_| CipherError::Unauthentic)?;
    Ok(Plain {
        bytes,
        kind: value.kind,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Encrypts as SOPS does (for unit tests only; the integration tests use the real sops).
    pub(crate) fn encrypt(plain: &[u8], kind: &str, key: &[u8; 32], aad: &str, iv: u8) -> String {
        let cipher = AesGcm::<Aes256, U32>::new(&(*key).into());
        let nonce = Array::<u8, U32>::from([iv; 32]);
        let mut data = plain.to_vec();
        let tag = cipher
            .encrypt_inout_detached(&nonce, aad.as_bytes(), data.as_mut_slice().into())
            .unwrap();
        format!(
            "ENC[AES256_GCM,data:{},iv:{},tag:{},type:{kind}]",
            STANDARD.encode(&data),
            STANDARD.encode(nonce),
            STANDARD.encode(tag)
        )
    }

    const KEY: [u8; 32] = [7; 32];

    #[test]
    fn round_trip_with_path() {
        let text = encrypt(b"hunter2", "str", &KEY, "data:password:", 1);
        let plain = decrypt(&text, &KEY, "data:password:").unwrap();
        assert_eq!(plain.bytes, b"hunter2");
        assert_eq!(plain.kind, ValueType::Str);
    }

    #[test]
    fn another_path_key_or_flipped_byte_is_unauthentic() {
        let text = encrypt(b"hunter2", "str", &KEY, "data:password:", 1);
        assert_eq!(
            decrypt(&text, &KEY, "data:other:"),
            Err(CipherError::Unauthentic)
        );
        assert_eq!(
            decrypt(&text, &[8; 32], "data:password:"),
            Err(CipherError::Unauthentic)
        );
        let mut value = parse(&text).unwrap();
        value.data[0] ^= 1;
        let flipped = format!(
            "ENC[AES256_GCM,data:{},iv:{},tag:{},type:str]",
            STANDARD.encode(&value.data),
            STANDARD.encode(&value.iv),
            STANDARD.encode(&value.tag)
        );
        assert_eq!(
            decrypt(&flipped, &KEY, "data:password:"),
            Err(CipherError::Unauthentic)
        );
    }

    #[test]
    fn empty_value_stays_empty() {
        assert_eq!(decrypt("", &KEY, "a:").unwrap().bytes, b"");
    }

    #[test]
    fn malformed_values_are_refused() {
        for text in [
            "hunter2",
            "ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==]",
            "ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:blob]",
            "ENC[AES256_GCM,data:!!,iv:AA==,tag:AA==,type:str]",
            "ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]",
            "ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str,x:y]",
        ] {
            assert!(
                matches!(decrypt(text, &KEY, "a:"), Err(CipherError::Malformed(_))),
                "{text}"
            );
        }
    }
}
