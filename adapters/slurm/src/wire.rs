//! Tolerant reading of Slurm's JSON job lists: slurmrestd `GET /slurm/v0.0.N/jobs` and
//! `squeue --json` (which prints the same document as the REST version it was built with).
//!
//! The shape changed between versions, and this module reads all of them with one set of
//! structs rather than one per version:
//!
//! | field | v0.0.38 (22.05) | v0.0.39/40 | v0.0.41+ |
//! |---|---|---|---|
//! | `job_state` | `"RUNNING"` | `["RUNNING"]` (base state + flags) | same |
//! | numbers (`start_time`, `time_limit`) | plain, `null` for INFINITE | `{set, infinite, number}` | same |
//! | node list | `job_resources.allocated_nodes[].nodename` | same | `job_resources.nodes.allocation[].name` |
//! | per-node GPUs | `gres_detail[]`, one string per node, same order | same | same |
//!
//! Unknown fields are skipped without being stored, so a large response is streamed into small
//! structs. A field of an unexpected type reads as absent instead of failing the whole
//! document; a job without a usable `job_id` is skipped and reported.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::error::SlurmError;
use crate::gres::parse_gpu_detail;
use crate::hostlist::expand_hostlist;
use crate::model::{JobSnapshot, JobState, NodeGpus, SlurmJob, Source};
use crate::rest::excerpt;
use crate::tags::job_flex_tags;

/// Slurm's 32-bit "no value" and "infinite" markers, which older versions print raw.
const NO_VAL32: i64 = 0xffff_fffe;

/// A number as Slurm writes it: plain, `null`, a string, or (v0.0.39+) `{set, infinite,
/// number}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum NoVal {
    #[default]
    Unset,
    Infinite,
    Int(i64),
}

impl NoVal {
    fn from_value(v: &Value) -> NoVal {
        match v {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_u64().map(|_| i64::MAX))
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                        .map(|f| f as i64)
                })
                .map_or(NoVal::Unset, NoVal::Int),
            Value::String(s) => {
                let s = s.trim();
                if s.eq_ignore_ascii_case("infinite") || s.eq_ignore_ascii_case("unlimited") {
                    NoVal::Infinite
                } else {
                    s.parse().map_or(NoVal::Unset, NoVal::Int)
                }
            }
            Value::Object(o) => {
                if o.get("infinite").and_then(Value::as_bool) == Some(true) {
                    NoVal::Infinite
                } else if o.get("set").and_then(Value::as_bool) == Some(false) {
                    NoVal::Unset
                } else {
                    o.get("number").map_or(NoVal::Unset, NoVal::from_value)
                }
            }
            _ => NoVal::Unset,
        }
    }
}

impl<'de> Deserialize<'de> for NoVal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(NoVal::from_value(&Value::deserialize(d)?))
    }
}

/// A string field; numbers become their text, anything else the empty string.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LStr(pub String);

impl<'de> Deserialize<'de> for LStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(LStr(match Value::deserialize(d)? {
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            _ => String::new(),
        }))
    }
}

/// A list of strings; a lone string is a one-element list, non-strings are dropped.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LStrings(pub Vec<String>);

impl<'de> Deserialize<'de> for LStrings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(LStrings(match Value::deserialize(d)? {
            Value::String(s) => vec![s],
            Value::Array(items) => items
                .into_iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }))
    }
}

/// The fields of one job record that the gateway uses.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WireJob {
    job_id: NoVal,
    name: LStr,
    user_name: LStr,
    user_id: NoVal,
    partition: LStr,
    job_state: LStrings,
    comment: LStr,
    admin_comment: LStr,
    gres_detail: LStrings,
    job_resources: Value,
    nodes: LStr,
    start_time: NoVal,
    time_limit: NoVal,
    tres_per_job: LStr,
    tres_per_node: LStr,
    tres_per_task: LStr,
    tres_req_str: LStr,
    node_count: NoVal,
    num_tasks: NoVal,
}

/// The top level of a job list.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireJobs {
    jobs: Option<Vec<WireJob>>,
    errors: Option<Vec<Value>>,
    warnings: Option<Vec<Value>>,
}

/// An entry of a Slurm response's `errors` or `warnings` list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmMessage {
    /// Slurm's error number (`-1` for "Unspecified error"), when given.
    pub error_number: Option<i64>,
    /// Slurm's error text (`Unspecified error`).
    pub error: String,
    /// What Slurm was doing (`Failed while looking for jobs`).
    pub description: String,
    /// The call that failed (`slurm_load_jobs`).
    pub source: String,
}

impl SlurmMessage {
    pub(crate) fn from_value(v: &Value) -> SlurmMessage {
        let s = |k: &str| match v.get(k) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => String::new(),
        };
        SlurmMessage {
            error_number: v
                .get("error_number")
                .or_else(|| v.get("error_code"))
                .and_then(Value::as_i64),
            error: s("error"),
            description: s("description"),
            source: s("source"),
        }
    }
}

impl std::fmt::Display for SlurmMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if !self.description.is_empty() {
            parts.push(self.description.clone());
        }
        if !self.source.is_empty() || !self.error.is_empty() {
            parts.push(format!("({}: {})", self.source, self.error));
        }
        if let Some(n) = self.error_number {
            parts.push(format!("[error {n}]"));
        }
        if parts.is_empty() {
            f.write_str("(empty message)")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

/// A job list read from JSON.
#[derive(Debug, Default)]
pub(crate) struct ParsedJobs {
    pub jobs: Vec<SlurmJob>,
    pub errors: Vec<SlurmMessage>,
    pub warnings: Vec<SlurmMessage>,
    /// Records skipped, with why.
    pub skipped: Vec<String>,
    /// False when the document had no `jobs` member at all (an error document).
    pub had_jobs: bool,
}

/// Reads a job list. Fails only on malformed JSON, a top level that is not an object, or a
/// `jobs` member that is not a list of objects.
pub(crate) fn parse_jobs(body: &[u8]) -> Result<ParsedJobs, serde_json::Error> {
    // serde's derive would also accept a JSON array as the struct's fields in order.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(<serde_json::Error as serde::de::Error>::custom(
            "the document is not a JSON object",
        ));
    }
    let doc: WireJobs = serde_json::from_slice(body)?;
    let mut out = ParsedJobs {
        had_jobs: doc.jobs.is_some(),
        errors: doc
            .errors
            .unwrap_or_default()
            .iter()
            .map(SlurmMessage::from_value)
            .collect(),
        warnings: doc
            .warnings
            .unwrap_or_default()
            .iter()
            .map(SlurmMessage::from_value)
            .collect(),
        ..ParsedJobs::default()
    };
    for (i, wire) in doc.jobs.unwrap_or_default().into_iter().enumerate() {
        match convert(wire) {
            Ok(job) => out.jobs.push(job),
            Err(why) => out.skipped.push(format!("job record #{i}: {why}")),
        }
    }
    Ok(out)
}

/// Reads a recorded job list (a slurmrestd `/jobs` body or `squeue --json` output) into jobs
/// of every state, as [`crate::SlurmInventory`] would. `what` names the document in errors.
/// For replaying captures and for tests; the inventory uses the same reader.
pub fn read_job_list(body: &[u8], what: &str, source: Source) -> Result<JobSnapshot, SlurmError> {
    let parsed = parse_jobs(body).map_err(|e| SlurmError::NotJson {
        what: what.to_string(),
        reason: e.to_string(),
        excerpt: excerpt(body),
    })?;
    if !parsed.had_jobs {
        if !parsed.errors.is_empty() {
            return Err(SlurmError::Slurm {
                url: what.to_string(),
                status: 200,
                errors: parsed.errors,
            });
        }
        return Err(SlurmError::NotJson {
            what: what.to_string(),
            reason: "the object has no \"jobs\" list".into(),
            excerpt: excerpt(body),
        });
    }
    Ok(parsed.into_snapshot(source))
}

impl ParsedJobs {
    pub(crate) fn into_snapshot(self, source: Source) -> JobSnapshot {
        let mut slurm_messages: Vec<String> = self.errors.iter().map(|m| format!("error: {m}")).collect();
        slurm_messages.extend(self.warnings.iter().map(|m| format!("warning: {m}")));
        slurm_messages.extend(self.skipped);
        JobSnapshot {
            jobs: self.jobs,
            source,
            rest_error: None,
            slurm_messages,
        }
    }
}

fn convert(w: WireJob) -> Result<SlurmJob, String> {
    let id = match w.job_id {
        NoVal::Int(n) if n > 0 && n < NO_VAL32 => n as u32,
        other => return Err(format!("no usable job_id ({other:?}); skipped")),
    };
    let mut warnings = Vec::new();
    let state = JobState::from_slurm_list(&w.job_state.0);
    let user = if w.user_name.0.is_empty() {
        match w.user_id {
            NoVal::Int(uid) => uid.to_string(),
            _ => String::new(),
        }
    } else {
        w.user_name.0
    };

    let mut names = node_names(&w.job_resources);
    if names.is_empty() && matches!(state, JobState::Running | JobState::Suspended | JobState::Completing) {
        match expand_hostlist(&w.nodes.0) {
            Ok(n) => names = n,
            Err(e) => warnings.push(format!("nodes: {e}")),
        }
    }
    let nodes = zip_gres(&names, &w.gres_detail.0, &mut warnings);

    let tags = job_flex_tags(&w.comment.0, &w.admin_comment.0);
    warnings.extend(tags.warnings);

    let start_time = match w.start_time {
        NoVal::Int(secs) if secs > 0 => chrono::DateTime::from_timestamp(secs, 0),
        _ => None,
    };
    let time_limit_minutes = match w.time_limit {
        NoVal::Int(m) if (0..NO_VAL32).contains(&m) => Some(m as u64),
        _ => None,
    };
    let node_count = match w.node_count {
        NoVal::Int(n) if n > 0 && n < NO_VAL32 => Some(n as u64),
        _ => None,
    };
    let tasks = match w.num_tasks {
        NoVal::Int(n) if n > 0 && n < NO_VAL32 => Some(n as u64),
        _ => None,
    };
    let gpus_requested = crate::request::requested_gpus(&crate::request::GpuRequest {
        per_job: &w.tres_per_job.0,
        per_node: &w.tres_per_node.0,
        per_task: &w.tres_per_task.0,
        req_str: &w.tres_req_str.0,
        node_count,
        tasks,
    });
    Ok(SlurmJob {
        id,
        name: w.name.0,
        user,
        partition: w.partition.0,
        state,
        nodes,
        comment: w.comment.0,
        admin_comment: w.admin_comment.0,
        flex: tags.tags,
        start_time,
        time_limit_minutes,
        gpus_requested,
        warnings,
    })
}

/// Node names in allocation order from `job_resources`, whichever version wrote it.
fn node_names(res: &Value) -> Vec<String> {
    let name_of = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    // v0.0.38–40: allocated_nodes: [{nodename, ...}] (an index-keyed object in older versions)
    match res.get("allocated_nodes") {
        Some(Value::Array(items)) => return items.iter().filter_map(|n| name_of(n, "nodename")).collect(),
        Some(Value::Object(map)) => {
            let mut keyed: Vec<(u64, String)> = map
                .iter()
                .filter_map(|(k, v)| Some((k.parse().ok()?, name_of(v, "nodename")?)))
                .collect();
            keyed.sort();
            return keyed.into_iter().map(|(_, n)| n).collect();
        }
        _ => {}
    }
    // v0.0.41+: nodes: {allocation: [{index, name, ...}]}
    if let Some(Value::Array(items)) = res.get("nodes").and_then(|n| n.get("allocation")) {
        let mut keyed: Vec<(u64, String)> = items
            .iter()
            .enumerate()
            .filter_map(|(pos, n)| {
                let index = n.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                Some((index, name_of(n, "name")?))
            })
            .collect();
        keyed.sort_by_key(|(i, _)| *i);
        return keyed.into_iter().map(|(_, n)| n).collect();
    }
    Vec::new()
}

/// Pairs node names with `gres_detail` entries (same order, one per node).
fn zip_gres(names: &[String], gres: &[String], warnings: &mut Vec<String>) -> Vec<NodeGpus> {
    if !gres.is_empty() && gres.len() != names.len() {
        warnings.push(format!(
            "gres_detail has {} entries for {} nodes; GPUs of unmatched nodes are unknown",
            gres.len(),
            names.len()
        ));
    }
    names
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let mut out = NodeGpus {
                node: node.clone(),
                gres_type: None,
                indices: Vec::new(),
                indices_known: true,
            };
            if gres.is_empty() {
                return out; // no GRES at all: the job holds no GPUs
            }
            let Some(detail) = gres.get(i) else {
                out.indices_known = false;
                return out;
            };
            match parse_gpu_detail(detail) {
                Ok(None) => {}
                Ok(Some(d)) => {
                    if !d.indices_known {
                        warnings.push(format!(
                            "node {node}: Slurm gives no GPU indices ({detail:?}); all its GPUs may be this job's"
                        ));
                    } else if let Some(c) = d.count.filter(|&c| c != d.indices.len() as u64) {
                        warnings.push(format!(
                            "node {node}: gres_detail {detail:?} counts {c} GPUs but lists {} indices",
                            d.indices.len()
                        ));
                    }
                    out.gres_type = d.gres_type;
                    out.indices = d.indices;
                    out.indices_known = d.indices_known;
                }
                Err(e) => {
                    warnings.push(format!("node {node}: {e}"));
                    out.indices_known = false;
                }
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(job: Value) -> SlurmJob {
        let body = serde_json::to_vec(&json!({ "jobs": [job] })).expect("json");
        let mut parsed = parse_jobs(&body).expect("parses");
        assert!(parsed.skipped.is_empty(), "{:?}", parsed.skipped);
        parsed.jobs.remove(0)
    }

    #[test]
    fn novals() {
        let n = |v: Value| NoVal::from_value(&v);
        assert_eq!(n(json!(5)), NoVal::Int(5));
        assert_eq!(n(json!(null)), NoVal::Unset);
        assert_eq!(n(json!("12")), NoVal::Int(12));
        assert_eq!(n(json!("INFINITE")), NoVal::Infinite);
        assert_eq!(n(json!({"set": true, "infinite": false, "number": 60})), NoVal::Int(60));
        assert_eq!(n(json!({"set": false, "infinite": false, "number": 0})), NoVal::Unset);
        assert_eq!(n(json!({"set": true, "infinite": true, "number": 0})), NoVal::Infinite);
        assert_eq!(n(json!(1.9)), NoVal::Unset);
        assert_eq!(n(json!(2.0)), NoVal::Int(2));
        assert_eq!(n(json!(u64::MAX)), NoVal::Int(i64::MAX));
        assert_eq!(n(json!([1])), NoVal::Unset);
    }

    #[test]
    fn v38_shape() {
        let j = one(json!({
            "job_id": 7, "name": "train", "user_name": "alice", "partition": "gpu",
            "job_state": "RUNNING", "comment": "flexgate:tier=batch", "admin_comment": "",
            "gres_detail": ["gpu:h100:2(IDX:0-1)"],
            "job_resources": {"allocated_nodes": [{"nodename": "n1"}]},
            "start_time": 1_700_000_000, "time_limit": null
        }));
        assert_eq!(j.id, 7);
        assert_eq!(j.state, JobState::Running);
        assert_eq!(j.nodes.len(), 1);
        assert_eq!(
            (j.nodes[0].node.as_str(), j.nodes[0].indices.clone()),
            ("n1", vec![0, 1])
        );
        assert_eq!(j.flex.tier.as_deref(), Some("batch"));
        assert_eq!(j.start_time.map(|t| t.timestamp()), Some(1_700_000_000));
        assert_eq!(j.time_limit_minutes, None);
    }

    #[test]
    fn v41_shape() {
        let j = one(json!({
            "job_id": 8, "user_name": "", "user_id": 1001,
            "job_state": ["RUNNING"],
            "gres_detail": ["gpu:h100:1(IDX:3)", "gpu:h100:2(IDX:0,5)"],
            "job_resources": {"nodes": {"count": 2, "list": "n[1-2]", "allocation": [
                {"index": 1, "name": "n2"}, {"index": 0, "name": "n1"}]}},
            "start_time": {"set": true, "infinite": false, "number": 1_700_000_100},
            "time_limit": {"set": true, "infinite": false, "number": 120}
        }));
        assert_eq!(j.user, "1001");
        assert_eq!(j.nodes[0].node, "n1");
        assert_eq!(j.nodes[0].indices, vec![3]);
        assert_eq!(j.nodes[1].node, "n2");
        assert_eq!(j.nodes[1].indices, vec![0, 5]);
        assert_eq!(j.time_limit_minutes, Some(120));
    }

    #[test]
    fn hostlist_fallback_and_mismatch() {
        let j = one(json!({
            "job_id": 9, "job_state": "RUNNING", "nodes": "g[01-03]",
            "gres_detail": ["gpu:1(IDX:0)", "gpu:1(IDX:1)"]
        }));
        assert_eq!(
            j.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
            ["g01", "g02", "g03"]
        );
        assert!(j.nodes[0].indices_known && j.nodes[1].indices_known);
        assert!(!j.nodes[2].indices_known);
        assert!(
            j.warnings.iter().any(|w| w.contains("2 entries for 3 nodes")),
            "{:?}",
            j.warnings
        );
    }

    #[test]
    fn bad_gres_marks_node_unknown() {
        let j = one(json!({
            "job_id": 10, "job_state": "RUNNING", "gres_detail": ["gpu:2(IDX:0-"],
            "job_resources": {"allocated_nodes": [{"nodename": "n1"}]}
        }));
        assert!(!j.nodes[0].indices_known);
        assert!(
            j.warnings.iter().any(|w| w.contains("gpu:2(IDX:0-")),
            "{:?}",
            j.warnings
        );
    }

    #[test]
    fn count_mismatch_warns() {
        let j = one(json!({
            "job_id": 11, "job_state": "RUNNING", "gres_detail": ["gpu:2(IDX:0-1,4)"],
            "job_resources": {"allocated_nodes": [{"nodename": "n1"}]}
        }));
        assert_eq!(j.nodes[0].indices, vec![0, 1, 4]);
        assert!(j.warnings.iter().any(|w| w.contains("counts 2")));
    }

    #[test]
    fn skips_records_without_id_and_odd_types() {
        let body = br#"{"jobs": [{"name": "no id"}, {"job_id": "abc"}, {"job_id": 4294967294},
            {"job_id": 3, "job_state": 5, "name": ["x"], "gres_detail": {"a": 1}, "job_resources": "weird"}],
            "errors": [{"error_number": 2, "error": "e", "description": "d", "source": "s"}], "meta": 5}"#;
        let p = parse_jobs(body).expect("parses");
        assert_eq!(p.jobs.len(), 1);
        assert_eq!(p.skipped.len(), 3);
        assert_eq!(p.jobs[0].id, 3);
        assert_eq!(p.jobs[0].state, JobState::Other(String::new()));
        assert_eq!(p.errors[0].error_number, Some(2));
        assert_eq!(p.errors[0].to_string(), "d (s: e) [error 2]");
    }

    #[test]
    fn structural_garbage_is_an_error_not_a_panic() {
        for body in [
            &b"[]"[..],
            b"\"x\"",
            b"{\"jobs\": 5}",
            b"{\"jobs\": [1]}",
            b"{",
            b"",
            b"\xff\xfe",
        ] {
            assert!(parse_jobs(body).is_err(), "{:?}", String::from_utf8_lossy(body));
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let body = format!("{{\"jobs\": [{{\"job_id\": 1, \"job_resources\": {deep}}}]}}");
        assert!(
            parse_jobs(body.as_bytes()).is_err(),
            "recursion limit, no stack overflow"
        );
        assert!(parse_jobs(b"{}").expect("empty object").jobs.is_empty());
        assert!(!parse_jobs(b"{}").expect("ok").had_jobs);
    }
}
