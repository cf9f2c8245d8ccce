//! Clients that impersonate a user: the operator's client with the `Impersonate-User`
//! header on every request, so they share its connections, credentials and request
//! metrics.

use http::{HeaderValue, Request};
use kube::{Client, client::Body};

/// A client that sends every request through `base` as `user`; none when `user` cannot be
/// a header value (never a client that would fall back to the operator's identity).
pub fn client(base: &Client, user: &str) -> Option<Client> {
    let header = HeaderValue::from_str(user).ok()?;
    let inner = base.clone();
    let service = tower::service_fn(move |mut req: Request<Body>| {
        req.headers_mut().insert("Impersonate-User", header.clone());
        let inner = inner.clone();
        async move { inner.send(req).await }
    });
    Some(Client::new(service, base.default_namespace().to_string()))
}

/// Default of `--max-impersonation-clients`.
pub const DEFAULT_MAX_CLIENTS: usize = 256;

/// Impersonating clients by user, at most `cap`, the least recently used dropped first (a
/// set that cycles through ServiceAccount names cannot grow it). A dropped client's requests
/// in flight finish; the next use makes a new one.
pub struct Clients {
    cap: usize,
    tick: u64,
    /// User → client and when it was last used.
    by_user: std::collections::HashMap<String, (Client, u64)>,
}

impl Clients {
    pub fn new(cap: usize) -> Self {
        Clients {
            cap: cap.max(1),
            tick: 0,
            by_user: std::collections::HashMap::new(),
        }
    }

    /// The client of `user`, made by `make` when none is kept (then kept, evicting the least
    /// recently used beyond the cap).
    pub fn get_or_make(
        &mut self,
        user: &str,
        make: impl FnOnce() -> Option<Client>,
    ) -> Option<Client> {
        self.tick += 1;
        if let Some((c, used)) = self.by_user.get_mut(user) {
            *used = self.tick;
            return Some(c.clone());
        }
        let client = make()?;
        while self.by_user.len() >= self.cap {
            let oldest = self
                .by_user
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(u, _)| u.clone());
            match oldest {
                Some(u) => self.by_user.remove(&u),
                None => break,
            };
        }
        self.by_user
            .insert(user.to_string(), (client.clone(), self.tick));
        Some(client)
    }

    /// How many clients are kept.
    pub fn len(&self) -> usize {
        self.by_user.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_user.is_empty()
    }

    /// Drops the client of `user` (no set acts as it any more).
    pub fn remove(&mut self, user: &str) {
        self.by_user.remove(user);
    }

    /// Whether a client of `user` is kept.
    pub fn contains(&self, user: &str) -> bool {
        self.by_user.contains_key(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Client {
        let svc = tower::service_fn(|_req: Request<Body>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Body::empty()))
        });
        Client::new(svc, "default")
    }

    #[tokio::test]
    async fn the_least_recently_used_client_goes_beyond_the_cap() {
        let b = base();
        let mut c = Clients::new(2);
        let make = |u: &str| client(&b, u);
        assert!(c.get_or_make("a", || make("a")).is_some());
        assert!(c.get_or_make("b", || make("b")).is_some());
        // "a" used again: "b" is now the least recently used.
        assert!(c.get_or_make("a", || panic!("kept")).is_some());
        assert!(c.get_or_make("c", || make("c")).is_some());
        assert_eq!(c.len(), 2);
        assert!(c.contains("a") && c.contains("c") && !c.contains("b"));
        // Cycling through many names never grows it.
        for i in 0..100 {
            let u = format!("u{i}");
            c.get_or_make(&u, || make(&u));
        }
        assert_eq!(c.len(), 2);
        // A user that cannot be a header value gets no client, and nothing is kept for it.
        assert!(c.get_or_make("bad\nname", || make("bad\nname")).is_none());
        assert!(!c.contains("bad\nname"));
    }
}
