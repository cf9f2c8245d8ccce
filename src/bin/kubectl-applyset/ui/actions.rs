//! Reconcile now, suspend and resume (`POST /sets/{ns}/{name}/{action}`,
//! `POST /clustersets/{name}/{action}`), only with `--allow-actions` (else 404), done as the
//! user with the plugin's own verbs (`kubectl applyset reconcile` without its wait, `suspend`,
//! `resume`). The answer is a small page whose `#message` app.js shows in `#action-result`:
//! 200 and `done: <what was done>`, or the API server's status code and
//! `refused: <its message>`. The guard has checked `Origin` and `Sec-Fetch-Site` before.

use applyset_operator::applyset::ParentRef;
use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::Response,
};
use kube::Client;

use super::{AppState, message};
use crate::{error::CliError, sets};

/// One of the actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Reconcile,
    Suspend,
    Resume,
}

impl Action {
    /// The action a path's last segment names.
    pub fn parse(word: &str) -> Option<Action> {
        match word {
            "reconcile" => Some(Action::Reconcile),
            "suspend" => Some(Action::Suspend),
            "resume" => Some(Action::Resume),
            _ => None,
        }
    }

    /// What was done, in words: `done: …`, as a refusal says `refused: …`.
    pub fn done(self, parent: &ParentRef) -> String {
        match self {
            Action::Reconcile => format!("done: reconcile requested for {parent}"),
            Action::Suspend => format!("done: suspended {parent}"),
            Action::Resume => format!("done: resumed {parent}"),
        }
    }

    /// Does it, as `client`'s user.
    async fn run(self, client: &Client, parent: &ParentRef) -> Result<(), CliError> {
        match self {
            Action::Reconcile => sets::request_reconcile(client, parent).await.map(drop),
            Action::Suspend => sets::set_suspend(client, parent, true).await,
            Action::Resume => sets::set_suspend(client, parent, false).await,
        }
    }
}

/// The status code and text of an action that failed: the API server's code and message when
/// it refused.
pub fn refusal(error: &CliError) -> (StatusCode, String) {
    match error {
        CliError::Api {
            error: kube::Error::Api(status),
            ..
        } => (
            StatusCode::from_u16(status.code).unwrap_or(StatusCode::BAD_GATEWAY),
            format!("refused: {}", status.message),
        ),
        CliError::NotFound(parent) => (
            StatusCode::NOT_FOUND,
            format!("refused: {parent} not found"),
        ),
        other => (StatusCode::BAD_GATEWAY, format!("failed: {other}")),
    }
}

/// Runs `action` (a path segment) on `parent` when actions are allowed.
async fn act(app: &AppState, parent: ParentRef, action: &str) -> Response {
    let Some(action) = Action::parse(action).filter(|_| app.allow_actions) else {
        return message(
            StatusCode::NOT_FOUND,
            "Not found",
            "No such page (actions are offered only with --allow-actions).",
        );
    };
    match action.run(&app.client, &parent).await {
        Ok(()) => message(StatusCode::OK, "Done", &action.done(&parent)),
        Err(e) => {
            let (code, text) = refusal(&e);
            message(code, "Refused", &text)
        }
    }
}

pub async fn applyset(
    State(app): State<AppState>,
    Path((namespace, name, action)): Path<(String, String, String)>,
) -> Response {
    act(&app, ParentRef::applyset(namespace, name), &action).await
}

pub async fn clusterset(
    State(app): State<AppState>,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    act(&app, ParentRef::cluster(name), &action).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_the_three_verbs() {
        assert_eq!(Action::parse("reconcile"), Some(Action::Reconcile));
        assert_eq!(Action::parse("suspend"), Some(Action::Suspend));
        assert_eq!(Action::parse("resume"), Some(Action::Resume));
        for other in ["diff", "delete", "", "Reconcile", "reconcile/"] {
            assert_eq!(Action::parse(other), None, "{other}");
        }
        let web = ParentRef::applyset("team", "web");
        assert_eq!(
            Action::Reconcile.done(&web),
            "done: reconcile requested for ApplySet team/web"
        );
        assert_eq!(
            Action::Suspend.done(&ParentRef::cluster("infra")),
            "done: suspended ClusterApplySet infra"
        );
        assert_eq!(Action::Resume.done(&web), "done: resumed ApplySet team/web");
    }

    #[test]
    fn a_refusal_keeps_the_api_servers_code_and_message() {
        let forbidden = CliError::Api {
            doing: "updating ApplySet team/web".into(),
            error: kube::Error::Api(
                kube::core::Status::failure(
                    "applysets.applyset.dev \"web\" is forbidden",
                    "Forbidden",
                )
                .with_code(403)
                .boxed(),
            ),
        };
        assert_eq!(
            refusal(&forbidden),
            (
                StatusCode::FORBIDDEN,
                "refused: applysets.applyset.dev \"web\" is forbidden".to_string()
            )
        );
        let missing = CliError::NotFound(ParentRef::applyset("team", "web"));
        assert_eq!(
            refusal(&missing),
            (
                StatusCode::NOT_FOUND,
                "refused: ApplySet team/web not found".to_string()
            )
        );
        let other = CliError::Cluster("no route".into());
        assert_eq!(refusal(&other).0, StatusCode::BAD_GATEWAY);
    }
}
