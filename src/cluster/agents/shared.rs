//! Jobs that share a GPU are planned as one unit.
//!
//! A GPU in MIG mode serves several jobs (one per instance, as Slurm's GRES names them), and it
//! has one power limit for all of them: NVML caps the physical GPU, not an instance. Two jobs
//! on one GPU cannot be given two caps, and the agent, holding two leases on the GPU, enforces
//! the lower: the other job would be cut deeper than planned, and the planner would count the
//! GPU's power twice. So before planning, jobs that share any GPU (transitively) become one
//! unit: one planner job whose GPUs are the union of theirs, counted once, with one cap that
//! serves every member.
//!
//! The unit is conservative where its members differ: its elasticity is a PFI only if every
//! member has the same one (else unknown, so the planner's cautious rule applies), its QoS limit
//! the strictest member's, its tier its members' if they agree, its weight the highest member
//! priority; it is not suspendable (suspending one member leaves the others drawing), and it has
//! no profile (what is measured of a shared GPU belongs to no one training configuration). Its
//! id names the members (`mig:<a>+<b>`), so `/v1/jobs` and the ledger say who shares; when a
//! member ends, the unit ends and the remaining jobs are planned anew.

use super::MappedJob;
use flexgate_policies::ids::JobId;
use std::collections::BTreeMap;

/// Merge the jobs that share a GPU (same node and UUID) into one unit each; jobs that share
/// nothing are returned unchanged, in their order.
pub(super) fn merge_shared_gpus(jobs: Vec<MappedJob>) -> Vec<MappedJob> {
    // Union-find over job positions, joined through each GPU's first holder.
    let mut parent: Vec<usize> = (0..jobs.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut holder: BTreeMap<(usize, &str), usize> = BTreeMap::new();
    for (i, job) in jobs.iter().enumerate() {
        for (node, uuid) in &job.gpus {
            match holder.get(&(*node, uuid.as_str())) {
                Some(&first) => {
                    let (a, b) = (root(&mut parent, first), root(&mut parent, i));
                    if a != b {
                        parent[b.max(a)] = a.min(b);
                    }
                }
                None => {
                    holder.insert((*node, uuid.as_str()), i);
                }
            }
        }
    }
    let roots: Vec<usize> = (0..jobs.len()).map(|i| root(&mut parent, i)).collect();
    if roots.iter().enumerate().all(|(i, r)| *r == i) {
        return jobs;
    }
    let mut groups: BTreeMap<usize, Vec<MappedJob>> = BTreeMap::new();
    for (job, r) in jobs.into_iter().zip(roots) {
        groups.entry(r).or_default().push(job);
    }
    groups
        .into_values()
        .filter_map(|mut members| {
            if members.len() == 1 {
                members.pop()
            } else {
                Some(unit(members))
            }
        })
        .collect()
}

/// One planning unit for jobs that share GPUs (see the module docs).
fn unit(members: Vec<MappedJob>) -> MappedJob {
    let mut gpus: Vec<(usize, String)> = members.iter().flat_map(|m| m.gpus.iter().cloned()).collect();
    gpus.sort();
    gpus.dedup();
    let first_pfi = members[0].pfi;
    let pfi = first_pfi.filter(|p| members.iter().all(|m| m.pfi.is_some_and(|q| (q - p).abs() < 1e-9)));
    let max_slowdown = members.iter().filter_map(|m| m.max_slowdown).reduce(f64::min);
    let priority = members.iter().map(|m| m.priority).fold(0.0, f64::max);
    let tier = members[0]
        .tier
        .clone()
        .filter(|t| members.iter().all(|m| m.tier.as_ref() == Some(t)));
    let mut ids: Vec<&str> = members.iter().map(|m| &*m.id).collect();
    ids.sort_unstable();
    MappedJob {
        id: JobId::from(format!("mig:{}", ids.join("+"))),
        slurm_id: None,
        suspendable: false,
        gpus,
        pfi,
        max_slowdown,
        priority,
        signature: None,
        tier,
        started_at: members.iter().filter_map(|m| m.started_at).min(),
        time_limit_s: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, gpus: &[(usize, &str)], pfi: Option<f64>) -> MappedJob {
        MappedJob {
            id: JobId::from(id),
            slurm_id: Some(1),
            suspendable: true,
            gpus: gpus.iter().map(|(n, u)| (*n, (*u).to_string())).collect(),
            pfi,
            max_slowdown: None,
            priority: 1.0,
            signature: Some("sig".into()),
            tier: None,
            started_at: None,
            time_limit_s: None,
        }
    }

    #[test]
    fn jobs_on_one_mig_gpu_become_one_unit_with_one_cap() {
        let mut a = job("101", &[(0, "GPU-a")], Some(2.0));
        a.max_slowdown = Some(0.2);
        let mut b = job("102", &[(0, "GPU-a")], Some(2.0));
        b.max_slowdown = Some(0.1);
        b.priority = 3.0;
        let c = job("103", &[(0, "GPU-b"), (1, "GPU-c")], Some(1.5));
        let merged = merge_shared_gpus(vec![a, c, b]);
        assert_eq!(merged.len(), 2);
        let unit = merged.iter().find(|j| j.id.starts_with("mig:")).expect("a unit");
        assert_eq!(&*unit.id, "mig:101+102");
        // The shared GPU once: one cap, its power counted once.
        assert_eq!(unit.gpus, vec![(0, "GPU-a".to_string())]);
        assert_eq!(unit.pfi, Some(2.0));
        assert_eq!(unit.max_slowdown, Some(0.1), "the strictest member's QoS limit");
        assert!((unit.priority - 3.0).abs() < 1e-12);
        assert!(!unit.suspendable && unit.signature.is_none() && unit.slurm_id.is_none());
        let alone = merged.iter().find(|j| &*j.id == "103").expect("untouched");
        assert_eq!(alone.gpus.len(), 2);
        assert_eq!(alone.pfi, Some(1.5));
    }

    #[test]
    fn sharing_is_transitive_and_disagreeing_knowledge_is_unknown() {
        // 1 and 2 share GPU-x, 2 and 3 share GPU-y: one unit of three, two GPUs.
        let merged = merge_shared_gpus(vec![
            job("1", &[(0, "GPU-x")], Some(2.0)),
            job("2", &[(0, "GPU-x"), (0, "GPU-y")], Some(1.2)),
            job("3", &[(0, "GPU-y")], None),
        ]);
        assert_eq!(merged.len(), 1);
        assert_eq!(&*merged[0].id, "mig:1+2+3");
        assert_eq!(merged[0].gpus.len(), 2);
        assert_eq!(merged[0].pfi, None, "members disagree: the planner's cautious rule");
    }

    #[test]
    fn the_same_uuid_on_two_nodes_is_not_shared() {
        let jobs = vec![job("1", &[(0, "GPU-x")], None), job("2", &[(1, "GPU-x")], None)];
        let merged = merge_shared_gpus(jobs);
        assert_eq!(merged.len(), 2);
        assert!(merged.iter().all(|j| !j.id.starts_with("mig:")));
    }
}
