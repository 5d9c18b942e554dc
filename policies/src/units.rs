//! Physical units as newtypes.
//!
//! The single most expensive bug in a power-capping system is mixing up a per-GPU figure with a
//! per-job or per-fleet figure (a 500 W cap is not a 500 W job budget). Every quantity that
//! crosses a function boundary therefore carries its unit in its type:
//!
//! - [`WattsPerGpu`]: a per-GPU cap or per-GPU draw (what NVML sets and reads);
//! - [`Watts`]: aggregate GPU-board power of a job, a cluster or a fleet;
//! - [`Kilowatts`]: facility-side power at the utility meter;
//! - [`TokensPerSec`]: training throughput of a job;
//! - [`Fraction`]: a dimensionless share in `[0, 1]` (a cut, a slowdown).
//!
//! Conversions between per-GPU and aggregate power are explicit and need the GPU count.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, Sub, SubAssign};

macro_rules! scalar_unit {
    ($(#[$doc:meta])* $name:ident, $suffix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub f64);

        impl $name {
            /// The zero quantity.
            pub const ZERO: Self = Self(0.0);

            /// The raw number, for formatting and for arithmetic the type system cannot express.
            #[must_use]
            pub const fn value(self) -> f64 {
                self.0
            }

            /// Larger of two quantities (NaN-free inputs assumed; see [`crate::curve`] validation).
            #[must_use]
            pub fn max(self, other: Self) -> Self {
                Self(self.0.max(other.0))
            }

            /// Smaller of two quantities.
            #[must_use]
            pub fn min(self, other: Self) -> Self {
                Self(self.0.min(other.0))
            }

            /// Clamp into `[lo, hi]`; `lo` wins if the range is inverted, which keeps floors hard.
            #[must_use]
            pub fn clamp_to(self, lo: Self, hi: Self) -> Self {
                Self(self.0.min(hi.0).max(lo.0))
            }

            /// True when the number is finite (not NaN, not infinite).
            #[must_use]
            pub fn is_finite(self) -> bool {
                self.0.is_finite()
            }
        }

        impl Add for $name {
            type Output = Self;
            fn add(self, rhs: Self) -> Self {
                Self(self.0 + rhs.0)
            }
        }
        impl Sub for $name {
            type Output = Self;
            fn sub(self, rhs: Self) -> Self {
                Self(self.0 - rhs.0)
            }
        }
        impl AddAssign for $name {
            fn add_assign(&mut self, rhs: Self) {
                self.0 += rhs.0;
            }
        }
        impl SubAssign for $name {
            fn sub_assign(&mut self, rhs: Self) {
                self.0 -= rhs.0;
            }
        }
        impl Mul<f64> for $name {
            type Output = Self;
            fn mul(self, rhs: f64) -> Self {
                Self(self.0 * rhs)
            }
        }
        /// Ratio of two quantities of the same unit is dimensionless.
        impl Div for $name {
            type Output = f64;
            fn div(self, rhs: Self) -> f64 {
                self.0 / rhs.0
            }
        }
        impl Sum for $name {
            fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
                Self(iter.map(|x| x.0).sum())
            }
        }
        impl<'a> Sum<&'a $name> for $name {
            fn sum<I: Iterator<Item = &'a Self>>(iter: I) -> Self {
                Self(iter.map(|x| x.0).sum())
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match f.precision() {
                    Some(p) => write!(f, "{:.*} {}", p, self.0, $suffix),
                    None => write!(f, "{} {}", self.0, $suffix),
                }
            }
        }
    };
}

scalar_unit!(
    /// Aggregate GPU-board power (a job's or a fleet's sum over its GPUs), in watts.
    Watts,
    "W"
);
scalar_unit!(
    /// Power of one GPU (a cap, a limit, or a per-GPU draw), in watts.
    WattsPerGpu,
    "W/GPU"
);
scalar_unit!(
    /// Facility power at the utility meter, in kilowatts.
    Kilowatts,
    "kW"
);
scalar_unit!(
    /// Training throughput of a job, in tokens per second.
    TokensPerSec,
    "tok/s"
);

impl WattsPerGpu {
    /// Aggregate power of `gpus` GPUs each at this per-GPU power.
    #[must_use]
    pub fn times_gpus(self, gpus: u32) -> Watts {
        Watts(self.0 * f64::from(gpus))
    }
}

impl Watts {
    /// The per-GPU share of this aggregate, when spread evenly over `gpus` GPUs.
    ///
    /// A job with zero GPUs has no per-GPU power; returns zero rather than dividing by zero.
    #[must_use]
    pub fn per_gpu(self, gpus: u32) -> WattsPerGpu {
        if gpus == 0 {
            WattsPerGpu::ZERO
        } else {
            WattsPerGpu(self.0 / f64::from(gpus))
        }
    }

    /// The same power in kilowatts.
    #[must_use]
    pub fn to_kilowatts(self) -> Kilowatts {
        Kilowatts(self.0 / 1000.0)
    }
}

impl Kilowatts {
    /// The same power in watts (aggregate).
    #[must_use]
    pub fn to_watts(self) -> Watts {
        Watts(self.0 * 1000.0)
    }
}

/// A dimensionless share in `[0, 1]`: a cut of fleet power, a job's maximum slowdown.
///
/// Construction validates the range so a `Fraction` in hand is always meaningful.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Fraction(f64);

/// A number that cannot be a [`Fraction`].
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("{0} is not a fraction: expected a finite number in [0, 1]")]
pub struct FractionOutOfRange(pub f64);

impl Fraction {
    /// Nothing.
    pub const ZERO: Self = Self(0.0);
    /// Everything.
    pub const ONE: Self = Self(1.0);

    /// Validate `value` as a fraction in `[0, 1]`.
    pub fn new(value: f64) -> Result<Self, FractionOutOfRange> {
        if value.is_finite() && (0.0..=1.0).contains(&value) {
            Ok(Self(value))
        } else {
            Err(FractionOutOfRange(value))
        }
    }

    /// The share as a plain number in `[0, 1]`.
    #[must_use]
    pub const fn value(self) -> f64 {
        self.0
    }

    /// `1 - self`, also a fraction.
    #[must_use]
    pub fn complement(self) -> Self {
        Self(1.0 - self.0)
    }
}

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = f64::deserialize(deserializer)?;
        Fraction::new(raw).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} %", self.0 * 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_gpu_and_aggregate_round_trip() {
        let cap = WattsPerGpu(500.0);
        let job = cap.times_gpus(8);
        assert_eq!(job, Watts(4000.0));
        assert_eq!(job.per_gpu(8), cap);
        assert_eq!(Watts(10.0).per_gpu(0), WattsPerGpu::ZERO);
    }

    #[test]
    fn kilowatts_convert_both_ways() {
        assert_eq!(Watts(2500.0).to_kilowatts(), Kilowatts(2.5));
        assert_eq!(Kilowatts(2.5).to_watts(), Watts(2500.0));
    }

    #[test]
    fn fraction_rejects_out_of_range_and_nan() {
        assert!(Fraction::new(0.3).is_ok());
        assert!(Fraction::new(1.0).is_ok());
        assert!(Fraction::new(-0.01).is_err());
        assert!(Fraction::new(1.01).is_err());
        assert!(Fraction::new(f64::NAN).is_err());
        assert!(serde_json::from_str::<Fraction>("1.5").is_err());
        let f: Fraction = serde_json::from_str("0.25").expect("valid fraction");
        assert_eq!(f.complement().value(), 0.75);
    }

    #[test]
    fn clamp_keeps_the_floor_when_range_is_inverted() {
        let x = Watts(5.0).clamp_to(Watts(10.0), Watts(8.0));
        assert_eq!(x, Watts(10.0));
    }
}
