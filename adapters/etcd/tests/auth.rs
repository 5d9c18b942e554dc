//! A real three-member etcd with its auth enabled (users, roles, a permission on the site's
//! prefix): a replica's client authenticates as its user, every call carries the member's token,
//! a token a restarted member has forgotten is replaced, and a wrong password is refused naming
//! the user, never showing the password.

use flexgate_etcd::testing::Cluster;
use flexgate_etcd::{Campaign, Client, Credentials, Election, EtcdError};
use serde_json::{Value, json};
use std::time::Duration;

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    flexgate_etcd::testing::http()
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// One call to etcd's auth API as an administrator would make it with etcdctl.
async fn admin(endpoint: &str, path: &str, body: Value, token: Option<&str>) -> Value {
    let mut request = http().post(format!("{endpoint}{path}")).json(&body);
    if let Some(token) = token {
        request = request.header("Authorization", token);
    }
    let response = request.send().await.expect("etcd answers");
    let status = response.status();
    let value: Value = response.json().await.expect("JSON");
    assert!(status.is_success(), "{path} {body}: {status} {value}");
    value
}

/// Users `root` and `flexgate` (read-write on `/flexgate/` only), then auth enabled.
async fn enable_auth(cluster: &Cluster) {
    let e = &cluster.endpoints()[0];
    admin(e, "/v3/auth/role/add", json!({"name": "root"}), None).await;
    admin(
        e,
        "/v3/auth/user/add",
        json!({"name": "root", "password": "root-pw-1234"}),
        None,
    )
    .await;
    admin(e, "/v3/auth/user/grant", json!({"user": "root", "role": "root"}), None).await;
    admin(e, "/v3/auth/role/add", json!({"name": "flexgate-sites"}), None).await;
    admin(
        e,
        "/v3/auth/role/grant",
        json!({"name": "flexgate-sites", "perm": {"permType": "READWRITE", "key": b64("/flexgate/"), "range_end": b64("/flexgate0")}}),
        None,
    )
    .await;
    admin(
        e,
        "/v3/auth/user/add",
        json!({"name": "flexgate", "password": "replica-pw-5678"}),
        None,
    )
    .await;
    admin(
        e,
        "/v3/auth/user/grant",
        json!({"user": "flexgate", "role": "flexgate-sites"}),
        None,
    )
    .await;
    admin(e, "/v3/auth/enable", json!({}), None).await;
}

fn client(cluster: &Cluster, password: Option<&str>) -> Client {
    let client = Client::new(http(), &cluster.endpoints(), Duration::from_secs(2)).expect("client");
    match password {
        Some(password) => client.with_credentials(Credentials {
            user: "flexgate".into(),
            password: password.into(),
        }),
        None => client,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_authenticates_as_its_user_and_keeps_working_when_a_member_forgets_its_token() {
    let mut cluster = Cluster::start();
    enable_auth(&cluster).await;

    // Without credentials, or with the wrong password: refused, the password never shown.
    let anonymous = client(&cluster, None);
    let refused = anonymous
        .put(b"/flexgate/site-a/x", b"1", 0)
        .await
        .expect_err("anonymous");
    assert!(!refused.is_transient(), "{refused}");
    let wrong = client(&cluster, Some("not-the-password"));
    let refused = wrong.get(b"/flexgate/site-a/x").await.expect_err("wrong password");
    let message = refused.to_string();
    assert!(
        matches!(refused, EtcdError::Refused { .. }) && message.contains("\"flexgate\""),
        "{message}"
    );
    assert!(!message.contains("not-the-password"), "{message}");

    // With them: writes, reads, a campaign (transactions and leases) and a watch.
    let replica = client(&cluster, Some("replica-pw-5678"));
    replica.put(b"/flexgate/site-a/x", b"1", 0).await.expect("put");
    let (_, kv) = replica.get(b"/flexgate/site-a/x").await.expect("get");
    assert_eq!(kv.map(|kv| kv.value), Some(b"1".to_vec()));
    let election = Election::new(
        &replica,
        b"/flexgate/site-a/leader".to_vec(),
        "gw-a",
        Duration::from_secs(5),
    );
    assert!(matches!(election.campaign().await.expect("campaign"), Campaign::Won(_)));
    let mut watch = replica.watch(b"/flexgate/site-a/x", &[], 0).await.expect("watch");
    let _ = watch.next().await.expect("the watch is confirmed");
    // Outside its role's prefix: refused by etcd's permissions.
    let denied = replica.put(b"/other/key", b"1", 0).await.expect_err("no permission");
    assert!(denied.to_string().contains("permission denied"), "{denied}");

    // Every member restarted: each forgets its tokens, and the client authenticates again.
    for i in 0..3 {
        cluster.kill_member(i);
        cluster.start_member(i);
        cluster.wait_healthy(Duration::from_secs(30));
    }
    let mut done = false;
    for _ in 0..50 {
        if replica.put(b"/flexgate/site-a/x", b"2", 0).await.is_ok() {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(done, "no write after the members restarted");
    let (_, kv) = replica.get(b"/flexgate/site-a/x").await.expect("get");
    assert_eq!(kv.map(|kv| kv.value), Some(b"2".to_vec()));
    assert!(
        !format!("{replica:?}").contains("replica-pw"),
        "the password stays out of Debug"
    );
}
