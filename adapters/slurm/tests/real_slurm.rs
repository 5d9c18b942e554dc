//! Against a real Slurm 22.05 (Debian's packages), started by tests/peers/slurm.sh: GPU jobs
//! submitted with `--gres=gpu:2` and `--gpus=3` must come back with the right node and GRES
//! indices, and flex tags, from slurmrestd (JWT, over TCP and a unix socket, version
//! discovered as v0.0.38) and from the `squeue --json` fallback; wrong and expired tokens must
//! give the clear errors; `scontrol suspend/resume` must change the job's state.
//!
//! Only one Slurm can run on the machine at a time, so everything is in one test function.
//! It needs root and the packages: when they are missing it fails with the command that
//! installs them (`bash tests/peers/slurm.sh install`), it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use flexgate_slurm::error::AUTH_REFUSED_HINT;
use flexgate_slurm::rest::RestClient;
use flexgate_slurm::{
    ApiVersion, CliConfig, JobSnapshot, JobState, MinorSource, RestConfig, SlurmConfig, SlurmError, SlurmInventory,
    SlurmJob, Source, TokenSource, parse_gres_conf,
};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/peers/slurm.sh");

fn script(args: &[&str]) -> std::process::Output {
    Command::new("bash")
        .arg(SCRIPT)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {SCRIPT}: {e}"))
}

fn show(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Stops Slurm when the test ends, passed or failed.
struct SlurmGuard {
    base: PathBuf,
}

impl Drop for SlurmGuard {
    fn drop(&mut self) {
        let t0 = Instant::now();
        let out = script(&["stop", &self.base.to_string_lossy()]);
        eprintln!(
            "slurm.sh stop ({:.1} s): {}",
            t0.elapsed().as_secs_f64(),
            show(&out).trim()
        );
    }
}

fn sbatch(conf: &Path, args: &[&str]) -> u32 {
    let out = Command::new("sbatch")
        .env("SLURM_CONF", conf)
        .args(["--parsable", "--chdir=/tmp", "-o", "/dev/null"])
        .args(args)
        .output()
        .expect("sbatch runs");
    assert!(out.status.success(), "sbatch {args:?}: {}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .split(';')
        .next()
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("sbatch printed {text:?}"))
}

fn scontrol(conf: &Path, args: &[&str]) {
    let out = Command::new("scontrol")
        .env("SLURM_CONF", conf)
        .args(args)
        .output()
        .expect("scontrol runs");
    assert!(out.status.success(), "scontrol {args:?}: {}", show(&out));
}

fn job(s: &JobSnapshot, id: u32) -> &SlurmJob {
    s.jobs
        .iter()
        .find(|j| j.id == id)
        .unwrap_or_else(|| panic!("job {id} not in {:?}", s.jobs.iter().map(|j| j.id).collect::<Vec<_>>()))
}

/// Polls `inv` until every job in `want` has its state, or 30 s pass.
async fn wait_states(inv: &SlurmInventory, want: &[(u32, JobState)]) -> JobSnapshot {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let snap = inv.all_jobs().await.expect("job list");
        let ok = want
            .iter()
            .all(|(id, st)| snap.jobs.iter().any(|j| j.id == *id && j.state == *st));
        if ok {
            return snap;
        }
        assert!(
            Instant::now() < deadline,
            "jobs did not reach {want:?} in 30 s: {:?}",
            snap.jobs.iter().map(|j| (j.id, j.state.clone())).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn read_token(base: &Path) -> (String, String) {
    let text = std::fs::read_to_string(base.join("token.env")).expect("token.env");
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("{k} missing in token.env"))
            .to_string()
    };
    (get("SLURM_USER_NAME="), get("SLURM_JWT="))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_slurm_22_05_jobs_gpus_tags_auth_and_suspend() {
    let t_all = Instant::now();
    let check = script(&["check"]);
    assert!(
        check.status.success(),
        "Slurm is needed for this test and is not installed.\n{}\nInstall it as root with: bash tests/peers/slurm.sh install",
        show(&check)
    );
    let base_dir = tempfile::Builder::new()
        .prefix("flexgate-slurm-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let base = base_dir.path().to_path_buf();
    let _guard = SlurmGuard { base: base.clone() };
    let t0 = Instant::now();
    let started = script(&["start", &base.to_string_lossy()]);
    assert!(started.status.success(), "slurm.sh start failed:\n{}", show(&started));
    let start_s = t0.elapsed().as_secs_f64();

    let conf = base.join("slurm.conf");
    let port: u16 = std::fs::read_to_string(base.join("rest.port"))
        .expect("rest.port")
        .trim()
        .parse()
        .expect("port");
    let (user, token) = read_token(&base);
    let tcp_url = format!("http://127.0.0.1:{port}");
    let rest_cfg = |url: &str, token: TokenSource| RestConfig::new(url, user.clone(), token);
    let cli_cfg = CliConfig {
        slurm_conf: Some(conf.clone()),
        ..CliConfig::default()
    };

    // Two GPU jobs, one tagged in its comment.
    let a = sbatch(
        &conf,
        &[
            "--gres=gpu:2",
            "--comment",
            "flexgate:tier=batch,pfi=2.1",
            "-J",
            "fg-a",
            "--wrap",
            "sleep 120",
        ],
    );
    let b = sbatch(&conf, &["--gpus=3", "-J", "fg-b", "--wrap", "sleep 120"]);

    let cli_only = SlurmInventory::new(SlurmConfig {
        cli: cli_cfg.clone(),
        suspendable_tiers: vec!["batch".into()],
        ..SlurmConfig::default()
    })
    .expect("cli inventory");
    let t0 = Instant::now();
    wait_states(&cli_only, &[(a, JobState::Running), (b, JobState::Running)]).await;
    let to_running_s = t0.elapsed().as_secs_f64();

    // REST over TCP with the JWT: version discovered, both jobs with node and indices.
    let rest_inv = SlurmInventory::new(SlurmConfig {
        rest: Some(rest_cfg(&tcp_url, TokenSource::File(base.join("token.env")))),
        cli: cli_cfg.clone(),
        cli_fallback: false,
        suspendable_tiers: vec!["batch".into()],
    })
    .expect("rest inventory");
    let client = rest_inv.rest().expect("rest client");
    assert_eq!(client.offered_versions().await.expect("openapi"), vec![ApiVersion(38)]);
    assert_eq!(client.discover_version().await.expect("version"), ApiVersion(38));
    let rest = rest_inv.running_jobs().await.expect("REST jobs");
    assert_eq!(rest.source, Source::Rest(ApiVersion(38)));
    assert_eq!(rest.rest_error, None);
    let ja = job(&rest, a);
    assert_eq!((ja.name.as_str(), ja.user.as_str()), ("fg-a", "root"));
    assert_eq!(ja.nodes.len(), 1);
    assert_eq!(ja.nodes[0].node, "localhost");
    assert_eq!(ja.nodes[0].indices, vec![0, 1]);
    assert_eq!(ja.nodes[0].gres_type.as_deref(), Some("h100"));
    assert!(ja.nodes[0].indices_known);
    assert_eq!(ja.flex.tier.as_deref(), Some("batch"));
    assert_eq!(ja.flex.pfi, Some(2.1));
    assert_eq!(ja.flex.max_slowdown, None);
    assert!(ja.warnings.is_empty(), "{:?}", ja.warnings);
    let jb = job(&rest, b);
    assert_eq!(jb.nodes[0].node, "localhost");
    assert_eq!(jb.nodes[0].indices, vec![2, 3, 4]);
    assert!(jb.flex.is_empty());

    // The prolog saw the same indices in SLURM_JOB_GPUS.
    let prolog = std::fs::read_to_string(base.join("log/prolog.log")).expect("prolog.log");
    assert!(prolog.lines().any(|l| l == format!("{a} 0,1")), "prolog.log: {prolog}");
    assert!(
        prolog.lines().any(|l| l == format!("{b} 2,3,4")),
        "prolog.log: {prolog}"
    );

    // gres.conf (fakegpu/nvidia[0-7]) maps IDX to the same minor numbers.
    let gres = parse_gres_conf(&std::fs::read_to_string(base.join("gres.conf")).expect("gres.conf")).expect("parses");
    let (gpus, stale) = gres.job_gpus(jb);
    assert!(stale.is_empty());
    assert_eq!(
        gpus.iter().map(|g| (g.minor, g.source)).collect::<Vec<_>>(),
        [
            (2, MinorSource::GresConf),
            (3, MinorSource::GresConf),
            (4, MinorSource::GresConf)
        ]
    );

    // The same over slurmrestd's unix socket.
    let unix = RestClient::new(&rest_cfg(
        &format!("unix:{}", base.join("rest.sock").display()),
        TokenSource::Value(token.clone()),
    ))
    .expect("unix client")
    .jobs()
    .await
    .expect("REST over unix socket");
    assert_eq!(job(&unix, a).nodes, ja.nodes);
    assert_eq!(job(&unix, b).nodes, jb.nodes);

    // squeue --json (the fallback) reports the same jobs; 22.05 ignores its filters, so the
    // pending/finished filtering is ours.
    let cli = cli_only.running_jobs().await.expect("squeue jobs");
    assert_eq!(cli.source, Source::Cli);
    assert_eq!(job(&cli, a), ja);
    assert_eq!(job(&cli, b), jb);

    // What each job asked for (the running ones' too), and a pending job's request, limit and
    // the start Slurm's backfill expects for it, alike over REST and squeue.
    assert_eq!((ja.gpus_requested, jb.gpus_requested), (Some(2), Some(3)));
    let c = sbatch(
        &conf,
        &["--gres=gpu:4", "-t", "30", "-J", "fg-c", "--wrap", "sleep 120"],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let (rest_c, cli_c) = loop {
        let (r, q) = (
            rest_inv.all_jobs().await.expect("REST jobs"),
            cli_only.all_jobs().await.expect("squeue jobs"),
        );
        let (jr, jq) = (job(&r, c).clone(), job(&q, c).clone());
        if jr.start_time.is_some() && jq.start_time.is_some() {
            break (jr, jq);
        }
        assert!(
            Instant::now() < deadline,
            "no expected start for the pending job: {jr:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(rest_c.state, JobState::Pending);
    assert_eq!((rest_c.gpus_requested, rest_c.time_limit_minutes), (Some(4), Some(30)));
    assert!(rest_c.nodes.is_empty(), "no allocation yet: {rest_c:?}");
    assert_eq!(rest_c.start_time, cli_c.start_time, "REST and squeue agree");
    assert!(
        rest_c.start_time.is_some_and(|t| t > chrono::Utc::now()),
        "expected in the future (when a running job's limit frees 4 GPUs): {rest_c:?}"
    );
    let cancelled = Command::new("scancel")
        .env("SLURM_CONF", &conf)
        .arg(c.to_string())
        .output()
        .expect("scancel runs");
    assert!(cancelled.status.success(), "{}", show(&cancelled));

    // A wrong token: the clear error, from REST alone, and in the snapshot when squeue answers.
    let wrong = RestClient::new(&rest_cfg(&tcp_url, TokenSource::Value("not-a-valid-token".into()))).expect("client");
    let e = wrong.jobs().await.expect_err("wrong token");
    assert!(e.is_auth(), "{e}");
    assert!(e.to_string().starts_with(AUTH_REFUSED_HINT), "{e}");
    // A well-formed JWT signed with another key, valid for years.
    let forged =
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjQxMDI0NDQ4MDAsImlhdCI6MSwic3VuIjoic2x1cm1yZXN0In0.c2lnbmF0dXJl";
    let e = RestClient::new(&rest_cfg(&tcp_url, TokenSource::Value(forged.into())))
        .expect("client")
        .jobs()
        .await
        .expect_err("forged token");
    assert!(matches!(e, SlurmError::AuthRefused { .. }), "{e}");
    let fallback = SlurmInventory::new(SlurmConfig {
        rest: Some(rest_cfg(&tcp_url, TokenSource::Value("not-a-valid-token".into()))),
        cli: cli_cfg.clone(),
        ..SlurmConfig::default()
    })
    .expect("inventory")
    .running_jobs()
    .await
    .expect("falls back to squeue");
    assert_eq!(fallback.source, Source::Cli);
    let why = fallback.rest_error.expect("REST error reported");
    assert!(
        why.starts_with(AUTH_REFUSED_HINT) && why.contains("the token is what was refused"),
        "{why}"
    );
    // A request without the token header: slurmrestd's own 401.
    let no_header = reqwest::get(format!("{tcp_url}/slurm/v0.0.38/jobs"))
        .await
        .expect("request");
    assert_eq!(no_header.status().as_u16(), 401);

    // An expired token (lifespan 1 s) is refused before sending.
    let out = Command::new("scontrol")
        .env("SLURM_CONF", &conf)
        .args(["token", &format!("username={user}"), "lifespan=1"])
        .output()
        .expect("scontrol token");
    assert!(out.status.success(), "{}", show(&out));
    let short = String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("SLURM_JWT=")
        .to_string();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let e = RestClient::new(&rest_cfg(&tcp_url, TokenSource::Value(short)))
        .expect("client")
        .jobs()
        .await
        .expect_err("expired");
    assert!(matches!(e, SlurmError::TokenExpired { .. }), "{e}");

    // The admin comment overrides the user's tier, key by key.
    scontrol(
        &conf,
        &[
            "update",
            &format!("jobid={a}"),
            "AdminComment=flexgate:tier=critical,max_slowdown=0.1",
        ],
    );
    let tagged = rest_inv.running_jobs().await.expect("jobs");
    let ja2 = job(&tagged, a);
    assert_eq!(ja2.flex.tier.as_deref(), Some("critical"));
    assert_eq!(ja2.flex.pfi, Some(2.1), "pfi still from the comment");
    assert_eq!(ja2.flex.max_slowdown, Some(0.1));
    scontrol(
        &conf,
        &["update", &format!("jobid={a}"), "AdminComment=flexgate:tier=batch"],
    );

    // Suspend and resume through scontrol; the tier decides.
    let now = cli_only.running_jobs().await.expect("jobs");
    let e = cli_only.suspend_job(job(&now, b)).await.expect_err("untagged job");
    assert!(matches!(e, SlurmError::NotSuspendable { .. }), "{e}");
    let t0 = Instant::now();
    cli_only.suspend_job(job(&now, a)).await.expect("suspend");
    let snap = wait_states(&rest_inv, &[(a, JobState::Suspended), (b, JobState::Running)]).await;
    assert_eq!(
        job(&snap, a).nodes[0].indices,
        vec![0, 1],
        "a suspended job keeps its GPUs"
    );
    let still = rest_inv.running_jobs().await.expect("jobs");
    assert!(
        still.jobs.iter().any(|j| j.id == a),
        "running_jobs includes suspended jobs"
    );
    cli_only.resume(a).await.expect("resume");
    wait_states(&rest_inv, &[(a, JobState::Running)]).await;
    let suspend_resume_s = t0.elapsed().as_secs_f64();
    let e = cli_only.resume(a).await.expect_err("resume a running job");
    assert!(matches!(e, SlurmError::Command { .. }), "{e}");
    // 22.05's scontrol words an unknown job id oddly ("Unexpected message received for job
    // 999999"); what matters is that the failure and Slurm's text come through.
    let e = cli_only.suspend(999_999).await.expect_err("no such job");
    assert!(matches!(e, SlurmError::Command { .. }), "{e}");
    assert!(
        e.to_string().contains("scontrol suspend 999999") && e.to_string().contains("job 999999"),
        "{e}"
    );

    eprintln!(
        "real Slurm: start {start_s:.1} s, jobs RUNNING after {to_running_s:.1} s, suspend+resume {suspend_resume_s:.1} s, checks done at {:.1} s (stop follows)",
        t_all.elapsed().as_secs_f64()
    );
}
