//! The decoded 2.0b report messages: metadata (`oadrRegisterReport`), requests
//! (`oadrCreateReport`, `oadrRegisteredReport`), data (`oadrUpdateReport`), cancellation and
//! their acknowledgements.
//!
//! Separate from `model` because reports are a protocol of their own inside 2.0b (metadata,
//! request, data, cancel), with their own nested types.

use chrono::{DateTime, TimeDelta, Utc};

use super::model::{EiResponse, ItemBase, Targets};

/// `oadrRegisterReport`: a party's report metadata (what it can report).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterReport {
    pub request_id: String,
    /// `ei:reportRequestID` of each `oadr:oadrReport`.
    pub report_request_ids: Vec<String>,
    /// `ei:reportSpecifierID` of each `oadr:oadrReport`, when present.
    pub report_specifier_ids: Vec<String>,
    /// Each `oadr:oadrReport` in full (the ids above are shortcuts into these).
    pub reports: Vec<ReportMetadata>,
    pub ven_id: Option<String>,
}

/// One metadata `oadr:oadrReport` in `oadrRegisterReport`. Identifiers the schema requires are
/// still optional here, so that a VEN can answer a sloppy VTN's registration instead of failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportMetadata {
    /// `ei:eiReportID` (normally absent in metadata).
    pub report_id: Option<String>,
    /// `ei:reportRequestID` (openleadr and this crate write `0` for metadata).
    pub report_request_id: Option<String>,
    /// `ei:reportSpecifierID`: the id a later `oadrReportRequest` names.
    pub report_specifier_id: Option<String>,
    /// `ei:reportName`, e.g. `METADATA_TELEMETRY_USAGE`.
    pub report_name: Option<String>,
    /// `ei:createdDateTime`.
    pub created: Option<DateTime<Utc>>,
    /// `xcal:duration`: how far back data can be asked for.
    pub duration: Option<TimeDelta>,
    /// The data points (`oadr:oadrReportDescription`).
    pub descriptions: Vec<ReportDescription>,
}

/// One `oadr:oadrReportDescription`: a data point a party offers to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportDescription {
    /// `ei:rID`, unique within the report; report requests and data refer to it.
    pub r_id: String,
    /// `ei:reportDataSource` (which resource/VEN the point belongs to), if given.
    pub data_source: Option<Targets>,
    /// `ei:reportType`, e.g. `usage`, `x-resourceStatus`.
    pub report_type: Option<String>,
    /// The itemBase (units), e.g. `powerReal` in kW.
    pub item_base: Option<ItemBase>,
    /// `ei:readingType`, e.g. `Direct Read`.
    pub reading_type: Option<String>,
    /// `emix:marketContext`, if the point is offered to one market only.
    pub market_context: Option<String>,
    /// `oadr:oadrSamplingRate`.
    pub sampling_rate: Option<SamplingRate>,
}

/// `oadr:oadrSamplingRate`: how often a point can be sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplingRate {
    /// `oadr:oadrMinPeriod`.
    pub min_period: TimeDelta,
    /// `oadr:oadrMaxPeriod`.
    pub max_period: TimeDelta,
    /// `oadr:oadrOnChange`: sampled on change (no faster than `min_period`).
    pub on_change: bool,
}

/// One data `oadr:oadrReport` in `oadrUpdateReport`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportData {
    /// `ei:eiReportID` (unique per report sent).
    pub report_id: Option<String>,
    /// `ei:reportRequestID`: the request this data answers.
    pub report_request_id: String,
    /// `ei:reportSpecifierID`: the metadata report the data comes from.
    pub report_specifier_id: String,
    /// `ei:reportName`, e.g. `TELEMETRY_USAGE`.
    pub report_name: Option<String>,
    /// `ei:createdDateTime`.
    pub created: Option<DateTime<Utc>>,
    /// `xcal:dtstart` of the reported span.
    pub start: Option<DateTime<Utc>>,
    /// `xcal:duration` of the reported span.
    pub duration: Option<TimeDelta>,
    /// `strm:intervals`.
    pub intervals: Vec<ReportInterval>,
}

/// One `ei:interval` of report data.
///
/// Consecutive `ei:interval`s with the same dtstart, duration and uid decode as one interval
/// with all their points (a sample is often written one point per interval).
#[derive(Debug, Clone, PartialEq)]
pub struct ReportInterval {
    /// `xcal:dtstart`.
    pub start: Option<DateTime<Utc>>,
    /// `xcal:duration`.
    pub duration: Option<TimeDelta>,
    /// `xcal:uid/xcal:text`.
    pub uid: Option<String>,
    /// One per `oadr:oadrReportPayload`.
    pub points: Vec<ReportPoint>,
}

/// One `oadr:oadrReportPayload`: a data point's value in an interval.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportPoint {
    /// `ei:rID`.
    pub r_id: String,
    /// The payload.
    pub value: ReportValue,
    /// `ei:confidence` (0–100).
    pub confidence: Option<u32>,
    /// `ei:accuracy`.
    pub accuracy: Option<f64>,
    /// `oadr:oadrDataQuality`, e.g. `No Quality - No Value` (then `value` carries no reading).
    pub data_quality: Option<String>,
}

/// A report payload.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportValue {
    /// `ei:payloadFloat/ei:value`.
    Float(f64),
    /// `oadr:oadrPayloadResourceStatus`.
    ResourceStatus(ResourceStatus),
}

/// `oadr:oadrPayloadResourceStatus` (TELEMETRY_STATUS).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceStatus {
    /// `oadr:oadrOnline`.
    pub online: bool,
    /// `oadr:oadrManualOverride`.
    pub manual_override: bool,
    /// `oadr:oadrLoadControlState`, if present.
    pub load_control: Option<LoadControlState>,
}

/// `oadr:oadrLoadControlState`: the `oadrCurrent` value of each state type present.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadControlState {
    /// `oadr:oadrCapacity/oadr:oadrCurrent`.
    pub capacity: Option<f64>,
    /// `oadr:oadrLevelOffset/oadr:oadrCurrent`.
    pub level_offset: Option<f64>,
    /// `oadr:oadrPercentOffset/oadr:oadrCurrent`.
    pub percent_offset: Option<f64>,
    /// `oadr:oadrSetPoint/oadr:oadrCurrent`.
    pub set_point: Option<f64>,
}

/// One `oadr:oadrReportRequest`: what the VTN wants reported, how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRequest {
    /// `ei:reportRequestID`.
    pub report_request_id: String,
    /// `ei:reportSpecifier/ei:reportSpecifierID`: which of the VEN's registered reports.
    pub report_specifier_id: String,
    /// `xcal:granularity`: sampling interval (`None` when absent or `PT0S`: the VEN's choice).
    pub granularity: Option<TimeDelta>,
    /// `ei:reportBackDuration`: how often to send (`None` when absent or `PT0S`: with every
    /// sample).
    pub report_back_duration: Option<TimeDelta>,
    /// `ei:reportInterval` dtstart, when the request is bounded.
    pub start: Option<DateTime<Utc>>,
    /// `ei:reportInterval` duration (`None` when absent or `PT0S`: until cancelled).
    pub duration: Option<TimeDelta>,
    /// `ei:specifierPayload/ei:rID` of each requested data point.
    pub r_ids: Vec<String>,
}

/// `oadrRegisteredReport` (minimal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredReport {
    pub response: EiResponse,
    pub report_request_ids: Vec<String>,
    /// The `oadrReportRequest`s it carries (a VTN may request reports right here).
    pub report_requests: Vec<ReportRequest>,
    pub ven_id: Option<String>,
}

/// `oadrCreateReport` (minimal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateReport {
    pub request_id: String,
    pub report_request_ids: Vec<String>,
    /// The `oadrReportRequest`s in full.
    pub report_requests: Vec<ReportRequest>,
    pub ven_id: Option<String>,
}

/// `oadrCancelReport` (minimal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelReport {
    pub request_id: String,
    pub report_request_ids: Vec<String>,
    pub report_to_follow: bool,
    pub ven_id: Option<String>,
}

/// `oadrUpdatedReport`: the VTN's acknowledgement of `oadrUpdateReport`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdatedReport {
    /// `ei:eiResponse`: the code tells whether the request was accepted.
    pub response: EiResponse,
    /// An `oadr:oadrCancelReport` piggy-backed on the acknowledgement (stop those reports).
    pub cancel_report: Option<CancelReport>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: Option<String>,
}

/// `oadrCreatedReport`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedReport {
    /// `ei:eiResponse`: the code tells whether the request was accepted.
    pub response: EiResponse,
    /// `oadr:oadrPendingReports/ei:reportRequestID`: every report request still active.
    pub pending_report_request_ids: Vec<String>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: Option<String>,
}

/// `oadrCanceledReport`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanceledReport {
    /// `ei:eiResponse`: the code tells whether the request was accepted.
    pub response: EiResponse,
    /// `oadr:oadrPendingReports/ei:reportRequestID`: every report request still active.
    pub pending_report_request_ids: Vec<String>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: Option<String>,
}

/// `oadrUpdateReport`: report data.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateReport {
    /// `pyld:requestID`: echoed in the answer.
    pub request_id: String,
    /// Each data `oadr:oadrReport`.
    pub reports: Vec<ReportData>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: Option<String>,
}
