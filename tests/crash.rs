//! Crash recovery with the real binary: `flexgate run` is killed with SIGKILL at random moments
//! while events arrive, over 20 rounds. After every restart, every acknowledged event is there,
//! the long event that is active keeps its caps, and at the end the hash chain verifies.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

use flexgate::http_client::request;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "crash-test-token";
const ROUNDS: usize = 20;

fn free_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], flexgate_etcd::testing::spare_port()))
}

fn start(data: &std::path::Path, addr: SocketAddr) -> Child {
    Command::new(env!("CARGO_BIN_EXE_flexgate"))
        .args([
            "run",
            "--data",
            data.to_str().expect("utf-8"),
            "--listen",
            &addr.to_string(),
        ])
        .env("FLEXGATE_API_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("flexgate run starts")
}

async fn wait_healthy(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(r) = request(addr, "GET", "/healthz", None, None).await
            && r.status == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the gateway did not become healthy on {addr}");
}

fn event(id: &str, kw: f64, duration: Option<u64>) -> Vec<u8> {
    let start = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    json!({"schema": "dr.event/1", "event_id": id, "revision": 1, "site": "site-1",
           "target": {"form": "ceiling", "point": "meter", "kw": kw},
           "window": {"start": start, "ramp_s": 0, "duration_s": duration, "recovery_s": 0}})
    .to_string()
    .into_bytes()
}

async fn json_get(addr: SocketAddr, path: &str) -> Value {
    let r = request(addr, "GET", path, None, None).await.expect("GET");
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().expect("dir");
    let mut acked: Vec<String> = Vec::new();
    let mut rng: u64 = 0x9E37_79B9;
    let mut next = |lo: u64, hi: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        lo + rng % (hi - lo)
    };

    for round in 0..ROUNDS {
        let addr = free_port();
        let mut child = start(dir.path(), addr);
        wait_healthy(addr).await;

        // Everything acknowledged before is still there.
        let events = json_get(addr, "/v1/events").await;
        let ids: Vec<String> = events
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["id"].as_str().map(str::to_string))
            .collect();
        for id in &acked {
            assert!(
                ids.contains(id),
                "round {round}: acknowledged event {id} lost after SIGKILL"
            );
        }

        if round == 0 {
            // A long event that stays active across every crash; its ceiling is low enough that
            // the planner must cap jobs.
            let status = json_get(addr, "/v1/status").await;
            let _ = status;
            let r = request(
                addr,
                "POST",
                "/v1/events",
                Some(TOKEN),
                Some(&event("long-event", 1.0, None)),
            )
            .await
            .expect("post");
            assert_eq!(r.status, 200, "{}", r.text());
            acked.push("long-event".into());
        } else {
            // The active event resumes with caps re-applied.
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let jobs = json_get(addr, "/v1/jobs").await;
                let capped = jobs
                    .as_array()
                    .is_some_and(|j| j.iter().any(|j| j["cap_w_per_gpu"].as_f64().unwrap_or(700.0) < 699.0));
                if capped {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "round {round}: caps not re-applied after restart"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }

        // Submit events until the kill.
        let kill_after = Duration::from_millis(next(50, 400));
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < kill_after {
            let id = format!("ev-{round}-{n}");
            n += 1;
            if let Ok(r) = request(
                addr,
                "POST",
                "/v1/events",
                Some(TOKEN),
                Some(&event(&id, 1e6, Some(60))),
            )
            .await
                && r.status == 200
            {
                acked.push(id);
            }
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }

    // Final check: one more start sees everything; then the chain verifies offline.
    let addr = free_port();
    let mut child = start(dir.path(), addr);
    wait_healthy(addr).await;
    let events = json_get(addr, "/v1/events").await;
    let held = events.as_array().map_or(0, Vec::len);
    assert!(held >= acked.len(), "{held} events held, {} acknowledged", acked.len());
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let verify = Command::new(env!("CARGO_BIN_EXE_flexgate"))
        .args(["log", "verify", "--data", dir.path().to_str().expect("utf-8")])
        .output()
        .expect("verify runs");
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stderr));
    eprintln!(
        "{} events acknowledged over {ROUNDS} SIGKILL rounds, none lost",
        acked.len()
    );
    assert!(
        acked.len() > ROUNDS,
        "events were acknowledged during the rounds: {}",
        acked.len()
    );
}
