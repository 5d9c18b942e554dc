//! From a GRES index (what Slurm allocates) to a GPU device minor number (what the node agent
//! reports), through the node's gres.conf.
//!
//! Slurm's `IDX` is a position in the node's list of GPU device files from gres.conf
//! (`File=/dev/nvidia[0-7]`), ordered by device minor number. NVML's index follows PCI bus
//! order, which can differ, so matching on NVML's index would cap the wrong GPU. The agent
//! reports each GPU's minor number (`nvmlDeviceGetMinorNumber`, the `N` of `/dev/nvidiaN`),
//! and the gateway matches on that.
//!
//! [`parse_gres_conf`] reads the lines that define GPUs:
//!
//! ```text
//! AutoDetect=off
//! NodeName=gpu[01-04] Name=gpu Type=h100 File=/dev/nvidia[0-7]
//! NodeName=odd01 Name=gpu File=/dev/nvidia0,/dev/nvidia2
//! Name=gpu File=/dev/nvidia[0-3]       # no NodeName: this node's own gres.conf
//! ```
//!
//! A device's minor is the number at the end of its file name (`/dev/nvidia3` → 3), which is
//! what the NVIDIA driver uses. Devices are sorted by minor, and `IDX` *i* is the *i*-th one.
//!
//! **MIG.** A GPU split into MIG instances is declared one instance per line with
//! `MultipleFiles=`, the files of one GRES device: the parent GPU's `/dev/nvidiaN` and the
//! instance's capability files (`/dev/nvidia-caps/nvidia-capM`):
//!
//! ```text
//! Name=gpu Type=1g.18gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22
//! Name=gpu Type=1g.18gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap30,/dev/nvidia-caps/nvidia-cap31
//! ```
//!
//! Each such line is one device whose minor is its parent GPU's (`0` above): what a power limit
//! acts on, since NVML has one limit per physical GPU for all its instances. Devices are
//! ordered by parent minor, then by the instance's first capability number; two jobs on two
//! instances of one GPU therefore map to the same GPU, and the gateway plans them as one unit
//! (see `src/cluster/agents/inventory.rs`). Check the order against `scontrol show job -d` and
//! `nvidia-smi -L` on a MIG node before relying on it: Slurm documents the files of a device,
//! not the order of devices.
//!
//! **Default when there is no mapping:** for a node with no `File=` lines (no gres.conf, or
//! `AutoDetect=nvml`, where slurmd enumerates the driver's devices, which are named by minor
//! number), [`GresConf::minor_for`] returns `IDX` itself as the minor. This is right on nodes
//! whose GPUs are `/dev/nvidia0..N-1` with no gaps, the common case; a node with a missing or
//! masked device needs explicit `File=` lines for the mapping to be right.

use std::collections::BTreeMap;

use crate::hostlist::expand_hostlist;

/// One GRES GPU device: a whole GPU, or a MIG instance of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GresDevice {
    /// The (parent) GPU's device minor (`/dev/nvidia<minor>`).
    pub minor: u32,
    /// For a MIG instance (`MultipleFiles=`), its first capability number
    /// (`/dev/nvidia-caps/nvidia-cap<n>`); `None` for a whole GPU.
    pub mig: Option<u32>,
}

/// The GPU devices gres.conf declares, per node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GresConf {
    /// Devices per node named by `NodeName=` lines, in IDX order.
    pub nodes: BTreeMap<String, Vec<GresDevice>>,
    /// Devices from lines without `NodeName=`, which apply to every node not listed in
    /// [`GresConf::nodes`] (a node's own gres.conf usually has no `NodeName=`), in IDX order.
    pub any_node: Vec<GresDevice>,
    /// The last global `AutoDetect=` value (`off`, `nvml`, ...), if any.
    pub autodetect: Option<String>,
}

/// Where [`GresConf::minor_for`] got its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinorSource {
    /// From the node's `File=` list.
    GresConf,
    /// No `File=` list for the node: IDX taken as the minor (see the module docs).
    IdxDefault,
}

/// A gres.conf that cannot be read, or an index it does not cover.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GresConfError {
    /// A line that is not `key=value` pairs, or a bad `File=`/`NodeName=` value.
    #[error("gres.conf line {line}: {reason}: {text:?}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// The line (truncated).
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// Slurm allocated an index past the end of the node's device list: Slurm's gres.conf and
    /// the one the gateway read differ.
    #[error(
        "node {node}: GRES index {idx} is past its {devices} GPU devices in gres.conf (is the gateway's copy of gres.conf current?)"
    )]
    IndexOutOfRange {
        /// Node name.
        node: String,
        /// The index Slurm allocated.
        idx: u32,
        /// How many devices gres.conf lists for the node.
        devices: usize,
    },
}

/// Parses gres.conf text (see the module docs). Lines for other GRES (`Name=nic`) are ignored;
/// keys are case-insensitive, `#` starts a comment.
pub fn parse_gres_conf(text: &str) -> Result<GresConf, GresConfError> {
    let mut conf = GresConf::default();
    for (n, raw) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |reason: String| GresConfError::Line {
            line: line_no,
            text: crate::gres::truncate(line, 200),
            reason,
        };
        let mut node_names: Option<&str> = None;
        let mut name: Option<&str> = None;
        let mut files: Vec<&str> = Vec::new();
        let mut multiple: Vec<&str> = Vec::new();
        let mut autodetect: Option<&str> = None;
        for word in line.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| bad(format!("{word:?} is not key=value")))?;
            match key.to_ascii_lowercase().as_str() {
                "nodename" => node_names = Some(value),
                "name" => name = Some(value),
                "file" => files.push(value),
                "multiplefiles" => multiple.push(value),
                "autodetect" => autodetect = Some(value),
                _ => {} // Type, Count, Cores, Links, Flags: not needed for the mapping
            }
        }
        if name.is_none() {
            if let (Some(a), None) = (autodetect, node_names) {
                conf.autodetect = Some(a.to_ascii_lowercase());
            }
            continue;
        }
        if name != Some("gpu") || (files.is_empty() && multiple.is_empty()) {
            continue;
        }
        let mut minors = Vec::new();
        for value in files {
            for path in expand_hostlist(value).map_err(|e| bad(e.reason))? {
                minors.push(GresDevice {
                    minor: minor_of(&path).ok_or_else(|| bad(format!("no device number at the end of {path:?}")))?,
                    mig: None,
                });
            }
        }
        if !multiple.is_empty() {
            // One device made of several files: a MIG instance of the GPU whose /dev/nvidiaN
            // is among them.
            let mut paths = Vec::new();
            for value in multiple {
                for v in value.split(',') {
                    paths.extend(expand_hostlist(v).map_err(|e| bad(e.reason))?);
                }
            }
            let gpu: Vec<u32> = paths.iter().filter_map(|p| gpu_minor_of(p)).collect();
            let [minor] = gpu[..] else {
                return Err(bad(format!(
                    "MultipleFiles must name exactly one GPU device /dev/nvidiaN (found {})",
                    gpu.len()
                )));
            };
            let mig = paths
                .iter()
                .filter(|p| gpu_minor_of(p).is_none())
                .filter_map(|p| minor_of(p))
                .min();
            minors.push(GresDevice { minor, mig });
        }
        match node_names {
            Some(expr) => {
                for node in expand_hostlist(expr).map_err(|e| bad(e.reason))? {
                    conf.nodes.entry(node).or_default().extend(&minors);
                }
            }
            None => conf.any_node.extend(&minors),
        }
    }
    for v in conf.nodes.values_mut().chain(std::iter::once(&mut conf.any_node)) {
        v.sort_unstable();
        v.dedup();
    }
    Ok(conf)
}

/// The minor of a whole-GPU device file, `/dev/nvidia12` → 12; `None` for anything else
/// (`/dev/nvidiactl`, `/dev/nvidia-caps/nvidia-cap21`).
fn gpu_minor_of(path: &str) -> Option<u32> {
    let n = path.strip_prefix("/dev/nvidia")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

/// The number at the end of a device path: `/dev/nvidia12` → 12.
fn minor_of(path: &str) -> Option<u32> {
    let digits = path.len() - path.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    path[path.len() - digits..].parse().ok()
}

impl GresConf {
    /// The devices gres.conf lists for `node`, in IDX order; `None` when it lists none.
    pub fn node_devices(&self, node: &str) -> Option<&[GresDevice]> {
        match self.nodes.get(node) {
            Some(v) => Some(v),
            None if !self.any_node.is_empty() => Some(&self.any_node),
            None => None,
        }
    }

    /// The device minors gres.conf lists for `node`, in IDX order (a GPU split into MIG
    /// instances once per instance); `None` when it lists none.
    pub fn node_minors(&self, node: &str) -> Option<Vec<u32>> {
        self.node_devices(node).map(|d| d.iter().map(|d| d.minor).collect())
    }

    /// The device minor of GRES index `idx` on `node`. Without a `File=` list for the node,
    /// the minor is `idx` ([`MinorSource::IdxDefault`]; see the module docs).
    pub fn minor_for(&self, node: &str, idx: u32) -> Result<(u32, MinorSource), GresConfError> {
        match self.node_devices(node) {
            Some(minors) => minors
                .get(idx as usize)
                .map(|d| (d.minor, MinorSource::GresConf))
                .ok_or_else(|| GresConfError::IndexOutOfRange {
                    node: node.to_string(),
                    idx,
                    devices: minors.len(),
                }),
            None => Ok((idx, MinorSource::IdxDefault)),
        }
    }

    /// Every GPU of a job as (node, IDX, device minor). Indices gres.conf does not cover are
    /// returned as errors next to the ones that map, so one stale node does not hide the rest.
    pub fn job_gpus(&self, job: &crate::model::SlurmJob) -> (Vec<JobGpu>, Vec<GresConfError>) {
        let mut ok = Vec::new();
        let mut errors = Vec::new();
        for (node, idx) in job.gpu_indices() {
            match self.minor_for(node, idx) {
                Ok((minor, source)) => ok.push(JobGpu {
                    node: node.to_string(),
                    idx,
                    minor,
                    source,
                }),
                Err(e) => errors.push(e),
            }
        }
        (ok, errors)
    }
}

/// One GPU of a job, ready to match against the agent's report of that node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobGpu {
    /// Node name.
    pub node: String,
    /// Slurm's GRES index.
    pub idx: u32,
    /// Device minor number (`/dev/nvidia<minor>`), what the agent reports.
    pub minor: u32,
    /// Whether gres.conf gave the minor or the IDX default did.
    pub source: MinorSource,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_lists_and_nodes() {
        let conf = parse_gres_conf(
            "# comment\nAutoDetect=off\n\
             NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia[0-7]\n\
             nodename=odd01 name=gpu File=/dev/nvidia0,/dev/nvidia2  # two of four\n\
             NodeName=odd01 Name=gpu File=/dev/nvidia5\n\
             NodeName=gpu01 Name=nic File=/dev/infiniband/uverbs[0-1]\n",
        )
        .expect("parses");
        assert_eq!(conf.autodetect.as_deref(), Some("off"));
        assert_eq!(conf.node_minors("gpu02"), Some(vec![0, 1, 2, 3, 4, 5, 6, 7]));
        assert_eq!(conf.node_minors("odd01"), Some(vec![0, 2, 5]));
        assert_eq!(conf.minor_for("odd01", 1), Ok((2, MinorSource::GresConf)));
        assert_eq!(conf.minor_for("odd01", 2), Ok((5, MinorSource::GresConf)));
        assert!(matches!(
            conf.minor_for("odd01", 3),
            Err(GresConfError::IndexOutOfRange { devices: 3, .. })
        ));
        assert_eq!(conf.minor_for("elsewhere", 4), Ok((4, MinorSource::IdxDefault)));
    }

    #[test]
    fn minor_order_not_file_order() {
        let conf = parse_gres_conf("Name=gpu File=/dev/nvidia3\nName=gpu File=/dev/nvidia1\n").expect("ok");
        assert_eq!(conf.node_minors("any"), Some(vec![1, 3]));
        assert_eq!(conf.minor_for("any", 0), Ok((1, MinorSource::GresConf)));
    }

    #[test]
    fn mig_instances_map_to_their_gpu() {
        // Two instances of GPU 1 written before one of GPU 0, and a whole GPU 2: IDX follows
        // (parent minor, first capability number), and each instance maps to its parent.
        let conf = parse_gres_conf(
            "Name=gpu Type=1g.18gb MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap39,/dev/nvidia-caps/nvidia-cap40\n\
             Name=gpu Type=1g.18gb MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap30,/dev/nvidia-caps/nvidia-cap31\n\
             Name=gpu Type=3g.71gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21\n\
             Name=gpu Type=h200 File=/dev/nvidia2\n",
        )
        .expect("parses");
        assert_eq!(conf.node_minors("n"), Some(vec![0, 1, 1, 2]));
        let devices = conf.node_devices("n").expect("devices");
        assert_eq!(
            devices[1],
            GresDevice {
                minor: 1,
                mig: Some(30)
            }
        );
        assert_eq!(
            devices[2],
            GresDevice {
                minor: 1,
                mig: Some(39)
            }
        );
        assert_eq!(devices[3], GresDevice { minor: 2, mig: None });
        assert_eq!(conf.minor_for("n", 2), Ok((1, MinorSource::GresConf)));
        // A device naming no GPU, or two, is refused with its line.
        for bad in [
            "Name=gpu MultipleFiles=/dev/nvidia-caps/nvidia-cap21",
            "Name=gpu MultipleFiles=/dev/nvidia0,/dev/nvidia1",
        ] {
            let e = parse_gres_conf(bad).expect_err(bad);
            assert!(e.to_string().contains("exactly one GPU device"), "{e}");
        }
    }

    #[test]
    fn autodetect_nvml_defaults_to_idx() {
        let conf = parse_gres_conf("AutoDetect=nvml\nName=gpu Type=h100 Count=8\n").expect("ok");
        assert_eq!(conf.autodetect.as_deref(), Some("nvml"));
        assert_eq!(conf.node_minors("n1"), None);
        assert_eq!(conf.minor_for("n1", 6), Ok((6, MinorSource::IdxDefault)));
        assert_eq!(
            parse_gres_conf("").expect("ok").minor_for("n", 0),
            Ok((0, MinorSource::IdxDefault))
        );
    }

    #[test]
    fn bad_lines() {
        for bad in [
            "Name=gpu File=/dev/nvidia",
            "Name=gpu File=/dev/nvidia[0-",
            "NodeName=n[1-0] Name=gpu File=/dev/nvidia0",
            "Name=gpu garbage",
        ] {
            let e = parse_gres_conf(bad).expect_err(bad);
            assert!(e.to_string().contains("line 1"), "{e}");
        }
    }

    #[test]
    fn job_gpus_map_through_conf() {
        use crate::model::{JobState, NodeGpus, SlurmJob};
        let conf = parse_gres_conf("NodeName=a Name=gpu File=/dev/nvidia[4-7]\n").expect("ok");
        let job = SlurmJob {
            id: 1,
            name: String::new(),
            user: String::new(),
            partition: String::new(),
            state: JobState::Running,
            nodes: vec![
                NodeGpus {
                    node: "a".into(),
                    gres_type: None,
                    indices: vec![0, 3, 4],
                    indices_known: true,
                },
                NodeGpus {
                    node: "b".into(),
                    gres_type: None,
                    indices: vec![1],
                    indices_known: true,
                },
            ],
            comment: String::new(),
            admin_comment: String::new(),
            flex: Default::default(),
            start_time: None,
            time_limit_minutes: None,
            gpus_requested: None,
            warnings: vec![],
        };
        let (ok, errors) = conf.job_gpus(&job);
        let got: Vec<_> = ok.iter().map(|g| (g.node.as_str(), g.idx, g.minor, g.source)).collect();
        assert_eq!(
            got,
            [
                ("a", 0, 4, MinorSource::GresConf),
                ("a", 3, 7, MinorSource::GresConf),
                ("b", 1, 1, MinorSource::IdxDefault)
            ]
        );
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("GRES index 4"));
    }
}
