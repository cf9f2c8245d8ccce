//! Age identities (the `AGE-SECRET-KEY-1…` lines of a `.agekey` entry or a `keys.txt`) and the
//! unwrapping of a file's data key, an armored age file per recipient in its metadata.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

use age::armor::ArmoredReader;
use age::x25519::Identity;
use zeroize::Zeroizing;

use super::error::{IdentityError, SopsError};
use super::metadata::Metadata;

/// Bound on the text of one source of identities.
pub const MAX_IDENTITY_TEXT: usize = 64 * 1024;

/// A set of age X25519 identities. Its `Debug` shows only the public recipients.
#[derive(Default, Clone)]
pub struct AgeKeys {
    identities: Vec<Identity>,
}

impl fmt::Debug for AgeKeys {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("AgeKeys")
            .field("recipients", &self.recipients())
            .finish()
    }
}

impl AgeKeys {
    pub fn new() -> AgeKeys {
        AgeKeys::default()
    }

    /// Adds the identities in `text` (one per line; empty lines and `#` comments skipped, as
    /// age-keygen writes them). `source_name` names the text in errors. Returns how many.
    pub fn add_text(&mut self, source_name: &str, text: &str) -> Result<usize, IdentityError> {
        if text.len() > MAX_IDENTITY_TEXT {
            return Err(IdentityError::TooLarge {
                source_name: source_name.to_string(),
                limit: MAX_IDENTITY_TEXT,
            });
        }
        let mut found = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let identity = Identity::from_str(line).map_err(|_| IdentityError::NotAnIdentity {
                source_name: source_name.to_string(),
                line: index + 1,
            })?;
            found.push(identity);
        }
        if found.is_empty() {
            return Err(IdentityError::Empty {
                source_name: source_name.to_string(),
            });
        }
        let count = found.len();
        self.identities.extend(found);
        Ok(count)
    }

    pub fn is_empty(&self) -> bool {
        self.identities.is_empty()
    }

    /// How many identities.
    pub fn len(&self) -> usize {
        self.identities.len()
    }

    /// The public recipients (`age1…`) of the identities.
    pub fn recipients(&self) -> Vec<String> {
        self.identities
            .iter()
            .map(|i| i.to_public().to_string())
            .collect()
    }
}

/// The file's 32-byte data key, unwrapped from the first age stanza one of `keys` opens.
/// Each identity is tried on each stanza, so both are bounded first: a file with more than
/// `limits.max_stanzas` stanzas (all its age entries together) is refused before any is tried;
/// keys beyond `limits.max_identities` are refused where they are read
/// (`decryption::check_identities`), and here too.
pub fn data_key(
    meta: &Metadata,
    keys: &AgeKeys,
    file: &str,
    limits: &super::Limits,
) -> Result<Zeroizing<[u8; 32]>, SopsError> {
    let stanzas: usize = meta.age.iter().map(|s| stanza_count(&s.enc)).sum();
    if stanzas > limits.max_stanzas {
        return Err(SopsError::TooManyStanzas {
            file: file.to_string(),
            count: stanzas,
            limit: limits.max_stanzas,
        });
    }
    if keys.len() > limits.max_identities {
        return Err(SopsError::DataKey {
            file: file.to_string(),
            cause: format!(
                "{} age identities, more than the {} the operator tries (--sops-max-age-identities)",
                keys.len(),
                limits.max_identities
            ),
        });
    }
    let mut failure = None;
    for stanza in &meta.age {
        match unwrap(&stanza.enc, keys) {
            Ok(key) => return Ok(key),
            Err(Unwrap::NoMatch) => {}
            Err(Unwrap::Failed(cause)) => failure = Some(cause),
        }
    }
    if let Some(cause) = failure {
        return Err(SopsError::DataKey {
            file: file.to_string(),
            cause,
        });
    }
    let mut recipients: Vec<String> = meta.age.iter().map(|s| s.recipient.clone()).collect();
    recipients.extend(meta.other_keys.iter().map(|k| format!("({k} keys)")));
    Err(SopsError::NoMatchingKey {
        file: file.to_string(),
        recipients,
    })
}

/// The recipient stanzas in the header of an armored age file (`-> ` lines before the
/// `---` MAC line, without the random `…-grease` stanzas some age writers add, which no
/// identity tries); an entry that is not an age file counts one (its unwrap fails alone).
fn stanza_count(enc: &str) -> usize {
    let mut header = Vec::new();
    // The header of a file SOPS wrote is a few hundred bytes; the whole armored text bounds it.
    let read = ArmoredReader::new(enc.as_bytes())
        .take(enc.len() as u64)
        .read_to_end(&mut header);
    if read.is_err() {
        return 1;
    }
    let count = header
        .split(|b| *b == b'\n')
        .take_while(|line| !line.starts_with(b"---"))
        .filter_map(|line| line.strip_prefix(b"-> "))
        .filter(|stanza| {
            let tag = stanza.split(|b| *b == b' ').next().unwrap_or_default();
            !tag.ends_with(b"-grease")
        })
        .count();
    count.max(1)
}

enum Unwrap {
    NoMatch,
    Failed(String),
}

fn unwrap(enc: &str, keys: &AgeKeys) -> Result<Zeroizing<[u8; 32]>, Unwrap> {
    let failed = |what: &str| Unwrap::Failed(what.to_string());
    let decryptor = age::Decryptor::new(ArmoredReader::new(enc.as_bytes()))
        .map_err(|e| Unwrap::Failed(format!("not an age file: {e}")))?;
    let identities = keys.identities.iter().map(|i| i as &dyn age::Identity);
    let reader = match decryptor.decrypt(identities) {
        Ok(reader) => reader,
        Err(age::DecryptError::NoMatchingKeys) => return Err(Unwrap::NoMatch),
        Err(e) => return Err(Unwrap::Failed(e.to_string())),
    };
    let mut bytes = Zeroizing::new(Vec::with_capacity(33));
    reader
        .take(33)
        .read_to_end(&mut bytes)
        .map_err(|_| failed("the wrapped data key does not authenticate"))?;
    let key: [u8; 32] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| failed("the data key is not 32 bytes"))?;
    Ok(Zeroizing::new(key))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::Limits;
    use super::*;
    use age::secrecy::ExposeSecret;
    use std::io::Write;

    /// Wraps `key` for `recipient` as SOPS does (armored age), for unit tests.
    pub(crate) fn wrap(key: &[u8; 32], recipient: &age::x25519::Recipient) -> String {
        wrap_for_all(key, std::slice::from_ref(recipient))
    }

    pub(crate) fn identity_text(identity: &Identity) -> String {
        format!(
            "# created: 2026-01-01\n# public key: {}\n{}\n",
            identity.to_public(),
            identity.to_string().expose_secret()
        )
    }

    #[test]
    fn reads_identities_and_skips_comments() {
        let id = Identity::generate();
        let mut keys = AgeKeys::new();
        assert_eq!(keys.add_text("k.agekey", &identity_text(&id)), Ok(1));
        assert_eq!(keys.recipients(), vec![id.to_public().to_string()]);
        assert!(!format!("{keys:?}").contains("AGE-SECRET-KEY"));
    }

    #[test]
    fn bad_identity_text_is_refused_without_echoing_it() {
        let mut keys = AgeKeys::new();
        let err = keys
            .add_text("k.agekey", "# c\nAGE-SECRET-KEY-1NOPE\n")
            .unwrap_err();
        assert_eq!(
            err,
            IdentityError::NotAnIdentity {
                source_name: "k.agekey".into(),
                line: 2
            }
        );
        assert!(!err.to_string().contains("NOPE"));
        assert!(matches!(
            keys.add_text("e", "# only\n"),
            Err(IdentityError::Empty { .. })
        ));
        let big = "#".repeat(MAX_IDENTITY_TEXT + 1);
        assert!(matches!(
            keys.add_text("b", &big),
            Err(IdentityError::TooLarge { .. })
        ));
    }

    fn meta_for(enc: String) -> Metadata {
        Metadata {
            age: vec![super::super::metadata::AgeStanza {
                recipient: "age1r".into(),
                enc,
            }],
            other_keys: vec!["pgp".into()],
            lastmodified: String::new(),
            mac: String::new(),
            rule: Default::default(),
            mac_only_encrypted: false,
        }
    }

    /// `key` wrapped in one armored age file for every recipient of `to` (one stanza each).
    fn wrap_for_all(key: &[u8; 32], to: &[age::x25519::Recipient]) -> String {
        let recipients = to.iter().map(|r| r as &dyn age::Recipient);
        let encryptor = age::Encryptor::with_recipients(recipients).unwrap();
        let mut out = Vec::new();
        let armor =
            age::armor::ArmoredWriter::wrap_output(&mut out, age::armor::Format::AsciiArmor)
                .unwrap();
        let mut writer = encryptor.wrap_output(armor).unwrap();
        writer.write_all(key).unwrap();
        writer.finish().unwrap().finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn stanzas_and_identities_are_bounded_before_any_is_tried() {
        let id = Identity::generate();
        let mut keys = AgeKeys::new();
        keys.add_text("k", &identity_text(&id)).unwrap();
        let others: Vec<_> = (0..4).map(|_| Identity::generate().to_public()).collect();
        // One age file holding 5 stanzas (ours last) counts 5.
        let mut to = others.clone();
        to.push(id.to_public());
        let enc = wrap_for_all(&[3; 32], &to);
        assert_eq!(stanza_count(&enc), 5);
        assert_eq!(stanza_count("not an age file"), 1);
        let limits = |max_stanzas, max_identities| Limits {
            max_stanzas,
            max_identities,
            ..Limits::default()
        };
        let meta = meta_for(enc.clone());
        assert_eq!(
            *data_key(&meta, &keys, "f", &limits(5, 1)).unwrap(),
            [3; 32]
        );
        assert_eq!(
            data_key(&meta, &keys, "f", &limits(4, 1)).map(|_| ()),
            Err(SopsError::TooManyStanzas {
                file: "f".into(),
                count: 5,
                limit: 4
            })
        );
        // Stanzas of every entry count together.
        let mut two = meta_for(enc);
        two.age.push(two.age[0].clone());
        let err = data_key(&two, &keys, "f", &limits(9, 1)).map(|_| ());
        assert!(
            matches!(err, Err(SopsError::TooManyStanzas { count: 10, .. })),
            "{err:?}"
        );
        let msg = SopsError::TooManyStanzas {
            file: "f".into(),
            count: 10,
            limit: 9,
        }
        .to_string();
        assert!(msg.contains("--sops-max-age-recipients"), "{msg}");
        // More identities than tried: refused too.
        keys.add_text("k2", &identity_text(&Identity::generate()))
            .unwrap();
        let err = data_key(
            &meta_for(wrap(&[3; 32], &id.to_public())),
            &keys,
            "f",
            &limits(5, 1),
        );
        assert!(
            matches!(&err, Err(SopsError::DataKey { cause, .. }) if cause.contains("--sops-max-age-identities")),
            "{:?}",
            err.map(|_| ())
        );
    }

    #[test]
    fn unwraps_the_data_key_or_names_the_recipients() {
        let id = Identity::generate();
        let meta = meta_for(wrap(&[9; 32], &id.to_public()));
        let mut keys = AgeKeys::new();
        keys.add_text("k", &identity_text(&id)).unwrap();
        assert_eq!(
            *data_key(&meta, &keys, "f", &Limits::default()).unwrap(),
            [9; 32]
        );
        let mut other = AgeKeys::new();
        other
            .add_text("k", &identity_text(&Identity::generate()))
            .unwrap();
        match data_key(&meta, &other, "f", &Limits::default()) {
            Err(SopsError::NoMatchingKey { recipients, .. }) => {
                assert_eq!(
                    recipients,
                    vec!["age1r".to_string(), "(pgp keys)".to_string()]
                )
            }
            other => panic!("{other:?}"),
        }
        let garbage = meta_for("-----BEGIN AGE ENCRYPTED FILE-----\nxx\n".into());
        assert!(matches!(
            data_key(&garbage, &keys, "f", &Limits::default()),
            Err(SopsError::DataKey { .. })
        ));
    }
}
