//! The live diff of a set's page (`…/diff`, an HTML fragment for `#diff-body`): the set
//! rendered from its live spec as `kubectl applyset diff` renders a file's set (the plugin's
//! [`Renderer`], the local age keys of the global flags; its sources under another egress
//! policy, below), planned and presented by the same function ([`crate::diff::diff_set`]:
//! Secret values masked, every value of a member a Secret's variable was substituted into
//! masked on both sides, decrypted values withheld). Offered only when the user may do what the diff does:
//! a SelfSubjectAccessReview first asks whether the user may impersonate the ServiceAccount
//! the set acts as; any other refusal (reading a Secret the render needs, a dry-run) comes
//! back from the render or the plan in the plugin's words ("your kubeconfig's user may not
//! …"). Bounded in time ([`TIMEOUT`]) and size ([`MAX_BYTES`]).
//!
//! Computed only when asked (the page's button; this route changes nothing, so it is a GET).
//! The set's sources are read from this machine under the operator's default egress policy
//! (loopback, link-local and metadata addresses refused: the set's tenant chose the URLs, not
//! the user), never the user's own ([`Policy::local`], which `kubectl applyset diff FILE`
//! keeps). At most [`PERMITS`] diffs run at once in the whole process (a diff waits at most
//! [`TIMEOUT`] for its turn), and a diff of a set at one resourceVersion is shared by every
//! viewer for [`SHARE`] after it is done.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock},
    time::{Duration, Instant},
};

use applyset_operator::{
    applyset::ParentRef,
    parent::AnyParent,
    sources::egress::Policy,
    tenancy::{self, Defaults, Identity},
};
use askama::Template;
use axum::{http::StatusCode, response::Response};
use futures::{
    FutureExt,
    future::{BoxFuture, Shared},
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::{Api, Client, api::PostParams};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{AppState, html};
use crate::{
    diff::{Set, diff_set},
    file::{File, SetDoc},
    render_file::Renderer,
};

/// How long a diff may take (render and plan).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// How much diff text is shown at most (the rest is cut, saying so).
pub const MAX_BYTES: usize = 512 * 1024;

/// Diffs computed at once in the whole ui process.
pub const PERMITS: usize = 2;

/// How long a diff, once done, is shown to every viewer of the set at the same
/// resourceVersion.
pub const SHARE: Duration = Duration::from_secs(10);

/// Requests of one diff in flight at once, and objects per page of a LIST.
const CONCURRENCY: usize = 8;
const PAGE_SIZE: u32 = 500;

/// Why the diff is not offered.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("{0}: not found or not visible to you")]
    NotVisible(String),
    #[error("reading {parent}: {error}")]
    Read {
        parent: ParentRef,
        #[source]
        error: kube::Error,
    },
    #[error("{parent}: {error}")]
    Identity {
        parent: ParentRef,
        #[source]
        error: tenancy::TenancyError,
    },
    /// The set acts as a ServiceAccount the user may not impersonate.
    #[error(
        "your kubeconfig's user may not impersonate {identity} ({user}), which this set acts as and the diff's dry-runs would act as; ask for the impersonate permission on serviceaccounts, or use a context that has it"
    )]
    Impersonate { identity: Identity, user: String },
    #[error("asking the API server whether you may impersonate {user}: {error}")]
    Review {
        user: String,
        #[source]
        error: kube::Error,
    },
    #[error(transparent)]
    AgeKey(#[from] crate::age_keys::AgeKeyError),
    #[error("rendering the set: {0}")]
    Render(#[source] crate::error::CliError),
    #[error("the ui has no cluster to render the set against")]
    NoCluster,
    #[error("planning the set: {0}")]
    Plan(#[source] crate::diff::DiffError),
    /// A dry-run refused to the user (the set acts as the operator, so the diff acts as the
    /// user): the API server's message names the right.
    #[error(
        "your kubeconfig's user may not dry-run the set's members (server-side apply, as the diff does): {0}; ask for this permission, or use a context that has it"
    )]
    Forbidden(String),
    #[error("the diff took longer than {}s", .0.as_secs())]
    TimedOut(Duration),
    /// Other diffs held every [`PERMITS`] for this long.
    #[error("other diffs were being computed for {}s; try again", .0.as_secs())]
    Busy(Duration),
    /// The diff's task stopped without an answer (a panic: a bug, not the set's).
    #[error("internal error: the diff stopped ({0})")]
    Crashed(#[source] tokio::task::JoinError),
}

/// One line of the diff, with its CSS class (`add`, `del`, `hunk`, `file`, `note`, `ctx`).
pub struct Line {
    pub class: &'static str,
    pub text: String,
}

/// A run of lines: the notes (the header, conflicts, refusals: `title` empty) or one
/// member's unified diff (`title`: its name, as `kubectl diff` names it).
pub struct Block {
    pub title: String,
    pub lines: Vec<Line>,
}

/// Members' diffs shown open at most (more are shown closed).
const OPEN: usize = 20;

#[derive(Template)]
#[template(path = "diff.html")]
pub struct DiffFragment {
    pub blocks: Vec<Block>,
    /// Whether the members' diffs are shown open.
    pub open: bool,
    pub truncated: bool,
    pub unavailable: String,
}

/// The fragment for `parent`.
pub async fn fragment(app: &AppState, parent: ParentRef) -> Response {
    let Some(summary) = app.cache.snapshot().get(&parent).cloned() else {
        let why = Unavailable::NotVisible(parent.to_string());
        let mut r = html(&present(Err(why)));
        *r.status_mut() = StatusCode::NOT_FOUND;
        return r;
    };
    let shared = DIFFS.get(app, parent, &summary.resource_version);
    html(&shared.await.fragment)
}

/// A diff done: its fragment, when it was done, and whether it is shown to other viewers
/// (not when it found no permit in time, nor when it crashed: the next viewer tries again).
struct Done {
    fragment: DiffFragment,
    at: Instant,
    shared: bool,
}

type Pending = Shared<BoxFuture<'static, Arc<Done>>>;

/// The diffs of the process: the permits, and each set's diff at a resourceVersion while it
/// runs and for [`SHARE`] after.
struct Diffs {
    permits: Arc<Semaphore>,
    shared: Mutex<HashMap<(ParentRef, String), Pending>>,
}

static DIFFS: LazyLock<Diffs> = LazyLock::new(|| Diffs {
    permits: Arc::new(Semaphore::new(PERMITS)),
    shared: Mutex::new(HashMap::new()),
});

impl Diffs {
    /// The diff of `parent` at `version`: the one running or done less than [`SHARE`] ago,
    /// else a new one, on a task of its own (it runs to its end, and is shared, even when
    /// the viewer who asked went away).
    fn get(&self, app: &AppState, parent: ParentRef, version: &str) -> Pending {
        let fresh = |p: &Pending| p.peek().is_none_or(|d| d.shared && d.at.elapsed() < SHARE);
        let mut shared = self.shared.lock();
        shared.retain(|_, p| fresh(p));
        let key = (parent.clone(), version.to_string());
        if let Some(p) = shared.get(&key) {
            return p.clone();
        }
        let task = tokio::spawn(computed(app.clone(), parent, self.permits.clone()));
        let pending = async move {
            let diffed = task.await.unwrap_or_else(|e| Err(Unavailable::Crashed(e)));
            let shared = !matches!(diffed, Err(Unavailable::Busy(_) | Unavailable::Crashed(_)));
            Arc::new(Done {
                fragment: present(diffed),
                at: Instant::now(),
                shared,
            })
        }
        .boxed()
        .shared();
        shared.insert(key, pending.clone());
        pending
    }
}

/// The diff of `parent` once a permit is free (waiting at most [`TIMEOUT`]).
async fn computed(
    app: AppState,
    parent: ParentRef,
    permits: Arc<Semaphore>,
) -> Result<String, Unavailable> {
    match tokio::time::timeout(TIMEOUT, permits.acquire_owned()).await {
        Ok(Ok(permit)) => off_the_workers(app, parent, permit).await,
        _ => Err(Unavailable::Busy(TIMEOUT)),
    }
}

/// The diff of `parent`, bounded by [`TIMEOUT`], on a thread of the blocking pool holding
/// `permit` until it is done: the render's future is not `Send` (a closure of the source
/// readers is not general enough for the compiler to prove it), so it runs to its end on a
/// thread of its own, driven by the runtime's handle.
async fn off_the_workers(
    app: AppState,
    parent: ParentRef,
    permit: OwnedSemaphorePermit,
) -> Result<String, Unavailable> {
    let handle = tokio::runtime::Handle::current();
    let run = move || {
        let diffed = handle.block_on(async {
            let diffed = tokio::time::timeout(TIMEOUT, diff(&app, &parent)).await;
            diffed.unwrap_or(Err(Unavailable::TimedOut(TIMEOUT)))
        });
        drop(permit);
        diffed
    };
    tokio::task::spawn_blocking(run)
        .await
        .unwrap_or_else(|e| Err(Unavailable::Crashed(e)))
}

/// The fragment of a diff's text, or of why there is none.
fn present(diffed: Result<String, Unavailable>) -> DiffFragment {
    match diffed {
        Ok(text) => {
            let (lines, truncated) = lines(&text);
            let blocks = blocks(lines);
            DiffFragment {
                open: blocks.iter().filter(|b| !b.title.is_empty()).count() <= OPEN,
                blocks,
                truncated,
                unavailable: String::new(),
            }
        }
        Err(why) => DiffFragment {
            blocks: Vec::new(),
            open: false,
            truncated: false,
            unavailable: format!("The live diff is not available: {why}"),
        },
    }
}

/// The diff's text: the live parent rendered as a one-set file and planned.
async fn diff(app: &AppState, parent: &ParentRef) -> Result<String, Unavailable> {
    let client = &app.client;
    let read = |error| Unavailable::Read {
        parent: parent.clone(),
        error,
    };
    let Some(live) = AnyParent::get(client, parent).await.map_err(read)? else {
        return Err(Unavailable::NotVisible(parent.to_string()));
    };
    let defaults = Defaults::default();
    let identity = tenancy::identity(parent, live.spec(), &defaults).map_err(|error| {
        Unavailable::Identity {
            parent: parent.clone(),
            error,
        }
    })?;
    may_impersonate(client, &identity).await?;
    let file = File {
        path: "the live set".into(),
        sets: vec![SetDoc {
            parent: parent.clone(),
            spec: live.spec().clone(),
            line: 0,
            manifest_lines: Vec::new(),
            source_lines: Vec::new(),
        }],
        crds: Vec::new(),
    };
    let keys = crate::age_keys::local_keys(app.global.sops_age_key_file.as_deref())?;
    let kustomize = app.global.kustomize_binary.clone();
    // The operator's egress policy with its flags at their defaults (its main builds
    // `Policy::new(&[], &[], true)`, which is `Policy::default()`).
    let renderer = Renderer::with_policy(
        &file,
        Some(client.clone()),
        defaults,
        kustomize,
        Policy::default(),
    )
    .with_age_keys(keys);
    let Some(resolver) = renderer.resolver().cloned() else {
        return Err(Unavailable::NoCluster);
    };
    let mut text = String::new();
    for doc in &file.sets {
        let rendered = renderer
            .render(&file, doc)
            .await
            .map_err(Unavailable::Render)?;
        let set = Set {
            parent: &doc.parent,
            spec: &doc.spec,
            identity: &rendered.identity,
            desired: rendered.set,
            concurrency: CONCURRENCY,
            page_size: PAGE_SIZE,
            progress: false,
        };
        let (body, counts) = diff_set(client, &resolver, set)
            .await
            .map_err(Unavailable::Plan)?;
        // Acting as the user, a refusal is the user's: the diff is not theirs to see.
        if let (Identity::Operator, Some(refused)) = (&identity, counts.forbidden.first()) {
            return Err(Unavailable::Forbidden(refused.clone()));
        }
        text.push_str(&body);
        for failure in &counts.failures {
            text.push_str(&format!("# failed {failure}\n"));
        }
    }
    Ok(text)
}

/// Whether the user may impersonate the ServiceAccount the set acts as (nothing to ask when
/// it acts as the operator: the diff then acts as the user).
async fn may_impersonate(client: &Client, identity: &Identity) -> Result<(), Unavailable> {
    let (Identity::ServiceAccount { namespace, name }, Some(user)) = (identity, identity.user())
    else {
        return Ok(());
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(String::new()),
                resource: Some("serviceaccounts".into()),
                verb: Some("impersonate".into()),
                namespace: Some(namespace.clone()),
                name: Some(name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(|error| Unavailable::Review {
            user: user.clone(),
            error,
        })?;
    match answer.status.is_some_and(|s| s.allowed) {
        true => Ok(()),
        false => Err(Unavailable::Impersonate {
            identity: identity.clone(),
            user,
        }),
    }
}

/// The diff's lines with their classes, cut at [`MAX_BYTES`] (whether it was). A hunk's
/// lines are classed by the counts of its `@@ -a,b +c,d @@` header, so that an object's
/// removed line that reads like a header (`--- …`) stays a removed line.
fn lines(text: &str) -> (Vec<Line>, bool) {
    let mut size = 0;
    let mut out = Vec::new();
    // The old and new lines of the current hunk still to come.
    let mut left = (0usize, 0usize);
    for line in text.lines() {
        size += line.len() + 1;
        if size > MAX_BYTES {
            return (out, true);
        }
        let class = if left.0 + left.1 > 0 {
            let (class, old, new) = match line.as_bytes().first() {
                Some(b'-') => ("del", 1, 0),
                Some(b'+') => ("add", 0, 1),
                _ => ("ctx", 1, 1),
            };
            left = (left.0.saturating_sub(old), left.1.saturating_sub(new));
            class
        } else if line.starts_with("--- ") || line.starts_with("+++ ") {
            "file"
        } else if line.starts_with("@@") {
            left = hunk(line);
            "hunk"
        } else if line.starts_with('#') {
            "note"
        } else if line.starts_with('+') {
            "add"
        } else if line.starts_with('-') {
            "del"
        } else {
            "ctx"
        };
        out.push(Line {
            class,
            text: line.to_string(),
        });
    }
    (out, false)
}

/// The old and new line counts of a hunk header `@@ -a[,b] +c[,d] @@` (a count left out is 1).
fn hunk(header: &str) -> (usize, usize) {
    let count = |sign: char| {
        header
            .split(' ')
            .find_map(|part| part.strip_prefix(sign))
            .map(|range| match range.split_once(',') {
                Some((_, n)) => n.parse().unwrap_or(0),
                None => 1,
            })
            .unwrap_or(0)
    };
    (count('-'), count('+'))
}

/// The lines in blocks: a member's diff from its `--- ` line to the next member's or the
/// next note; the notes between them in blocks of their own.
fn blocks(lines: Vec<Line>) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    for line in lines {
        // A created member is named by its `+++ merged/NAME` line.
        let created = line.text.strip_prefix("+++ merged/");
        if let (Some(name), Some(last)) = (created, out.last_mut())
            && last.title == CREATED
        {
            last.title = name.to_string();
        }
        let starts = match line.class {
            "file" if line.text.starts_with("--- ") => Some(title(&line.text)),
            "note" if out.last().is_some_and(|b| !b.title.is_empty()) => Some(String::new()),
            _ => None,
        };
        match (starts, out.last_mut()) {
            (None, Some(last)) => last.lines.push(line),
            (starts, _) => out.push(Block {
                title: starts.unwrap_or_default(),
                lines: vec![line],
            }),
        }
    }
    out
}

/// The title of a created member's block until its `+++ merged/NAME` line names it.
const CREATED: &str = "(created)";

/// A member's name from its diff's `--- live/NAME` line ([`CREATED`] for `--- /dev/null`).
fn title(line: &str) -> String {
    let old = line.trim_start_matches("--- ");
    match old.strip_prefix("live/") {
        Some(name) => name.to_string(),
        None => CREATED.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_classed_and_cut() {
        let text = "# ApplySet a/b: 1 to change\n--- live/x\n+++ merged/x\n@@ -1 +1 @@\n-  k: a\n+  k: b\n   same\n";
        let (lines, cut) = lines(text);
        let classes: Vec<&str> = lines.iter().map(|l| l.class).collect();
        assert_eq!(
            classes,
            ["note", "file", "file", "hunk", "del", "add", "ctx"]
        );
        assert!(!cut);
        let blocks = blocks(lines);
        let titles: Vec<&str> = blocks.iter().map(|b| b.title.as_str()).collect();
        assert_eq!(titles, ["", "x"]);
        let text = "# header\n--- /dev/null\n+++ merged/v1.ConfigMap.a.c\n@@ -0,0 +1 @@\n+k: v\n--- live/v1.ConfigMap.a.d\n+++ /dev/null\n# conflict ConfigMap a/b: theirs\n";
        let blocks = super::blocks(super::lines(text).0);
        let shape: Vec<(&str, usize)> = blocks
            .iter()
            .map(|b| (b.title.as_str(), b.lines.len()))
            .collect();
        assert_eq!(
            shape,
            [
                ("", 1),
                ("v1.ConfigMap.a.c", 4),
                ("v1.ConfigMap.a.d", 2),
                ("", 1)
            ]
        );
        // A removed line reading like a header stays in its member's block.
        let text = "--- live/x\n+++ merged/x\n@@ -1,2 +1 @@\n--- y\n---- z\n+++ k\n--- live/w\n+++ merged/w\n@@ -1 +1 @@\n-a\n+b\n";
        let lines = super::lines(text).0;
        let classes: Vec<&str> = lines.iter().map(|l| l.class).collect();
        assert_eq!(
            classes,
            [
                "file", "file", "hunk", "del", "del", "add", "file", "file", "hunk", "del", "add"
            ]
        );
        let titles: Vec<String> = super::blocks(lines).into_iter().map(|b| b.title).collect();
        assert_eq!(titles, ["x", "w"]);
        assert_eq!(hunk("@@ -0,0 +1,12 @@"), (0, 12));
        assert_eq!(hunk("@@ -3 +3 @@"), (1, 1));
        let big = "+ x\n".repeat(MAX_BYTES / 4 + 10);
        let (lines, cut) = super::lines(&big);
        assert!(cut);
        assert!(lines.len() * 4 <= MAX_BYTES);
    }

    #[test]
    fn the_fragment_escapes_the_diff_and_says_why_not() {
        let text = "# ApplySet a/b: 0 to create\n--- live/v1.ConfigMap.a.x\n+++ merged/v1.ConfigMap.a.x\n+  k: <script>alert(1)</script>\n";
        let (lines, truncated) = lines(text);
        let fragment = DiffFragment {
            blocks: blocks(lines),
            open: true,
            truncated,
            unavailable: String::new(),
        };
        let body = fragment.render().expect("renders");
        assert!(
            body.starts_with("<div class=\"diff-result\">\n<pre class=\"diff\">"),
            "{body}"
        );
        assert!(
            body.contains(
                "<details class=\"diff-member\" open><summary>v1.ConfigMap.a.x</summary>"
            ),
            "{body}"
        );
        assert!(!body.contains("<script>"), "{body}");
        let why = Unavailable::Forbidden("configmaps \"x\" is forbidden: <b>".into());
        let fragment = DiffFragment {
            blocks: Vec::new(),
            open: false,
            truncated: false,
            unavailable: format!("The live diff is not available: {why}"),
        };
        let body = fragment.render().expect("renders");
        assert!(body.starts_with("<p class=\"diff-unavailable\">"), "{body}");
        assert!(
            body.contains("may not dry-run") && !body.contains("<b>"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_crashed_diff_is_an_internal_error_and_not_shared() {
        let crash = tokio::spawn(async { panic!("a bug") })
            .await
            .expect_err("it panicked");
        let text = present(Err(Unavailable::Crashed(crash))).unavailable;
        assert!(text.contains("internal error: the diff stopped"), "{text}");
        let busy = present(Err(Unavailable::Busy(TIMEOUT))).unavailable;
        assert!(busy.contains("try again"), "{busy}");
    }

    #[test]
    fn the_missing_right_is_named() {
        let identity = Identity::ServiceAccount {
            namespace: "team".into(),
            name: "deployer".into(),
        };
        let why = Unavailable::Impersonate {
            user: identity.user().unwrap_or_default(),
            identity,
        };
        let text = why.to_string();
        assert!(text.contains("may not impersonate"), "{text}");
        assert!(
            text.contains("system:serviceaccount:team:deployer"),
            "{text}"
        );
    }
}
