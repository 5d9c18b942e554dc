//! Turning any event target into an absolute meter ceiling.
//!
//! The allocator only understands "keep the meter under X kW". Utilities speak in ceilings,
//! reductions, percentages, capacity fractions, levels and prices (the README's signal table). This module
//! is the one place where those forms become a ceiling, and it records the baseline every
//! relative form was computed from: a reduction is only auditable if the baseline it was measured
//! against is in the log.
//!
//! Conversions are conservative: a ceiling below zero is clamped to zero (shed everything that
//! can be shed) and noted, never silently raised.

use serde::{Deserialize, Serialize};

use super::model::{EventError, GridEvent, Target};
use crate::units::Fraction;

/// One row of the site's level policy: an OpenADR SIMPLE level and how much of the baseline it
/// sheds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelRule {
    /// The level (1..=3; level 0 means normal operation and needs no row).
    pub level: u8,
    /// Share of the baseline to shed at this level.
    pub shed: Fraction,
}

/// One row of the site's optional price policy: at or above this price, shed this share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriceRule {
    /// The price threshold, currency units per MWh.
    pub min_per_mwh: f64,
    /// Share of the baseline to shed at or above the threshold.
    pub shed: Fraction,
}

/// What the conversion needs to know about the site.
///
/// Levels and prices carry no kW figure of their own, so a site policy decides what they mean;
/// capacity fractions need the facility's maximum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteContext {
    /// The facility's maximum meter demand, kW (the base of capacity fractions). Zero means "not
    /// configured", and capacity targets are then refused rather than turned into a zero ceiling.
    pub facility_max_kw: f64,
    /// Level → shed share. Default 1 → 10 %, 2 → 20 %, 3 → 30 %.
    pub level_table: Vec<LevelRule>,
    /// Price thresholds → shed share; the highest threshold at or below the price applies. Empty
    /// by default: price signals are acknowledged and logged, not acted on.
    pub price_table: Vec<PriceRule>,
}

impl Default for SiteContext {
    /// The conventional level table (1/2/3 → 10/20/30 % of baseline), no price policy, no
    /// facility maximum.
    fn default() -> Self {
        let rule = |level: u8, shed: f64| LevelRule {
            level,
            shed: Fraction::new(shed).unwrap_or(Fraction::ZERO),
        };
        Self {
            facility_max_kw: 0.0,
            level_table: vec![rule(1, 0.1), rule(2, 0.2), rule(3, 0.3)],
            price_table: Vec::new(),
        }
    }
}

/// A baseline: what the meter would have drawn without the event.
///
/// Kept with its method and averaging window, because the baseline is the number a settlement
/// dispute is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineEstimate {
    /// The baseline, meter kW.
    pub kw: f64,
    /// How it was obtained: `"event"` (the sender stated it), `"meter_before"` (average meter
    /// demand just before the event), `"model_before"` (the same average over the facility
    /// model's figures, on a site whose meter was not read), or a program's method name.
    pub method: String,
    /// Length of the averaging window the estimate used, seconds (0 when not measured).
    pub window_s: u64,
}

impl BaselineEstimate {
    /// A meter-before baseline: the average meter demand over the `window_s` seconds before the
    /// event (the natural fit for flat AI load, whose meter barely moves with the weather or the hour).
    #[must_use]
    pub fn meter_before(kw: f64, window_s: u64) -> Self {
        Self {
            kw,
            method: "meter_before".into(),
            window_s,
        }
    }

    fn from_event(kw: f64) -> Self {
        Self {
            kw,
            method: "event".into(),
            window_s: 0,
        }
    }
}

/// An absolute meter ceiling with the facts it was derived from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CeilingTarget {
    /// The ceiling, meter kW, ≥ 0.
    pub ceiling_kw: f64,
    /// The baseline a relative target was computed from (`None` for absolute forms).
    pub baseline: Option<BaselineEstimate>,
    /// The `dr.event/1` form of the original target.
    pub form: String,
    /// How the ceiling was computed, in words, for the ledger and the dashboard.
    pub note: String,
}

/// Convert one target into an absolute meter ceiling.
///
/// `Ok(None)` means "acknowledge, but there is nothing to enforce": level 0 (normal operation)
/// and prices the site policy does not map. Relative forms take the baseline the event states
/// and fall back to `baseline` (the gateway's estimate); with neither they are refused, because
/// guessing a baseline would make the commitment unverifiable. Error fields are paths rooted at
/// `target` (`target.baseline_kw`).
pub fn to_ceiling(
    target: &Target,
    site: &SiteContext,
    baseline: Option<&BaselineEstimate>,
) -> Result<Option<CeilingTarget>, EventError> {
    target.validate().map_err(|e| e.prefixed("target"))?;
    let form = target.form();
    match *target {
        Target::MeterCeiling { kw } => Ok(Some(finish(
            kw,
            None,
            form,
            format!("meter ceiling of {kw} kW as sent"),
        ))),
        Target::Reduction { kw, baseline_kw } => {
            let b = pick_baseline(baseline_kw, baseline, "target.baseline_kw")?;
            let note = format!("baseline {} kW ({}) − reduction {kw} kW", b.kw, b.method);
            Ok(Some(finish(b.kw - kw, Some(b), form, note)))
        }
        Target::Percent { percent, baseline_kw } => {
            let b = pick_baseline(baseline_kw, baseline, "target.baseline_kw")?;
            let note = format!("baseline {} kW ({}) reduced by {percent} %", b.kw, b.method);
            Ok(Some(finish(b.kw * (1.0 - percent / 100.0), Some(b), form, note)))
        }
        Target::CapacityFraction { fraction } => {
            let max = site.facility_max_kw;
            if !(max.is_finite() && max > 0.0) {
                return Err(EventError::new(
                    "target.fraction",
                    "a capacity fraction needs the facility maximum, but the site's facility_max_kw is not \
                     configured; set it in the site policy",
                ));
            }
            let note = format!("{fraction} × facility maximum {max} kW");
            Ok(Some(finish(fraction * max, None, form, note)))
        }
        Target::Level { level } => {
            if level == 0 {
                return Ok(None);
            }
            let Some(rule) = site.level_table.iter().find(|r| r.level == level) else {
                let known: Vec<String> = site.level_table.iter().map(|r| r.level.to_string()).collect();
                return Err(EventError::new(
                    "target.level",
                    format!(
                        "level {level} has no row in the site's level table (known levels: {}); add one to the site \
                         policy",
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            };
            let b = pick_baseline(None, baseline, "target.level")?;
            let shed = rule.shed.value();
            let note = format!(
                "level {level} sheds {} % of baseline {} kW ({})",
                shed * 100.0,
                b.kw,
                b.method
            );
            Ok(Some(finish(b.kw * (1.0 - shed), Some(b), form, note)))
        }
        Target::Price { per_mwh } => {
            let rule = site
                .price_table
                .iter()
                .filter(|r| r.min_per_mwh.is_finite() && per_mwh >= r.min_per_mwh)
                .fold(None::<&PriceRule>, |best, r| match best {
                    Some(b) if b.min_per_mwh >= r.min_per_mwh => Some(b),
                    _ => Some(r),
                });
            let Some(rule) = rule else {
                return Ok(None);
            };
            let b = pick_baseline(None, baseline, "target.per_mwh")?;
            let shed = rule.shed.value();
            let note = format!(
                "price {per_mwh}/MWh ≥ {}/MWh sheds {} % of baseline {} kW ({})",
                rule.min_per_mwh,
                shed * 100.0,
                b.kw,
                b.method
            );
            Ok(Some(finish(b.kw * (1.0 - shed), Some(b), form, note)))
        }
    }
}

/// Convert every interval of `event`, one entry per interval (the shape
/// [`crate::event::book::EventBook::upsert`] takes). Error fields are rooted at the interval
/// (`intervals[1].target.kw`).
pub fn event_ceilings(
    event: &GridEvent,
    site: &SiteContext,
    baseline: Option<&BaselineEstimate>,
) -> Result<Vec<Option<CeilingTarget>>, EventError> {
    event
        .intervals
        .iter()
        .enumerate()
        .map(|(i, iv)| to_ceiling(&iv.target, site, baseline).map_err(|e| e.prefixed(&format!("intervals[{i}]"))))
        .collect()
}

fn pick_baseline(
    from_event: Option<f64>,
    estimate: Option<&BaselineEstimate>,
    field: &str,
) -> Result<BaselineEstimate, EventError> {
    if let Some(kw) = from_event {
        return Ok(BaselineEstimate::from_event(kw));
    }
    match estimate {
        Some(b) if b.kw.is_finite() && b.kw >= 0.0 => Ok(b.clone()),
        Some(b) => Err(EventError::new(
            field,
            format!(
                "the measured baseline ({} kW, {}) is not a finite power ≥ 0; check the meter feed",
                b.kw, b.method
            ),
        )),
        None => Err(EventError::new(
            field,
            "this target is relative to a baseline, but the event gives no baseline_kw and no measured baseline is \
             available; send baseline_kw or wait for meter data",
        )),
    }
}

fn finish(raw_kw: f64, baseline: Option<BaselineEstimate>, form: &str, mut note: String) -> CeilingTarget {
    let ceiling_kw = if raw_kw < 0.0 {
        note.push_str(&format!(
            "; the result ({raw_kw} kW) is below zero and is clamped to 0 kW (shed everything that can be shed)"
        ));
        0.0
    } else {
        raw_kw
    };
    CeilingTarget {
        ceiling_kw,
        baseline,
        form: form.to_owned(),
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> SiteContext {
        SiteContext {
            facility_max_kw: 12_000.0,
            ..SiteContext::default()
        }
    }

    fn est() -> BaselineEstimate {
        BaselineEstimate::meter_before(10_000.0, 900)
    }

    fn conv(t: Target) -> CeilingTarget {
        to_ceiling(&t, &site(), Some(&est())).unwrap().unwrap()
    }

    #[test]
    fn absolute_ceiling_is_taken_as_is() {
        let c = conv(Target::MeterCeiling { kw: 8000.0 });
        assert_eq!(c.ceiling_kw, 8000.0);
        assert_eq!(c.baseline, None);
        assert_eq!(c.form, "ceiling");
    }

    #[test]
    fn reduction_uses_event_baseline_first_and_records_it() {
        let c = conv(Target::Reduction {
            kw: 2000.0,
            baseline_kw: Some(9000.0),
        });
        assert_eq!(c.ceiling_kw, 7000.0);
        assert_eq!(
            c.baseline,
            Some(BaselineEstimate {
                kw: 9000.0,
                method: "event".into(),
                window_s: 0
            })
        );

        let c = conv(Target::Reduction {
            kw: 2000.0,
            baseline_kw: None,
        });
        assert_eq!(c.ceiling_kw, 8000.0);
        assert_eq!(c.baseline, Some(est()));
        assert!(c.note.contains("meter_before"), "{}", c.note);
    }

    #[test]
    fn relative_target_without_any_baseline_is_refused() {
        let e = to_ceiling(
            &Target::Reduction {
                kw: 1.0,
                baseline_kw: None,
            },
            &site(),
            None,
        )
        .unwrap_err();
        assert_eq!(e.field, "target.baseline_kw");
        let e = to_ceiling(
            &Target::Percent {
                percent: 10.0,
                baseline_kw: None,
            },
            &site(),
            None,
        )
        .unwrap_err();
        assert_eq!(e.field, "target.baseline_kw");
        let e = to_ceiling(&Target::Level { level: 2 }, &site(), None).unwrap_err();
        assert_eq!(e.field, "target.level");
        let bad = BaselineEstimate::meter_before(f64::NAN, 60);
        let e = to_ceiling(
            &Target::Percent {
                percent: 10.0,
                baseline_kw: None,
            },
            &site(),
            Some(&bad),
        )
        .unwrap_err();
        assert_eq!(e.field, "target.baseline_kw");
    }

    #[test]
    fn percent_reduces_by_share_of_baseline() {
        let c = conv(Target::Percent {
            percent: 25.0,
            baseline_kw: None,
        });
        assert_eq!(c.ceiling_kw, 7500.0);
        assert_eq!(c.baseline.unwrap().kw, 10_000.0);
        let c = conv(Target::Percent {
            percent: 100.0,
            baseline_kw: Some(4000.0),
        });
        assert_eq!(c.ceiling_kw, 0.0);
    }

    #[test]
    fn capacity_fraction_uses_facility_max() {
        let c = conv(Target::CapacityFraction { fraction: 0.5 });
        assert_eq!(c.ceiling_kw, 6000.0);
        assert_eq!(c.baseline, None);
        let e = to_ceiling(
            &Target::CapacityFraction { fraction: 0.5 },
            &SiteContext::default(),
            None,
        )
        .unwrap_err();
        assert_eq!(e.field, "target.fraction");
        let e = to_ceiling(&Target::CapacityFraction { fraction: 8.0 }, &site(), None).unwrap_err();
        assert_eq!(e.field, "target.fraction");
    }

    #[test]
    fn levels_map_through_the_table() {
        assert_eq!(conv(Target::Level { level: 1 }).ceiling_kw, 9000.0);
        assert_eq!(conv(Target::Level { level: 2 }).ceiling_kw, 8000.0);
        assert_eq!(conv(Target::Level { level: 3 }).ceiling_kw, 7000.0);
        assert_eq!(
            to_ceiling(&Target::Level { level: 0 }, &site(), Some(&est())).unwrap(),
            None
        );
        let mut s = site();
        s.level_table.retain(|r| r.level != 3);
        let e = to_ceiling(&Target::Level { level: 3 }, &s, Some(&est())).unwrap_err();
        assert_eq!(e.field, "target.level");
        assert!(e.message.contains("1, 2"), "{}", e.message);
    }

    #[test]
    fn prices_are_acknowledged_unless_mapped() {
        let t = Target::Price { per_mwh: 900.0 };
        assert_eq!(to_ceiling(&t, &site(), Some(&est())).unwrap(), None);
        let mut s = site();
        s.price_table = vec![
            PriceRule {
                min_per_mwh: 500.0,
                shed: Fraction::new(0.1).unwrap(),
            },
            PriceRule {
                min_per_mwh: 800.0,
                shed: Fraction::new(0.4).unwrap(),
            },
            PriceRule {
                min_per_mwh: 2000.0,
                shed: Fraction::new(0.9).unwrap(),
            },
        ];
        let c = to_ceiling(&t, &s, Some(&est())).unwrap().unwrap();
        assert_eq!(c.ceiling_kw, 6000.0);
        assert_eq!(c.form, "price");
        assert_eq!(
            to_ceiling(&Target::Price { per_mwh: 100.0 }, &s, Some(&est())).unwrap(),
            None
        );
        let e = to_ceiling(&t, &s, None).unwrap_err();
        assert_eq!(e.field, "target.per_mwh");
    }

    #[test]
    fn negative_results_clamp_to_zero_with_a_note() {
        let c = conv(Target::Reduction {
            kw: 12_000.0,
            baseline_kw: None,
        });
        assert_eq!(c.ceiling_kw, 0.0);
        assert!(c.note.contains("clamped to 0 kW"), "{}", c.note);
    }

    #[test]
    fn invalid_values_are_refused_with_their_path() {
        let e = to_ceiling(&Target::MeterCeiling { kw: -5.0 }, &site(), None).unwrap_err();
        assert_eq!(e.field, "target.kw");
    }

    #[test]
    fn event_ceilings_prefix_the_interval() {
        use crate::event::model::{EventSource, Interval, Window};
        let ev = GridEvent {
            id: "e".into(),
            revision: 0,
            source: EventSource::Mqtt,
            site: None,
            program: None,
            issued_at: None,
            mandatory: false,
            test: false,
            cancel: false,
            priority: None,
            window: Window {
                start: "2026-01-01T00:00:00Z".parse().unwrap(),
                ramp_s: 0,
                duration_s: None,
                recovery_s: 0,
                randomize_start_s: 0,
            },
            intervals: vec![
                Interval {
                    offset_s: 0,
                    duration_s: Some(60),
                    target: Target::MeterCeiling { kw: 5.0 },
                },
                Interval {
                    offset_s: 60,
                    duration_s: None,
                    target: Target::Level { level: 1 },
                },
            ],
        };
        let e = event_ceilings(&ev, &site(), None).unwrap_err();
        assert_eq!(e.field, "intervals[1].target.level");
        let c = event_ceilings(&ev, &site(), Some(&est())).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].as_ref().unwrap().ceiling_kw, 9000.0);
    }
}
