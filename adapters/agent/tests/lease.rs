//! The lease state machine with explicit times and simulated GPUs (no sleeps, no HTTP).

mod common;

use chrono::{DateTime, TimeDelta, Utc};
use common::{sim, t0};
use flexgate_agent::api::{CapStatus, GpuCap, JobRequest, LeaseRequest, RenewRequest, RestorePolicy};
use flexgate_agent::gpu::sim::SimGpus;
use flexgate_agent::gpu::{GpuControl, GpuError};
use flexgate_agent::lease::{Journal, JournalError, LeaseBook, LeaseError, MemoryJournal, PersistedState, TickReport};
use flexgate_agent::state::FileJournal;
use std::sync::{Arc, Mutex};

const TTL: TimeDelta = TimeDelta::hours(24);

fn uuid(i: u32) -> String {
    format!("GPU-sim-node-t-{i}")
}

fn req(generation: u64, expires_at: DateTime<Utc>, caps: &[(u32, f64)]) -> LeaseRequest {
    LeaseRequest {
        generation,
        expires_at,
        gpus: caps.iter().map(|&(i, cap_w)| GpuCap { uuid: uuid(i), cap_w }).collect(),
        restore: RestorePolicy::PreEvent,
        new_job_cap_w: None,
    }
}

fn limit_w(sim: &SimGpus, i: u32) -> f64 {
    f64::from(sim.limits(i).expect("readable").requested_mw) / 1000.0
}

fn enforced_w(sim: &SimGpus, i: u32) -> f64 {
    f64::from(sim.limits(i).expect("readable").enforced_mw) / 1000.0
}

fn book(sim: &SimGpus) -> LeaseBook {
    LeaseBook::new(sim.gpus(), TTL)
}

#[test]
fn caps_are_clamped_into_range_and_reported() {
    let (sim, _) = sim("node-t", 4, |_| {});
    let mut b = book(&sim);
    let r = b
        .put(
            "evt",
            &req(1, t0() + TimeDelta::minutes(10), &[(0, 100.0), (1, 800.0), (2, 350.0)]),
            t0(),
            &sim,
            &mut MemoryJournal,
        )
        .expect("accepted");
    let got: Vec<_> = r
        .applied
        .iter()
        .map(|a| (a.status, a.applied_w, a.enforced_w))
        .collect();
    assert_eq!(
        got,
        vec![
            (CapStatus::Clamped, Some(200.0), Some(200.0)),
            (CapStatus::Clamped, Some(700.0), Some(700.0)),
            (CapStatus::Ok, Some(350.0), Some(350.0)),
        ]
    );
    assert_eq!(
        (limit_w(&sim, 0), limit_w(&sim, 1), limit_w(&sim, 2), limit_w(&sim, 3)),
        (200.0, 700.0, 350.0, 700.0)
    );
    assert_eq!(r.applied[0].requested_w, 100.0);
}

#[test]
fn same_generation_repeats_the_answer_and_redoes_nothing() {
    let (sim, _) = sim("node-t", 2, |_| {});
    let mut b = book(&sim);
    let r = req(3, t0() + TimeDelta::minutes(10), &[(0, 300.0)]);
    let first = b.put("evt", &r, t0(), &sim, &mut MemoryJournal).expect("accepted");
    // Someone changes the limit behind the agent's back; a repeated PUT must not rewrite it.
    sim.set_limit(0, 450_000).expect("in range");
    let again = b
        .put("evt", &r, t0() + TimeDelta::seconds(1), &sim, &mut MemoryJournal)
        .expect("repeat");
    assert_eq!(again, first);
    assert_eq!(limit_w(&sim, 0), 450.0);
    // A resend computes its deadline afresh: a later one is still a repeat, and the answer says
    // which deadline holds (renew moves it).
    let later = req(3, t0() + TimeDelta::minutes(20), &[(0, 300.0)]);
    let answer = b
        .put("evt", &later, t0() + TimeDelta::seconds(2), &sim, &mut MemoryJournal)
        .expect("repeat");
    assert_eq!(answer.expires_at, t0() + TimeDelta::minutes(10));
    // A difference below a milliwatt (what the driver is given) is no difference either.
    let rounding = req(3, t0() + TimeDelta::minutes(10), &[(0, 300.000_000_1)]);
    assert_eq!(b.put("evt", &rounding, t0(), &sim, &mut MemoryJournal), Ok(first));
}

#[test]
fn same_generation_with_other_caps_is_refused_and_changes_nothing() {
    let (sim, _) = sim("node-t", 3, |_| {});
    let mut b = book(&sim);
    let exp = t0() + TimeDelta::minutes(10);
    b.put(
        "evt",
        &req(3, exp, &[(0, 300.0), (1, 400.0)]),
        t0(),
        &sim,
        &mut MemoryJournal,
    )
    .expect("accepted");
    let held = b.lease("evt").cloned().expect("held");
    for (other, says) in [
        (req(3, exp, &[(0, 250.0), (1, 400.0)]), "250 W asked, 300 W held"),
        (
            req(3, exp, &[(0, 300.0)]),
            "GPU-sim-node-t-1 of the lease held is missing",
        ),
        (
            req(3, exp, &[(0, 300.0), (1, 400.0), (2, 400.0)]),
            "GPU GPU-sim-node-t-2 is not in the lease held",
        ),
        (
            LeaseRequest {
                new_job_cap_w: Some(350.0),
                ..req(3, exp, &[(0, 300.0), (1, 400.0)])
            },
            "new_job_cap_w: 350 W asked, none held",
        ),
    ] {
        let err = b
            .put("evt", &other, t0(), &sim, &mut MemoryJournal)
            .expect_err("conflict");
        let LeaseError::GenerationConflict {
            ref id,
            generation,
            ref difference,
        } = err
        else {
            panic!("not a conflict: {err:?}");
        };
        assert_eq!((id.as_str(), generation), ("evt", 3));
        assert!(difference.contains(says), "{difference}");
        let text = err.to_string();
        assert!(
            text.contains("generation 3") && text.contains("not applied") && text.contains("higher generation"),
            "{text}"
        );
        assert_eq!(b.lease("evt"), Some(&held), "the lease held is unchanged");
        assert_eq!(
            (limit_w(&sim, 0), limit_w(&sim, 1), limit_w(&sim, 2)),
            (300.0, 400.0, 700.0)
        );
    }
    // The order of the GPUs is not part of the body.
    let reordered = req(3, exp, &[(1, 400.0), (0, 300.0)]);
    assert!(b.put("evt", &reordered, t0(), &sim, &mut MemoryJournal).is_ok());
    // A higher generation carries the new caps.
    b.put("evt", &req(4, exp, &[(0, 250.0)]), t0(), &sim, &mut MemoryJournal)
        .expect("replaces");
    assert_eq!((limit_w(&sim, 0), limit_w(&sim, 1)), (250.0, 700.0));
}

#[test]
fn stale_generation_is_refused_and_changes_nothing() {
    let (sim, _) = sim("node-t", 2, |_| {});
    let mut b = book(&sim);
    b.put(
        "evt",
        &req(5, t0() + TimeDelta::minutes(10), &[(0, 300.0)]),
        t0(),
        &sim,
        &mut MemoryJournal,
    )
    .expect("ok");
    let err = b
        .put(
            "evt",
            &req(4, t0() + TimeDelta::minutes(10), &[(0, 500.0), (1, 200.0)]),
            t0(),
            &sim,
            &mut MemoryJournal,
        )
        .expect_err("stale");
    assert_eq!(
        err,
        LeaseError::StaleGeneration {
            id: "evt".into(),
            requested: 4,
            held: 5
        }
    );
    assert_eq!((limit_w(&sim, 0), limit_w(&sim, 1)), (300.0, 700.0));
    assert_eq!(b.lease("evt").expect("held").generation, 5);
}

#[test]
fn higher_generation_replaces_and_restores_dropped_gpus() {
    let (sim, _) = sim("node-t", 3, |o| {
        o.initial_limit_w.insert(1, 650.0);
    });
    let mut b = book(&sim);
    let exp = t0() + TimeDelta::minutes(10);
    b.put(
        "evt",
        &req(1, exp, &[(0, 300.0), (1, 300.0)]),
        t0(),
        &sim,
        &mut MemoryJournal,
    )
    .expect("ok");
    let r = b
        .put(
            "evt",
            &req(2, exp, &[(0, 250.0), (2, 400.0)]),
            t0(),
            &sim,
            &mut MemoryJournal,
        )
        .expect("ok");
    assert_eq!(r.generation, 2);
    assert_eq!(limit_w(&sim, 0), 250.0);
    assert_eq!(limit_w(&sim, 1), 650.0, "dropped GPU back at its pre-event limit");
    assert_eq!(limit_w(&sim, 2), 400.0);
    assert_eq!(b.baseline_mw(&uuid(1)), None);
    assert_eq!(
        b.baseline_mw(&uuid(0)),
        Some(700_000),
        "pre-event limit kept from generation 1"
    );
}

#[test]
fn renew_moves_the_deadline_and_checks_it() {
    let (sim, _) = sim("node-t", 1, |_| {});
    let mut b = book(&sim);
    b.put(
        "evt",
        &req(1, t0() + TimeDelta::seconds(30), &[(0, 300.0)]),
        t0(),
        &sim,
        &mut MemoryJournal,
    )
    .expect("ok");
    let later = t0() + TimeDelta::seconds(20);
    let s = b
        .renew(
            "evt",
            &RenewRequest {
                expires_at: later + TimeDelta::seconds(30),
            },
            later,
            &sim,
            &mut MemoryJournal,
        )
        .expect("renewed");
    assert_eq!(s.expires_at, later + TimeDelta::seconds(30));
    // The old deadline passes: still capped.
    let r = b.reconcile_all(t0() + TimeDelta::seconds(40), &sim, &mut MemoryJournal);
    assert!(r.expired.is_empty());
    assert_eq!(limit_w(&sim, 0), 300.0);
    assert!(matches!(
        b.renew(
            "evt",
            &RenewRequest { expires_at: later },
            later,
            &sim,
            &mut MemoryJournal
        ),
        Err(LeaseError::Invalid(_))
    ));
    assert!(matches!(
        b.renew(
            "nope",
            &RenewRequest {
                expires_at: later + TimeDelta::seconds(5)
            },
            later,
            &sim,
            &mut MemoryJournal
        ),
        Err(LeaseError::NotFound(_))
    ));
    // A lease past its deadline cannot be renewed: it is gone, and its GPUs restored.
    let dead = t0() + TimeDelta::seconds(60);
    assert!(matches!(
        b.renew(
            "evt",
            &RenewRequest {
                expires_at: dead + TimeDelta::seconds(30)
            },
            dead,
            &sim,
            &mut MemoryJournal
        ),
        Err(LeaseError::NotFound(_))
    ));
    assert_eq!(limit_w(&sim, 0), 700.0);
}

#[test]
fn delete_restores_is_repeatable_and_leaves_a_tombstone() {
    let (sim, _) = sim("node-t", 2, |o| {
        o.initial_limit_w.insert(0, 680.0);
    });
    let mut b = book(&sim);
    let exp = t0() + TimeDelta::minutes(10);
    b.put(
        "evt",
        &req(2, exp, &[(0, 300.0), (1, 300.0)]),
        t0(),
        &sim,
        &mut MemoryJournal,
    )
    .expect("ok");
    let d = b.delete("evt", t0(), &sim, &mut MemoryJournal).expect("deleted");
    assert!(d.deleted);
    assert_eq!(d.restored.len(), 2);
    assert!(d.restored.iter().all(|g| g.status == CapStatus::Ok));
    assert_eq!((limit_w(&sim, 0), limit_w(&sim, 1)), (680.0, 700.0));
    assert!(b.is_idle());
    let again = b.delete("evt", t0(), &sim, &mut MemoryJournal).expect("no-op");
    assert!(!again.deleted && again.restored.is_empty());
    // A delayed retry of the deleted generation must not resurrect the lease.
    let err = b
        .put("evt", &req(2, exp, &[(0, 300.0)]), t0(), &sim, &mut MemoryJournal)
        .expect_err("deleted");
    assert_eq!(
        err,
        LeaseError::Deleted {
            id: "evt".into(),
            deleted: 2
        }
    );
    assert_eq!(limit_w(&sim, 0), 680.0);
    b.put("evt", &req(3, exp, &[(0, 300.0)]), t0(), &sim, &mut MemoryJournal)
        .expect("higher generation accepted");
    assert_eq!(limit_w(&sim, 0), 300.0);
}

#[test]
fn expiry_restores_the_pre_event_limit_not_the_default() {
    let (sim, _) = sim("node-t", 2, |o| {
        o.initial_limit_w.insert(0, 650.0);
    });
    let mut b = book(&sim);
    let exp = t0() + TimeDelta::seconds(30);
    b.put(
        "evt",
        &req(1, exp, &[(0, 300.0), (1, 250.0)]),
        t0(),
        &sim,
        &mut MemoryJournal,
    )
    .expect("ok");
    let before = b.reconcile_all(exp - TimeDelta::milliseconds(1), &sim, &mut MemoryJournal);
    assert!(before.expired.is_empty());
    assert_eq!(limit_w(&sim, 0), 300.0);
    let at = b.reconcile_all(exp, &sim, &mut MemoryJournal);
    assert_eq!(at.expired, vec!["evt".to_owned()]);
    assert_eq!(limit_w(&sim, 0), 650.0, "pre-event, not the 700 W default");
    assert_eq!(limit_w(&sim, 1), 700.0);
    assert!(b.is_idle());
}

#[test]
fn two_leases_on_one_gpu_the_lower_cap_wins_until_both_end() {
    let (sim, _) = sim("node-t", 1, |_| {});
    let mut b = book(&sim);
    let exp = t0() + TimeDelta::minutes(10);
    b.put("a", &req(1, exp, &[(0, 400.0)]), t0(), &sim, &mut MemoryJournal)
        .expect("ok");
    let rb = b
        .put("b", &req(1, exp, &[(0, 300.0)]), t0(), &sim, &mut MemoryJournal)
        .expect("ok");
    assert_eq!(rb.applied[0].applied_w, Some(300.0));
    // A third lease asking for more reports the lower cap in force, and is satisfied (ok).
    let rc = b
        .put("c", &req(1, exp, &[(0, 500.0)]), t0(), &sim, &mut MemoryJournal)
        .expect("ok");
    assert_eq!(
        (rc.applied[0].status, rc.applied[0].applied_w),
        (CapStatus::Ok, Some(300.0))
    );
    assert_eq!(limit_w(&sim, 0), 300.0);
    b.delete("b", t0(), &sim, &mut MemoryJournal).expect("deleted");
    assert_eq!(limit_w(&sim, 0), 400.0);
    b.delete("a", t0(), &sim, &mut MemoryJournal).expect("deleted");
    assert_eq!(limit_w(&sim, 0), 500.0);
    assert_eq!(
        b.baseline_mw(&uuid(0)),
        Some(700_000),
        "still held by c: pre-event kept"
    );
    b.delete("c", t0(), &sim, &mut MemoryJournal).expect("deleted");
    assert_eq!(limit_w(&sim, 0), 700.0);
    assert_eq!(b.baseline_mw(&uuid(0)), None);
}

#[test]
fn out_of_band_limit_is_never_exceeded() {
    let (sim, _) = sim("node-t", 2, |o| {
        o.oob_limit_w.insert(0, 450.0);
    });
    let mut b = book(&sim);
    let exp = t0() + TimeDelta::minutes(10);
    let r = b
        .put(
            "evt",
            &req(1, exp, &[(0, 600.0), (1, 600.0)]),
            t0(),
            &sim,
            &mut MemoryJournal,
        )
        .expect("ok");
    assert_eq!(r.applied[0].status, CapStatus::Clamped);
    assert_eq!(
        r.applied[0].applied_w,
        Some(450.0),
        "never asks above the out-of-band limit"
    );
    assert_eq!(r.applied[0].enforced_w, Some(450.0));
    assert_eq!(
        (r.applied[1].status, r.applied[1].applied_w),
        (CapStatus::Ok, Some(600.0))
    );
    let r2 = b
        .put("evt", &req(2, exp, &[(0, 300.0)]), t0(), &sim, &mut MemoryJournal)
        .expect("ok");
    assert_eq!(
        (r2.applied[0].status, r2.applied[0].enforced_w),
        (CapStatus::Ok, Some(300.0))
    );
    // The GPU is now held at 300 W (requested = enforced): the out-of-band limit is hidden, yet
    // asking for more again must still not go above it.
    let r3 = b
        .put("evt", &req(3, exp, &[(0, 600.0)]), t0(), &sim, &mut MemoryJournal)
        .expect("ok");
    assert_eq!(
        (r3.applied[0].status, r3.applied[0].applied_w),
        (CapStatus::Clamped, Some(450.0))
    );
    assert_eq!(limit_w(&sim, 0), 450.0);
    b.delete("evt", t0(), &sim, &mut MemoryJournal).expect("deleted");
    // Restored to the exact pre-event requested limit; the GPU still enforces the BMC limit.
    assert_eq!(limit_w(&sim, 0), 700.0);
    assert_eq!(enforced_w(&sim, 0), 450.0);
}

#[test]
fn job_hooks_cap_new_jobs_and_restore_ended_ones() {
    let (sim, _) = sim("node-t", 4, |o| {
        o.initial_limit_w.insert(3, 660.0);
    });
    let mut b = book(&sim);
    let exp = t0() + TimeDelta::minutes(10);
    // Without a lease that caps new jobs, a job start changes nothing.
    let idle = b
        .job_start("100", &JobRequest { gpus: vec![2] }, t0(), &sim, &mut MemoryJournal)
        .expect("ok");
    assert!(idle.lease_ids.is_empty());
    assert_eq!(
        (idle.gpus[0].status, idle.gpus[0].limit_w),
        (CapStatus::Ok, Some(700.0))
    );

    let mut r = req(1, exp, &[(0, 300.0)]);
    r.new_job_cap_w = Some(150.0);
    b.put("evt", &r, t0(), &sim, &mut MemoryJournal).expect("ok");
    let start = b
        .job_start(
            "101",
            &JobRequest { gpus: vec![2, 3, 9] },
            t0(),
            &sim,
            &mut MemoryJournal,
        )
        .expect("ok");
    assert_eq!(start.lease_ids, vec!["evt".to_owned()]);
    let got: Vec<_> = start.gpus.iter().map(|g| (g.index, g.status, g.limit_w)).collect();
    assert_eq!(
        got,
        vec![
            (2, CapStatus::Clamped, Some(200.0)),
            (3, CapStatus::Clamped, Some(200.0)),
            (9, CapStatus::UnknownGpu, None)
        ]
    );
    let mut held = b.lease("evt").expect("held").holds.keys().cloned().collect::<Vec<_>>();
    held.sort();
    assert_eq!(held, vec![uuid(0), uuid(2), uuid(3)]);

    // A new generation that still caps new jobs keeps the job's GPUs (at the new cap).
    let mut r2 = req(2, exp, &[(0, 300.0)]);
    r2.new_job_cap_w = Some(250.0);
    b.put("evt", &r2, t0(), &sim, &mut MemoryJournal).expect("ok");
    assert_eq!((limit_w(&sim, 2), limit_w(&sim, 3)), (250.0, 250.0));

    let end = b
        .job_end("101", &JobRequest { gpus: vec![3] }, t0(), &sim, &mut MemoryJournal)
        .expect("ok");
    assert_eq!(end.lease_ids, vec!["evt".to_owned()]);
    assert_eq!((end.gpus[0].status, end.gpus[0].limit_w), (CapStatus::Ok, Some(660.0)));
    assert_eq!(limit_w(&sim, 3), 660.0, "pre-event limit, not the default");
    assert!(!b.lease("evt").expect("held").holds.contains_key(&uuid(3)));

    // A generation without new_job_cap_w drops the remaining job GPU.
    b.put("evt", &req(3, exp, &[(0, 300.0)]), t0(), &sim, &mut MemoryJournal)
        .expect("ok");
    assert_eq!(limit_w(&sim, 2), 700.0);
    assert_eq!(limit_w(&sim, 0), 300.0);
}

#[test]
fn driver_errors_are_reported_per_gpu_and_leave_nothing_behind() {
    let (sim, _) = sim("node-t", 3, |_| {});
    sim.set_fault(1, Some(GpuError::NoPermission)).expect("gpu");
    sim.set_fault(2, Some(GpuError::GpuLost)).expect("gpu");
    let mut b = book(&sim);
    let mut r = req(1, t0() + TimeDelta::minutes(10), &[(0, 300.0), (1, 300.0), (2, 300.0)]);
    r.gpus.push(GpuCap {
        uuid: "GPU-not-here".into(),
        cap_w: 300.0,
    });
    let resp = b.put("evt", &r, t0(), &sim, &mut MemoryJournal).expect("accepted");
    let statuses: Vec<_> = resp.applied.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        vec![
            CapStatus::Ok,
            CapStatus::NoPermission,
            CapStatus::GpuLost,
            CapStatus::UnknownGpu
        ]
    );
    assert_eq!(resp.applied[1].applied_w, Some(700.0), "unchanged limit reported");
    let holds: Vec<_> = b.lease("evt").expect("held").holds.keys().cloned().collect();
    assert_eq!(holds, vec![uuid(0)]);
    assert_eq!(b.baseline_mw(&uuid(1)), None);
    assert_eq!(b.baseline_mw(&uuid(2)), None);
}

#[test]
fn failed_restores_are_retried_and_drift_is_corrected() {
    let (sim, _) = sim("node-t", 2, |_| {});
    let mut b = book(&sim);
    let exp = t0() + TimeDelta::minutes(10);
    b.put(
        "evt",
        &req(1, exp, &[(0, 300.0), (1, 300.0)]),
        t0(),
        &sim,
        &mut MemoryJournal,
    )
    .expect("ok");
    // A GPU reset wipes GPU 1's cap: the watchdog puts it back.
    sim.reset_to_default(1).expect("gpu");
    let r = b.reconcile_all(t0() + TimeDelta::seconds(1), &sim, &mut MemoryJournal);
    assert_eq!(r.written, vec![uuid(1)]);
    assert_eq!(limit_w(&sim, 1), 300.0);
    // GPU 0 falls off the bus; deleting cannot restore it now.
    sim.set_fault(0, Some(GpuError::GpuLost)).expect("gpu");
    let d = b
        .delete("evt", t0() + TimeDelta::seconds(2), &sim, &mut MemoryJournal)
        .expect("deleted");
    let status0 = d.restored.iter().find(|g| g.uuid == uuid(0)).expect("listed").status;
    assert_eq!(status0, CapStatus::GpuLost);
    assert_eq!(b.pending_restore(), vec![uuid(0)]);
    assert!(!b.is_idle());
    // Retried with back-off: 1 s after the first failure, then 2 s after the second.
    let r = b.reconcile_all(t0() + TimeDelta::seconds(3), &sim, &mut MemoryJournal);
    assert_eq!(r.failed, vec![(uuid(0), CapStatus::GpuLost)]);
    sim.set_fault(0, None).expect("gpu");
    let r = b.reconcile_all(t0() + TimeDelta::seconds(4), &sim, &mut MemoryJournal);
    assert_eq!(r, TickReport::default(), "still backing off");
    assert_eq!(limit_w(&sim, 0), 300.0);
    b.reconcile_all(t0() + TimeDelta::seconds(5), &sim, &mut MemoryJournal);
    assert_eq!(limit_w(&sim, 0), 700.0);
    assert!(b.is_idle());
    assert!(b.restore_retries().is_empty());
}

/// A cap undone three times within 15 minutes is unreliable (the `FlexgateAgentCapDrift`
/// threshold); it is still re-applied every time, and it is trusted again once 15 minutes pass
/// without the third.
#[test]
fn repeated_drift_marks_the_cap_unreliable_for_the_window() {
    let (sim, _) = sim("node-t", 2, |_| {});
    let mut b = book(&sim);
    b.put(
        "evt",
        &req(1, t0() + TimeDelta::hours(2), &[(0, 300.0)]),
        t0(),
        &sim,
        &mut MemoryJournal,
    )
    .expect("ok");
    let undo_at = |b: &mut LeaseBook, minutes: i64| {
        sim.reset_to_default(0).expect("gpu");
        let now = t0() + TimeDelta::minutes(minutes);
        let r = b.reconcile_all(now, &sim, &mut MemoryJournal);
        assert_eq!(r.written, vec![uuid(0)], "re-applied at minute {minutes}");
        assert_eq!(limit_w(&sim, 0), 300.0);
        now
    };
    undo_at(&mut b, 1);
    let now = undo_at(&mut b, 5);
    assert!(!b.cap_unreliable(&uuid(0), now), "twice is not yet a pattern");
    let now = undo_at(&mut b, 14);
    assert!(b.cap_unreliable(&uuid(0), now), "three times within 15 minutes");
    assert!(!b.cap_unreliable(&uuid(1), now), "another GPU is not affected");
    assert!(b.cap_unreliable(&uuid(0), t0() + TimeDelta::minutes(15)));
    // 15 minutes after the first correction only two remain in the window.
    assert!(!b.cap_unreliable(&uuid(0), t0() + TimeDelta::minutes(16)));
    assert_eq!(b.drift_corrections().get(&uuid(0)), Some(&3));
}

/// Records each saved state together with GPU 0's limit at the moment of saving.
struct Recorder {
    sim: SimGpus,
    saves: Arc<Mutex<Vec<(PersistedState, u32)>>>,
}

impl Journal for Recorder {
    fn save(&mut self, state: &PersistedState) -> Result<(), JournalError> {
        let limit = self.sim.limits(0).map(|l| l.requested_mw).unwrap_or(0);
        self.saves.lock().expect("lock").push((state.clone(), limit));
        Ok(())
    }
}

#[test]
fn intent_is_journaled_before_any_gpu_is_written() {
    let (sim, _) = sim("node-t", 1, |_| {});
    let saves = Arc::new(Mutex::new(Vec::new()));
    let mut journal = Recorder {
        sim: sim.clone(),
        saves: saves.clone(),
    };
    let mut b = book(&sim);
    b.put(
        "evt",
        &req(1, t0() + TimeDelta::minutes(10), &[(0, 300.0)]),
        t0(),
        &sim,
        &mut journal,
    )
    .expect("ok");
    let saves = saves.lock().expect("lock");
    let (first, limit_then) = &saves[0];
    assert_eq!(*limit_then, 700_000, "GPU untouched when the intent was saved");
    assert_eq!(first.leases.len(), 1);
    assert_eq!(first.baselines.get(&uuid(0)), Some(&700_000));
    let (last, limit_after) = saves.last().expect("saved after applying");
    assert_eq!(*limit_after, 300_000);
    assert_eq!(last.leases[0].response.applied[0].status, CapStatus::Ok);
}

struct Broken;

impl Journal for Broken {
    fn save(&mut self, _: &PersistedState) -> Result<(), JournalError> {
        Err(JournalError("disk full".into()))
    }
}

#[test]
fn unpersistable_changes_are_refused_and_rolled_back() {
    let (sim, _) = sim("node-t", 1, |_| {});
    let mut b = book(&sim);
    let exp = t0() + TimeDelta::minutes(10);
    let err = b
        .put("evt", &req(1, exp, &[(0, 300.0)]), t0(), &sim, &mut Broken)
        .expect_err("refused");
    assert!(matches!(err, LeaseError::Persist(_)));
    assert_eq!(limit_w(&sim, 0), 700.0);
    assert!(b.is_idle() && b.lease("evt").is_none());
    b.put("evt", &req(1, exp, &[(0, 300.0)]), t0(), &sim, &mut MemoryJournal)
        .expect("ok");
    assert!(matches!(
        b.delete("evt", t0(), &sim, &mut Broken),
        Err(LeaseError::Persist(_))
    ));
    assert_eq!(limit_w(&sim, 0), 300.0, "a refused delete changes nothing");
    assert!(b.lease("evt").is_some());
}

#[test]
fn an_epoch_is_admitted_only_at_or_above_the_highest_seen_and_raised_only_once_journaled() {
    let (sim, _) = sim("node-t", 1, |_| {});
    let mut b = book(&sim);
    // A higher epoch that cannot be journaled is refused and does not become the floor: after a
    // restart the agent could not prove it had seen it.
    assert!(matches!(b.admit_epoch(5, &mut Broken), Err(LeaseError::Persist(_))));
    assert_eq!(b.fence_epoch(), 0);
    b.admit_epoch(5, &mut MemoryJournal).expect("admitted");
    // Equal is the leader itself; below is fenced and counted; none of it needs a write.
    b.admit_epoch(5, &mut Broken).expect("the same epoch needs no write");
    for stale in [4, 0] {
        assert!(matches!(
            b.admit_epoch(stale, &mut Broken),
            Err(LeaseError::Fenced { epoch, highest: 5 }) if epoch == stale
        ));
    }
    assert_eq!((b.fence_epoch(), b.fenced_total()), (5, 2));
    assert_eq!(b.snapshot().fence_epoch, 5);
}

#[test]
fn state_survives_a_restart_and_expired_leases_are_restored_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exp = t0() + TimeDelta::seconds(60);
    {
        let (sim, _) = sim("node-t", 2, |o| {
            o.initial_limit_w.insert(1, 640.0);
        });
        let (mut j, state) = FileJournal::open(dir.path()).expect("opens");
        assert!(state.is_none());
        let mut b = book(&sim);
        b.put("evt", &req(7, exp, &[(0, 300.0), (1, 350.0)]), t0(), &sim, &mut j)
            .expect("ok");
        // The agent dies here (no cleanup).
    }
    // Restart before expiry; the GPUs came back at their start-up limits (as after a driver
    // reload): the lease is re-applied.
    {
        let (sim, _) = sim("node-t", 2, |o| {
            o.initial_limit_w.insert(1, 640.0);
        });
        assert_eq!(limit_w(&sim, 0), 700.0);
        let (mut j, state) = FileJournal::open(dir.path()).expect("opens");
        let now = t0() + TimeDelta::seconds(10);
        let (mut b, refused) = LeaseBook::from_state(state.expect("saved"), sim.gpus(), TTL, now).expect("valid");
        assert_eq!(refused, vec![]);
        let r = b.reconcile_all(now, &sim, &mut j);
        assert!(r.expired.is_empty());
        assert_eq!((limit_w(&sim, 0), limit_w(&sim, 1)), (300.0, 350.0));
        assert_eq!(b.lease("evt").expect("held").generation, 7);
        // The same generation is still a repeat after the restart, and other caps under it are
        // still told apart (the request's caps are in the state file).
        let again = b
            .put(
                "evt",
                &req(7, exp, &[(0, 300.0), (1, 350.0)]),
                t0() + TimeDelta::seconds(11),
                &sim,
                &mut j,
            )
            .expect("ok");
        assert_eq!(again.applied.len(), 2);
        assert!(matches!(
            b.put(
                "evt",
                &req(7, exp, &[(0, 500.0)]),
                t0() + TimeDelta::seconds(11),
                &sim,
                &mut j
            ),
            Err(LeaseError::GenerationConflict { generation: 7, .. })
        ));
    }
    // Restart after expiry, with the GPUs still capped (the agent was down, nobody restored).
    {
        let (sim, _) = sim("node-t", 2, |o| {
            o.initial_limit_w.insert(0, 300.0);
            o.initial_limit_w.insert(1, 350.0);
        });
        let (mut j, state) = FileJournal::open(dir.path()).expect("opens");
        let now = exp + TimeDelta::seconds(5);
        let (mut b, refused) = LeaseBook::from_state(state.expect("saved"), sim.gpus(), TTL, now).expect("valid");
        assert_eq!(refused, vec![], "an expired lease is not refused: it expires");
        let r = b.reconcile_all(now, &sim, &mut j);
        assert_eq!(r.expired, vec!["evt".to_owned()]);
        assert_eq!(
            (limit_w(&sim, 0), limit_w(&sim, 1)),
            (700.0, 640.0),
            "pre-event limits, from the state file"
        );
        assert!(b.is_idle());
        let (_, state) = FileJournal::open(dir.path()).expect("opens");
        let state = state.expect("saved");
        assert!(state.leases.is_empty() && state.baselines.is_empty());
    }
}

#[test]
fn bad_requests_are_refused_before_anything_changes() {
    let (sim, _) = sim("node-t", 1, |_| {});
    let mut b = book(&sim);
    for (id, r) in [
        ("evt", req(1, t0(), &[(0, 300.0)])),
        ("evt", req(1, t0() + TimeDelta::hours(25), &[(0, 300.0)])),
        ("evt", req(1, t0() + TimeDelta::minutes(1), &[(0, f64::NAN)])),
        ("evt", req(1, t0() + TimeDelta::minutes(1), &[(0, -5.0)])),
        ("evt", req(1, t0() + TimeDelta::minutes(1), &[(0, 300.0), (0, 200.0)])),
        ("bad id", req(1, t0() + TimeDelta::minutes(1), &[(0, 300.0)])),
    ] {
        let err = b.put(id, &r, t0(), &sim, &mut MemoryJournal).expect_err("refused");
        assert!(matches!(err, LeaseError::Invalid(_)), "{err:?}");
    }
    assert_eq!(limit_w(&sim, 0), 700.0);
    assert!(b.is_idle());
}

/// Writes a state file holding lease `evt` (generation 5, 300 W on GPU 0, pre-event 700 W) as the
/// agent itself would, then lets `edit` change it as a hand edit would.
fn state_file_with(dir: &std::path::Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let (sim, _) = sim("node-t", 2, |_| {});
    let (mut j, _) = FileJournal::open(dir).expect("opens");
    let mut b = book(&sim);
    b.put(
        "evt",
        &req(5, t0() + TimeDelta::seconds(60), &[(0, 300.0)]),
        t0(),
        &sim,
        &mut j,
    )
    .expect("accepted");
    let path = dir.join("leases.json");
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("state file")).expect("JSON");
    edit(&mut state);
    std::fs::write(&path, serde_json::to_vec_pretty(&state).expect("serializes")).expect("written");
}

/// An agent restarted on `dir` at `now`, its GPUs still at the caps the old process left (NVML
/// keeps a power limit across an agent restart).
fn restart(dir: &std::path::Path, now: DateTime<Utc>) -> (flexgate_agent::Agent, SimGpus) {
    let (sim, clock) = sim("node-t", 2, |o| {
        o.initial_limit_w.insert(0, 300.0);
    });
    clock.set(now);
    let auth = flexgate_agent::auth::Auth::from_secrets(common::CONTROL, None).expect("token");
    let mut config = flexgate_agent::AgentConfig::new("node-t", auth);
    config.state_dir = Some(dir.to_owned());
    let agent = flexgate_agent::Agent::with_clock(config, Box::new(sim.clone()), clock).expect("the agent starts");
    (agent, sim)
}

#[test]
fn a_state_file_lease_beyond_the_api_maximum_is_refused_and_its_gpus_restored() {
    let dir = tempfile::tempdir().expect("tempdir");
    state_file_with(dir.path(), |s| {
        s["leases"][0]["expires_at"] = "9999-12-31T23:59:59Z".into();
        s["leases"][0]["response"]["expires_at"] = "9999-12-31T23:59:59Z".into();
    });
    let (agent, sim) = restart(dir.path(), t0() + TimeDelta::seconds(10));
    assert_eq!(agent.health().leases, vec![], "the lease is not held");
    assert_eq!(limit_w(&sim, 0), 700.0, "the cap came off: pre-event limit restored");
    let (_, saved) = FileJournal::open(dir.path()).expect("opens");
    let saved = saved.expect("state file");
    assert!(
        saved.leases.is_empty() && saved.baselines.is_empty(),
        "the refused lease is gone from the file: {saved:?}"
    );
    // The agent works on: a gateway that still wants the cap re-sends its generation.
    let again = agent
        .put_lease("evt", &req(5, t0() + TimeDelta::seconds(70), &[(0, 300.0)]), 0)
        .expect("re-created");
    assert_eq!(again.applied[0].status, CapStatus::Ok);
    assert_eq!(limit_w(&sim, 0), 300.0);
}

#[test]
fn a_state_file_lease_just_within_the_api_maximum_is_re_applied() {
    // The limit is the API's own: at most max_lease_ttl after the agent's time now.
    let dir = tempfile::tempdir().expect("tempdir");
    let now = t0() + TimeDelta::seconds(10);
    let edge = (now + TTL).to_rfc3339();
    state_file_with(dir.path(), |s| {
        s["leases"][0]["expires_at"] = edge.clone().into();
        s["leases"][0]["response"]["expires_at"] = edge.clone().into();
    });
    let (agent, sim) = restart(dir.path(), now);
    assert_eq!(agent.health().leases.len(), 1);
    assert_eq!(limit_w(&sim, 0), 300.0);
}

#[test]
fn state_file_leases_the_api_would_refuse_are_dropped_and_restored() {
    for (what, edit) in [
        (
            "negative cap",
            Box::new(|s: &mut serde_json::Value| {
                s["leases"][0]["holds"]["GPU-sim-node-t-0"]["requested_w"] = (-5.0).into()
            }) as Box<dyn Fn(&mut serde_json::Value)>,
        ),
        (
            "id with a slash",
            Box::new(|s: &mut serde_json::Value| {
                s["leases"][0]["id"] = "../evt".into();
                s["leases"][0]["response"]["lease_id"] = "../evt".into();
            }),
        ),
        (
            "twice the same id",
            Box::new(|s: &mut serde_json::Value| {
                let copy = s["leases"][0].clone();
                s["leases"].as_array_mut().expect("array").push(copy);
            }),
        ),
        (
            "answer of another lease",
            Box::new(|s: &mut serde_json::Value| {
                s["leases"][0]["response"]["generation"] = 99.into();
            }),
        ),
        (
            "cap for new jobs in milliwatts",
            Box::new(|s: &mut serde_json::Value| {
                s["leases"][0]["new_job_cap_w"] = 350_000.0.into();
            }),
        ),
        (
            "no pre-event limit saved",
            Box::new(|s: &mut serde_json::Value| {
                s["leases"][0]["expires_at"] = "9999-12-31T23:59:59Z".into();
                s["baselines"] = serde_json::json!({});
            }),
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        state_file_with(dir.path(), edit);
        let (agent, sim) = restart(dir.path(), t0() + TimeDelta::seconds(10));
        assert_eq!(agent.health().leases, vec![], "{what}: the lease is not held");
        // Without a saved pre-event limit, the default limit (700 W) is restored: no cap stays
        // on with nothing to restore.
        assert_eq!(limit_w(&sim, 0), 700.0, "{what}: the GPU is restored");
        assert!(agent.health().pending_restore.is_empty(), "{what}");
    }
}
