//! The targets for the fleet experiment, checked on the full 500 × 100 experiment.
//!
//! These are acceptance checks, not tuned snapshots: each asserts a property the design must
//! keep (the paper's rule beats the baseline; ours closes most of the gap; nothing ever beats
//! the oracle; no plan breaks its budget), on the same seed the README quotes.

use flexgate_lab::{
    ExperimentConfig, ExperimentReport, Mix, TierMix, TruthFamily, published_groups, run_experiment,
    synthetic_templates,
};

fn run(mix: Mix, family: TruthFamily, tiers: TierMix) -> ExperimentReport {
    let templates = synthetic_templates(&published_groups().expect("groups"), family).expect("templates");
    let config = ExperimentConfig {
        mix,
        tiers,
        ..ExperimentConfig::default()
    };
    run_experiment(&config, &templates, "test", &mut |_| {}).expect("experiment runs")
}

fn tokens(report: &ExperimentReport, cut: f64, policy: &str) -> f64 {
    report
        .at_cut(cut)
        .and_then(|c| c.strategies.get(policy))
        .expect("result")
        .tokens_per_s_per_job
}

fn closure(report: &ExperimentReport, cut: f64, policy: &str) -> f64 {
    report
        .at_cut(cut)
        .and_then(|c| c.strategies.get(policy))
        .and_then(|s| s.gap_closure)
        .expect("gap closure defined")
}

fn assert_sound(report: &ExperimentReport) {
    for cut in &report.results {
        assert_eq!(cut.budget_violations, 0, "budget violated at cut {}", cut.cut);
        let oracle = cut.strategies.get("oracle").expect("oracle").tokens_per_s_per_job;
        // A plan that could not meet its budget draws more power than the oracle's; comparing
        // throughput is only fair between plans that met the same budget.
        for (name, s) in cut.strategies.0.iter().filter(|(_, s)| s.infeasible_plans == 0) {
            assert!(
                s.tokens_per_s_per_job <= oracle * (1.0 + 1e-9),
                "{name} beats the oracle at cut {}: {} > {oracle}",
                cut.cut,
                s.tokens_per_s_per_job
            );
        }
    }
}

#[test]
fn the_paper_reproduces_in_kind_and_flexgate_closes_most_of_the_gap() {
    for mix in [Mix::Production, Mix::Random] {
        let report = run(mix, TruthFamily::Physical, TierMix::None);
        assert_sound(&report);
        for cut in report.results.iter().filter(|c| c.cut > 0.0) {
            let equal = tokens(&report, cut.cut, "equal");
            let paper = tokens(&report, cut.cut, "pfi_paper");
            assert!(
                paper > equal,
                "{mix:?} cut {}: pfi_paper {paper} ≤ equal {equal}",
                cut.cut
            );
            assert_eq!(cut.tier_violations, 0);
        }
        let ours = closure(&report, 0.3, "flexgate");
        if mix == Mix::Production {
            assert!(
                ours >= 0.85,
                "flexgate closes only {ours} of the gap at 30 % (production)"
            );
            // The paper reports 63 % for its rule; ours reproduces it within a few points.
            let paper = closure(&report, 0.3, "pfi_paper");
            assert!((0.5..0.75).contains(&paper), "pfi_paper closes {paper}");
        }
        assert!(ours > closure(&report, 0.3, "pfi_paper"));
    }
}

#[test]
fn flexgate_degrades_gracefully_on_curve_families_it_was_not_built_on() {
    for family in [TruthFamily::Knee, TruthFamily::Powerlaw] {
        let report = run(Mix::Production, family, TierMix::None);
        assert_sound(&report);
        // (At 10 % the knee family loses nothing under any policy: every job stays above its
        // knee, the gap is zero and gap closure is undefined.)
        // The estimate is physical and the hedge guards it: on these families the plan stays
        // ahead of the equal cut at 20–40 %. On power laws it also closes most of the gap. On
        // knees it closes less than the paper's rule (27 % at 20 %, 73 % at 30 %, against 64 % and
        // 88 %): a knee job loses nothing until 85 % of its draw, so the best plan keeps some
        // jobs above their knees and cuts others deep, while the physical estimate spreads the
        // cut (BENCHMARKS.md, the curve zoo; until issue 14's third step this family's four MoE
        // fine-tuning groups were mis-calibrated cliffs, on which the estimate happened to
        // concentrate rightly).
        for cut in [0.2, 0.3, 0.4] {
            let ours = closure(&report, cut, "flexgate");
            let (equal, flexgate) = (tokens(&report, cut, "equal"), tokens(&report, cut, "flexgate"));
            assert!(flexgate >= equal, "{family:?} at {cut}: {flexgate} vs equal {equal}");
            if family == TruthFamily::Powerlaw {
                assert!(ours >= 0.7, "{family:?} at {cut}: flexgate closes {ours}");
            }
        }
    }
}

#[test]
fn tiers_are_respected_by_the_oracle_and_budgets_by_everyone() {
    let report = run(Mix::Production, TruthFamily::Physical, TierMix::Field);
    assert_sound(&report);
    for cut in &report.results {
        assert_eq!(cut.strategies.get("oracle").expect("oracle").tier_violations, 0);
    }
}

/// Issue 13's season target on the default season (seed 7, 100 jobs, half starting unknown):
/// with learning, the gap closure at the 20th event is within 5 points of the oracle (95.04 %
/// measured since unknown jobs take the equal cut's share; over seeds 1–5 and 11 the 20th event
/// closes 94.2–97.4 %: seed 2 misses by 0.8 points, see BENCHMARKS.md), and learning keeps more
/// than the same season without it.
#[test]
fn a_season_of_twenty_events_learns_to_within_five_points_of_the_oracle() {
    use flexgate_lab::season::{SeasonConfig, run_season};
    let templates =
        synthetic_templates(&published_groups().expect("groups"), TruthFamily::Physical).expect("templates");
    let config = SeasonConfig::default();
    let learned = run_season(&config, &templates, &mut |_| {}).expect("season");
    let frozen = run_season(
        &SeasonConfig {
            learning: false,
            ..config.clone()
        },
        &templates,
        &mut |_| {},
    )
    .expect("season");
    let last = learned.events.last().expect("20 events");
    assert_eq!(last.event, 20);
    let closure = last.gap_closure.expect("a gap at a 35 % cut");
    assert!(closure >= 0.95, "gap closure at event 20: {closure}");
    let frozen_last = frozen.events.last().expect("20 events");
    assert!(last.flexgate_kept > frozen_last.flexgate_kept);
}
