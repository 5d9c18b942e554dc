//! Leader election, fencing and watches against a real three-member etcd cluster on 127.0.0.1.

use flexgate_etcd::testing::Cluster;
use flexgate_etcd::wire::{PutRequest, RequestOp, TxnRequest, prefix_end};
use flexgate_etcd::{Campaign, Client, Election, EtcdError, Term};
use std::time::{Duration, Instant};

const KEY: &str = "/flexgate/site-a/leader";

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    flexgate_etcd::testing::http()
}

fn client(cluster: &Cluster) -> Client {
    Client::new(http(), &cluster.endpoints(), Duration::from_secs(2)).expect("client")
}

fn won(c: Campaign) -> Term {
    match c {
        Campaign::Won(term) => term,
        Campaign::Lost(l) => panic!("expected to win, {} leads", l.name),
    }
}

/// Campaign every 100 ms until won or `within` has passed; a failure says what the last
/// campaign answered and what the members logged.
async fn campaign_until_won(cluster: &Cluster, election: &Election<'_>, within: Duration) -> (Term, Duration) {
    let started = Instant::now();
    loop {
        let last = match election.campaign().await {
            Ok(Campaign::Won(term)) => return (term, started.elapsed()),
            Ok(Campaign::Lost(leader)) => format!("lost to {} (epoch {})", leader.name, leader.epoch),
            Err(e) => e.to_string(),
        };
        assert!(
            started.elapsed() < within,
            "no term won in {within:?}; the last campaign: {last}\n{}",
            cluster.log_tails(15)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn one_replica_leads_the_other_sees_it_and_takes_over_with_a_higher_epoch_when_its_term_lapses() {
    let cluster = Cluster::start();
    let c = client(&cluster);
    let a = Election::new(&c, KEY, "gw-a", Duration::from_secs(2));
    let b = Election::new(&c, KEY, "gw-b", Duration::from_secs(2));

    let mut term_a = won(a.campaign().await.expect("campaign"));
    match b.campaign().await.expect("campaign") {
        Campaign::Lost(leader) => {
            assert_eq!(leader.name, "gw-a");
            assert_eq!(leader.epoch, term_a.epoch);
        }
        Campaign::Won(_) => panic!("two leaders"),
    }
    // Renewing keeps the term; a replica that wins again while its old key lives does not.
    assert!(a.renew(&mut term_a).await.expect("renew"));
    assert!(matches!(a.campaign().await.expect("campaign"), Campaign::Lost(_)));
    assert_eq!(
        b.leader().await.expect("read").map(|l| l.name),
        Some("gw-a".to_string())
    );

    // A stops renewing (paused, cut off): B leads once the lease lapses, under a higher epoch.
    let (term_b, waited) = campaign_until_won(&cluster, &b, Duration::from_secs(10)).await;
    assert!(term_b.epoch > term_a.epoch, "{} ≤ {}", term_b.epoch, term_a.epoch);
    assert!(
        waited <= Duration::from_secs(2) + Duration::from_secs(3),
        "took {waited:?}"
    );
    // A learns its term is over at its next renewal, and its conservative bound had already
    // told it to stop acting.
    assert!(!term_a.holds_at(Instant::now(), Duration::ZERO));
    assert!(!a.renew(&mut term_a).await.unwrap_or(false));

    // A write guarded by A's term is refused by etcd; B's goes through.
    let write = |term: &Term, value: &str| TxnRequest {
        compare: vec![a.guard(term)],
        success: vec![RequestOp::RequestPut(PutRequest {
            key: b"/flexgate/site-a/ledger/head".to_vec(),
            value: value.as_bytes().to_vec(),
            lease: 0,
        })],
        failure: Vec::new(),
    };
    assert!(!c.txn(&write(&term_a, "from-a")).await.expect("txn").succeeded);
    assert!(c.txn(&write(&term_b, "from-b")).await.expect("txn").succeeded);
    let (_, head) = c.get(b"/flexgate/site-a/ledger/head").await.expect("read");
    assert_eq!(head.map(|kv| kv.value), Some(b"from-b".to_vec()));

    // A clean resignation hands over at once.
    b.resign(&term_b).await.expect("resign");
    let (term_a2, waited) = campaign_until_won(&cluster, &a, Duration::from_secs(5)).await;
    assert!(term_a2.epoch > term_b.epoch);
    assert!(
        waited < Duration::from_secs(1),
        "a resignation should not wait for the TTL: {waited:?}"
    );
}

#[tokio::test]
async fn elections_survive_one_member_down_and_wait_without_a_quorum_then_recover_alone() {
    let mut cluster = Cluster::start();
    let c = client(&cluster);
    let a = Election::new(&c, KEY, "gw-a", Duration::from_secs(2));

    cluster.kill_member(0);
    // The survivors elect a leader among themselves first (etcd's own work, timed by its
    // election timeout); from then on a campaign must get through the member that is down.
    cluster.wait_healthy(Duration::from_secs(30));
    let (mut term, _) = campaign_until_won(&cluster, &a, Duration::from_secs(10)).await;
    assert!(a.renew(&mut term).await.expect("renew with two of three members"));

    // No quorum: the calls fail with a transient error, and nothing is decided.
    cluster.kill_member(1);
    let started = Instant::now();
    let err = loop {
        match a.renew(&mut term).await {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "still answering without a quorum"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(err.is_transient(), "{err}");
    assert!(matches!(a.campaign().await, Err(e) if e.is_transient()));

    // The quorum returns; a campaign succeeds again without anyone's help.
    cluster.start_member(0);
    cluster.start_member(1);
    cluster.wait_healthy(Duration::from_secs(30));
    let (again, _) = campaign_until_won(&cluster, &a, Duration::from_secs(15)).await;
    assert!(again.epoch > term.epoch);
}

#[tokio::test]
async fn a_watch_reports_every_change_of_a_prefix_in_order_from_a_revision() {
    let cluster = Cluster::start();
    let c = client(&cluster);
    let prefix = b"/flexgate/site-a/ledger/".to_vec();
    let first = c.put(b"/flexgate/site-a/ledger/0001", b"one", 0).await.expect("put");
    c.put(b"/flexgate/site-a/ledger/0002", b"two", 0).await.expect("put");
    c.put(b"/flexgate/site-a/other", b"not watched", 0).await.expect("put");
    let mut watch = c
        .watch(&prefix, &prefix_end(&prefix), first.revision)
        .await
        .expect("watch");
    c.delete(b"/flexgate/site-a/ledger/0001", b"").await.expect("delete");
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < 3 {
        assert!(Instant::now() < deadline, "saw only {seen:?}");
        let message = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("a message in time")
            .expect("readable")
            .expect("the stream stays open");
        for e in message.events {
            seen.push((
                format!("{:?}", e.kind),
                String::from_utf8_lossy(&e.kv.key).into_owned(),
                e.kv.value,
            ));
        }
    }
    assert_eq!(
        seen,
        vec![
            (
                "Put".to_string(),
                "/flexgate/site-a/ledger/0001".to_string(),
                b"one".to_vec()
            ),
            (
                "Put".to_string(),
                "/flexgate/site-a/ledger/0002".to_string(),
                b"two".to_vec()
            ),
            (
                "Delete".to_string(),
                "/flexgate/site-a/ledger/0001".to_string(),
                Vec::new()
            ),
        ]
    );
    let range = c.range(&prefix, &prefix_end(&prefix), 0).await.expect("range");
    assert_eq!(range.kvs.len(), 1);
}

#[tokio::test]
async fn endpoints_are_checked_and_an_unreachable_cluster_is_an_error_that_names_it() {
    assert!(matches!(
        Client::new(http(), &[], Duration::from_secs(1)),
        Err(EtcdError::NoEndpoints)
    ));
    let e = Client::new(http(), &["127.0.0.1:2379".to_string()], Duration::from_secs(1)).expect_err("no scheme");
    assert!(e.to_string().contains("http(s)://host:port"), "{e}");
    // Nothing listens on these ports.
    let dead: Vec<String> = (0..2)
        .map(|_| {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("port");
            format!("http://127.0.0.1:{port}")
        })
        .collect();
    let c = Client::new(http(), &dead, Duration::from_secs(1)).expect("valid endpoints");
    let e = c.get(b"k").await.expect_err("unreachable");
    assert!(matches!(e, EtcdError::Unreachable { tried: 2, .. }), "{e}");
    assert!(e.is_transient());
}
