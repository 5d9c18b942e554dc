//! The GPUs a job asked for, read from its TRES request: what a pending job will hold once it
//! starts (a running job's GPUs are read from its allocation, [`crate::gres`]).
//!
//! Slurm writes the request in several places, by how it was made and by version:
//!
//! | request | field | 22.05 | 23.02+ |
//! |---|---|---|---|
//! | `--gres=gpu:N`, `--gpus-per-node=N` | `tres_per_node` | `gres:gpu:N` | `gres/gpu:N` |
//! | `--gpus=N` | `tres_per_job` | `gres:gpu:N` | `gres/gpu:N` |
//! | `--gpus-per-task=N` | `tres_per_task` | `gres:gpu:N` | `gres/gpu:N` |
//! | any, once counted | `tres_req_str` | `…,gres/gpu=N` | same |
//!
//! each possibly typed (`gres:gpu:h100:N`) and beside other TRES (`cpu:4,gres:gpu:2`).

/// A job's TRES request, as the job record gives it.
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuRequest<'a> {
    /// `tres_per_job`.
    pub per_job: &'a str,
    /// `tres_per_node`.
    pub per_node: &'a str,
    /// `tres_per_task`.
    pub per_task: &'a str,
    /// `tres_req_str`.
    pub req_str: &'a str,
    /// `node_count`.
    pub node_count: Option<u64>,
    /// `num_tasks`.
    pub tasks: Option<u64>,
}

/// The GPU count in one TRES list (`gres:gpu:4`, `gres/gpu:h100:2`, `cpu=1,gres/gpu=8`), summed
/// over its GPU entries; `None` when it names no GPU or a count does not read.
fn gpus_in(list: &str) -> Option<u64> {
    let mut total: Option<u64> = None;
    for entry in list.split(',') {
        let entry = entry.trim();
        let Some(rest) = entry
            .strip_prefix("gres:gpu")
            .or_else(|| entry.strip_prefix("gres/gpu"))
            .or_else(|| entry.strip_prefix("gpu"))
        else {
            continue;
        };
        // `:N`, `=N`, `:type:N`, `:type=N`; a bare `gres:gpu` means one.
        let count = match rest.rsplit([':', '=']).next() {
            _ if rest.is_empty() => Some(1),
            Some(n) => n.parse::<u64>().ok(),
            None => None,
        }?;
        total = Some(total.unwrap_or(0).checked_add(count)?);
    }
    total
}

/// GPUs asked for over the whole job, from the first field that says: the counted request
/// (`tres_req_str`), then per job, per node × nodes, per task × tasks. `None` when no field names
/// a GPU (or the product overflows).
#[must_use]
pub fn requested_gpus(request: &GpuRequest<'_>) -> Option<u32> {
    let total = gpus_in(request.req_str)
        .or_else(|| gpus_in(request.per_job))
        .or_else(|| gpus_in(request.per_node).and_then(|n| n.checked_mul(request.node_count.unwrap_or(1))))
        .or_else(|| gpus_in(request.per_task).and_then(|n| n.checked_mul(request.tasks.unwrap_or(1))))?;
    u32::try_from(total).ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(per_job: &'a str, per_node: &'a str, req_str: &'a str, nodes: u64) -> GpuRequest<'a> {
        GpuRequest {
            per_job,
            per_node,
            per_task: "",
            req_str,
            node_count: Some(nodes),
            tasks: None,
        }
    }

    #[test]
    fn every_spelling_of_a_gpu_request_is_read() {
        // Slurm 22.05, as recorded from a real slurmctld (`--gres=gpu:2`, `--gpus=3`).
        assert_eq!(
            requested_gpus(&req("", "gres:gpu:2", "cpu=1,mem=1000M,node=1,billing=1", 1)),
            Some(2)
        );
        assert_eq!(
            requested_gpus(&req("gres:gpu:3", "", "cpu=1,mem=1000M,node=1,billing=1", 1)),
            Some(3)
        );
        // Per node over nodes; typed; newer spellings; the counted request first.
        assert_eq!(requested_gpus(&req("", "gres/gpu:h100:4", "", 2)), Some(8));
        assert_eq!(requested_gpus(&req("", "cpu:4,gres:gpu:8", "", 4)), Some(32));
        assert_eq!(
            requested_gpus(&req("", "gres/gpu:4", "cpu=8,node=2,gres/gpu=8", 2)),
            Some(8)
        );
        assert_eq!(
            requested_gpus(&GpuRequest {
                per_task: "gres/gpu:1",
                tasks: Some(4),
                ..GpuRequest::default()
            }),
            Some(4)
        );
    }

    #[test]
    fn no_gpu_or_nonsense_is_none() {
        assert_eq!(requested_gpus(&req("", "", "cpu=1,mem=1000M", 1)), None);
        assert_eq!(requested_gpus(&req("", "gres:gpu:lots", "", 1)), None);
        assert_eq!(requested_gpus(&req("", "gres:gpu:0", "", 1)), None);
        assert_eq!(requested_gpus(&req("", "gres:gpu:99999999999", "", 99_999_999)), None);
    }
}
