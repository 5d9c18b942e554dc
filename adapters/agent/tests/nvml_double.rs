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

    /// Every set the "driver" took, in order: (GPU, mW asked).
    fn sets(&self) -> Vec<(usize, u32)> {
        let text = std::fs::read_to_string(self.dir.path().join("sets")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
            })
            .collect()
    }

    /// Add a GPU line to the gpus file (a `reload` makes the driver list it).
    fn add_gpu(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("gpus"))
            .expect("gpus");
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
    /// The command line, to start the agent again on the same state directory.
    args: Vec<String>,
    double_dir: PathBuf,
    /// Holds the token, configuration and state directory.
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
        let args: Vec<String> = [
            "--config",
            &path(&config_file),
            "--hostname",
            "gpu-node",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            &token,
            "--state-dir",
            &path(&state),
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        let double_dir = double.dir.path().to_owned();
        let agent = Self::spawn(&args, &double_dir);
        let addr = agent.addr;
        Self {
            agent,
            addr,
            args,
            double_dir,
            _dir: dir,
        }
    }

    fn spawn(args: &[String], double_dir: &Path) -> Running {
        let lib = double_lib_dir();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Running::start_env(
            &args,
            &[
                ("LD_LIBRARY_PATH", lib.as_os_str()),
                ("FLEXGATE_NVML_DOUBLE", double_dir.as_os_str()),
            ],
        )
    }

    /// SIGKILL: no shutdown path runs; the caps stay where the agent left them.
    fn kill(&mut self) {
        self.agent.child.kill().expect("kill");
        self.agent.child.wait().expect("wait");
    }

    /// Start the agent again on the same state directory and configuration.
    fn start_again(&mut self) {
        self.agent = Self::spawn(&self.args, &self.double_dir);
        self.addr = self.agent.addr;
    }

    fn stderr(&self) -> String {
        self.agent.stderr.lock().expect("lock").clone()
    }

    fn get(&self, path: &str) -> Value {
        let r = request(self.addr, "GET", path, Some(CONTROL), None);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        r.json()
    }

    fn lease(&self, id: &str, caps: &[(usize, f64)]) -> Value {
        self.lease_for(id, caps, 60)
    }

    /// A lease of generation 1 that expires `ttl_s` from now.
    fn lease_for(&self, id: &str, caps: &[(usize, f64)], ttl_s: i64) -> Value {
        self.lease_gen(id, 1, caps, ttl_s)
    }

    fn lease_gen(&self, id: &str, generation: u64, caps: &[(usize, f64)], ttl_s: i64) -> Value {
        let gpus: Vec<Value> = caps
            .iter()
            .map(|(i, w)| json!({"uuid": uuid(*i), "cap_w": w}))
            .collect();
        let body = json!({
            "generation": generation,
            "expires_at": (Utc::now() + TimeDelta::seconds(ttl_s)).to_rfc3339(),
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

    fn delete(&self, id: &str) -> Value {
        let r = request(self.addr, "DELETE", &format!("/v1/leases/{id}"), Some(CONTROL), None);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    }
}

/// The UUID the double gives the GPU of its gpus file's line `i`.
fn uuid(i: usize) -> String {
    format!("GPU-d0ub1e00-0000-0000-0000-{i:012}")
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
    assert_eq!(
        agent.get("/v1/gpus")[0]["cap_unreliable"],
        false,
        "two corrections: still trusted"
    );
    // A third within 15 minutes: the cap is unreliable (the alert's threshold). The agent keeps
    // re-applying it, and says so, so the gateway stops counting on it.
    double.command("reload");
    eventually("a third correction counted", Duration::from_secs(5), || {
        drift("0") == Some(3.0)
    });
    let gpus = agent.get("/v1/gpus");
    assert_eq!(gpus[0]["cap_unreliable"], true, "{gpus}");
    assert_eq!(gpus[0]["drift_corrections"], 3, "{gpus}");
    assert_eq!(gpus[0]["limit_w"], 400.0, "re-applied all the same: {gpus}");
    assert_eq!(gpus[1]["cap_unreliable"], false, "{gpus}");
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
    assert_eq!(gpus[2]["mig_instances"], 2);
    assert!(gpus[0]["mig_instances"].is_null());
    assert_eq!(gpus[2]["gpu"]["max_mw"], 1_000_000);
    assert_eq!(
        double.limits(),
        vec![(700_000, 500_000), (700_000, 700_000), (1_000_000, 1_000_000)],
        "nothing was set"
    );
}

/// A failed restore as `/v1/health` reports it: (failures, status, next try).
type Retry = (u64, String, chrono::DateTime<Utc>);

/// The health fields the restore tests read: pending restores, and the failed ones' retries.
fn pending(agent: &OnDouble) -> (Vec<String>, Vec<Retry>) {
    let health = agent.get("/v1/health");
    let pending = health["pending_restore"]
        .as_array()
        .map(|p| p.iter().filter_map(|u| u.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let retries = health["restore_retries"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|r| {
                    Some((
                        r["failures"].as_u64()?,
                        r["status"].as_str()?.to_owned(),
                        r["next_attempt_at"].as_str()?.parse().ok()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    (pending, retries)
}

/// A restore the driver refuses on one GPU does not hold the other back: GPU 0 is restored at
/// once, GPU 1 stays pending and is retried with back-off (1 s, 2 s, 4 s, …, never every tick),
/// and once the permission is back it is restored within the back-off it had reached.
#[test]
fn a_refused_restore_backs_off_on_its_gpu_and_never_delays_the_other_gpus() {
    let double = Double::new("h100_sxm\nh100_sxm\n");
    let agent = OnDouble::start(&double);
    agent.lease("evt-1", &[(0, 400.0), (1, 400.0)]);
    double.command("permission 1 0");
    let (answer, took) = timed(|| agent.delete("evt-1"));
    assert!(took < Duration::from_secs(2), "DELETE took {took:?}");
    assert_eq!(answer["restored"][0]["status"], "ok", "{answer}");
    assert_eq!(answer["restored"][1]["status"], "no_permission", "{answer}");
    assert_eq!(double.limits()[0], (700_000, 700_000), "GPU 0 restored at once");
    assert_eq!(double.limits()[1], (400_000, 400_000));
    let (pending_now, retries) = pending(&agent);
    assert_eq!(pending_now, vec![uuid(1)]);
    assert_eq!(retries[0].0, 1);
    assert_eq!(retries[0].1, "no_permission");

    // 3.5 s of watchdog ticks (one a second): with back-off the tries are at 1 s and 3 s after
    // the first, not at every tick.
    std::thread::sleep(Duration::from_millis(3_500));
    let (_, retries) = pending(&agent);
    let failures = retries[0].0;
    assert!((2..=3).contains(&failures), "{failures} failures in 3.5 s: {retries:?}");
    assert_eq!(double.limits()[0], (700_000, 700_000));

    double.command("permission 1 1");
    let given_back = Instant::now();
    let (_, retries) = pending(&agent);
    let due = retries
        .first()
        .map_or(TimeDelta::zero(), |r| r.2 - Utc::now())
        .to_std()
        .unwrap_or_default();
    // Due at its next try, made at the watchdog's first tick from then on (1 s apart), with a
    // margin for a loaded machine.
    let bound = due + Duration::from_millis(2_500);
    eventually("GPU 1 restored at its next try", bound + Duration::from_secs(1), || {
        double.limits()[1] == (700_000, 700_000)
    });
    let took = given_back.elapsed();
    assert!(
        took <= bound,
        "restored {took:?} after the permission came back; the back-off said {due:?}"
    );
    eventually("nothing pending", Duration::from_secs(2), || {
        let (p, r) = pending(&agent);
        p.is_empty() && r.is_empty()
    });
    eprintln!("restore after the permission came back: {took:?} (next try was due in {due:?})");
}

/// A restore hung in the driver for 30 s on GPU 1 (its set never answers) costs the other
/// GPUs at most the call deadline: GPU 0 is restored at once, GPU 2 within the deadline, and
/// GPU 1 is reported pending and unresponsive until the call returns, then restored.
#[test]
fn a_restore_hung_on_one_gpu_does_not_hold_up_the_others() {
    let double = Double::new("h100_sxm\nh100_sxm\nh100_sxm\n");
    let agent = OnDouble::start(&double);
    agent.lease("evt-1", &[(0, 400.0), (1, 400.0), (2, 400.0)]);
    double.command("hang nvmlDeviceSetPowerManagementLimit 30 1");
    let (answer, took) = timed(|| agent.delete("evt-1"));
    assert!(took < Duration::from_millis(2_500), "DELETE took {took:?}: {answer}");
    assert_eq!(answer["restored"][1]["status"], "unresponsive", "{answer}");
    let limits = double.limits();
    assert_eq!(
        (limits[0], limits[2]),
        ((700_000, 700_000), (700_000, 700_000)),
        "GPUs 0 and 2 restored"
    );
    let (pending_now, _) = pending(&agent);
    assert_eq!(pending_now, vec![uuid(1)]);
    let health = agent.get("/v1/health");
    assert_eq!(health["unavailable_gpus"][0]["index"], 1, "{health}");
    eprintln!("DELETE with one GPU's restore hung: {took:?}");

    // The hung call returns (the set lands); the agent reads the restore back at its next try.
    double.command("hang none 0");
    eventually("GPU 1 restored and nothing pending", Duration::from_secs(10), || {
        double.limits()[1] == (700_000, 700_000) && pending(&agent).0.is_empty()
    });
}

/// The pre-event limit is the agent's to keep across its own death: killed (SIGKILL) while two
/// leases cap GPUs whose limits were not the default (550 W, 600 W), it finds one lease expired
/// when it starts again and restores that GPU's 550 W at start; the other lease is re-applied
/// and its GPU goes back to 600 W when it is deleted.
#[test]
fn pre_event_limits_survive_an_agent_kill_and_are_restored_by_the_restarted_agent() {
    let double = Double::new("h100_sxm\nh100_sxm\n");
    double.command("set 0 550000");
    double.command("set 1 600000");
    let mut agent = OnDouble::start(&double);
    let gpus = agent.get("/v1/gpus");
    assert_eq!(
        (gpus[0]["limit_w"].as_f64(), gpus[1]["limit_w"].as_f64()),
        (Some(550.0), Some(600.0))
    );
    agent.lease_for("short", &[(0, 400.0)], 3);
    let expired_by = Instant::now() + Duration::from_secs(3);
    agent.lease_for("long", &[(1, 450.0)], 120);
    let gpus = agent.get("/v1/gpus");
    assert_eq!(gpus[0]["pre_event_w"], 550.0, "{gpus}");
    assert_eq!(gpus[1]["pre_event_w"], 600.0, "{gpus}");

    agent.kill();
    assert_eq!(
        double.limits(),
        vec![(400_000, 400_000), (450_000, 450_000)],
        "the caps outlive the agent"
    );
    std::thread::sleep(expired_by.saturating_duration_since(Instant::now()) + Duration::from_millis(500));
    let started = Instant::now();
    agent.start_again();
    eventually("GPU 0 back at its saved 550 W", Duration::from_secs(3), || {
        double.limits()[0] == (550_000, 550_000)
    });
    eprintln!("restart to restore: {:?}", started.elapsed());
    assert_eq!(double.limits()[1], (450_000, 450_000), "the valid lease holds");
    let gpus = agent.get("/v1/gpus");
    assert_eq!(gpus[1]["pre_event_w"], 600.0, "{gpus}");
    assert!(gpus[0]["pre_event_w"].is_null(), "{gpus}");
    agent.delete("long");
    assert_eq!(double.limits()[1], (600_000, 600_000));
}

/// After a node reboot the driver came up with its own limits (its default, or what a boot
/// script set), so a pre-event limit saved before the reboot is stale: the restarted agent
/// sees another boot id, writes no saved value back, re-reads the pre-event limit of the GPU a
/// valid lease still holds, and says so in /v1/health.
#[test]
fn after_a_node_reboot_no_stale_pre_event_limit_is_written() {
    let double = Double::new("h100_sxm\nh100_sxm\n");
    double.command("set 0 550000");
    double.command("set 1 550000");
    let boot = tempfile::tempdir().expect("dir");
    let boot_id = boot.path().join("boot_id");
    std::fs::write(&boot_id, "11111111-aaaa-4bbb-8ccc-000000000001\n").expect("boot id");
    let config = format!("boot_id_file = {:?}\n", boot_id.to_str().expect("utf-8"));
    let mut agent = OnDouble::start_with(&double, &config);
    agent.lease_for("long", &[(0, 400.0)], 120);
    agent.lease_for("short", &[(1, 400.0)], 3);
    let expired_by = Instant::now() + Duration::from_secs(3);
    assert!(
        agent.get("/v1/health")["warnings"]
            .as_array()
            .is_some_and(Vec::is_empty)
    );
    agent.kill();

    // The node reboots: the driver starts at its defaults, a boot script sets GPU 0 to 600 W,
    // and Linux gives the boot a new id.
    double.command("reload");
    double.command("set 0 600000");
    std::fs::write(&boot_id, "22222222-aaaa-4bbb-8ccc-000000000002\n").expect("boot id");
    std::thread::sleep(expired_by.saturating_duration_since(Instant::now()) + Duration::from_millis(500));
    let sets_before = double.sets().len();
    agent.start_again();
    eventually("the held GPU capped again", Duration::from_secs(3), || {
        double.limits()[0] == (400_000, 400_000)
    });
    std::thread::sleep(Duration::from_millis(1_500));
    let health = agent.get("/v1/health");
    let warnings = health["warnings"].to_string();
    assert!(warnings.contains("rebooted") && warnings.contains("stale"), "{health}");
    assert!(
        health["pending_restore"].as_array().is_some_and(Vec::is_empty),
        "{health}"
    );
    assert_eq!(double.limits()[1], (700_000, 700_000), "GPU 1 keeps the driver's limit");
    let written: Vec<(usize, u32)> = double.sets()[sets_before..].to_vec();
    assert!(
        written.iter().all(|(_, mw)| *mw != 550_000),
        "a stale pre-event limit was written: {written:?}"
    );
    let gpus = agent.get("/v1/gpus");
    assert_eq!(gpus[0]["pre_event_w"], 600.0, "re-read after the reboot: {gpus}");
    assert!(gpus[1]["pre_event_w"].is_null(), "{gpus}");
    assert!(agent.stderr().contains("rebooted"), "logged");
    agent.delete("long");
    assert_eq!(
        double.limits()[0],
        (600_000, 600_000),
        "the limit after the reboot, not 550 W"
    );
    assert!(double.sets().iter().skip(sets_before).all(|(_, mw)| *mw != 550_000));
}

/// A limit the driver reads back outside the GPU's own constraints (5 kW on a 700 W GPU, or
/// 100 W under a 200 W minimum) is refused with a reason and never confirmed or saved as a
/// pre-event limit; a GPU whose constraints cannot be right (a minimum of 0) is left out at
/// start, with the reason.
#[test]
fn a_limit_outside_the_gpus_constraints_is_refused_and_never_confirmed() {
    let double = Double::new("h100_sxm\nh100_sxm\nh100_sxm\n");
    double.command("constraints 2 0 700000");
    let agent = OnDouble::start(&double);
    let health = agent.get("/v1/health");
    assert_eq!(health["gpus"], 2, "{health}");
    assert_eq!(health["unavailable_gpus"][0]["index"], 2, "{health}");
    let reason = health["unavailable_gpus"][0]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("cannot be right"), "{reason}");

    let answer = agent.lease("evt-1", &[(0, 400.0)]);
    assert_eq!(answer["applied"][0]["status"], "ok", "{answer}");
    double.command("set 0 5000000");
    eventually("the 5 kW limit refused in /v1/gpus", Duration::from_secs(5), || {
        let gpus = agent.get("/v1/gpus");
        gpus[0]["limit_w"].is_null()
            && gpus[0]["error"]
                .as_str()
                .is_some_and(|e| e.contains("outside the GPU's constraints"))
    });
    // Re-sent under a new generation: not confirmed.
    let answer = agent.lease_gen("evt-1", 2, &[(0, 400.0)], 60);
    assert_eq!(answer["applied"][0]["status"], "implausible_reading", "{answer}");
    assert!(answer["applied"][0]["applied_w"].is_null(), "{answer}");

    // A GPU reading under its minimum: a lease on it is refused, no pre-event limit saved.
    double.command("set 1 100000");
    let sets_before = double.sets().len();
    let answer = agent.lease("evt-2", &[(1, 400.0)]);
    assert_eq!(answer["applied"][0]["status"], "implausible_reading", "{answer}");
    let gpus = agent.get("/v1/gpus");
    assert!(gpus[1]["pre_event_w"].is_null(), "{gpus}");
    assert!(gpus[1]["held_by"].as_array().is_some_and(Vec::is_empty), "{gpus}");
    assert!(
        !double.sets()[sets_before..].iter().any(|(gpu, _)| *gpu == 1),
        "nothing written on GPU 1"
    );
}

/// The driver's GPU count changes under a lease: GPU 1 falls off (the count drops and GPU 2
/// becomes NVML index 1). The agent addresses GPUs by UUID, so GPU 2 keeps its own cap and
/// never takes GPU 1's; at its readiness check it reports GPU 1 lost (unavailable, warned), a
/// lease on it answers gpu_lost; a GPU that appears later is reported, never adopted.
#[test]
fn a_gpu_count_that_changes_under_a_lease_is_noticed_and_never_confirmed() {
    let double = Double::new("h100_sxm\nh100_sxm\nh100_sxm\n");
    let agent = OnDouble::start_with(&double, "readiness_check_s = 1\n");
    agent.lease("evt-1", &[(0, 300.0), (1, 350.0), (2, 450.0)]);
    double.command("vanish 1");
    eventually("GPU 1 reported gone", Duration::from_secs(5), || {
        let health = agent.get("/v1/health");
        health["unavailable_gpus"][0]["index"] == 1
            && health["unavailable_gpus"][0]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("no longer listed"))
            && health["warnings"].to_string().contains("no longer listed")
    });
    let gpus = agent.get("/v1/gpus");
    assert!(gpus[1]["limit_w"].is_null(), "{gpus}");
    assert!(
        gpus[1]["error"].as_str().is_some_and(|e| e.contains("no longer lists")),
        "{gpus}"
    );
    let answer = agent.lease("evt-2", &[(1, 300.0)]);
    assert_eq!(answer["applied"][0]["status"], "gpu_lost", "{answer}");

    // A driver reload resets every limit and lists a fourth GPU: the caps go back on GPUs 0
    // and 2, each its own (an agent addressing NVML indices would write GPU 1's 350 W on
    // GPU 2); the new GPU is reported and left alone.
    double.add_gpu("b200");
    double.command("reload");
    eventually("the caps re-applied by UUID", Duration::from_secs(5), || {
        let l = double.limits();
        l[0] == (300_000, 300_000) && l[2] == (450_000, 450_000)
    });
    assert!(
        !double.sets().iter().any(|(gpu, mw)| *gpu == 2 && *mw == 350_000),
        "GPU 1's cap written on GPU 2: {:?}",
        double.sets()
    );
    eventually("the new GPU reported, not adopted", Duration::from_secs(5), || {
        agent.get("/v1/health")["warnings"]
            .to_string()
            .contains(&format!("{} that the agent did not take charge of", uuid(3)))
    });
    let health = agent.get("/v1/health");
    assert_eq!(health["gpus"], 3, "{health}");
    assert_eq!(agent.get("/v1/gpus").as_array().map(Vec::len), Some(3));
    assert_eq!(double.limits()[3], (1_000_000, 1_000_000), "the new GPU untouched");
}

/// A GPU in MIG mode has one power limit for all its instances: two jobs on two instances of
/// the same GPU, each under its own lease (500 W and 400 W), share the lower cap; when one
/// ends the other's cap holds; when both end the pre-event limit (650 W here) comes back.
#[test]
fn mig_jobs_share_one_gpus_cap() {
    let double = Double::new("h100_sxm mig=2\nh100_sxm\n");
    double.command("set 0 650000");
    let agent = OnDouble::start(&double);
    let gpus = agent.get("/v1/gpus");
    assert_eq!(gpus[0]["mig_instances"], 2, "{gpus}");
    assert!(
        gpus[1].get("mig_instances").is_none_or(Value::is_null),
        "MIG off: {gpus}"
    );

    let a = agent.lease("job-a", &[(0, 500.0)]);
    assert_eq!(a["applied"][0]["status"], "ok", "{a}");
    assert_eq!(double.limits()[0], (500_000, 500_000));
    let b = agent.lease("job-b", &[(0, 400.0)]);
    assert_eq!(b["applied"][0]["status"], "ok", "{b}");
    assert_eq!(
        double.limits()[0],
        (400_000, 400_000),
        "the lower cap serves both instances"
    );
    let gpus = agent.get("/v1/gpus");
    assert_eq!(gpus[0]["held_by"], json!(["job-a", "job-b"]), "{gpus}");
    assert_eq!(gpus[0]["pre_event_w"], 650.0, "{gpus}");

    agent.delete("job-b");
    assert_eq!(double.limits()[0], (500_000, 500_000), "job-a's cap holds");
    agent.delete("job-a");
    assert_eq!(double.limits()[0], (650_000, 650_000), "the pre-event limit");

    // Instances made while the agent runs are seen.
    double.command("mig 0 3");
    eventually("three instances", Duration::from_secs(3), || {
        agent.get("/v1/gpus")[0]["mig_instances"] == 3
    });
}
