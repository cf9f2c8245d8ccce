//! Kubernetes label selectors in their text form (`app=web,tier in (a,b),!canary,x>3`), as
//! apimachinery's `labels.Parse` reads them: what a drift-ignore rule's `labelSelector` and
//! `annotationSelector` say (Flux parses both with it; an annotation selector is therefore
//! bound by the label syntax too). Pure.
//!
//! Grammar: requirements separated by `,`; each is `key`, `!key`, `key=value`,
//! `key==value`, `key!=value`, `key in (v1,v2)`, `key notin (v1,v2)`, `key>n`, `key<n`.
//! Keys are qualified names (`prefix/name`), values label values (at most 63 characters,
//! alphanumeric at both ends; may be empty). An empty text selects everything.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;

/// Why a selector text does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("expected {expected} at {found}")]
    Unexpected {
        expected: &'static str,
        found: String,
    },
    #[error(
        "{key:?} is not a qualified name (an optional DNS subdomain and /, then at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends)"
    )]
    Key { key: String },
    #[error(
        "{value:?} is not a label value (at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends)"
    )]
    Value { value: String },
    #[error("{value:?} after {op} is not an integer")]
    NotInteger { op: &'static str, value: String },
    #[error("the values of {op} cannot be empty")]
    EmptySet { op: &'static str },
}

/// One requirement on a key.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    DoesNotExist(String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Greater(String, i64),
    Less(String, i64),
}

/// A parsed selector: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    /// Parses a selector's text (see the module's grammar).
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let tokens = lex(text);
        let mut p = Parser { tokens, at: 0 };
        let mut requirements = Vec::new();
        if p.peek().is_none() {
            return Ok(Selector(requirements));
        }
        loop {
            requirements.push(p.requirement()?);
            match p.next() {
                None => return Ok(Selector(requirements)),
                Some(Tok::Comma) => {}
                Some(t) => return Err(unexpected("',' or the end", Some(&t))),
            }
        }
    }

    /// Whether `set` (labels or annotations) satisfies every requirement.
    pub fn matches(&self, set: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => set.contains_key(k),
            Requirement::DoesNotExist(k) => !set.contains_key(k),
            Requirement::In(k, vs) => set.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => set.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Greater(k, n) => number(set.get(k)).is_some_and(|v| v > *n),
            Requirement::Less(k, n) => number(set.get(k)).is_some_and(|v| v < *n),
        })
    }
}

fn number(v: Option<&String>) -> Option<i64> {
    v.and_then(|v| v.parse().ok())
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Not,
    Eq,
    NotEq,
    In,
    NotIn,
    Open,
    Close,
    Comma,
    Greater,
    Less,
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "{s:?}"),
            Tok::Not => f.write_str("'!'"),
            Tok::Eq => f.write_str("'='"),
            Tok::NotEq => f.write_str("'!='"),
            Tok::In => f.write_str("'in'"),
            Tok::NotIn => f.write_str("'notin'"),
            Tok::Open => f.write_str("'('"),
            Tok::Close => f.write_str("')'"),
            Tok::Comma => f.write_str("','"),
            Tok::Greater => f.write_str("'>'"),
            Tok::Less => f.write_str("'<'"),
        }
    }
}

const SPECIAL: &[char] = &['!', '=', '(', ')', ',', '>', '<'];

/// The tokens of `text`, as apimachinery's lexer splits it (`in` and `notin` are keywords).
fn lex(text: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if SPECIAL.contains(&c) {
            chars.next();
            let next_eq = chars.peek() == Some(&'=');
            let tok = match c {
                '!' if next_eq => Tok::NotEq,
                '=' if next_eq => Tok::Eq,
                '!' => Tok::Not,
                '=' => Tok::Eq,
                '(' => Tok::Open,
                ')' => Tok::Close,
                ',' => Tok::Comma,
                '>' => Tok::Greater,
                _ => Tok::Less,
            };
            if matches!(tok, Tok::NotEq) || (c == '=' && next_eq) {
                chars.next();
            }
            out.push(tok);
            continue;
        }
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || SPECIAL.contains(&c) {
                break;
            }
            word.push(c);
            chars.next();
        }
        out.push(match word.as_str() {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            _ => Tok::Ident(word),
        });
    }
    out
}

struct Parser {
    tokens: Vec<Tok>,
    at: usize,
}

fn unexpected(expected: &'static str, found: Option<&Tok>) -> SelectorError {
    SelectorError::Unexpected {
        expected,
        found: found.map_or_else(|| "the end".to_string(), Tok::to_string),
    }
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        match self.next() {
            Some(Tok::Ident(k)) => checked_key(k),
            t => Err(unexpected("a key", t.as_ref())),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.peek() == Some(&Tok::Not) {
            self.next();
            return Ok(Requirement::DoesNotExist(self.key()?));
        }
        let key = self.key()?;
        match self.peek() {
            None | Some(Tok::Comma) => return Ok(Requirement::Exists(key)),
            _ => {}
        }
        match self.next() {
            Some(Tok::Eq) => Ok(Requirement::In(key, BTreeSet::from([self.value()?]))),
            Some(Tok::NotEq) => Ok(Requirement::NotIn(key, BTreeSet::from([self.value()?]))),
            Some(Tok::In) => Ok(Requirement::In(key, self.set("in")?)),
            Some(Tok::NotIn) => Ok(Requirement::NotIn(key, self.set("notin")?)),
            Some(Tok::Greater) => Ok(Requirement::Greater(key, self.integer(">")?)),
            Some(Tok::Less) => Ok(Requirement::Less(key, self.integer("<")?)),
            t => Err(unexpected("an operator", t.as_ref())),
        }
    }

    /// One value after `=`, `==` or `!=`; empty when the requirement ends there.
    fn value(&mut self) -> Result<String, SelectorError> {
        match self.peek() {
            None | Some(Tok::Comma) => Ok(String::new()),
            Some(Tok::Ident(_)) => match self.next() {
                Some(Tok::Ident(v)) => checked_value(v),
                t => Err(unexpected("a value", t.as_ref())),
            },
            t => Err(unexpected("a value", t)),
        }
    }

    fn integer(&mut self, op: &'static str) -> Result<i64, SelectorError> {
        match self.next() {
            Some(Tok::Ident(v)) => v
                .parse()
                .map_err(|_| SelectorError::NotInteger { op, value: v }),
            t => Err(unexpected("an integer", t.as_ref())),
        }
    }

    /// `( v1, v2 )`: values may be empty; the set may not.
    fn set(&mut self, op: &'static str) -> Result<BTreeSet<String>, SelectorError> {
        match self.next() {
            Some(Tok::Open) => {}
            t => return Err(unexpected("'('", t.as_ref())),
        }
        let mut values = BTreeSet::new();
        let mut expect_value = true;
        loop {
            match self.next() {
                Some(Tok::Ident(v)) if expect_value => {
                    values.insert(checked_value(v)?);
                    expect_value = false;
                }
                Some(Tok::Comma) => {
                    if expect_value {
                        values.insert(String::new());
                    }
                    expect_value = true;
                }
                Some(Tok::Close) => {
                    if expect_value && !values.is_empty() {
                        values.insert(String::new());
                    }
                    break;
                }
                t => return Err(unexpected("a value, ',' or ')'", t.as_ref())),
            }
        }
        match values.is_empty() {
            true => Err(SelectorError::EmptySet { op }),
            false => Ok(values),
        }
    }
}

static NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)$").expect("a valid pattern")
});

static SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")
        .expect("a valid pattern")
});

fn checked_key(key: String) -> Result<String, SelectorError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key.as_str()),
    };
    let prefix_ok = prefix.is_none_or(|p| p.len() <= 253 && SUBDOMAIN.is_match(p));
    match prefix_ok && name.len() <= 63 && NAME.is_match(name) {
        true => Ok(key),
        false => Err(SelectorError::Key { key }),
    }
}

fn checked_value(value: String) -> Result<String, SelectorError> {
    match value.is_empty() || (value.len() <= 63 && NAME.is_match(&value)) {
        true => Ok(value),
        false => Err(SelectorError::Value { value }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(text: &str) -> Selector {
        Selector::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    #[test]
    fn empty_selects_everything() {
        assert!(sel("").matches(&set(&[])));
        assert!(sel("  ").matches(&set(&[("a", "b")])));
    }

    #[test]
    fn equality_and_inequality() {
        for text in ["app=web", "app==web", " app = web "] {
            assert!(sel(text).matches(&set(&[("app", "web")])), "{text}");
            assert!(!sel(text).matches(&set(&[("app", "db")])), "{text}");
            assert!(!sel(text).matches(&set(&[])), "{text}");
        }
        let ne = sel("app!=web");
        assert!(!ne.matches(&set(&[("app", "web")])));
        assert!(ne.matches(&set(&[("app", "db")])));
        assert!(ne.matches(&set(&[])), "an absent key is not equal");
        let empty = sel("app=");
        assert!(empty.matches(&set(&[("app", "")])));
        assert!(!empty.matches(&set(&[("app", "x")])));
    }

    #[test]
    fn set_based() {
        let s = sel("tier in (a, b),env notin (prod)");
        assert!(s.matches(&set(&[("tier", "a"), ("env", "dev")])));
        assert!(s.matches(&set(&[("tier", "b")])));
        assert!(!s.matches(&set(&[("tier", "c")])));
        assert!(!s.matches(&set(&[("tier", "a"), ("env", "prod")])));
        assert!(!s.matches(&set(&[])));
        assert!(sel("x in (a,)").matches(&set(&[("x", "")])));
    }

    #[test]
    fn existence() {
        let s = sel("example.com/owned,!canary");
        assert!(s.matches(&set(&[("example.com/owned", "")])));
        assert!(!s.matches(&set(&[("example.com/owned", "x"), ("canary", "1")])));
        assert!(!s.matches(&set(&[])));
    }

    #[test]
    fn numeric_comparisons() {
        let s = sel("gen>3,size<10");
        assert!(s.matches(&set(&[("gen", "4"), ("size", "9")])));
        assert!(!s.matches(&set(&[("gen", "3"), ("size", "9")])));
        assert!(!s.matches(&set(&[("gen", "x"), ("size", "9")])));
        assert!(!s.matches(&set(&[("size", "9")])));
    }

    #[test]
    fn errors_are_typed() {
        let err = |t: &str| Selector::parse(t).expect_err(t);
        assert!(matches!(
            err("a in ()"),
            SelectorError::EmptySet { op: "in" }
        ));
        assert!(matches!(err("a in (b"), SelectorError::Unexpected { .. }));
        assert!(matches!(err("a b"), SelectorError::Unexpected { .. }));
        assert!(matches!(err("a=b,"), SelectorError::Unexpected { .. }));
        assert!(matches!(err(",a"), SelectorError::Unexpected { .. }));
        assert!(matches!(
            err("a>b"),
            SelectorError::NotInteger { op: ">", .. }
        ));
        assert!(matches!(err("-a=b"), SelectorError::Key { .. }));
        assert!(matches!(err("Bad_Prefix/a=b"), SelectorError::Key { .. }));
        assert!(matches!(err("a=b c"), SelectorError::Unexpected { .. }));
        assert!(matches!(err("a=-b"), SelectorError::Value { .. }));
        let long = "x".repeat(64);
        assert!(matches!(
            err(&format!("a={long}")),
            SelectorError::Value { .. }
        ));
        assert!(matches!(
            err(&format!("{long}=b")),
            SelectorError::Key { .. }
        ));
        assert!(matches!(err("!"), SelectorError::Unexpected { .. }));
        assert!(matches!(err("a=(b)"), SelectorError::Unexpected { .. }));
        let msg = err("a b").to_string();
        assert!(
            msg.contains("an operator") && msg.contains("\"b\""),
            "{msg}"
        );
    }
}
