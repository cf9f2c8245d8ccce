//! The client that counts: every request the operator sends to the API server
//! (`applyset_api_requests_total{verb}`, client-go's `rest_client_requests_total` and
//! `rest_client_request_duration_seconds`).
//!
//! Promises: every request is counted once by its verb (a watch apart from a read), and every
//! answer by its status code (`<error>`: none came).

use super::Metrics;

/// The verb of a request: the HTTP method, with watches told apart from reads.
pub fn verb<B>(req: &http::Request<B>) -> &'static str {
    match *req.method() {
        http::Method::GET
            if req
                .uri()
                .query()
                .is_some_and(|q| q.contains("watch=true") || q.contains("watch=1")) =>
        {
            "WATCH"
        }
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

/// A client that counts every request it sends in `metrics`, and every answer by status
/// code.
pub fn counting_client(
    config: kube::Config,
    metrics: std::sync::Arc<Metrics>,
) -> Result<kube::Client, kube::Error> {
    let host = config.cluster_url.host().unwrap_or_default().to_string();
    let layer = tower::layer::layer_fn(move |inner| Counted {
        inner,
        metrics: metrics.clone(),
        host: host.clone(),
    });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}

/// The service of [`counting_client`]: counts each request, then its answer.
#[derive(Clone)]
struct Counted<S> {
    inner: S,
    metrics: std::sync::Arc<Metrics>,
    /// The API server's host (client-go's `host` label).
    host: String,
}

impl<S, B, R> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        self.metrics.request(verb(&req));
        let method = req.method().as_str().to_owned();
        let (metrics, host) = (self.metrics.clone(), self.host.clone());
        let sent = std::time::Instant::now();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answer = answer.await;
            let code = match &answer {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            metrics.answered(&code, &method, &host, sent.elapsed());
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs() {
        let r = |m: http::Method, uri: &str| {
            http::Request::builder()
                .method(m)
                .uri(uri)
                .body(())
                .expect("request")
        };
        assert_eq!(
            verb(&r(
                http::Method::GET,
                "/api/v1/configmaps?watch=true&labelSelector=x"
            )),
            "WATCH"
        );
        assert_eq!(
            verb(&r(http::Method::GET, "/api/v1/configmaps?labelSelector=x")),
            "GET"
        );
        assert_eq!(
            verb(&r(http::Method::PATCH, "/api/v1/namespaces/a/configmaps/b")),
            "PATCH"
        );
    }
}
