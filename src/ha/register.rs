//! A replica's registration: its name and URL under `replicas/{name}`, attached to its own
//! lease, so that a standby can tell clients where the leader is and two replicas cannot run
//! under one name.

use super::keys::Keys;
use flexgate_etcd::wire::{Compare, PutRequest, RangeRequest, RequestOp, TxnRequest};
use flexgate_etcd::{Client, EtcdError};
use std::time::Duration;

/// What a replica's registration says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Registration {
    /// Its API URL.
    pub url: Option<String>,
    /// When it registered.
    pub since: chrono::DateTime<chrono::Utc>,
    /// The last record in its ledger, as of its last renewal (for `flexgate ha status` and the
    /// replica-lag metric).
    #[serde(default)]
    pub applied_seq: u64,
}

/// Why a replica could not register.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// Another replica runs under this name.
    #[error(
        "another replica named {name:?} is running ({holder}); each replica of a site needs its own [ha] replica name. \
         If that replica is gone, its registration lapses within ha.term_ttl_s"
    )]
    Duplicate {
        /// The name.
        name: String,
        /// What the other registration says.
        holder: String,
    },
    /// etcd did not answer (the replica stays a standby and keeps trying).
    #[error(transparent)]
    Etcd(#[from] EtcdError),
}

/// Register `name` (with `url`) under a lease of `ttl`; wait up to `ttl` + 1 s for a previous
/// registration under the name to lapse (a replica restarted after a crash). Returns the lease,
/// which the caller keeps alive.
pub async fn register(
    client: &Client,
    keys: &Keys,
    name: &str,
    url: Option<&str>,
    ttl: Duration,
) -> Result<i64, RegisterError> {
    let value = serde_json::to_string(&Registration {
        url: url.map(str::to_string),
        since: crate::clock::wall_now(),
        applied_seq: 0,
    })
    .unwrap_or_default();
    let deadline = tokio::time::Instant::now() + ttl + Duration::from_secs(1);
    loop {
        let lease = client
            .grant(i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX))
            .await?;
        let key = keys.replica(name);
        let txn = TxnRequest {
            compare: vec![Compare::created_at(key.clone(), 0)],
            success: vec![RequestOp::RequestPut(PutRequest {
                key: key.clone(),
                value: value.clone().into_bytes(),
                lease: lease.id,
            })],
            failure: vec![RequestOp::RequestRange(RangeRequest {
                key,
                ..RangeRequest::default()
            })],
        };
        let answer = client.txn(&txn).await?;
        if answer.succeeded {
            return Ok(lease.id);
        }
        let _ = client.revoke(lease.id).await;
        if tokio::time::Instant::now() >= deadline {
            let holder = answer
                .ranges()
                .first()
                .and_then(|r| r.kvs.first())
                .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
                .unwrap_or_default();
            return Err(RegisterError::Duplicate {
                name: name.to_string(),
                holder,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Keep this replica's registration alive until `stop` resolves; register again when it lapsed
/// (etcd lost its quorum for longer than the TTL) or was never made (etcd was not reachable at
/// start). A duplicate found later is logged; the election still keeps one leader.
pub async fn keep(
    client: std::sync::Arc<Client>,
    keys: Keys,
    config: super::config::HaConfig,
    mut lease: Option<i64>,
    ledger: crate::ledger::LedgerReader,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let ttl = Duration::from_secs(config.term_ttl_s);
    let since = crate::clock::wall_now();
    loop {
        let alive = match lease {
            Some(id) => matches!(client.keep_alive(id).await, Ok(ttl) if ttl > 0),
            None => false,
        };
        if alive && let Some(id) = lease {
            let value = Registration {
                url: config.advertise_url.clone(),
                since,
                applied_seq: ledger.head().0,
            };
            let _ = client
                .put(
                    &keys.replica(&config.replica),
                    &serde_json::to_vec(&value).unwrap_or_default(),
                    id,
                )
                .await;
        }
        if !alive {
            lease = match register(&client, &keys, &config.replica, config.advertise_url.as_deref(), ttl).await {
                Ok(id) => Some(id),
                Err(e) => {
                    tracing::warn!("registering this replica: {e}");
                    None
                }
            };
        }
        tokio::select! {
            () = tokio::time::sleep(ttl / 3) => {}
            () = &mut stop => {
                if let Some(id) = lease {
                    let _ = client.revoke(id).await;
                }
                return;
            }
        }
    }
}
