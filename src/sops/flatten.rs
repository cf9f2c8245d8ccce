//! SOPS's flattened metadata keys (dotenv and INI files keep the metadata as `sops_…` entries:
//! `sops_age__list_0__map_recipient`), put back into a tree.

use std::collections::BTreeMap;

use super::tree::Node;

const MAP: &str = "__map_";
const LIST: &str = "__list_";

#[derive(Debug)]
enum Slot {
    Value(Node),
    Map(Vec<(String, Slot)>),
    List(BTreeMap<usize, Slot>),
}

#[derive(Debug, PartialEq)]
enum Token {
    Key(String),
    Index(usize),
}

/// Splits a flattened key into its steps; `None` when a list position is not a number.
fn tokenize(key: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut rest = key;
    let mut next_is_index = false;
    loop {
        let cut = [
            rest.find(MAP).map(|i| (i, MAP)),
            rest.find(LIST).map(|i| (i, LIST)),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|(i, _)| *i);
        let (part, after) = match cut {
            Some((i, sep)) => (&rest[..i], Some((sep, &rest[i + sep.len()..]))),
            None => (rest, None),
        };
        tokens.push(if next_is_index {
            Token::Index(part.parse().ok()?)
        } else {
            Token::Key(part.to_string())
        });
        match after {
            Some((sep, after)) => {
                next_is_index = sep == LIST;
                rest = after;
            }
            None => return Some(tokens),
        }
    }
}

/// Rebuilds the tree of flattened `entries` (keys without the `sops_` prefix). The error says
/// which key does not fit.
pub fn unflatten(entries: Vec<(String, Node)>) -> Result<Node, UnflattenError> {
    let mut root = Slot::Map(Vec::new());
    for (key, value) in entries {
        let Some(tokens) = tokenize(&key) else {
            return Err(UnflattenError {
                key,
                problem: "a list position is not a number".to_string(),
            });
        };
        if let Err(problem) = place(&mut root, &tokens, value) {
            return Err(UnflattenError {
                key,
                problem: problem.to_string(),
            });
        }
    }
    convert(root).map_err(|problem| UnflattenError {
        key: String::new(),
        problem,
    })
}

/// A flattened key that does not fit the tree the others make (`key` empty: the tree as a
/// whole), and why.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{problem}", if key.is_empty() { String::new() } else { format!("`{key}`: ") })]
pub struct UnflattenError {
    pub key: String,
    pub problem: String,
}

fn place(slot: &mut Slot, tokens: &[Token], value: Node) -> Result<(), &'static str> {
    let Some((first, rest)) = tokens.split_first() else {
        return match slot {
            Slot::Map(entries) if entries.is_empty() => {
                *slot = Slot::Value(value);
                Ok(())
            }
            _ => Err("given twice"),
        };
    };
    let child = match (slot, first) {
        (Slot::Map(entries), Token::Key(key)) => {
            if let Some(at) = entries.iter().position(|(k, _)| k == key) {
                &mut entries[at].1
            } else {
                entries.push((key.clone(), empty(rest)));
                &mut entries.last_mut().ok_or("internal")?.1
            }
        }
        (Slot::List(items), Token::Index(index)) => {
            items.entry(*index).or_insert_with(|| empty(rest))
        }
        _ => return Err("mixes a mapping, a list and a value"),
    };
    place(child, rest, value)
}

/// The empty slot for what `rest` will put in it.
fn empty(rest: &[Token]) -> Slot {
    match rest.first() {
        Some(Token::Index(_)) => Slot::List(BTreeMap::new()),
        _ => Slot::Map(Vec::new()),
    }
}

fn convert(slot: Slot) -> Result<Node, String> {
    Ok(match slot {
        Slot::Value(node) => node,
        Slot::Map(entries) => Node::Map(
            entries
                .into_iter()
                .map(|(k, v)| Ok((k, convert(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        Slot::List(items) => {
            if items.keys().enumerate().any(|(i, k)| i != *k) {
                return Err("a list has gaps".to_string());
            }
            Node::Seq(
                items
                    .into_values()
                    .map(convert)
                    .collect::<Result<_, String>>()?,
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Node {
        Node::Str(v.into())
    }

    #[test]
    fn rebuilds_lists_and_maps() {
        let node = unflatten(vec![
            ("age__list_0__map_recipient".into(), s("r0")),
            ("age__list_0__map_enc".into(), s("e0")),
            ("age__list_1__map_recipient".into(), s("r1")),
            ("mac".into(), s("m")),
        ])
        .unwrap();
        let age = node.get("age").unwrap();
        let Node::Seq(items) = age else {
            panic!("{age:?}")
        };
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].get("enc"), Some(&s("e0")));
        assert_eq!(items[1].get("recipient"), Some(&s("r1")));
        assert_eq!(node.get("mac"), Some(&s("m")));
    }

    #[test]
    fn refuses_gaps_duplicates_and_mixtures() {
        assert!(unflatten(vec![("a__list_1".into(), s("x"))]).is_err());
        assert!(unflatten(vec![("a".into(), s("x")), ("a".into(), s("y"))]).is_err());
        assert!(unflatten(vec![("a".into(), s("x")), ("a__map_b".into(), s("y"))]).is_err());
        assert!(unflatten(vec![("a__list_x".into(), s("x"))]).is_err());
    }
}
