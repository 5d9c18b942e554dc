//! The fleet file: jobs with their measured curves, so anyone can run the experiment on their
//! own data (`flexgate simulate --fleet FILE.json`).
//!
//! ```json
//! [{"id": "j1", "gpus": 8, "min_cap_w": 200, "max_cap_w": 700,
//!   "points": [{"cap_w": 700, "power_w": 5200, "tokens_per_s": 12000},
//!              {"cap_w": 500, "power_w": 3900, "tokens_per_s": 11000}],
//!   "known": {"pfi": 1.4, "pfi_grid_w": [200, 300, 400, 500, 600, 700],
//!             "pfi_predicted": 1.5, "pfi_predicted_sd": 0.24},
//!   "max_slowdown": 0.25}]
//! ```
//!
//! `points` are the ground truth (only the oracle and the throughput accounting see them); the
//! highest-cap point is the uncapped reference (P_max, T_max), which every policy knows, as in
//! production. `known` is what policies may use; every field is optional, and `sweep` (a list of
//! points like `points`) may give a measured curve that differs from the truth. `min_cap_w` and
//! `max_cap_w` default to the H200 range (200, 700); `max_slowdown` is optional.
//!
//! Errors name the job (by position and id) and the field, so a 10,000-job file can be fixed.

use super::truth::{JobTemplate, Known};
use flexgate_policies::alloc::CapRange;
use flexgate_policies::curve::{CurvePoint, PowerCurve};
use flexgate_policies::pfi::{CapGrid, DEFAULT_EPSILON, pfi};
use flexgate_policies::units::{Fraction, TokensPerSec, Watts, WattsPerGpu};
use serde::Deserialize;
use std::collections::HashSet;

/// Upper bound on jobs in one file: far above any real cluster, low enough to refuse a hostile
/// file before it eats memory.
pub const MAX_JOBS: usize = 1_000_000;
/// Upper bound on GPUs per job.
pub const MAX_GPUS_PER_JOB: u32 = 100_000;

/// A fleet file that cannot be used, with the job and field at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FleetFileError {
    /// Not JSON, or not an array at the top.
    #[error("fleet file is not a JSON array of jobs: {0}")]
    NotAnArray(String),
    /// No jobs.
    #[error("fleet file has no jobs")]
    Empty,
    /// Too many jobs.
    #[error("fleet file has {0} jobs; the limit is {MAX_JOBS}")]
    TooManyJobs(usize),
    /// A problem in one job.
    #[error("job #{index} ({id}): {field}: {problem}")]
    Job {
        /// 0-based position in the array.
        index: usize,
        /// The job's id, or `<no id>`.
        id: String,
        /// Field path, e.g. `points[2].power_w` or `known.pfi_grid_w`.
        field: String,
        /// What is wrong.
        problem: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    id: String,
    gpus: u32,
    #[serde(default)]
    min_cap_w: Option<f64>,
    #[serde(default)]
    max_cap_w: Option<f64>,
    points: Vec<RawPoint>,
    #[serde(default)]
    known: RawKnown,
    #[serde(default)]
    max_slowdown: Option<f64>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
struct RawPoint {
    cap_w: f64,
    power_w: f64,
    tokens_per_s: f64,
    /// A known sweep's point may state the standard error of its throughput.
    #[serde(default)]
    tokens_sd: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawKnown {
    pfi: Option<f64>,
    pfi_grid_w: Option<Vec<f64>>,
    pfi_predicted: Option<f64>,
    pfi_predicted_sd: Option<f64>,
    sweep: Option<Vec<RawPoint>>,
}

/// Parse and validate a fleet file's text into job templates.
pub fn parse_fleet(text: &str) -> Result<Vec<JobTemplate>, FleetFileError> {
    let values: Vec<serde_json::Value> =
        serde_json::from_str(text).map_err(|e| FleetFileError::NotAnArray(e.to_string()))?;
    if values.is_empty() {
        return Err(FleetFileError::Empty);
    }
    if values.len() > MAX_JOBS {
        return Err(FleetFileError::TooManyJobs(values.len()));
    }
    let mut seen = HashSet::new();
    let mut templates = Vec::with_capacity(values.len());
    for (index, value) in values.into_iter().enumerate() {
        let id = value
            .get("id")
            .and_then(|v| v.as_str())
            .unwrap_or("<no id>")
            .to_string();
        let fail = |field: &str, problem: String| FleetFileError::Job {
            index,
            id: id.clone(),
            field: field.to_string(),
            problem,
        };
        let raw: RawJob = serde_json::from_value(value).map_err(|e| fail(&field_of(&e.to_string()), e.to_string()))?;
        if raw.id.trim().is_empty() {
            return Err(fail("id", "must not be empty".into()));
        }
        if !seen.insert(raw.id.clone()) {
            return Err(fail("id", "appears more than once in the file".into()));
        }
        templates.push(build(raw, &fail)?);
    }
    Ok(templates)
}

/// Best-effort field name from a serde error message ("unknown field `x`", "missing field `y`").
fn field_of(message: &str) -> String {
    message
        .split('`')
        .nth(1)
        .filter(|_| message.contains("field"))
        .unwrap_or("(structure)")
        .to_string()
}

fn finite_positive(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

fn build(raw: RawJob, fail: &dyn Fn(&str, String) -> FleetFileError) -> Result<JobTemplate, FleetFileError> {
    if raw.gpus == 0 || raw.gpus > MAX_GPUS_PER_JOB {
        return Err(fail(
            "gpus",
            format!("must be between 1 and {MAX_GPUS_PER_JOB}, got {}", raw.gpus),
        ));
    }
    let min = raw.min_cap_w.unwrap_or(CapRange::H200.min.value());
    let max = raw.max_cap_w.unwrap_or(CapRange::H200.max.value());
    if !finite_positive(min) {
        return Err(fail("min_cap_w", format!("must be a positive number, got {min}")));
    }
    if !finite_positive(max) || max < min {
        return Err(fail(
            "max_cap_w",
            format!("must be a number ≥ min_cap_w ({min}), got {max}"),
        ));
    }
    let truth = curve(raw.gpus, &raw.points).map_err(|(field, problem)| fail(&format!("points{field}"), problem))?;
    let k = raw.known;
    for (field, value) in [("known.pfi", k.pfi), ("known.pfi_predicted", k.pfi_predicted)] {
        if let Some(v) = value
            && !finite_positive(v)
        {
            return Err(fail(field, format!("must be a positive number, got {v}")));
        }
    }
    if let Some(sd) = k.pfi_predicted_sd {
        if !(sd.is_finite() && sd >= 0.0) {
            return Err(fail(
                "known.pfi_predicted_sd",
                format!("must be a non-negative number, got {sd}"),
            ));
        }
        if k.pfi_predicted.is_none() {
            return Err(fail(
                "known.pfi_predicted_sd",
                "is given without known.pfi_predicted".into(),
            ));
        }
    }
    let grid = match k.pfi_grid_w {
        None => None,
        Some(caps) => {
            if caps.len() < 2 || caps.iter().any(|c| !finite_positive(*c)) || caps.windows(2).any(|w| w[0] >= w[1]) {
                return Err(fail(
                    "known.pfi_grid_w",
                    "needs at least two positive caps in ascending order".into(),
                ));
            }
            if k.pfi.is_none() {
                return Err(fail("known.pfi_grid_w", "is given without known.pfi".into()));
            }
            Some(CapGrid(caps.into_iter().map(WattsPerGpu).collect()))
        }
    };
    if let Some(i) = raw.points.iter().position(|p| p.tokens_sd.is_some()) {
        return Err(fail(
            &format!("points[{i}].tokens_sd"),
            "only a known sweep's points state an uncertainty: the true curve is exact".into(),
        ));
    }
    let (sweep, sweep_tokens_sd) = match k.sweep {
        None => (None, Vec::new()),
        Some(points) => {
            let stated = points.iter().filter(|p| p.tokens_sd.is_some()).count();
            if stated != 0 && stated != points.len() {
                return Err(fail(
                    "known.sweep",
                    "tokens_sd is given for some points and not others: give it for every point or none".into(),
                ));
            }
            if let Some(i) = points
                .iter()
                .position(|p| p.tokens_sd.is_some_and(|s| !s.is_finite() || s < 0.0))
            {
                return Err(fail(
                    &format!("known.sweep[{i}].tokens_sd"),
                    "must be a finite non-negative number (tokens/s)".into(),
                ));
            }
            let curve =
                curve(raw.gpus, &points).map_err(|(field, problem)| fail(&format!("known.sweep{field}"), problem))?;
            // The curve sorts its points by cap: their errors follow them.
            let mut by_cap: Vec<(f64, f64)> = points.iter().map(|p| (p.cap_w, p.tokens_sd.unwrap_or(0.0))).collect();
            by_cap.sort_by(|a, b| a.0.total_cmp(&b.0));
            let sds = if stated == 0 {
                Vec::new()
            } else {
                by_cap.into_iter().map(|(_, s)| s).collect()
            };
            (Some(curve), sds)
        }
    };
    let max_slowdown = match raw.max_slowdown {
        None => None,
        Some(v) => Some(Fraction::new(v).map_err(|e| fail("max_slowdown", e.to_string()))?),
    };
    let true_pfi = pfi(&truth, DEFAULT_EPSILON).ok();
    Ok(JobTemplate {
        name: raw.id,
        group: None,
        regime: None,
        gpus: raw.gpus,
        cap_range: CapRange {
            min: WattsPerGpu(min),
            max: WattsPerGpu(max),
        },
        true_pfi: true_pfi.as_ref().map(|p| p.value),
        true_pfi_grid: true_pfi.map(|p| p.grid),
        truth,
        known: Known {
            pfi: k.pfi,
            pfi_grid: grid,
            pfi_predicted: k.pfi_predicted,
            pfi_predicted_sd: k.pfi_predicted_sd,
            sweep,
            sweep_tokens_sd,
            sweep_plan: None,
        },
        max_slowdown,
        predicted: true,
        prediction_bias: 0.0,
    })
}

fn curve(gpus: u32, points: &[RawPoint]) -> Result<PowerCurve, (String, String)> {
    let pts = points
        .iter()
        .map(|p| CurvePoint {
            cap: WattsPerGpu(p.cap_w),
            power: Watts(p.power_w),
            tokens: TokensPerSec(p.tokens_per_s),
        })
        .collect();
    PowerCurve::new(gpus, pts).map_err(|e| {
        use flexgate_policies::curve::CurveError as E;
        let field = match &e {
            E::NotFinite { index, field } => format!("[{index}].{field}"),
            E::NotPositive { index, field, .. } => format!("[{index}].{field}"),
            E::PowerAboveCap { index, .. } => format!("[{index}].power_w"),
            E::DuplicateCap { second, .. } => format!("[{second}].cap_w"),
            _ => String::new(),
        };
        (field, e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"[{"id": "j1", "gpus": 8, "min_cap_w": 200, "max_cap_w": 700,
        "points": [{"cap_w": 700, "power_w": 5200, "tokens_per_s": 12000},
                   {"cap_w": 500, "power_w": 3900, "tokens_per_s": 11000},
                   {"cap_w": 200, "power_w": 1600, "tokens_per_s": 6000}],
        "known": {"pfi": 1.4, "pfi_grid_w": [200, 500, 700], "pfi_predicted": 1.5, "pfi_predicted_sd": 0.24},
        "max_slowdown": 0.25}]"#;

    fn job_error(text: &str) -> (String, String) {
        match parse_fleet(text) {
            Err(FleetFileError::Job { id, field, .. }) => (id, field),
            other => panic!("expected a job error, got {other:?}"),
        }
    }

    #[test]
    fn parses_the_documented_example() {
        let jobs = parse_fleet(GOOD).expect("valid file");
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].truth.uncapped().tokens, TokensPerSec(12000.0));
        assert_eq!(jobs[0].known.pfi_predicted_sd, Some(0.24));
        assert!(jobs[0].true_pfi.is_some());
    }

    #[test]
    fn errors_name_the_job_and_the_field() {
        assert_eq!(
            job_error(&GOOD.replace("\"power_w\": 3900", "\"power_w\": -1")),
            ("j1".into(), "points[1].power_w".into())
        );
        assert_eq!(
            job_error(&GOOD.replace("\"pfi\": 1.4", "\"pfi\": 0")),
            ("j1".into(), "known.pfi".into())
        );
        assert_eq!(
            job_error(&GOOD.replace("\"gpus\": 8", "\"gpus\": 0")),
            ("j1".into(), "gpus".into())
        );
        assert_eq!(
            job_error(&GOOD.replace("\"max_slowdown\": 0.25", "\"max_slowdown\": 1.5")),
            ("j1".into(), "max_slowdown".into())
        );
        assert_eq!(
            job_error(&GOOD.replace("[200, 500, 700]", "[500, 200]")),
            ("j1".into(), "known.pfi_grid_w".into())
        );
        assert_eq!(
            job_error(&GOOD.replace("\"max_slowdown\"", "\"max_slowdon\"")),
            ("j1".into(), "max_slowdon".into())
        );
        assert_eq!(
            job_error(&GOOD.replace("\"gpus\": 8,", "")),
            ("j1".into(), "gpus".into())
        );
        assert_eq!(
            job_error(&GOOD.replace("\"power_w\": 3900", "\"power_w\": 5300")).1,
            "points[1].power_w"
        );
        let inner = &GOOD.trim()[1..GOOD.trim().len() - 1];
        let twice = format!("[{inner}, {inner}]");
        assert_eq!(job_error(&twice), ("j1".into(), "id".into()));
    }

    #[test]
    fn structural_errors_are_clear() {
        assert!(matches!(parse_fleet("{}"), Err(FleetFileError::NotAnArray(_))));
        assert!(matches!(parse_fleet("[]"), Err(FleetFileError::Empty)));
        assert!(matches!(parse_fleet("[1, 2"), Err(FleetFileError::NotAnArray(_))));
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(matches!(parse_fleet(&deep), Err(FleetFileError::NotAnArray(_))));
        assert!(parse_fleet("[{\"id\": \"x\", \"gpus\": 1, \"points\": [{\"cap_w\": NaN}]}]").is_err());
    }
}
