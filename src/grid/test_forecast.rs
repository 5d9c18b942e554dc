//! A 48-hour forecast of quarter-hours as the controller makes it, for the protocol adapters'
//! unit tests (MQTT telemetry, OpenADR 3 reports), so both read the same document.

use flexgate_policies::forecast::{Band, Forecast, ForecastLevel, ForecastStep, STEPS_48H};

/// Made at 2026-07-14T19:07:30Z (not on the hour), `p10(k)` W at step k, P50 and P90 above it.
pub(crate) fn forecast(p10: impl Fn(usize) -> f64) -> Forecast {
    let at: chrono::DateTime<chrono::Utc> = "2026-07-14T19:07:30Z".parse().expect("a time");
    let steps = (0..STEPS_48H)
        .map(|k| {
            let start = at + chrono::Duration::seconds(900 * k as i64);
            let w = p10(k);
            ForecastStep {
                start,
                end: start + chrono::Duration::seconds(900),
                available_w: Band {
                    p10: w,
                    p50: w + 100_000.0,
                    p90: w + 250_000.0,
                },
                jobs_expected: 10.0,
                gpus_expected: 80.0,
                gpus_unknown: 0.0,
                levels: (0..21)
                    .map(|i| ForecastLevel {
                        shed_w: 1_234.567_891 * f64::from(i),
                        cost: 0.001_234_567 * f64::from(i),
                    })
                    .collect(),
            }
        })
        .collect();
    Forecast {
        generated_at: at,
        cost_ceiling: 0.1,
        scale_to_now: 1.0,
        basis: vec!["the jobs running now".into()],
        steps,
    }
}
