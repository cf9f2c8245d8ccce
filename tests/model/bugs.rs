//! Reproducers of the operator bugs the walk found, reduced to their minimal sequences, kept
//! as regular tests since their fixes.

use std::time::Duration;

use crate::{
    DEFAULT_SEED, announce,
    replicas::Mode,
    state, steps,
    steps::Step,
    universe,
    walk::Walk,
    world::{Setup, Throttling},
};

/// The reproducers run the operator as before the walk throttled it: with nothing in the way
/// of their deadlines.
const UNTHROTTLED: Setup = Setup {
    throttling: Throttling::Off,
    mode: Mode::Single,
};

/// The operator notices a parent's change promptly after kube-apiserver restarted (etcd
/// keeping its data). It used not to: the walk found that after a restart the operator's
/// watches resumed only after 5 to 45 s (median about 35 s over 22 restarts), and after
/// back-to-back restarts more than 150 s, while it reconciled its stale cache. Each watch
/// fails a few times in a row after a restart (connection refused, then `410 Expired` while
/// the new watch cache fills), and kube-runtime's default backoff grew to tens of seconds,
/// twice over: per watch and again in the controller for all its triggers. The backoff is
/// now short and the controller's own wait gone (`src/watch.rs`). The minimal sequence: a0
/// declares one ConfigMap and is Ready; kube-apiserver restarts (about 2 s); a second
/// ConfigMap is added to a0. Run it with `cargo test --test model apiserver_restart`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_after_an_apiserver_restart_is_applied_within_10_seconds() {
    let mut w = Walk::start(DEFAULT_SEED, 3, UNTHROTTLED).await;
    w.rerun = Some("cargo test --test model apiserver_restart");
    let decl = universe::Decl {
        rev: 1,
        prune_disabled: false,
        explicit_ns: false,
    };
    let cms: Vec<universe::Key> = universe::member_keys()
        .into_iter()
        .filter(|k| k.kind == universe::Kind::ConfigMap)
        .collect();
    let spec = state::Spec {
        members: [(cms[0].clone(), decl.clone())].into(),
        ..state::Spec::default()
    };
    let steps = [
        Step::Create { set: 0, spec },
        Step::Edit {
            set: 0,
            edits: vec![steps::Edit::Add(cms[1].clone(), decl.clone())],
        },
    ];
    w.log.push(format!("    1. {}", steps[0]));
    if let Err(e) = w.perform(&steps[0]).await {
        w.fail(1, &e);
    }
    w.log.push("    2. restart kube-apiserver".into());
    if let Err(e) = w.world.restart_apiserver().await {
        w.fail(2, &e);
    }
    w.log.push(format!("    3. {}", steps[1]));
    steps[1].apply(&mut w.model);
    w.model.converge();
    let written = w.world.write_spec(0, &w.model.sets[0].spec).await;
    if let Err(e) = written {
        w.fail(3, &e);
    }
    // Straight to the check, with the normal deadline of a step that is not a fault.
    if let Err(e) = w.check_within(Duration::from_secs(10)).await {
        w.fail(3, &e);
    }
}

/// An object annotated `applyset.dev/prune: disabled` while its parent prunes it is kept:
/// once the annotation is in the API server, the operator must not delete the object.
/// It used to be deleted — prune decided on a listing and deleted with a UID precondition
/// only, so an annotation added between the two was not seen; deletes now carry the listed
/// resourceVersion too. The minimal
/// sequence (found by the walk, seed 7 with the race step weighted up, step 9): model-c1
/// declares Widget model-home/w0 and is Ready; model-c1 drops w0 and, while the operator
/// prunes it, a foreign actor's merge patch adds `applyset.dev/prune: disabled` to w0 (200
/// OK); the operator logs `pruned member=Widget… model-home/w0` and w0 is gone. Each round
/// here races one drop (the operator's network slowed down by [`crate::walk::RACE_LATENCY`] widens the
/// window), up to 20 rounds. Run it with `cargo test --test model
/// prune_disabled_while_being_pruned`. The walk races such drops too (`MODEL_NO_RACES=1`
/// leaves them out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_annotated_prune_disabled_while_being_pruned_is_kept() {
    let mut w = Walk::start(DEFAULT_SEED, 40, UNTHROTTLED).await;
    w.rerun = Some("cargo test --test model prune_disabled_while_being_pruned");
    let cms: Vec<universe::Key> = universe::member_keys()
        .into_iter()
        .filter(|k| k.kind == universe::Kind::ConfigMap)
        .collect();
    let decl = universe::Decl {
        rev: 1,
        prune_disabled: false,
        explicit_ns: true,
    };
    // A parent that keeps one member, so that dropping another is not an empty set.
    let spec = state::Spec {
        members: [(cms[0].clone(), decl.clone())].into(),
        ..state::Spec::default()
    };
    let mut steps = vec![Step::Create { set: 3, spec }];
    for (round, key) in cms[1..].iter().cycle().take(20).enumerate() {
        steps.push(Step::Edit {
            set: 3,
            edits: vec![steps::Edit::Add(key.clone(), decl.clone())],
        });
        steps.push(Step::DropRacingAnnotation {
            set: 3,
            key: key.clone(),
            offset_ms: (round % 9) as i64 - 4,
        });
    }
    w.perform_all(&steps).await;
    announce(&format!(
        "{} annotations landed (kept), {} found the object pruned",
        w.race_aim.landed, w.race_aim.pruned
    ));
}

/// A set whose CRD a foreign actor deletes gets it back, with its custom resources, as
/// drift — promptly. It used not to: the walk (seed 10383701368955355653, step 1590 of a
/// 2,500-step soak) found model-c0 without its CRD and Gadget 90 s after the deletion. The
/// deletion of a CRD takes a moment (its custom resources go first); a drift reconcile that
/// started meanwhile applied the CRD while it was still being deleted (an apply of an object
/// being deleted succeeds), and then waited for it to be Established until the reconcile's
/// timeout, though it was gone; the drift that followed waited behind it. A CRD gone or being
/// deleted is no longer waited for: the member fails at once, the reconcile is retried and
/// creates the CRD again. The minimal sequence: model-c0 declares the Gadget CRD and a
/// Gadget and is Ready; a foreign actor deletes the CRD. The drift reconcile starts while the
/// deletion waits for the Gadget to go, so the first deletion showed the bug every time
/// before the fix; the CRD is deleted 5 times. Run it with
/// `cargo test --test model crd_deleted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_deleted_by_a_foreign_actor_comes_back_with_its_resources() {
    let mut w = Walk::start(DEFAULT_SEED, 6, UNTHROTTLED).await;
    w.rerun = Some("cargo test --test model crd_deleted");
    let keys = universe::member_keys();
    let crd = keys
        .iter()
        .find(|k| k.kind == universe::Kind::Crd)
        .cloned()
        .expect("the Gadget CRD");
    let gadget = keys
        .iter()
        .find(|k| k.kind == universe::Kind::Gadget)
        .cloned()
        .expect("a Gadget");
    let decl = universe::Decl {
        rev: 1,
        prune_disabled: false,
        explicit_ns: true,
    };
    let spec = state::Spec {
        members: [(crd.clone(), decl.clone()), (gadget, decl)].into(),
        ..state::Spec::default()
    };
    let mut steps = vec![Step::Create { set: 3, spec }];
    for _ in 0..5 {
        steps.push(Step::ForeignDelete { key: crd.clone() });
    }
    w.perform_all(&steps).await;
}

/// Under `--shards auto`, a ClusterApplySet whose record names a namespaced kind but no
/// namespace (a foreign actor added the kind to `contains-group-kinds`) stays Ready after
/// another replica takes it over, as under a single operator. It used not to: the walk (seed
/// 17241384204975025288, step 276 of a 10,000-step soak, two replicas) found model-c0
/// (`prune: false`, declaring nothing) `ApplyFailed` for good once its replica was
/// SIGKILLed. A replica that gains a set observes its members by LIST (its watches see only
/// members labelled with their bucket), and that LIST refused the kind with no namespace to
/// look in ("Service is namespaced but the parent records no namespace…") at every retry,
/// where a single operator's cluster-wide watches showed no such Service. A set that records no
/// namespace now observes its namespaced kinds in all namespaces, and its prune lists its own
/// extent again (and refuses) only when that shows an object it does not declare, as a watched
/// set's does (tests/prune_holes.rs has that case). The minimal sequence: model-c0 created with
/// `prune: false`, model-c1 with `allowEmpty`, neither declaring anything; a foreign actor
/// adds kind Service to both records; every replica SIGKILLed and started again (each new
/// incarnation gains its sets). Run it with `cargo test --test model no_namespace_to_look_in`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_set_recording_a_kind_with_no_namespace_to_look_in_stays_ready_across_a_handover()
{
    let setup = Setup {
        throttling: Throttling::Off,
        mode: Mode::Sharded(2),
    };
    let mut w = Walk::start(DEFAULT_SEED, 5, setup).await;
    w.rerun = Some("cargo test --test model no_namespace_to_look_in");
    let add_service = |set| Step::EditAnnotations {
        set,
        edit: steps::AnnotationEdit::AddKind(universe::Kind::Service),
    };
    let steps = [
        Step::Create {
            set: 3,
            spec: state::Spec {
                prune: false,
                ..state::Spec::default()
            },
        },
        Step::Create {
            set: 4,
            spec: state::Spec {
                allow_empty: true,
                ..state::Spec::default()
            },
        },
        add_service(3),
        add_service(4),
        Step::Kill {
            payload: Box::new(Step::Edit {
                set: 3,
                edits: vec![steps::Edit::Toggle(steps::Flag::Force)],
            }),
            delay_ms: 0,
        },
    ];
    w.perform_all(&steps).await;
}

/// Not an operator bug: a case the model lacked. A ClusterApplySet whose record names a
/// namespaced kind but no namespace refuses its prune (`PruneFailed`, docs/design.md §6.3)
/// while it shows an object labelled with it that it does not declare, under one operator as
/// under `--shards auto`; the model expected Ready. Found by the walk (seed
/// 17241384204975025288, step 2523 of a 10,000-step soak): model-c0 had dropped Widget
/// model-home/w0, retained by its manifest's `prune: disabled`, and a foreign actor added the
/// Widget kind to its record. The sequence: model-c0 declares Namespace model-m1 and that
/// Widget; drops the Widget (retained); the kind is added back to its record (refused: the
/// retained Widget is undeclared); a foreign actor deletes the Widget (Ready again, the kind
/// forgotten). Run it with `cargo test --test model undeclared_object_of_a_kind`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_set_showing_an_undeclared_object_of_a_kind_with_no_namespace_refuses_its_prune()
{
    let mut w = Walk::start(DEFAULT_SEED, 4, UNTHROTTLED).await;
    w.rerun = Some("cargo test --test model undeclared_object_of_a_kind");
    let keys = universe::member_keys();
    let find = |kind, ns| {
        keys.iter()
            .find(|k| k.kind == kind && k.ns == ns)
            .cloned()
            .expect("a key of the universe")
    };
    let namespace = find(universe::Kind::Namespace, None);
    let widget = find(universe::Kind::Widget, Some(universe::HOME));
    let decl = |prune_disabled| universe::Decl {
        rev: 1,
        prune_disabled,
        explicit_ns: true,
    };
    let spec = state::Spec {
        members: [(namespace, decl(false)), (widget.clone(), decl(true))].into(),
        ..state::Spec::default()
    };
    let steps = [
        Step::Create { set: 3, spec },
        Step::Edit {
            set: 3,
            edits: vec![steps::Edit::Remove(widget.clone())],
        },
        Step::EditAnnotations {
            set: 3,
            edit: steps::AnnotationEdit::AddKind(universe::Kind::Widget),
        },
        Step::ForeignDelete { key: widget },
    ];
    w.perform_all(&steps).await;
}
