use super::*;
use chrono::TimeZone;
use proptest::prelude::*;

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_764_600_000 + s, 0).single().expect("a time")
}

fn reading(s: i64, kw: f64) -> FeedReading {
    FeedReading { at: t(s), kw }
}

const LIMITS: ScreenLimits = ScreenLimits {
    absurd_kw: 10_000.0,
    max_step_kw: 500.0,
    confirm_within_kw: 50.0,
};

#[test]
fn impossible_readings_are_refused_and_counted_and_the_last_good_one_stays() {
    let mut feed = FeedScreen::default();
    feed.offer(reading(0, 800.0), &LIMITS).expect("a first reading");
    assert_eq!(
        feed.offer(reading(1, f64::NAN), &LIMITS),
        Err(ReadingRefusal::NotFinite)
    );
    assert_eq!(
        feed.offer(reading(2, f64::INFINITY), &LIMITS),
        Err(ReadingRefusal::NotFinite)
    );
    assert_eq!(
        feed.offer(reading(3, -5.0), &LIMITS),
        Err(ReadingRefusal::Negative { kw: -5.0 })
    );
    assert!(matches!(
        feed.offer(reading(4, 10_001.0), &LIMITS),
        Err(ReadingRefusal::Absurd { .. })
    ));
    assert_eq!(feed.offer(reading(0, 810.0), &LIMITS), Err(ReadingRefusal::NotNewer));
    assert_eq!(feed.refused, 5);
    assert_eq!(feed.accepted, Some(reading(0, 800.0)));
    assert_eq!(ScreenLimits::for_facility(1_000.0).absurd_kw, 10_000.0);
}

#[test]
fn a_jump_is_believed_only_when_the_next_reading_confirms_it() {
    let mut feed = FeedScreen::default();
    feed.offer(reading(0, 800.0), &LIMITS).expect("first");
    // One corrupt register: held, then contradicted by a normal reading.
    assert!(matches!(
        feed.offer(reading(1, 3_000.0), &LIMITS),
        Err(ReadingRefusal::Suspect { .. })
    ));
    assert_eq!(feed.accepted, Some(reading(0, 800.0)));
    feed.offer(reading(2, 805.0), &LIMITS).expect("normal again");
    assert_eq!(feed.suspect, None);
    // A real step (the cluster trips): believed one reading later.
    assert!(matches!(
        feed.offer(reading(3, 100.0), &LIMITS),
        Err(ReadingRefusal::Suspect { .. })
    ));
    feed.offer(reading(4, 110.0), &LIMITS).expect("confirmed");
    assert_eq!(feed.accepted, Some(reading(4, 110.0)));
    // A second jump elsewhere does not confirm the first.
    assert!(feed.offer(reading(5, 2_000.0), &LIMITS).is_err());
    assert!(feed.offer(reading(6, 3_000.0), &LIMITS).is_err());
    assert_eq!(feed.accepted, Some(reading(4, 110.0)));
}

fn feeds() -> Vec<Feed> {
    vec![
        Feed {
            id: "incomer-a".into(),
            sign: 1.0,
        },
        Feed {
            id: "incomer-b".into(),
            sign: 1.0,
        },
        Feed {
            id: "solar".into(),
            sign: -1.0,
        },
    ]
}

fn screened(readings: &[Option<FeedReading>]) -> Vec<FeedScreen> {
    readings
        .iter()
        .map(|r| FeedScreen {
            accepted: r.clone(),
            ..FeedScreen::default()
        })
        .collect()
}

#[test]
fn fresh_feeds_sum_with_their_signs_into_a_measured_figure() {
    let screens = screened(&[Some(reading(0, 600.0)), Some(reading(1, 300.0)), Some(reading(1, 50.0))]);
    let pairs: Vec<(Feed, &FeedScreen)> = feeds().into_iter().zip(screens.iter()).collect();
    let m = site_meter(&pairs, t(5), 10.0, 700.0, 950.0);
    assert_eq!((m.kw, m.quality), (850.0, Quality::Measured));
    assert_eq!(m.measured_at, Some(t(0)));
    assert!(m.feeds.iter().all(|f| f.quality == Quality::Measured));
}

#[test]
fn a_stale_or_missing_feed_falls_back_to_the_models_upper_estimate_and_says_so() {
    let stale = screened(&[
        Some(reading(0, 600.0)),
        Some(reading(-30, 300.0)),
        Some(reading(1, 50.0)),
    ]);
    let pairs: Vec<(Feed, &FeedScreen)> = feeds().into_iter().zip(stale.iter()).collect();
    let m = site_meter(&pairs, t(5), 10.0, 700.0, 950.0);
    assert_eq!((m.kw, m.quality), (950.0, Quality::Stale));
    assert_eq!(
        m.last_measured_kw,
        Some(850.0),
        "shown beside the fallback, not acted on"
    );
    assert_eq!(m.feeds[1].quality, Quality::Stale);

    let missing = screened(&[Some(reading(0, 600.0)), None, Some(reading(1, 50.0))]);
    let pairs: Vec<(Feed, &FeedScreen)> = feeds().into_iter().zip(missing.iter()).collect();
    let m = site_meter(&pairs, t(5), 10.0, 700.0, 950.0);
    assert_eq!((m.kw, m.quality, m.last_measured_kw), (950.0, Quality::Missing, None));

    let none = site_meter(&[], t(5), 10.0, 700.0, 950.0);
    assert_eq!((none.kw, none.quality), (700.0, Quality::Model));
    assert!(!none.quality.is_measured());
}

proptest! {
    /// Whatever the readings, the figure acted on is never below the measured sum unless it is
    /// measured, and a fallback is never called measured.
    #[test]
    fn the_figure_acted_on_is_measured_or_the_upper_estimate(
        kws in proptest::collection::vec(proptest::option::of((0.0f64..5_000.0, -60i64..5)), 1..5),
        upper in 0.0f64..20_000.0,
    ) {
        let feeds: Vec<Feed> = (0..kws.len()).map(|i| Feed { id: format!("f{i}"), sign: 1.0 }).collect();
        let screens: Vec<FeedScreen> = kws.iter().map(|r| FeedScreen {
            accepted: r.map(|(kw, s)| reading(s, kw)),
            ..FeedScreen::default()
        }).collect();
        let pairs: Vec<(Feed, &FeedScreen)> = feeds.into_iter().zip(screens.iter()).collect();
        let m = site_meter(&pairs, t(5), 10.0, 0.0, upper);
        let all_fresh = kws.iter().all(|r| matches!(r, Some((_, s)) if 5 - s <= 10));
        prop_assert_eq!(m.quality.is_measured(), all_fresh);
        if m.quality.is_measured() {
            let sum: f64 = kws.iter().flatten().map(|(kw, _)| kw).sum();
            prop_assert!((m.kw - sum).abs() < 1e-9);
        } else {
            prop_assert_eq!(m.kw, upper);
        }
    }

    /// Screening never panics, and what it accepts is finite, non-negative and under the limit.
    #[test]
    fn screening_accepts_only_plausible_readings(values in proptest::collection::vec(prop_oneof![
        any::<f64>(), -10.0f64..20_000.0, Just(f64::NAN)], 1..30)) {
        let mut feed = FeedScreen::default();
        for (i, kw) in values.iter().enumerate() {
            let _ = feed.offer(reading(i as i64, *kw), &LIMITS);
            if let Some(r) = &feed.accepted {
                prop_assert!(r.kw.is_finite() && r.kw >= 0.0 && r.kw <= LIMITS.absurd_kw);
            }
        }
    }
}

fn facility() -> crate::facility::FacilityModel {
    crate::facility::FacilityModel::new(crate::facility::FacilityParams::default()).expect("default parameters")
}

proptest! {
    /// The model's side of the meter: the upper figure is never below the nominal one, nor
    /// below the backend's own estimate, and a backend reading does not raise it; a configured
    /// facility maximum is used as it is.
    #[test]
    fn the_model_side_is_conservative_and_a_configured_maximum_stands(
        gpu_kw in 0.0f64..5_000.0,
        nodes in 1u32..1_000,
        backend_kw in 0.0f64..20_000.0,
        configured in prop_oneof![Just(0.0), 100.0f64..50_000.0],
    ) {
        let model = facility();
        let power = crate::units::Watts(gpu_kw * 1000.0);
        let estimated = model_meter(&model, configured, 8.0, power, nodes, backend_kw, false);
        prop_assert!(estimated.upper_kw >= estimated.nominal_kw - 1e-9);
        prop_assert!(estimated.upper_kw >= backend_kw - 1e-9);
        let read = model_meter(&model, configured, 8.0, power, nodes, backend_kw, true);
        prop_assert!(read.upper_kw <= estimated.upper_kw + 1e-9);
        prop_assert_eq!(read.nominal_kw, estimated.nominal_kw);
        if configured > 0.0 {
            prop_assert_eq!(estimated.facility_max_kw, configured);
        } else {
            // Every GPU of every node at its maximum: at least the nominal of the power read
            // when that power is within it.
            prop_assert!(estimated.facility_max_kw > 0.0);
        }
    }
}

#[test]
fn a_power_the_model_refuses_leaves_the_backends_figure() {
    let m = model_meter(&facility(), 900.0, 8.0, crate::units::Watts(f64::NAN), 4, 321.0, false);
    assert_eq!((m.nominal_kw, m.upper_kw, m.facility_max_kw), (321.0, 321.0, 900.0));
}
