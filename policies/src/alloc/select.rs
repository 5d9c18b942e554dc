//! Greedy water-filling by weighted selection: shed the cheapest watts first.
//!
//! Each job contributes the segments of its concave (power, tokens/s) hull between its floor and
//! its uncapped draw; a segment's *slope* is the throughput lost per watt shed on it. Because the
//! hulls are concave, shedding segments in ascending slope order across all jobs is optimal (a
//! fractional knapsack), and for each job it sheds its top segments first, so the result is a
//! valid operating point on every hull.
//!
//! A preparation, which plans many needs over the same segments, sorts them once
//! (`SlopeOrder`) and then finds each need's threshold by a binary search. For one-off segment
//! sets ([`shed_cheapest`]: the repair of a bridged split, the knowledge bound's planes) sorting
//! all segments would cost O(n log n) and a quickselect would have to copy them (it reorders);
//! instead, large inputs are bucketed by slope in one pass (a histogram over the top
//! 16 bits of an order-preserving integer image of each slope: sign, exponent and 4 mantissa
//! bits, so each bucket spans ≤ 6.25 % in slope), the bucket holding the threshold is found by a
//! prefix sum, and only that bucket's segments are sorted. Three linear passes (the first sums
//! the widths, to take everything at once when they do not cover the need), no copy of the
//! input. Segments that tie at the threshold share the remaining cut in proportion to their
//! widths, so identical jobs are treated identically.

/// One hull segment of one job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    /// Tokens/s lost per watt shed on this segment (may be ≤ 0 for free watts).
    pub slope: f64,
    /// Watts the segment spans.
    pub width: f64,
    /// Index of the job that owns it.
    pub job: u32,
}

/// Below this many segments a plain sort is cheaper than zeroing the histogram.
const SORT_BELOW: usize = 4096;
const BUCKET_BITS: u32 = 16;

/// Shed `need` watts from `segments` at the least throughput cost.
///
/// Adds each job's shed watts into `shed[job]` and returns the part of `need` that the segments
/// could not cover (0 when feasible).
pub fn shed_cheapest(segments: &[Segment], need: f64, shed: &mut [f64]) -> f64 {
    if need <= 0.0 || segments.is_empty() {
        return need.max(0.0);
    }
    let total: f64 = segments.iter().map(|s| s.width).sum();
    if total <= need {
        for s in segments {
            shed[s.job as usize] += s.width;
        }
        return need - total;
    }
    if segments.len() < SORT_BELOW {
        let mut sorted = segments.to_vec();
        sorted.sort_unstable_by(|a, b| a.slope.total_cmp(&b.slope));
        return take_in_order(&sorted, need, shed);
    }
    let (mut boundary, below) = split_by_bucket(segments, bucket, need, shed);
    let mut left = need - below;
    if boundary.len() >= SORT_BELOW {
        // Slopes cluster where many jobs are alike (a fleet of a few job types), and the one
        // bucket can hold tens of thousands of segments: a second histogram, on the next 16 bits
        // of the same image, narrows it before the sort (which took a twelfth of a 100 k-job plan).
        let (narrowed, taken) = narrow(&boundary, left, shed);
        boundary = narrowed;
        left -= taken;
    }
    // Equal slopes share pro rata in `take_in_order`, so their order does not matter.
    boundary.sort_unstable_by(|a, b| a.slope.total_cmp(&b.slope));
    take_in_order(&boundary, left, shed)
}

/// Segments ordered by slope once, so that a preparation sheds any number of needs (every plan,
/// every level of a flexibility curve) without bucketing or sorting its segments again: the
/// threshold is a binary search over the widths summed in slope order, and the shed one pass
/// over the segments in their own order (job by job, so each job's watts are written where they
/// are summed). At 100,000 jobs (about 700,000 segments) [`shed_cheapest`] spent two passes and
/// a 512 KiB histogram on each need, a fifth of a hedged plan.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlopeOrder {
    /// Every segment's slope, ascending.
    slopes: Vec<f64>,
    /// `widths_below[k]`: the widths of the `k` cheapest segments, summed (one more entry than
    /// `slopes`).
    widths_below: Vec<f64>,
    /// The segments in their own order as `(slope, width)`, without their job: the shed pass
    /// reads 16 bytes a segment instead of a [`Segment`]'s 24. At 100,000 jobs (about 700,000
    /// segments) the pass streams its input from memory, so its time is its bytes.
    pairs: Vec<(f64, f64)>,
    /// The runs of consecutive segments of one job: `(job, end)`, the run ending before
    /// `pairs[end]`.
    runs: Vec<(u32, u32)>,
}

impl SlopeOrder {
    /// The order of `segments`, keeping what [`SlopeOrder::shed`] needs of them.
    pub(crate) fn new(segments: &[Segment]) -> Self {
        let mut order: Vec<(f64, f64)> = segments.iter().map(|s| (s.slope, s.width)).collect();
        order.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let mut widths_below = Vec::with_capacity(order.len() + 1);
        let mut sum = 0.0;
        widths_below.push(sum);
        for &(_, width) in &order {
            sum += width;
            widths_below.push(sum);
        }
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for (k, s) in segments.iter().enumerate() {
            let end = u32::try_from(k + 1).unwrap_or(u32::MAX);
            match runs.last_mut() {
                Some((job, last)) if *job == s.job => *last = end,
                _ => runs.push((s.job, end)),
            }
        }
        Self {
            slopes: order.into_iter().map(|(slope, _)| slope).collect(),
            widths_below,
            pairs: segments.iter().map(|s| (s.slope, s.width)).collect(),
            runs,
        }
    }

    /// [`shed_cheapest`] for the segments this order was built from: the same cheapest-first
    /// shed, ties at the threshold sharing the rest of `need` in proportion to their widths.
    pub(crate) fn shed(&self, need: f64, shed: &mut [f64]) -> f64 {
        let total = self.widths_below.last().copied().unwrap_or(0.0);
        if need <= 0.0 || self.pairs.is_empty() {
            return need.max(0.0);
        }
        if total <= need {
            let mut start = 0;
            for &(job, end) in &self.runs {
                let end = end as usize;
                shed[job as usize] += self.pairs[start..end].iter().map(|p| p.1).sum::<f64>();
                start = end;
            }
            return need - total;
        }
        // The cheapest segment whose width, with all cheaper ones', covers `need`, and the
        // segments that tie with it.
        let threshold_at = self.widths_below[1..].partition_point(|&w| w < need);
        let threshold = self.slopes[threshold_at.min(self.slopes.len() - 1)];
        let first_tied = self.slopes.partition_point(|&s| s < threshold);
        let after_tied = self.slopes.partition_point(|&s| s <= threshold);
        let below = self.widths_below[first_tied];
        let tied = self.widths_below[after_tied] - below;
        let share = if tied > 0.0 {
            ((need - below) / tied).min(1.0)
        } else {
            0.0
        };
        // Summed in a register over each job's run: adding each segment into `shed[job]` made
        // every add wait for the previous one's store (70 % of this pass). Written out here, not
        // through a helper taking the factor as a closure: that one compiled to a slower loop
        // (the 20-level curve of 10,000 jobs 5.8 → 7.1 ms).
        let mut start = 0;
        for &(job, end) in &self.runs {
            let end = end as usize;
            let mut taken = 0.0;
            for &(slope, width) in &self.pairs[start..end] {
                let factor = if slope < threshold {
                    1.0
                } else if slope == threshold {
                    share
                } else {
                    0.0
                };
                taken += width * factor;
            }
            shed[job as usize] += taken;
            start = end;
        }
        let left = need - below - tied * share;
        // Rounding in the sums must not turn a feasible plan into a reported shortfall.
        if left <= 1e-9 * need.abs().max(1.0) { 0.0 } else { left }
    }
}

/// Within one top-level bucket: shed every segment of the sub-buckets below the one that holds
/// the threshold, and return that sub-bucket's segments with the watts shed.
fn narrow(boundary: &[Segment], need: f64, shed: &mut [f64]) -> (Vec<Segment>, f64) {
    let sub = |slope: f64| (ordered_bits(slope) >> (64 - 2 * BUCKET_BITS)) as usize & ((1 << BUCKET_BITS) - 1);
    split_by_bucket(boundary, sub, need, shed)
}

/// Bucket `segments` by `key` (a histogram over [`BUCKET_BITS`] bits of an order-preserving
/// image of the slope), shed every segment of the buckets below the one where `need` is reached,
/// and return that bucket's segments with the watts shed.
fn split_by_bucket(
    segments: &[Segment],
    key: impl Fn(f64) -> usize,
    need: f64,
    shed: &mut [f64],
) -> (Vec<Segment>, f64) {
    let mut histogram = vec![0.0f64; 1 << BUCKET_BITS];
    for s in segments {
        histogram[key(s.slope)] += s.width;
    }
    let mut below = 0.0;
    let mut threshold = histogram.len() - 1;
    for (b, width) in histogram.iter().enumerate() {
        if below + width >= need {
            threshold = b;
            break;
        }
        below += width;
    }
    let mut boundary = Vec::new();
    for s in segments {
        match key(s.slope).cmp(&threshold) {
            std::cmp::Ordering::Less => shed[s.job as usize] += s.width,
            std::cmp::Ordering::Equal => boundary.push(*s),
            std::cmp::Ordering::Greater => {}
        }
    }
    (boundary, below)
}

/// Shed from slope-sorted segments until `need` is met; equal slopes share pro rata.
fn take_in_order(sorted: &[Segment], need: f64, shed: &mut [f64]) -> f64 {
    let mut left = need;
    let mut i = 0;
    while i < sorted.len() && left > 0.0 {
        let slope = sorted[i].slope;
        let group = sorted[i..].iter().take_while(|s| s.slope == slope).count();
        let width: f64 = sorted[i..i + group].iter().map(|s| s.width).sum();
        let share = if width <= left { 1.0 } else { left / width };
        for s in &sorted[i..i + group] {
            shed[s.job as usize] += s.width * share;
        }
        left -= width * share;
        i += group;
    }
    // Rounding in the sums must not turn a feasible plan into a reported shortfall.
    if left <= 1e-9 * need.abs().max(1.0) { 0.0 } else { left }
}

/// Histogram bucket of a slope: the top bits of an integer image that orders like the float.
fn bucket(slope: f64) -> usize {
    (ordered_bits(slope) >> (64 - BUCKET_BITS)) as usize
}

/// An integer image of a float that orders like it (negative numbers flipped, positive ones
/// with the sign bit set).
fn ordered_bits(value: f64) -> u64 {
    let bits = value.to_bits();
    if bits >> 63 == 1 { !bits } else { bits | (1 << 63) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(slope: f64, width: f64, job: u32) -> Segment {
        Segment { slope, width, job }
    }

    #[test]
    fn sheds_cheapest_first_and_splits_ties() {
        let segs = vec![
            seg(3.0, 100.0, 0),
            seg(1.0, 50.0, 1),
            seg(2.0, 100.0, 2),
            seg(2.0, 100.0, 0),
        ];
        let mut shed = vec![0.0; 3];
        let unmet = shed_cheapest(&segs, 150.0, &mut shed);
        assert_eq!(unmet, 0.0);
        // 50 from slope 1 (job 1), then 100 split over the two slope-2 segments (jobs 2 and 0).
        assert_eq!(shed, vec![50.0, 50.0, 50.0]);
        let mut shed = vec![0.0; 3];
        assert_eq!(SlopeOrder::new(&segs).shed(150.0, &mut shed), 0.0);
        assert_eq!(shed, vec![50.0, 50.0, 50.0]);
    }

    #[test]
    fn reports_what_cannot_be_shed() {
        let segs = vec![seg(1.0, 10.0, 0)];
        let mut shed = vec![0.0];
        assert_eq!(shed_cheapest(&segs, 25.0, &mut shed), 15.0);
        assert_eq!(shed, vec![10.0]);
        let mut shed = vec![0.0];
        assert_eq!(SlopeOrder::new(&segs).shed(25.0, &mut shed), 15.0);
        assert_eq!(shed, vec![10.0]);
    }

    #[test]
    fn matches_a_sort_on_small_and_large_inputs() {
        // 500 segments take the sort path, 20 000 the histogram path; slopes include negatives
        // (free watts) and many ties.
        for n in [500u32, 20_000] {
            let mut x: u64 = 42;
            let segs: Vec<Segment> = (0..n)
                .map(|j| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    let slope = ((x >> 40) % 97) as f64 / 7.0 - 3.0;
                    seg(slope, 1.0 + f64::from(j % 5), j)
                })
                .collect();
            let total: f64 = segs.iter().map(|s| s.width).sum();
            let need = total * 0.37;
            let mut sorted = segs.clone();
            sorted.sort_by(|a, b| a.slope.total_cmp(&b.slope));
            let mut acc = 0.0;
            let mut threshold = 0.0;
            for s in &sorted {
                if acc + s.width >= need {
                    threshold = s.slope;
                    break;
                }
                acc += s.width;
            }
            let mut shed = vec![0.0; n as usize];
            assert_eq!(shed_cheapest(&segs, need, &mut shed), 0.0);
            let mut by_order = vec![0.0; n as usize];
            assert_eq!(SlopeOrder::new(&segs).shed(need, &mut by_order), 0.0);
            for (a, b) in shed.iter().zip(&by_order) {
                assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0), "{a} vs {b}");
            }
            assert!((shed.iter().sum::<f64>() - need).abs() < 1e-6 * need);
            let tied: Vec<f64> = sorted
                .iter()
                .filter(|s| s.slope == threshold)
                .map(|s| shed[s.job as usize] / s.width)
                .collect();
            assert!(
                tied.windows(2).all(|w| (w[0] - w[1]).abs() < 1e-12),
                "ties share pro rata"
            );
            for s in &sorted {
                let got = shed[s.job as usize];
                if s.slope < threshold {
                    assert_eq!(got, s.width);
                } else if s.slope > threshold {
                    assert_eq!(got, 0.0);
                }
            }
        }
    }

    proptest::proptest! {
        /// The order prepared once sheds exactly what a fresh selection sheds, for any need
        /// (over-asks included), with slopes that tie, are free (≤ 0) or span decades.
        #[test]
        fn a_prepared_order_sheds_what_a_fresh_selection_sheds(
            segments in proptest::collection::vec((-3i32..40, 1u32..500, 0u32..60), 1..300),
            need_share in 0.0f64..1.3,
            scale in proptest::sample::select(vec![1e-3, 1.0, 1e3]),
        ) {
            let segs: Vec<Segment> = segments
                .iter()
                .map(|&(slope, width, job)| seg(f64::from(slope) * scale / 7.0, f64::from(width), job))
                .collect();
            let total: f64 = segs.iter().map(|s| s.width).sum();
            let need = total * need_share;
            let (mut fresh, mut prepared) = (vec![0.0; 60], vec![0.0; 60]);
            let unmet_fresh = shed_cheapest(&segs, need, &mut fresh);
            let unmet_prepared = SlopeOrder::new(&segs).shed(need, &mut prepared);
            proptest::prop_assert!((unmet_fresh - unmet_prepared).abs() <= 1e-9 * total);
            for (a, b) in fresh.iter().zip(&prepared) {
                proptest::prop_assert!((a - b).abs() <= 1e-9 * total, "{} vs {}", a, b);
            }
        }
    }
}
