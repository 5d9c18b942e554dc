//! OpenADR 2.0b signal → target mapping (the table in `oadr2b::signal`'s module docs): every
//! row, scaling and rejection.

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use flexgate_openadr::oadr2b::signal::{SignalMeaning, is_load_signal_name, map_signal, power_to_kw, si_scale_factor};
use flexgate_openadr::oadr2b::{Event, EventStatus, Interval, ItemBase, Message, ResponseRequired, Signal, Targets};
use flexgate_openadr::target::{LoadTarget, SignalRefusal, TargetInterval};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 7, 1, 18, 0, 0).unwrap()
}

fn event(duration: Option<TimeDelta>, signals: Vec<Signal>) -> Event {
    Event {
        id: "E1".into(),
        modification_number: 0,
        priority: Some(1),
        market_context: Some("http://prog".into()),
        created: None,
        status: EventStatus::Far,
        test: false,
        vtn_comment: None,
        dtstart: t0(),
        duration,
        start_after: None,
        notification: None,
        ramp_up: None,
        recovery: None,
        response_required: Some(ResponseRequired::Always),
        invalid: Vec::new(),
        signals,
        targets: Targets::default(),
    }
}

fn power(units: &str, scale: Option<&str>) -> Option<ItemBase> {
    Some(ItemBase {
        kind: "powerReal".into(),
        description: Some("RealPower".into()),
        units: Some(units.into()),
        scale: scale.map(Into::into),
    })
}

fn currency(kind: &str, units: &str) -> Option<ItemBase> {
    Some(ItemBase {
        kind: kind.into(),
        description: Some("currencyPerKWh".into()),
        units: Some(units.into()),
        scale: Some("none".into()),
    })
}

fn interval(secs: i64, values: &[f64]) -> Interval {
    Interval {
        uid: None,
        duration: Some(TimeDelta::seconds(secs)),
        dtstart: None,
        values: values.to_vec(),
    }
}

fn signal(name: &str, kind: &str, item_base: Option<ItemBase>, intervals: Vec<Interval>) -> Signal {
    Signal {
        name: name.into(),
        signal_type: kind.into(),
        id: "S1".into(),
        item_base,
        current_value: Some(0.0),
        intervals,
        targets: None,
    }
}

/// Maps a one-hour, one-interval signal carrying `v`.
fn one(name: &str, kind: &str, item_base: Option<ItemBase>, v: f64) -> Result<SignalMeaning, SignalRefusal> {
    let s = signal(name, kind, item_base, vec![interval(3600, &[v])]);
    map_signal(&event(Some(TimeDelta::hours(1)), vec![s.clone()]), &s)
}

/// The single target of a one-interval load signal.
fn load_target(name: &str, kind: &str, item_base: Option<ItemBase>, v: f64) -> LoadTarget {
    match one(name, kind, item_base, v) {
        Ok(SignalMeaning::Load(iv)) => {
            assert_eq!(iv.len(), 1);
            assert_eq!(iv[0].start, t0());
            assert_eq!(iv[0].duration_s, Some(3600));
            iv[0].target.clone()
        }
        other => panic!("{name}/{kind} {v}: expected a load target, got {other:?}"),
    }
}

fn refusal(name: &str, kind: &str, item_base: Option<ItemBase>, v: f64) -> SignalRefusal {
    match one(name, kind, item_base, v) {
        Err(r) => r,
        Ok(m) => panic!("{name}/{kind} {v}: expected a refusal, got {m:?}"),
    }
}

fn assert_out_of_range(r: &SignalRefusal, value: &str) {
    match r {
        SignalRefusal::OutOfRange { value: v, .. } => assert_eq!(v, value, "{r}"),
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    assert_eq!(r.response_code(), 454);
}

// ---------- LOAD_DISPATCH / setpoint and itemBase scaling ----------

#[test]
fn setpoint_scales_watts_by_si_scale_code() {
    let cap = |units, scale, v| load_target("LOAD_DISPATCH", "setpoint", power(units, scale), v);
    // E1_1025: powerReal 40 with W/k = 40 kW.
    assert_eq!(cap("W", Some("k"), 40.0), LoadTarget::Ceiling { kw: 40.0 });
    assert_eq!(cap("W", Some("M"), 2.5), LoadTarget::Ceiling { kw: 2500.0 });
    assert_eq!(cap("W", Some("none"), 500_000.0), LoadTarget::Ceiling { kw: 500.0 });
    assert_eq!(cap("W", None, 250_000.0), LoadTarget::Ceiling { kw: 250.0 });
    assert_eq!(cap("kW", None, 750.0), LoadTarget::Ceiling { kw: 750.0 });
    assert_eq!(cap("KW", Some("none"), 750.0), LoadTarget::Ceiling { kw: 750.0 });
    assert_eq!(cap("MW", None, 1.5), LoadTarget::Ceiling { kw: 1500.0 });
    assert_eq!(cap("W", Some("k"), 0.0), LoadTarget::Ceiling { kw: 0.0 });
}

#[test]
fn setpoint_refuses_units_it_cannot_convert() {
    let no_item = refusal("LOAD_DISPATCH", "setpoint", None, 40.0);
    assert!(
        matches!(no_item, SignalRefusal::Units { ref units, .. } if units == "(no itemBase)"),
        "{no_item:?}"
    );
    assert_eq!(no_item.response_code(), 454);

    let energy = ItemBase {
        kind: "energyReal".into(),
        description: None,
        units: Some("Wh".into()),
        scale: Some("k".into()),
    };
    let r = refusal("LOAD_DISPATCH", "setpoint", Some(energy), 40.0);
    assert!(
        matches!(r, SignalRefusal::Units { ref units, .. } if units == "energyReal item"),
        "{r:?}"
    );

    let r = refusal("LOAD_DISPATCH", "setpoint", power("VA", Some("k")), 40.0);
    assert!(
        matches!(r, SignalRefusal::Units { ref units, .. } if units == "VA"),
        "{r:?}"
    );
    // milliwatts are not megawatts
    let r = refusal("LOAD_DISPATCH", "setpoint", power("mW", None), 40.0);
    assert!(matches!(r, SignalRefusal::Units { .. }), "{r:?}");
    let r = refusal("LOAD_DISPATCH", "setpoint", power("W", Some("kilo")), 40.0);
    assert!(
        matches!(r, SignalRefusal::Units { ref units, .. } if units.contains("kilo")),
        "{r:?}"
    );
    assert_eq!(r.response_code(), 454);
}

#[test]
fn negative_setpoint_is_out_of_range() {
    let r = refusal("LOAD_DISPATCH", "setpoint", power("W", Some("k")), -10.0);
    assert_out_of_range(&r, "-10");
}

#[test]
fn si_scale_codes_and_power_helper() {
    assert_eq!(si_scale_factor("k"), Some(1e3));
    assert_eq!(si_scale_factor("M"), Some(1e6));
    assert_eq!(si_scale_factor("m"), Some(1e-3));
    assert_eq!(si_scale_factor("none"), Some(1.0));
    assert_eq!(si_scale_factor("G"), Some(1e9));
    assert_eq!(si_scale_factor("micro"), Some(1e-6));
    assert_eq!(si_scale_factor("K"), None);
    assert_eq!(power_to_kw(power("W", Some("k")).as_ref(), "x"), Ok(1.0));
    assert_eq!(power_to_kw(power("W", None).as_ref(), "x"), Ok(0.001));
    assert_eq!(power_to_kw(power("kW", Some("M")).as_ref(), "x"), Ok(1e6));
}

// ---------- LOAD_DISPATCH / delta ----------

#[test]
fn delta_is_a_reduction_from_the_operating_point() {
    let d = |v| load_target("LOAD_DISPATCH", "delta", power("W", Some("k")), v);
    assert_eq!(d(-200.0), LoadTarget::Reduction { kw: 200.0 });
    assert_eq!(d(-150.25), LoadTarget::Reduction { kw: 150.25 });
    assert_eq!(d(0.0), LoadTarget::Normal);
    assert_eq!(
        load_target("LOAD_DISPATCH", "delta", power("W", None), -300_000.0),
        LoadTarget::Reduction { kw: 300.0 }
    );
}

#[test]
fn positive_delta_asks_for_more_load_and_is_refused() {
    let r = refusal("LOAD_DISPATCH", "delta", power("W", Some("k")), 50.0);
    assert_out_of_range(&r, "50");
    assert!(r.to_string().contains("load increase"), "{r}");
}

#[test]
fn delta_fixture_decodes_and_maps_with_interval_starts() {
    let path = format!("{}/tests/fixtures/delta.xml", env!("CARGO_MANIFEST_DIR"));
    let Message::DistributeEvent(d) = flexgate_openadr::oadr2b::decode(&std::fs::read(path).unwrap()).unwrap() else {
        panic!("not a distribute");
    };
    let e = &d.events[0];
    let meaning = map_signal(e, &e.signals[0]).unwrap();
    assert_eq!(
        meaning,
        SignalMeaning::Load(vec![
            TargetInterval {
                start: t0(),
                duration_s: Some(86_400),
                target: LoadTarget::Reduction { kw: 200.0 },
            },
            TargetInterval {
                start: t0() + TimeDelta::days(1),
                duration_s: Some(7_200),
                target: LoadTarget::Reduction { kw: 150.25 },
            },
        ])
    );
}

// ---------- LOAD_CONTROL ----------

#[test]
fn load_control_capacity_is_a_fraction_in_0_1() {
    let c = |v| load_target("LOAD_CONTROL", "x-loadControlCapacity", None, v);
    assert_eq!(c(0.6), LoadTarget::CapacityFraction { fraction: 0.6 });
    assert_eq!(c(0.0), LoadTarget::CapacityFraction { fraction: 0.0 });
    assert_eq!(c(1.0), LoadTarget::Normal);
    for bad in [1.2, -0.1, 8.0, 20.0] {
        let r = refusal("LOAD_CONTROL", "x-loadControlCapacity", None, bad);
        assert_out_of_range(&r, &bad.to_string());
    }
}

#[test]
fn load_control_percent_offset_is_a_percent_reduction() {
    let p = |v| load_target("LOAD_CONTROL", "x-loadControlPercentOffset", None, v);
    assert_eq!(p(-20.0), LoadTarget::PercentReduction { percent: 20.0 });
    assert_eq!(p(-100.0), LoadTarget::PercentReduction { percent: 100.0 });
    assert_eq!(p(-0.5), LoadTarget::PercentReduction { percent: 0.5 });
    assert_eq!(p(0.0), LoadTarget::Normal);
    for bad in [10.0, -120.0] {
        let r = refusal("LOAD_CONTROL", "x-loadControlPercentOffset", None, bad);
        assert_out_of_range(&r, &bad.to_string());
    }
}

#[test]
fn load_control_level_offset_is_integer_steps_down() {
    let l = |v| load_target("LOAD_CONTROL", "x-loadControlLevelOffset", None, v);
    assert_eq!(l(-2.0), LoadTarget::LevelOffset { steps: 2 });
    assert_eq!(l(-1.0), LoadTarget::LevelOffset { steps: 1 });
    assert_eq!(l(0.0), LoadTarget::Normal);
    for bad in [1.0, -1.5, 0.5] {
        let r = refusal("LOAD_CONTROL", "x-loadControlLevelOffset", None, bad);
        assert_out_of_range(&r, &bad.to_string());
    }
}

#[test]
fn load_control_setpoint_only_with_power_units() {
    assert_eq!(
        load_target("LOAD_CONTROL", "x-loadControlSetpoint", power("kW", None), 800.0),
        LoadTarget::Ceiling { kw: 800.0 }
    );
    assert_eq!(
        load_target("LOAD_CONTROL", "x-loadControlSetpoint", power("W", Some("M")), 1.2),
        LoadTarget::Ceiling { kw: 1200.0 }
    );
    let temperature = ItemBase {
        kind: "temperature".into(),
        description: None,
        units: Some("celsius".into()),
        scale: Some("none".into()),
    };
    for item in [Some(temperature), None] {
        let r = refusal("LOAD_CONTROL", "x-loadControlSetpoint", item, 21.0);
        assert_eq!(
            r,
            SignalRefusal::Unsupported {
                name: "LOAD_CONTROL".into(),
                kind: "x-loadControlSetpoint".into()
            }
        );
        assert_eq!(r.response_code(), 460);
    }
}

#[test]
fn load_control_unknown_type_is_unsupported() {
    let r = refusal("LOAD_CONTROL", "x-loadControlWhatever", None, 1.0);
    assert_eq!(r.response_code(), 460);
}

// ---------- SIMPLE ----------

#[test]
fn simple_levels_0_to_3() {
    let s = |v| load_target("SIMPLE", "level", None, v);
    assert_eq!(s(0.0), LoadTarget::Normal);
    assert_eq!(s(1.0), LoadTarget::Level { level: 1 });
    assert_eq!(s(2.0), LoadTarget::Level { level: 2 });
    assert_eq!(s(3.0), LoadTarget::Level { level: 3 });
    // 2.0a spelling, still in the 2.0b schema
    assert_eq!(
        load_target("simple", "level", None, 2.0),
        LoadTarget::Level { level: 2 }
    );
    for bad in [4.0, -1.0, 1.5] {
        let r = refusal("SIMPLE", "level", None, bad);
        assert_out_of_range(&r, &bad.to_string());
    }
    assert_eq!(refusal("SIMPLE", "setpoint", None, 1.0).response_code(), 460);
}

// ---------- informational signals ----------

#[test]
fn electricity_price_becomes_price_targets_per_interval() {
    // E1_1027: 24 hourly prices
    let intervals: Vec<Interval> = (0..24)
        .map(|h| interval(3600, &[0.10 + f64::from(h) / 100.0]))
        .collect();
    let s = signal(
        "ELECTRICITY_PRICE",
        "price",
        currency("currencyPerKWh", "USD"),
        intervals,
    );
    let e = event(Some(TimeDelta::hours(24)), vec![s.clone()]);
    let SignalMeaning::Price(iv) = map_signal(&e, &s).unwrap() else {
        panic!("expected prices")
    };
    assert_eq!(iv.len(), 24);
    assert_eq!(iv[5].start, t0() + TimeDelta::hours(5));
    assert_eq!(iv[5].duration_s, Some(3600));
    match &iv[5].target {
        LoadTarget::Price { value, unit } => {
            assert!((value - 0.15).abs() < 1e-12, "{value}");
            assert_eq!(unit.as_deref(), Some("USD/KWH"));
        }
        other => panic!("{other:?}"),
    }
    let meaning = SignalMeaning::Price(iv);
    assert!(!meaning.is_load());
}

#[test]
fn energy_price_and_demand_charge_are_prices() {
    for (name, kind, unit) in [
        ("ENERGY_PRICE", "currencyPerKWh", "EUR/KWH"),
        ("DEMAND_CHARGE", "currencyPerKW", "EUR/KW"),
    ] {
        match one(name, "price", currency(kind, "EUR"), 12.5) {
            Ok(SignalMeaning::Price(iv)) => assert_eq!(
                iv[0].target,
                LoadTarget::Price {
                    value: 12.5,
                    unit: Some(unit.into())
                }
            ),
            other => panic!("{name}: {other:?}"),
        }
    }
    // a price without an itemBase is still a price, with no unit
    assert_eq!(
        one("ELECTRICITY_PRICE", "price", None, 0.3).unwrap().intervals()[0].target,
        LoadTarget::Price { value: 0.3, unit: None }
    );
}

#[test]
fn relative_prices_bids_and_charge_state_are_acknowledged_only() {
    for (name, kind) in [
        ("ELECTRICITY_PRICE", "priceRelative"),
        ("ELECTRICITY_PRICE", "priceMultiplier"),
        ("BID_PRICE", "price"),
        ("BID_LOAD", "setpoint"),
        ("BID_ENERGY", "setpoint"),
        ("CHARGE_STATE", "level"),
    ] {
        let m = one(name, kind, None, 5.0).unwrap();
        assert_eq!(m, SignalMeaning::Acknowledged, "{name}/{kind}");
        assert!(m.intervals().is_empty());
    }
}

#[test]
fn unknown_signal_names_are_unsupported_460() {
    for (name, kind) in [
        ("x-CUSTOM", "level"),
        ("LOAD_SHED", "delta"),
        ("LOAD_DISPATCH", "level"),
    ] {
        let r = refusal(name, kind, power("W", Some("k")), 1.0);
        assert_eq!(
            r,
            SignalRefusal::Unsupported {
                name: name.into(),
                kind: kind.into()
            }
        );
        assert_eq!(r.response_code(), 460);
    }
    assert!(is_load_signal_name("LOAD_DISPATCH") && is_load_signal_name("SIMPLE") && is_load_signal_name("simple"));
    assert!(!is_load_signal_name("ELECTRICITY_PRICE") && !is_load_signal_name("x-CUSTOM"));
}

// ---------- timing, multiple values, guards ----------

#[test]
fn interval_starts_follow_preceding_durations() {
    let s = signal(
        "LOAD_DISPATCH",
        "setpoint",
        power("kW", None),
        vec![
            interval(1800, &[500.0]),
            interval(900, &[400.0]),
            interval(900, &[450.0]),
        ],
    );
    let e = event(Some(TimeDelta::hours(1)), vec![s.clone()]);
    let iv = map_signal(&e, &s).unwrap();
    let got: Vec<(DateTime<Utc>, Option<u64>, LoadTarget)> = iv
        .intervals()
        .iter()
        .map(|i| (i.start, i.duration_s, i.target.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (t0(), Some(1800), LoadTarget::Ceiling { kw: 500.0 }),
            (
                t0() + TimeDelta::minutes(30),
                Some(900),
                LoadTarget::Ceiling { kw: 400.0 }
            ),
            (
                t0() + TimeDelta::minutes(45),
                Some(900),
                LoadTarget::Ceiling { kw: 450.0 }
            ),
        ]
    );
}

#[test]
fn open_ended_event_interval_runs_until_the_event_ends() {
    let mut iv = interval(0, &[2.0]);
    let s = signal("SIMPLE", "level", None, vec![iv.clone()]);
    // PT0S event duration decodes as None = open-ended
    let e = event(None, vec![s.clone()]);
    let m = map_signal(&e, &s).unwrap();
    assert_eq!(
        m.intervals(),
        &[TargetInterval {
            start: t0(),
            duration_s: None,
            target: LoadTarget::Level { level: 2 }
        }]
    );
    // no interval duration at all, open-ended: the same
    iv.duration = None;
    let s = signal("SIMPLE", "level", None, vec![iv.clone()]);
    assert_eq!(
        map_signal(&event(None, vec![s.clone()]), &s).unwrap().intervals()[0].duration_s,
        None
    );
    // in a closed event it lasts for the rest of the active period
    let s = signal("SIMPLE", "level", None, vec![interval(600, &[1.0]), iv]);
    let m = map_signal(&event(Some(TimeDelta::hours(1)), vec![s.clone()]), &s).unwrap();
    assert_eq!(m.intervals()[1].start, t0() + TimeDelta::minutes(10));
    assert_eq!(m.intervals()[1].duration_s, Some(3000));
}

#[test]
fn sub_second_durations_round_up_and_negative_ones_are_refused() {
    let mut iv = interval(0, &[1.0]);
    iv.duration = Some(TimeDelta::milliseconds(1500));
    let s = signal("SIMPLE", "level", None, vec![iv.clone()]);
    assert_eq!(
        map_signal(&event(None, vec![s.clone()]), &s).unwrap().intervals()[0].duration_s,
        Some(2)
    );
    iv.duration = Some(TimeDelta::seconds(-5));
    let s = signal("SIMPLE", "level", None, vec![iv]);
    let r = map_signal(&event(None, vec![s.clone()]), &s).unwrap_err();
    assert_out_of_range(&r, "-5s");
}

#[test]
fn several_values_keep_the_most_restrictive() {
    let multi = |name: &str, kind: &str, item, values: &[f64]| {
        let s = signal(name, kind, item, vec![interval(3600, values)]);
        map_signal(&event(Some(TimeDelta::hours(1)), vec![s.clone()]), &s).map(|m| m.intervals()[0].target.clone())
    };
    assert_eq!(
        multi("LOAD_DISPATCH", "setpoint", power("kW", None), &[500.0, 400.0, 450.0]),
        Ok(LoadTarget::Ceiling { kw: 400.0 })
    );
    assert_eq!(
        multi("LOAD_DISPATCH", "delta", power("kW", None), &[-100.0, 0.0, -300.0]),
        Ok(LoadTarget::Reduction { kw: 300.0 })
    );
    assert_eq!(
        multi("SIMPLE", "level", None, &[0.0, 2.0, 1.0]),
        Ok(LoadTarget::Level { level: 2 })
    );
    assert_eq!(
        multi("LOAD_CONTROL", "x-loadControlCapacity", None, &[1.0, 0.7]),
        Ok(LoadTarget::CapacityFraction { fraction: 0.7 })
    );
    assert_eq!(
        multi("ELECTRICITY_PRICE", "price", None, &[0.1, 0.3, 0.2]),
        Ok(LoadTarget::Price { value: 0.3, unit: None })
    );
    // one bad value refuses the whole signal
    let r = multi("SIMPLE", "level", None, &[1.0, 7.0]).unwrap_err();
    assert_out_of_range(&r, "7");
}

#[test]
fn missing_and_non_finite_values_are_refused() {
    let r = refusal("SIMPLE", "level", None, f64::NAN);
    assert_out_of_range(&r, "NaN");
    let r = refusal("LOAD_DISPATCH", "setpoint", power("kW", None), f64::INFINITY);
    assert_out_of_range(&r, "inf");
    let r = refusal("ELECTRICITY_PRICE", "price", None, f64::NAN);
    assert_out_of_range(&r, "NaN");
    let s = signal("SIMPLE", "level", None, vec![interval(3600, &[])]);
    let r = map_signal(&event(Some(TimeDelta::hours(1)), vec![s.clone()]), &s).unwrap_err();
    assert_out_of_range(&r, "(none)");
}

#[test]
fn intervals_past_the_calendar_are_refused_not_a_panic() {
    let s = signal("SIMPLE", "level", None, vec![interval(7200, &[1.0])]);
    let mut e = event(Some(TimeDelta::hours(2)), vec![s.clone()]);
    e.dtstart = DateTime::<Utc>::MAX_UTC - TimeDelta::hours(1);
    let r = map_signal(&e, &s).unwrap_err();
    assert_out_of_range(&r, "(overflow)");
}
