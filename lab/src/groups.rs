//! The 25 published H200 job groups (Colangelo et al., Table 6), embedded so that the simulator
//! runs with no files around it. Source: `lab/data/pfi_groups_h200.csv`.

use flexgate_policies::pfi::CapGrid;
use flexgate_policies::units::WattsPerGpu;
use serde::Serialize;

const CSV: &str = include_str!("../data/pfi_groups_h200.csv");

/// Workload regime of a group: decides the physical parameters of its synthetic curve and its
/// place in the production mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Regime {
    /// Dense model, fine-tuning.
    DenseFt,
    /// Dense model, pretraining.
    DensePt,
    /// Mixture-of-experts, fine-tuning.
    MoeFt,
    /// Mixture-of-experts, pretraining.
    MoePt,
}

impl Regime {
    /// Fine-tuning (as opposed to pretraining).
    #[must_use]
    pub fn is_fine_tuning(self) -> bool {
        matches!(self, Regime::DenseFt | Regime::MoeFt)
    }
}

/// One published sweep group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// Group number in the paper (1–25).
    pub id: u32,
    /// Model name.
    pub model: String,
    /// Regime.
    pub regime: Regime,
    /// GPUs per job.
    pub gpus: u32,
    /// Configuration label.
    pub config: String,
    /// Cap grid of the sweep (with the 700 W reference).
    pub grid: CapGrid,
    /// Published PFI on that grid.
    pub pfi: f64,
}

/// Why the embedded table could not be read (a build-time data error; covered by tests).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("pfi_groups_h200.csv line {line}: {problem}")]
pub struct GroupTableError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub problem: String,
}

/// The 25 published groups.
pub fn published_groups() -> Result<Vec<Group>, GroupTableError> {
    let mut groups = Vec::new();
    let mut header_seen = false;
    for (index, raw) in CSV.lines().enumerate() {
        let line = index + 1;
        let text = raw.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        if !header_seen {
            header_seen = true;
            continue;
        }
        let err = |problem: String| GroupTableError { line, problem };
        let fields: Vec<&str> = text.split(',').collect();
        let [id, model, regime, gpus, config, grid, pfi] = fields[..] else {
            return Err(err(format!("expected 7 fields, found {}", fields.len())));
        };
        let regime = match regime {
            "dense_ft" => Regime::DenseFt,
            "dense_pt" => Regime::DensePt,
            "moe_ft" => Regime::MoeFt,
            "moe_pt" => Regime::MoePt,
            other => return Err(err(format!("unknown regime {other:?}"))),
        };
        let caps: Result<Vec<WattsPerGpu>, _> = grid.split(';').map(|c| c.parse::<f64>().map(WattsPerGpu)).collect();
        groups.push(Group {
            id: id.parse().map_err(|e| err(format!("group id: {e}")))?,
            model: model.to_string(),
            regime,
            gpus: gpus.parse().map_err(|e| err(format!("gpus: {e}")))?,
            config: config.to_string(),
            grid: CapGrid(caps.map_err(|e| err(format!("grid: {e}")))?),
            pfi: pfi.parse().map_err(|e| err(format!("pfi: {e}")))?,
        });
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_table_has_the_25_published_groups() {
        let groups = published_groups().expect("embedded table parses");
        assert_eq!(groups.len(), 25);
        let (lo, hi) = groups
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), g| (lo.min(g.pfi), hi.max(g.pfi)));
        assert_eq!((lo, hi), (1.10, 2.67));
        assert!(groups.iter().all(|g| g.grid.caps().last() == Some(&WattsPerGpu(700.0))));
        assert_eq!(groups.iter().filter(|g| g.regime.is_fine_tuning()).count(), 8);
    }
}
