//! A small deterministic random number generator for the fleet simulator.
//!
//! Experiments must be reproducible from their seed on every platform and every future version
//! of the code's dependencies, so the generator is defined here (SplitMix64, Steele et al. 2014)
//! rather than borrowed from a crate whose stream may change between releases.

/// SplitMix64: 64-bit state, passes BigCrush, trivially seedable and splittable.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose stream is fully determined by `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// An independent stream for sub-task `index` (e.g. one workload), so results do not depend
    /// on the order in which sub-tasks run.
    #[must_use]
    pub fn derive(seed: u64, index: u64) -> Self {
        let mut mixer = Self::new(seed ^ index.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        Self::new(mixer.next_u64())
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal draw (Box–Muller; one of the pair is discarded for simplicity).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Index drawn with probability proportional to `weights` (non-negative, not all zero).
    pub fn weighted_index(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut target = self.next_f64() * total;
        for (i, w) in weights.iter().enumerate() {
            if target < *w {
                return i;
            }
            target -= w;
        }
        weights.len().saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_roughly_uniform_and_normal() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let n = 20_000;
        let mean = (0..n).map(|_| a.next_f64()).sum::<f64>() / f64::from(n);
        assert!((mean - 0.5).abs() < 0.01);
        let draws: Vec<f64> = (0..n).map(|_| a.normal()).collect();
        let m = draws.iter().sum::<f64>() / f64::from(n);
        let var = draws.iter().map(|x| (x - m).powi(2)).sum::<f64>() / f64::from(n);
        assert!(m.abs() < 0.03 && (var - 1.0).abs() < 0.05, "mean {m} var {var}");
        let mut counts = [0u32; 3];
        for _ in 0..n {
            counts[a.weighted_index(&[1.0, 0.0, 3.0])] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!((f64::from(counts[2]) / f64::from(n) - 0.75).abs() < 0.02);
        assert_ne!(SplitMix64::derive(7, 1).next_u64(), SplitMix64::derive(7, 2).next_u64());
    }
}
