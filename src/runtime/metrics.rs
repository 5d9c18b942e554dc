//! `GET /metrics`: the gateway's Prometheus exposition, through the Prometheus project's own
//! client library (`prometheus-client`, OpenMetrics text).
//!
//! Names are in base units (`_watts`, `_seconds`, counters `_total`); a figure that does not
//! exist now (no ceiling without an event, no meter reading before the first telemetry) leaves
//! its series out instead of writing NaN, so an alert such as "meter over ceiling" is simply
//! not evaluated while there is no ceiling. Two kinds of metric:
//!
//! - **read at scrape** from the published snapshot (counters kept by the controller, gauges of
//!   the state now): a fresh registry of constant metrics per scrape ([`Scrape`]), so a scrape
//!   never waits for a decision;
//! - **observed as they happen** and kept here: the latency histograms (ack, plan, dispatch,
//!   ledger flush) and the ledger's flush failures.
//!
//! The node agent keeps its own writer (`adapters/agent/src/metrics.rs`): its GPU series must
//! carry dcgm-exporter's exact names, and a counter such as
//! `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` has no `_total`, which an OpenMetrics library adds.

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::time::Duration;

/// The content type of the exposition (Prometheus negotiates OpenMetrics and parses it).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Label pairs of one series.
type Labels = Vec<(String, String)>;

/// The metrics observed as they happen, and the registry that holds them.
#[derive(Debug)]
pub struct GatewayMetrics {
    registry: Registry,
    ack_latency: Histogram,
    plan_duration: Histogram,
    dispatch_duration: Histogram,
    ledger_flush: Histogram,
    ledger_flush_failures: Counter,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl GatewayMetrics {
    /// The histograms (buckets from 0.1 ms to about 13 s: an ack is a ledger flush, a few ms on
    /// a healthy disk; a dispatch to a thousand agents can take seconds), the flush failures and
    /// `flexgate_build_info`.
    #[must_use]
    pub fn new() -> Self {
        let buckets = || Histogram::new(exponential_buckets(0.000_1, 2.0, 18));
        let metrics = Self {
            registry: Registry::default(),
            ack_latency: buckets(),
            plan_duration: buckets(),
            dispatch_duration: buckets(),
            ledger_flush: buckets(),
            ledger_flush_failures: Counter::default(),
        };
        let mut registry = Registry::default();
        registry.register_with_unit(
            "flexgate_ack_latency",
            "From an event's arrival to its acknowledgement being durable in the ledger (every source)",
            Unit::Seconds,
            metrics.ack_latency.clone(),
        );
        registry.register_with_unit(
            "flexgate_plan_duration",
            "Time the controller took to decide a pass that made a plan (under the decision lock)",
            Unit::Seconds,
            metrics.plan_duration.clone(),
        );
        registry.register_with_unit(
            "flexgate_dispatch_duration",
            "From sending a round of cap commands to the backend to having every result back",
            Unit::Seconds,
            metrics.dispatch_duration.clone(),
        );
        registry.register_with_unit(
            "flexgate_ledger_flush_duration",
            "One ledger group commit: write, flush and fdatasync of a batch of records",
            Unit::Seconds,
            metrics.ledger_flush.clone(),
        );
        registry.register(
            "flexgate_ledger_flush_failures",
            "Ledger group commits that failed; after one the writer stops and nothing more is acknowledged",
            metrics.ledger_flush_failures.clone(),
        );
        registry.register(
            "flexgate_build",
            "The running build: version and the Rust compiler it was built for",
            Info::new(vec![
                ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
                ("name".to_string(), env!("CARGO_PKG_NAME").to_string()),
            ]),
        );
        Self { registry, ..metrics }
    }

    /// An acknowledgement became durable `elapsed` after its event arrived.
    pub fn observe_ack(&self, elapsed: Duration) {
        self.ack_latency.observe(elapsed.as_secs_f64());
    }

    /// A pass that made a plan took `elapsed` to decide.
    pub fn observe_plan(&self, elapsed: Duration) {
        self.plan_duration.observe(elapsed.as_secs_f64());
    }

    /// A round of cap commands took `elapsed` to be answered.
    pub fn observe_dispatch(&self, elapsed: Duration) {
        self.dispatch_duration.observe(elapsed.as_secs_f64());
    }

    /// A ledger group commit took `elapsed`; `ok` is false when it failed.
    pub fn observe_ledger_flush(&self, elapsed: Duration, ok: bool) {
        self.ledger_flush.observe(elapsed.as_secs_f64());
        if !ok {
            self.ledger_flush_failures.inc();
        }
    }

    /// The exposition: the figures of `now`, then what was observed.
    #[must_use]
    pub fn render(&self, now: &Scrape) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an error here would be a bug in the library.
        let written = encode_registry(&mut out, &now.registry())
            .and_then(|()| encode_registry(&mut out, &self.registry))
            .and_then(|()| encode_eof(&mut out));
        if let Err(e) = written {
            tracing::error!("metrics exposition failed: {e}");
        }
        out
    }
}

/// What one scrape reads from the published snapshot, in base units. `None`: no such figure
/// now, and its series is left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    /// Events acknowledged with opt in.
    pub events_accepted: u64,
    /// Events refused, by the gateway or a protocol adapter.
    pub events_refused: u64,
    /// Plans computed and recorded.
    pub plans: u64,
    /// Cap commands the backend did not confirm.
    pub dispatch_failures: u64,
    /// Confirmed caps later found not in force.
    pub cap_drifts: u64,
    /// Unconfirmed caps re-sent.
    pub cap_retries: u64,
    /// Closed-loop trim adjustments.
    pub trims: u64,
    /// HTTP connections open now.
    pub http_connections_open: u64,
    /// HTTP connections refused at a limit.
    pub http_connections_refused: u64,
    /// Events ramping, active or recovering.
    pub active_events: u64,
    /// Running jobs.
    pub jobs: u64,
    /// Jobs whose last cap the backend has not confirmed.
    pub caps_unconfirmed: u64,
    /// Jobs the gateway suspended.
    pub jobs_suspended: u64,
    /// Meter ceiling in force, W.
    pub meter_ceiling_watts: Option<f64>,
    /// GPU-board budget of the plan in force, W.
    pub gpu_budget_watts: Option<f64>,
    /// The meter figure acted on (measured or the model's), W, and where it comes from.
    pub meter: Option<(f64, flexgate_policies::meter::Quality)>,
    /// Measured GPU-board power of the fleet, W.
    pub gpu_power_watts: Option<f64>,
    /// Closed-loop trim subtracted from the budget, W.
    pub trim_watts: f64,
    /// How far the site could lower its meter power now, W (every job at its floor).
    pub flex_available_watts: Option<f64>,
    /// Records in the ledger.
    pub ledger_records: u64,
    /// Whether the ledger's writer has stopped after a failure.
    pub ledger_writer_failed: bool,
    /// Per meter source: (id, readings refused, read errors).
    pub meter_sources: Vec<(String, u64, u64)>,
    /// Per node agent: (node, whether it answered the last poll).
    pub agents: Vec<(String, bool)>,
    /// Among the site's replicas (`[ha]`; absent for a single gateway).
    pub replication: Option<super::views::ReplicationView>,
    /// Changes of the leading term this replica has seen since it started.
    pub term_changes: u64,
}

impl Scrape {
    /// A registry of constant metrics holding these figures.
    fn registry(&self) -> Registry {
        let mut r = Registry::default();
        let counter = |r: &mut Registry, name: &str, help: &str, v: u64| {
            r.register(name, help, ConstCounter::new(v));
        };
        counter(
            &mut r,
            "flexgate_events_accepted",
            "Events acknowledged with opt in",
            self.events_accepted,
        );
        counter(
            &mut r,
            "flexgate_events_refused",
            "Events refused (invalid, wrong site, unmappable), by the gateway or by a protocol adapter",
            self.events_refused,
        );
        counter(&mut r, "flexgate_plans", "Plans computed and recorded", self.plans);
        counter(
            &mut r,
            "flexgate_dispatch_failures",
            "Cap commands not confirmed by the backend",
            self.dispatch_failures,
        );
        counter(
            &mut r,
            "flexgate_cap_drifts",
            "Confirmed caps the reconcile later found not in force (GPU reset, limit raised by hand)",
            self.cap_drifts,
        );
        counter(
            &mut r,
            "flexgate_cap_retries",
            "Unconfirmed caps re-sent to jobs whose nodes answer again",
            self.cap_retries,
        );
        counter(&mut r, "flexgate_trims", "Closed-loop trim adjustments", self.trims);
        counter(
            &mut r,
            "flexgate_http_connections_refused",
            "HTTP connections answered 503 and closed because a connection limit was reached",
            self.http_connections_refused,
        );
        let count = |r: &mut Registry, name: &str, help: &str, v: u64| {
            r.register(name, help, ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)));
        };
        count(
            &mut r,
            "flexgate_http_connections_open",
            "HTTP connections open now",
            self.http_connections_open,
        );
        count(
            &mut r,
            "flexgate_active_events",
            "Events ramping, active or recovering",
            self.active_events,
        );
        count(&mut r, "flexgate_jobs", "Running jobs", self.jobs);
        count(
            &mut r,
            "flexgate_caps_unconfirmed",
            "Jobs whose last cap the backend has not confirmed (counted at their measured power as fixed load)",
            self.caps_unconfirmed,
        );
        count(
            &mut r,
            "flexgate_jobs_suspended",
            "Jobs the gateway suspended for a shortfall",
            self.jobs_suspended,
        );
        count(
            &mut r,
            "flexgate_ledger_records",
            "Records in the ledger",
            self.ledger_records,
        );
        count(
            &mut r,
            "flexgate_ledger_writer_failed",
            "1 when the ledger's writer stopped after a failure: nothing more is acknowledged until a restart",
            u64::from(self.ledger_writer_failed),
        );
        let watts = |r: &mut Registry, name: &str, help: &str, v: Option<f64>| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                r.register_with_unit(name, help, Unit::Other("watts".into()), ConstGauge::new(v));
            }
        };
        watts(
            &mut r,
            "flexgate_meter_ceiling",
            "Meter ceiling in force (absent when no event constrains the site)",
            self.meter_ceiling_watts,
        );
        watts(
            &mut r,
            "flexgate_gpu_budget",
            "GPU-board budget of the plan in force, after trim and fixed load (absent without a plan)",
            self.gpu_budget_watts,
        );
        watts(
            &mut r,
            "flexgate_meter",
            "Last meter figure the gateway acted on, measured or the facility model's: see flexgate_meter_quality (absent before telemetry)",
            self.meter.map(|(w, _)| w),
        );
        watts(
            &mut r,
            "flexgate_measured_meter",
            "Last meter power read from the meter itself (absent when the figure is a model's)",
            self.meter.filter(|(_, q)| q.is_measured()).map(|(w, _)| w),
        );
        watts(
            &mut r,
            "flexgate_gpu_power",
            "Last measured GPU-board power of the fleet",
            self.gpu_power_watts,
        );
        watts(
            &mut r,
            "flexgate_trim",
            "Closed-loop trim subtracted from the GPU budget",
            Some(self.trim_watts),
        );
        watts(
            &mut r,
            "flexgate_flex_available",
            "How far the site could lower its meter power now, every job at its floor (the facility model's lower bound)",
            self.flex_available_watts,
        );
        if let Some((_, quality)) = self.meter {
            let family = Family::<Labels, Gauge>::default();
            for q in flexgate_policies::meter::Quality::ALL {
                family
                    .get_or_create(&vec![("quality".to_string(), q.as_str().to_string())])
                    .set(i64::from(q == quality));
            }
            r.register(
                "flexgate_meter_quality",
                "1 for where the meter figure comes from now: measured, model (no meter source), stale or missing (a source failed; the model's upper estimate stands in)",
                family,
            );
        }
        if !self.meter_sources.is_empty() {
            let refused = Family::<Labels, Counter>::default();
            let errors = Family::<Labels, Counter>::default();
            for (source, refused_n, errors_n) in &self.meter_sources {
                let labels = vec![("source".to_string(), source.clone())];
                refused.get_or_create(&labels).inc_by(*refused_n);
                errors.get_or_create(&labels).inc_by(*errors_n);
            }
            r.register(
                "flexgate_meter_readings_refused",
                "Meter readings the screen refused (not finite, negative, absurd, an unconfirmed jump), per source",
                refused,
            );
            r.register(
                "flexgate_meter_read_errors",
                "Meter reads that failed (timeout, refused connection, exception, bad answer), per source",
                errors,
            );
        }
        if let Some(ha) = &self.replication {
            let gauge = |value: i64| {
                let g = Gauge::<i64>::default();
                g.set(value);
                g
            };
            r.register(
                "flexgate_ha_leader",
                "1 when this replica leads its site, 0 when it is a standby",
                gauge(i64::from(ha.role == "leader")),
            );
            r.register(
                "flexgate_ha_leader_known",
                "1 when this replica knows a leader (itself or another), 0 while no replica leads (an election, or etcd without quorum)",
                gauge(i64::from(ha.leader.is_some())),
            );
            if let Some(epoch) = ha.epoch {
                r.register(
                    "flexgate_ha_epoch",
                    "The epoch of the leading term as this replica knows it",
                    gauge(i64::try_from(epoch).unwrap_or(i64::MAX)),
                );
            }
            counter(
                &mut r,
                "flexgate_ha_term_changes",
                "Changes of the leading term this replica has seen since it started",
                self.term_changes,
            );
            let lag = Family::<Labels, Gauge>::default();
            for replica in &ha.replicas {
                lag.get_or_create(&vec![("replica".to_string(), replica.name.clone())])
                    .set(i64::try_from(replica.lag_records).unwrap_or(i64::MAX));
            }
            r.register(
                "flexgate_ha_replica_lag_records",
                "Committed ledger records each registered replica has not taken in yet",
                lag,
            );
        }
        if !self.agents.is_empty() {
            let up = Family::<Labels, Gauge>::default();
            for (node, answered) in &self.agents {
                up.get_or_create(&vec![("node".to_string(), node.clone())])
                    .set(i64::from(*answered));
            }
            r.register(
                "flexgate_agent_up",
                "1 when the node's agent answered the gateway's last poll, 0 when it did not",
                up,
            );
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexgate_policies::meter::Quality;

    fn sample_names(text: &str) -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| l.split([' ', '{']).next().map(str::to_string))
            .collect()
    }

    #[test]
    fn an_idle_gateway_writes_no_nan_and_leaves_absent_figures_out() {
        let metrics = GatewayMetrics::new();
        let text = metrics.render(&Scrape::default());
        assert!(!text.contains("NaN"), "{text}");
        let names = sample_names(&text);
        for absent in [
            "flexgate_meter_ceiling_watts",
            "flexgate_gpu_budget_watts",
            "flexgate_meter_watts",
        ] {
            assert!(!names.iter().any(|n| n == absent), "{absent} without a figure:\n{text}");
        }
        assert!(names.iter().any(|n| n == "flexgate_plans_total"));
        assert!(names.iter().any(|n| n == "flexgate_build_info"));
        assert!(text.ends_with("# EOF\n"));
        assert!(!text.contains("..\n"), "the library ends help with a period: {text}");
    }

    #[test]
    fn figures_are_in_base_units_and_histograms_count_what_they_observe() {
        let metrics = GatewayMetrics::new();
        metrics.observe_ack(Duration::from_millis(3));
        metrics.observe_ack(Duration::from_millis(5));
        metrics.observe_ledger_flush(Duration::from_millis(2), false);
        let scrape = Scrape {
            meter_ceiling_watts: Some(127_200.0),
            meter: Some((121_900.0, Quality::Stale)),
            gpu_budget_watts: Some(f64::NAN),
            agents: vec![("node-a".into(), true), ("node-b".into(), false)],
            ..Scrape::default()
        };
        let text = metrics.render(&scrape);
        assert!(text.contains("flexgate_meter_ceiling_watts 127200.0"), "{text}");
        assert!(text.contains("flexgate_meter_watts 121900.0"), "{text}");
        // A stale figure is not shown as measured; a NaN figure is left out.
        assert!(!text.contains("flexgate_measured_meter_watts "), "{text}");
        assert!(!text.contains("flexgate_gpu_budget_watts "), "{text}");
        assert!(text.contains("flexgate_meter_quality{quality=\"stale\"} 1"), "{text}");
        assert!(
            text.contains("flexgate_meter_quality{quality=\"measured\"} 0"),
            "{text}"
        );
        assert!(text.contains("flexgate_agent_up{node=\"node-b\"} 0"), "{text}");
        assert!(text.contains("flexgate_ack_latency_seconds_count 2"), "{text}");
        assert!(text.contains("flexgate_ledger_flush_failures_total 1"), "{text}");
        assert!(text.contains("# UNIT flexgate_meter_ceiling_watts watts"), "{text}");
        for name in sample_names(&text) {
            assert!(
                !name.ends_with("_kw") && !name.ends_with("_w") && !name.contains("NaN"),
                "{name} is not in base units"
            );
        }
    }

    /// Every series name the gateway and the agents write (samples, and TYPE lines for
    /// families that are empty in this render).
    fn exported_names() -> std::collections::BTreeSet<String> {
        let metrics = GatewayMetrics::new();
        let full = Scrape {
            meter_ceiling_watts: Some(1.0),
            gpu_budget_watts: Some(1.0),
            meter: Some((1.0, Quality::Measured)),
            gpu_power_watts: Some(1.0),
            flex_available_watts: Some(1.0),
            meter_sources: vec![("incomer".into(), 0, 0)],
            agents: vec![("node-a".into(), true)],
            replication: Some(super::super::views::ReplicationView {
                replica: "gw-a".into(),
                role: "leader".into(),
                epoch: Some(7),
                leader: Some("gw-a".into()),
                leader_url: None,
                reason: None,
                committed_seq: Some(10),
                replicas: vec![super::super::views::ReplicaView {
                    name: "gw-b".into(),
                    url: None,
                    applied_seq: 8,
                    lag_records: 2,
                }],
                updated_at: None,
            }),
            term_changes: 1,
            ..Scrape::default()
        };
        let mut text = metrics.render(&full);
        let mut agent = flexgate_agent::metrics::render("node-a", &[]);
        flexgate_agent::metrics::render_throughput(&mut agent, "node-a", &[], &std::collections::BTreeMap::new());
        flexgate_agent::metrics::render_leases(
            &mut agent,
            "node-a",
            flexgate_agent::metrics::LeaseCounts {
                held: 0,
                expired_total: 0,
                restores_pending: 0,
                gpus_unavailable: 0,
                fence_epoch: 0,
                fenced_total: 0,
            },
        );
        text.push_str(&agent);
        let mut names: std::collections::BTreeSet<String> = sample_names(&text).into_iter().collect();
        names.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .filter_map(|l| l.split(' ').next().map(str::to_string)),
        );
        names
    }

    /// The `flexgate_*` names a PromQL expression refers to.
    fn referenced(expr: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = expr;
        while let Some(at) = rest.find("flexgate_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
        out
    }

    #[test]
    fn the_grafana_dashboard_and_the_alert_rules_name_only_series_we_export() {
        let names = exported_names();
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../deploy/grafana/flexgate-dashboard.json")).expect("JSON");
        assert_eq!(dashboard["uid"], "flexgate-overview");
        let panels = dashboard["panels"].as_array().expect("panels");
        let mut exprs = Vec::new();
        for panel in panels.iter().filter(|p| p["type"] != "row") {
            let title = panel["title"].as_str().unwrap_or("?");
            assert!(panel["gridPos"]["w"].as_u64().is_some_and(|w| w > 0), "{title}");
            assert!(
                !panel["description"].as_str().unwrap_or("").is_empty(),
                "{title} has no description"
            );
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{title}");
            for t in targets {
                exprs.push((title.to_string(), t["expr"].as_str().expect("expr").to_string()));
            }
        }
        let rules = include_str!("../../deploy/prometheus/flexgate-alerts.yml");
        for line in rules.lines().filter_map(|l| l.trim().strip_prefix("expr:")) {
            exprs.push(("alert rule".to_string(), line.to_string()));
        }
        assert!(exprs.len() > 20, "{exprs:?}");
        for (where_, expr) in &exprs {
            for name in referenced(expr) {
                assert!(names.contains(&name), "{where_}: {name} is not exported ({expr})");
            }
        }
    }
}
