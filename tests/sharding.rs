//! Sharding: several operators, each reconciling a shard of the sets chosen by label
//! (`--label-selector`), as Flux shards its controllers. Two shards split the sets without
//! overlap: each set is reconciled by exactly one of them.

mod support;

use support::operator;

use applyset_operator::controller::{Config, Operator};
use operator::*;
use serde_json::json;

/// The label that assigns a set to a shard (any label works; this one is docs/operations.md's).
const SHARD: &str = "applyset.dev/shard";

#[tokio::test]
async fn two_shards_split_the_sets_without_overlap() {
    let h = Harness::new("shards").await;
    let base = format!("{TEST_LABEL}={}", h.label);
    let shard = |selector: String| Config {
        label_selector: Some(selector),
        ..h.config()
    };
    // The shard "blue", and the default shard: every set without a shard label.
    let blue = Operator::start(h.client.clone(), shard(format!("{base},{SHARD}=blue")));
    let rest = Operator::start(h.client.clone(), shard(format!("{base},!{SHARD}")));

    let mut sets = Vec::new();
    for (name, label) in [
        ("b1", Some("blue")),
        ("d1", None),
        ("b2", Some("blue")),
        ("d2", None),
    ] {
        let set = h.applyset(name);
        let labels = match label {
            Some(l) => json!({SHARD: l}),
            None => json!({}),
        };
        set.create_with(
            labels,
            json!({}),
            json!({"manifests": [configmap(&format!("cm-{name}"), json!({"k": "v"}))]}),
        )
        .await;
        sets.push((set, label.is_some()));
    }
    for (set, _) in &sets {
        set.wait_ready().await;
    }
    // Each shard's info series name exactly its own sets. A reconcile sets its series after
    // the status write (and its event), so Ready may be seen first: each set's series is
    // waited for in its own shard, then both shards are read.
    for (set, is_blue) in &sets {
        let series = format!("name=\"{}\"", set.name);
        let shard = if *is_blue { &blue } else { &rest };
        support::wait_for("the set's series in its shard", DEADLINE, || async {
            shard.metrics().encode().contains(&series).then_some(())
        })
        .await;
    }
    let (in_blue, in_rest) = (blue.metrics().encode(), rest.metrics().encode());
    for (set, is_blue) in &sets {
        let series = format!("name=\"{}\"", set.name);
        assert_eq!(
            in_blue.contains(&series),
            *is_blue,
            "{} in the blue shard",
            set.name
        );
        assert_eq!(
            in_rest.contains(&series),
            !*is_blue,
            "{} in the default shard",
            set.name
        );
    }
    // A set moved to another shard by its label is the other shard's from then on.
    let (moved, _) = &sets[1];
    moved
        .patch_metadata(json!({"labels": {SHARD: "blue"}}))
        .await;
    moved
        .patch_spec(json!({"manifests": [configmap("cm-d1", json!({"k": "moved"}))]}))
        .await;
    moved.wait_ready().await;
    eventually("the moved set to change shards", DEADLINE, || {
        let (b, r) = (blue.metrics().encode(), rest.metrics().encode());
        async move { (b.contains("name=\"d1\"") && !r.contains("name=\"d1\"")).then_some(()) }
    })
    .await;
    stop(blue).await;
    stop(rest).await;
}
