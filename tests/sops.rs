//! The SOPS library (src/sops) against files encrypted at test time by the real `sops` with a
//! key from the real `age-keygen`: each decrypts to what `sops decrypt` prints, and a tampered
//! value, a changed unencrypted field and a file for another key are refused with typed errors.

mod support;

use support::sops as sops_tools;

use applyset_operator::sops::{self, AgeKeys, Format, Limits, SopsError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use sops_tools::{AgeKey, age_keygen, sops_decrypt, sops_encrypt};

struct Fixture {
    dir: tempfile::TempDir,
    key: AgeKey,
    keys: AgeKeys,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = age_keygen(dir.path(), "key.txt");
    let mut keys = AgeKeys::new();
    keys.add_text("identity.agekey", &key.text)
        .expect("age-keygen's key reads");
    Fixture { dir, key, keys }
}

impl Fixture {
    fn encrypt(&self, name: &str, plain: &str, args: &[&str]) -> Vec<u8> {
        sops_encrypt(
            self.dir.path(),
            name,
            plain.as_bytes(),
            &self.key.recipient,
            args,
        )
    }
    fn ours(&self, name: &str, encrypted: &[u8]) -> Result<Vec<u8>, SopsError> {
        sops::decrypt(
            name,
            encrypted,
            Format::from_path(name),
            &self.keys,
            &Limits::default(),
        )
    }
    fn theirs(&self, name: &str, encrypted: &[u8]) -> Vec<u8> {
        sops_decrypt(self.dir.path(), name, encrypted, &self.key.text)
    }
}

/// YAML text (one or more documents) as JSON values, to compare objects rather than text.
fn yaml_values(bytes: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(bytes).expect("utf-8");
    serde_saphyr::from_str_multiple::<Value, Vec<Value>>(text).expect("yaml")
}

const SECRET: &str = "apiVersion: v1
kind: Secret
metadata:
  name: db
  labels: {app: web, tier: '3'}
  annotations: {replicas: 3, ratio: 1.5, enabled: true}
type: Opaque
stringData:
  password: hunter2
  port: 5432
  multi: |
    line one
    line two
  list: [a, 1, true, 2.5]
  empty: ''
data:
  token: aHVudGVyMg==
";

#[test]
fn yaml_secret_with_default_rule_decrypts_as_sops_does() {
    let f = fixture();
    let enc = f.encrypt("secret.yaml", SECRET, &[]);
    assert!(sops::carries_metadata(&enc, Format::Yaml));
    assert!(!String::from_utf8_lossy(&enc).contains("hunter2"));
    let ours = f.ours("secret.yaml", &enc).expect("decrypts");
    assert_eq!(
        yaml_values(&ours),
        yaml_values(&f.theirs("secret.yaml", &enc))
    );
    assert_eq!(yaml_values(&ours)[0]["stringData"]["password"], "hunter2");
}

#[test]
fn configmap_with_encrypted_regex_and_multi_documents() {
    let f = fixture();
    let plain = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, labels: {{n: '1'}}}}\ndata:\n  url: https://db.internal\n  pool: '10'\n---\n{SECRET}"
    );
    let args = ["--encrypted-regex", "^(data|stringData)$"];
    let enc = f.encrypt("two.yaml", &plain, &args);
    let text = String::from_utf8_lossy(&enc);
    assert!(
        text.contains("name: cfg") && !text.contains("db.internal"),
        "{text}"
    );
    let ours = f.ours("two.yaml", &enc).expect("decrypts");
    let values = yaml_values(&ours);
    assert_eq!(values, yaml_values(&f.theirs("two.yaml", &enc)));
    assert_eq!(values.len(), 2);
    assert_eq!(values[0]["data"]["url"], "https://db.internal");
}

#[test]
fn every_path_rule_and_mac_only_encrypted() {
    let f = fixture();
    let plain = "a_secret: x\nb: {c_secret: y, d: 1}\ne_unencrypted: 2\nf: [g, 3]\n";
    for args in [
        &["--encrypted-suffix", "_secret"][..],
        &["--unencrypted-suffix", "_unencrypted"],
        &["--unencrypted-regex", "^(b|e_.*)$"],
        &["--encrypted-regex", "^f$"],
    ] {
        let enc = f.encrypt("rules.yaml", plain, args);
        let ours = f
            .ours("rules.yaml", &enc)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(
            yaml_values(&ours),
            yaml_values(&f.theirs("rules.yaml", &enc)),
            "{args:?}"
        );
    }
    // mac_only_encrypted is set in a configuration file only.
    let config = f.dir.path().join(".sops.yaml");
    std::fs::write(
        &config,
        "creation_rules:\n  - encrypted_regex: ^f$\n    mac_only_encrypted: true\n",
    )
    .expect("write .sops.yaml");
    let enc = f.encrypt("rules.yaml", plain, &[]);
    std::fs::remove_file(&config).expect("remove .sops.yaml");
    assert!(String::from_utf8_lossy(&enc).contains("mac_only_encrypted: true"));
    let ours = f.ours("rules.yaml", &enc).expect("decrypts");
    assert_eq!(
        yaml_values(&ours),
        yaml_values(&f.theirs("rules.yaml", &enc))
    );
    // With mac_only_encrypted, an unencrypted field is outside the MAC; without, it is not.
    let text = String::from_utf8(enc).expect("utf-8");
    assert!(
        f.ours(
            "rules.yaml",
            text.replacen("a_secret: x", "a_secret: z", 1).as_bytes()
        )
        .is_ok()
    );
}

#[test]
fn json_secret_decrypts_as_sops_does() {
    let f = fixture();
    let plain = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"j"},
        "stringData":{"password":"hunter2","n":12,"f":0.25,"big":12345678901234567890,"b":false,"nested":[{"x":"y"}]}}"#;
    let enc = f.encrypt("secret.json", plain, &[]);
    let ours = f.ours("secret.json", &enc).expect("decrypts");
    let ours: Value = serde_json::from_slice(&ours).expect("json");
    let theirs: Value = serde_json::from_slice(&f.theirs("secret.json", &enc)).expect("json");
    assert_eq!(ours, theirs);
    assert_eq!(ours["stringData"]["password"], "hunter2");
}

#[test]
fn dotenv_and_binary_files_decrypt_byte_for_byte() {
    let f = fixture();
    let env = "USER=admin\nPASSWORD=hunter2=x\n# a comment\nMULTI=a\\nb\nEMPTY=\n";
    let enc = f.encrypt("db.env", env, &[]);
    assert!(sops::carries_metadata(&enc, Format::Dotenv));
    let ours = f.ours("db.env", &enc).expect("decrypts");
    let theirs = f.theirs("db.env", &enc);
    // sops prints the comments too; everything else is the same, line for line.
    let without_comments: Vec<&[u8]> = theirs
        .split(|b| *b == b'\n')
        .filter(|l| !l.starts_with(b"#"))
        .collect();
    assert_eq!(
        ours.split(|b| *b == b'\n').collect::<Vec<_>>(),
        without_comments
    );

    let binary: Vec<u8> = (0..=255u8).chain([0xff, 0xfe, 0, 1]).collect();
    let path = f.dir.path().join("blob.bin");
    let enc = sops_tools::sops_encrypt(f.dir.path(), "blob.bin", &binary, &f.key.recipient, &[]);
    assert!(sops::carries_metadata(&enc, Format::Binary));
    assert_eq!(f.ours("blob.bin", &enc).expect("decrypts"), binary);
    assert_eq!(f.theirs("blob.bin", &enc), binary);
    drop(path);
}

/// The first `data:` part of an `ENC[…]` value in `text`, its first byte flipped.
fn flip_first_value(text: &str) -> String {
    let start = text
        .find("ENC[AES256_GCM,data:")
        .expect("an encrypted value")
        + "ENC[AES256_GCM,data:".len();
    let end = start + text[start..].find(',').expect("the data part ends");
    let mut data = STANDARD.decode(&text[start..end]).expect("base64");
    data[0] ^= 0x01;
    format!(
        "{}{}{}",
        &text[..start],
        STANDARD.encode(&data),
        &text[end..]
    )
}

#[test]
fn a_flipped_byte_in_an_encrypted_value_is_refused() {
    let f = fixture();
    let enc = f.encrypt(
        "secret.yaml",
        SECRET,
        &["--encrypted-regex", "^stringData$"],
    );
    let tampered = flip_first_value(&String::from_utf8(enc).expect("utf-8"));
    match f.ours("secret.yaml", tampered.as_bytes()) {
        Err(SopsError::TamperedValue { file, path }) => {
            assert_eq!(file, "secret.yaml");
            assert_eq!(path, "stringData.password");
        }
        other => panic!("expected TamperedValue, got {other:?}"),
    }
    let env = f.encrypt("db.env", "A=hunter2\n", &[]);
    let tampered = flip_first_value(&String::from_utf8(env).expect("utf-8"));
    assert!(matches!(
        f.ours("db.env", tampered.as_bytes()),
        Err(SopsError::TamperedValue { .. })
    ));
}

#[test]
fn a_changed_unencrypted_field_fails_the_mac() {
    let f = fixture();
    let enc = f.encrypt(
        "secret.yaml",
        SECRET,
        &["--encrypted-regex", "^(data|stringData)$"],
    );
    let text = String::from_utf8(enc).expect("utf-8");
    for (from, to) in [
        ("name: db", "name: dc"),
        ("app: web", "app: wet"),
        ("replicas: 3", "replicas: 4"),
    ] {
        assert!(text.contains(from), "{from} in {text}");
        let changed = text.replacen(from, to, 1);
        let err = f.ours("secret.yaml", changed.as_bytes()).expect_err(from);
        assert_eq!(
            err,
            SopsError::MacMismatch {
                file: "secret.yaml".into()
            },
            "{from}"
        );
        assert!(err.to_string().contains("secret.yaml"));
    }
    // A value moved under another key fails its own tag (the path is authenticated).
    let json = f.encrypt("s.json", r#"{"a":"one","b":"two"}"#, &[]);
    let text = String::from_utf8(json).expect("utf-8");
    let swapped = text.replacen("\"a\":", "\"c\":", 1);
    assert!(matches!(
        f.ours("s.json", swapped.as_bytes()),
        Err(SopsError::TamperedValue { .. })
    ));
}

#[test]
fn a_file_for_another_key_is_refused_naming_its_recipients() {
    let f = fixture();
    let other = age_keygen(f.dir.path(), "other.txt");
    let enc = sops_encrypt(
        f.dir.path(),
        "secret.yaml",
        SECRET.as_bytes(),
        &other.recipient,
        &[],
    );
    match f.ours("secret.yaml", &enc) {
        Err(e @ SopsError::NoMatchingKey { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("secret.yaml") && message.contains(&other.recipient),
                "{message}"
            );
        }
        other => panic!("expected NoMatchingKey, got {other:?}"),
    }
}

#[test]
fn errors_never_carry_plaintext() {
    let f = fixture();
    let enc = f.encrypt("secret.yaml", SECRET, &[]);
    let text = String::from_utf8(enc).expect("utf-8");
    let cases = [
        flip_first_value(&text),
        text.replacen("kind: ", "kind: X", 1),
        text.replacen(
            "mac: ENC[AES256_GCM,data:",
            "mac: ENC[AES256_GCM,data:AA",
            1,
        ),
    ];
    for case in cases {
        let err = f.ours("secret.yaml", case.as_bytes()).expect_err("refused");
        let shown = format!("{err} {err:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("5432"),
            "{shown}"
        );
    }
}

/// The cost of decrypting one Secret (printed, not asserted: a test that times would flake).
#[test]
fn cost_of_one_secret_is_printed() {
    let f = fixture();
    let enc = f.encrypt(
        "secret.yaml",
        SECRET,
        &["--encrypted-regex", "^(data|stringData)$"],
    );
    let rounds = 50;
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        f.ours("secret.yaml", &enc).expect("decrypts");
    }
    eprintln!(
        "sops: one Secret ({} bytes) decrypted in {:?}",
        enc.len(),
        start.elapsed() / rounds
    );
}
