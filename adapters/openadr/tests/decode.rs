//! Decoding tests for OpenADR 2.0b.

use chrono::{TimeDelta, TimeZone, Utc};
use flexgate_openadr::oadr2b::{
    DecodeError, EventStatus, Limits, Message, ResponseRequired, decode, decode_with_limits, normalized_json,
    parse_date_time, parse_duration,
};
use serde_json::json;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn distribute(name: &str) -> flexgate_openadr::oadr2b::DistributeEvent {
    match decode(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}")) {
        Message::DistributeEvent(d) => d,
        other => panic!("{name}: expected oadrDistributeEvent, got {other:?}"),
    }
}

const OADR: &str = "http://openadr.org/oadr-2.0b/2012/07";
const EI: &str = "http://docs.oasis-open.org/ns/energyinterop/201110";
const PYLD: &str = "http://docs.oasis-open.org/ns/energyinterop/201110/payloads";

fn wrap(body: &str) -> String {
    format!(
        r#"<oadr:oadrPayload xmlns:oadr="{OADR}" xmlns:ei="{EI}" xmlns:pyld="{PYLD}"><oadr:oadrSignedObject>{body}</oadr:oadrSignedObject></oadr:oadrPayload>"#
    )
}

#[test]
fn single_event_all_fields() {
    let d = distribute("single_prefixed.xml");
    assert_eq!(d.request_id, "REQ-1");
    assert_eq!(d.vtn_id, "VTN-1");
    assert_eq!(d.response.as_ref().map(|r| r.code.as_str()), Some("200"));
    assert_eq!(d.events.len(), 1);
    let e = &d.events[0];
    assert_eq!(e.id, "EVT-1");
    assert_eq!(e.modification_number, 2);
    assert_eq!(e.priority, Some(1));
    assert_eq!(e.market_context.as_deref(), Some("http://MarketContext1"));
    assert_eq!(e.created, Some(Utc.with_ymd_and_hms(2026, 6, 30, 12, 0, 0).unwrap()));
    assert_eq!(e.status, EventStatus::Far);
    assert!(!e.test);
    assert_eq!(e.vtn_comment, None);
    assert_eq!(e.dtstart, Utc.with_ymd_and_hms(2026, 7, 1, 18, 0, 0).unwrap());
    assert_eq!(e.duration, Some(TimeDelta::hours(1)));
    assert_eq!(e.start_after, Some(TimeDelta::minutes(5)));
    assert_eq!(e.notification, Some(TimeDelta::days(1)));
    assert_eq!(e.ramp_up, Some(TimeDelta::minutes(10)));
    assert_eq!(e.recovery, Some(TimeDelta::milliseconds(500)));
    assert_eq!(e.response_required, Some(ResponseRequired::Always));
    assert_eq!(e.targets.ven_id, vec!["VEN1"]);
    let s = &e.signals[0];
    assert_eq!(
        (s.name.as_str(), s.signal_type.as_str(), s.id.as_str()),
        ("LOAD_DISPATCH", "setpoint", "SIG-1")
    );
    let ib = s.item_base.as_ref().unwrap();
    assert_eq!(ib.kind, "powerReal");
    assert_eq!(ib.description.as_deref(), Some("RealPower"));
    assert_eq!(ib.units.as_deref(), Some("W"));
    assert_eq!(ib.scale.as_deref(), Some("k"));
    assert_eq!(s.current_value, Some(0.0));
    assert_eq!(s.intervals.len(), 1);
    assert_eq!(s.intervals[0].uid.as_deref(), Some("0"));
    assert_eq!(s.intervals[0].duration, Some(TimeDelta::minutes(60)));
    assert_eq!(s.intervals[0].values, vec![500.0]);
    assert!(s.targets.is_none());
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn three_prefix_styles_decode_identically() {
    let a = decode(&fixture("single_prefixed.xml")).unwrap();
    let b = decode(&fixture("single_epri.xml")).unwrap();
    let c = decode(&fixture("single_jaxb.xml")).unwrap();
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert_eq!(normalized_json(&a), normalized_json(&c));
}

#[test]
fn wrong_namespace_with_right_prefix_is_not_matched() {
    let xml = String::from_utf8(fixture("single_prefixed.xml")).unwrap().replace(
        "xmlns:ei=\"http://docs.oasis-open.org/ns/energyinterop/201110\"",
        "xmlns:ei=\"http://example.com/not-energyinterop\"",
    );
    let err = decode(xml.as_bytes()).unwrap_err();
    assert!(matches!(err, DecodeError::Missing { .. }), "{err}");
}

#[test]
fn normalized_json_shape() {
    let v = normalized_json(&decode(&fixture("single_jaxb.xml")).unwrap());
    assert_eq!(v["format"], "oadr2b");
    assert_eq!(v["message"], "oadrDistributeEvent");
    assert_eq!(v["vtn_id"], "VTN-1");
    assert_eq!(v["ven_id"], json!(null));
    assert_eq!(v["request_id"], "REQ-1");
    assert_eq!(v["warnings"], json!([]));
    let e = &v["events"][0];
    assert_eq!(e["id"], "EVT-1");
    assert_eq!(e["modification"], 2);
    assert_eq!(e["priority"], 1);
    assert_eq!(e["status"], "far");
    assert_eq!(e["test"], false);
    assert_eq!(e["market_context"], "http://MarketContext1");
    assert_eq!(e["start"], "2026-07-01T18:00:00Z");
    assert_eq!(e["duration_s"], 3600);
    assert_eq!(e["recovery_s"], 0.5);
    assert_eq!(e["response_required"], "always");
    let s = &e["signals"][0];
    assert_eq!(s["name"], "LOAD_DISPATCH");
    assert_eq!(s["type"], "setpoint");
    assert_eq!(s["units"], "W");
    assert_eq!(s["scale"], "k");
    assert_eq!(
        s["intervals"],
        json!([{"uid": "0", "start": "2026-07-01T18:00:00Z", "duration_s": 3600, "values": [500.0]}])
    );
    assert_eq!(
        e["targets"],
        json!({"ven_id": ["VEN1"], "group_id": [], "resource_id": [], "party_id": []})
    );
}

#[test]
fn multi_interval_starts_and_trimming() {
    let d = distribute("multi_interval.xml");
    let e = &d.events[0];
    // " 2026-07-01T20:00:00+02:00 \n" → 18:00Z
    assert_eq!(e.dtstart, Utc.with_ymd_and_hms(2026, 7, 1, 18, 0, 0).unwrap());
    let s = &e.signals[0];
    assert_eq!(
        s.intervals.iter().map(|i| i.values[0]).collect::<Vec<_>>(),
        vec![500.0, 400.0, 300.5]
    );
    let v = normalized_json(&Message::DistributeEvent(d.clone()));
    let starts: Vec<_> = v["events"][0]["signals"][0]["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["start"].as_str().unwrap().to_owned(),
                i["duration_s"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        starts,
        vec![
            ("2026-07-01T18:00:00Z".to_owned(), 900),
            ("2026-07-01T18:15:00Z".to_owned(), 900),
            ("2026-07-01T18:30:00Z".to_owned(), 1800)
        ]
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn multi_event_epri_style() {
    let d = distribute("multi_event.xml");
    assert_eq!(
        d.events.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        vec!["EVT-A", "EVT-B", "EVT-C"]
    );
    assert_eq!(d.events[0].status, EventStatus::Near);
    assert_eq!(d.events[1].priority, Some(0));
    assert_eq!(d.events[1].response_required, Some(ResponseRequired::Never));
    assert_eq!(d.events[1].market_context.as_deref(), Some("http://MarketContext2"));
    assert!(d.events[1].targets.is_empty());
    assert_eq!(d.events[2].status, EventStatus::Active);
    assert_eq!(d.events[2].modification_number, 5);
    assert_eq!(d.events[2].duration, Some(TimeDelta::minutes(30)));
    let t = &d.events[2].targets;
    assert_eq!(t.group_id, vec!["G1", "G2"]);
    assert_eq!(t.resource_id, vec!["R1"]);
    assert_eq!(t.party_id, vec!["P1"]);
    assert_eq!(d.events[2].signals[0].intervals[0].values, vec![3.0]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn cancelled_event() {
    let d = distribute("cancelled.xml");
    assert_eq!(d.events[0].status, EventStatus::Cancelled);
    assert_eq!(d.events[0].modification_number, 3);
    assert_eq!(
        normalized_json(&Message::DistributeEvent(d))["events"][0]["status"],
        "cancelled"
    );
}

#[test]
fn test_event_flag() {
    assert!(distribute("test_event.xml").events[0].test);
    for (text, expected) in [
        ("false", false),
        (" false\n", false),
        ("true", true),
        ("FALSE", true),
        ("", true),
    ] {
        let xml = String::from_utf8(fixture("test_event.xml")).unwrap().replace(
            "<ei:testEvent>true</ei:testEvent>",
            &format!("<ei:testEvent>{text}</ei:testEvent>"),
        );
        let Message::DistributeEvent(d) = decode(xml.as_bytes()).unwrap() else {
            panic!()
        };
        assert_eq!(d.events[0].test, expected, "testEvent {text:?}");
    }
}

#[test]
fn simple_open_ended_event() {
    let d = distribute("simple_open_ended.xml");
    let e = &d.events[0];
    assert_eq!(e.duration, None);
    assert_eq!(e.signals[0].name, "SIMPLE");
    assert_eq!(e.signals[0].item_base, None);
    assert_eq!(e.signals[0].current_value, None);
    assert!(e.targets.is_empty());
    let v = normalized_json(&Message::DistributeEvent(d.clone()));
    assert_eq!(v["events"][0]["duration_s"], json!(null));
    assert_eq!(v["events"][0]["response_required"], "never");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn load_control_capacity_out_of_range_warns() {
    let d = distribute("load_control_capacity.xml");
    let s = &d.events[0].signals[0];
    assert_eq!(s.signal_type, "x-loadControlCapacity");
    assert_eq!(s.intervals[1].values, vec![8.0]);
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    assert!(
        d.warnings[0].path.ends_with("intervals/interval[2]"),
        "{}",
        d.warnings[0]
    );
    assert!(d.warnings[0].message.contains("outside [0, 1]"));
}

#[test]
fn delta_with_day_durations_and_signal_targets() {
    let d = distribute("delta.xml");
    let e = &d.events[0];
    assert_eq!(e.duration, Some(TimeDelta::days(1) + TimeDelta::hours(2)));
    let s = &e.signals[0];
    assert_eq!(s.signal_type, "delta");
    assert_eq!(s.intervals[0].values, vec![-200.0]);
    assert_eq!(s.intervals[1].values, vec![-150.25]);
    assert_eq!(s.targets.as_ref().unwrap().resource_id, vec!["GPU-RACK-7"]);
    let starts = e.interval_starts(s);
    assert_eq!(starts[1], Utc.with_ymd_and_hms(2026, 7, 2, 18, 0, 0).unwrap());
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn multiple_values_and_duration_mismatch_warning() {
    let d = distribute("multi_value.xml");
    let s = &d.events[0].signals[0];
    assert_eq!(s.intervals[0].values, vec![0.10, 0.12]);
    assert_eq!(s.item_base.as_ref().unwrap().kind, "currency");
    assert_eq!(s.item_base.as_ref().unwrap().units.as_deref(), Some("USD"));
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    assert!(d.warnings[0].message.contains("add up to 3000s"), "{}", d.warnings[0]);
}

#[test]
fn openleadr_per_interval_dtstart_warns() {
    let d = distribute("openleadr_style.xml");
    let s = &d.events[0].signals[0];
    assert_eq!(
        s.intervals[1].dtstart,
        Some(Utc.with_ymd_and_hms(2026, 7, 1, 18, 15, 0).unwrap())
    );
    assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
    assert!(d.warnings.iter().all(|w| w.message.contains("per-interval dtstart")));
    let v = normalized_json(&Message::DistributeEvent(d));
    assert_eq!(v["warnings"].as_array().unwrap().len(), 2);
}

#[test]
fn empty_distribute_has_no_events() {
    let d = distribute("empty_distribute.xml");
    assert!(d.events.is_empty());
}

#[test]
fn missing_element_errors_name_the_path() {
    let xml = String::from_utf8(fixture("single_prefixed.xml"))
        .unwrap()
        .replace("<ei:eventID>EVT-1</ei:eventID>", "");
    let err = decode(xml.as_bytes()).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Missing {
            path: "oadrDistributeEvent/oadrEvent[1]/eiEvent/eventDescriptor/eventID".into()
        }
    );
    assert!(
        err.to_string()
            .contains("oadrDistributeEvent/oadrEvent[1]/eiEvent/eventDescriptor/eventID")
    );

    let xml = String::from_utf8(fixture("multi_event.xml"))
        .unwrap()
        .replace("<d3p1:signalName>SIMPLE</d3p1:signalName>\n            <d3p1:signalType>level</d3p1:signalType>\n            <d3p1:signalID>S-C</d3p1:signalID>", "<d3p1:signalName>SIMPLE</d3p1:signalName><d3p1:signalID>S-C</d3p1:signalID>");
    let err = decode(xml.as_bytes()).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Missing {
            path: "oadrDistributeEvent/oadrEvent[3]/eiEvent/eiEventSignals/eiEventSignal[1]/signalType".into()
        }
    );
}

#[test]
fn invalid_values_are_errors_with_paths() {
    let base = String::from_utf8(fixture("single_prefixed.xml")).unwrap();
    let cases = [
        (
            "<ei:value>500</ei:value>",
            "<ei:value>NaN</ei:value>",
            "intervals/interval[1]/signalPayload/payloadFloat/value",
        ),
        (
            "<ei:value>500</ei:value>",
            "<ei:value>inf</ei:value>",
            "payloadFloat/value",
        ),
        (
            "<ei:value>500</ei:value>",
            "<ei:value>-Infinity</ei:value>",
            "payloadFloat/value",
        ),
        (
            "<ei:value>500</ei:value>",
            "<ei:value>five</ei:value>",
            "payloadFloat/value",
        ),
        (
            "<ei:eventStatus>far</ei:eventStatus>",
            "<ei:eventStatus>soon</ei:eventStatus>",
            "eventDescriptor/eventStatus",
        ),
        (
            "<ei:modificationNumber>2</ei:modificationNumber>",
            "<ei:modificationNumber>-1</ei:modificationNumber>",
            "modificationNumber",
        ),
        (
            "<xcal:date-time>2026-07-01T18:00:00Z</xcal:date-time>",
            "<xcal:date-time>2026-07-01T18:00:00</xcal:date-time>",
            "dtstart/date-time",
        ),
        (
            "<oadr:oadrResponseRequired>always</oadr:oadrResponseRequired>",
            "<oadr:oadrResponseRequired>sometimes</oadr:oadrResponseRequired>",
            "oadrEvent[1]/oadrResponseRequired",
        ),
    ];
    for (from, to, path_end) in cases {
        assert!(base.contains(from), "{from}");
        let xml = base.replacen(from, to, 1);
        match decode(xml.as_bytes()) {
            Err(DecodeError::Invalid { path, .. }) => assert!(path.ends_with(path_end), "{to}: {path}"),
            other => panic!("{to}: expected Invalid, got {other:?}"),
        }
    }
    // An unreadable event duration spoils that event, not the message: the event is marked
    // (the VEN refuses it with 454), with the path, and the message still decodes.
    let xml = base.replacen(
        "<xcal:duration>PT1H</xcal:duration>",
        "<xcal:duration>1 hour</xcal:duration>",
        1,
    );
    match decode(xml.as_bytes()) {
        Ok(Message::DistributeEvent(d)) => {
            let reasons = &d.events[0].invalid;
            assert!(
                reasons.len() == 1
                    && reasons[0].contains("properties/duration/duration")
                    && reasons[0].contains("1 hour"),
                "{reasons:?}"
            );
        }
        other => panic!("expected a distribute with an unusable event, got {other:?}"),
    }
}

#[test]
fn durations() {
    let ok = [
        ("PT1H", TimeDelta::hours(1)),
        ("PT120M", TimeDelta::minutes(120)),
        ("P1DT2H", TimeDelta::hours(26)),
        ("PT0S", TimeDelta::zero()),
        ("PT0.5S", TimeDelta::milliseconds(500)),
        ("P0Y0M0DT0H30M0S", TimeDelta::minutes(30)),
        ("P1W", TimeDelta::days(7)),
        (" PT10S\n", TimeDelta::seconds(10)),
        ("-PT5M", TimeDelta::minutes(-5)),
        ("+PT5M", TimeDelta::minutes(5)),
        ("PT1,5S", TimeDelta::milliseconds(1500)),
        ("PT1.5M", TimeDelta::seconds(90)),
    ];
    for (s, d) in ok {
        assert_eq!(parse_duration(s), Ok(d), "{s}");
    }
    for bad in [
        "", "P", "PT", "1H", "PT1", "PT1H1H", "PT1M1H", "P1H", "PT1D", "P1M", "P1Y", "PT1.5M1S", "PTxS", "--PT1S",
        "P1DT",
    ] {
        assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
    }
}

#[test]
fn date_times() {
    let t = Utc.with_ymd_and_hms(2026, 7, 1, 18, 0, 0).unwrap();
    assert_eq!(parse_date_time("2026-07-01T18:00:00Z"), Ok(t));
    assert_eq!(parse_date_time("2026-07-01T18:00:00.000Z \n"), Ok(t));
    assert_eq!(parse_date_time("2026-07-01T13:00:00-05:00"), Ok(t));
    assert!(parse_date_time("2026-07-01T18:00:00").is_err());
    assert!(parse_date_time("yesterday").is_err());
}

#[test]
fn other_messages() {
    let m = decode(
        wrap(r#"<oadr:oadrCreatedPartyRegistration ei:schemaVersion="2.0b">
            <ei:eiResponse><ei:responseCode>200</ei:responseCode><ei:responseDescription>OK</ei:responseDescription><pyld:requestID>RQ</pyld:requestID></ei:eiResponse>
            <ei:registrationID>REG-1</ei:registrationID><ei:venID>VEN1</ei:venID><ei:vtnID>VTN-1</ei:vtnID>
            <oadr:oadrProfiles><oadr:oadrProfile><oadr:oadrProfileName>2.0b</oadr:oadrProfileName><oadr:oadrTransports/></oadr:oadrProfile></oadr:oadrProfiles>
            <oadr:oadrRequestedOadrPollFreq><xcal:duration xmlns:xcal="urn:ietf:params:xml:ns:icalendar-2.0">PT10S</xcal:duration></oadr:oadrRequestedOadrPollFreq>
            </oadr:oadrCreatedPartyRegistration>"#)
        .as_bytes(),
    )
    .unwrap();
    let Message::CreatedPartyRegistration(c) = &m else {
        panic!("{m:?}")
    };
    assert_eq!(c.registration_id.as_deref(), Some("REG-1"));
    assert_eq!(c.ven_id.as_deref(), Some("VEN1"));
    assert_eq!(c.vtn_id.as_deref(), Some("VTN-1"));
    assert_eq!(c.profiles, vec!["2.0b"]);
    assert_eq!(c.poll_freq, Some(TimeDelta::seconds(10)));
    assert_eq!(c.response.request_id.as_deref(), Some("RQ"));
    let v = normalized_json(&m);
    assert_eq!(
        (v["ven_id"].clone(), v["poll_freq_s"].clone()),
        (json!("VEN1"), json!(10))
    );

    let m = decode(
        wrap(r#"<oadr:oadrRequestReregistration><ei:venID>VEN1</ei:venID></oadr:oadrRequestReregistration>"#)
            .as_bytes(),
    )
    .unwrap();
    assert_eq!(
        m,
        Message::RequestReregistration(flexgate_openadr::oadr2b::RequestReregistration {
            ven_id: Some("VEN1".into())
        })
    );

    let m = decode(wrap(r#"<oadr:oadrCancelPartyRegistration><pyld:requestID>R9</pyld:requestID><ei:registrationID>REG-1</ei:registrationID><ei:venID>VEN1</ei:venID></oadr:oadrCancelPartyRegistration>"#).as_bytes()).unwrap();
    let Message::CancelPartyRegistration(c) = &m else {
        panic!("{m:?}")
    };
    assert_eq!((c.request_id.as_str(), c.registration_id.as_str()), ("R9", "REG-1"));

    let m = decode(wrap(r#"<oadr:oadrResponse><ei:eiResponse><ei:responseCode>200</ei:responseCode><pyld:requestID/></ei:eiResponse><ei:venID>VEN1</ei:venID></oadr:oadrResponse>"#).as_bytes()).unwrap();
    let Message::Response(r) = &m else { panic!("{m:?}") };
    assert_eq!(
        (r.response.code.as_str(), r.response.request_id.as_deref()),
        ("200", None)
    );

    let m = decode(wrap(r#"<oadr:oadrRegisterReport><pyld:requestID>RR1</pyld:requestID><oadr:oadrReport><ei:reportRequestID>0</ei:reportRequestID><ei:reportSpecifierID>METADATA_TELEMETRY</ei:reportSpecifierID></oadr:oadrReport><ei:venID>VEN1</ei:venID></oadr:oadrRegisterReport>"#).as_bytes()).unwrap();
    let Message::RegisterReport(r) = &m else {
        panic!("{m:?}")
    };
    assert_eq!(
        (
            r.request_id.as_str(),
            r.report_request_ids.clone(),
            r.report_specifier_ids.clone()
        ),
        ("RR1", vec!["0".to_owned()], vec!["METADATA_TELEMETRY".to_owned()])
    );

    let m = decode(wrap(r#"<oadr:oadrRegisteredReport><ei:eiResponse><ei:responseCode>200</ei:responseCode><pyld:requestID>RR1</pyld:requestID></ei:eiResponse><oadr:oadrReportRequest><ei:reportRequestID>RQ-A</ei:reportRequestID></oadr:oadrReportRequest></oadr:oadrRegisteredReport>"#).as_bytes()).unwrap();
    let Message::RegisteredReport(r) = &m else {
        panic!("{m:?}")
    };
    assert_eq!(r.report_request_ids, vec!["RQ-A"]);

    let m = decode(wrap(r#"<oadr:oadrCreateReport><pyld:requestID>CR1</pyld:requestID><oadr:oadrReportRequest><ei:reportRequestID>RQ-B</ei:reportRequestID></oadr:oadrReportRequest><oadr:oadrReportRequest><ei:reportRequestID>RQ-C</ei:reportRequestID></oadr:oadrReportRequest></oadr:oadrCreateReport>"#).as_bytes()).unwrap();
    let Message::CreateReport(r) = &m else { panic!("{m:?}") };
    assert_eq!(
        (r.request_id.as_str(), r.report_request_ids.clone()),
        ("CR1", vec!["RQ-B".to_owned(), "RQ-C".to_owned()])
    );

    let m = decode(wrap(r#"<oadr:oadrCancelReport><pyld:requestID>X1</pyld:requestID><ei:reportRequestID>RQ-B</ei:reportRequestID><pyld:reportToFollow>true</pyld:reportToFollow></oadr:oadrCancelReport>"#).as_bytes()).unwrap();
    let Message::CancelReport(r) = &m else { panic!("{m:?}") };
    assert_eq!(
        (r.report_request_ids.clone(), r.report_to_follow),
        (vec!["RQ-B".to_owned()], true)
    );

    // oadrCreatedOpt is decoded now, so an empty one is missing its eiResponse.
    assert_eq!(
        decode(wrap(r#"<oadr:oadrCreatedOpt/>"#).as_bytes()),
        Err(DecodeError::Missing {
            path: "oadrCreatedOpt/eiResponse".into()
        })
    );
    let m = decode(wrap(r#"<oadr:oadrFutureMessage/>"#).as_bytes()).unwrap();
    assert_eq!(
        m,
        Message::Other {
            name: "oadrFutureMessage".into()
        }
    );
    assert_eq!(normalized_json(&m)["message"], "oadrFutureMessage");

    // A bare message, without oadrPayload, with a default namespace.
    let m = decode(format!(r#"<oadrRequestReregistration xmlns="{OADR}"><venID xmlns="{EI}"> VEN2 </venID></oadrRequestReregistration>"#).as_bytes()).unwrap();
    assert_eq!(
        m,
        Message::RequestReregistration(flexgate_openadr::oadr2b::RequestReregistration {
            ven_id: Some("VEN2".into())
        })
    );
}

#[test]
fn not_openadr_root_is_rejected() {
    assert!(matches!(
        decode(b"<html><body/></html>"),
        Err(DecodeError::NotOpenAdr { .. })
    ));
    // Right local name, no namespace.
    assert!(matches!(
        decode(b"<oadrPayload><oadrSignedObject/></oadrPayload>"),
        Err(DecodeError::NotOpenAdr { .. })
    ));
    assert!(matches!(decode(b""), Err(DecodeError::Empty)));
    assert!(matches!(
        decode(b"<x:a/>"),
        Err(DecodeError::UnknownPrefix { .. }) | Err(DecodeError::Xml { .. })
    ));
}

#[test]
fn doctype_is_rejected() {
    let xml = format!(
        "<?xml version=\"1.0\"?><!DOCTYPE oadrPayload SYSTEM \"http://example.com/x.dtd\">{}",
        wrap("<oadr:oadrPoll/>")
    );
    assert_eq!(decode(xml.as_bytes()), Err(DecodeError::Doctype));
}

#[test]
fn billion_laughs_is_rejected() {
    let mut xml = String::from("<?xml version=\"1.0\"?>\n<!DOCTYPE lolz [\n <!ENTITY lol \"lol\">\n");
    for i in 1..10 {
        let prev = if i == 1 {
            "lol".to_owned()
        } else {
            format!("lol{}", i - 1)
        };
        xml.push_str(&format!(" <!ENTITY lol{i} \"{}\">\n", format!("&{prev};").repeat(10)));
    }
    xml.push_str("]>\n");
    xml.push_str(&wrap(
        "<oadr:oadrRequestReregistration><ei:venID>&lol9;</ei:venID></oadr:oadrRequestReregistration>",
    ));
    assert_eq!(decode(xml.as_bytes()), Err(DecodeError::Doctype));
}

#[test]
fn undefined_entities_are_rejected_without_doctype() {
    let xml = wrap("<oadr:oadrRequestReregistration><ei:venID>&lol9;</ei:venID></oadr:oadrRequestReregistration>");
    assert_eq!(decode(xml.as_bytes()), Err(DecodeError::Entity { name: "lol9".into() }));
    let xml =
        wrap("<oadr:oadrRequestReregistration ei:x=\"&xxe;\"><ei:venID>V</ei:venID></oadr:oadrRequestReregistration>");
    assert_eq!(decode(xml.as_bytes()), Err(DecodeError::Entity { name: "xxe".into() }));
    // The predefined five and character references are fine.
    let xml = wrap(
        "<oadr:oadrRequestReregistration><ei:venID>a&amp;b&lt;&gt;&quot;&apos;&#65;&#x42;</ei:venID></oadr:oadrRequestReregistration>",
    );
    let Message::RequestReregistration(r) = decode(xml.as_bytes()).unwrap() else {
        panic!()
    };
    assert_eq!(r.ven_id.as_deref(), Some("a&b<>\"'AB"));
}

#[test]
fn size_limit() {
    let limits = Limits::default();
    let mut xml = wrap("<oadr:oadrPoll><ei:venID>V</ei:venID></oadr:oadrPoll>").into_bytes();
    let pad = limits.max_bytes + 1 - xml.len();
    xml.extend(std::iter::repeat_n(b' ', pad));
    assert_eq!(xml.len(), limits.max_bytes + 1);
    assert_eq!(
        decode(&xml),
        Err(DecodeError::TooLarge {
            size: limits.max_bytes + 1,
            limit: limits.max_bytes
        })
    );
    xml.pop();
    assert!(decode(&xml).is_ok());
}

#[test]
fn depth_limit() {
    let inner = format!("{}{}", "<ei:x>".repeat(100), "</ei:x>".repeat(100));
    let xml = wrap(&format!("<oadr:oadrPoll><ei:venID>V</ei:venID>{inner}</oadr:oadrPoll>"));
    assert_eq!(decode(xml.as_bytes()), Err(DecodeError::TooDeep { limit: 64 }));
    let inner = format!("{}{}", "<ei:x>".repeat(50), "</ei:x>".repeat(50));
    assert!(decode(wrap(&format!("<oadr:oadrPoll><ei:venID>V</ei:venID>{inner}</oadr:oadrPoll>")).as_bytes()).is_ok());
}

#[test]
fn too_many_events_and_intervals() {
    let limits = Limits {
        max_items: 3,
        ..Limits::default()
    };
    // 3 events is fine; duplicate ids warn.
    let base = String::from_utf8(fixture("multi_event.xml")).unwrap();
    assert!(decode_with_limits(base.as_bytes(), &limits).is_ok());
    let start = base.find("<oadrEvent>").unwrap();
    let end = base.rfind("</oadrEvent>").unwrap() + "</oadrEvent>".len();
    let events = &base[start..end];
    let doubled = format!("{}{}{}", &base[..start], events.repeat(2), &base[end..]);
    match decode_with_limits(doubled.as_bytes(), &limits) {
        Err(DecodeError::TooMany { path, limit: 3 }) => assert_eq!(path, "oadrDistributeEvent/oadrEvent"),
        other => panic!("{other:?}"),
    }
    let Message::DistributeEvent(d) = decode(doubled.as_bytes()).unwrap() else {
        panic!()
    };
    assert_eq!(d.events.len(), 6);
    assert!(d.warnings.iter().any(|w| w.message.contains("duplicate eventID")));
    // 10,001 intervals with the default limit.
    let base = String::from_utf8(fixture("single_prefixed.xml")).unwrap();
    let start = base.find("<ei:interval>").unwrap();
    let end = base.find("</ei:interval>").unwrap() + "</ei:interval>".len();
    let many = format!("{}{}{}", &base[..start], base[start..end].repeat(10_001), &base[end..]);
    match decode(many.as_bytes()) {
        Err(DecodeError::TooMany { path, limit: 10_000 }) => assert!(
            path.ends_with("strm:intervals/interval") || path.ends_with("intervals/interval"),
            "{path}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn non_utf8_is_rejected() {
    let mut xml =
        wrap("<oadr:oadrRequestReregistration><ei:venID>V</ei:venID></oadr:oadrRequestReregistration>").into_bytes();
    let at = xml.iter().position(|&b| b == b'V').unwrap();
    xml[at] = 0xff;
    assert!(matches!(decode(&xml), Err(DecodeError::NotUtf8 { .. })));
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>{}",
        wrap("<oadr:oadrPoll/>")
    );
    assert!(matches!(
        decode(xml.as_bytes()),
        Err(DecodeError::UnsupportedEncoding(_))
    ));
}

#[test]
fn truncated_documents_error_at_every_offset() {
    for name in ["single_prefixed.xml", "multi_event.xml", "openleadr_style.xml"] {
        let full = fixture(name);
        let significant = full.trim_ascii_end().len();
        for cut in 0..significant {
            let r = decode(&full[..cut]);
            assert!(r.is_err(), "{name} cut at {cut} decoded: {r:?}");
        }
        assert!(decode(&full[..significant]).is_ok());
    }
}

#[test]
fn garbage_never_panics() {
    let full = fixture("single_jaxb.xml");
    // Deterministic byte mutations.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..2000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut doc = full.clone();
        let at = (seed % doc.len() as u64) as usize;
        doc[at] = b"<>/&;:\"' x0-"[(seed >> 32) as usize % 12];
        let _ = decode(&doc);
    }
}

#[test]
fn signature_is_skipped_and_extra_messages_rejected() {
    let xml = format!(
        r#"<oadrPayload xmlns="{OADR}"><ds:Signature xmlns:ds="http://www.w3.org/2000/09/xmldsig#"><ds:SignedInfo/></ds:Signature><oadrSignedObject><oadrRequestReregistration/></oadrSignedObject></oadrPayload>"#
    );
    assert_eq!(
        decode(xml.as_bytes()),
        Ok(Message::RequestReregistration(
            flexgate_openadr::oadr2b::RequestReregistration { ven_id: None }
        ))
    );
    let xml = wrap("<oadr:oadrPoll/><oadr:oadrPoll/>");
    assert!(matches!(decode(xml.as_bytes()), Err(DecodeError::Invalid { .. })));
    let xml = wrap("");
    assert_eq!(
        decode(xml.as_bytes()),
        Err(DecodeError::Missing {
            path: "oadrSignedObject/*".into()
        })
    );
}

#[test]
fn default_limits() {
    let l = Limits::default();
    assert_eq!((l.max_bytes, l.max_depth, l.max_items), (4 * 1024 * 1024, 64, 10_000));
}

#[test]
fn a_duration_without_components_marks_its_event_unusable_never_open_ended() {
    let text = String::from_utf8(fixture("multi_event.xml")).unwrap();
    // Event 1's active period, and event 2's (only) interval.
    let broken = text
        .replacen(
            "<d3p6:duration>PT2H</d3p6:duration>",
            "<d3p6:duration>PT</d3p6:duration>",
            1,
        )
        .replacen(
            "<d3p6:duration>PT30M</d3p6:duration></d3p6:duration>\n                <d3p6:uid>",
            "<d3p6:duration>P</d3p6:duration></d3p6:duration>\n                <d3p6:uid>",
            1,
        );
    assert_ne!(broken, text);
    let Message::DistributeEvent(d) = decode(broken.as_bytes()).expect("the message still decodes") else {
        panic!("not a distribute");
    };
    assert_eq!(d.events.len(), 3);
    assert_eq!(d.events[0].invalid.len(), 1, "{:?}", d.events[0].invalid);
    assert!(
        d.events[0].invalid[0].contains("eiActivePeriod"),
        "{:?}",
        d.events[0].invalid
    );
    assert!(
        d.events[0].invalid[0].contains("PT0S"),
        "the reason says how to write an open end"
    );
    assert!(
        d.events[1].invalid.iter().any(|r| r.contains("interval")),
        "{:?}",
        d.events[1].invalid
    );
    assert!(d.events[2].invalid.is_empty());
    let json = normalized_json(&Message::DistributeEvent(d.clone()));
    assert!(json.to_string().contains("\"invalid\""), "{json}");
    // An explicit zero still means "no set end".
    let open = distribute("simple_open_ended.xml");
    assert!(open.events.iter().all(|e| e.invalid.is_empty() && e.duration.is_none()));
}
