//! Clients that impersonate a user: the operator's client with the `Impersonate-User`
//! header on every request, so they share its connections, credentials and request
//! metrics.

use http::{HeaderValue, Request};
use kube::{Client, client::Body};

/// A client that sends every request through `base` as `user`.
pub fn client(base: &Client, user: &str) -> Client {
    let header = HeaderValue::from_str(user).ok();
    let inner = base.clone();
    let service = tower::service_fn(move |mut req: Request<Body>| {
        if let Some(h) = &header {
            req.headers_mut().insert("Impersonate-User", h.clone());
        }
        let inner = inner.clone();
        async move { inner.send(req).await }
    });
    Client::new(service, base.default_namespace().to_string())
}
