//! RFC 6901 JSON pointers over `serde_json::Value`: parsed strictly (a leading `/`, `~`
//! only as `~0` or `~1`, no empty segment: no Kubernetes field has an empty name), read,
//! set (creating missing objects on the way) and removed. Pure.

use serde_json::{Map, Value};

/// Why a text is not a JSON pointer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    #[error("it does not start with /")]
    NoLeadingSlash,
    #[error("segment {segment} has a ~ that is not ~0 or ~1")]
    BadEscape { segment: usize },
    #[error("segment {segment} is empty")]
    EmptySegment { segment: usize },
}

/// A parsed JSON pointer: its text and its unescaped segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pointer {
    text: String,
    tokens: Vec<String>,
}

impl Pointer {
    /// Parses `text`; the empty text is the whole document.
    pub fn parse(text: &str) -> Result<Self, PointerError> {
        if text.is_empty() {
            return Ok(Pointer {
                text: String::new(),
                tokens: Vec::new(),
            });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PointerError::NoLeadingSlash);
        };
        let tokens = rest
            .split('/')
            .enumerate()
            .map(|(segment, raw)| unescape(raw).ok_or(PointerError::BadEscape { segment }))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(segment) = tokens.iter().position(String::is_empty) {
            return Err(PointerError::EmptySegment { segment });
        }
        Ok(Pointer {
            text: text.to_string(),
            tokens,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// The value at the pointer, if there is one.
    pub fn get<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        self.tokens.iter().try_fold(value, |v, t| step(v, t))
    }

    /// Removes the value at the pointer (an array element is removed, the others move up);
    /// whether there was one.
    pub fn remove(&self, value: &mut Value) -> bool {
        let Some((last, parents)) = self.tokens.split_last() else {
            return false;
        };
        let Some(parent) = parents.iter().try_fold(value, |v, t| step_mut(v, t)) else {
            return false;
        };
        match parent {
            Value::Object(m) => m.remove(last).is_some(),
            Value::Array(a) => match index(last).filter(|i| *i < a.len()) {
                Some(i) => {
                    a.remove(i);
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    /// Sets the value at the pointer, creating missing objects on the way; an array element
    /// must exist. Whether it was set.
    pub fn set(&self, value: &mut Value, new: Value) -> bool {
        let Some((last, parents)) = self.tokens.split_last() else {
            return false;
        };
        let mut at = value;
        for t in parents {
            if let Value::Object(m) = at {
                at = m
                    .entry(t.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
            } else {
                match step_mut(at, t) {
                    Some(next) => at = next,
                    None => return false,
                }
            }
        }
        match at {
            Value::Object(m) => {
                m.insert(last.clone(), new);
                true
            }
            Value::Array(a) => match index(last).and_then(|i| a.get_mut(i)) {
                Some(slot) => {
                    *slot = new;
                    true
                }
                None => false,
            },
            _ => false,
        }
    }
}

impl std::fmt::Display for Pointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// An array index as RFC 6901 writes it: digits, no leading zero.
pub fn index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    match digits && (token == "0" || !token.starts_with('0')) {
        true => token.parse().ok(),
        false => None,
    }
}

fn step<'v>(v: &'v Value, token: &str) -> Option<&'v Value> {
    match v {
        Value::Object(m) => m.get(token),
        Value::Array(a) => index(token).and_then(|i| a.get(i)),
        _ => None,
    }
}

fn step_mut<'v>(v: &'v mut Value, token: &str) -> Option<&'v mut Value> {
    match v {
        Value::Object(m) => m.get_mut(token),
        Value::Array(a) => index(token).and_then(|i| a.get_mut(i)),
        _ => None,
    }
}

fn unescape(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '~' => match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            },
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(t: &str) -> Pointer {
        Pointer::parse(t).unwrap_or_else(|e| panic!("{t}: {e}"))
    }

    #[test]
    fn parses_and_unescapes() {
        assert_eq!(p("/spec/replicas").tokens(), ["spec", "replicas"]);
        assert_eq!(
            p("/metadata/annotations/example.com~1hash").tokens(),
            ["metadata", "annotations", "example.com/hash"]
        );
        assert_eq!(p("/a~0b~01").tokens(), ["a~b~1"]);
        assert!(p("").tokens().is_empty());
        assert_eq!(p("/x").to_string(), "/x");
    }

    #[test]
    fn refuses_malformed() {
        assert_eq!(
            Pointer::parse("spec/replicas"),
            Err(PointerError::NoLeadingSlash)
        );
        assert_eq!(
            Pointer::parse("/a/b~2"),
            Err(PointerError::BadEscape { segment: 1 })
        );
        assert_eq!(
            Pointer::parse("/a~"),
            Err(PointerError::BadEscape { segment: 0 })
        );
        assert_eq!(
            Pointer::parse("/"),
            Err(PointerError::EmptySegment { segment: 0 })
        );
        assert_eq!(
            Pointer::parse("/a//b"),
            Err(PointerError::EmptySegment { segment: 1 })
        );
    }

    #[test]
    fn array_indices() {
        assert_eq!(index("0"), Some(0));
        assert_eq!(index("12"), Some(12));
        for bad in ["01", "-1", "", "a", "1a"] {
            assert_eq!(index(bad), None, "{bad}");
        }
    }

    #[test]
    fn get_set_remove() {
        let mut v = json!({"spec": {"replicas": 2, "list": [{"a": 1}, {"a": 2}]}});
        assert_eq!(p("/spec/replicas").get(&v), Some(&json!(2)));
        assert_eq!(p("/spec/list/1/a").get(&v), Some(&json!(2)));
        assert_eq!(p("/spec/list/2/a").get(&v), None);
        assert_eq!(p("/spec/replicas/x").get(&v), None);
        assert!(p("/spec/list/0/a").set(&mut v, json!(5)));
        assert!(p("/spec/new/deep").set(&mut v, json!("x")));
        assert!(!p("/spec/list/9/a").set(&mut v, json!(1)));
        assert!(!p("/spec/replicas/x").set(&mut v, json!(1)));
        assert!(!p("").set(&mut v, json!(1)));
        assert_eq!(v["spec"]["list"][0]["a"], json!(5));
        assert_eq!(v["spec"]["new"]["deep"], json!("x"));
        assert!(p("/spec/list/0").remove(&mut v));
        assert_eq!(v["spec"]["list"], json!([{"a": 2}]));
        assert!(p("/spec/replicas").remove(&mut v));
        assert!(!p("/spec/replicas").remove(&mut v));
        assert!(!p("/spec/list/5").remove(&mut v));
        assert!(!p("/nothing/here").remove(&mut v));
        assert!(!p("").remove(&mut v));
    }
}
