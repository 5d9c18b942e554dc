//! The replicated ledger against a real three-member etcd on 127.0.0.1: a leader's batches are
//! durable in etcd before they are answered, a follower holds the same chain, nothing is
//! acknowledged without a quorum, and a deposed leader adds nothing to the chain.

mod common;

use flexgate::ha::follow::catch_up;
use flexgate::ha::keys::{ANCHOR_EVERY, Keys};
use flexgate::ha::quorum::EtcdQuorum;
use flexgate::ledger::{Ledger, LedgerError, NewRecord, RecordKind};
use flexgate_etcd::testing::Cluster;
use flexgate_etcd::{Campaign, Client, Election, Term};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(2);

fn client(cluster: &Cluster) -> Arc<Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Arc::new(
        Client::new(
            flexgate_etcd::testing::http(),
            &cluster.endpoints(),
            Duration::from_secs(2),
        )
        .expect("client"),
    )
}

async fn win(election: &Election<'_>) -> Term {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Campaign::Won(term)) = election.campaign().await {
            return term;
        }
        assert!(Instant::now() < deadline, "no term won");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn lead(client: &Arc<Client>, keys: &Keys, ledger: &Ledger, term: &Term) {
    let quorum = EtcdQuorum::new(
        client.clone(),
        keys.clone(),
        term.epoch,
        tokio::runtime::Handle::current(),
        Duration::from_secs(3),
    )
    .await
    .expect("quorum");
    ledger.lead(Box::new(quorum)).await.expect("leads");
}

fn record(i: usize, padding: usize) -> NewRecord {
    NewRecord::new(RecordKind::Measurement, json!({"i": i, "pad": "x".repeat(padding)}))
}

async fn append_many(ledger: &Ledger, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let ledger = ledger.clone();
            tokio::spawn(async move { ledger.append(record(i, 10)).await })
        })
        .collect();
    for t in tasks {
        t.await.expect("task").expect("appended");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_batches_are_committed_in_etcd_and_a_follower_holds_the_same_chain() {
    let cluster = Cluster::start();
    let client = client(&cluster);
    let keys = Keys::new("/flexgate", "site-a");
    let election = Election::new(&client, keys.leader(), "gw-a", TTL);
    let term = win(&election).await;
    let (dir_a, dir_b) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let leader = Ledger::open(dir_a.path()).await.expect("open");
    lead(&client, &keys, &leader, &term).await;

    append_many(&leader, 300).await;
    // One record larger than a chunk (a plan for thousands of jobs): written in several.
    leader.append(record(300, 1_300_000)).await.expect("a large record");
    assert_eq!(leader.len(), 301);
    leader.verify().expect("the leader's chain verifies");

    let follower = Ledger::open(dir_b.path()).await.expect("open");
    follower.follow().await.expect("follows");
    assert_eq!(catch_up(&client, &keys, &follower).await.expect("catches up"), 301);
    assert_eq!(follower.head(), leader.head());
    follower.verify().expect("the follower's chain verifies");
    let epochs: Vec<Option<u64>> = follower.iter_from(1).map(|r| r.expect("record").epoch).collect();
    assert!(
        epochs
            .iter()
            .all(|e| *e == Some(u64::try_from(term.epoch).expect("epoch")))
    );
    // The head and the anchors in etcd are the chain's.
    let (_, head) = client.get(&keys.head()).await.expect("read");
    let head: serde_json::Value = serde_json::from_slice(&head.expect("a head").value).expect("json");
    assert_eq!(head["seq"], 301);
    assert_eq!(head["hash"], leader.head().1);
    let (_, anchor) = client.get(&keys.anchor(ANCHOR_EVERY)).await.expect("read");
    let record_256 = leader.get(ANCHOR_EVERY).expect("read").expect("record");
    assert_eq!(anchor.map(|kv| kv.value), Some(record_256.hash.into_bytes()));
    // Catching up again takes in nothing new.
    assert_eq!(catch_up(&client, &keys, &follower).await.expect("again"), 301);
    leader.close().await.expect("close");
    follower.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_quorum_nothing_is_acknowledged_and_with_it_back_the_chain_goes_on() {
    let mut cluster = Cluster::start();
    let client = client(&cluster);
    let keys = Keys::new("/flexgate", "site-a");
    let election = Election::new(&client, keys.leader(), "gw-a", Duration::from_secs(30));
    let term = win(&election).await;
    let dir = tempfile::tempdir().expect("dir");
    let leader = Ledger::open(dir.path()).await.expect("open");
    lead(&client, &keys, &leader, &term).await;
    append_many(&leader, 5).await;

    cluster.kill_member(0);
    leader
        .append(record(5, 10))
        .await
        .expect("one member down changes nothing");
    cluster.kill_member(1);
    let head = leader.head();
    let refused = leader.append(record(6, 10)).await;
    assert!(matches!(refused, Err(LedgerError::NotDurable { .. })), "{refused:?}");
    assert_eq!(leader.head(), head, "nothing refused was written");

    cluster.start_member(0);
    cluster.start_member(1);
    cluster.wait_healthy(Duration::from_secs(30));
    // The refused batch may still have been applied once the quorum returned (etcd had it in
    // flight): then taking in what is durable brings it in, recorded though never acknowledged.
    let deadline = Instant::now() + Duration::from_secs(15);
    let appended = loop {
        match leader.append(record(7, 10)).await {
            Ok(a) => break a,
            // Halted, or following: take in what is durable and lead again, as the replica's
            // supervisor does.
            Err(LedgerError::NotDurable { .. } | LedgerError::NotLeader) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if catch_up(&client, &keys, &leader).await.is_ok() {
                    lead(&client, &keys, &leader, &term).await;
                }
            }
            Err(e) => panic!("after the quorum returned: {e}"),
        }
    };
    let refused_landed = appended.seq == head.0 + 2;
    assert!(
        appended.seq == head.0 + 1 || refused_landed,
        "no gap: {} after {}",
        appended.seq,
        head.0
    );
    if refused_landed {
        // Recorded, never acknowledged: the sender retried it (under its dedup key).
        let late = leader.get(head.0 + 1).expect("read").expect("record");
        assert_eq!(late.body["i"], 6);
    }
    leader.verify().expect("one chain");
    let follower_dir = tempfile::tempdir().expect("dir");
    let follower = Ledger::open(follower_dir.path()).await.expect("open");
    follower.follow().await.expect("follows");
    catch_up(&client, &keys, &follower).await.expect("catches up");
    assert_eq!(follower.head(), leader.head());
    leader.close().await.expect("close");
    follower.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_adds_nothing_to_the_chain_and_catches_up_as_a_follower() {
    let cluster = Cluster::start();
    let client = client(&cluster);
    let keys = Keys::new("/flexgate", "site-a");
    let a = Election::new(&client, keys.leader(), "gw-a", TTL);
    let b = Election::new(&client, keys.leader(), "gw-b", TTL);
    let (dir_a, dir_b) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let ledger_a = Ledger::open(dir_a.path()).await.expect("open");
    let ledger_b = Ledger::open(dir_b.path()).await.expect("open");
    ledger_b.follow().await.expect("follows");

    let term_a = win(&a).await;
    lead(&client, &keys, &ledger_a, &term_a).await;
    append_many(&ledger_a, 5).await;

    // A stops renewing (paused); B wins the next term, catches up and leads.
    let term_b = win(&b).await;
    assert!(term_b.epoch > term_a.epoch);
    assert_eq!(catch_up(&client, &keys, &ledger_b).await.expect("catches up"), 5);
    lead(&client, &keys, &ledger_b, &term_b).await;
    append_many(&ledger_b, 3).await;

    // A wakes up and writes: refused, and it follows from then on.
    let refused = ledger_a.append(record(99, 10)).await;
    assert!(matches!(refused, Err(LedgerError::NotLeader)), "{refused:?}");
    assert_eq!(ledger_a.len(), 5);
    assert_eq!(catch_up(&client, &keys, &ledger_a).await.expect("catches up"), 8);
    assert_eq!(ledger_a.head(), ledger_b.head());
    ledger_a.verify().expect("one chain, with the term change in it");
    let epochs: Vec<Option<u64>> = ledger_a.iter_from(1).map(|r| r.expect("record").epoch).collect();
    let (ea, eb) = (u64::try_from(term_a.epoch).ok(), u64::try_from(term_b.epoch).ok());
    assert_eq!(epochs, vec![ea, ea, ea, ea, ea, eb, eb, eb]);
    ledger_a.close().await.expect("close");
    ledger_b.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_rewritten_and_rehashed_on_one_replica_verifies_alone_but_not_against_the_anchors() {
    let cluster = Cluster::start();
    let client = client(&cluster);
    let keys = Keys::new("/flexgate", "site-1");
    let election = Election::new(&client, keys.leader(), "gw-a", Duration::from_secs(30));
    let term = win(&election).await;
    let dir = tempfile::tempdir().expect("dir");
    let real = dir.path().join("real");
    let forged = dir.path().join("forged");
    let leader = Ledger::open(&real.join("ledger")).await.expect("open");
    lead(&client, &keys, &leader, &term).await;
    append_many(&leader, 300).await;
    leader.close().await.expect("close");
    // A forger writes a whole other chain of the same length on one replica's disk: every
    // record hashed properly, so it verifies on its own.
    let other = Ledger::open(&forged.join("ledger")).await.expect("open");
    for i in 0..300 {
        other.append(record(i, 11)).await.expect("append");
    }
    other.close().await.expect("close");
    let config = dir.path().join("ha.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\nsite = \"site-1\"\n\n[ha]\nreplica = \"auditor\"\nendpoints = {:?}\n",
            cluster.endpoints()
        ),
    )
    .expect("config");
    let verify = |data: &std::path::Path, anchors: bool| {
        let mut args = vec!["log", "verify", "--data", data.to_str().expect("utf-8")];
        if anchors {
            args.extend(["--anchors", config.to_str().expect("utf-8")]);
        }
        std::process::Command::new(env!("CARGO_BIN_EXE_flexgate"))
            .args(&args)
            .output()
            .expect("flexgate log verify")
    };
    let ok = verify(&real, true);
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{out}{}", String::from_utf8_lossy(&ok.stderr));
    assert!(out.contains("2 committed hashes agree"), "{out}");
    assert!(
        verify(&forged, false).status.success(),
        "the forged chain verifies alone"
    );
    let caught = verify(&forged, true);
    let err = String::from_utf8_lossy(&caught.stderr);
    assert!(!caught.status.success());
    assert!(
        err.contains("FAILED against the committed anchors") && err.contains("record 256"),
        "{err}"
    );
}

/// The leader deletes from etcd the batches every registered replica holds, keeping the newest
/// records in any case; a replica that lags holds pruning back, one that kept up carries on,
/// and one that comes back from before the trim point is told it needs a copy of another
/// replica's data; the anchors stay; etcd's history is compacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_every_replica_holds_are_pruned_from_etcd_and_a_replica_left_behind_is_told_why() {
    use flexgate::ha::follow::FollowError;
    use flexgate::ha::register::Registration;
    use flexgate::ha::retention::prune_once;
    let cluster = Cluster::start();
    let client = client(&cluster);
    let keys = Keys::new("/flexgate", "site-t");
    let election = Election::new(&client, keys.leader(), "gw-a", Duration::from_secs(30));
    let term = win(&election).await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let leader = Ledger::open(dirs[0].path()).await.expect("open");
    lead(&client, &keys, &leader, &term).await;
    // Batches of 50 at most (concurrent appends are batched together).
    for _ in 0..30 {
        append_many(&leader, 50).await;
    }
    let follower = Ledger::open(dirs[1].path()).await.expect("open");
    follower.follow().await.expect("follows");
    assert_eq!(catch_up(&client, &keys, &follower).await.expect("catches up"), 1_500);
    let register = |name: &'static str, applied_seq: u64| {
        let client = client.clone();
        let keys = keys.clone();
        async move {
            let value = serde_json::to_vec(&Registration {
                url: None,
                since: flexgate::clock::wall_now(),
                applied_seq,
            })
            .expect("json");
            client.put(&keys.replica(name), &value, 0).await.expect("register");
        }
    };
    register("gw-a", 1_500).await;
    register("gw-b", 1_500).await;
    register("gw-slow", 100).await;
    let batches = async || {
        client
            .range(&keys.batch(1), &keys.batches_end(), 0)
            .await
            .expect("range")
            .kvs
            .iter()
            .map(|kv| serde_json::from_slice::<flexgate::ha::keys::BatchIndex>(&kv.value).expect("index"))
            .collect::<Vec<_>>()
    };
    let before = batches().await;
    assert_eq!(before.first().map(|b| b.first_seq), Some(1));

    // A replica at record 100 holds pruning back to it.
    let first = prune_once(&client, &keys, 1_000, 0).await.expect("trims");
    assert!(first.first_kept <= 101, "{first:?}");
    let left = batches().await;
    assert!(
        left.iter().any(|b| b.first_seq <= 101 && 101 <= b.last_seq),
        "record 101 is kept"
    );

    // Gone (its registration lapsed): the newest 1000 records stay, the rest goes.
    client.delete(&keys.replica("gw-slow"), &[]).await.expect("deregister");
    let second = prune_once(&client, &keys, 1_000, first.revision)
        .await
        .expect("trims and compacts");
    assert!(
        second.batches > 0 && second.first_kept > 101 && second.first_kept <= 501,
        "{second:?}"
    );
    let left = batches().await;
    assert!(left.iter().all(|b| b.first_seq >= second.first_kept), "{left:?}");
    assert_eq!(left.first().map(|b| b.first_seq), Some(second.first_kept));
    let (_, anchor) = client.get(&keys.anchor(ANCHOR_EVERY)).await.expect("read");
    assert!(anchor.is_some(), "the anchors outlive their batches");

    // The follower that kept up carries on.
    append_many(&leader, 10).await;
    assert_eq!(catch_up(&client, &keys, &follower).await.expect("carries on"), 1_510);
    assert_eq!(follower.head(), leader.head());
    // One that comes back with nothing is told what to do, and takes nothing in.
    let newcomer = Ledger::open(dirs[2].path()).await.expect("open");
    newcomer.follow().await.expect("follows");
    match catch_up(&client, &keys, &newcomer).await {
        Err(e @ FollowError::Pruned { have: 0, .. }) => {
            let message = e.to_string();
            assert!(message.contains("copy of a stopped replica's"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(newcomer.len(), 0);
    for ledger in [leader, follower, newcomer] {
        ledger.close().await.expect("close");
    }
}

/// `[ha] tls`: a replica reaches an etcd that serves https and requires client certificates
/// (mutual TLS), with the CA and its own certificate from files; without its certificate, or
/// trusting another CA, it reaches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_reaches_etcd_over_mutual_tls_and_without_its_certificate_it_does_not() {
    use flexgate::ha::config::{EtcdTls, HaConfig};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pki = tempfile::tempdir().expect("dir");
    common::pki::mint(pki.path());
    let cluster = Cluster::start_tls(flexgate_etcd::testing::ServerTls {
        ca_file: pki.path().join("ca.pem"),
        cert_file: pki.path().join("agent.pem"),
        key_file: pki.path().join("agent-key.pem"),
    });
    assert!(cluster.endpoints().iter().all(|e| e.starts_with("https://")));
    let config = |tls: EtcdTls| HaConfig {
        replica: "gw-a".into(),
        endpoints: cluster.endpoints(),
        advertise_url: None,
        term_ttl_s: 10,
        prefix: "/flexgate".into(),
        etcd_timeout_ms: 2_000,
        retain_records: 100_000,
        tls: Some(tls),
        user: None,
        password_file: None,
    };
    let mutual = config(EtcdTls {
        ca_file: pki.path().join("ca.pem"),
        cert_file: Some(pki.path().join("gateway.pem")),
        key_file: Some(pki.path().join("gateway-key.pem")),
    });
    mutual.validate(None).expect("valid");
    let client = Arc::new(mutual.client().expect("a client"));
    let keys = Keys::new("/flexgate", "site-tls");
    let election = Election::new(&client, keys.leader(), "gw-a", TTL);
    let term = win(&election).await;
    let dir = tempfile::tempdir().expect("dir");
    let leader = Ledger::open(dir.path()).await.expect("open");
    lead(&client, &keys, &leader, &term).await;
    append_many(&leader, 5).await;
    assert_eq!(leader.len(), 5, "records committed through etcd over TLS");
    leader.close().await.expect("close");

    let without_certificate = config(EtcdTls {
        ca_file: pki.path().join("ca.pem"),
        cert_file: None,
        key_file: None,
    })
    .client()
    .expect("a client");
    assert!(
        without_certificate.get(&keys.head()).await.is_err(),
        "no client certificate"
    );
    let wrong_ca = config(EtcdTls {
        ca_file: pki.path().join("other-ca.pem"),
        cert_file: Some(pki.path().join("gateway.pem")),
        key_file: Some(pki.path().join("gateway-key.pem")),
    })
    .client()
    .expect("a client");
    assert!(
        wrong_ca.get(&keys.head()).await.is_err(),
        "a member its CA did not sign"
    );
}
