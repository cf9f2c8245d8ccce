//! The sets page's filter, sort, paging and row text.

use applyset_operator::{
    applyset::ParentRef,
    view::{SetSummary, SourceView, State},
};

use super::*;

fn summary(parent: ParentRef, state: State) -> SetSummary {
    SetSummary {
        uid: "uid".into(),
        resource_version: "1".into(),
        state,
        as_dependency: Ok(()),
        ..SetSummary::unobserved(parent)
    }
}

fn wanted(query: &[(&str, &str)]) -> Wanted {
    let mut q = SetsQuery::default();
    for (name, value) in query {
        let field = match *name {
            "ns" => &mut q.ns,
            "q" => &mut q.q,
            "state" => &mut q.state,
            "sort" => &mut q.sort,
            "page" => &mut q.page,
            other => panic!("no field {other}"),
        };
        *field = (*value).to_string();
    }
    Wanted::from_query(&q)
}

/// 2,500 ApplySets over 5 namespaces in rotating states, and 3 ClusterApplySets.
fn many() -> Vec<Arc<SetSummary>> {
    let mut sets: Vec<Arc<SetSummary>> = (0..2500)
        .map(|i| {
            let mut s = summary(
                ParentRef::applyset(format!("ns-{}", i % 5), format!("set-{i:05}")),
                STATES[i % STATES.len()],
            );
            s.members = i64::try_from(i % 17).expect("small");
            s.created = Some(
                Timestamp::from_second(1_700_000_000 + i64::try_from(i).expect("small"))
                    .expect("time"),
            );
            Arc::new(s)
        })
        .collect();
    for name in ["infra", "base", "web-cluster"] {
        sets.push(Arc::new(summary(ParentRef::cluster(name), State::Ready)));
    }
    sets
}

fn names(l: &Listing<'_>) -> Vec<String> {
    l.rows.iter().map(|s| key(&s.parent)).collect()
}

#[test]
fn the_query_is_understood_and_unknown_values_mean_the_default() {
    let w = wanted(&[
        ("ns", "team"),
        ("q", " Web "),
        ("state", "failing"),
        ("sort", "members"),
        ("page", "3"),
    ]);
    assert_eq!(w.scope, Scope::Namespace("team".into()));
    assert_eq!(w.q, "web");
    assert_eq!(w.state, Some(State::Failing));
    assert_eq!(w.sort, Sort::Members);
    assert_eq!(w.page, 3);
    let w = wanted(&[
        ("ns", "cluster"),
        ("state", "broken"),
        ("sort", "x"),
        ("page", "-1"),
    ]);
    assert_eq!(w.scope, Scope::Cluster);
    assert_eq!(w.state, None);
    assert_eq!(w.sort, Sort::State);
    assert_eq!(w.page, 1);
    assert_eq!(wanted(&[("page", "0")]).page, 1);
    assert_eq!(wanted(&[]).scope, Scope::All);
    for s in STATES {
        assert_eq!(wanted(&[("state", s.as_str())]).state, Some(s));
    }
}

#[test]
fn search_is_a_substring_of_the_key() {
    assert!(key_contains("team-a", "web", "web"));
    assert!(key_contains("team-a", "web", "team"));
    assert!(key_contains("team-a", "web", "a/w"));
    assert!(key_contains("team-a", "web", "team-a/web"));
    assert!(key_contains("team-a", "web", "/"));
    assert!(key_contains("cluster", "infra", "cluster/inf"));
    assert!(!key_contains("team-a", "web", "b/w"));
    assert!(!key_contains("team-a", "web", "a/e"));
    assert!(!key_contains("team-a", "web", "team-a/web/"));
    assert!(!key_contains("team-a", "web", "db"));
    // Against the obvious definition, over every substring of a key.
    let k = "team-a/web";
    for i in 0..k.len() {
        for j in i..=k.len() {
            assert!(key_contains("team-a", "web", &k[i..j]), "{}", &k[i..j]);
        }
    }
}

#[test]
fn the_default_order_is_failing_first_then_namespace_and_name() {
    let sets = vec![
        Arc::new(summary(ParentRef::applyset("b", "ok"), State::Ready)),
        Arc::new(summary(ParentRef::applyset("a", "ok"), State::Ready)),
        Arc::new(summary(ParentRef::cluster("c"), State::Suspended)),
        Arc::new(summary(ParentRef::applyset("z", "wait"), State::Waiting)),
        Arc::new(summary(ParentRef::applyset("z", "bad"), State::Failing)),
        Arc::new(summary(ParentRef::applyset("a", "bad"), State::Failing)),
        Arc::new(summary(ParentRef::applyset("a", "gone"), State::Deleting)),
        Arc::new(summary(
            ParentRef::applyset("a", "busy"),
            State::Reconciling,
        )),
    ];
    let l = select(&sets, &wanted(&[]));
    assert_eq!(
        names(&l),
        [
            "a/bad",
            "z/bad",
            "z/wait",
            "a/busy",
            "a/gone",
            "cluster/c",
            "a/ok",
            "b/ok"
        ]
    );
    assert_eq!(
        l.counts,
        Counts {
            total: 8,
            ready: 2,
            failing: 2,
            waiting: 1,
            suspended: 1,
            reconciling: 1,
            deleting: 1,
        }
    );
    let by_name = select(&sets, &wanted(&[("sort", "name")]));
    assert_eq!(
        names(&by_name),
        [
            "a/bad",
            "z/bad",
            "a/busy",
            "cluster/c",
            "a/gone",
            "a/ok",
            "b/ok",
            "z/wait"
        ]
    );
    let by_namespace = select(&sets, &wanted(&[("sort", "namespace")]));
    assert_eq!(
        names(&by_namespace),
        [
            "a/bad",
            "a/busy",
            "a/gone",
            "a/ok",
            "b/ok",
            "z/bad",
            "z/wait",
            "cluster/c"
        ]
    );
}

#[test]
fn members_and_age_sorts() {
    let mut big = summary(ParentRef::applyset("a", "big"), State::Ready);
    big.members = 10;
    big.created = Some(Timestamp::from_second(100).expect("time"));
    let mut small = summary(ParentRef::applyset("a", "small"), State::Ready);
    small.members = 1;
    small.created = Some(Timestamp::from_second(200).expect("time"));
    let unknown = summary(ParentRef::applyset("a", "unknown"), State::Ready);
    let sets = vec![Arc::new(unknown), Arc::new(small), Arc::new(big)];
    assert_eq!(
        names(&select(&sets, &wanted(&[("sort", "members")]))),
        ["a/big", "a/small", "a/unknown"]
    );
    assert_eq!(
        names(&select(&sets, &wanted(&[("sort", "age")]))),
        ["a/small", "a/big", "a/unknown"]
    );
}

#[test]
fn filters_count_the_whole_filtered_list_and_page_it() {
    let sets = many();
    let all = select(&sets, &wanted(&[]));
    assert_eq!((all.counts.total, all.listed), (2503, 2503));
    assert_eq!(all.pages, 26);
    assert_eq!(all.rows.len(), PAGE_SIZE);
    assert_eq!((all.page, all.first), (1, 1));
    // The rows are the summaries themselves, not copies.
    assert!(
        all.rows
            .iter()
            .all(|r| sets.iter().any(|s| Arc::ptr_eq(s, r)))
    );

    let team = select(&sets, &wanted(&[("ns", "ns-1")]));
    assert_eq!(team.counts.total, 500);
    assert!(
        team.rows
            .iter()
            .all(|s| s.parent.namespace.as_deref() == Some("ns-1"))
    );
    let cluster = select(&sets, &wanted(&[("ns", "cluster")]));
    assert_eq!(
        names(&cluster),
        ["cluster/base", "cluster/infra", "cluster/web-cluster"]
    );
    let failing = select(&sets, &wanted(&[("state", "failing"), ("ns", "ns-0")]));
    // The state filter keeps the rows of that state; the bar still counts the namespace.
    let ns0 = select(&sets, &wanted(&[("ns", "ns-0")]));
    assert_eq!(failing.counts, ns0.counts);
    assert!(failing.listed > 0);
    assert_eq!(failing.listed, ns0.counts.failing);
    assert!(failing.rows.iter().all(|s| s.state == State::Failing));
    assert!(failing.counts.ready > 0);
    let search = select(&sets, &wanted(&[("q", "set-0001")]));
    assert_eq!(search.counts.total, 10);
    let search = select(&sets, &wanted(&[("q", "ns-3/set-0001")]));
    assert_eq!(search.counts.total, 2);

    // The last page, and a page past it shows the last one.
    let last = select(&sets, &wanted(&[("page", "26")]));
    assert_eq!(last.rows.len(), 3);
    assert_eq!(last.first, 2501);
    let past = select(&sets, &wanted(&[("page", "999")]));
    assert_eq!((past.page, past.rows.len()), (26, 3));
    // Every set appears on exactly one page.
    let mut seen: Vec<String> = (1..=26)
        .flat_map(|p| names(&select(&sets, &wanted(&[("page", &p.to_string())]))))
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 2503);

    let none = select(&sets, &wanted(&[("q", "nothing-like-this")]));
    assert_eq!((none.rows.len(), none.page, none.pages), (0, 1, 1));
    assert_eq!(none.counts, Counts::default());
}

#[test]
fn ten_thousand_sets_select_quickly() {
    let sets: Vec<Arc<SetSummary>> = (0..10_000)
        .map(|i| {
            Arc::new(summary(
                ParentRef::applyset(format!("ns-{}", i % 50), format!("set-{i:05}")),
                STATES[i % STATES.len()],
            ))
        })
        .collect();
    let started = std::time::Instant::now();
    let l = select(&sets, &wanted(&[("sort", "name"), ("page", "50")]));
    assert_eq!(l.rows.len(), PAGE_SIZE);
    assert!(
        started.elapsed() < std::time::Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn revisions_are_cut_short() {
    assert_eq!(
        short_revision("sha256:aaaa; git:main@sha1:0123456789abcdef0123456789abcdef01234567"),
        "git:main@sha1:0123456789ab"
    );
    assert_eq!(
        short_revision("sha256:0123456789abcdef0123"),
        "sha256:0123456789ab"
    );
    assert_eq!(
        short_revision("sha256:aa; configMap:team/cm@12345"),
        "configMap:team/cm@12345"
    );
    assert_eq!(short_revision(""), "");
}

#[test]
fn a_rows_text() {
    let now = Timestamp::from_second(10_000).expect("time");
    let mut s = summary(ParentRef::applyset("team-a", "web"), State::Waiting);
    s.ready = Some((
        "False".into(),
        "DependencyNotReady".into(),
        "dependency team-a/db is not ready".into(),
    ));
    s.waiting_for = Some((ParentRef::applyset("team-a", "db"), "Ready is False".into()));
    s.healthy = Some(("True".into(), "Healthy".into()));
    s.stalled = true;
    s.members = 4;
    s.pruned = 1;
    s.suspended = true;
    s.sources = vec![
        SourceView {
            kind: "git",
            location: "https://example.com/repo.git".into(),
            path: Some("./deploy".into()),
            reference: Some("main".into()),
        },
        SourceView {
            kind: "configMap",
            location: "extra".into(),
            path: None,
            reference: None,
        },
    ];
    s.last_applied_revision = Some("sha256:ab; git:main@sha1:0123456789abcdef0123".into());
    s.last_reconcile = Some(Timestamp::from_second(10_000 - 90).expect("time"));
    s.created = Some(Timestamp::from_second(10_000 - 7200).expect("time"));
    let r = Row::of(&s, now);
    assert_eq!(r.key, "team-a/web");
    assert_eq!(r.id, "team-a--web");
    assert_eq!((r.state, r.word), ("waiting", "Waiting"));
    assert_eq!(r.href, "/sets/team-a/web");
    assert_eq!(r.message, "waiting for team-a/db: Ready is False");
    assert_eq!(r.reason, "DependencyNotReady");
    assert_eq!(r.healthy, "True (Healthy) · Stalled");
    assert_eq!(r.source, "git https://example.com/repo.git ./deploy");
    assert_eq!(r.source_more, 1);
    assert_eq!(r.revision, "git:main@sha1:0123456789ab");
    assert_eq!(r.last_reconcile, "90s ago");
    assert_eq!(r.age, "120m");
    assert!(r.suspended && !r.cluster);

    let mut c = summary(ParentRef::cluster("infra"), State::Failing);
    c.ready = Some(("False".into(), "ApplyFailed".into(), "conflict".into()));
    let r = Row::of(&c, now);
    assert_eq!(
        (r.key.as_str(), r.id.as_str()),
        ("cluster/infra", "cluster--infra")
    );
    assert_eq!(r.href, "/clustersets/infra");
    assert_eq!(
        (r.reason.as_str(), r.message.as_str()),
        ("ApplyFailed", "conflict")
    );
    assert!(r.cluster);
    assert_eq!((r.last_reconcile.as_str(), r.age.as_str()), ("", ""));
    assert_eq!(r.source, "inline manifests");
}

#[test]
fn pager_links_keep_the_query() {
    let q = SetsQuery {
        ns: "team a".into(),
        q: "w&b".into(),
        state: String::new(),
        sort: "name".into(),
        page: "2".into(),
    };
    assert_eq!(page_href(&q, 3), "/?ns=team+a&q=w%26b&sort=name&page=3");
    assert_eq!(page_href(&q, 1), "/?ns=team+a&q=w%26b&sort=name");
    assert_eq!(page_href(&SetsQuery::default(), 1), "/");
    let links = pager(&q, 2, 3);
    let hrefs: Vec<Option<&str>> = links.iter().map(|l| l.href.as_deref()).collect();
    assert_eq!(
        hrefs,
        [
            Some("/?ns=team+a&q=w%26b&sort=name"),
            Some("/?ns=team+a&q=w%26b&sort=name"),
            Some("/?ns=team+a&q=w%26b&sort=name&page=3"),
            Some("/?ns=team+a&q=w%26b&sort=name&page=3"),
        ]
    );
    let only = pager(&q, 1, 1);
    assert!(only.iter().all(|l| l.href.is_none()));
}

#[test]
fn the_page_renders_rows_with_their_ids_and_escapes_tenant_text() {
    let now = Timestamp::from_second(10_000).expect("time");
    let mut s = summary(ParentRef::applyset("team-a", "web"), State::Failing);
    s.ready = Some((
        "False".into(),
        "ApplyFailed".into(),
        "<script>alert(1)</script>\"><img onerror=x>".into(),
    ));
    let page = SetsPage {
        chrome: Chrome {
            css: "/assets/x/app.css",
            js: "/assets/x/app.js",
            live_src: "/live?page=sets".into(),
            watched: "ApplySets of every namespace".into(),
            actions: false,
        },
        listed: true,
        errors: vec!["<b>forbidden</b>".into()],
        counts: Counts {
            total: 1,
            failing: 1,
            ..Counts::default()
        },
        total: 1,
        rows: vec![Row::of(&s, now)],
        q: "\"><x".into(),
        namespaces: namespace_choices(&[Arc::new(s.clone())], true, "team-a"),
        states: Vec::new(),
        sorts: Vec::new(),
        page: 1,
        pages: 1,
        first: 1,
        last: 1,
        pager: pager(&SetsQuery::default(), 1, 1),
        empty: None,
    };
    let text = page.render().expect("rendered");
    for want in [
        r#"<tr id="row-team-a--web" class="set-row state-failing" data-set="team-a/web">"#,
        r#"<td class="state">Failing</td>"#,
        r#"<a class="set-link" href="/sets/team-a/web">web</a>"#,
        r#"<span id="count-failing">1</span>"#,
        r#"<span id="count-scope" class="note" title="Every set of the namespace and search filters"#,
        r#"<tbody id="sets-body" data-live>"#,
        r#"<div id="summary" class="summary" data-live>"#,
        r#"<body data-live-src="/live?page=sets">"#,
        r#"id="watch-errors""#,
        r#"<option value="team-a" selected>team-a</option>"#,
        r#"<option value="cluster">ClusterApplySets</option>"#,
        "&#60;script&#62;alert(1)&#60;/script&#62;",
        "&#60;b&#62;forbidden&#60;/b&#62;",
    ] {
        assert!(text.contains(want), "{want} not in:\n{text}");
    }
    assert!(!text.contains("<script>alert"), "{text}");
    assert!(!text.contains("<img onerror"), "{text}");
    assert!(!text.contains("\"><x"), "{text}");
    assert!(!text.contains("style="), "{text}");
}
