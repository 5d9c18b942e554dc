//! Telemetry predictor of the Power Flexibility Index (PFI).
//!
//! Measuring a job's PFI needs a full sweep of power caps, which is too expensive to run for every
//! production job. The PFI paper's telemetry predictor instead predicts it
//! from ordinary DCGM telemetry of the job's *uncapped* run, with a one-feature ordinary least
//! squares fit
//!
//! ```text
//! PFI ≈ a + b · x,   x = mean DCGM_FI_PROF_DRAM_ACTIVE (0–1) × mean DCGM_FI_DEV_MEM_COPY_UTIL (%)
//! ```
//!
//! The feature is a memory-boundedness proxy: memory-bound jobs keep their throughput when the SM
//! clock drops under a cap, so they are the flexible ones. On the paper's 25 samples the fit has
//! in-sample R² 0.675, leave-one-out (LOO) R² 0.524 (RMSE 0.241) and leave-one-cluster-out
//! (LOCO, cluster = architecture × task) R² 0.246. The drop from LOO to LOCO says the signal mostly
//! separates job *types*; inside a type it says little. A scheduler must therefore treat a
//! predicted PFI as uncertain, which is why [`PfiPredictor::predict`] returns a mean together with
//! a standard error of prediction and [`PfiPrediction::interval`] gives a Student-t prediction
//! interval rather than a bare point.
//!
//! Everything here is pure and total: invalid input is reported as a [`PredictorError`] that names
//! the offending sample index and field, never as a panic or a silent NaN.
//!
//! The Student-t distribution is implemented here (CDF through the regularized incomplete beta
//! function evaluated by a continued fraction, quantile by bisection) to avoid a statistics
//! dependency for the handful of numbers a prediction interval needs.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// Smallest sample count for which a fit has a residual standard deviation (n − 2 ≥ 1 degrees of
/// freedom) and for which every leave-one-out fold still has two points to draw a line through.
pub const MIN_SAMPLES: usize = 3;

/// The paper's leave-one-out RMSE of its telemetry PFI predictor: the error a prediction is
/// assumed to carry when nothing better is known (the fleet experiment's, and the least spread
/// the gateway gives its fleet prior).
pub const PAPER_PREDICTOR_RMSE: f64 = 0.241;

/// One training job's measured PFI together with the telemetry of its uncapped run.
///
/// This is the unit of the paper's dataset (25 of them on H200). `cluster` names the job type
/// (architecture × task, e.g. `"Qwen3-32B/dense_pt"`); it is only used by leave-one-cluster-out
/// validation, which is the honest test of how the predictor does on a job type it has not seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetrySample {
    /// Measured Power Flexibility Index of the job (dimensionless, must be > 0).
    pub pfi: f64,
    /// Mean `DCGM_FI_PROF_DRAM_ACTIVE` over the uncapped run, a fraction in `[0, 1]`.
    pub dram_active: f64,
    /// Mean `DCGM_FI_DEV_MEM_COPY_UTIL` over the uncapped run, a percent in `[0, 100]`.
    pub mem_copy_util_pct: f64,
    /// Job type (architecture × task) used to group samples for leave-one-cluster-out.
    pub cluster: String,
}

impl TelemetrySample {
    /// The regression feature x = `dram_active` × `mem_copy_util_pct` (in `[0, 100]` for valid
    /// input).
    ///
    /// The product is the paper's choice: each factor alone is a weaker memory-boundedness
    /// signal, and a single feature keeps 25 samples from being overfit (all 13 DCGM metrics
    /// together give a LOO R² of −0.187).
    #[must_use]
    pub fn feature(&self) -> f64 {
        self.dram_active * self.mem_copy_util_pct
    }

    /// Check every field of this sample, reporting problems against position `index` so that a
    /// caller loading a CSV or JSON file can point at the bad row.
    ///
    /// # Errors
    /// [`PredictorError::NonFinite`], [`PredictorError::DramActiveOutOfRange`],
    /// [`PredictorError::MemCopyOutOfRange`] or [`PredictorError::NonPositivePfi`].
    pub fn validate(&self, index: usize) -> Result<(), PredictorError> {
        let at = InputRef::Sample(index);
        check_finite(at, "pfi", self.pfi)?;
        validate_telemetry(at, self.dram_active, self.mem_copy_util_pct)?;
        if self.pfi <= 0.0 {
            return Err(PredictorError::NonPositivePfi { index, value: self.pfi });
        }
        Ok(())
    }
}

/// Where an invalid value came from: a training sample (by its index in the slice passed in) or
/// the telemetry given to [`PfiPredictor::predict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRef {
    /// The sample at this 0-based index of the input slice.
    Sample(usize),
    /// The arguments of a prediction query.
    Query,
}

impl fmt::Display for InputRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sample(i) => write!(f, "samples[{i}]"),
            Self::Query => write!(f, "query"),
        }
    }
}

/// Everything that can make a fit, a prediction or a validation meaningless.
///
/// Each variant names the offending sample (0-based index into the slice passed in) or fold, so
/// that bad telemetry can be traced back to its job instead of quietly producing NaN.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PredictorError {
    /// Not enough samples for the requested computation.
    #[error("{what} needs at least {needed} samples, got {got}")]
    TooFewSamples {
        /// What was attempted (e.g. "a fit", "leave-one-out validation").
        what: &'static str,
        /// The minimum sample count.
        needed: usize,
        /// The sample count given.
        got: usize,
    },
    /// A field is NaN or infinite.
    #[error("{at}.{field} is not finite ({value})")]
    NonFinite {
        /// Which sample or query.
        at: InputRef,
        /// The field name.
        field: &'static str,
        /// The offending value.
        value: f64,
    },
    /// DRAM activity outside `[0, 1]` (often a percent passed where a fraction is expected).
    #[error(
        "{at}.dram_active = {value} is outside [0, 1] \
         (DCGM_FI_PROF_DRAM_ACTIVE is a fraction, not a percent)"
    )]
    DramActiveOutOfRange {
        /// Which sample or query.
        at: InputRef,
        /// The offending value.
        value: f64,
    },
    /// Memory-copy utilization outside `[0, 100]`. A fraction passed where a percent is expected
    /// would still be in range, so this catches only gross errors (negative or scaled values).
    #[error(
        "{at}.mem_copy_util_pct = {value} is outside [0, 100] \
         (DCGM_FI_DEV_MEM_COPY_UTIL is a percent)"
    )]
    MemCopyOutOfRange {
        /// Which sample or query.
        at: InputRef,
        /// The offending value.
        value: f64,
    },
    /// A precomputed feature outside `[0, 100]`, the range of a fraction times a percent.
    #[error(
        "query.feature = {value} is outside [0, 100] \
         (x = dram_active × mem_copy_util_pct, a fraction times a percent)"
    )]
    FeatureOutOfRange {
        /// The offending value.
        value: f64,
    },
    /// A measured PFI that is zero or negative, which no real sweep produces.
    #[error("samples[{index}].pfi = {value} must be > 0")]
    NonPositivePfi {
        /// Index of the sample.
        index: usize,
        /// The offending value.
        value: f64,
    },
    /// The feature x is (numerically) constant over the samples used, so the slope is undefined.
    #[error(
        "{context}: the feature x = dram_active × mem_copy_util_pct has (numerically) zero \
         variance, so the slope is undefined"
    )]
    ZeroVariance {
        /// Which data set or fold (e.g. `"all samples"`, `"leave-one-out fold without samples[3]"`).
        context: String,
    },
    /// Every measured PFI is the same, so R² (a share of PFI variance) is undefined.
    #[error("all {n} measured PFI values are equal, so R² is undefined")]
    ConstantPfi {
        /// The sample count.
        n: usize,
    },
    /// Leave-one-cluster-out needs at least two distinct clusters.
    #[error("leave-one-cluster-out needs at least 2 distinct clusters, got {got}")]
    TooFewClusters {
        /// The number of distinct clusters.
        got: usize,
    },
    /// A cross-validation training fold has too few points to draw a line through.
    #[error("{fold}: only {got} training sample(s) remain, need at least {needed}")]
    FoldTooSmall {
        /// Which fold.
        fold: String,
        /// The training sample count of the fold.
        got: usize,
        /// The minimum.
        needed: usize,
    },
}

/// A fitted PFI ≈ a + b · x model, together with what is needed to quantify the uncertainty of a
/// prediction for a new job (the residual standard deviation, n, x̄ and Sxx).
///
/// Fields are private so that every predictor in existence came out of [`PfiPredictor::fit`] on
/// validated data (n ≥ 3, Sxx > 0); predictions can then never divide by zero.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PfiPredictor {
    intercept: f64,
    slope: f64,
    residual_sd: f64,
    n: usize,
    x_mean: f64,
    sxx: f64,
}

impl PfiPredictor {
    /// Fit by ordinary least squares on validated samples.
    ///
    /// OLS with one feature is the paper's model; with 25 samples anything richer overfits.
    ///
    /// # Errors
    /// [`PredictorError::TooFewSamples`] below [`MIN_SAMPLES`], any per-sample validation error
    /// (see [`TelemetrySample::validate`]), or [`PredictorError::ZeroVariance`] when all samples
    /// share one feature value.
    pub fn fit(samples: &[TelemetrySample]) -> Result<Self, PredictorError> {
        validate_samples(samples, "a fit")?;
        let (xs, ys) = columns(samples);
        let line = ols(&xs, &ys).map_err(|d| d.into_error("all samples"))?;
        let n = samples.len();
        let df = (n - 2) as f64;
        Ok(Self {
            intercept: line.intercept,
            slope: line.slope,
            residual_sd: (line.sse / df).sqrt(),
            n,
            x_mean: line.x_mean,
            sxx: line.sxx,
        })
    }

    /// Predict the PFI of a new job from the telemetry of its uncapped run.
    ///
    /// # Errors
    /// [`PredictorError::NonFinite`], [`PredictorError::DramActiveOutOfRange`] or
    /// [`PredictorError::MemCopyOutOfRange`] (reported against [`InputRef::Query`]).
    pub fn predict(&self, dram_active: f64, mem_copy_util_pct: f64) -> Result<PfiPrediction, PredictorError> {
        validate_telemetry(InputRef::Query, dram_active, mem_copy_util_pct)?;
        Ok(self.predict_feature_unchecked(dram_active * mem_copy_util_pct))
    }

    /// Predict from a precomputed feature x = `dram_active` × `mem_copy_util_pct`.
    ///
    /// # Errors
    /// [`PredictorError::NonFinite`] for a NaN or infinite x, or
    /// [`PredictorError::FeatureOutOfRange`] when x is outside `[0, 100]` (the feature's range,
    /// since the DRAM factor is at most 1).
    pub fn predict_feature(&self, x: f64) -> Result<PfiPrediction, PredictorError> {
        check_finite(InputRef::Query, "feature", x)?;
        if !(0.0..=100.0).contains(&x) {
            return Err(PredictorError::FeatureOutOfRange { value: x });
        }
        Ok(self.predict_feature_unchecked(x))
    }

    /// The prediction for a finite x (no range check).
    ///
    /// The standard error is that of a *new observation*, s · √(1 + 1/n + (x − x̄)²/Sxx), not of
    /// the fitted mean line: the leading 1 is the new job's own scatter around the line, which
    /// dominates (the paper's LOO RMSE is 0.24 on PFIs of 1.1–2.7), while the other two terms add
    /// the uncertainty of the fitted line itself, growing as x leaves the training data.
    fn predict_feature_unchecked(&self, x: f64) -> PfiPrediction {
        let n = self.n as f64;
        let dx = x - self.x_mean;
        let leverage = 1.0 / n + dx * dx / self.sxx;
        PfiPrediction {
            feature: x,
            mean: self.intercept + self.slope * x,
            sd: self.residual_sd * (1.0 + leverage).sqrt(),
            df: self.n - 2,
        }
    }

    /// Intercept a of PFI ≈ a + b · x.
    #[must_use]
    pub fn intercept(&self) -> f64 {
        self.intercept
    }

    /// Slope b of PFI ≈ a + b · x (PFI per unit of the feature).
    #[must_use]
    pub fn slope(&self) -> f64 {
        self.slope
    }

    /// Residual standard deviation s = √(SSE / (n − 2)), the unbiased estimate of the scatter of
    /// PFI around the line.
    #[must_use]
    pub fn residual_sd(&self) -> f64 {
        self.residual_sd
    }

    /// Number of samples the model was fitted on.
    #[must_use]
    pub fn n(&self) -> usize {
        self.n
    }

    /// Mean feature value x̄ of the training samples (predictions are tightest here).
    #[must_use]
    pub fn x_mean(&self) -> f64 {
        self.x_mean
    }

    /// Sxx = Σ (xᵢ − x̄)², the spread of the training features; a larger spread pins the slope
    /// down better.
    #[must_use]
    pub fn sxx(&self) -> f64 {
        self.sxx
    }
}

/// The running means of a job's telemetry over its *uncapped* run, the predictor's input.
///
/// The paper's feature is the product of the two means over the uncapped run, so a gateway
/// collects them sample by sample while the job is not capped and stops once it is (a capped
/// job's memory activity says how the cap throttles it, not how memory-bound it is). Readings
/// outside the metrics' physical ranges (a broken exporter) are refused and change nothing.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct UncappedRunMeans {
    dram_sum: f64,
    copy_sum: f64,
    samples: u64,
}

impl UncappedRunMeans {
    /// Add one reading (the job's mean over its GPUs at one instant).
    ///
    /// # Errors
    /// [`PredictorError::NonFinite`], [`PredictorError::DramActiveOutOfRange`] or
    /// [`PredictorError::MemCopyOutOfRange`] (reported against [`InputRef::Query`]); the means
    /// are unchanged.
    pub fn observe(&mut self, dram_active: f64, mem_copy_util_pct: f64) -> Result<(), PredictorError> {
        validate_telemetry(InputRef::Query, dram_active, mem_copy_util_pct)?;
        self.dram_sum += dram_active;
        self.copy_sum += mem_copy_util_pct;
        self.samples += 1;
        Ok(())
    }

    /// Readings taken so far.
    #[must_use]
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Mean DRAM activity (0–1) and mean memory-copy utilisation (%), once there is a reading.
    #[must_use]
    #[allow(clippy::cast_precision_loss)] // sample counts far below 2^52
    pub fn means(&self) -> Option<(f64, f64)> {
        (self.samples > 0).then(|| {
            let n = self.samples as f64;
            (self.dram_sum / n, self.copy_sum / n)
        })
    }

    /// The prediction from these means, once at least `min_samples` readings were taken.
    #[must_use]
    pub fn predict(&self, predictor: &PfiPredictor, min_samples: u64) -> Option<PfiPrediction> {
        if self.samples < min_samples.max(1) {
            return None;
        }
        let (dram, copy) = self.means()?;
        predictor.predict(dram, copy).ok()
    }
}

/// A predicted PFI with its uncertainty.
///
/// A scheduler that ranks jobs by a point estimate will confidently curtail the wrong job about as
/// often as the predictor is wrong; carrying `sd` and `df` lets it use an interval (or a
/// conservative quantile) instead.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PfiPrediction {
    /// The feature x the prediction was made at.
    pub feature: f64,
    /// Point prediction a + b · x.
    pub mean: f64,
    /// Standard error of prediction for a new job, s · √(1 + 1/n + (x − x̄)²/Sxx).
    pub sd: f64,
    /// Degrees of freedom of the Student-t distribution of (PFI − mean)/sd: n − 2.
    pub df: usize,
}

impl PfiPrediction {
    /// Two-sided prediction interval `(lo, hi)` that contains a new job's PFI with probability
    /// `level` (e.g. 0.9), under the usual OLS assumptions: mean ± t_{(1+level)/2, n−2} · sd.
    ///
    /// Student-t rather than normal because s is itself estimated from few samples; with the
    /// paper's n = 25 the 95 % multiplier is 2.07, not 1.96, and with n = 5 it is 3.18.
    ///
    /// The function is total so that it can sit in a scheduler's hot path: `level ≤ 0` gives the
    /// point `(mean, mean)`, `level ≥ 1` or NaN gives the conservative `(−∞, +∞)`, and a zero `sd`
    /// (a perfect fit) gives `(mean, mean)`. The bounds are not clipped to the physical range of
    /// PFI (> 0); clip them at the caller if needed.
    #[must_use]
    pub fn interval(&self, level: f64) -> (f64, f64) {
        let unbounded = (f64::NEG_INFINITY, f64::INFINITY);
        if level.is_nan() || !self.sd.is_finite() {
            return unbounded;
        }
        if self.sd == 0.0 || level <= 0.0 {
            return (self.mean, self.mean);
        }
        if level >= 1.0 {
            return unbounded;
        }
        let df = self.df as f64;
        match student_t_quantile(0.5 + 0.5 * level, df) {
            Some(t) => {
                let half = t * self.sd;
                (self.mean - half, self.mean + half)
            }
            None => unbounded,
        }
    }
}

/// Cross-validated quality of the telemetry predictor on a data set, as the paper reports it.
///
/// In-sample R² flatters a model; LOO R² measures prediction of an unseen job; LOCO R² measures
/// prediction of an unseen job *type*, which is what a new production workload usually is. The
/// paper's 0.675 / 0.524 / 0.246 shows that most of the signal is which type a job is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredictorReport {
    /// Number of samples.
    pub n: usize,
    /// Intercept a of the fit on all samples.
    pub intercept: f64,
    /// Slope b of the fit on all samples.
    pub slope: f64,
    /// Residual standard deviation of the fit on all samples.
    pub residual_sd: f64,
    /// 1 − SSE/SST of the fit on all samples.
    pub in_sample_r2: f64,
    /// 1 − PRESS/SST, PRESS = Σ (yᵢ − ŷ₍₋ᵢ₎)² with each ŷ₍₋ᵢ₎ from a fit without sample i.
    /// Always ≤ `in_sample_r2`, and may be negative (worse than predicting the mean).
    pub loo_r2: f64,
    /// √(PRESS / n): typical error of predicting an unseen job's PFI.
    pub loo_rmse: f64,
    /// The leave-one-out predictions ŷ₍₋ᵢ₎, in sample order.
    pub loo_predictions: Vec<f64>,
    /// Leave-one-cluster-out R², 1 − Σ (yᵢ − ŷ₍₋cluster(i)₎)²/SST. `None` when the data has fewer
    /// than two distinct clusters (there is nothing to hold out); see [`loco_predictions`] for
    /// the erroring variant.
    pub loco_r2: Option<f64>,
    /// Spearman rank correlation between the LOO predictions and the measured PFIs, with average
    /// ranks for ties. A scheduler that only ranks jobs by flexibility needs this more than R².
    /// `None` when either side is constant (the rank correlation is undefined).
    pub spearman_rho: Option<f64>,
    /// The distinct cluster names, sorted.
    pub clusters: Vec<String>,
}

/// Fit on all samples and cross-validate (LOO and, when there are ≥ 2 clusters, LOCO).
///
/// LOO is computed by brute-force refitting, which reports a degenerate fold by name; the
/// hat-matrix shortcut is tested to agree with it.
///
/// # Errors
/// Everything [`PfiPredictor::fit`] can return; [`PredictorError::ConstantPfi`] when R² is
/// undefined; [`PredictorError::ZeroVariance`] or [`PredictorError::FoldTooSmall`] when a LOO or
/// LOCO training fold cannot be fitted. Fewer than two clusters is not an error: `loco_r2` is
/// `None`.
pub fn evaluate(samples: &[TelemetrySample]) -> Result<PredictorReport, PredictorError> {
    let model = PfiPredictor::fit(samples)?;
    let (xs, ys) = columns(samples);
    let sst = centered_sum_sq(&ys);
    if sst.is_nan() || sst <= 0.0 {
        return Err(PredictorError::ConstantPfi { n: samples.len() });
    }
    let sse: f64 = xs
        .iter()
        .zip(&ys)
        .map(|(&x, &y)| {
            let r = y - (model.intercept + model.slope * x);
            r * r
        })
        .sum();
    let loo = loo_predictions_checked(&xs, &ys)?;
    let press = sum_sq_resid(&ys, &loo);
    let clusters = distinct_clusters(samples);
    let loco_r2 = if clusters.len() >= 2 {
        let loco = loco_predictions_checked(samples, &xs, &ys, &clusters)?;
        Some(1.0 - sum_sq_resid(&ys, &loco) / sst)
    } else {
        None
    };
    let n = samples.len() as f64;
    Ok(PredictorReport {
        n: samples.len(),
        intercept: model.intercept,
        slope: model.slope,
        residual_sd: model.residual_sd,
        in_sample_r2: 1.0 - sse / sst,
        loo_r2: 1.0 - press / sst,
        loo_rmse: (press / n).sqrt(),
        spearman_rho: spearman_rho(&loo, &ys),
        loo_predictions: loo,
        loco_r2,
        clusters: clusters.into_iter().map(str::to_owned).collect(),
    })
}

/// Leave-one-out predictions ŷ₍₋ᵢ₎ (sample i predicted by a fit on all the others), by refitting.
///
/// # Errors
/// Validation errors, [`PredictorError::TooFewSamples`] below [`MIN_SAMPLES`], or
/// [`PredictorError::ZeroVariance`] naming the fold whose remaining samples share one feature
/// value.
pub fn loo_predictions(samples: &[TelemetrySample]) -> Result<Vec<f64>, PredictorError> {
    validate_samples(samples, "leave-one-out validation")?;
    let (xs, ys) = columns(samples);
    loo_predictions_checked(&xs, &ys)
}

/// Leave-one-cluster-out predictions: every sample predicted by a fit on all samples of *other*
/// clusters.
///
/// This is the test that matters for a new job type: if the feature only tells types apart, a
/// type absent from training is predicted poorly, and LOCO shows it where LOO does not.
///
/// # Errors
/// Validation errors, [`PredictorError::TooFewClusters`] below two clusters, and
/// [`PredictorError::FoldTooSmall`] or [`PredictorError::ZeroVariance`] naming the held-out
/// cluster whose complement cannot be fitted.
pub fn loco_predictions(samples: &[TelemetrySample]) -> Result<Vec<f64>, PredictorError> {
    validate_samples(samples, "leave-one-cluster-out validation")?;
    let clusters = distinct_clusters(samples);
    if clusters.len() < 2 {
        return Err(PredictorError::TooFewClusters { got: clusters.len() });
    }
    let (xs, ys) = columns(samples);
    loco_predictions_checked(samples, &xs, &ys, &clusters)
}

/// Spearman rank correlation of two equally long series, with average ranks for ties (the
/// Pearson correlation of the ranks).
///
/// Returns `None` when the lengths differ, fewer than two values are given, a value is not
/// finite, or either series is constant (the correlation is then undefined).
#[must_use]
pub fn spearman_rho(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 2 || a.iter().chain(b).any(|v| !v.is_finite()) {
        return None;
    }
    pearson(&average_ranks(a), &average_ranks(b))
}

/// Cumulative distribution function P(T ≤ t) of Student's t with `df` degrees of freedom.
///
/// Uses P(|T| > |t|) = I_{df/(df+t²)}(df/2, 1/2), the regularized incomplete beta function.
/// Degrees of freedom above [`T_DF_CAP`] (including +∞, the normal limit) are evaluated at the
/// cap. Returns `None` for NaN `t`, a `df` that is NaN or ≤ 0, or if the continued fraction fails
/// to converge (not observed for any `df` in tests).
#[must_use]
pub fn student_t_cdf(t: f64, df: f64) -> Option<f64> {
    if t.is_nan() {
        return None;
    }
    let tail = student_t_upper_tail(t.abs(), df)?;
    Some(if t >= 0.0 { 1.0 - tail } else { tail })
}

/// Quantile (inverse CDF) of Student's t with `df` degrees of freedom: the t with P(T ≤ t) = p.
///
/// Found by bisection on the upper tail to a relative accuracy far below 10⁻⁶, which is plenty
/// for a prediction interval. Degrees of freedom above [`T_DF_CAP`] (including +∞) are
/// evaluated at the cap. Returns `None` unless `0 < p < 1` and `df > 0`.
#[must_use]
pub fn student_t_quantile(p: f64, df: f64) -> Option<f64> {
    if p.is_nan() || p <= 0.0 || p >= 1.0 || df.is_nan() || df <= 0.0 {
        return None;
    }
    if p == 0.5 {
        return Some(0.0);
    }
    // Work with the upper-tail probability q = P(T > t) of the positive quantile; it is
    // computed without cancellation, so tiny tails stay accurate.
    let (q, sign) = if p > 0.5 { (1.0 - p, 1.0) } else { (p, -1.0) };
    let mut lo = 0.0_f64;
    let mut hi = 1.0_f64;
    // Bracket: the tail decreases in t; double hi until it is below q.
    let mut doublings = 0;
    while student_t_upper_tail(hi, df)? > q {
        lo = hi;
        hi *= 2.0;
        doublings += 1;
        if doublings > 1100 || !hi.is_finite() {
            return None;
        }
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if student_t_upper_tail(mid, df)? > q {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-14 * hi.max(1.0) {
            break;
        }
    }
    Some(sign * 0.5 * (lo + hi))
}

// ---------------------------------------------------------------------------------------------
// Internals.
// ---------------------------------------------------------------------------------------------

/// Result of an OLS fit on raw columns.
struct Line {
    intercept: f64,
    slope: f64,
    x_mean: f64,
    sxx: f64,
    sse: f64,
}

/// Why a set of points cannot define a line.
enum Degenerate {
    TooFew(usize),
    ZeroVariance,
}

impl Degenerate {
    fn into_error(self, context: &str) -> PredictorError {
        match self {
            Self::TooFew(got) => PredictorError::FoldTooSmall {
                fold: context.to_owned(),
                got,
                needed: 2,
            },
            Self::ZeroVariance => PredictorError::ZeroVariance {
                context: context.to_owned(),
            },
        }
    }
}

/// Ordinary least squares on finite columns of equal length, with mean-centred (two-pass) sums
/// for numerical stability.
fn ols(xs: &[f64], ys: &[f64]) -> Result<Line, Degenerate> {
    let n = xs.len().min(ys.len());
    if n < 2 {
        return Err(Degenerate::TooFew(n));
    }
    let (xs, ys) = (&xs[..n], &ys[..n]);
    let x_mean = mean(xs);
    let y_mean = mean(ys);
    let mut sxx = 0.0;
    let mut sxy = 0.0;
    for (&x, &y) in xs.iter().zip(ys) {
        sxx += (x - x_mean) * (x - x_mean);
        sxy += (x - x_mean) * (y - y_mean);
    }
    if is_zero_spread(xs, sxx) {
        return Err(Degenerate::ZeroVariance);
    }
    let slope = sxy / sxx;
    let intercept = y_mean - slope * x_mean;
    let sse = xs
        .iter()
        .zip(ys)
        .map(|(&x, &y)| {
            let r = y - (intercept + slope * x);
            r * r
        })
        .sum();
    Ok(Line {
        intercept,
        slope,
        x_mean,
        sxx,
        sse,
    })
}

/// True when the spread of `xs` is indistinguishable from rounding noise: the standard deviation
/// is below 10⁻⁹ of the features' magnitude (identical x values leave an Sxx of a few ulps
/// because x̄ is rounded, so an exact-zero test would let a meaningless slope through).
fn is_zero_spread(xs: &[f64], sxx: f64) -> bool {
    let n = xs.len() as f64;
    let scale = xs.iter().fold(1.0_f64, |m, x| m.max(x.abs()));
    let tol = 1e-9 * scale;
    sxx.is_nan() || sxx <= n * tol * tol
}

fn mean(v: &[f64]) -> f64 {
    let n = v.len() as f64;
    v.iter().sum::<f64>() / n
}

fn centered_sum_sq(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let m = mean(v);
    v.iter().map(|x| (x - m) * (x - m)).sum()
}

fn sum_sq_resid(ys: &[f64], preds: &[f64]) -> f64 {
    ys.iter().zip(preds).map(|(y, p)| (y - p) * (y - p)).sum()
}

fn columns(samples: &[TelemetrySample]) -> (Vec<f64>, Vec<f64>) {
    samples.iter().map(|s| (s.feature(), s.pfi)).unzip()
}

fn distinct_clusters(samples: &[TelemetrySample]) -> Vec<&str> {
    samples
        .iter()
        .map(|s| s.cluster.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn check_finite(at: InputRef, field: &'static str, value: f64) -> Result<(), PredictorError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(PredictorError::NonFinite { at, field, value })
    }
}

fn validate_telemetry(at: InputRef, dram_active: f64, mem_copy_util_pct: f64) -> Result<(), PredictorError> {
    check_finite(at, "dram_active", dram_active)?;
    check_finite(at, "mem_copy_util_pct", mem_copy_util_pct)?;
    if !(0.0..=1.0).contains(&dram_active) {
        return Err(PredictorError::DramActiveOutOfRange { at, value: dram_active });
    }
    if !(0.0..=100.0).contains(&mem_copy_util_pct) {
        return Err(PredictorError::MemCopyOutOfRange {
            at,
            value: mem_copy_util_pct,
        });
    }
    Ok(())
}

fn validate_samples(samples: &[TelemetrySample], what: &'static str) -> Result<(), PredictorError> {
    for (i, s) in samples.iter().enumerate() {
        s.validate(i)?;
    }
    if samples.len() < MIN_SAMPLES {
        return Err(PredictorError::TooFewSamples {
            what,
            needed: MIN_SAMPLES,
            got: samples.len(),
        });
    }
    Ok(())
}

/// LOO by refitting on validated columns (n ≥ 3, so every fold has ≥ 2 points).
fn loo_predictions_checked(xs: &[f64], ys: &[f64]) -> Result<Vec<f64>, PredictorError> {
    let n = xs.len();
    let mut preds = Vec::with_capacity(n);
    let mut fx = Vec::with_capacity(n.saturating_sub(1));
    let mut fy = Vec::with_capacity(n.saturating_sub(1));
    for i in 0..n {
        fx.clear();
        fy.clear();
        for j in (0..n).filter(|&j| j != i) {
            fx.push(xs[j]);
            fy.push(ys[j]);
        }
        let line = ols(&fx, &fy).map_err(|d| d.into_error(&format!("leave-one-out fold without samples[{i}]")))?;
        preds.push(line.intercept + line.slope * xs[i]);
    }
    Ok(preds)
}

/// LOO through the hat matrix of the full fit: ŷ₍₋ᵢ₎ = yᵢ − eᵢ/(1 − hᵢᵢ) with
/// hᵢᵢ = 1/n + (xᵢ − x̄)²/Sxx. One fit instead of n; kept to cross-check the refit in tests.
#[cfg_attr(not(test), allow(dead_code))]
fn loo_predictions_hat(xs: &[f64], ys: &[f64]) -> Result<Vec<f64>, PredictorError> {
    let line = ols(xs, ys).map_err(|d| d.into_error("all samples"))?;
    let n = xs.len() as f64;
    xs.iter()
        .zip(ys)
        .enumerate()
        .map(|(i, (&x, &y))| {
            let h = 1.0 / n + (x - line.x_mean) * (x - line.x_mean) / line.sxx;
            let one_minus_h = 1.0 - h;
            // h = 1 exactly when every other point shares one x: that fold has no slope.
            if one_minus_h.is_nan() || one_minus_h <= 1e-12 {
                return Err(PredictorError::ZeroVariance {
                    context: format!("leave-one-out fold without samples[{i}]"),
                });
            }
            let e = y - (line.intercept + line.slope * x);
            Ok(y - e / one_minus_h)
        })
        .collect()
}

fn loco_predictions_checked(
    samples: &[TelemetrySample],
    xs: &[f64],
    ys: &[f64],
    clusters: &[&str],
) -> Result<Vec<f64>, PredictorError> {
    let mut preds = vec![0.0; samples.len()];
    for &held_out in clusters {
        let (fx, fy): (Vec<f64>, Vec<f64>) = samples
            .iter()
            .zip(xs.iter().zip(ys))
            .filter(|(s, _)| s.cluster != held_out)
            .map(|(_, (&x, &y))| (x, y))
            .unzip();
        let line = ols(&fx, &fy)
            .map_err(|d| d.into_error(&format!("leave-one-cluster-out fold without cluster {held_out:?}")))?;
        for (i, s) in samples.iter().enumerate() {
            if s.cluster == held_out {
                preds[i] = line.intercept + line.slope * xs[i];
            }
        }
    }
    Ok(preds)
}

/// 1-based ranks, ties sharing the average of the positions they span.
fn average_ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
    let mut ranks = vec![0.0; v.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && v[order[end]] == v[order[start]] {
            end += 1;
        }
        // Positions start+1 ..= end share the mean rank (start + 1 + end) / 2.
        let rank = (start + 1 + end) as f64 / 2.0;
        for &k in &order[start..end] {
            ranks[k] = rank;
        }
        start = end;
    }
    ranks
}

fn pearson(a: &[f64], b: &[f64]) -> Option<f64> {
    let (ma, mb) = (mean(a), mean(b));
    let mut sab = 0.0;
    let mut saa = 0.0;
    let mut sbb = 0.0;
    for (&x, &y) in a.iter().zip(b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    // Ranks are finite, so only a constant series (zero spread) is undefined.
    if saa <= 0.0 || sbb <= 0.0 {
        return None;
    }
    Some((sab / (saa * sbb).sqrt()).clamp(-1.0, 1.0))
}

/// Degrees of freedom beyond which Student's t is evaluated at this value.
///
/// The incomplete-beta continued fraction needs O(√df) terms near the centre of the distribution
/// and loses accuracy for astronomically large df, while the t distribution has long since become
/// the normal: a quantile at df = 10⁷ differs from the df → ∞ (normal) one by a relative
/// (z² + 1)/(4 · 10⁷), below 10⁻⁶ even for tail probabilities of 10⁻¹⁰.
pub const T_DF_CAP: f64 = 1e7;

/// P(T > t) for t ≥ 0: half of P(|T| > t) = I_x(df/2, 1/2) with x = df/(df + t²).
///
/// Both x and 1 − x = t²/(df + t²) are formed directly, so a small t (x near 1) loses nothing to
/// cancellation.
fn student_t_upper_tail(t: f64, df: f64) -> Option<f64> {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return None;
    }
    let df = df.min(T_DF_CAP);
    let t = t.abs();
    let t2 = t * t;
    if !t2.is_finite() {
        return Some(0.0);
    }
    let denom = df + t2;
    let x = df / denom;
    let y = t2 / denom;
    Some(0.5 * reg_inc_beta(0.5 * df, 0.5, x, y)?)
}

/// Regularized incomplete beta function I_x(a, b) for a, b > 0 and x in [0, 1], given both x and
/// y = 1 − x (computed by the caller without cancellation).
///
/// I_x(a, b) = x^a y^b / (a B(a, b)) · 1 / (1 + d₁/(1 + d₂/(1 + …))), with
/// d_{2m+1} = −(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)) and
/// d_{2m} = m (b − m) x / ((a + 2m − 1)(a + 2m)).
/// The fraction converges fast for x < (a + 1)/(a + b + 2); beyond that the symmetry
/// I_x(a, b) = 1 − I_y(b, a) is used.
fn reg_inc_beta(a: f64, b: f64, x: f64, y: f64) -> Option<f64> {
    if a.is_nan() || b.is_nan() || a <= 0.0 || b <= 0.0 {
        return None;
    }
    if x.is_nan() || y.is_nan() || x < 0.0 || y < 0.0 {
        return None;
    }
    if x == 0.0 {
        return Some(0.0);
    }
    if y == 0.0 {
        return Some(1.0);
    }
    // The fraction for I_x(a, b) converges fast when x < (a + 1)/(a + b + 2); tested on y when x
    // is near 1, since x has then lost its low digits to rounding.
    let direct = if x < 0.5 {
        x < (a + 1.0) / (a + b + 2.0)
    } else {
        y > (b + 1.0) / (a + b + 2.0)
    };
    if direct {
        inc_beta_by_fraction(a, b, x, y)
    } else {
        Some(1.0 - inc_beta_by_fraction(b, a, y, x)?)
    }
}

/// The continued-fraction branch of [`reg_inc_beta`] (no symmetry switch).
fn inc_beta_by_fraction(a: f64, b: f64, x: f64, y: f64) -> Option<f64> {
    let ln_prefix = a * ln_complement_aware(x, y) + b * ln_complement_aware(y, x) - ln_beta(a, b);
    let fraction = lentz_unit_fraction(|k| {
        let m = (k / 2) as f64;
        if k % 2 == 1 {
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0))
        } else {
            m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m))
        }
    })?;
    let value = ln_prefix.exp() / (a * fraction);
    value.is_finite().then_some(value.clamp(0.0, 1.0))
}

/// Evaluate g = 1 + d₁/(1 + d₂/(1 + d₃/(…))) by the modified Lentz method: the value is built
/// as a running product of ratios C_k·D_k of successive convergents, each kept away from zero,
/// and the iteration stops once a ratio is 1 to within a few ulps.
fn lentz_unit_fraction(d: impl Fn(u64) -> f64) -> Option<f64> {
    const FLOOR: f64 = 1e-300;
    const EPS: f64 = 1e-15;
    const MAX_TERMS: u64 = 200_000;
    let away_from_zero = |v: f64| if v.abs() < FLOOR { FLOOR } else { v };
    let mut g = 1.0_f64;
    let mut c = g;
    let mut dd = 0.0_f64;
    for k in 1..=MAX_TERMS {
        let dk = d(k);
        dd = 1.0 / away_from_zero(1.0 + dk * dd);
        c = away_from_zero(1.0 + dk / c);
        let ratio = c * dd;
        g *= ratio;
        if !g.is_finite() {
            return None;
        }
        if k >= 2 && (ratio - 1.0).abs() < EPS {
            return Some(g);
        }
    }
    None
}

/// ln B(a, b) = ln Γ(a) + ln Γ(b) − ln Γ(a + b).
///
/// For a large argument (a Student-t with many degrees of freedom has a = df/2) the two big
/// ln Γ terms nearly cancel, so their difference is taken analytically from Stirling's formula
/// instead of subtracting two huge numbers.
fn ln_beta(a: f64, b: f64) -> f64 {
    let (small, big) = if a <= b { (a, b) } else { (b, a) };
    if big < STIRLING_MIN {
        return ln_gamma(a) + ln_gamma(b) - ln_gamma(a + b);
    }
    ln_gamma(small) + ln_gamma_ratio(big, small)
}

/// ln Γ(z) for z > 0: shift z up to ≥ 10 with Γ(z + 1) = z Γ(z), then Stirling's formula
/// ln Γ(z) = (z − ½) ln z − z + ½ ln 2π + S(z) (see [`stirling_series`]).
fn ln_gamma(z: f64) -> f64 {
    let mut z = z;
    let mut shift = 0.0;
    while z < STIRLING_MIN {
        shift += z.ln();
        z += 1.0;
    }
    (z - 0.5) * z.ln() - z + 0.5 * (2.0 * std::f64::consts::PI).ln() + stirling_series(z) - shift
}

/// ln Γ(a) − ln Γ(a + b) for a ≥ 10 and b > 0, without cancellation: from Stirling's formula,
/// (a − ½)(ln a − ln(a + b)) − b ln(a + b) + b + S(a) − S(a + b), with
/// ln a − ln(a + b) = −ln(1 + b/a).
fn ln_gamma_ratio(a: f64, b: f64) -> f64 {
    -(a - 0.5) * (b / a).ln_1p() - b * (a + b).ln() + b + stirling_series(a) - stirling_series(a + b)
}

/// Smallest argument at which [`stirling_series`] is used directly.
const STIRLING_MIN: f64 = 10.0;

/// S(z) = 1/(12z) − 1/(360z³) + 1/(1260z⁵) − 1/(1680z⁷), the correction term of Stirling's
/// formula; the first omitted term, 1/(1188z⁹), is below 10⁻¹² for z ≥ 10.
fn stirling_series(z: f64) -> f64 {
    let inv = 1.0 / z;
    let inv2 = inv * inv;
    inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 * (1.0 / 1680.0))))
}

/// ln x given both x and y = 1 − x: near 1, ln(1 − y) from the accurate y keeps the digits
/// that x itself has lost to rounding.
fn ln_complement_aware(x: f64, y: f64) -> f64 {
    if x < 0.5 { x.ln() } else { (-y).ln_1p() }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn uncapped_run_means_average_refuse_bad_readings_and_wait_for_enough_samples() {
        let model = PfiPredictor::fit(&hand_data()).unwrap();
        let mut run = UncappedRunMeans::default();
        assert_eq!(run.means(), None);
        run.observe(0.4, 30.0).unwrap();
        run.observe(0.6, 50.0).unwrap();
        for (dram, copy) in [(f64::NAN, 10.0), (1.5, 10.0), (0.5, -1.0), (0.5, f64::INFINITY)] {
            assert!(run.observe(dram, copy).is_err(), "({dram}, {copy}) refused");
        }
        assert_eq!(run.samples(), 2, "refused readings change nothing");
        let (dram, copy) = run.means().unwrap();
        assert!((dram - 0.5).abs() < 1e-12 && (copy - 40.0).abs() < 1e-12);
        assert_eq!(run.predict(&model, 3), None, "too few readings");
        let p = run.predict(&model, 2).unwrap();
        assert_eq!(p, model.predict(0.5, 40.0).unwrap());
    }

    fn sample(pfi: f64, dram_active: f64, mem_copy_util_pct: f64, cluster: &str) -> TelemetrySample {
        TelemetrySample {
            pfi,
            dram_active,
            mem_copy_util_pct,
            cluster: cluster.to_owned(),
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// x = 0.5 × (2, 4, 6, 8) = (1, 2, 3, 4) exactly; y = (1, 3, 2, 4).
    ///
    /// By hand: x̄ = ȳ = 2.5; Sxx = 2.25 + 0.25 + 0.25 + 2.25 = 5;
    /// Sxy = (−1.5)(−1.5) + (−0.5)(0.5) + (0.5)(−0.5) + (1.5)(1.5) = 4;
    /// b = 4/5 = 0.8, a = 2.5 − 0.8 · 2.5 = 0.5; fitted (1.3, 2.1, 2.9, 3.7);
    /// residuals (−0.3, 0.9, −0.9, 0.3), SSE = 1.8; SST = 5; R² = 1 − 1.8/5 = 0.64;
    /// s = √(1.8/2) = √0.9.
    /// LOO: hᵢᵢ = 1/4 + (xᵢ − 2.5)²/5 = (0.7, 0.3, 0.3, 0.7); LOO residuals eᵢ/(1 − hᵢᵢ) =
    /// (−1, 9/7, −9/7, 1); PRESS = 2 + 2 · 81/49 = 260/49; LOO R² = 1 − 52/49 = −3/49.
    fn hand_data() -> Vec<TelemetrySample> {
        vec![
            sample(1.0, 0.5, 2.0, "A"),
            sample(3.0, 0.5, 4.0, "A"),
            sample(2.0, 0.5, 6.0, "B"),
            sample(4.0, 0.5, 8.0, "B"),
        ]
    }

    #[test]
    fn ols_matches_hand_computation() {
        let data = hand_data();
        let m = PfiPredictor::fit(&data).unwrap();
        assert!(close(m.slope(), 0.8, 1e-12));
        assert!(close(m.intercept(), 0.5, 1e-12));
        assert!(close(m.residual_sd(), 0.9_f64.sqrt(), 1e-12));
        assert!(close(m.x_mean(), 2.5, 1e-12));
        assert!(close(m.sxx(), 5.0, 1e-12));
        assert_eq!(m.n(), 4);

        let r = evaluate(&data).unwrap();
        assert!(close(r.in_sample_r2, 0.64, 1e-12));
        assert!(close(r.loo_r2, -3.0 / 49.0, 1e-12));
        assert!(close(r.loo_rmse, (260.0_f64 / 49.0 / 4.0).sqrt(), 1e-12));
        let expected_loo = [2.0, 12.0 / 7.0, 23.0 / 7.0, 3.0];
        for (p, e) in r.loo_predictions.iter().zip(expected_loo) {
            assert!(close(*p, e, 1e-12), "{p} vs {e}");
        }
        assert_eq!(r.clusters, vec!["A".to_owned(), "B".to_owned()]);
        // LOCO: fit on B = {(3,2),(4,4)} → y = 2x − 4, predicts A at x = 1, 2: (−2, 0);
        // fit on A = {(1,1),(2,3)} → y = 2x − 1, predicts B at x = 3, 4: (5, 7).
        // Residuals (3, 3, −3, −3): Σ = 36; R² = 1 − 36/5 = −6.2.
        assert!(close(r.loco_r2.unwrap(), -6.2, 1e-12));
    }

    #[test]
    fn perfect_line_has_unit_r2_and_zero_loo_error() {
        let data: Vec<_> = (0..6)
            .map(|i| {
                let mem = 10.0 * f64::from(i) + 5.0;
                let x = 0.8 * mem;
                sample(1.1 + 0.02 * x, 0.8, mem, if i % 2 == 0 { "a" } else { "b" })
            })
            .collect();
        let r = evaluate(&data).unwrap();
        assert!(close(r.in_sample_r2, 1.0, 1e-12));
        assert!(close(r.loo_r2, 1.0, 1e-12));
        assert!(r.loo_rmse < 1e-12);
        assert!(close(r.loco_r2.unwrap(), 1.0, 1e-12));
        assert!(close(r.spearman_rho.unwrap(), 1.0, 1e-12));
        let m = PfiPredictor::fit(&data).unwrap();
        let p = m.predict(0.5, 40.0).unwrap();
        assert!(close(p.mean, 1.1 + 0.02 * 20.0, 1e-12));
        assert!(p.sd < 1e-9);
        let (lo, hi) = p.interval(0.95);
        assert!(hi - lo < 1e-8);
    }

    #[test]
    fn hat_matrix_shortcut_equals_refit() {
        for data in [hand_data(), synthetic_25()] {
            let (xs, ys) = columns(&data);
            let refit = loo_predictions(&data).unwrap();
            let hat = loo_predictions_hat(&xs, &ys).unwrap();
            assert_eq!(refit.len(), hat.len());
            for (a, b) in refit.iter().zip(&hat) {
                assert!(close(*a, *b, 1e-10), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn hat_matrix_shortcut_reports_degenerate_fold() {
        // Without samples[2] every x equals 1: the refit and the shortcut both refuse.
        let data = vec![
            sample(1.0, 0.5, 2.0, "a"),
            sample(1.5, 0.5, 2.0, "a"),
            sample(2.0, 0.5, 8.0, "b"),
        ];
        let (xs, ys) = columns(&data);
        let context = "leave-one-out fold without samples[2]".to_owned();
        let expected = PredictorError::ZeroVariance { context };
        assert_eq!(loo_predictions(&data), Err(expected.clone()));
        assert_eq!(loo_predictions_hat(&xs, &ys), Err(expected.clone()));
        assert_eq!(evaluate(&data), Err(expected));
    }

    #[test]
    fn spearman_with_ties_matches_hand_example() {
        // ranks(a) = (1, 2.5, 2.5, 4), ranks(b) = (1, 3, 2, 4); centred: (−1.5, 0, 0, 1.5) and
        // (−1.5, 0.5, −0.5, 1.5); Σ products = 4.5, Σ squares 4.5 and 5 → ρ = 4.5/√22.5 = √0.9.
        let a = [1.0, 2.0, 2.0, 3.0];
        let b = [10.0, 30.0, 20.0, 40.0];
        assert_eq!(average_ranks(&a), vec![1.0, 2.5, 2.5, 4.0]);
        assert!(close(spearman_rho(&a, &b).unwrap(), 0.9_f64.sqrt(), 1e-12));
        // Monotone but non-linear → exactly 1; reversed → −1.
        let c = [1.0, 4.0, 9.0, 16.0];
        assert!(close(spearman_rho(&[1.0, 2.0, 3.0, 4.0], &c).unwrap(), 1.0, 1e-12));
        assert!(close(spearman_rho(&[4.0, 3.0, 2.0, 1.0], &c).unwrap(), -1.0, 1e-12));
        // Undefined cases.
        assert_eq!(spearman_rho(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(spearman_rho(&[1.0, 2.0], &[1.0]), None);
        assert_eq!(spearman_rho(&[], &[]), None);
        assert_eq!(spearman_rho(&[1.0, f64::NAN], &[1.0, 2.0]), None);
    }

    #[test]
    fn prediction_interval_widens_away_from_mean_feature() {
        let m = PfiPredictor::fit(&hand_data()).unwrap();
        // x̄ = 2.5 = 0.5 × 5.
        let at_mean = m.predict(0.5, 5.0).unwrap();
        assert!(close(at_mean.feature, 2.5, 1e-12));
        assert!(close(at_mean.mean, 2.5, 1e-12));
        // s · √(1 + 1/4 + 0) = √0.9 · √1.25.
        assert!(close(at_mean.sd, (0.9_f64 * 1.25).sqrt(), 1e-12));
        assert_eq!(at_mean.df, 2);
        let (lo, hi) = at_mean.interval(0.95);
        let t = 4.302_652_729_7; // t_{0.975, 2}
        assert!(close(hi - at_mean.mean, t * at_mean.sd, 1e-6));
        assert!(close(at_mean.mean - lo, t * at_mean.sd, 1e-6));

        let mut last_width = hi - lo;
        for mem in [8.0, 12.0, 20.0, 40.0] {
            let p = m.predict(0.5, mem).unwrap();
            let (lo, hi) = p.interval(0.95);
            assert!(hi - lo > last_width, "width must grow with |x − x̄|");
            last_width = hi - lo;
        }
        // Symmetric in x around x̄.
        let left = m.predict(0.5, 3.0).unwrap();
        let right = m.predict(0.5, 7.0).unwrap();
        assert!(close(left.sd, right.sd, 1e-12));
        // Higher confidence, wider interval; degenerate levels are total.
        let (l90, h90) = at_mean.interval(0.90);
        assert!(h90 - l90 < hi - lo);
        assert_eq!(at_mean.interval(0.0), (at_mean.mean, at_mean.mean));
        assert_eq!(at_mean.interval(1.0), (f64::NEG_INFINITY, f64::INFINITY));
        assert_eq!(at_mean.interval(f64::NAN), (f64::NEG_INFINITY, f64::INFINITY));
    }

    #[test]
    fn student_t_quantiles_match_tables() {
        let cases = [
            (0.975, 1.0, 12.706_204_736),
            (0.975, 2.0, 4.302_652_730),
            (0.975, 10.0, 2.228_138_852),
            (0.975, 23.0, 2.068_657_610),
            (0.95, 5.0, 2.015_048_373),
            (0.995, 3.0, 5.840_909_310),
            (0.9995, 1.0, 636.619_248_8),
        ];
        for (p, df, expected) in cases {
            let t = student_t_quantile(p, df).unwrap();
            assert!(close(t, expected, 1e-6 * expected.max(1.0)), "t({p}, {df}) = {t}");
            let lower = student_t_quantile(1.0 - p, df).unwrap();
            assert!(close(lower, -expected, 1e-6 * expected.max(1.0)));
        }
        // Large df tends to the normal quantile 1.959964 (t = z + z(1 + z²)/(4 df) + …).
        let big = student_t_quantile(0.975, 1e6).unwrap();
        assert!(close(big, 1.959_966_357, 1e-8), "{big}");
        for df in [1e7, 1e9, 1e20, 1e300, f64::INFINITY] {
            let t = student_t_quantile(0.975, df).unwrap();
            assert!(close(t, 1.959_963_985, 1e-6), "df {df}: {t}");
            let tail = student_t_quantile(1e-10, df).unwrap();
            assert!(close(tail, -6.361_340_902, 1e-5), "df {df}: {tail}");
        }
        // Small df: heavy tails, still finite and symmetric.
        let tiny = student_t_quantile(0.975, 0.5).unwrap();
        assert!(tiny > 100.0 && tiny.is_finite());
        assert!(close(student_t_cdf(tiny, 0.5).unwrap(), 0.975, 1e-9));
        assert_eq!(student_t_quantile(0.5, 7.0), Some(0.0));
        for (p, df) in [
            (0.0, 5.0),
            (1.0, 5.0),
            (f64::NAN, 5.0),
            (0.9, 0.0),
            (0.9, -3.0),
            (0.9, f64::NAN),
        ] {
            assert_eq!(student_t_quantile(p, df), None);
        }
    }

    #[test]
    fn student_t_cdf_matches_closed_forms() {
        // df = 1 is Cauchy: F(t) = ½ + atan(t)/π. df = 2: F(t) = ½ + t / (2√(2 + t²)).
        for t in [-30.0, -2.0, -0.3, 0.0, 1e-8, 0.7, 1.0, 5.0, 1e6] {
            let cauchy = 0.5 + f64::atan(t) / std::f64::consts::PI;
            assert!(close(student_t_cdf(t, 1.0).unwrap(), cauchy, 1e-12), "df 1, t {t}");
            let two = 0.5 + t / (2.0 * (2.0 + t * t).sqrt());
            assert!(close(student_t_cdf(t, 2.0).unwrap(), two, 1e-12), "df 2, t {t}");
        }
        assert_eq!(student_t_cdf(f64::INFINITY, 3.0), Some(1.0));
        assert_eq!(student_t_cdf(f64::NEG_INFINITY, 3.0), Some(0.0));
        assert_eq!(student_t_cdf(f64::NAN, 3.0), None);
    }

    #[test]
    fn ln_gamma_matches_known_values() {
        assert!(close(ln_gamma(1.0), 0.0, 1e-12));
        assert!(close(ln_gamma(0.5), std::f64::consts::PI.sqrt().ln(), 1e-12));
        assert!(close(ln_gamma(5.0), 24.0_f64.ln(), 1e-12));
        assert!(close(ln_gamma(30.0), 71.257_038_967_168_01, 1e-10));
        // The cancellation-free large-argument ln B agrees with the plain difference where the
        // latter is still accurate.
        for (a, b) in [(12.0, 0.5), (50.0, 0.5), (500.0, 3.0), (10.0, 10.0)] {
            let plain = ln_gamma(a) + ln_gamma(b) - ln_gamma(a + b);
            assert!(close(ln_beta(a, b), plain, 1e-10), "B({a}, {b})");
            assert!(close(ln_beta(b, a), plain, 1e-10), "B({b}, {a})");
        }
    }

    #[test]
    fn validation_errors_name_the_sample_and_field() {
        let good = hand_data();
        let with = |i: usize, f: &dyn Fn(&mut TelemetrySample)| {
            let mut d = good.clone();
            f(&mut d[i]);
            d
        };

        let e = PfiPredictor::fit(&with(2, &|s| s.pfi = f64::NAN)).unwrap_err();
        assert!(matches!(
            e,
            PredictorError::NonFinite {
                at: InputRef::Sample(2),
                field: "pfi",
                ..
            }
        ));
        assert!(e.to_string().contains("samples[2].pfi"), "{e}");

        let e = PfiPredictor::fit(&with(1, &|s| s.dram_active = f64::INFINITY)).unwrap_err();
        assert!(matches!(
            e,
            PredictorError::NonFinite {
                at: InputRef::Sample(1),
                field: "dram_active",
                ..
            }
        ));

        let e = PfiPredictor::fit(&with(3, &|s| s.mem_copy_util_pct = f64::NAN)).unwrap_err();
        assert!(matches!(
            e,
            PredictorError::NonFinite {
                at: InputRef::Sample(3),
                field: "mem_copy_util_pct",
                ..
            }
        ));

        let e = PfiPredictor::fit(&with(0, &|s| s.dram_active = 45.0)).unwrap_err();
        assert_eq!(
            e,
            PredictorError::DramActiveOutOfRange {
                at: InputRef::Sample(0),
                value: 45.0
            }
        );
        assert!(e.to_string().contains("samples[0].dram_active"), "{e}");

        let e = evaluate(&with(0, &|s| s.dram_active = -0.1)).unwrap_err();
        assert!(matches!(e, PredictorError::DramActiveOutOfRange { .. }));

        let e = loo_predictions(&with(1, &|s| s.mem_copy_util_pct = 100.5)).unwrap_err();
        assert_eq!(
            e,
            PredictorError::MemCopyOutOfRange {
                at: InputRef::Sample(1),
                value: 100.5
            }
        );
        assert!(e.to_string().contains("samples[1].mem_copy_util_pct"), "{e}");

        let e = loco_predictions(&with(3, &|s| s.pfi = 0.0)).unwrap_err();
        assert_eq!(e, PredictorError::NonPositivePfi { index: 3, value: 0.0 });
        let e = PfiPredictor::fit(&with(2, &|s| s.pfi = -1.2)).unwrap_err();
        assert!(matches!(e, PredictorError::NonPositivePfi { index: 2, .. }));
        assert!(e.to_string().contains("samples[2].pfi"), "{e}");
    }

    #[test]
    fn too_few_samples_is_an_error() {
        let two = &hand_data()[..2];
        for data in [&[][..], &hand_data()[..1], two] {
            assert!(matches!(
                PfiPredictor::fit(data),
                Err(PredictorError::TooFewSamples { needed: 3, .. })
            ));
            assert!(matches!(
                evaluate(data),
                Err(PredictorError::TooFewSamples { needed: 3, .. })
            ));
            assert!(matches!(
                loo_predictions(data),
                Err(PredictorError::TooFewSamples { needed: 3, .. })
            ));
            assert!(matches!(
                loco_predictions(data),
                Err(PredictorError::TooFewSamples { .. })
            ));
        }
    }

    #[test]
    fn zero_feature_variance_is_an_error() {
        // Same product 12 from different factors: 0.3 × 40, 0.4 × 30, 0.6 × 20 (up to rounding).
        let data = vec![
            sample(1.2, 0.3, 40.0, "a"),
            sample(1.6, 0.4, 30.0, "b"),
            sample(2.0, 0.6, 20.0, "c"),
        ];
        let e = PfiPredictor::fit(&data).unwrap_err();
        assert_eq!(
            e,
            PredictorError::ZeroVariance {
                context: "all samples".to_owned()
            }
        );
        assert!(matches!(evaluate(&data), Err(PredictorError::ZeroVariance { .. })));
        // All-zero feature.
        let zeros = vec![
            sample(1.2, 0.0, 40.0, "a"),
            sample(1.6, 0.4, 0.0, "b"),
            sample(2.0, 0.0, 0.0, "c"),
        ];
        assert!(matches!(
            PfiPredictor::fit(&zeros),
            Err(PredictorError::ZeroVariance { .. })
        ));
    }

    #[test]
    fn constant_pfi_is_an_error_for_evaluate_only() {
        let data: Vec<_> = hand_data()
            .into_iter()
            .map(|mut s| {
                s.pfi = 1.3;
                s
            })
            .collect();
        let m = PfiPredictor::fit(&data).unwrap();
        assert!(close(m.slope(), 0.0, 1e-12));
        assert_eq!(evaluate(&data), Err(PredictorError::ConstantPfi { n: 4 }));
    }

    #[test]
    fn cluster_errors() {
        let single: Vec<_> = hand_data()
            .into_iter()
            .map(|mut s| {
                s.cluster = "only".to_owned();
                s
            })
            .collect();
        assert_eq!(
            loco_predictions(&single),
            Err(PredictorError::TooFewClusters { got: 1 })
        );
        let r = evaluate(&single).unwrap();
        assert_eq!(r.loco_r2, None);
        assert_eq!(r.clusters, vec!["only".to_owned()]);

        // Holding out "big" leaves one training point.
        let small_fold = vec![
            sample(1.0, 0.5, 2.0, "big"),
            sample(2.0, 0.5, 4.0, "big"),
            sample(3.0, 0.5, 6.0, "lone"),
        ];
        let expected = PredictorError::FoldTooSmall {
            fold: "leave-one-cluster-out fold without cluster \"big\"".to_owned(),
            got: 1,
            needed: 2,
        };
        assert_eq!(loco_predictions(&small_fold), Err(expected.clone()));
        assert_eq!(evaluate(&small_fold), Err(expected));

        // Holding out "spread" leaves two points with the same x.
        let flat_fold = vec![
            sample(1.0, 0.5, 2.0, "spread"),
            sample(2.0, 0.5, 8.0, "spread"),
            sample(3.0, 0.5, 4.0, "flat"),
            sample(3.5, 0.5, 4.0, "flat2"),
        ];
        assert_eq!(
            loco_predictions(&flat_fold),
            Err(PredictorError::ZeroVariance {
                context: "leave-one-cluster-out fold without cluster \"spread\"".to_owned()
            })
        );
    }

    #[test]
    fn predict_validates_its_inputs() {
        let m = PfiPredictor::fit(&hand_data()).unwrap();
        assert!(matches!(
            m.predict(f64::NAN, 10.0),
            Err(PredictorError::NonFinite {
                at: InputRef::Query,
                field: "dram_active",
                ..
            })
        ));
        assert!(matches!(
            m.predict(0.5, f64::NEG_INFINITY),
            Err(PredictorError::NonFinite {
                at: InputRef::Query,
                field: "mem_copy_util_pct",
                ..
            })
        ));
        assert_eq!(
            m.predict(1.5, 10.0),
            Err(PredictorError::DramActiveOutOfRange {
                at: InputRef::Query,
                value: 1.5
            })
        );
        assert_eq!(
            m.predict(0.5, -1.0),
            Err(PredictorError::MemCopyOutOfRange {
                at: InputRef::Query,
                value: -1.0
            })
        );
        assert!(m.predict_feature(f64::NAN).is_err());
        assert_eq!(
            m.predict_feature(100.5),
            Err(PredictorError::FeatureOutOfRange { value: 100.5 })
        );
        let p = m.predict_feature(2.5).unwrap();
        assert_eq!(Ok(p), m.predict(0.5, 5.0));
        let msg = m.predict(1.5, 10.0).unwrap_err().to_string();
        assert!(msg.contains("query.dram_active"), "{msg}");
    }

    #[test]
    fn report_and_prediction_serialize_to_json() {
        let r = evaluate(&hand_data()).unwrap();
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("loo_r2").is_some());
        assert!(json.get("loco_r2").is_some());
        let p = PfiPredictor::fit(&hand_data()).unwrap().predict(0.5, 5.0).unwrap();
        let back: PfiPrediction = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
        let s = sample(1.2, 0.3, 40.0, "x");
        let back: TelemetrySample = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    /// A tiny deterministic linear congruential generator (Knuth's MMIX constants), uniform in
    /// [0, 1) from the top 53 bits.
    struct Lcg(u64);

    impl Lcg {
        fn next_f64(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let v = (self.0 >> 11) as f64;
            v / (1u64 << 53) as f64
        }
        fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (hi - lo) * self.next_f64()
        }
    }

    /// 25 samples shaped like the paper's H200 set: the published per-group PFIs and their
    /// architecture × task clusters (8 clusters), with synthetic telemetry in which each job type
    /// has its own typical memory activity (MoE fine-tuning most memory-bound, dense least) plus
    /// per-job jitter that is unrelated to PFI. The PFI–feature link therefore runs only
    /// *between* clusters, as the paper found. MoE pretraining moves nearly as much memory as
    /// MoE fine-tuning but is only moderately flexible, so its five-job cluster sits below the
    /// line with high leverage: LOO keeps it in training and is forgiving, LOCO holds it out and
    /// is not. (With this seed: in-sample R² ≈ 0.47, LOO ≈ 0.32, LOCO ≈ 0.05; the LOO ≥ LOCO
    /// ordering held for 200 of 200 other seeds tried during development.)
    fn synthetic_25() -> Vec<TelemetrySample> {
        // (cluster, PFI) from lab/data/pfi_groups_h200.csv.
        let groups: [(&str, f64); 25] = [
            ("Llama-3.1-70B/dense_ft", 1.10),
            ("Llama-3.1-70B/dense_ft", 1.22),
            ("Llama-3.1-70B/dense_ft", 1.27),
            ("Qwen3-32B/dense_ft", 1.52),
            ("Llama-3.1-70B/dense_pt", 1.17),
            ("Llama-3.1-70B/dense_pt", 1.26),
            ("Llama-3.1-70B/dense_pt", 1.34),
            ("Qwen3-32B/dense_pt", 1.23),
            ("Qwen3-32B/dense_pt", 1.25),
            ("Qwen3-32B/dense_pt", 1.27),
            ("Qwen3-32B/dense_pt", 1.30),
            ("Qwen3-32B/dense_pt", 1.30),
            ("Qwen3-32B/dense_pt", 1.51),
            ("Qwen3-32B/dense_pt", 1.47),
            ("gpt-oss-20b/moe_ft", 1.79),
            ("gpt-oss-20b/moe_ft", 2.67),
            ("Qwen3-30B-A3B/moe_ft", 2.00),
            ("Qwen3-30B-A3B/moe_ft", 2.20),
            ("gpt-oss-20b/moe_pt", 1.24),
            ("gpt-oss-20b/moe_pt", 1.35),
            ("gpt-oss-20b/moe_pt", 1.43),
            ("gpt-oss-20b/moe_pt", 1.45),
            ("gpt-oss-20b/moe_pt", 1.57),
            ("Qwen3-30B-A3B/moe_pt", 1.36),
            ("Qwen3-30B-A3B/moe_pt", 1.52),
        ];
        let mut rng = Lcg(0x5eed_f1e7_2026);
        groups
            .iter()
            .map(|&(cluster, pfi)| {
                // Per-type telemetry centres (DRAM active fraction, mem-copy %): MoE
                // fine-tuning most memory-bound, dense jobs least.
                let (dram_c, mem_c) = match cluster {
                    "Llama-3.1-70B/dense_ft" => (0.22, 18.0),
                    "Qwen3-32B/dense_ft" => (0.30, 24.0),
                    "Llama-3.1-70B/dense_pt" => (0.25, 20.0),
                    "Qwen3-32B/dense_pt" => (0.28, 22.0),
                    "gpt-oss-20b/moe_ft" => (0.55, 45.0),
                    "Qwen3-30B-A3B/moe_ft" => (0.52, 42.0),
                    "gpt-oss-20b/moe_pt" => (0.50, 38.0),
                    _ => (0.45, 34.0),
                };
                // Job-level jitter unrelated to PFI: inside a type the feature says nothing.
                let dram = (dram_c + rng.uniform(-0.06, 0.06)).clamp(0.0, 1.0);
                let mem = (mem_c + rng.uniform(-6.0, 6.0)).clamp(0.0, 100.0);
                sample(pfi, dram, mem, cluster)
            })
            .collect()
    }

    #[test]
    fn synthetic_25_sample_set_orders_in_sample_loo_loco() {
        let data = synthetic_25();
        assert_eq!(data.len(), 25);
        let r = evaluate(&data).unwrap();
        assert_eq!(r.clusters.len(), 8);
        let loco = r.loco_r2.unwrap();
        // In-sample ≥ LOO holds for every data set (PRESS ≥ SSE since 0 < 1 − hᵢᵢ ≤ 1); LOO ≥ LOCO
        // holds for this one because the signal is mostly between job types.
        assert!(r.in_sample_r2 >= r.loo_r2, "{r:?}");
        assert!(r.loo_r2 >= loco, "{r:?}");
        // The feature carries real signal here: positive slope and a positive LOO R².
        assert!(r.slope > 0.0, "{r:?}");
        assert!(r.loo_r2 > 0.0, "{r:?}");
        assert!(r.spearman_rho.unwrap() > 0.0, "{r:?}");
        // LOO RMSE is consistent with the LOO R²: PRESS = (1 − R²_loo) · SST.
        let (_, ys) = columns(&data);
        let sst = centered_sum_sq(&ys);
        assert!(close(r.loo_rmse.powi(2) * 25.0, (1.0 - r.loo_r2) * sst, 1e-10));
        // A prediction at the training mean: df = 23 and a 95 % interval of ±2.069 sd.
        let m = PfiPredictor::fit(&data).unwrap();
        let p = m.predict_feature(m.x_mean()).unwrap();
        assert_eq!(p.df, 23);
        let (lo, hi) = p.interval(0.95);
        assert!(close((hi - lo) / (2.0 * p.sd), 2.068_657_610, 1e-6));
    }

    #[test]
    fn no_panics_on_hostile_input() {
        let weird = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0, 1e-300, 1e300];
        let m = PfiPredictor::fit(&hand_data()).unwrap();
        for &a in &weird {
            for &b in &weird {
                let _ = m.predict(a, b);
                let _ = m.predict_feature(a);
                let _ = student_t_quantile(a, b);
                let _ = student_t_cdf(a, b);
                let _ = spearman_rho(&[a, b, 1.0], &[b, a, 2.0]);
                let data = vec![
                    sample(a, 0.5, 2.0, "x"),
                    sample(1.0, b.clamp(0.0, 1.0), 4.0, "y"),
                    sample(2.0, 0.5, b, "y"),
                ];
                let _ = evaluate(&data);
                if let Ok(p) = m.predict_feature(2.0) {
                    let _ = p.interval(a);
                }
            }
        }
    }
}
