//! `deploy/slurm/prolog.sh` and `epilog.sh` run by `sh` (dash here) against the real agent
//! binary, as slurmd would run them: job start caps, job end restores, and an agent that is down
//! never fails the job.

mod common;

use chrono::{TimeDelta, Utc};
use common::{CONTROL, Running, request, write_token};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/slurm")
        .join(name)
}

fn run_hook(name: &str, env_file: &Path, job: &str, gpus: Option<&str>) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg(script(name))
        .env("FLEXGATE_AGENT_ENV", env_file)
        .env("SLURM_JOB_ID", job)
        .env_remove("SLURM_JOB_GPUS");
    if let Some(g) = gpus {
        cmd.env("SLURM_JOB_GPUS", g);
    }
    cmd.output().expect("sh runs")
}

fn curl_available() -> bool {
    Command::new("sh")
        .args(["-c", "command -v curl"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn prolog_caps_new_jobs_and_epilog_restores_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write_token(dir.path());
    let state = dir.path().join("state");
    let agent = Running::start(&[
        "--simulate",
        "--gpus",
        "4",
        "--hostname",
        "node-h",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        &token,
        "--state-dir",
        state.to_str().expect("utf-8"),
    ]);
    let env_file = dir.path().join("agent.env");
    std::fs::write(
        &env_file,
        format!(
            "# flexgate agent\nFLEXGATE_AGENT_URL=\"http://{}\"\nFLEXGATE_AGENT_TOKEN_FILE={token}\nFLEXGATE_HOOK_TIMEOUT=5\nFLEXGATE_JOB_TOKEN_DIR={}\nFLEXGATE_AGENT_BIN={}\n",
            agent.addr,
            dir.path().join("jobs").display(),
            common::BIN
        ),
    )
    .expect("env file");

    let lease = json!({
        "generation": 1,
        "expires_at": (Utc::now() + TimeDelta::minutes(10)).to_rfc3339(),
        "gpus": [{"uuid": "GPU-sim-node-h-0", "cap_w": 300}],
        "new_job_cap_w": 350,
    })
    .to_string();
    assert_eq!(
        request(agent.addr, "PUT", "/v1/leases/evt", Some(CONTROL), Some(&lease)).status,
        200
    );

    let out = run_hook("prolog.sh", &env_file, "9001", Some("1,2"));
    if !curl_available() {
        // The script must still let the job run, and say why nothing was sent.
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("curl not found"));
        return;
    }
    assert!(out.status.success(), "{out:?}");
    assert_eq!(agent.limits(), vec![300.0, 350.0, 350.0, 700.0]);
    let gpus = agent.gpus();
    assert_eq!(gpus[1].held_by, vec!["evt".to_owned()]);
    // The job got its own throughput token, readable by its user only, and the TaskProlog
    // hands it to the job's tasks.
    {
        use std::os::unix::fs::PermissionsExt;
        let file = dir.path().join("jobs/9001.token");
        let written = std::fs::read_to_string(&file).expect("the prolog wrote the job's token");
        let auth = flexgate_agent::auth::Auth::from_secrets(CONTROL, None).expect("tokens");
        assert_eq!(written.trim(), auth.job_token("9001"));
        let mode = std::fs::metadata(&file).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode, 0o400, "{mode:o}");
        let out = Command::new("sh")
            .arg(script("task-prolog.sh"))
            .env("FLEXGATE_JOB_TOKEN_DIR", dir.path().join("jobs"))
            .env("SLURM_JOB_ID", "9001")
            .output()
            .expect("sh runs");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!(
                "export FLEXGATE_JOB_TOKEN={}\nexport FLEXGATE_JOB_ID=9001\n",
                auth.job_token("9001")
            )
        );
        // A file that is not a token is never printed (it could be a command).
        std::fs::write(dir.path().join("jobs/666.token"), "$(reboot)\n").expect("write");
        let out = Command::new("sh")
            .arg(script("task-prolog.sh"))
            .env("FLEXGATE_JOB_TOKEN_DIR", dir.path().join("jobs"))
            .env("SLURM_JOB_ID", "666")
            .output()
            .expect("sh runs");
        assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    }

    // A job without GPUs: nothing sent, success.
    let out = run_hook("prolog.sh", &env_file, "9002", None);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");

    let out = run_hook("epilog.sh", &env_file, "9001", Some("1,2"));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(agent.limits(), vec![300.0, 700.0, 700.0, 700.0]);
    assert!(
        !dir.path().join("jobs/9001.token").exists(),
        "the epilog removes the token"
    );

    // Hostile input never reaches the agent, and never fails the job.
    let out = run_hook("prolog.sh", &env_file, "9003", Some("1;rm -rf /"));
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unexpected SLURM_JOB_GPUS"),
        "{out:?}"
    );
    assert_eq!(agent.limits(), vec![300.0, 700.0, 700.0, 700.0]);

    // A wrong token: refused by the agent (401), logged, job still runs.
    std::fs::write(&token, "not-the-right-token-at-all\n").expect("token");
    let out = run_hook("prolog.sh", &env_file, "9004", Some("3"));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("HTTP 401"), "{out:?}");
    assert_eq!(agent.limits()[3], 700.0);

    // The agent is down: the prolog logs and exits 0; the epilog too, unless strict.
    let addr = agent.addr;
    drop(agent);
    let out = run_hook("prolog.sh", &env_file, "9005", Some("0"));
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("failed") && stderr.contains(&addr.to_string()),
        "{stderr}"
    );
    let out = run_hook("epilog.sh", &env_file, "9005", Some("0"));
    assert!(out.status.success(), "{out:?}");
    let mut strict = std::fs::read_to_string(&env_file).expect("env");
    strict.push_str("FLEXGATE_EPILOG_STRICT=1\n");
    std::fs::write(&env_file, strict).expect("env");
    let out = run_hook("epilog.sh", &env_file, "9005", Some("0"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

#[test]
fn hooks_without_configuration_still_exit_zero() {
    let missing = Path::new("/nonexistent/flexgate/agent.env");
    for name in ["prolog.sh", "epilog.sh"] {
        let out = run_hook(name, missing, "1", Some("0"));
        assert!(out.status.success(), "{name}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("cannot read"),
            "{name}: {out:?}"
        );
    }
}

/// PEM files for one test: a CA, the agent's certificate for 127.0.0.1, a hook client
/// certificate from the same CA.
fn mint_pki(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Distinct subjects: OpenSSL (curl) takes a leaf whose subject equals its issuer for a
    // self-signed certificate.
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "flexgate hook test CA");
    let ca_key = KeyPair::generate().expect("key");
    let ca = params.self_signed(&ca_key).expect("CA");
    let issuer = Issuer::new(params, ca_key);
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).expect("pem");
    write("ca.pem", ca.pem());
    for (file, names) in [
        ("agent", vec!["127.0.0.1".to_owned()]),
        ("hook", vec!["slurm-hook".to_owned()]),
    ] {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name.push(rcgen::DnType::CommonName, file);
        let cert = params.signed_by(&key, &issuer).expect("leaf");
        write(&format!("{file}.pem"), cert.pem());
        write(&format!("{file}-key.pem"), key.serialize_pem());
    }
}

#[test]
fn hooks_reach_an_agent_serving_mutual_tls_and_refuse_half_a_client_identity() {
    assert!(
        curl_available(),
        "curl is needed by the Slurm hooks (tests/peers/setup.sh installs it)"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    mint_pki(dir.path());
    let token = write_token(dir.path());
    let pem = |name: &str| dir.path().join(name).to_str().expect("utf-8").to_owned();
    let agent = Running::start(&[
        "--simulate",
        "--gpus",
        "2",
        "--hostname",
        "node-t",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        &token,
        "--tls-cert",
        &pem("agent.pem"),
        "--tls-key",
        &pem("agent-key.pem"),
        "--tls-client-ca",
        &pem("ca.pem"),
    ]);
    assert!(agent.https, "the agent serves TLS");
    let env_file = dir.path().join("agent.env");
    let env = |client: &str| {
        format!(
            "FLEXGATE_AGENT_URL=https://{}\nFLEXGATE_AGENT_TOKEN_FILE={token}\nFLEXGATE_HOOK_TIMEOUT=5\nFLEXGATE_AGENT_CACERT={}\n{client}",
            agent.addr,
            pem("ca.pem")
        )
    };

    // Without a client certificate the agent refuses the handshake: logged, the job still runs.
    std::fs::write(&env_file, env("")).expect("env");
    let out = run_hook("prolog.sh", &env_file, "7001", Some("0"));
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed"), "{out:?}");

    // Half an identity is a configuration error, said as such.
    std::fs::write(&env_file, env(&format!("FLEXGATE_AGENT_CERT={}\n", pem("hook.pem")))).expect("env");
    let out = run_hook("prolog.sh", &env_file, "7002", Some("0"));
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("go together"), "{out:?}");

    // With the CA and the client certificate: the call lands (200 from the agent; no lease
    // holds the GPUs, so nothing is capped) and the epilog too.
    std::fs::write(
        &env_file,
        env(&format!(
            "FLEXGATE_AGENT_CERT={}\nFLEXGATE_AGENT_KEY={}\nFLEXGATE_EPILOG_STRICT=1\n",
            pem("hook.pem"),
            pem("hook-key.pem")
        )),
    )
    .expect("env");
    let out = run_hook("prolog.sh", &env_file, "7003", Some("0,1"));
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let out = run_hook("epilog.sh", &env_file, "7003", Some("0,1"));
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "strict epilog succeeded: {out:?}"
    );
}
