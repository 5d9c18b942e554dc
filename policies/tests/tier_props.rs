//! Property: on any concave, increasing throughput curve, the floor the gateway sets for a job
//! measured slower than its tier keeps the tier on the job's *true* curve, whatever subset of
//! its points was measured, and is never below the cap it was measured at nor above the range.

use chrono::DateTime;
use flexgate_policies::control::evidence::{JobEvidence, Point, bucket, tier_floor};
use proptest::prelude::*;

/// A concave increasing curve through (200, t0) … (700, 1): slopes decreasing.
fn curve(slopes: &[f64]) -> impl Fn(f64) -> f64 + '_ {
    move |cap: f64| {
        // Piecewise linear on 100 W segments from 200 to 700 W, normalised to 1 at 700 W.
        let total: f64 = slopes.iter().sum();
        let mut tokens = 1.0 - total;
        let mut c = 200.0;
        for s in slopes {
            let step = (cap - c).clamp(0.0, 100.0);
            tokens += s * step / 100.0;
            c += 100.0;
        }
        tokens
    }
}

fn point(cap_w: f64, tokens: f64) -> Point {
    Point {
        cap_w,
        power_w: cap_w * 8.0,
        tokens,
        at: DateTime::from_timestamp(1_800_000_000, 0).expect("valid"),
    }
}

proptest! {
    #[test]
    fn the_floor_keeps_the_tier_on_the_true_curve(
        raw in proptest::collection::vec(0.0f64..0.2, 5),
        allowance in 0.0f64..0.5,
        measured_at in 200.0f64..690.0,
        known in proptest::collection::vec(any::<bool>(), 4),
    ) {
        // Concave: sort the slopes so they decrease with the cap.
        let mut slopes = raw.clone();
        slopes.sort_by(|a, b| b.total_cmp(a));
        let truth = curve(&slopes);
        let mut evidence = JobEvidence { uncapped: Some(point(700.0, truth(700.0))), ..JobEvidence::default() };
        for (i, k) in known.iter().enumerate() {
            let cap = 300.0 + 100.0 * i as f64;
            if *k {
                evidence.capped.insert(bucket(cap), point(cap, truth(cap)));
            }
        }
        let current = point(measured_at, truth(measured_at));
        if let Some(floor) = tier_floor(allowance, &current, &evidence, 700.0) {
            prop_assert!(floor >= measured_at - 1e-9 && floor <= 700.0 + 1e-9, "floor {}", floor);
            prop_assert!(truth(floor) >= (1.0 - allowance) * truth(700.0) - 1e-9,
                "floor {} keeps {} < {}", floor, truth(floor), (1.0 - allowance) * truth(700.0));
        } else {
            // No floor: within the tier (and its tolerance), or nothing to raise.
            prop_assert!(1.0 - truth(measured_at) / truth(700.0) <= allowance + 0.02 + 1e-9);
        }
    }
}
