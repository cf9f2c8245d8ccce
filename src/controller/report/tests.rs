//! The report's pure builders, status fitting and event choice, exhaustively.

use super::{
    fit::{MIN_MESSAGE, json_len, largest, with_lists},
    *,
};
use crate::{
    applyset::controls::Skip,
    engine::outcome::{Outcome, Retained},
};

fn member(name: &str) -> MemberRef {
    MemberRef {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: Some("team".into()),
        name: name.into(),
    }
}

fn r(name: &str, outcome: Outcome) -> MemberResult {
    MemberResult::new(member(name), outcome)
}

fn failed(m: &str) -> Outcome {
    Outcome::Failed { message: m.into() }
}

#[test]
fn no_failure_report_when_every_member_applied() {
    let results = [
        r("a", Outcome::Created),
        r("b", Outcome::Unchanged),
        r("c", Outcome::Configured),
    ];
    assert_eq!(apply_failure(&results, "rev"), None);
}

/// A field conflict with kubectl (`c: conflict`) and another set's object (`o: owned`).
fn conflict_and_owned() -> (Outcome, Outcome) {
    let conflict = Outcome::Conflict {
        managers: vec!["kubectl".into()],
        message: "c: conflict".into(),
    };
    let owned = Outcome::Owned {
        message: "o: owned".into(),
    };
    (conflict, owned)
}

#[test]
fn ownership_comes_before_conflicts_before_failures() {
    let (conflict, owned) = conflict_and_owned();
    let all = [
        r("f", failed("f: broken")),
        r("c", conflict.clone()),
        r("o", owned),
    ];
    let report = apply_failure(&all, "rev").expect("a failure");
    assert_eq!(report.reason, Reason::OwnershipConflict);
    assert_eq!(
        report.message,
        "1 member(s) not applied, nothing pruned: o: owned"
    );
    assert_eq!(report.attempted.as_deref(), Some("rev"));
    assert!(!report.ready);
    let report = apply_failure(&all[..2], "rev").expect("a failure");
    assert_eq!(report.reason, Reason::Conflict);
    assert_eq!(
        report.message,
        "1 member(s) not applied, nothing pruned: c: conflict"
    );
    let report = apply_failure(&all[..1], "rev").expect("a failure");
    assert_eq!(report.reason, Reason::ApplyFailed);
}

#[test]
fn a_long_failure_list_names_five_and_counts_the_rest() {
    let results: Vec<MemberResult> = (0..7)
        .map(|i| r(&format!("m{i}"), failed(&format!("m{i}: x"))))
        .collect();
    let report = apply_failure(&results, "rev").expect("a failure");
    assert_eq!(
        report.message,
        "7 member(s) not applied, nothing pruned: m0: x; m1: x; m2: x; m3: x; m4: x; and 2 more"
    );
}

#[test]
fn prune_failure_names_failed_deletes_and_changed_objects() {
    let ok = [
        r("a", Outcome::Pruned),
        r("b", Outcome::Gone),
        r("c", Outcome::Retained(Retained::PruneDisabled)),
    ];
    assert_eq!(prune_failure("ApplySet team/web", &ok, "rev"), None);
    let bad = [
        r("a", Outcome::Pruned),
        r(
            "d",
            Outcome::DeleteFailed {
                message: "d: forbidden".into(),
            },
        ),
        r("e", Outcome::Changed),
        r("f", Outcome::Retained(Retained::Recreated)),
    ];
    let report = prune_failure("ApplySet team/web", &bad, "rev").expect("a failure");
    assert_eq!(report.reason, Reason::PruneFailed);
    assert_eq!(
        report.message,
        "ApplySet team/web: prune incomplete, the parent keeps recording every kind: 1 delete(s) failed: d: forbidden; changed while being pruned (looked at again next time): ConfigMap team/e, ConfigMap team/f"
    );
    assert_eq!(report.attempted.as_deref(), Some("rev"));
}

#[test]
fn a_plan_lists_creates_updates_and_prunes_sorted() {
    let results = [
        r("z", Outcome::Created),
        r("a", Outcome::Created),
        r("u", Outcome::Configured),
        r("s", Outcome::Unchanged),
        r("t", Outcome::Unchanged),
    ];
    let report = plan(&results, vec![member("p2"), member("p1")], "rev");
    assert_eq!(report.reason, Reason::PlanReady);
    assert!(!report.ready);
    let p = report.plan.expect("a plan");
    assert_eq!(p.create, [member("a"), member("z")]);
    assert_eq!(p.update, [member("u")]);
    assert_eq!(p.prune, [member("p1"), member("p2")]);
    assert_eq!(p.unchanged, 2);
    assert!(!p.truncated);
    assert_eq!(
        report.message,
        "plan: 2 to create, 1 to update, 2 to prune, 2 unchanged (mode: Plan writes nothing)"
    );
    assert_eq!(
        next(&Report {
            plan: None,
            ..report
        }),
        Next::Interval { reset: true }
    );
}

#[test]
fn a_plan_says_which_members_it_would_skip_and_why() {
    let results = [
        r("n", Outcome::Created),
        r("s2", Outcome::Skipped(Skip::IfNotPresentExists)),
        r("s1", Outcome::Skipped(Skip::Ignore)),
        r("s3", Outcome::Skipped(Skip::ReconcileDisabled)),
    ];
    let report = plan(&results, Vec::new(), "rev");
    let p = report.plan.expect("a plan");
    let skip: Vec<(String, String)> = p
        .skip
        .iter()
        .map(|s| (s.member.name.clone(), s.reason.clone()))
        .collect();
    let want = [
        ("s1", "ssa: Ignore"),
        ("s2", "IfNotPresent, exists"),
        ("s3", "reconcile: disabled"),
    ]
    .map(|(n, r)| (n.to_string(), r.to_string()));
    assert_eq!(skip, want);
    assert_eq!((p.create.len(), p.unchanged), (1, 0));
    assert_eq!(
        report.message,
        "plan: 1 to create, 0 to update, 0 to prune, 0 unchanged, 3 skipped (mode: Plan writes nothing)"
    );
    // The skip list is capped and cut to fit as the others are.
    let many: Vec<MemberResult> = (0..MAX_LISTED + 1)
        .map(|i| r(&format!("s{i:04}"), Outcome::Skipped(Skip::Ignore)))
        .collect();
    let p = plan(&many, Vec::new(), "rev").plan.expect("a plan");
    assert!(p.truncated && p.skip.len() == MAX_LISTED);
    let status = ApplySetStatus {
        plan: Some(p),
        ..ApplySetStatus::default()
    };
    let cut = with_lists(&status, 3).plan.expect("a plan");
    assert_eq!(cut.skip.len(), 3);
}

#[test]
fn a_plan_caps_each_list() {
    let results: Vec<MemberResult> = (0..MAX_LISTED + 3)
        .map(|i| r(&format!("m{i:04}"), Outcome::Created))
        .collect();
    let p = plan(&results, Vec::new(), "rev").plan.expect("a plan");
    assert_eq!(p.create.len(), MAX_LISTED);
    assert!(p.truncated);
}

#[test]
fn success_counts_and_records_the_revision() {
    let summary = Summary {
        members: 3,
        created: 1,
        configured: 1,
        unchanged: 1,
        pruned: 2,
        ..Summary::default()
    };
    let report = succeeded(summary, vec![member("a")], "rev");
    assert!(report.ready);
    assert_eq!(
        report.message,
        "applied 3 members (1 created, 1 configured, 1 unchanged), pruned 2"
    );
    assert_eq!(report.applied.as_deref(), Some("rev"));
    let s = next_status(&ApplySetStatus::default(), Some(4), "id", report);
    assert_eq!(s.observed_generation, Some(4));
    assert_eq!(s.last_applied_revision.as_deref(), Some("rev"));
    assert_eq!(s.last_error, None);
    assert_eq!(s.members, [member("a")]);
    assert_eq!(s.applyset_id.as_deref(), Some("id"));
}

#[test]
fn skipped_members_are_counted_in_the_success_message() {
    let summary = Summary {
        members: 2,
        unchanged: 1,
        skipped: 1,
        ..Summary::default()
    };
    let report = succeeded(summary, vec![member("a")], "rev");
    assert_eq!(
        report.message,
        "applied 2 members (0 created, 0 configured, 1 unchanged, 1 skipped), pruned 0"
    );
    assert!(report.ready);
}

#[test]
fn skipped_members_are_no_failure() {
    let results = [
        r("a", Outcome::Created),
        r("b", Outcome::Skipped(Skip::Ignore)),
    ];
    assert_eq!(apply_failure(&results, "rev"), None);
}

#[test]
fn a_failure_keeps_the_last_applied_revision_and_members() {
    let ok = succeeded(Summary::default(), vec![member("a")], "rev1");
    let before = next_status(&ApplySetStatus::default(), Some(1), "id", ok);
    let bad = Report::failed(Reason::ApplyFailed, "broken".into()).attempted("rev2");
    let after = next_status(&before, Some(2), "id", bad);
    assert_eq!(after.last_applied_revision.as_deref(), Some("rev1"));
    assert_eq!(after.last_attempted_revision.as_deref(), Some("rev2"));
    assert_eq!(after.members, [member("a")]);
    assert_eq!(after.last_error.as_deref(), Some("broken"));
}

#[test]
fn members_beyond_the_cap_are_truncated() {
    let members: Vec<MemberRef> = (0..MAX_LISTED + 1)
        .map(|i| member(&format!("{i}")))
        .collect();
    let s = next_status(
        &ApplySetStatus::default(),
        Some(1),
        "id",
        succeeded(Summary::default(), members, "rev"),
    );
    assert_eq!(s.members.len(), MAX_LISTED);
    assert!(s.members_truncated);
}

fn big_status(members: usize, plan: usize, message: usize) -> ApplySetStatus {
    let refs = |prefix: &str, n: usize| -> Vec<MemberRef> {
        (0..n).map(|i| member(&format!("{prefix}{i:05}"))).collect()
    };
    let r = Report {
        plan: (plan > 0).then(|| Plan {
            create: refs("c", plan),
            update: refs("u", plan),
            prune: refs("p", plan),
            ..Plan::default()
        }),
        members: Some(refs("m", members)),
        ..Report::failed(Reason::ApplyFailed, "é".repeat(message / 2))
    };
    let mut s = next_status(&ApplySetStatus::default(), Some(1), "id", r);
    s.last_error = Some("x".repeat(message.min(1024)));
    s
}

#[test]
fn a_status_that_fits_is_left_alone() {
    let s = big_status(MAX_LISTED, MAX_LISTED, 30_000);
    assert!(json_len(&s) < MAX_OBJECT_BYTES / 2);
    assert_eq!(fit(s.clone(), 0), s);
    assert_eq!(fit(s.clone(), MAX_OBJECT_BYTES - json_len(&s)), s);
}

#[test]
fn the_lists_shrink_first_to_the_longest_length_that_fits() {
    let s = big_status(MAX_LISTED, MAX_LISTED, 1000);
    let room = json_len(&s) / 2;
    let fitted = fit(s.clone(), MAX_OBJECT_BYTES - room);
    assert!(json_len(&fitted) <= room);
    assert!(fitted.members_truncated);
    let plan = fitted.plan.as_ref().expect("plan kept");
    assert!(plan.truncated);
    let n = fitted.members.len();
    assert!(n > 0 && n < MAX_LISTED, "{n}");
    assert_eq!(
        (plan.create.len(), plan.update.len(), plan.prune.len()),
        (n, n, n)
    );
    // The first entries are kept, messages untouched, and one entry more would not fit.
    assert_eq!(fitted.members[..], s.members[..n]);
    assert_eq!(fitted.conditions, s.conditions);
    assert!(json_len(&with_lists(&s, n + 1)) > room);
    // Fitting again changes nothing (so an unchanged outcome writes nothing).
    assert_eq!(fit(fitted.clone(), MAX_OBJECT_BYTES - room), fitted);
}

#[test]
fn messages_are_cut_only_when_empty_lists_do_not_fit() {
    let s = big_status(100, 100, 30_000);
    let empty_lists = with_lists(&s, 0);
    let room = json_len(&empty_lists) - 10_000;
    let fitted = fit(s.clone(), MAX_OBJECT_BYTES - room);
    assert!(json_len(&fitted) <= room, "{}", json_len(&fitted));
    assert!(fitted.members.is_empty() && fitted.members_truncated);
    let ready = &fitted.conditions[0];
    assert!(ready.message.len() < 30_000 && ready.message.len() > MIN_MESSAGE);
    assert!(ready.message.ends_with('…'), "cut messages say so");
    assert!(
        s.conditions[0]
            .message
            .starts_with(ready.message.trim_end_matches('…'))
    );
    assert_eq!(ready.reason, "ApplyFailed", "the reason is never cut");
    assert_eq!(fit(fitted.clone(), MAX_OBJECT_BYTES - room), fitted);
}

#[test]
fn a_spec_too_large_for_any_status_leaves_the_smallest_status() {
    let s = big_status(MAX_LISTED, MAX_LISTED, 30_000);
    let fitted = fit(s, MAX_OBJECT_BYTES + 1);
    assert!(fitted.members.is_empty() && fitted.members_truncated);
    let plan = fitted.plan.expect("plan");
    assert!(plan.create.is_empty() && plan.truncated);
    for c in &fitted.conditions {
        assert!(
            c.message.len() <= MIN_MESSAGE + '…'.len_utf8(),
            "{}",
            c.message
        );
    }
    assert_eq!(fitted.last_error.map(|e| e.len()), Some(MIN_MESSAGE + 3));
}

#[test]
fn largest_finds_the_boundary() {
    for limit in 0..20 {
        assert_eq!(largest(19, |n| n <= limit), limit);
    }
    assert_eq!(largest(0, |_| false), 0);
    assert_eq!(largest(1000, |n| n <= 5000), 1000);
}

#[test]
fn a_spec_is_measured_once_per_generation() {
    let sizes = SpecSizes::default();
    let measured = std::cell::Cell::new(0);
    let measure = |n: usize| {
        measured.set(measured.get() + 1);
        n
    };
    let p = crate::applyset::ParentRef::applyset("t", "p");
    assert_eq!(
        sizes.get_or_measure(&p, Some("u"), Some(1), || measure(10)),
        10
    );
    assert_eq!(
        sizes.get_or_measure(&p, Some("u"), Some(1), || measure(99)),
        10
    );
    assert_eq!(
        measured.get(),
        1,
        "the same generation is not measured again"
    );
    assert_eq!(
        sizes.get_or_measure(&p, Some("u"), Some(2), || measure(20)),
        20
    );
    // Another object of the same name (re-created): measured again.
    assert_eq!(
        sizes.get_or_measure(&p, Some("v"), Some(2), || measure(30)),
        30
    );
    assert_eq!(sizes.get_or_measure(&p, None, Some(2), || measure(40)), 40);
    assert_eq!(sizes.get_or_measure(&p, None, Some(2), || measure(41)), 41);
    assert_eq!(measured.get(), 5, "without a UID, every time");
    // Forgotten by the parent's name, whatever its UID.
    assert_eq!(sizes.len(), 1);
    sizes.forget(&p);
    assert_eq!(sizes.len(), 0);
}

#[test]
fn when_to_look_again() {
    let failed = |reason| Report::failed(reason, String::new());
    assert_eq!(next(&failed(Reason::Suspended)), Next::AwaitChange);
    assert_eq!(next(&failed(Reason::ApplyFailed)), Next::Backoff);
    assert_eq!(next(&failed(Reason::SourceFailed)), Next::Backoff);
    assert_eq!(
        next(&failed(Reason::ValidationFailed)),
        Next::Interval { reset: false }
    );
    let retried = Report {
        retry: true,
        ..failed(Reason::ValidationFailed)
    };
    assert_eq!(next(&retried), Next::Backoff);
}

#[test]
fn progressing_marks_a_new_generation_only() {
    let done = next_status(
        &ApplySetStatus::default(),
        Some(1),
        "id",
        succeeded(Summary::default(), Vec::new(), "rev"),
    );
    assert_eq!(progressing(&done, Some(1), "id"), done);
    let marked = progressing(&done, Some(2), "id");
    let types: Vec<&str> = marked.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, [status::READY, status::RECONCILING]);
    // Ready stays as observed for generation 1.
    assert_eq!(marked.conditions[0].status, "True");
    assert_eq!(marked.conditions[0].observed_generation, Some(1));
    assert_eq!(marked.conditions[1].message, "reconciling generation 2");
    let fresh = progressing(&ApplySetStatus::default(), Some(1), "id");
    assert_eq!(fresh.conditions[0].status, "False");
    assert_eq!(fresh.conditions[0].reason, "Progressing");
    assert_eq!(fresh.conditions[0].observed_generation, None);
}

#[test]
fn the_crd_default_of_observed_generation_is_not_observed() {
    // A new set as the API server returns it: status defaulted to {observedGeneration: -1}.
    let new = ApplySetStatus {
        observed_generation: Some(crate::api::NOT_OBSERVED),
        ..ApplySetStatus::default()
    };
    let marked = progressing(&new, Some(1), "id");
    assert_eq!(
        marked.observed_generation,
        Some(crate::api::NOT_OBSERVED),
        "still not observed while the first reconcile runs"
    );
    // Ready describes no generation yet; Reconciling the one being reconciled. -1 is
    // never a condition's generation.
    assert_eq!(marked.conditions[0].type_, status::READY);
    assert_eq!(marked.conditions[0].reason, "Progressing");
    assert_eq!(marked.conditions[0].observed_generation, None);
    assert_eq!(marked.conditions[1].type_, status::RECONCILING);
    assert_eq!(marked.conditions[1].observed_generation, Some(1));
    // The outcome replaces it with the generation reconciled, and is then stable.
    let done = next_status(
        &marked,
        Some(1),
        "id",
        succeeded(Summary::default(), Vec::new(), "rev"),
    );
    assert_eq!(done.observed_generation, Some(1));
    assert!(
        done.conditions
            .iter()
            .all(|c| c.observed_generation == Some(1))
    );
    assert_eq!(progressing(&done, Some(1), "id"), done);
    let again = next_status(
        &done,
        Some(1),
        "id",
        succeeded(Summary::default(), Vec::new(), "rev"),
    );
    assert_eq!(again, done, "a no-op reconcile writes nothing");
}

#[test]
fn every_member_not_applied_is_listed_with_its_reason_most_serious_first() {
    let (conflict, owned) = conflict_and_owned();
    let all = [
        r("a", Outcome::Created),
        r("f", failed("f: broken")),
        r("c", conflict),
        r("o", owned),
    ];
    let report = apply_failure(&all, "rev").expect("a failure");
    let listed: Vec<(&str, &str, &str)> = report
        .failures
        .iter()
        .map(|f| {
            (
                f.member.name.as_str(),
                f.reason.as_str(),
                f.message.as_str(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("o", "OwnershipConflict", "o: owned"),
            ("c", "Conflict", "c: conflict"),
            ("f", "ApplyFailed", "f: broken"),
        ]
    );
    let status = next_status(&ApplySetStatus::default(), Some(1), "id", report);
    assert_eq!(status.failures.len(), 3);
    // A reconcile that applies everything clears them.
    let ok = succeeded(Summary::default(), vec![member("a")], "rev");
    assert!(next_status(&status, Some(1), "id", ok).failures.is_empty());
}

#[test]
fn failures_are_bounded_in_number_and_length() {
    let long = "x".repeat(2000);
    let all: Vec<MemberResult> = (0..30)
        .map(|i| r(&format!("m{i:02}"), failed(&long)))
        .collect();
    let listed = failures(&all);
    assert_eq!(listed.len(), MAX_FAILURES);
    assert!(listed.iter().all(|f| f.message.len() <= 512 + 3));
}

#[test]
fn the_revision_time_moves_only_when_the_attempted_revision_changes() {
    let first = next_status(
        &ApplySetStatus::default(),
        Some(1),
        "id",
        Report::failed(Reason::ApplyFailed, "x".into()).attempted("rev1"),
    );
    let at = first.last_attempted_revision_time.clone().expect("a time");
    let again = next_status(
        &first,
        Some(1),
        "id",
        succeeded(Summary::default(), vec![], "rev1"),
    );
    assert_eq!(again.last_attempted_revision_time, Some(at.clone()));
    let unattempted = next_status(
        &again,
        Some(1),
        "id",
        Report::failed(Reason::Suspended, "s".into()),
    );
    assert_eq!(unattempted.last_attempted_revision_time, Some(at));
    let next = next_status(
        &again,
        Some(2),
        "id",
        succeeded(Summary::default(), vec![], "rev2"),
    );
    assert_eq!(next.last_attempted_revision, Some("rev2".into()));
    assert!(next.last_attempted_revision_time.is_some());
}
