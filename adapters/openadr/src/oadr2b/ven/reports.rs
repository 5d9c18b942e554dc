//! Telemetry reports: the metadata we register, the VTN's report requests, sampling and sends.
//!
//! The VEN offers two reports (unique rIDs, each with a sampling rate, as the 2.0b certification
//! tests require of report metadata):
//!
//! - `METADATA_TELEMETRY_USAGE` (specifier [`ReportConfig::usage_specifier_id`]): the meter's
//!   kW ([`ReportConfig::meter_r_id`]) and the GPU boards' kW ([`ReportConfig::gpu_board_r_id`]);
//! - `METADATA_TELEMETRY_STATUS` (specifier [`ReportConfig::status_specifier_id`]): one
//!   `oadrPayloadResourceStatus` point ([`ReportConfig::status_r_id`]) with online, manual
//!   override and the flexible kW available.
//!
//! For each accepted `oadrReportRequest` the VEN takes a sample every `granularity` (the VTN's;
//! PT0S = [`ReportConfig::min_sampling`]) and sends an `oadrUpdateReport` every
//! `reportBackDuration` (PT0S = with every sample). Slots are anchored at the request's
//! `reportInterval` dtstart (or the time it was accepted): the sample taken at slot `T` is the
//! interval `[T − granularity, T)` and holds the latest [`TelemetrySample`] recorded, unless that
//! is older than [`ReportConfig::sample_max_age`] (then the interval is left out and a warning
//! raised: stale telemetry is never sent as current). A bounded request (a `reportInterval`
//! duration) ends after its last slot, with a final send of anything collected.

use chrono::{DateTime, TimeDelta, Utc};

use super::{Action, Ven, VenError, catch_up};
use crate::oadr2b::outgoing::{
    Outgoing, ReportDataOut, ReportDescriptionOut, ReportIntervalOut, ReportMetadataOut, ReportPayloadOut, ResponseOut,
};
use crate::oadr2b::{CancelReport, ReportRequest};

/// The reports the VEN offers and how it samples them.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportConfig {
    /// `ei:reportDataSource/ei:resourceID` of every point (the site).
    pub resource_id: String,
    /// reportSpecifierID of the TELEMETRY_USAGE report.
    pub usage_specifier_id: String,
    /// reportSpecifierID of the TELEMETRY_STATUS report.
    pub status_specifier_id: String,
    /// rID of the meter's kW.
    pub meter_r_id: String,
    /// rID of the GPU boards' kW.
    pub gpu_board_r_id: String,
    /// rID of the status point.
    pub status_r_id: String,
    /// How far back data can be asked for (the report's `xcal:duration`).
    pub duration: TimeDelta,
    /// Fastest sampling offered (`oadrSamplingRate/oadrMinPeriod`), and the granularity used
    /// when a request leaves it to the VEN.
    pub min_sampling: TimeDelta,
    /// Slowest sampling offered (`oadrMaxPeriod`).
    pub max_sampling: TimeDelta,
    /// A sample older than this (relative to the slot) is not reported.
    pub sample_max_age: TimeDelta,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            resource_id: "site".into(),
            usage_specifier_id: "TELEMETRY_USAGE".into(),
            status_specifier_id: "TELEMETRY_STATUS".into(),
            meter_r_id: "meter_kw".into(),
            gpu_board_r_id: "gpu_board_kw".into(),
            status_r_id: "status".into(),
            duration: TimeDelta::hours(1),
            min_sampling: TimeDelta::seconds(10),
            max_sampling: TimeDelta::hours(1),
            sample_max_age: TimeDelta::seconds(60),
        }
    }
}

impl ReportConfig {
    pub(super) fn validate(&self) -> Result<(), VenError> {
        let ids = [&self.meter_r_id, &self.gpu_board_r_id, &self.status_r_id];
        if ids.iter().any(|i| i.trim().is_empty()) || ids[0] == ids[1] || ids[0] == ids[2] || ids[1] == ids[2] {
            return Err(VenError::Config("report rIDs must be non-empty and unique".into()));
        }
        if self.usage_specifier_id.trim().is_empty()
            || self.usage_specifier_id == self.status_specifier_id
            || self.status_specifier_id.trim().is_empty()
        {
            return Err(VenError::Config(
                "report specifier IDs must be non-empty and distinct".into(),
            ));
        }
        if self.min_sampling < TimeDelta::seconds(1) || self.max_sampling < self.min_sampling {
            return Err(VenError::Config(
                "report sampling needs 1 s <= min_sampling <= max_sampling".into(),
            ));
        }
        if self.duration <= TimeDelta::zero() || self.sample_max_age <= TimeDelta::zero() {
            return Err(VenError::Config(
                "report duration and sample_max_age must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The two METADATA reports for oadrRegisterReport.
    pub(super) fn metadata(&self, now: DateTime<Utc>) -> Vec<ReportMetadataOut> {
        let point = |r_id: &str, report_type: &str, reading_type: &str, power_kw: bool| ReportDescriptionOut {
            r_id: r_id.to_string(),
            report_type: report_type.to_string(),
            reading_type: reading_type.to_string(),
            power_kw,
            resource_id: Some(self.resource_id.clone()),
            market_context: None,
            min_period: self.min_sampling,
            max_period: self.max_sampling,
        };
        vec![
            ReportMetadataOut {
                report_specifier_id: self.usage_specifier_id.clone(),
                report_name: "METADATA_TELEMETRY_USAGE".into(),
                created: now,
                duration: self.duration,
                descriptions: vec![
                    point(&self.meter_r_id, "usage", "Direct Read", true),
                    point(&self.gpu_board_r_id, "usage", "Direct Read", true),
                ],
            },
            ReportMetadataOut {
                report_specifier_id: self.status_specifier_id.clone(),
                report_name: "METADATA_TELEMETRY_STATUS".into(),
                created: now,
                duration: self.duration,
                descriptions: vec![point(&self.status_r_id, "x-resourceStatus", "x-notApplicable", false)],
            },
        ]
    }
}

/// What the site measures, recorded with [`Ven::record_sample`] as often as the caller likes;
/// report slots use the latest one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TelemetrySample {
    /// Site meter, kW.
    pub meter_kw: f64,
    /// GPU boards, kW (left out of reports when unknown).
    pub gpu_board_kw: Option<f64>,
    /// Power that could still be shed, kW (TELEMETRY_STATUS capacity).
    pub flexible_kw: Option<f64>,
    /// The site is online and controllable.
    pub online: bool,
    /// An operator override is in force.
    pub manual_override: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReportKind {
    Usage,
    Status,
}

/// One accepted report request and its timers.
#[derive(Debug, Clone)]
pub(super) struct ActiveReport {
    request_id: String,
    specifier_id: String,
    kind: ReportKind,
    r_ids: Vec<String>,
    granularity: TimeDelta,
    back: TimeDelta,
    next_sample: DateTime<Utc>,
    next_send: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
    collected: Vec<ReportIntervalOut>,
}

impl ActiveReport {
    pub(super) fn next_due(&self) -> DateTime<Utc> {
        let due = self.next_sample.min(self.next_send);
        match self.end {
            Some(e) => due.min(e),
            None => due,
        }
    }
}

/// The first slot `anchor + k·period` (k >= 1) that is not before `now`; `None` past the
/// calendar.
fn first_slot(anchor: DateTime<Utc>, period: TimeDelta, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let first = anchor.checked_add_signed(period)?;
    if first >= now {
        return Some(first);
    }
    let p = period.num_milliseconds().max(1);
    let behind = (now - first).num_milliseconds();
    let steps = behind / p + i64::from(behind % p != 0);
    first.checked_add_signed(TimeDelta::try_milliseconds(steps.checked_mul(p)?)?)
}

/// The longest granularity or reportBackDuration accepted (a longer one is refused, which also
/// keeps every timer computation inside the calendar).
const MAX_REPORT_PERIOD: TimeDelta = TimeDelta::days(31);

impl Ven {
    /// Records the latest telemetry (time-stamped `now`). Refuses NaN/infinite values, which
    /// must never reach the VTN.
    pub fn record_sample(&mut self, now: DateTime<Utc>, sample: TelemetrySample) -> Result<(), VenError> {
        let fields = [
            ("meter_kw", Some(sample.meter_kw)),
            ("gpu_board_kw", sample.gpu_board_kw),
            ("flexible_kw", sample.flexible_kw),
        ];
        for (field, v) in fields {
            if let Some(value) = v.filter(|v| !v.is_finite()) {
                return Err(VenError::NonFinite { field, value });
            }
        }
        self.latest = Some((now, sample));
        Ok(())
    }

    /// The reportRequestIDs being served.
    pub fn report_request_ids(&self) -> Vec<String> {
        self.reports.iter().map(|r| r.request_id.clone()).collect()
    }

    /// Accepts `requests` (from oadrCreateReport or oadrRegisteredReport) and answers with
    /// oadrCreatedReport. `listed_ids` are every reportRequestID the message lists: one without
    /// details (a request without a reportSpecifier) can only be refused. A request naming the
    /// `METADATA` specifier makes the VEN re-send its oadrRegisterReport.
    pub(super) fn create_reports(
        &mut self,
        now: DateTime<Utc>,
        requests: &[ReportRequest],
        listed_ids: &[String],
        answer_request_id: String,
        actions: &mut Vec<Action>,
    ) {
        let mut problems: Vec<String> = listed_ids
            .iter()
            .filter(|id| !requests.iter().any(|r| &r.report_request_id == *id))
            .map(|id| format!("report request {id}: no reportSpecifier"))
            .collect();
        let mut send_metadata = false;
        for rq in requests {
            if rq.report_specifier_id.trim() == "METADATA" {
                send_metadata = true;
                continue;
            }
            match self.build_report(now, rq) {
                Ok(report) => {
                    self.reports.retain(|r| r.request_id != report.request_id);
                    self.reports.push(report);
                }
                Err(why) => problems.push(format!("report request {}: {why}", rq.report_request_id)),
            }
        }
        let response = if problems.is_empty() {
            ResponseOut::ok(answer_request_id)
        } else {
            for p in &problems {
                self.warn(actions, p.clone());
            }
            ResponseOut {
                code: 452,
                description: problems.join("; "),
                request_id: answer_request_id,
            }
        };
        let out = Outgoing::CreatedReport {
            response,
            ven_id: self.ven_id(),
            pending_report_request_ids: self.report_request_ids(),
        };
        self.send(actions, out);
        if send_metadata {
            let out = Outgoing::RegisterReport {
                request_id: self.next_id("req"),
                ven_id: self.ven_id(),
                reports: self.cfg.reports.metadata(now),
            };
            self.send(actions, out);
        }
    }

    fn build_report(&self, now: DateTime<Utc>, rq: &ReportRequest) -> Result<ActiveReport, String> {
        let rc = &self.cfg.reports;
        let spec = rq.report_specifier_id.trim();
        let (kind, offered) = if spec == rc.usage_specifier_id {
            (
                ReportKind::Usage,
                vec![rc.meter_r_id.clone(), rc.gpu_board_r_id.clone()],
            )
        } else if spec == rc.status_specifier_id {
            (ReportKind::Status, vec![rc.status_r_id.clone()])
        } else {
            return Err(format!("unknown reportSpecifierID {spec:?}"));
        };
        let r_ids = if rq.r_ids.is_empty() {
            offered
        } else {
            let mut r_ids = Vec::new();
            for r in &rq.r_ids {
                let r = r.trim().to_string();
                if !offered.contains(&r) {
                    return Err(format!("rID {r:?} is not in report {spec}"));
                }
                if !r_ids.contains(&r) {
                    r_ids.push(r);
                }
            }
            r_ids
        };
        let granularity = rq
            .granularity
            .filter(|g| *g > TimeDelta::zero())
            .unwrap_or(rc.min_sampling)
            .max(TimeDelta::seconds(1));
        let back = rq
            .report_back_duration
            .filter(|b| *b > TimeDelta::zero())
            .unwrap_or(granularity)
            .max(granularity);
        if back > MAX_REPORT_PERIOD {
            return Err(format!(
                "granularity/reportBackDuration of {}s is longer than {} days",
                back.num_seconds(),
                MAX_REPORT_PERIOD.num_days()
            ));
        }
        let outside = || "its reportInterval lies outside the calendar".to_string();
        let anchor = rq.start.unwrap_or(now);
        let end = match rq.duration.filter(|d| *d > TimeDelta::zero()) {
            Some(d) => Some(anchor.checked_add_signed(d).ok_or_else(outside)?),
            None => None,
        };
        if end.is_some_and(|e| e <= now) {
            return Err("its reportInterval has already ended".into());
        }
        let next_sample = first_slot(anchor, granularity, now).ok_or_else(outside)?;
        let next_send = first_slot(anchor, back, now).ok_or_else(outside)?;
        Ok(ActiveReport {
            request_id: rq.report_request_id.clone(),
            specifier_id: spec.to_string(),
            kind,
            r_ids,
            granularity,
            back,
            next_sample,
            next_send,
            end,
            collected: Vec::new(),
        })
    }

    pub(super) fn on_cancel_report(&mut self, now: DateTime<Utc>, c: CancelReport, actions: &mut Vec<Action>) {
        let mut finals = Vec::new();
        for id in &c.report_request_ids {
            let Some(i) = self.reports.iter().position(|r| &r.request_id == id) else {
                self.warn(
                    actions,
                    format!("oadrCancelReport for unknown report request {id}; acknowledged"),
                );
                continue;
            };
            let mut report = self.reports.remove(i);
            if c.report_to_follow && !report.collected.is_empty() {
                finals.push(self.report_data(now, &mut report));
            }
        }
        let out = Outgoing::CanceledReport {
            response: ResponseOut::ok(c.request_id),
            ven_id: self.ven_id(),
            pending_report_request_ids: self.report_request_ids(),
        };
        self.send(actions, out);
        self.send_each(actions, finals);
    }

    pub(super) fn tick_reports(&mut self, now: DateTime<Utc>, actions: &mut Vec<Action>) {
        let mut data = Vec::new();
        let mut reports = std::mem::take(&mut self.reports);
        reports.retain_mut(|r| {
            if r.next_sample <= now {
                let (slot, skipped) = catch_up(r.next_sample, r.granularity, now);
                if skipped > 0 {
                    let why = format!("report {}: skipped {skipped} missed sample(s)", r.request_id);
                    self.warn(actions, why);
                }
                if r.end.is_none_or(|e| slot <= e) {
                    self.take_sample(slot, r, actions);
                }
                r.next_sample = slot + r.granularity;
            }
            if r.next_send <= now {
                let (slot, skipped) = catch_up(r.next_send, r.back, now);
                if skipped > 0 {
                    let why = format!("report {}: skipped {skipped} missed send(s)", r.request_id);
                    self.warn(actions, why);
                }
                if !r.collected.is_empty() && r.end.is_none_or(|e| slot <= e) {
                    data.push(self.report_data(now, r));
                }
                r.next_send = slot + r.back;
            }
            let finished = r.end.is_some_and(|e| e <= now);
            if finished {
                if !r.collected.is_empty() {
                    data.push(self.report_data(now, r));
                }
                let why = format!("report {}: its reportInterval ended", r.request_id);
                self.warn(actions, why);
            }
            !finished
        });
        self.reports = reports;
        self.send_each(actions, data);
    }

    /// One `oadrUpdateReport` per report. A VTN that refuses one report (openleadr 0.5.36
    /// answers 500 to every TELEMETRY_STATUS update, a bug of its own) must not take the
    /// others down with it: sent together, the usage data would be refused, and retried, and
    /// dropped with it every period. Each message is retried and, if abandoned, recorded on its
    /// own.
    fn send_each(&mut self, actions: &mut Vec<Action>, reports: Vec<ReportDataOut>) {
        for report in reports {
            let out = Outgoing::UpdateReport {
                request_id: self.next_id("req"),
                ven_id: self.ven_id(),
                reports: vec![report],
            };
            self.send(actions, out);
        }
    }

    fn take_sample(&self, slot: DateTime<Utc>, r: &mut ActiveReport, actions: &mut Vec<Action>) {
        let fresh = self
            .latest
            .filter(|(at, _)| slot - *at <= self.cfg.reports.sample_max_age)
            .map(|(_, s)| s);
        let Some(s) = fresh else {
            let why = format!(
                "report {}: no telemetry fresh enough for {slot}; interval left out",
                r.request_id
            );
            self.warn(actions, why);
            return;
        };
        let rc = &self.cfg.reports;
        let points: Vec<(String, ReportPayloadOut)> = r
            .r_ids
            .iter()
            .filter_map(|id| {
                let payload = match r.kind {
                    ReportKind::Usage if *id == rc.meter_r_id => ReportPayloadOut::Float(s.meter_kw),
                    ReportKind::Usage => ReportPayloadOut::Float(s.gpu_board_kw?),
                    ReportKind::Status => ReportPayloadOut::ResourceStatus {
                        online: s.online,
                        manual_override: s.manual_override,
                        capacity_available_kw: s.flexible_kw,
                    },
                };
                Some((id.clone(), payload))
            })
            .collect();
        if !points.is_empty() {
            r.collected.push(ReportIntervalOut {
                start: slot - r.granularity,
                duration: r.granularity,
                points,
            });
        }
    }

    /// Packs (and clears) what `r` collected into one oadrReport.
    fn report_data(&mut self, now: DateTime<Utc>, r: &mut ActiveReport) -> ReportDataOut {
        let intervals = std::mem::take(&mut r.collected);
        let start = intervals.first().map_or(now, |i| i.start);
        let end = intervals.last().map_or(now, |i| i.start + i.duration);
        ReportDataOut {
            report_id: self.next_id("rpt"),
            report_request_id: r.request_id.clone(),
            report_specifier_id: r.specifier_id.clone(),
            report_name: match r.kind {
                ReportKind::Usage => "TELEMETRY_USAGE".into(),
                ReportKind::Status => "TELEMETRY_STATUS".into(),
            },
            created: now,
            start,
            duration: end - start,
            intervals,
        }
    }
}
