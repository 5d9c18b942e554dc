//! The properties both agent fuzz targets check, shared with the stable replay test
//! (`adapters/agent/tests/fuzz_corpus.rs`, which includes this file), so the corpus is held to
//! the same rules on every test run as under libFuzzer. A violated property is a panic.
//!
//! Everything runs the agent's own code paths on simulated GPUs at a fixed time: the bytes a
//! `PUT /v1/leases/{id}` handler decodes ([`api::decode_lease_request`]) and the bytes the agent
//! reads from its state file at start ([`state::parse`], then [`LeaseBook::from_state`]).

// Each target and the replay test use a different part of this file.
#![allow(dead_code)]

use chrono::{DateTime, TimeDelta, Utc};
use flexgate_agent::api::{self, CapStatus, DEFAULT_MAX_LEASE_TTL, GpuCap, JobRequest, LeaseRequest};
use flexgate_agent::clock::ManualClock;
use flexgate_agent::gpu::GpuControl;
use flexgate_agent::gpu::sim::{SimGpus, SimOptions};
use flexgate_agent::lease::{LeaseBook, LeaseError, MemoryJournal, PersistedState, check_loaded};
use flexgate_agent::state;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The agent's time in every run: the seeds' deadlines are written against it.
pub fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_782_907_200, 0).unwrap_or_default() // 2026-07-01T12:00:00Z
}

/// The longest lease, as the agent's default configuration has it.
pub const TTL: TimeDelta = DEFAULT_MAX_LEASE_TTL;

/// Host of the simulated node: GPU UUIDs are `GPU-sim-n0-0` to `GPU-sim-n0-3`.
pub const HOST: &str = "n0";

/// Four simulated H200s (200–700 W, default 700 W): GPU 1 starts at 650 W (a pre-event limit
/// that is not the default), GPU 2 sits under a 500 W out-of-band limit.
pub fn gpus() -> SimGpus {
    let mut opts = SimOptions::h200(HOST, 4);
    opts.initial_limit_w.insert(1, 650.0);
    opts.oob_limit_w.insert(2, 500.0);
    match SimGpus::new(&opts, Arc::new(ManualClock::new(now()))) {
        Ok(sim) => sim,
        Err(e) => panic!("the simulated node is valid: {e}"),
    }
}

fn requested_mw(sim: &SimGpus) -> Vec<u32> {
    sim.gpus()
        .iter()
        .map(|g| sim.limits(g.index).map_or(0, |l| l.requested_mw))
        .collect()
}

fn assert_in_range(sim: &SimGpus) {
    for g in sim.gpus() {
        let Ok(l) = sim.limits(g.index) else {
            panic!("simulated GPU {} does not read", g.index)
        };
        assert!(
            (g.min_mw..=g.max_mw).contains(&l.requested_mw),
            "GPU {} at {} mW, outside [{}, {}]",
            g.index,
            l.requested_mw,
            g.min_mw,
            g.max_mw
        );
        assert!(
            l.enforced_mw <= l.requested_mw,
            "GPU {} enforces above its limit",
            g.index
        );
    }
}

fn mw(w: f64) -> u32 {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let mw = (w * 1000.0).round().clamp(0.0, f64::from(u32::MAX)) as u32;
    mw
}

/// `PUT /v1/leases/fz` with these bytes as its body, on a fresh node:
/// - decoding never panics, and a refusal says something;
/// - an accepted request re-encodes to JSON that decodes to the same request;
/// - it is applied (an empty book refuses nothing a check let through); the answer has one
///   entry per GPU asked, in order, `unknown_gpu` exactly for UUIDs the node lacks; every
///   limit written is in the GPU's range; an `ok` GPU runs at the cap asked (to the milliwatt);
/// - the same body again is the same answer and changes nothing; the same generation with
///   other caps is a `GenerationConflict` that changes nothing; a lower generation is stale;
/// - with `new_job_cap_w`, a job starting on every GPU keeps every limit in range;
/// - at the deadline the dead-man switch puts every GPU back at its limit before the lease.
pub fn lease_request(body: &[u8]) {
    let now = now();
    let req = match api::decode_lease_request(body, now, TTL) {
        Ok(req) => req,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "a refusal must say something");
            return;
        }
    };
    let text = match serde_json::to_vec(&req) {
        Ok(t) => t,
        Err(e) => panic!("an accepted request must encode: {e}; {req:?}"),
    };
    match api::decode_lease_request(&text, now, TTL) {
        Ok(back) => assert_eq!(back, req, "re-encoded request: {}", String::from_utf8_lossy(&text)),
        Err(e) => panic!(
            "the re-encoded request was refused: {e}; {}",
            String::from_utf8_lossy(&text)
        ),
    }

    let sim = gpus();
    let before = requested_mw(&sim);
    let mut book = LeaseBook::new(sim.gpus(), TTL);
    let mut journal = MemoryJournal;
    let first = match book.put("fz", &req, now, &sim, &mut journal) {
        Ok(r) => r,
        Err(e) => panic!("a checked request on an empty book must be applied: {e}; {req:?}"),
    };
    assert_eq!(first.applied.len(), req.gpus.len(), "one answer per GPU asked");
    for (a, c) in first.applied.iter().zip(&req.gpus) {
        assert_eq!(
            (a.uuid.as_str(), a.requested_w.to_bits()),
            (c.uuid.as_str(), c.cap_w.to_bits())
        );
        let known = sim.gpus().iter().find(|g| g.uuid == c.uuid);
        match known {
            None => assert_eq!(a.status, CapStatus::UnknownGpu, "{}", a.uuid),
            Some(g) => {
                assert!(a.status.is_applied(), "simulated GPUs do not fail: {a:?}");
                let Some(applied) = a.applied_w else {
                    panic!("an applied cap reports its limit: {a:?}")
                };
                assert!(
                    (g.min_mw..=g.max_mw).contains(&mw(applied)),
                    "applied {applied} W outside the range"
                );
                if a.status == CapStatus::Ok {
                    assert_eq!(mw(applied), mw(c.cap_w), "an ok cap is the cap asked: {a:?}");
                }
            }
        }
    }
    assert_in_range(&sim);

    let held = book.snapshot();
    let limits = requested_mw(&sim);
    assert_eq!(
        book.put("fz", &req, now, &sim, &mut journal),
        Ok(first.clone()),
        "a repeat"
    );
    let mut other = req.clone();
    match other.gpus.first_mut() {
        Some(c) => c.cap_w = if c.cap_w >= 1.0 { c.cap_w - 1.0 } else { c.cap_w + 1.0 },
        None => other.gpus.push(GpuCap {
            uuid: format!("GPU-sim-{HOST}-0"),
            cap_w: 300.0,
        }),
    }
    match book.put("fz", &other, now, &sim, &mut journal) {
        Err(LeaseError::GenerationConflict {
            generation, difference, ..
        }) => {
            assert_eq!(generation, req.generation);
            assert!(!difference.is_empty());
        }
        other => panic!("other caps under the same generation must conflict: {other:?}"),
    }
    if let Some(lower) = req.generation.checked_sub(1) {
        let stale = LeaseRequest {
            generation: lower,
            ..req.clone()
        };
        assert!(matches!(
            book.put("fz", &stale, now, &sim, &mut journal),
            Err(LeaseError::StaleGeneration { .. })
        ));
    }
    assert_eq!(book.snapshot(), held, "refusals change nothing");
    assert_eq!(requested_mw(&sim), limits, "refusals write nothing");

    if req.new_job_cap_w.is_some() {
        let job = JobRequest {
            gpus: sim.gpus().iter().map(|g| g.minor).collect(),
        };
        if let Err(e) = book.job_start("job-1", &job, now, &sim, &mut journal) {
            panic!("a job start during a lease is applied: {e}");
        }
        assert_in_range(&sim);
    }

    let report = book.reconcile_all(req.expires_at, &sim, &mut journal);
    assert_eq!(
        report.expired,
        vec!["fz".to_owned()],
        "the lease expires at its deadline"
    );
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(book.is_idle(), "nothing is held or pending after expiry");
    assert_eq!(requested_mw(&sim), before, "the dead-man switch restores every GPU");
}

/// The bytes of `<state_dir>/leases.json` at agent start:
/// - reading never panics, and a refusal says something;
/// - a state that reads writes back (as the journal writes it) to a state that reads equal;
/// - loading it never fails (the layout was checked) and every lease either stays, passing the
///   API's checks ([`check_loaded`]: no deadline more than the maximum lifetime ahead), or is
///   refused with a reason;
/// - after the start-up reconcile every GPU is in its range, and once the maximum lifetime has
///   passed no lease is left and every GPU is back at its saved pre-event limit (clamped into
///   range), at its default if a lease held it with none saved, or untouched otherwise: no
///   file can keep a cap on past the dead-man switch.
pub fn state_journal(bytes: &[u8]) {
    let path = Path::new("leases.json");
    let state = match state::parse(path, bytes) {
        Ok(s) => s,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "a refusal must say something");
            return;
        }
    };
    let text = match serde_json::to_vec_pretty(&state) {
        Ok(t) => t,
        Err(e) => panic!("a state that reads must write: {e}"),
    };
    match state::parse(path, &text) {
        Ok(back) => assert_eq!(back, state, "written state: {}", String::from_utf8_lossy(&text)),
        Err(e) => panic!("the written state was refused: {e}"),
    }

    let now = now();
    let sim = gpus();
    let initial = requested_mw(&sim);
    let expected = expected_after_expiry(&state, &sim, &initial);
    let loaded = state.leases.len();
    let (mut book, refused) = match LeaseBook::from_state(state, sim.gpus(), TTL, now) {
        Ok(b) => b,
        Err(e) => panic!("a state that reads must load: {e}"),
    };
    assert_eq!(
        book.summaries().len() + refused.len(),
        loaded,
        "every lease is kept or refused"
    );
    for r in &refused {
        assert!(!r.reason.is_empty(), "a refused lease says why: {r:?}");
    }
    for s in book.summaries() {
        assert!(
            s.expires_at - now <= TTL,
            "lease {} kept with a deadline past the maximum",
            s.id
        );
        let Some(lease) = book.lease(&s.id) else {
            panic!("lease {} listed but not held", s.id)
        };
        if let Err(e) = check_loaded(lease, now, TTL) {
            panic!("lease {} kept although {e}", s.id);
        }
    }
    let mut journal = MemoryJournal;
    let start = book.reconcile_all(now, &sim, &mut journal);
    assert!(start.failed.iter().all(|(u, _)| !is_node_gpu(&sim, u)), "{start:?}");
    assert_in_range(&sim);

    book.reconcile_all(now + TTL + TimeDelta::seconds(1), &sim, &mut journal);
    assert!(book.summaries().is_empty(), "a lease outlived the maximum lifetime");
    for uuid in book.pending_restore() {
        assert!(!is_node_gpu(&sim, &uuid), "GPU {uuid} of this node not restored");
    }
    assert_eq!(requested_mw(&sim), expected, "limits after every lease ended");
}

fn is_node_gpu(sim: &SimGpus, uuid: &str) -> bool {
    sim.gpus().iter().any(|g| g.uuid == uuid)
}

/// What each GPU of the node must be at once every lease of `state` has ended.
fn expected_after_expiry(state: &PersistedState, sim: &SimGpus, initial: &[u32]) -> Vec<u32> {
    let held: BTreeMap<&str, ()> = state
        .leases
        .iter()
        .flat_map(|l| l.holds.keys().map(|k| (k.as_str(), ())))
        .collect();
    sim.gpus()
        .iter()
        .zip(initial)
        .map(|(g, &was)| match state.baselines.get(&g.uuid) {
            Some(&b) => b.clamp(g.min_mw, g.max_mw),
            None if held.contains_key(g.uuid.as_str()) => g.default_mw,
            None => was,
        })
        .collect()
}
