//! The real `flexgate-agent` binary on its real NVML code path, through the dynamic loader, on
//! the NVML test double (`tests/nvml_double/`, built by `tests/peers/setup.sh --only
//! nvml-double`): a test double for a driver that cannot run here. These are the behaviours
//! the agent has right on it today; the faults it does not yet survive are issue 31's.

mod common;

use chrono::{TimeDelta, Utc};
use common::{CONTROL, Running, request, write_token};
use serde_json::{Value, json};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the setup script builds the double.
fn double_lib_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/peers/nvml-double");
    assert!(
        dir.join("libnvidia-ml.so.1").exists(),
        "{} is missing: run `bash tests/peers/setup.sh --only nvml-double` (the README test command does)",
        dir.join("libnvidia-ml.so.1").display()
    );
    dir
}

/// One double's scripting directory.
struct Double {
    dir: tempfile::TempDir,
}

impl Double {
    fn new(gpus: &str) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("gpus"), gpus).expect("gpus");
        std::fs::write(dir.path().join("commands"), "").expect("commands");
        Self { dir }
    }

    fn command(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("commands"))
            .expect("commands");
        writeln!(f, "{line}").expect("append");
    }

    /// What the "driver" holds: (requested mW, enforced mW) per GPU.
    fn limits(&self) -> Vec<(u32, u32)> {
        let text = std::fs::read_to_string(self.dir.path().join("state")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let f: Vec<u32> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
                (f.len() >= 3).then(|| (f[1], f[2]))
            })
            .collect()
    }
}

/// The agent binary running on `double`, its NVML backend loaded from the double's library.
struct OnDouble {
    agent: Running,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl OnDouble {
    fn start(double: &Double) -> Self {
        Self::start_with(double, "")
    }

    /// With `config` as the agent's configuration file.
    fn start_with(double: &Double, config: &str) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let token = write_token(dir.path());
        let state = dir.path().join("agent-state");
        let config_file = dir.path().join("agent.toml");
        std::fs::write(&config_file, config).expect("config");
        let path = |p: &Path| p.to_str().expect("utf-8 path").to_string();
        let (config_file, state) = (path(&config_file), path(&state));
        let lib = double_lib_dir();
        let args = [
            "--config",
            &config_file,
            "--hostname",
            "gpu-node",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            &token,
            "--state-dir",
            &state,
        ];
        let agent = Running::start_env(
            &args,
            &[
                ("LD_LIBRARY_PATH", lib.as_os_str()),
                ("FLEXGATE_NVML_DOUBLE", double.dir.path().as_os_str()),
            ],
        );
        let addr = agent.addr;
        Self { agent, addr, _dir: dir }
    }

    fn get(&self, path: &str) -> Value {
        let r = request(self.addr, "GET", path, Some(CONTROL), None);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        r.json()
    }

    fn lease(&self, id: &str, caps: &[(usize, f64)]) -> Value {
        let gpus: Vec<Value> = caps
            .iter()
            .map(|(i, w)| json!({"uuid": format!("GPU-d0ub1e00-0000-0000-0000-{i:012}"), "cap_w": w}))
            .collect();
        let body = json!({
            "generation": 1,
            "expires_at": (Utc::now() + TimeDelta::seconds(60)).to_rfc3339(),
            "gpus": gpus,
            "restore": "pre_event",
        })
        .to_string();
        let r = request(
            self.addr,
            "PUT",
            &format!("/v1/leases/{id}"),
            Some(CONTROL),
            Some(&body),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    }
}

fn eventually(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_agent_reads_each_models_constraints_caps_and_restores_through_nvml() {
    let double = Double::new("h100_sxm\nh200_sxm\nb200\n");
    let agent = OnDouble::start(&double);
    let health = agent.get("/v1/health");
    assert_eq!(health["gpu_backend"], "nvml", "{health}");
    assert_eq!(health["gpus"], 3, "{health}");
    let gpus = agent.get("/v1/gpus");
    let row = |i: usize, field: &str| gpus[i][field].as_f64().unwrap_or(f64::NAN);
    assert_eq!(gpus[0]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(gpus[2]["name"], "NVIDIA B200");
    assert_eq!(
        (row(0, "min_w"), row(0, "max_w"), row(0, "default_w")),
        (200.0, 700.0, 700.0)
    );
    assert_eq!(
        (row(2, "min_w"), row(2, "max_w"), row(2, "default_w")),
        (200.0, 1000.0, 1000.0)
    );

    let answer = agent.lease("evt-1", &[(0, 400.0), (2, 600.0)]);
    assert!(
        answer["applied"]
            .as_array()
            .is_some_and(|g| g.iter().all(|c| c["status"] == "ok")),
        "{answer}"
    );
    assert_eq!(
        double.limits(),
        vec![(400_000, 400_000), (700_000, 700_000), (600_000, 600_000)]
    );
    let r = request(agent.addr, "DELETE", "/v1/leases/evt-1", Some(CONTROL), None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        double.limits(),
        vec![(700_000, 700_000), (700_000, 700_000), (1_000_000, 1_000_000)],
        "the pre-lease limits are restored"
    );
}

#[test]
fn a_driver_reload_is_reapplied_an_out_of_band_limit_shows_and_a_refused_set_says_so() {
    let double = Double::new("h100_sxm\nh100_sxm\nh100_sxm\n");
    let agent = OnDouble::start(&double);
    agent.lease("evt-1", &[(0, 400.0)]);
    // The driver reloads (persistence off): every limit back to its default; the agent's
    // watchdog sets the cap again, and counts each re-application per GPU (the alert
    // FlexgateAgentCapDrift watches it). The double applies a command at its next call, so the
    // count, not the double's state file, says when the reload was seen.
    let drift = |gpu: &str| {
        let metrics = request(agent.addr, "GET", "/metrics", Some(CONTROL), None).body;
        let label = format!("gpu=\"{gpu}\"");
        metrics
            .lines()
            .find(|l| l.starts_with("flexgate_agent_drift_corrections_total{") && l.contains(&label))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    assert_eq!(drift("0"), Some(0.0));
    double.command("reload");
    eventually("the reload seen and the cap re-applied", Duration::from_secs(5), || {
        drift("0") == Some(1.0)
    });
    assert_eq!(double.limits()[0], (400_000, 400_000), "the cap holds again");
    double.command("reload");
    eventually("a second correction counted", Duration::from_secs(5), || {
        drift("0") == Some(2.0)
    });
    assert_eq!(double.limits()[0], (400_000, 400_000), "the cap holds again");
    assert_eq!(drift("1"), Some(0.0), "no lease holds GPU 1: nothing to correct");
    // A limiter outside the agent holds GPU 1 at 500 W: the agent reports what is enforced.
    double.command("oob 1 500000");
    eventually("the out-of-band limit in /v1/gpus", Duration::from_secs(5), || {
        let gpus = agent.get("/v1/gpus");
        gpus[1]["enforced_w"] == 500.0 && gpus[1]["limit_w"] == 700.0
    });
    // The driver refuses a set on GPU 2: the answer says so, per GPU.
    double.command("permission 2 0");
    let answer = agent.lease("evt-2", &[(2, 300.0)]);
    assert_eq!(answer["applied"][0]["status"], "no_permission", "{answer}");
    assert_eq!(double.limits()[2], (700_000, 700_000), "nothing was set");
    assert!(
        !agent.agent.stderr.lock().expect("lock").contains("panicked"),
        "{}",
        agent.agent.stderr.lock().expect("lock")
    );
}

/// A cap is confirmed by reading it back, not by the set's answer: a driver that answers
/// success and changes nothing, or that raises the limit to a minimum of its own, gives
/// `not_applied` with the limit it reads; a restore the driver ignores stays pending and is
/// retried until it holds.
#[test]
fn a_set_without_effect_or_raised_by_the_driver_is_not_applied_and_a_restore_retries_until_it_holds() {
    let double = Double::new("h100_sxm\nh100_sxm\n");
    let agent = OnDouble::start(&double);
    double.command("ignore_set 0 1");
    double.command("clamp 1 500000");
    let answer = agent.lease("evt-1", &[(0, 400.0), (1, 400.0)]);
    assert_eq!(answer["applied"][0]["status"], "not_applied", "{answer}");
    assert_eq!(answer["applied"][0]["applied_w"], 700.0, "{answer}");
    assert_eq!(answer["applied"][1]["status"], "not_applied", "{answer}");
    assert_eq!(answer["applied"][1]["applied_w"], 500.0, "{answer}");

    // A cap that holds, then a restore the driver ignores: the GPU stays at the cap until the
    // driver takes the restore, and then it is restored without anyone asking again.
    let double = Double::new("h100_sxm\n");
    let agent = OnDouble::start(&double);
    let answer = agent.lease("evt-2", &[(0, 400.0)]);
    assert_eq!(answer["applied"][0]["status"], "ok", "{answer}");
    double.command("ignore_set 0 1");
    let r = request(agent.addr, "DELETE", "/v1/leases/evt-2", Some(CONTROL), None);
    assert_eq!(r.status, 200, "{}", r.body);
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(double.limits()[0], (400_000, 400_000), "the driver ignored the restore");
    let health = agent.get("/v1/health");
    assert_eq!(
        health["pending_restore"],
        json!(["GPU-d0ub1e00-0000-0000-0000-000000000000"]),
        "a pending restore is reported: {health}"
    );
    double.command("ignore_set 0 0");
    eventually("the restore retried until it holds", Duration::from_secs(5), || {
        double.limits()[0] == (700_000, 700_000)
    });
}

/// One GPU lost at start (`NVML_ERROR_GPU_IS_LOST`) leaves the agent serving the others and
/// saying which one it serves without: the caps it could leave on them must stay restorable.
#[test]
fn a_gpu_lost_at_start_leaves_the_agent_serving_the_others() {
    let double = Double::new("h200_sxm\nh200_sxm\nh200_sxm\n");
    double.command("lost 1");
    let agent = OnDouble::start(&double);
    let health = agent.get("/v1/health");
    assert_eq!(health["gpus"], 2, "{health}");
    assert_eq!(health["unavailable_gpus"][0]["index"], 1, "{health}");
    let reason = health["unavailable_gpus"][0]["reason"].as_str().unwrap_or("");
    assert!(reason.to_lowercase().contains("lost"), "{reason}");
    let gpus = agent.get("/v1/gpus");
    let indexes: Vec<u64> = gpus
        .as_array()
        .map(|g| g.iter().filter_map(|g| g["index"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(indexes, vec![0, 2], "the lost GPU is not offered to the gateway");
    let answer = agent.lease("evt-1", &[(2, 350.0)]);
    assert_eq!(answer["applied"][0]["status"], "ok", "{answer}");
    assert_eq!(double.limits()[2], (350_000, 350_000));
}

/// Times `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

/// Every NVML call on one GPU hangs for 30 s: the agent's health, leases on the other GPUs,
/// renewals and expiry keep their usual times, the hung GPU is reported unresponsive (a lease
/// on it answers `unresponsive` within the call deadline), and the node is not stalled.
#[test]
fn a_call_hung_for_30_s_on_one_gpu_leaves_the_api_the_leases_and_the_other_gpus_answering() {
    let double = Double::new("h100_sxm\nh100_sxm\nh100_sxm\n");
    let agent = OnDouble::start(&double);
    // A short lease on GPU 0, to expire (and be restored) while GPU 1 hangs.
    let body = json!({
        "generation": 1,
        "expires_at": (Utc::now() + TimeDelta::seconds(4)).to_rfc3339(),
        "gpus": [{"uuid": "GPU-d0ub1e00-0000-0000-0000-000000000000", "cap_w": 400}],
        "restore": "pre_event",
    })
    .to_string();
    let r = request(agent.addr, "PUT", "/v1/leases/short", Some(CONTROL), Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    let expires = Instant::now() + Duration::from_secs(4);
    double.command("hang nvmlDevice 30 1");
    let limit = Duration::from_millis(2_500);

    let (health, took) = timed(|| agent.get("/v1/health"));
    assert!(took < limit, "/v1/health took {took:?}: {health}");
    let (gpus, took) = timed(|| agent.get("/v1/gpus"));
    assert!(took < limit, "/v1/gpus took {took:?}: {gpus}");
    let (answer, took) = timed(|| agent.lease("other", &[(2, 450.0)]));
    assert!(took < limit, "a lease on another GPU took {took:?}");
    assert_eq!(answer["applied"][0]["status"], "ok", "{answer}");
    let (answer, took) = timed(|| agent.lease("hung", &[(1, 450.0)]));
    assert!(took < limit, "a lease on the hung GPU took {took:?}");
    assert_eq!(answer["applied"][0]["status"], "unresponsive", "{answer}");
    let renew = json!({"expires_at": (Utc::now() + TimeDelta::seconds(60)).to_rfc3339()}).to_string();
    let (r, took) = timed(|| {
        request(
            agent.addr,
            "POST",
            "/v1/leases/other/renew",
            Some(CONTROL),
            Some(&renew),
        )
    });
    assert!(took < limit, "a renewal took {took:?}");
    assert_eq!(r.status, 200, "{}", r.body);
    let health = agent.get("/v1/health");
    let unresponsive: Vec<u64> = health["unavailable_gpus"]
        .as_array()
        .map(|u| u.iter().filter_map(|u| u["index"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(unresponsive, vec![1], "{health}");
    let metrics = request(agent.addr, "GET", "/metrics", Some(CONTROL), None).body;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("flexgate_agent_gpus_unavailable") && l.ends_with(" 1")),
        "{metrics}"
    );
    // The short lease on GPU 0 expires on time and its GPU is restored.
    eventually("GPU 0 restored at its lease's expiry", Duration::from_secs(12), || {
        double.limits()[0] == (700_000, 700_000)
    });
    assert!(
        Instant::now() < expires + Duration::from_secs(3),
        "restored {:?} after the expiry",
        Instant::now().saturating_duration_since(expires)
    );
    assert_eq!(double.limits()[2], (450_000, 450_000), "the other GPU's cap holds");
}

/// Readiness is the agent's state now, not its start-up self-test: a permission lost after start
/// flips it (with the reason), and regained flips it back; a GPU's persistence mode off is a
/// warning with the fix, which the agent never applies itself.
#[test]
fn a_permission_lost_after_start_flips_readiness_and_persistence_off_is_a_warning() {
    let double = Double::new("b200\nb200 persistence=0\n");
    let agent = OnDouble::start_with(&double, "readiness_check_s = 1\n");
    let health = agent.get("/v1/health");
    assert_eq!(health["ready"], true, "{health}");
    let warnings = health["warnings"].to_string();
    assert!(
        warnings.contains("GPU 1") && warnings.contains("nvidia-smi -pm 1"),
        "{health}"
    );
    assert!(!warnings.contains("GPU 0"), "{health}");

    double.command("permission 0 0");
    eventually("readiness lost", Duration::from_secs(5), || {
        let r = request(agent.addr, "GET", "/readyz", None, None);
        r.status == 503 && r.body.contains("no permission")
    });
    double.command("permission 0 1");
    double.command("persistence 1 1");
    eventually("readiness regained", Duration::from_secs(5), || {
        request(agent.addr, "GET", "/readyz", None, None).status == 200
    });
    eventually("the warning gone", Duration::from_secs(5), || {
        agent.get("/v1/health")["warnings"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });
}

/// Readings degrade field by field: a GPU whose energy counter fails still reports its power;
/// a power reading no GPU can draw (10 kW on a 700 W GPU) is refused, not passed on.
#[test]
fn a_missing_energy_counter_keeps_the_power_reading_and_an_absurd_power_reading_is_refused() {
    let double = Double::new("h100_sxm\nh100_sxm\n");
    double.command("no_energy 0 1");
    double.command("reading 1 10000000");
    let agent = OnDouble::start(&double);
    let gpus = agent.get("/v1/gpus");
    assert_eq!(gpus[0]["power_w"], 630.0, "{gpus}");
    assert!(gpus[0]["energy_mj"].is_null(), "{gpus}");
    assert!(
        gpus[1]["power_w"].is_null(),
        "an absurd reading is not passed on: {gpus}"
    );
    assert_eq!(gpus[1]["limit_w"], 700.0, "the limits still read: {gpus}");
}

/// `flexgate-agent device-check` reads the node and changes nothing: the driver and NVML
/// versions, each GPU's model, limits, range, power, persistence and MIG modes, and whether the
/// process could set limits; the same fields a site sees on a real node.
#[test]
fn the_device_check_reports_every_field_and_changes_nothing() {
    let double = Double::new("h100_sxm\nh200_sxm persistence=0\nb200 mig=2\n");
    double.command("oob 0 500000");
    let out = std::process::Command::new(common::BIN)
        .args(["device-check", "--json"])
        .env("LD_LIBRARY_PATH", double_lib_dir())
        .env("FLEXGATE_NVML_DOUBLE", double.dir.path())
        .env_remove("FLEXGATE_AGENT_TOKEN")
        .env_remove("FLEXGATE_AGENT_TOKEN_FILE")
        .output()
        .expect("device-check runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["driver_version"], "000.00-double", "{report}");
    assert!(
        report["can_set_limits"].as_str().is_some_and(|s| !s.is_empty()),
        "{report}"
    );
    let gpus = report["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 3);
    assert_eq!(gpus[0]["gpu"]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(
        (gpus[0]["limit_w"].as_f64(), gpus[0]["enforced_w"].as_f64()),
        (Some(700.0), Some(500.0))
    );
    assert_eq!(gpus[1]["persistence"], false);
    assert_eq!(gpus[2]["mig"], true);
    assert_eq!(gpus[2]["gpu"]["max_mw"], 1_000_000);
    assert_eq!(
        double.limits(),
        vec![(700_000, 500_000), (700_000, 700_000), (1_000_000, 1_000_000)],
        "nothing was set"
    );
}
