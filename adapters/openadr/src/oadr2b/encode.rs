//! OpenADR 2.0b encoding: every [`Outgoing`] message as one `oadrPayload` document.
//!
//! The output is what a 2.0b VTN expects on the wire, and it validates against the OpenADR
//! 2.0b XSD (`tests/xsd.rs` checks every variant with lxml and openleadr's bundled schema):
//!
//! ```text
//! <?xml version="1.0" encoding="UTF-8"?>
//! <oadr:oadrPayload xmlns:oadr=".." xmlns:ei=".." xmlns:pyld=".." ...><oadr:oadrSignedObject>
//!   <oadr:oadrPoll ei:schemaVersion="2.0b"><ei:venID>VEN1</ei:venID></oadr:oadrPoll>
//! </oadr:oadrSignedObject></oadr:oadrPayload>
//! ```
//!
//! (without the line breaks: the document is written compactly, in one pass, into one
//! `String`). Every namespace is declared once, on the root, so the body carries only short
//! prefixes. No XML signature is written (`oadrXmlSignature` is always what the message says,
//! and the VEN registers with `false`).
//!
//! Value rules, chosen so that the output is always well-formed and schema-valid even when a
//! caller hands in odd data (the encoder never panics and never fails):
//!
//! - Text is escaped (`&`, `<`, `>`, `"`, `'`; `\r` as `&#13;` so it survives parsing).
//!   Characters XML 1.0 cannot carry at all (C0 controls other than tab/newline/CR, U+FFFE,
//!   U+FFFF) are replaced by U+FFFD.
//! - Date-times are RFC 3339 UTC, `YYYY-MM-DDTHH:MM:SSZ`, with `.fff` (milliseconds, truncated)
//!   only when the time has a sub-second part — the form the XSD pattern and openleadr's parser
//!   both accept.
//! - Durations are ISO 8601 via [`format_duration`], rounded to whole seconds (the XSD's
//!   `DurationValueType` pattern has no fractional seconds).
//! - Floats use Rust's shortest round-trip form (`500`, `0.25`, `-3.5`). A non-finite report value
//!   (NaN, ±∞; xs:float would accept them, but no peer should have to) is written as `0` with
//!   `oadr:oadrDataQuality` = `No Quality - No Value`, which is 2.0b's own way to say "no
//!   reading"; a non-finite `capacity_available_kw` omits the optional `oadrLoadControlState`.
//! - Response codes outside `100..=999` (the schema's `[0-9]{3}`) are written as `469`
//!   ("other"), OpenADR's catch-all code.
//! - `oadrCreatedEvent` always has the root `eiResponse` `200 OK` with an empty `requestID`
//!   (certification requires it empty); `eventResponses` is omitted when there are none.
//! - Report data are written one `ei:interval` per data point (same dtstart and duration for
//!   the points of one sample): the schema allows several payloads per interval, but openleadr
//!   reads exactly one. Intervals with no data points are omitted, and so is `strm:intervals`
//!   when no interval remains.

use std::fmt::Write as _;

use chrono::{DateTime, Datelike, TimeDelta, Timelike, Utc};

use super::outgoing::{
    EventResponseOut, Outgoing, ReportDataOut, ReportDescriptionOut, ReportMetadataOut, ReportPayloadOut, ResponseOut,
};
use super::xml::{NS_EI, NS_EMIX, NS_OADR, NS_POWER, NS_PYLD, NS_SCALE, NS_STRM, NS_XCAL};

/// Mains frequency written into `power:powerAttributes` of report metadata (`power:hertz`).
pub const POWER_HERTZ: u32 = 60;
/// Nominal voltage written into `power:powerAttributes` of report metadata (`power:voltage`).
pub const POWER_VOLTAGE: u32 = 230;

/// Encodes `msg` as one UTF-8 `oadrPayload` document, XML declaration included.
///
/// Infallible by design: the messages come from our own state machine, and every odd value
/// has a documented, schema-valid rendering (see the module docs), so a transport never has to
/// handle an encoding error. The result is a `String` (always UTF-8); use `.into_bytes()` for a
/// request body.
pub fn encode(msg: &Outgoing) -> String {
    let mut out = String::with_capacity(1024);
    encode_into(msg, &mut out);
    out
}

/// [`encode`], appending to `out` (so that a caller can reuse one buffer across messages).
pub fn encode_into(msg: &Outgoing, out: &mut String) {
    let mut w = W { out };
    w.raw(r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    w.raw("<oadr:oadrPayload");
    for (prefix, uri) in [
        ("oadr", NS_OADR),
        ("ei", NS_EI),
        ("pyld", NS_PYLD),
        ("emix", NS_EMIX),
        ("power", NS_POWER),
        ("scale", NS_SCALE),
        ("xcal", NS_XCAL),
        ("strm", NS_STRM),
    ] {
        let _ = write!(w.out, r#" xmlns:{prefix}="{uri}""#);
    }
    w.raw("><oadr:oadrSignedObject><oadr:");
    w.raw(msg.name());
    w.raw(r#" ei:schemaVersion="2.0b">"#);
    body(&mut w, msg);
    w.raw("</oadr:");
    w.raw(msg.name());
    w.raw("></oadr:oadrSignedObject></oadr:oadrPayload>");
}

/// Formats a duration as ISO 8601: `PT15M`, `PT0S`, `P1DT2H`, `-PT5M`, `PT0.5S`.
///
/// Days are the largest unit (a day is 86,400 s here; OpenADR durations have no calendar
/// months or years), zero components are left out, and a sub-second part is written as a
/// decimal fraction of the seconds with trailing zeros removed. The result parses back to the
/// same value with [`super::parse_duration`]. (The 2.0b XSD forbids fractions; [`encode`]
/// rounds to whole seconds before calling this.)
pub fn format_duration(d: TimeDelta) -> String {
    let mut s = String::with_capacity(16);
    push_duration(&mut s, d);
    s
}

/// Formats a date-time the way [`encode`] writes it: `2026-07-01T18:00:00Z`, or
/// `2026-07-01T18:00:00.250Z` when there is a sub-second part (milliseconds, truncated).
pub fn format_date_time(t: DateTime<Utc>) -> String {
    let mut s = String::with_capacity(24);
    push_date_time(&mut s, t);
    s
}

fn push_duration(s: &mut String, d: TimeDelta) {
    if d < TimeDelta::zero() {
        s.push('-');
    }
    let d = d.abs();
    let total = d.num_seconds();
    let nanos = d.subsec_nanos().unsigned_abs();
    let (days, rem) = (total / 86_400, total % 86_400);
    let (h, m, sec) = (rem / 3_600, rem % 3_600 / 60, rem % 60);
    s.push('P');
    if days > 0 {
        let _ = write!(s, "{days}D");
    }
    if h == 0 && m == 0 && sec == 0 && nanos == 0 {
        if days == 0 {
            s.push_str("T0S");
        }
        return;
    }
    s.push('T');
    if h > 0 {
        let _ = write!(s, "{h}H");
    }
    if m > 0 {
        let _ = write!(s, "{m}M");
    }
    if sec > 0 || nanos > 0 {
        let _ = write!(s, "{sec}");
        if nanos > 0 {
            let frac = format!("{nanos:09}");
            s.push('.');
            s.push_str(frac.trim_end_matches('0'));
        }
        s.push('S');
    }
}

/// Rounds to whole seconds (half away from zero), for the XSD's fraction-free pattern.
fn whole_seconds(d: TimeDelta) -> TimeDelta {
    let nanos = d.subsec_nanos();
    let secs = d.num_seconds();
    let secs = if nanos >= 500_000_000 {
        secs.saturating_add(1)
    } else if nanos <= -500_000_000 {
        secs.saturating_sub(1)
    } else {
        secs
    };
    TimeDelta::try_seconds(secs).unwrap_or(if secs < 0 { TimeDelta::MIN } else { TimeDelta::MAX })
}

fn push_date_time(s: &mut String, t: DateTime<Utc>) {
    let year = t.year();
    if year < 0 {
        s.push('-');
    }
    let _ = write!(
        s,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        year.unsigned_abs(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    // A leap second is carried as nanosecond >= 1e9; keep it inside the same second.
    let millis = (t.nanosecond() % 1_000_000_000) / 1_000_000;
    if millis > 0 {
        let _ = write!(s, ".{millis:03}");
    }
    s.push('Z');
}

/// XML 1.0 allows tab, LF, CR and everything from U+0020 except U+FFFE/U+FFFF (surrogates cannot
/// occur in a Rust string).
fn xml_char_ok(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
}

/// The document being written. Tags are written with their prefix (`ei:venID`).
struct W<'a> {
    out: &'a mut String,
}

impl W<'_> {
    fn raw(&mut self, s: &str) {
        self.out.push_str(s);
    }

    fn open(&mut self, tag: &str) {
        self.out.push('<');
        self.out.push_str(tag);
        self.out.push('>');
    }

    fn close(&mut self, tag: &str) {
        self.out.push_str("</");
        self.out.push_str(tag);
        self.out.push('>');
    }

    fn text(&mut self, text: &str) {
        let mut rest = text;
        while let Some(i) = rest.find(|c: char| matches!(c, '&' | '<' | '>' | '"' | '\'' | '\r') || !xml_char_ok(c)) {
            self.out.push_str(&rest[..i]);
            let Some(c) = rest[i..].chars().next() else {
                return;
            };
            self.out.push_str(match c {
                '&' => "&amp;",
                '<' => "&lt;",
                '>' => "&gt;",
                '"' => "&quot;",
                '\'' => "&apos;",
                '\r' => "&#13;",
                _ => "\u{FFFD}",
            });
            rest = &rest[i + c.len_utf8()..];
        }
        self.out.push_str(rest);
    }

    /// `<tag>escaped text</tag>`.
    fn el(&mut self, tag: &str, text: &str) {
        self.open(tag);
        self.text(text);
        self.close(tag);
    }

    fn opt_el(&mut self, tag: &str, text: Option<&str>) {
        if let Some(t) = text {
            self.el(tag, t);
        }
    }

    fn bool_el(&mut self, tag: &str, v: bool) {
        self.el(tag, if v { "true" } else { "false" });
    }

    fn u32_el(&mut self, tag: &str, v: u32) {
        self.open(tag);
        let _ = write!(self.out, "{v}");
        self.close(tag);
    }

    /// A finite float (callers substitute non-finite values first).
    fn float_el(&mut self, tag: &str, v: f64) {
        self.open(tag);
        let v = if v.is_finite() { v } else { 0.0 };
        let _ = write!(self.out, "{v}");
        self.close(tag);
    }

    fn date_time_el(&mut self, tag: &str, t: DateTime<Utc>) {
        self.open(tag);
        push_date_time(self.out, t);
        self.close(tag);
    }

    /// A bare `xcal:DurationValueType` element (`<tag>PT15M</tag>`), whole seconds.
    fn duration_value_el(&mut self, tag: &str, d: TimeDelta) {
        self.open(tag);
        push_duration(self.out, whole_seconds(d));
        self.close(tag);
    }

    /// A `DurationPropType` wrapper: `<tag><xcal:duration>PT15M</xcal:duration></tag>`.
    fn duration_prop(&mut self, tag: &str, d: TimeDelta) {
        self.open(tag);
        self.duration_value_el("xcal:duration", d);
        self.close(tag);
    }

    /// `<xcal:dtstart><xcal:date-time>..</xcal:date-time></xcal:dtstart>`.
    fn dtstart(&mut self, t: DateTime<Utc>) {
        self.open("xcal:dtstart");
        self.date_time_el("xcal:date-time", t);
        self.close("xcal:dtstart");
    }

    fn response_code(&mut self, code: u16) {
        let code = if (100..=999).contains(&code) { code } else { 469 };
        self.u32_el("ei:responseCode", u32::from(code));
    }

    fn ei_response(&mut self, r: &ResponseOut) {
        self.open("ei:eiResponse");
        self.response_code(r.code);
        self.el("ei:responseDescription", &r.description);
        self.el("pyld:requestID", &r.request_id);
        self.close("ei:eiResponse");
    }

    fn pending_reports(&mut self, ids: &[String]) {
        if ids.is_empty() {
            self.raw("<oadr:oadrPendingReports/>");
            return;
        }
        self.open("oadr:oadrPendingReports");
        for id in ids {
            self.el("ei:reportRequestID", id);
        }
        self.close("oadr:oadrPendingReports");
    }

    fn qualified_event_id(&mut self, event_id: &str, modification_number: u32) {
        self.open("ei:qualifiedEventID");
        self.el("ei:eventID", event_id);
        self.u32_el("ei:modificationNumber", modification_number);
        self.close("ei:qualifiedEventID");
    }

    fn event_response(&mut self, r: &EventResponseOut) {
        self.open("ei:eventResponse");
        self.response_code(r.code);
        self.el("ei:responseDescription", &r.description);
        self.el("pyld:requestID", &r.request_id);
        self.qualified_event_id(&r.event_id, r.modification_number);
        self.el("ei:optType", r.opt.as_str());
        self.close("ei:eventResponse");
    }

    fn report_description(&mut self, d: &ReportDescriptionOut) {
        self.open("oadr:oadrReportDescription");
        self.el("ei:rID", &d.r_id);
        if let Some(resource) = &d.resource_id {
            self.open("ei:reportDataSource");
            self.el("ei:resourceID", resource);
            self.close("ei:reportDataSource");
        }
        self.el("ei:reportType", &d.report_type);
        if d.power_kw {
            self.open("power:powerReal");
            self.el("power:itemDescription", "RealPower");
            self.el("power:itemUnits", "W");
            self.el("scale:siScaleCode", "k");
            self.open("power:powerAttributes");
            self.u32_el("power:hertz", POWER_HERTZ);
            self.u32_el("power:voltage", POWER_VOLTAGE);
            self.bool_el("power:ac", true);
            self.close("power:powerAttributes");
            self.close("power:powerReal");
        }
        self.el("ei:readingType", &d.reading_type);
        self.opt_el("emix:marketContext", d.market_context.as_deref());
        self.open("oadr:oadrSamplingRate");
        self.duration_value_el("oadr:oadrMinPeriod", d.min_period);
        self.duration_value_el("oadr:oadrMaxPeriod", d.max_period);
        self.bool_el("oadr:oadrOnChange", false);
        self.close("oadr:oadrSamplingRate");
        self.close("oadr:oadrReportDescription");
    }

    fn report_metadata(&mut self, r: &ReportMetadataOut) {
        self.open("oadr:oadrReport");
        self.duration_prop("xcal:duration", r.duration);
        for d in &r.descriptions {
            self.report_description(d);
        }
        // Required by the schema; a VEN's own metadata answers no request (openleadr writes 0).
        self.el("ei:reportRequestID", "0");
        self.el("ei:reportSpecifierID", &r.report_specifier_id);
        self.el("ei:reportName", &r.report_name);
        self.date_time_el("ei:createdDateTime", r.created);
        self.close("oadr:oadrReport");
    }

    fn report_payload(&mut self, r_id: &str, p: &ReportPayloadOut) {
        self.open("oadr:oadrReportPayload");
        self.el("ei:rID", r_id);
        let mut no_value = false;
        match p {
            ReportPayloadOut::Float(v) => {
                no_value = !v.is_finite();
                self.open("ei:payloadFloat");
                self.float_el("ei:value", *v);
                self.close("ei:payloadFloat");
            }
            ReportPayloadOut::ResourceStatus {
                online,
                manual_override,
                capacity_available_kw,
            } => {
                self.open("oadr:oadrPayloadResourceStatus");
                self.bool_el("oadr:oadrOnline", *online);
                self.bool_el("oadr:oadrManualOverride", *manual_override);
                if let Some(kw) = capacity_available_kw.filter(|v| v.is_finite()) {
                    self.open("oadr:oadrLoadControlState");
                    self.open("oadr:oadrCapacity");
                    self.float_el("oadr:oadrCurrent", kw);
                    self.close("oadr:oadrCapacity");
                    self.close("oadr:oadrLoadControlState");
                }
                self.close("oadr:oadrPayloadResourceStatus");
            }
        }
        if no_value {
            self.el("oadr:oadrDataQuality", "No Quality - No Value");
        }
        self.close("oadr:oadrReportPayload");
    }

    fn report_data(&mut self, r: &ReportDataOut) {
        self.open("oadr:oadrReport");
        self.dtstart(r.start);
        self.duration_prop("xcal:duration", r.duration);
        if r.intervals.iter().any(|i| !i.points.is_empty()) {
            self.open("strm:intervals");
            // One ei:interval per data point: the schema allows several payloads in one
            // interval, but openleadr (and VTNs built like it) read exactly one.
            for i in &r.intervals {
                for (r_id, p) in &i.points {
                    self.open("ei:interval");
                    self.dtstart(i.start);
                    self.duration_prop("xcal:duration", i.duration);
                    self.report_payload(r_id, p);
                    self.close("ei:interval");
                }
            }
            self.close("strm:intervals");
        }
        self.el("ei:eiReportID", &r.report_id);
        self.el("ei:reportRequestID", &r.report_request_id);
        self.el("ei:reportSpecifierID", &r.report_specifier_id);
        self.el("ei:reportName", &r.report_name);
        self.date_time_el("ei:createdDateTime", r.created);
        self.close("oadr:oadrReport");
    }
}

fn body(w: &mut W<'_>, msg: &Outgoing) {
    match msg {
        Outgoing::QueryRegistration { request_id } => w.el("pyld:requestID", request_id),
        Outgoing::CreatePartyRegistration {
            request_id,
            registration_id,
            ven_id,
            ven_name,
            http_pull,
            transport_address,
            report_only,
            xml_signature,
        } => {
            w.el("pyld:requestID", request_id);
            w.opt_el("ei:registrationID", registration_id.as_deref());
            w.opt_el("ei:venID", ven_id.as_deref());
            w.el("oadr:oadrProfileName", "2.0b");
            w.el("oadr:oadrTransportName", "simpleHttp");
            w.opt_el("oadr:oadrTransportAddress", transport_address.as_deref());
            w.bool_el("oadr:oadrReportOnly", *report_only);
            w.bool_el("oadr:oadrXmlSignature", *xml_signature);
            w.el("oadr:oadrVenName", ven_name);
            w.bool_el("oadr:oadrHttpPullModel", *http_pull);
        }
        Outgoing::CancelPartyRegistration {
            request_id,
            registration_id,
            ven_id,
        } => {
            w.el("pyld:requestID", request_id);
            w.el("ei:registrationID", registration_id);
            w.el("ei:venID", ven_id);
        }
        Outgoing::CanceledPartyRegistration {
            response,
            registration_id,
            ven_id,
        } => {
            w.ei_response(response);
            w.opt_el("ei:registrationID", registration_id.as_deref());
            w.el("ei:venID", ven_id);
        }
        Outgoing::Response { response, ven_id } | Outgoing::RegisteredReport { response, ven_id } => {
            w.ei_response(response);
            w.el("ei:venID", ven_id);
        }
        Outgoing::RequestEvent { request_id, ven_id } => {
            w.open("pyld:eiRequestEvent");
            w.el("pyld:requestID", request_id);
            w.el("ei:venID", ven_id);
            w.close("pyld:eiRequestEvent");
        }
        Outgoing::CreatedEvent { ven_id, responses } => {
            w.open("pyld:eiCreatedEvent");
            w.ei_response(&ResponseOut::ok(""));
            if !responses.is_empty() {
                w.open("ei:eventResponses");
                for r in responses {
                    w.event_response(r);
                }
                w.close("ei:eventResponses");
            }
            w.el("ei:venID", ven_id);
            w.close("pyld:eiCreatedEvent");
        }
        Outgoing::Poll { ven_id } => w.el("ei:venID", ven_id),
        Outgoing::RegisterReport {
            request_id,
            ven_id,
            reports,
        } => {
            w.el("pyld:requestID", request_id);
            for r in reports {
                w.report_metadata(r);
            }
            w.el("ei:venID", ven_id);
        }
        Outgoing::CreatedReport {
            response,
            ven_id,
            pending_report_request_ids,
        }
        | Outgoing::CanceledReport {
            response,
            ven_id,
            pending_report_request_ids,
        } => {
            w.ei_response(response);
            w.pending_reports(pending_report_request_ids);
            w.el("ei:venID", ven_id);
        }
        Outgoing::UpdateReport {
            request_id,
            ven_id,
            reports,
        } => {
            w.el("pyld:requestID", request_id);
            for r in reports {
                w.report_data(r);
            }
            w.el("ei:venID", ven_id);
        }
        Outgoing::CreateOpt {
            request_id,
            ven_id,
            opt_id,
            opt,
            reason,
            created,
            event_id,
            modification_number,
        } => {
            // ei:EiOptType first, then the oadrCreateOpt extension.
            w.el("ei:optID", opt_id);
            w.el("ei:optType", opt.as_str());
            w.el("ei:optReason", reason);
            w.el("ei:venID", ven_id);
            w.date_time_el("ei:createdDateTime", *created);
            w.el("pyld:requestID", request_id);
            w.qualified_event_id(event_id, *modification_number);
            // Required by the schema: the opt applies to this VEN as a whole.
            w.open("ei:eiTarget");
            w.el("ei:venID", ven_id);
            w.close("ei:eiTarget");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(format_duration(TimeDelta::zero()), "PT0S");
        assert_eq!(format_duration(TimeDelta::minutes(15)), "PT15M");
        assert_eq!(format_duration(TimeDelta::hours(26)), "P1DT2H");
        assert_eq!(format_duration(TimeDelta::days(2)), "P2D");
        assert_eq!(format_duration(-TimeDelta::minutes(5)), "-PT5M");
        assert_eq!(format_duration(TimeDelta::milliseconds(500)), "PT0.5S");
        assert_eq!(format_duration(TimeDelta::milliseconds(-1500)), "-PT1.5S");
        assert_eq!(whole_seconds(TimeDelta::milliseconds(1500)), TimeDelta::seconds(2));
        assert_eq!(whole_seconds(TimeDelta::milliseconds(-1500)), TimeDelta::seconds(-2));
        assert_eq!(whole_seconds(TimeDelta::milliseconds(1499)), TimeDelta::seconds(1));
    }

    #[test]
    fn escaping() {
        let mut s = String::new();
        W { out: &mut s }.text("a&b<c>d\"e'f\rg\u{1}h\u{FFFF}i\tj\nk");
        assert_eq!(s, "a&amp;b&lt;c&gt;d&quot;e&apos;f&#13;g\u{FFFD}h\u{FFFD}i\tj\nk");
    }
}
