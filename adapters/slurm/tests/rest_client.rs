//! The slurmrestd client and the inventory's fallback against a scripted HTTP server (TCP and
//! unix socket) that replays recorded Slurm answers, and fake `squeue`/`scontrol` scripts.
//! The real slurmrestd is exercised in real_slurm.rs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flexgate_slurm::error::AUTH_REFUSED_HINT;
use flexgate_slurm::rest::RestClient;
use flexgate_slurm::{
    ApiVersion, CliConfig, JobState, RestConfig, SlurmConfig, SlurmError, SlurmInventory, Source, TokenSource,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR")))
}

#[derive(Debug, Clone)]
struct Request {
    path: String,
    headers: Vec<(String, String)>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

enum Reply {
    Full(u16, &'static str, Vec<u8>),
    /// Never answer.
    Hang,
    /// A chunked body of this many bytes.
    Chunked(usize),
}

type Handler = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// A one-route-table HTTP/1.1 server that records every request.
struct Fake {
    requests: Arc<Mutex<Vec<Request>>>,
    url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Fake {
    async fn tcp(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (h, r): (Handler, _) = (Arc::new(handler), requests.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(serve(s, h.clone(), r.clone()));
            }
        });
        Fake {
            requests,
            url,
            _dir: None,
        }
    }

    async fn unix(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Fake {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("rest.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (h, r): (Handler, _) = (Arc::new(handler), requests.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(serve(s, h.clone(), r.clone()));
            }
        });
        Fake {
            requests,
            url: format!("unix:{}", path.display()),
            _dir: Some(dir),
        }
    }

    fn paths(&self) -> Vec<String> {
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .map(|r| r.path.clone())
            .collect()
    }
}

async fn serve(mut s: impl AsyncRead + AsyncWrite + Unpin, h: Handler, log: Arc<Mutex<Vec<Request>>>) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut byte).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&byte[..n]),
        }
    }
    let text = String::from_utf8_lossy(&buf).to_string();
    let mut lines = text.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let req = Request { path, headers };
    log.lock().expect("lock").push(req.clone());
    match h(&req) {
        Reply::Full(status, ctype, body) => {
            let head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(&body).await;
        }
        Reply::Hang => tokio::time::sleep(Duration::from_secs(60)).await,
        Reply::Chunked(total) => {
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await;
            let chunk = vec![b' '; 65536];
            let mut sent = 0;
            while sent < total {
                if s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).await.is_err()
                    || s.write_all(&chunk).await.is_err()
                    || s.write_all(b"\r\n").await.is_err()
                {
                    return;
                }
                sent += chunk.len();
            }
            let _ = s.write_all(b"0\r\n\r\n").await;
        }
    }
    let _ = s.shutdown().await;
}

fn json(status: u16, body: Vec<u8>) -> Reply {
    Reply::Full(status, "application/json", body)
}

/// A 22.05 slurmrestd: openapi lists v0.0.38, jobs answers with the captured list.
fn slurm_22_05(req: &Request) -> Reply {
    match req.path.as_str() {
        "/openapi/v3" => json(200, fixture("openapi_v3_22.05.json")),
        "/slurm/v0.0.38/jobs" => json(200, fixture("v0.0.38_jobs.json")),
        _ => Reply::Full(404, "text/plain", b"Unable find requested URL.".to_vec()),
    }
}

fn rest_config(url: &str) -> RestConfig {
    let mut c = RestConfig::new(url, "slurmrest", TokenSource::Value("opaque-token".into()));
    c.timeout_ms = 2000;
    c
}

fn client(url: &str) -> RestClient {
    RestClient::new(&rest_config(url)).expect("client")
}

#[tokio::test]
async fn discovers_v0_0_38_and_sends_the_jwt_headers() {
    let fake = Fake::tcp(slurm_22_05).await;
    let c = client(&fake.url);
    let snap = c.jobs().await.expect("jobs");
    assert_eq!(snap.source, Source::Rest(ApiVersion(38)));
    assert_eq!(snap.jobs.len(), 3);
    assert_eq!(fake.paths(), ["/openapi/v3", "/slurm/v0.0.38/jobs"]);
    for r in fake.requests.lock().expect("lock").iter() {
        assert_eq!(r.header("X-SLURM-USER-NAME"), Some("slurmrest"));
        assert_eq!(r.header("X-SLURM-USER-TOKEN"), Some("opaque-token"));
    }
    // The version is remembered: a second read asks for jobs only.
    c.jobs().await.expect("jobs again");
    assert_eq!(fake.paths().len(), 3);
}

#[tokio::test]
async fn picks_the_newest_known_version() {
    let fake = Fake::tcp(|r: &Request| match r.path.as_str() {
        "/openapi/v3" => json(
            200,
            br#"{"paths": {"/slurm/v0.0.39/jobs": {}, "/slurm/v0.0.40/jobs": {}, "/slurm/v0.0.41/jobs": {},
                "/slurm/v0.0.42/jobs": {}, "/slurmdb/v0.0.41/jobs": {}}}"#
                .to_vec(),
        ),
        "/slurm/v0.0.41/jobs" => json(200, fixture("v0.0.41_jobs_multinode.json")),
        _ => json(404, b"{}".to_vec()),
    })
    .await;
    let snap = client(&fake.url).jobs().await.expect("jobs");
    assert_eq!(snap.source, Source::Rest(ApiVersion(41)));
    let big = snap.jobs.iter().find(|j| j.id == 101).expect("101");
    assert_eq!(big.nodes.len(), 2);
    assert_eq!(big.nodes[1].indices, vec![0, 1, 4, 5]);
}

#[tokio::test]
async fn no_known_version_names_what_was_offered() {
    let fake = Fake::tcp(|_: &Request| {
        json(
            200,
            br#"{"paths": {"/slurm/v0.0.36/jobs": {}, "/slurm/v0.0.37/jobs": {}}}"#.to_vec(),
        )
    })
    .await;
    let e = client(&fake.url).jobs().await.expect_err("no version");
    assert!(matches!(e, SlurmError::NoKnownVersion { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("v0.0.36, v0.0.37") && text.contains("-s openapi/v0.0.38"),
        "{text}"
    );
}

#[tokio::test]
async fn pinned_version_skips_discovery() {
    let fake = Fake::tcp(slurm_22_05).await;
    let mut cfg = rest_config(&fake.url);
    cfg.version = Some("v0.0.38".into());
    RestClient::new(&cfg).expect("client").jobs().await.expect("jobs");
    assert_eq!(fake.paths(), ["/slurm/v0.0.38/jobs"]);
}

#[tokio::test]
async fn http_401_is_the_clear_auth_error() {
    let fake = Fake::tcp(|_: &Request| Reply::Full(401, "text/plain", b"Authentication failure".to_vec())).await;
    let e = client(&fake.url).jobs().await.expect_err("401");
    assert!(e.is_auth());
    let text = e.to_string();
    assert!(text.starts_with(AUTH_REFUSED_HINT), "{text}");
    assert!(
        text.contains("HTTP 401") && text.contains("Authentication failure"),
        "{text}"
    );
}

#[tokio::test]
async fn slurm_22_05_refused_token_500_is_the_auth_error_too() {
    let fake = Fake::tcp(|r: &Request| match r.path.as_str() {
        "/openapi/v3" => json(200, fixture("openapi_v3_22.05.json")),
        _ => json(500, fixture("v0.0.38_jobs_bad_token.json")),
    })
    .await;
    let e = client(&fake.url).jobs().await.expect_err("500");
    assert!(matches!(e, SlurmError::AuthRefused { status: 500, .. }), "{e}");
    let text = e.to_string();
    assert!(text.starts_with(AUTH_REFUSED_HINT), "{text}");
    assert!(
        text.contains("slurm_load_jobs: Unspecified error") && text.contains("slurmctld is down"),
        "{text}"
    );
}

#[tokio::test]
async fn other_slurm_errors_keep_their_text() {
    let fake = Fake::tcp(|r: &Request| match r.path.as_str() {
        "/openapi/v3" => json(200, fixture("openapi_v3_22.05.json")),
        _ => json(
            500,
            br#"{"errors": [{"description": "x", "error_number": 2017, "error": "Invalid partition name specified", "source": "slurm_load_jobs"}], "jobs": []}"#.to_vec(),
        ),
    })
    .await;
    let e = client(&fake.url).jobs().await.expect_err("500");
    assert!(matches!(e, SlurmError::Slurm { status: 500, .. }), "{e}");
    assert!(
        e.to_string()
            .contains("x (slurm_load_jobs: Invalid partition name specified) [error 2017]"),
        "{e}"
    );
}

#[tokio::test]
async fn non_json_answers() {
    let fake = Fake::tcp(|r: &Request| match r.path.as_str() {
        "/openapi/v3" => json(200, fixture("openapi_v3_22.05.json")),
        _ => Reply::Full(200, "text/html", b"<html>proxy login</html>".to_vec()),
    })
    .await;
    let e = client(&fake.url).jobs().await.expect_err("html");
    assert!(matches!(e, SlurmError::NotJson { .. }), "{e}");
    assert!(e.to_string().contains("<html>proxy login"), "{e}");

    let fake = Fake::tcp(|_: &Request| Reply::Full(502, "text/html", b"<h1>Bad Gateway</h1>".to_vec())).await;
    let e = client(&fake.url).jobs().await.expect_err("502");
    assert!(matches!(e, SlurmError::Http { status: 502, .. }), "{e}");
    assert!(e.to_string().contains("Bad Gateway"), "{e}");
}

#[tokio::test]
async fn connection_refused_is_named() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let e = client(&format!("http://127.0.0.1:{port}"))
        .jobs()
        .await
        .expect_err("refused");
    assert!(matches!(e, SlurmError::Connect { .. }), "{e}");
    let text = e.to_string();
    assert!(text.to_lowercase().contains("connection refused"), "{text}");
    assert!(text.contains("is slurmrestd running"), "{text}");
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let fake = Fake::tcp(|_: &Request| Reply::Hang).await;
    let mut cfg = rest_config(&fake.url);
    cfg.timeout_ms = 300;
    let t0 = std::time::Instant::now();
    let e = RestClient::new(&cfg).expect("client").jobs().await.expect_err("hang");
    assert!(matches!(e, SlurmError::Timeout { .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn oversized_bodies_are_refused() {
    let fake = Fake::tcp(|r: &Request| match r.path.as_str() {
        "/openapi/v3" => json(200, fixture("openapi_v3_22.05.json")),
        _ => Reply::Chunked(4 << 20),
    })
    .await;
    let mut cfg = rest_config(&fake.url);
    cfg.max_body_bytes = 1 << 20;
    let e = RestClient::new(&cfg)
        .expect("client")
        .jobs()
        .await
        .expect_err("too big");
    assert!(matches!(e, SlurmError::TooLarge { limit: 1048576, .. }), "{e}");

    let fake = Fake::tcp(|_: &Request| json(200, vec![b' '; 2 << 20])).await;
    let e = RestClient::new(&RestConfig {
        url: fake.url.clone(),
        ..cfg
    })
    .expect("client")
    .jobs()
    .await
    .expect_err("too big");
    assert!(matches!(e, SlurmError::TooLarge { .. }), "{e}");
}

#[tokio::test]
async fn an_expired_token_is_refused_before_sending() {
    let fake = Fake::tcp(slurm_22_05).await;
    let mut cfg = rest_config(&fake.url);
    cfg.token = TokenSource::Value("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjF9.sig".into());
    let e = RestClient::new(&cfg)
        .expect("client")
        .jobs()
        .await
        .expect_err("expired");
    assert!(matches!(e, SlurmError::TokenExpired { .. }), "{e}");
    assert!(e.to_string().contains("1970-01-01T00:00:01"), "{e}");
    assert!(fake.paths().is_empty(), "nothing sent");
}

#[tokio::test]
async fn token_file_is_reread_each_time() {
    let fake = Fake::tcp(slurm_22_05).await;
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("token.env");
    std::fs::write(&file, "SLURM_JWT=first\n").expect("write");
    let mut cfg = rest_config(&fake.url);
    cfg.token = TokenSource::File(file.clone());
    let c = RestClient::new(&cfg).expect("client");
    c.jobs().await.expect("jobs");
    std::fs::write(&file, "SLURM_JWT=second\n").expect("write");
    c.jobs().await.expect("jobs");
    let tokens: Vec<String> = fake
        .requests
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|r| r.header("X-SLURM-USER-TOKEN").map(str::to_string))
        .collect();
    assert_eq!(tokens, ["first", "first", "second"]);
}

#[tokio::test]
async fn a_404_after_an_upgrade_triggers_rediscovery() {
    let upgraded = Arc::new(Mutex::new(false));
    let flag = upgraded.clone();
    let fake = Fake::tcp(move |r: &Request| {
        let up = *flag.lock().expect("lock");
        match (r.path.as_str(), up) {
            ("/openapi/v3", false) => json(200, fixture("openapi_v3_22.05.json")),
            ("/openapi/v3", true) => json(200, br#"{"paths": {"/slurm/v0.0.40/jobs": {}}}"#.to_vec()),
            ("/slurm/v0.0.38/jobs", false) => json(200, fixture("v0.0.38_jobs.json")),
            ("/slurm/v0.0.40/jobs", true) => json(200, fixture("v0.0.40_jobs_multinode.json")),
            _ => Reply::Full(404, "text/plain", b"Unable find requested URL.".to_vec()),
        }
    })
    .await;
    let c = client(&fake.url);
    assert_eq!(c.jobs().await.expect("38").source, Source::Rest(ApiVersion(38)));
    *upgraded.lock().expect("lock") = true;
    let e = c.jobs().await.expect_err("404");
    assert!(e.to_string().contains("no longer serves v0.0.38"), "{e}");
    assert_eq!(c.jobs().await.expect("40").source, Source::Rest(ApiVersion(40)));
}

#[tokio::test]
async fn over_a_unix_socket() {
    let fake = Fake::unix(slurm_22_05).await;
    let snap = client(&fake.url).jobs().await.expect("jobs over unix socket");
    assert_eq!(snap.jobs.len(), 3);
    assert_eq!(fake.paths(), ["/openapi/v3", "/slurm/v0.0.38/jobs"]);

    let e = client("unix:/nonexistent/dir/rest.sock")
        .jobs()
        .await
        .expect_err("no socket");
    assert!(matches!(e, SlurmError::Connect { .. }), "{e}");
    assert!(e.to_string().contains("unix:/nonexistent/dir/rest.sock"), "{e}");
}

// ---- the inventory: REST first, squeue fallback, suspend by tier ------------------------------

/// A shell script standing in for a Slurm command.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn refused_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    format!("http://127.0.0.1:{}", l.local_addr().expect("addr").port())
}

#[tokio::test]
async fn falls_back_to_squeue_and_says_why() {
    let dir = tempfile::tempdir().expect("tmp");
    let squeue = script(
        dir.path(),
        "squeue",
        &format!(
            "[ \"$1\" = --json ] || exit 9\ncat '{}'",
            fixture_path("squeue_22.05.json").display()
        ),
    );
    let inv = SlurmInventory::new(SlurmConfig {
        rest: Some(rest_config(&refused_url())),
        cli: CliConfig {
            squeue,
            ..CliConfig::default()
        },
        ..SlurmConfig::default()
    })
    .expect("inventory");
    let snap = inv.running_jobs().await.expect("fallback");
    assert_eq!(snap.source, Source::Cli);
    let why = snap.rest_error.expect("REST error reported");
    assert!(why.contains("cannot connect to slurmrestd"), "{why}");
    let ids: Vec<u32> = snap.jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, [1, 2], "running and suspended; the pending job 3 is left out");
    assert_eq!(snap.jobs[1].state, JobState::Suspended);
}

#[tokio::test]
async fn refused_token_with_working_squeue_blames_the_token() {
    let fake = Fake::tcp(|r: &Request| match r.path.as_str() {
        "/openapi/v3" => json(200, fixture("openapi_v3_22.05.json")),
        _ => json(500, fixture("v0.0.38_jobs_bad_token.json")),
    })
    .await;
    let dir = tempfile::tempdir().expect("tmp");
    let squeue = script(
        dir.path(),
        "squeue",
        &format!("cat '{}'", fixture_path("squeue_22.05.json").display()),
    );
    let inv = SlurmInventory::new(SlurmConfig {
        rest: Some(rest_config(&fake.url)),
        cli: CliConfig {
            squeue,
            ..CliConfig::default()
        },
        ..SlurmConfig::default()
    })
    .expect("inventory");
    let why = inv.running_jobs().await.expect("fallback").rest_error.expect("why");
    assert!(why.starts_with(AUTH_REFUSED_HINT), "{why}");
    assert!(why.contains("the token is what was refused"), "{why}");
}

#[tokio::test]
async fn both_failing_reports_both() {
    let dir = tempfile::tempdir().expect("tmp");
    let squeue = script(
        dir.path(),
        "squeue",
        "echo 'squeue: error: Unable to contact slurm controller' >&2; exit 1",
    );
    let cfg = SlurmConfig {
        rest: Some(rest_config(&refused_url())),
        cli: CliConfig {
            squeue,
            ..CliConfig::default()
        },
        ..SlurmConfig::default()
    };
    let e = SlurmInventory::new(cfg.clone())
        .expect("inv")
        .running_jobs()
        .await
        .expect_err("both");
    assert!(matches!(e, SlurmError::BothFailed { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("cannot connect") && text.contains("Unable to contact slurm controller"),
        "{text}"
    );

    let e = SlurmInventory::new(SlurmConfig {
        cli_fallback: false,
        ..cfg
    })
    .expect("inv")
    .running_jobs()
    .await
    .expect_err("rest only");
    assert!(matches!(e, SlurmError::Connect { .. }), "{e}");
}

#[tokio::test]
async fn suspends_only_suspendable_tiers() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("scontrol.log");
    let scontrol = script(dir.path(), "scontrol", &format!("echo \"$@\" >> '{}'", log.display()));
    let squeue = script(
        dir.path(),
        "squeue",
        &format!("cat '{}'", fixture_path("v0.0.38_jobs_multinode.json").display()),
    );
    let inv = SlurmInventory::new(SlurmConfig {
        cli: CliConfig {
            squeue,
            scontrol,
            ..CliConfig::default()
        },
        suspendable_tiers: vec!["Preemptible".into()],
        ..SlurmConfig::default()
    })
    .expect("inventory");
    let snap = inv.running_jobs().await.expect("jobs");
    let batch = snap.jobs.iter().find(|j| j.id == 101).expect("101");
    let preemptible = snap.jobs.iter().find(|j| j.id == 102).expect("102");
    assert!(!inv.may_suspend(batch));
    let e = inv.suspend_job(batch).await.expect_err("batch is not suspendable");
    assert!(matches!(e, SlurmError::NotSuspendable { job_id: 101, .. }), "{e}");
    inv.suspend_job(preemptible).await.expect("suspend");
    inv.resume(102).await.expect("resume");
    assert_eq!(std::fs::read_to_string(&log).expect("log"), "suspend 102\nresume 102\n");
}
