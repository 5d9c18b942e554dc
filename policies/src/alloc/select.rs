//! Greedy water-filling by weighted selection: shed the cheapest watts first.
//!
//! Each job contributes the segments of its concave (power, tokens/s) hull between its floor and
//! its uncapped draw; a segment's *slope* is the throughput lost per watt shed on it. Because the
//! hulls are concave, shedding segments in ascending slope order across all jobs is optimal (a
//! fractional knapsack), and for each job it sheds its top segments first, so the result is a
//! valid operating point on every hull.
//!
//! Sorting all segments would cost O(n log n); a weighted quickselect with a three-way partition
//! finds the threshold slope in expected O(n). Segments that tie at the threshold share the
//! remaining cut in proportion to their widths, so identical jobs are treated identically.

/// One hull segment of one job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Segment {
    /// Tokens/s lost per watt shed on this segment (may be ≤ 0 for free watts).
    pub slope: f64,
    /// Watts the segment spans.
    pub width: f64,
    /// Index of the job that owns it.
    pub job: u32,
}

/// Shed `need` watts from `segments` at the least throughput cost.
///
/// Adds each job's shed watts into `shed[job]` and returns the part of `need` that the segments
/// could not cover (0 when feasible). Reorders `segments`.
pub(crate) fn shed_cheapest(segments: &mut [Segment], need: f64, shed: &mut [f64]) -> f64 {
    let total: f64 = segments.iter().map(|s| s.width).sum();
    if need <= 0.0 {
        return 0.0;
    }
    if total <= need {
        take_all(segments, shed);
        return need - total;
    }
    let mut region = segments;
    let mut need = need;
    let mut seed = region.len() as u64 ^ 0x9E37_79B9_7F4A_7C15;
    loop {
        if region.is_empty() {
            return need.max(0.0);
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let pivot = region[(seed % region.len() as u64) as usize].slope;
        let (lt, eq) = partition3(region, pivot);
        let below: f64 = region[..lt].iter().map(|s| s.width).sum();
        if below >= need && lt > 0 {
            region = &mut region[..lt];
            continue;
        }
        let at: f64 = region[lt..lt + eq].iter().map(|s| s.width).sum();
        take_all(&region[..lt], shed);
        if below + at >= need {
            let share = if at > 0.0 { (need - below) / at } else { 0.0 };
            for s in &region[lt..lt + eq] {
                shed[s.job as usize] += s.width * share;
            }
            return 0.0;
        }
        take_all(&region[lt..lt + eq], shed);
        need -= below + at;
        region = &mut region[lt + eq..];
    }
}

fn take_all(segments: &[Segment], shed: &mut [f64]) {
    for s in segments {
        shed[s.job as usize] += s.width;
    }
}

/// Dutch-flag partition by slope: `[< pivot][== pivot][> pivot]`; returns (len <, len ==).
fn partition3(v: &mut [Segment], pivot: f64) -> (usize, usize) {
    let (mut lt, mut i, mut gt) = (0usize, 0usize, v.len());
    while i < gt {
        let s = v[i].slope;
        if s < pivot {
            v.swap(lt, i);
            lt += 1;
            i += 1;
        } else if s > pivot {
            gt -= 1;
            v.swap(i, gt);
        } else {
            i += 1;
        }
    }
    (lt, gt - lt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(slope: f64, width: f64, job: u32) -> Segment {
        Segment { slope, width, job }
    }

    #[test]
    fn sheds_cheapest_first_and_splits_ties() {
        let mut segs = vec![
            seg(3.0, 100.0, 0),
            seg(1.0, 50.0, 1),
            seg(2.0, 100.0, 2),
            seg(2.0, 100.0, 0),
        ];
        let mut shed = vec![0.0; 3];
        let unmet = shed_cheapest(&mut segs, 150.0, &mut shed);
        assert_eq!(unmet, 0.0);
        // 50 from slope 1 (job 1), then 100 split over the two slope-2 segments (jobs 2 and 0).
        assert_eq!(shed, vec![50.0, 50.0, 50.0]);
    }

    #[test]
    fn reports_what_cannot_be_shed() {
        let mut segs = vec![seg(1.0, 10.0, 0)];
        let mut shed = vec![0.0];
        assert_eq!(shed_cheapest(&mut segs, 25.0, &mut shed), 15.0);
        assert_eq!(shed, vec![10.0]);
    }

    #[test]
    fn matches_a_sort_on_many_segments() {
        let mut x: u64 = 42;
        let mut segs = Vec::new();
        for j in 0..500u32 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let slope = ((x >> 40) % 97) as f64 / 7.0;
            segs.push(seg(slope, 1.0 + f64::from(j % 5), j));
        }
        let need = 700.0;
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
        let mut shed = vec![0.0; 500];
        shed_cheapest(&mut segs, need, &mut shed);
        assert!((shed.iter().sum::<f64>() - need).abs() < 1e-9);
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
