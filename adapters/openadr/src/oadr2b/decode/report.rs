//! Decoding of the report messages: metadata descriptions with sampling rates, report
//! requests with their specifiers, report data with float and resource-status payloads, and
//! cancellations.
//!
//! Separate from the event decoder: reports are the largest part of the 2.0b schema and share
//! nothing with events but the element helpers.

use super::fields::{
    Path, date_time, dur, is_item_base, item_base, missing, nonzero, opt_bool, opt_date_time, opt_dtstart, opt_float,
    opt_text, opt_wrapped_duration, parse_float, parse_u32, req, req_bool, req_text,
};
use super::{Cx, DecodeError};
use crate::oadr2b::report::{
    CancelReport, LoadControlState, ReportData, ReportDescription, ReportInterval, ReportMetadata, ReportPoint,
    ReportRequest, ReportValue, ResourceStatus, SamplingRate,
};
use crate::oadr2b::xml::{Node, Ns};

fn report_point(pl: Node, p: &Path) -> Result<ReportPoint, DecodeError> {
    let value = if let Some(pf) = pl.child(Ns::Ei, "payloadFloat") {
        let pfp = p.child("payloadFloat");
        ReportValue::Float(parse_float(
            req(pf, Ns::Ei, "value", &pfp)?.text(),
            &pfp.child("value"),
        )?)
    } else if let Some(rs) = pl.child(Ns::Oadr, "oadrPayloadResourceStatus") {
        let rsp = p.child("oadrPayloadResourceStatus");
        let load_control = match rs.child(Ns::Oadr, "oadrLoadControlState") {
            Some(lc) => {
                let lcp = rsp.child("oadrLoadControlState");
                let current = |name: &str| -> Result<Option<f64>, DecodeError> {
                    match lc.child(Ns::Oadr, name) {
                        Some(x) => {
                            let xp = lcp.child(name);
                            parse_float(req(x, Ns::Oadr, "oadrCurrent", &xp)?.text(), &xp.child("oadrCurrent"))
                                .map(Some)
                        }
                        None => Ok(None),
                    }
                };
                Some(LoadControlState {
                    capacity: current("oadrCapacity")?,
                    level_offset: current("oadrLevelOffset")?,
                    percent_offset: current("oadrPercentOffset")?,
                    set_point: current("oadrSetPoint")?,
                })
            }
            None => None,
        };
        ReportValue::ResourceStatus(ResourceStatus {
            online: req_bool(rs, Ns::Oadr, "oadrOnline", &rsp)?,
            manual_override: req_bool(rs, Ns::Oadr, "oadrManualOverride", &rsp)?,
            load_control,
        })
    } else {
        return Err(missing(&p.child("payloadFloat")));
    };
    Ok(ReportPoint {
        r_id: req_text(pl, Ns::Ei, "rID", p)?,
        value,
        confidence: match pl.child(Ns::Ei, "confidence") {
            Some(c) => Some(parse_u32(c.text(), &p.child("confidence"))?),
            None => None,
        },
        accuracy: opt_float(pl, Ns::Ei, "accuracy", p)?,
        data_quality: opt_text(pl, Ns::Oadr, "oadrDataQuality"),
    })
}

impl Cx<'_> {
    pub(super) fn report_request_ids(&self, m: Node, p: &Path) -> Result<Vec<String>, DecodeError> {
        let reqs = self.limited(m, Ns::Oadr, "oadrReportRequest", p)?;
        let mut out = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.enumerate() {
            out.push(req_text(r, Ns::Ei, "reportRequestID", &p.nth("oadrReportRequest", i))?);
        }
        Ok(out)
    }
    pub(super) fn cancel_report(&self, m: Node, p: &Path) -> Result<CancelReport, DecodeError> {
        Ok(CancelReport {
            request_id: req_text(m, Ns::Pyld, "requestID", p)?,
            report_request_ids: self.texts(m, Ns::Ei, "reportRequestID", p)?,
            report_to_follow: opt_text(m, Ns::Pyld, "reportToFollow").is_some_and(|t| t == "true" || t == "1"),
            ven_id: opt_text(m, Ns::Ei, "venID"),
        })
    }

    /// `oadr:oadrPendingReports/ei:reportRequestID` (the element itself may be absent).
    pub(super) fn pending_reports(&self, m: Node, p: &Path) -> Result<Vec<String>, DecodeError> {
        match m.child(Ns::Oadr, "oadrPendingReports") {
            Some(pr) => Ok(self
                .texts(pr, Ns::Ei, "reportRequestID", &p.child("oadrPendingReports"))?
                .into_iter()
                .filter(|t| !t.is_empty())
                .collect()),
            None => Ok(Vec::new()),
        }
    }

    /// Every `oadr:oadrReportRequest` that has an `ei:reportSpecifier`, in full. (A request
    /// without one is schema-invalid; its id still appears in `report_request_ids`, so the VEN
    /// can answer it.)
    pub(super) fn report_requests(&self, m: Node, p: &Path) -> Result<Vec<ReportRequest>, DecodeError> {
        let reqs = self.limited(m, Ns::Oadr, "oadrReportRequest", p)?;
        let mut out = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.enumerate() {
            let rp = p.nth("oadrReportRequest", i);
            let Some(spec) = r.child(Ns::Ei, "reportSpecifier") else {
                continue;
            };
            let sp = rp.child("reportSpecifier");
            let (start, duration) = match spec.child(Ns::Ei, "reportInterval") {
                Some(ri) => {
                    let ip = sp.child("reportInterval");
                    let props = req(ri, Ns::Xcal, "properties", &ip)?;
                    let pp = ip.child("properties");
                    let start = match props.child(Ns::Xcal, "dtstart") {
                        Some(ds) => {
                            let dp = pp.child("dtstart");
                            Some(date_time(
                                req(ds, Ns::Xcal, "date-time", &dp)?.text(),
                                &dp.child("date-time"),
                            )?)
                        }
                        None => None,
                    };
                    (
                        start,
                        nonzero(opt_wrapped_duration(props, Ns::Xcal, "duration", &pp)?, &pp)?,
                    )
                }
                None => (None, None),
            };
            let payloads = self.limited(spec, Ns::Ei, "specifierPayload", &sp)?;
            let mut r_ids = Vec::with_capacity(payloads.len());
            for (j, pl) in payloads.enumerate() {
                r_ids.push(req_text(pl, Ns::Ei, "rID", &sp.nth("specifierPayload", j))?);
            }
            out.push(ReportRequest {
                report_request_id: req_text(r, Ns::Ei, "reportRequestID", &rp)?,
                report_specifier_id: req_text(spec, Ns::Ei, "reportSpecifierID", &sp)?,
                granularity: nonzero(opt_wrapped_duration(spec, Ns::Xcal, "granularity", &sp)?, &sp)?,
                report_back_duration: nonzero(opt_wrapped_duration(spec, Ns::Ei, "reportBackDuration", &sp)?, &sp)?,
                start,
                duration,
                r_ids,
            });
        }
        Ok(out)
    }

    pub(super) fn report_metadata(&self, r: Node, p: &Path) -> Result<ReportMetadata, DecodeError> {
        let nodes = self.limited(r, Ns::Oadr, "oadrReportDescription", p)?;
        let mut descriptions = Vec::with_capacity(nodes.len());
        for (i, d) in nodes.enumerate() {
            let dp = p.nth("oadrReportDescription", i);
            let sampling_rate = match d.child(Ns::Oadr, "oadrSamplingRate") {
                Some(sr) => {
                    let srp = dp.child("oadrSamplingRate");
                    Some(SamplingRate {
                        min_period: dur(
                            req(sr, Ns::Oadr, "oadrMinPeriod", &srp)?.text(),
                            &srp.child("oadrMinPeriod"),
                        )?,
                        max_period: dur(
                            req(sr, Ns::Oadr, "oadrMaxPeriod", &srp)?.text(),
                            &srp.child("oadrMaxPeriod"),
                        )?,
                        on_change: opt_bool(sr, Ns::Oadr, "oadrOnChange", &srp)?.unwrap_or(false),
                    })
                }
                None => None,
            };
            descriptions.push(ReportDescription {
                r_id: req_text(d, Ns::Ei, "rID", &dp)?,
                data_source: match d.child(Ns::Ei, "reportDataSource") {
                    Some(t) => Some(self.targets(t, &dp.child("reportDataSource"))?),
                    None => None,
                },
                report_type: opt_text(d, Ns::Ei, "reportType"),
                item_base: d.children().find(|c| is_item_base(*c)).map(item_base),
                reading_type: opt_text(d, Ns::Ei, "readingType"),
                market_context: opt_text(d, Ns::Emix, "marketContext"),
                sampling_rate,
            });
        }
        Ok(ReportMetadata {
            report_id: opt_text(r, Ns::Ei, "eiReportID"),
            report_request_id: opt_text(r, Ns::Ei, "reportRequestID"),
            report_specifier_id: opt_text(r, Ns::Ei, "reportSpecifierID"),
            report_name: opt_text(r, Ns::Ei, "reportName"),
            created: opt_date_time(r, Ns::Ei, "createdDateTime", p)?,
            duration: opt_wrapped_duration(r, Ns::Xcal, "duration", p)?,
            descriptions,
        })
    }

    pub(super) fn report_data(&self, r: Node, p: &Path) -> Result<ReportData, DecodeError> {
        let mut intervals: Vec<ReportInterval> = Vec::new();
        if let Some(ints) = r.child(Ns::Strm, "intervals") {
            let ip = p.child("intervals");
            for (i, n) in self.limited(ints, Ns::Ei, "interval", &ip)?.enumerate() {
                let np = ip.nth("interval", i);
                let payloads = self.limited(n, Ns::Oadr, "oadrReportPayload", &np)?;
                let mut points = Vec::with_capacity(payloads.len());
                for (j, pl) in payloads.enumerate() {
                    points.push(report_point(pl, &np.nth("oadrReportPayload", j))?);
                }
                let interval = ReportInterval {
                    start: opt_dtstart(n, &np)?,
                    duration: opt_wrapped_duration(n, Ns::Xcal, "duration", &np)?,
                    uid: n.child(Ns::Xcal, "uid").and_then(|u| opt_text(u, Ns::Xcal, "text")),
                    points,
                };
                // Consecutive intervals with the same start, duration and uid are one sample
                // written one point per interval (as openleadr reads them): merge them back.
                match intervals.last_mut() {
                    Some(last)
                        if interval.start.is_some()
                            && (last.start, last.duration, &last.uid)
                                == (interval.start, interval.duration, &interval.uid) =>
                    {
                        last.points.extend(interval.points);
                    }
                    _ => intervals.push(interval),
                }
            }
        }
        Ok(ReportData {
            report_id: opt_text(r, Ns::Ei, "eiReportID"),
            report_request_id: req_text(r, Ns::Ei, "reportRequestID", p)?,
            report_specifier_id: req_text(r, Ns::Ei, "reportSpecifierID", p)?,
            report_name: opt_text(r, Ns::Ei, "reportName"),
            created: opt_date_time(r, Ns::Ei, "createdDateTime", p)?,
            start: opt_dtstart(r, p)?,
            duration: opt_wrapped_duration(r, Ns::Xcal, "duration", p)?,
            intervals,
        })
    }
}
