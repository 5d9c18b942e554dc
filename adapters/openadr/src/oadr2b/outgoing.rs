//! Messages a VEN sends (or answers with), as plain data.
//!
//! The VEN state machine produces these; `encode` turns each into one `oadrPayload` document.
//! Keeping them as data (not XML) lets the state machine be tested without an XML layer and lets
//! the encoder be checked against the 2.0b schema independently.

use chrono::{DateTime, TimeDelta, Utc};

/// `ei:eiResponse` as the VEN writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseOut {
    /// `ei:responseCode`, e.g. `200`, `452`, `460`.
    pub code: u16,
    /// `ei:responseDescription`, e.g. `OK`.
    pub description: String,
    /// `pyld:requestID` of the request being answered; an empty string writes an empty element
    /// (the schema requires the element, certification requires it empty in some places).
    pub request_id: String,
}

impl ResponseOut {
    /// `200 OK` answering `request_id`.
    pub fn ok(request_id: impl Into<String>) -> Self {
        ResponseOut {
            code: 200,
            description: "OK".to_string(),
            request_id: request_id.into(),
        }
    }
}

/// `ei:optType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptType {
    /// Will participate.
    OptIn,
    /// Will not participate.
    OptOut,
}

impl OptType {
    /// Wire spelling (`optIn` / `optOut`).
    pub fn as_str(self) -> &'static str {
        match self {
            OptType::OptIn => "optIn",
            OptType::OptOut => "optOut",
        }
    }
}

/// One `ei:eventResponse` inside `oadrCreatedEvent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventResponseOut {
    /// `ei:responseCode`: 200 for a decision, 460 unsupported signal, 454 invalid data, ...
    pub code: u16,
    /// Human-readable reason (an opt-out always says why).
    pub description: String,
    /// `pyld:requestID` of the `oadrDistributeEvent` being answered.
    pub request_id: String,
    /// `ei:qualifiedEventID/ei:eventID`.
    pub event_id: String,
    /// `ei:qualifiedEventID/ei:modificationNumber`: the current modification number.
    pub modification_number: u32,
    /// `ei:optType`.
    pub opt: OptType,
}

/// What a report's data points describe, for `oadrRegisterReport` metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportDescriptionOut {
    /// `ei:rID`, unique within the report.
    pub r_id: String,
    /// `ei:reportType`, e.g. `usage`, `x-resourceStatus`.
    pub report_type: String,
    /// `ei:readingType`, e.g. `Direct Read`, `x-notApplicable`.
    pub reading_type: String,
    /// `power:powerReal` item (kW) when the point is a power; `None` for status points.
    pub power_kw: bool,
    /// `ei:reportDataSource/ei:resourceID`, when the point belongs to a resource.
    pub resource_id: Option<String>,
    /// Market context the point is offered to, if any.
    pub market_context: Option<String>,
    /// `oadr:oadrSamplingRate` min/max period; `oadrOnChange` false.
    pub min_period: TimeDelta,
    /// See [`ReportDescriptionOut::min_period`].
    pub max_period: TimeDelta,
}

/// One report's metadata (`oadr:oadrReport` inside `oadrRegisterReport`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReportMetadataOut {
    /// `ei:reportSpecifierID`, e.g. `TELEMETRY_USAGE_1`.
    pub report_specifier_id: String,
    /// `ei:reportName`, e.g. `METADATA_TELEMETRY_USAGE`.
    pub report_name: String,
    /// `ei:createdDateTime`.
    pub created: DateTime<Utc>,
    /// `xcal:duration` of the report (how far back data can be asked for).
    pub duration: TimeDelta,
    /// The points.
    pub descriptions: Vec<ReportDescriptionOut>,
}

/// A data point's payload in `oadrUpdateReport`.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportPayloadOut {
    /// `ei:payloadFloat` (e.g. kW).
    Float(f64),
    /// `oadr:oadrPayloadResourceStatus` (TELEMETRY_STATUS).
    ResourceStatus {
        /// `oadrOnline`.
        online: bool,
        /// `oadrManualOverride` (an operator opt-out is in force).
        manual_override: bool,
        /// `oadrLoadControlState/oadrCapacity/oadrCurrent`: flexible power available, kW.
        capacity_available_kw: Option<f64>,
    },
}

/// One interval of report data (`ei:interval` in `strm:intervals`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReportIntervalOut {
    /// `xcal:dtstart`.
    pub start: DateTime<Utc>,
    /// `xcal:duration`.
    pub duration: TimeDelta,
    /// One `oadr:oadrReportPayload` per data point.
    pub points: Vec<(String, ReportPayloadOut)>,
}

/// One report with data (`oadr:oadrReport` inside `oadrUpdateReport`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReportDataOut {
    /// `ei:eiReportID` (unique per report sent).
    pub report_id: String,
    /// `ei:reportRequestID` from the VTN's request.
    pub report_request_id: String,
    /// `ei:reportSpecifierID` the request named.
    pub report_specifier_id: String,
    /// `ei:reportName`, e.g. `TELEMETRY_USAGE`.
    pub report_name: String,
    /// `ei:createdDateTime`.
    pub created: DateTime<Utc>,
    /// `xcal:dtstart` of the reported span.
    pub start: DateTime<Utc>,
    /// `xcal:duration` of the reported span.
    pub duration: TimeDelta,
    /// The data.
    pub intervals: Vec<ReportIntervalOut>,
}

/// Every message a VEN sends.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    /// `oadrQueryRegistration`.
    QueryRegistration { request_id: String },
    /// `oadrCreatePartyRegistration` (profile 2.0b, simpleHttp).
    CreatePartyRegistration {
        request_id: String,
        /// Set when re-registering.
        registration_id: Option<String>,
        /// Set when re-registering (or when the VTN assigned it out of band).
        ven_id: Option<String>,
        ven_name: String,
        /// Pull (`true`) or push (`false`, then `transport_address` is where the VTN pushes).
        http_pull: bool,
        transport_address: Option<String>,
        report_only: bool,
        xml_signature: bool,
    },
    /// `oadrCancelPartyRegistration`.
    CancelPartyRegistration {
        request_id: String,
        registration_id: String,
        ven_id: String,
    },
    /// `oadrCanceledPartyRegistration` answering the VTN's cancellation.
    CanceledPartyRegistration {
        response: ResponseOut,
        registration_id: Option<String>,
        ven_id: String,
    },
    /// `oadrResponse` (e.g. to `oadrRequestReregistration`, to a pushed distribute that needs
    /// no created-event).
    Response { response: ResponseOut, ven_id: String },
    /// `oadrRequestEvent`.
    RequestEvent { request_id: String, ven_id: String },
    /// `oadrCreatedEvent`. The root `eiResponse` is `200 OK` with an empty requestID.
    CreatedEvent {
        ven_id: String,
        responses: Vec<EventResponseOut>,
    },
    /// `oadrPoll`.
    Poll { ven_id: String },
    /// `oadrRegisterReport` with the VEN's report metadata.
    RegisterReport {
        request_id: String,
        ven_id: String,
        reports: Vec<ReportMetadataOut>,
    },
    /// `oadrRegisteredReport` answering the VTN's `oadrRegisterReport` (no requests of ours).
    RegisteredReport { response: ResponseOut, ven_id: String },
    /// `oadrCreatedReport` answering `oadrCreateReport` / the requests in `oadrRegisteredReport`.
    CreatedReport {
        response: ResponseOut,
        ven_id: String,
        /// `oadr:oadrPendingReports/ei:reportRequestID`: every report request now active.
        pending_report_request_ids: Vec<String>,
    },
    /// `oadrUpdateReport` with data.
    UpdateReport {
        request_id: String,
        ven_id: String,
        reports: Vec<ReportDataOut>,
    },
    /// `oadrCanceledReport` answering `oadrCancelReport`.
    CanceledReport {
        response: ResponseOut,
        ven_id: String,
        pending_report_request_ids: Vec<String>,
    },
    /// `oadrCreateOpt` for an event (a later opt change, e.g. an operator's must-run override).
    CreateOpt {
        request_id: String,
        ven_id: String,
        opt_id: String,
        opt: OptType,
        /// `oadr:oadrOptReason`, e.g. `mustRun`, `participating`, `notParticipating`.
        reason: String,
        created: DateTime<Utc>,
        event_id: String,
        modification_number: u32,
    },
}

impl Outgoing {
    /// The message's element name, e.g. `oadrCreatedEvent`.
    pub fn name(&self) -> &'static str {
        match self {
            Outgoing::QueryRegistration { .. } => "oadrQueryRegistration",
            Outgoing::CreatePartyRegistration { .. } => "oadrCreatePartyRegistration",
            Outgoing::CancelPartyRegistration { .. } => "oadrCancelPartyRegistration",
            Outgoing::CanceledPartyRegistration { .. } => "oadrCanceledPartyRegistration",
            Outgoing::Response { .. } => "oadrResponse",
            Outgoing::RequestEvent { .. } => "oadrRequestEvent",
            Outgoing::CreatedEvent { .. } => "oadrCreatedEvent",
            Outgoing::Poll { .. } => "oadrPoll",
            Outgoing::RegisterReport { .. } => "oadrRegisterReport",
            Outgoing::RegisteredReport { .. } => "oadrRegisteredReport",
            Outgoing::CreatedReport { .. } => "oadrCreatedReport",
            Outgoing::UpdateReport { .. } => "oadrUpdateReport",
            Outgoing::CanceledReport { .. } => "oadrCanceledReport",
            Outgoing::CreateOpt { .. } => "oadrCreateOpt",
        }
    }

    /// The EiXxx service endpoint this message is POSTed to
    /// (`{base}/OpenADR2/Simple/2.0b/{service}`).
    pub fn service(&self) -> &'static str {
        match self {
            Outgoing::QueryRegistration { .. }
            | Outgoing::CreatePartyRegistration { .. }
            | Outgoing::CancelPartyRegistration { .. }
            | Outgoing::CanceledPartyRegistration { .. } => "EiRegisterParty",
            Outgoing::RequestEvent { .. } | Outgoing::CreatedEvent { .. } => "EiEvent",
            Outgoing::RegisterReport { .. }
            | Outgoing::RegisteredReport { .. }
            | Outgoing::CreatedReport { .. }
            | Outgoing::UpdateReport { .. }
            | Outgoing::CanceledReport { .. } => "EiReport",
            Outgoing::CreateOpt { .. } => "EiOpt",
            Outgoing::Poll { .. } | Outgoing::Response { .. } => "OadrPoll",
        }
    }
}
