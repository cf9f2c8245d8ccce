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
