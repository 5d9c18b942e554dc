//! Job lists recorded from a real Slurm 22.05 and hand-written in the v0.0.40/41 shapes (see
//! tests/fixtures/README.md), plus hostile documents: every one must read into the same model,
//! and nothing may panic.

use flexgate_slurm::{ApiVersion, JobSnapshot, JobState, SlurmError, SlurmJob, Source, read_job_list};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn read(name: &str) -> JobSnapshot {
    read_job_list(&fixture(name), name, Source::Rest(ApiVersion(38))).expect(name)
}

fn job(s: &JobSnapshot, id: u32) -> &SlurmJob {
    s.jobs
        .iter()
        .find(|j| j.id == id)
        .unwrap_or_else(|| panic!("job {id} missing"))
}

fn node_view(j: &SlurmJob) -> Vec<(String, Vec<u32>, bool)> {
    j.nodes
        .iter()
        .map(|n| (n.node.clone(), n.indices.clone(), n.indices_known))
        .collect()
}

/// The captured 22.05 REST answer and the captured `squeue --json` read the same.
#[test]
fn captured_22_05_rest_and_squeue_agree() {
    let rest = read("v0.0.38_jobs.json");
    let cli = read("squeue_22.05.json");
    assert_eq!(rest.jobs, cli.jobs);
    assert!(rest.slurm_messages.is_empty(), "{:?}", rest.slurm_messages);
    assert_eq!(rest.jobs.len(), 3);

    let a = job(&rest, 1);
    assert_eq!(
        (a.name.as_str(), a.user.as_str(), &a.state),
        ("train-a", "root", &JobState::Running)
    );
    assert_eq!(node_view(a), vec![("localhost".to_string(), vec![0, 1], true)]);
    assert_eq!(a.nodes[0].gres_type.as_deref(), Some("h100"));
    assert_eq!(a.comment, "flexgate:tier=batch,pfi=2.1");
    // The admin comment wins key by key: tier and pfi from it, nothing left from the comment.
    assert_eq!(a.flex.tier.as_deref(), Some("flexible"));
    assert_eq!(a.flex.pfi, Some(3.5));
    assert_eq!(a.flex.max_slowdown, Some(0.25));
    assert_eq!(a.time_limit_minutes, None, "INFINITE is null in v0.0.38");
    assert_eq!(a.start_time.map(|t| t.timestamp()), Some(1_796_015_153));

    let b = job(&rest, 2);
    assert_eq!(b.state, JobState::Suspended);
    assert_eq!(node_view(b), vec![("localhost".to_string(), vec![2, 3, 4], true)]);
    assert!(b.flex.is_empty());

    let c = job(&rest, 3);
    assert_eq!(c.state, JobState::Pending);
    assert!(c.nodes.is_empty());
    assert_eq!(
        c.flex.tier.as_deref(),
        Some("critical"),
        "tag in the middle of a comment"
    );
}

/// The same three jobs (two-node, suspended with two GRES, pending) in the three shapes.
#[test]
fn multinode_jobs_in_every_version_shape() {
    let mut seen = Vec::new();
    for name in [
        "v0.0.38_jobs_multinode.json",
        "v0.0.40_jobs_multinode.json",
        "v0.0.41_jobs_multinode.json",
    ] {
        let s = read(name);
        assert_eq!(s.jobs.len(), 3, "{name}");
        let big = job(&s, 101);
        assert_eq!(big.state, JobState::Running, "{name}");
        assert_eq!(
            node_view(big),
            vec![
                ("gpu01".to_string(), (0..8).collect(), true),
                ("gpu02".to_string(), vec![0, 1, 4, 5], true)
            ],
            "{name}"
        );
        assert_eq!(big.gpu_count(), 12);
        assert_eq!(big.user, "alice");
        assert_eq!(big.flex.tier.as_deref(), Some("batch"));
        assert_eq!(big.flex.pfi, Some(2.1));
        assert_eq!(big.flex.max_slowdown, Some(0.25));
        assert_eq!(big.time_limit_minutes, Some(2880), "{name}");
        assert!(big.warnings.is_empty(), "{name}: {:?}", big.warnings);

        let susp = job(&s, 102);
        assert_eq!(susp.state, JobState::Suspended, "{name}");
        assert_eq!(node_view(susp), vec![("gpu03".to_string(), vec![0, 1], true)], "{name}");
        assert_eq!(susp.flex.tier.as_deref(), Some("preemptible"));

        let pend = job(&s, 103);
        assert_eq!(pend.state, JobState::Pending, "{name}");
        assert!(pend.nodes.is_empty(), "{name}");
        assert_eq!(pend.start_time, None, "{name}");
        seen.push(s.jobs);
    }
    assert_eq!(seen[0], seen[1], "v0.0.38 and v0.0.40 read the same");
    assert_eq!(seen[1], seen[2], "v0.0.40 and v0.0.41 read the same");
}

/// The body 22.05 sends with its HTTP 500 for a refused token: an empty list plus the error.
/// As a document it reads (the REST client decides from the status that it is a refusal), and
/// the error is kept for the operator.
#[test]
fn error_document_keeps_slurm_errors() {
    let s = read_job_list(&fixture("v0.0.38_jobs_bad_token.json"), "bad", Source::Cli).expect("reads");
    assert!(s.jobs.is_empty());
    assert_eq!(
        s.slurm_messages,
        vec!["error: Failed while looking for jobs (slurm_load_jobs: Unspecified error) [error -1]".to_string()]
    );
    let e = read_job_list(
        br#"{"errors": [{"error": "boom", "error_number": 9}]}"#,
        "doc",
        Source::Cli,
    )
    .expect_err("no jobs list");
    assert!(matches!(e, SlurmError::Slurm { .. }), "{e}");
    assert!(e.to_string().contains("boom"), "{e}");
    let e = read_job_list(b"{}", "doc", Source::Cli).expect_err("no jobs list");
    assert!(e.to_string().contains("no \"jobs\" list"), "{e}");
}

#[test]
fn hostile_documents_never_panic() {
    let cases: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"null".to_vec(),
        b"[1,2,3]".to_vec(),
        b"{\"jobs\": {}}".to_vec(),
        b"{\"jobs\": null}".to_vec(),
        b"{\"jobs\": [null]}".to_vec(),
        b"{\"jobs\": [{\"job_id\": -5}, {\"job_id\": 1e300}, {\"job_id\": 1.5}]}".to_vec(),
        br#"{"jobs": [{"job_id": 1, "job_state": ["RUNNING"], "gres_detail": ["gpu:1(IDX:0-4294967295)"],
             "job_resources": {"allocated_nodes": [{"nodename": 5}, {"nodename": "n1"}]}}]}"#
            .to_vec(),
        br#"{"jobs": [{"job_id": 2, "job_state": "RUNNING", "nodes": "n[0-99999999]"}]}"#.to_vec(),
        br#"{"jobs": [{"job_id": 3, "job_state": "RUNNING", "comment": "flexgate:pfi=1e999,tier=x\u0000y"}]}"#.to_vec(),
        format!(
            "{{\"jobs\": [{{\"job_id\": 4, \"x\": {}{}}}]}}",
            "[".repeat(200_000),
            "]".repeat(200_000)
        )
        .into_bytes(),
        vec![0xff; 1000],
    ];
    for body in &cases {
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).to_string();
        match read_job_list(body, "hostile", Source::Cli) {
            Ok(s) => {
                for j in &s.jobs {
                    assert!(
                        j.nodes
                            .iter()
                            .all(|n| n.indices.len() <= flexgate_slurm::gres::MAX_INDICES)
                    );
                }
            }
            Err(e) => assert!(
                matches!(e, SlurmError::NotJson { .. } | SlurmError::Slurm { .. }),
                "{shown}: {e}"
            ),
        }
    }
    // The odd-but-valid ones still give what can be read, with warnings.
    let s = read_job_list(&cases[7], "x", Source::Cli).expect("reads");
    assert_eq!(s.jobs[0].nodes.len(), 1, "the node without a name is dropped");
    assert!(!s.jobs[0].nodes[0].indices_known);
    assert!(
        s.jobs[0].warnings.iter().any(|w| w.contains("4294967295")),
        "{:?}",
        s.jobs[0].warnings
    );
    let s = read_job_list(&cases[8], "x", Source::Cli).expect("reads");
    assert!(s.jobs[0].nodes.is_empty());
    assert!(
        s.jobs[0].warnings.iter().any(|w| w.contains("more than")),
        "{:?}",
        s.jobs[0].warnings
    );
    let s = read_job_list(&cases[6], "x", Source::Cli).expect("reads");
    assert!(
        s.jobs.is_empty() && s.slurm_messages.len() == 3,
        "{:?}",
        s.slurm_messages
    );
}

/// A large cluster's answer: 5 000 running jobs of 12 GPUs on two nodes each (about 14.5 MB in
/// the verbose v0.0.38 shape) reads in well under the gateway's polling period.
#[test]
fn huge_job_list_reads_quickly() {
    let template = String::from_utf8(fixture("v0.0.38_jobs_multinode.json")).expect("utf8");
    let doc: serde_json::Value = serde_json::from_str(&template).expect("json");
    let one = doc["jobs"][0].clone();
    let jobs: Vec<serde_json::Value> = (1..=5_000u32)
        .map(|i| {
            let mut j = one.clone();
            j["job_id"] = i.into();
            j
        })
        .collect();
    let body = serde_json::to_vec(&serde_json::json!({ "jobs": jobs })).expect("json");
    assert!(body.len() > 10_000_000, "{} bytes", body.len());
    let t0 = std::time::Instant::now();
    let s = read_job_list(&body, "huge", Source::Cli).expect("reads");
    let took = t0.elapsed();
    assert_eq!(s.jobs.len(), 5_000);
    assert!(s.jobs.iter().all(|j| j.gpu_count() == 12));
    assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
    eprintln!("read {} bytes / 5000 jobs in {took:?}", body.len());
}
