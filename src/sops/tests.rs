//! Whole-file unit tests on files made here (the integration tests in tests/sops.rs use files
//! encrypted by the real `sops`).

use super::cipher::tests::encrypt;
use super::keys::tests::{identity_text, wrap};
use super::mac::Mac;
use super::*;

const DATA_KEY: [u8; 32] = [5; 32];
const STAMP: &str = "2026-11-25T16:00:00Z";

/// A YAML SOPS file with `password` encrypted and `name_unencrypted` in the clear.
fn file(recipient: &age::x25519::Recipient, name: &str) -> String {
    let mut mac = Mac::new(false);
    mac.add(b"hunter2");
    mac.add(name.as_bytes());
    let mac = encrypt(mac.finish().as_bytes(), "str", &DATA_KEY, STAMP, 9);
    let enc = wrap(&DATA_KEY, recipient).replace('\n', "\n            ");
    format!(
        "password: {}\nname_unencrypted: {name}\nsops:\n    age:\n        - recipient: {recipient}\n          enc: |\n            {enc}\n    lastmodified: \"{STAMP}\"\n    mac: {mac}\n",
        encrypt(b"hunter2", "str", &DATA_KEY, "password:", 1),
    )
}

fn keys_for(identity: &age::x25519::Identity) -> AgeKeys {
    let mut keys = AgeKeys::new();
    keys.add_text("k.agekey", &identity_text(identity)).unwrap();
    keys
}

#[test]
fn decrypts_a_yaml_file_and_checks_its_mac() {
    let id = age::x25519::Identity::generate();
    let text = file(&id.to_public(), "web");
    assert!(carries_metadata(text.as_bytes(), Format::Yaml));
    let out = decrypt(
        "s.yaml",
        text.as_bytes(),
        Format::Yaml,
        &keys_for(&id),
        &Limits::default(),
    );
    assert_eq!(
        out.unwrap(),
        b"{\"password\":\"hunter2\",\"name_unencrypted\":\"web\"}\n"
    );
    let changed = text.replace("name_unencrypted: web", "name_unencrypted: wet");
    let out = decrypt(
        "s.yaml",
        changed.as_bytes(),
        Format::Yaml,
        &keys_for(&id),
        &Limits::default(),
    );
    assert_eq!(
        out,
        Err(SopsError::MacMismatch {
            file: "s.yaml".into()
        })
    );
}

#[test]
fn another_key_is_no_matching_key() {
    let id = age::x25519::Identity::generate();
    let text = file(&id.to_public(), "web");
    let other = keys_for(&age::x25519::Identity::generate());
    let out = decrypt(
        "s.yaml",
        text.as_bytes(),
        Format::Yaml,
        &other,
        &Limits::default(),
    );
    assert!(
        matches!(out, Err(SopsError::NoMatchingKey { ref recipients, .. }) if recipients == &[id.to_public().to_string()])
    );
}

#[test]
fn bounds_metadata_and_formats() {
    let keys = AgeKeys::new();
    let small = Limits {
        max_bytes: 4,
        ..Limits::default()
    };
    assert!(matches!(
        decrypt("f", b"a: bc", Format::Yaml, &keys, &small),
        Err(SopsError::TooLarge { .. })
    ));
    let l = Limits::default();
    assert!(matches!(
        decrypt("f", b"a: b\n", Format::Yaml, &keys, &l),
        Err(SopsError::NoMetadata { .. })
    ));
    assert!(matches!(
        decrypt("f", b"A=b\n", Format::Dotenv, &keys, &l),
        Err(SopsError::NoMetadata { .. })
    ));
    assert!(matches!(
        decrypt("f", b"[a]\n", Format::Ini, &keys, &l),
        Err(SopsError::Unsupported { .. })
    ));
    let deep = format!(
        "{{\"sops\":{{}},\"a\":{}1{}}}",
        "[".repeat(70),
        "]".repeat(70)
    );
    assert!(matches!(
        decrypt("f", deep.as_bytes(), Format::Json, &keys, &l),
        Err(SopsError::TooDeep { .. })
    ));
}

#[test]
fn format_follows_the_file_name_as_sops_does() {
    assert_eq!(Format::from_path("a/b.yaml"), Format::Yaml);
    assert_eq!(Format::from_path("b.yml"), Format::Yaml);
    assert_eq!(Format::from_path("b.json"), Format::Json);
    assert_eq!(Format::from_path("x/.env"), Format::Dotenv);
    assert_eq!(Format::from_path("b.env"), Format::Dotenv);
    assert_eq!(Format::from_path("b.ini"), Format::Ini);
    assert_eq!(Format::from_path("b.pem"), Format::Binary);
    assert_eq!(Format::from_path("yaml"), Format::Binary);
    assert!(carries_metadata(b"A=1\nsops_mac=x\n", Format::Dotenv));
    assert!(!carries_metadata(b"sops: 1\n", Format::Yaml));
    assert!(carries_metadata(
        b"{\"data\":\"x\",\"sops\":{\"mac\":\"m\"}}",
        Format::Binary
    ));
}
