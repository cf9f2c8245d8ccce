//! The content cache of the sources: parsed manifests by source identity, kept while the
//! source's revision is unchanged, bounded by a number of entries and by the estimated memory
//! of the manifests ([`estimate_bytes`]); the least recently used entries go first. Content
//! larger than the whole byte budget is never cached.

use std::{collections::HashMap, sync::Arc, time::Instant};

use parking_lot::Mutex;

use super::{Fetched, directory, memory};
use crate::manifest::Manifest;

/// A cached source content.
struct Entry {
    revision: String,
    manifests: Arc<Vec<Manifest>>,
    /// HTTP validators of the response the content came from.
    etag: Option<String>,
    last_modified: Option<String>,
    /// Estimated memory of `manifests` ([`estimate_bytes`]).
    bytes: u64,
    deferred: Option<Arc<directory::Deferred>>,
    used: Instant,
}

/// Content by source identity, kept while its revision is unchanged; bounded by a number of
/// entries and by the estimated memory of their manifests (least recently used entries go
/// first). Identities are sources (URL, ref, path, credentials), not parents: parents that
/// read the same source share one entry, and an entry nobody reads any more ages out.
pub struct Cache {
    inner: Mutex<CacheInner>,
    capacity: usize,
    max_bytes: u64,
}

#[derive(Default)]
struct CacheInner {
    entries: HashMap<String, Entry>,
    bytes: u64,
}

/// What the cache holds for an identity.
#[derive(Clone, Debug)]
pub struct Cached {
    pub revision: String,
    pub manifests: Arc<Vec<Manifest>>,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// Estimated memory of `manifests` ([`estimate_bytes`]).
    pub bytes: u64,
    /// A build that waits for the set's keys ([`directory::Deferred`]): the set builds it at
    /// render; `manifests` is then empty.
    pub deferred: Option<Arc<directory::Deferred>>,
}

impl Cache {
    pub fn new(capacity: usize, max_bytes: u64) -> Self {
        Self {
            inner: Mutex::new(CacheInner::default()),
            capacity: capacity.max(1),
            max_bytes,
        }
    }

    pub fn get(&self, identity: &str) -> Option<Cached> {
        let mut m = self.inner.lock();
        let e = m.entries.get_mut(identity)?;
        e.used = Instant::now();
        Some(Cached {
            revision: e.revision.clone(),
            manifests: e.manifests.clone(),
            etag: e.etag.clone(),
            last_modified: e.last_modified.clone(),
            bytes: e.bytes,
            deferred: e.deferred.clone(),
        })
    }

    /// The cached content of `identity` if it has `revision`.
    pub fn get_revision(&self, identity: &str, revision: &str) -> Option<Cached> {
        self.get(identity).filter(|c| c.revision == revision)
    }

    /// Caches `c` for `identity` (replacing what was there), then evicts the least recently
    /// used other entries until both bounds hold. Content larger than the whole byte budget is
    /// not cached at all (it is read again next time).
    /// Caches freshly downloaded content and returns it as fetched, holding `lease` (the
    /// memory budget of its manifests) until the result is dropped.
    pub fn store(
        &self,
        identity: &str,
        kind: &'static str,
        c: Cached,
        lease: memory::Lease,
    ) -> Fetched {
        let fetched = Fetched {
            manifests: c.manifests.clone(),
            revision: c.revision.clone(),
            kind,
            downloaded: true,
            memory: Some(Arc::new(lease)),
            deferred: c.deferred.clone(),
        };
        self.put(identity, c);
        fetched
    }

    pub fn put(&self, identity: &str, c: Cached) {
        let mut m = self.inner.lock();
        let m = &mut *m;
        if let Some(old) = m.entries.remove(identity) {
            m.bytes = m.bytes.saturating_sub(old.bytes);
        }
        if c.bytes > self.max_bytes {
            return;
        }
        while !m.entries.is_empty()
            && (m.entries.len() >= self.capacity
                || m.bytes.saturating_add(c.bytes) > self.max_bytes)
        {
            let Some(oldest) = m
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = m.entries.remove(&oldest) {
                m.bytes = m.bytes.saturating_sub(e.bytes);
            }
        }
        m.bytes = m.bytes.saturating_add(c.bytes);
        m.entries.insert(
            identity.to_string(),
            Entry {
                revision: c.revision,
                manifests: c.manifests,
                etag: c.etag,
                last_modified: c.last_modified,
                bytes: c.bytes,
                deferred: c.deferred,
                used: Instant::now(),
            },
        );
    }

    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The estimated memory of everything cached.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().bytes
    }
}

/// An estimate of the memory the parsed `manifests` take: the JSON trees (a node costs about
/// the size of a `serde_json::Value` plus map overhead; strings their length) and the
/// per-manifest fields. Cheap (one walk), and good enough to bound the cache.
pub fn estimate_bytes(manifests: &[Manifest]) -> u64 {
    fn value(v: &serde_json::Value) -> u64 {
        const NODE: u64 = std::mem::size_of::<serde_json::Value>() as u64;
        NODE + match v {
            serde_json::Value::String(s) => s.len() as u64,
            serde_json::Value::Array(a) => a.iter().map(value).sum(),
            serde_json::Value::Object(o) => map(o),
            _ => 0,
        }
    }
    fn map(o: &serde_json::Map<String, serde_json::Value>) -> u64 {
        // Key string, its header and the map's per-entry overhead.
        o.iter().map(|(k, v)| k.len() as u64 + 48 + value(v)).sum()
    }
    manifests
        .iter()
        .map(|m| {
            std::mem::size_of::<Manifest>() as u64
                + 256
                + map(&m.object)
                + (m.api_version.len() + m.kind.len() + m.name.len()) as u64 * 2
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Origin, parse_documents};

    fn cached(r: &str, bytes: u64) -> Cached {
        Cached {
            revision: r.into(),
            manifests: Arc::new(vec![]),
            etag: None,
            last_modified: None,
            bytes,
            deferred: None,
        }
    }

    #[test]
    fn cache_is_bounded_and_keyed_by_revision() {
        let c = Cache::new(2, 1 << 20);
        c.put("a", cached("1", 1));
        c.put("b", cached("1", 1));
        assert!(c.get_revision("a", "1").is_some());
        assert!(c.get_revision("a", "2").is_none());
        c.put("c", cached("1", 1));
        assert_eq!(c.len(), 2);
        assert!(c.get("b").is_none(), "least recently used went first");
    }

    #[test]
    fn cache_is_bounded_by_bytes() {
        let c = Cache::new(100, 1000);
        c.put("a", cached("1", 400));
        c.put("b", cached("1", 400));
        assert_eq!(c.bytes(), 800);
        assert!(c.get("a").is_some(), "a is now more recent than b");
        c.put("c", cached("1", 400));
        assert_eq!(c.len(), 2);
        assert_eq!(c.bytes(), 800);
        assert!(c.get("b").is_none(), "least recently used went first");
        assert!(c.get("a").is_some() && c.get("c").is_some());
        // Replacing an entry replaces its bytes.
        c.put("a", cached("2", 100));
        assert_eq!(c.bytes(), 500);
        // Content larger than the whole budget is not cached, and replaces nothing else.
        c.put("huge", cached("1", 1001));
        assert!(c.get("huge").is_none());
        assert_eq!(c.len(), 2);
        // ... and an identity whose new content is too large loses its old content.
        c.put("a", cached("3", 5000));
        assert!(c.get("a").is_none());
        assert_eq!(c.bytes(), 400);
    }

    #[test]
    fn estimated_bytes_grow_with_content() {
        let parse = |t: &str| parse_documents(t, &Origin::source("test")).expect("parses");
        let small = parse("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n");
        let big = parse(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  v: \"{}\"\n",
            "x".repeat(100_000)
        ));
        let (s, b) = (estimate_bytes(&small), estimate_bytes(&big));
        assert!(s > 100 && s < 10_000, "{s}");
        assert!(b > 100_000 && b < 200_000, "{b}");
    }
}
