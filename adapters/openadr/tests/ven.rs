//! The sans-IO 2.0b VEN driven by a scripted fake VTN on a simulated clock.

use std::collections::{HashMap, VecDeque};

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use flexgate_openadr::oadr2b::outgoing::{EventResponseOut, OptType, Outgoing, ReportDataOut, ReportPayloadOut};
use flexgate_openadr::oadr2b::signal::SignalMeaning;
use flexgate_openadr::oadr2b::ven::{
    Action, CancelReason, DistributeOutcome, EventChange, EventState, OptDecision, Phase, Registration, Resumed,
    TelemetrySample, Ven, VenConfig, VenError,
};
use flexgate_openadr::oadr2b::{
    CancelPartyRegistration, CreatedEvent, CreatedPartyRegistration, DistributeEvent, EiResponse, Event, EventStatus,
    Interval, ItemBase, Message, RequestReregistration, Response, ResponseRequired, Signal, Targets, decode,
};
use flexgate_openadr::target::LoadTarget;

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 7, 1, 12, 0, 0).unwrap()
}

fn secs(s: i64) -> TimeDelta {
    TimeDelta::seconds(s)
}

fn ei(code: &str) -> EiResponse {
    EiResponse {
        code: code.into(),
        description: Some(if code == "200" { "OK" } else { "ERROR" }.into()),
        request_id: None,
    }
}

fn response(code: &str) -> Message {
    Message::Response(Response {
        response: ei(code),
        ven_id: Some("VEN-1".into()),
    })
}

/// A LOAD_DISPATCH setpoint of `kw` (W, scale k) from t0+1h for 1h, responseRequired always.
fn ev(id: &str, modification: u32) -> Event {
    ev_kw(id, modification, 500.0)
}

fn ev_kw(id: &str, modification: u32, kw: f64) -> Event {
    Event {
        id: id.into(),
        modification_number: modification,
        priority: Some(1),
        market_context: Some("http://prog".into()),
        created: Some(t0()),
        status: EventStatus::Far,
        test: false,
        vtn_comment: None,
        dtstart: t0() + TimeDelta::hours(1),
        duration: Some(TimeDelta::hours(1)),
        start_after: Some(TimeDelta::minutes(5)),
        notification: Some(TimeDelta::hours(1)),
        ramp_up: Some(TimeDelta::minutes(10)),
        recovery: Some(TimeDelta::minutes(15)),
        response_required: Some(ResponseRequired::Always),
        invalid: Vec::new(),
        signals: vec![Signal {
            name: "LOAD_DISPATCH".into(),
            signal_type: "setpoint".into(),
            id: "S1".into(),
            item_base: Some(ItemBase {
                kind: "powerReal".into(),
                description: Some("RealPower".into()),
                units: Some("W".into()),
                scale: Some("k".into()),
            }),
            current_value: Some(0.0),
            intervals: vec![Interval {
                uid: Some("0".into()),
                duration: Some(TimeDelta::hours(1)),
                dtstart: None,
                values: vec![kw],
            }],
            targets: None,
        }],
        targets: Targets::default(),
    }
}

fn distribute(request_id: &str, events: Vec<Event>) -> Message {
    distribute_from("VTN-1", request_id, events)
}

fn distribute_from(vtn_id: &str, request_id: &str, events: Vec<Event>) -> Message {
    Message::DistributeEvent(DistributeEvent {
        response: Some(ei("200")),
        request_id: request_id.into(),
        vtn_id: vtn_id.into(),
        events,
        warnings: Vec::new(),
    })
}

const NS: &str = concat!(
    r#"xmlns:oadr="http://openadr.org/oadr-2.0b/2012/07" "#,
    r#"xmlns:ei="http://docs.oasis-open.org/ns/energyinterop/201110" "#,
    r#"xmlns:pyld="http://docs.oasis-open.org/ns/energyinterop/201110/payloads" "#,
    r#"xmlns:xcal="urn:ietf:params:xml:ns:icalendar-2.0""#
);

/// Report messages are built as XML and decoded, as they would arrive.
fn xml(body: &str) -> Message {
    let doc =
        format!(r#"<oadr:oadrPayload {NS}><oadr:oadrSignedObject>{body}</oadr:oadrSignedObject></oadr:oadrPayload>"#);
    decode(doc.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{doc}"))
}

fn report_request(id: &str, specifier: &str, granularity: &str, back: &str, r_ids: &[&str]) -> String {
    let payloads: String = r_ids
        .iter()
        .map(|r| format!("<ei:specifierPayload><ei:rID>{r}</ei:rID><ei:readingType>Direct Read</ei:readingType></ei:specifierPayload>"))
        .collect();
    format!(
        "<oadr:oadrReportRequest><ei:reportRequestID>{id}</ei:reportRequestID><ei:reportSpecifier>\
         <ei:reportSpecifierID>{specifier}</ei:reportSpecifierID>\
         <xcal:granularity><xcal:duration>{granularity}</xcal:duration></xcal:granularity>\
         <ei:reportBackDuration><xcal:duration>{back}</xcal:duration></ei:reportBackDuration>\
         {payloads}</ei:reportSpecifier></oadr:oadrReportRequest>"
    )
}

fn create_report(request_id: &str, requests: &[String]) -> Message {
    xml(&format!(
        r#"<oadr:oadrCreateReport ei:schemaVersion="2.0b"><pyld:requestID>{request_id}</pyld:requestID>{}<ei:venID>VEN-1</ei:venID></oadr:oadrCreateReport>"#,
        requests.concat()
    ))
}

fn cancel_report(request_id: &str, report_request_id: &str, to_follow: bool) -> Message {
    xml(&format!(
        r#"<oadr:oadrCancelReport ei:schemaVersion="2.0b"><pyld:requestID>{request_id}</pyld:requestID><ei:reportRequestID>{report_request_id}</ei:reportRequestID><pyld:reportToFollow>{to_follow}</pyld:reportToFollow><ei:venID>VEN-1</ei:venID></oadr:oadrCancelReport>"#
    ))
}

fn registered_report(requests: &[String]) -> Message {
    xml(&format!(
        r#"<oadr:oadrRegisteredReport ei:schemaVersion="2.0b"><ei:eiResponse><ei:responseCode>200</ei:responseCode><ei:responseDescription>OK</ei:responseDescription><pyld:requestID>ECHO</pyld:requestID></ei:eiResponse>{}<ei:venID>VEN-1</ei:venID></oadr:oadrRegisteredReport>"#,
        requests.concat()
    ))
}

fn vtn_register_report(request_id: &str) -> Message {
    xml(&format!(
        r#"<oadr:oadrRegisterReport ei:schemaVersion="2.0b"><pyld:requestID>{request_id}</pyld:requestID><ei:venID>VEN-1</ei:venID></oadr:oadrRegisterReport>"#
    ))
}

fn sample(meter_kw: f64) -> TelemetrySample {
    TelemetrySample {
        meter_kw,
        gpu_board_kw: Some(meter_kw * 0.6),
        flexible_kw: Some(meter_kw * 0.25),
        online: true,
        manual_override: false,
    }
}

// ---------------------------------------------------------------------------------------------
// The fake VTN and the simulation harness
// ---------------------------------------------------------------------------------------------

enum Reply {
    Msg(Box<Message>),
    Empty,
    Fail,
}

/// A scripted VTN: registers VENs, answers requests, hands queued messages to polls.
struct FakeVtn {
    poll_freq: Option<TimeDelta>,
    /// Delivered one per poll (else an oadrResponse).
    queue: VecDeque<Message>,
    /// The answer to oadrRequestEvent (else an oadrResponse: "no events").
    on_request_event: Option<Message>,
    /// The answer to our oadrRegisterReport (else an oadrRegisteredReport without requests).
    on_register_report: Option<Message>,
    /// Answer to every poll (e.g. an unknown-VEN error), overriding the queue.
    poll_override: Option<Message>,
    /// Answers to oadrCreatePartyRegistration used before registering normally.
    on_create_party: VecDeque<Message>,
    /// Fail the next N requests whose name is in `fail_names` (all when empty).
    fail: u32,
    fail_names: Vec<&'static str>,
    registrations: u32,
}

impl FakeVtn {
    fn new() -> Self {
        FakeVtn {
            poll_freq: Some(secs(10)),
            queue: VecDeque::new(),
            on_request_event: None,
            on_register_report: None,
            poll_override: None,
            on_create_party: VecDeque::new(),
            fail: 0,
            fail_names: Vec::new(),
            registrations: 0,
        }
    }

    fn answer(&mut self, out: &Outgoing) -> Reply {
        if self.fail > 0 && (self.fail_names.is_empty() || self.fail_names.contains(&out.name())) {
            self.fail -= 1;
            return Reply::Fail;
        }
        Reply::Msg(Box::new(match out {
            Outgoing::QueryRegistration { .. } => Message::CreatedPartyRegistration(CreatedPartyRegistration {
                response: ei("200"),
                registration_id: None,
                ven_id: None,
                vtn_id: Some("VTN-1".into()),
                profiles: vec!["2.0b".into()],
                poll_freq: self.poll_freq,
            }),
            Outgoing::CreatePartyRegistration { .. } if !self.on_create_party.is_empty() => {
                self.on_create_party.pop_front().unwrap_or_else(|| response("200"))
            }
            Outgoing::CreatePartyRegistration {
                registration_id,
                ven_id,
                ..
            } => {
                self.registrations += 1;
                Message::CreatedPartyRegistration(CreatedPartyRegistration {
                    response: ei("200"),
                    registration_id: Some(
                        registration_id
                            .clone()
                            .unwrap_or_else(|| format!("REG-{}", self.registrations)),
                    ),
                    ven_id: Some(ven_id.clone().unwrap_or_else(|| "VEN-1".into())),
                    vtn_id: Some("VTN-1".into()),
                    profiles: vec!["2.0b".into()],
                    poll_freq: self.poll_freq,
                })
            }
            Outgoing::RegisterReport { .. } => match &self.on_register_report {
                Some(m) => m.clone(),
                None => registered_report(&[]),
            },
            Outgoing::RequestEvent { .. } => self.on_request_event.clone().unwrap_or_else(|| response("200")),
            Outgoing::Poll { .. } => match (&self.poll_override, self.queue.pop_front()) {
                (Some(m), _) => m.clone(),
                (None, Some(m)) => m,
                (None, None) => response("200"),
            },
            Outgoing::Response { .. } => return Reply::Empty,
            _ => response("200"),
        }))
    }
}

/// With `FLEXGATE_VEN_DUMP=<dir>`, every message the VEN sends is written there as encoded XML
/// (e.g. for `tests/xsd_validate.py <dir>`).
fn dump(out: &Outgoing) {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    if let Some(dir) = std::env::var_os("FLEXGATE_VEN_DUMP") {
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::path::Path::new(&dir).join(format!("{n:05}_{}.xml", out.name()));
        std::fs::write(&path, flexgate_openadr::oadr2b::encode::encode(out))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// Runs the VEN against the fake VTN, recording everything.
struct Sim {
    ven: Ven,
    vtn: FakeVtn,
    now: DateTime<Utc>,
    sent: Vec<(DateTime<Utc>, Outgoing)>,
    persisted: Vec<Option<Registration>>,
    outcomes: Vec<DistributeOutcome>,
    warnings: Vec<String>,
    decisions: HashMap<String, OptDecision>,
    auto_answer: bool,
}

impl Sim {
    fn new(cfg: VenConfig, saved: Option<Registration>) -> Sim {
        Sim {
            ven: Ven::new(cfg, saved).expect("valid config"),
            vtn: FakeVtn::new(),
            now: t0(),
            sent: Vec::new(),
            persisted: Vec::new(),
            outcomes: Vec::new(),
            warnings: Vec::new(),
            decisions: HashMap::new(),
            auto_answer: true,
        }
    }

    /// Registered, initial RegisterReport/RequestEvent/poll done, at t0.
    fn registered() -> Sim {
        Sim::registered_with(VenConfig::new("site-a"))
    }

    fn registered_with(cfg: VenConfig) -> Sim {
        let mut sim = Sim::new(cfg, None);
        sim.start();
        assert_eq!(sim.ven.phase(), Phase::Registered);
        sim
    }

    fn start(&mut self) {
        let actions = self.ven.start(self.now);
        self.run(actions);
        self.advance_to(self.now);
    }

    fn run(&mut self, actions: Vec<Action>) {
        let mut queue: VecDeque<Action> = actions.into();
        while let Some(action) = queue.pop_front() {
            match action {
                Action::Send(out) => {
                    dump(&out);
                    self.sent.push((self.now, out.clone()));
                    match self.vtn.answer(&out) {
                        Reply::Msg(m) => queue.extend(self.ven.handle(self.now, Some(&out), *m)),
                        Reply::Empty => {}
                        Reply::Fail => queue.extend(self.ven.request_failed(self.now, &out, "connection refused")),
                    }
                }
                Action::Persist(r) => self.persisted.push(r),
                Action::Events(outcome) => {
                    self.outcomes.push(outcome.clone());
                    if let (Some(pending), true) = (outcome.pending, self.auto_answer) {
                        let decisions = pending
                            .needs_decision()
                            .iter()
                            .map(|id| {
                                self.decisions
                                    .get(*id)
                                    .cloned()
                                    .unwrap_or_else(|| OptDecision::opt_in(*id))
                            })
                            .collect();
                        queue.extend(self.ven.answer_distribute(pending, decisions));
                    }
                }
                Action::Warn(w) => self.warnings.push(w),
                Action::Abandoned { out, .. } => self.warnings.push(format!("abandoned {}", out.name())),
            }
        }
    }

    /// Moves the clock to `t`, ticking at every wakeup on the way.
    fn advance_to(&mut self, t: DateTime<Utc>) {
        for _ in 0..100_000 {
            let wake = self.ven.next_wakeup();
            if wake > t {
                self.now = t;
                return;
            }
            self.now = wake.max(self.now);
            let actions = self.ven.tick(self.now);
            self.run(actions);
        }
        panic!("the VEN keeps waking up at {}", self.now);
    }

    fn advance(&mut self, by: TimeDelta) {
        self.advance_to(self.now + by);
    }

    /// Pushes `msg` as the answer to the next poll and runs until quiet.
    fn deliver(&mut self, msg: Message) {
        self.vtn.queue.push_back(msg);
        let next = self.ven.next_wakeup();
        self.advance_to(next);
    }

    /// Handles a message pushed by the VTN (push mode, or anything unsolicited).
    fn push(&mut self, msg: Message) {
        let actions = self.ven.handle(self.now, None, msg);
        self.run(actions);
    }

    fn mark(&self) -> usize {
        self.sent.len()
    }

    fn sent_since(&self, mark: usize) -> Vec<Outgoing> {
        self.sent[mark..].iter().map(|(_, o)| o.clone()).collect()
    }

    fn names_since(&self, mark: usize) -> Vec<&'static str> {
        self.sent[mark..].iter().map(|(_, o)| o.name()).collect()
    }

    fn created_events_since(&self, mark: usize) -> Vec<Vec<EventResponseOut>> {
        self.sent_since(mark)
            .into_iter()
            .filter_map(|o| match o {
                Outgoing::CreatedEvent { responses, .. } => Some(responses),
                _ => None,
            })
            .collect()
    }

    fn last_changes(&self) -> Vec<EventChange> {
        self.outcomes.last().map(|o| o.changes.clone()).unwrap_or_default()
    }

    fn poll_times(&self) -> Vec<i64> {
        self.sent
            .iter()
            .filter(|(_, o)| matches!(o, Outgoing::Poll { .. }))
            .map(|(t, _)| (*t - t0()).num_seconds())
            .collect()
    }
}

fn upsert(c: &EventChange) -> &flexgate_openadr::oadr2b::ven::EventUpdate {
    match c {
        EventChange::Upsert(u) => u,
        other => panic!("expected an upsert, got {other:?}"),
    }
}

fn one_response(created: &[Vec<EventResponseOut>]) -> EventResponseOut {
    assert_eq!(created.len(), 1, "expected one oadrCreatedEvent, got {created:?}");
    assert_eq!(created[0].len(), 1, "expected one eventResponse, got {:?}", created[0]);
    created[0][0].clone()
}

// ---------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------

#[test]
fn registration_flow_then_register_report_request_event_and_poll() {
    let mut cfg = VenConfig::new("site-a");
    cfg.transport_address = None;
    let sim = Sim::registered_with(cfg);
    assert_eq!(
        sim.names_since(0),
        vec![
            "oadrQueryRegistration",
            "oadrCreatePartyRegistration",
            "oadrRegisterReport",
            "oadrRequestEvent",
            "oadrPoll"
        ]
    );
    match &sim.sent[1].1 {
        Outgoing::CreatePartyRegistration {
            registration_id,
            ven_id,
            ven_name,
            http_pull,
            report_only,
            xml_signature,
            ..
        } => {
            assert_eq!((registration_id, ven_id), (&None, &None));
            assert_eq!(ven_name, "site-a");
            assert!(*http_pull && !*report_only && !*xml_signature);
        }
        other => panic!("{other:?}"),
    }
    let reg = Registration {
        ven_id: "VEN-1".into(),
        registration_id: "REG-1".into(),
        vtn_id: Some("VTN-1".into()),
        poll_freq: Some(secs(10)),
    };
    assert_eq!(sim.persisted, vec![Some(reg.clone())]);
    assert_eq!(sim.ven.registration(), Some(&reg));
    assert_eq!(sim.ven.poll_period(), secs(10));
    // our metadata: two reports, unique rIDs, sampling rates
    match &sim.sent[2].1 {
        Outgoing::RegisterReport { ven_id, reports, .. } => {
            assert_eq!(ven_id, "VEN-1");
            let names: Vec<&str> = reports.iter().map(|r| r.report_name.as_str()).collect();
            assert_eq!(names, vec!["METADATA_TELEMETRY_USAGE", "METADATA_TELEMETRY_STATUS"]);
            let r_ids: Vec<&str> = reports
                .iter()
                .flat_map(|r| r.descriptions.iter().map(|d| d.r_id.as_str()))
                .collect();
            assert_eq!(r_ids, vec!["meter_kw", "gpu_board_kw", "status"]);
            assert!(
                reports[0]
                    .descriptions
                    .iter()
                    .all(|d| d.power_kw && d.report_type == "usage")
            );
            assert!(!reports[1].descriptions[0].power_kw);
            assert_eq!(reports[1].descriptions[0].report_type, "x-resourceStatus");
            assert!(
                reports
                    .iter()
                    .flat_map(|r| &r.descriptions)
                    .all(|d| d.min_period == secs(10))
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&sim.sent[3].1, Outgoing::RequestEvent { ven_id, .. } if ven_id == "VEN-1"));
    assert!(matches!(&sim.sent[4].1, Outgoing::Poll { ven_id } if ven_id == "VEN-1"));
    assert_eq!(sim.ven.next_wakeup(), t0() + secs(10));
}

#[test]
fn restart_with_saved_registration_skips_registration() {
    let reg = Registration {
        ven_id: "VEN-9".into(),
        registration_id: "REG-9".into(),
        vtn_id: Some("VTN-1".into()),
        poll_freq: Some(secs(30)),
    };
    // the caller persists it as JSON
    let json = serde_json::to_string(&reg).unwrap();
    assert_eq!(
        json,
        r#"{"ven_id":"VEN-9","registration_id":"REG-9","vtn_id":"VTN-1","poll_freq_ms":30000}"#
    );
    let saved: Registration = serde_json::from_str(&json).unwrap();
    let mut sim = Sim::new(VenConfig::new("site-a"), Some(saved));
    sim.start();
    assert_eq!(
        sim.names_since(0),
        vec!["oadrRegisterReport", "oadrRequestEvent", "oadrPoll"]
    );
    assert!(matches!(&sim.sent[1].1, Outgoing::RequestEvent { ven_id, .. } if ven_id == "VEN-9"));
    assert!(sim.persisted.is_empty());
    sim.advance(secs(65));
    assert_eq!(sim.poll_times(), vec![0, 30, 60]);
}

#[test]
fn registration_refused_or_from_the_wrong_vtn_is_retried_afresh() {
    let mut cfg = VenConfig::new("site-a");
    cfg.expected_vtn_id = Some("VTN-OTHER".into());
    let mut sim = Sim::new(cfg, None);
    sim.start();
    assert_eq!(sim.names_since(0), vec!["oadrQueryRegistration"]);
    assert_eq!(sim.ven.phase(), Phase::Querying);
    assert!(
        sim.warnings
            .iter()
            .any(|w| w.contains("VTN-1") && w.contains("VTN-OTHER")),
        "{:?}",
        sim.warnings
    );
    // retried after the backoff (2 s), then 4 s, ...
    sim.advance(secs(7));
    let times: Vec<i64> = sim.sent.iter().map(|(t, _)| (*t - t0()).num_seconds()).collect();
    assert_eq!(times, vec![0, 2, 6]);
    assert!(sim.persisted.is_empty());
}

#[test]
fn a_registration_answered_with_anything_else_is_retried_not_stuck() {
    let mut sim = Sim::new(VenConfig::new("site-a"), None);
    // openleadr answers with oadrRequestReregistration when it cannot place the VEN; then an error
    sim.vtn
        .on_create_party
        .push_back(Message::RequestReregistration(RequestReregistration { ven_id: None }));
    sim.vtn.on_create_party.push_back(response("459"));
    sim.start();
    assert_eq!(sim.ven.phase(), Phase::Querying);
    assert!(
        sim.warnings.iter().any(|w| w.contains("oadrRequestReregistration")),
        "{:?}",
        sim.warnings
    );
    sim.advance(secs(10));
    let registrations: Vec<i64> = sim
        .sent
        .iter()
        .filter(|(_, o)| o.name() == "oadrCreatePartyRegistration")
        .map(|(t, _)| (*t - t0()).num_seconds())
        .collect();
    // refused at 0, again at 2 (backoff 2 s), registered at 6 (backoff 4 s)
    assert_eq!(registrations, vec![0, 2, 6]);
    assert_eq!(sim.ven.phase(), Phase::Registered);
    assert!(sim.warnings.iter().any(|w| w.contains("459")), "{:?}", sim.warnings);
}

#[test]
fn push_mode_registers_its_address_and_never_polls() {
    let mut cfg = VenConfig::new("site-a");
    cfg.http_pull = false;
    cfg.transport_address = Some("https://ven.example:8443/".into());
    let mut sim = Sim::registered_with(cfg);
    match &sim.sent[1].1 {
        Outgoing::CreatePartyRegistration {
            http_pull,
            transport_address,
            ..
        } => {
            assert!(!*http_pull);
            assert_eq!(transport_address.as_deref(), Some("https://ven.example:8443/"));
        }
        other => panic!("{other:?}"),
    }
    sim.advance(secs(60));
    assert!(sim.poll_times().is_empty());
    let m = sim.mark();
    sim.push(distribute("P1", vec![ev("E1", 0)]));
    assert_eq!(one_response(&sim.created_events_since(m)).request_id, "P1");

    let mut bad = VenConfig::new("site-a");
    bad.http_pull = false;
    assert!(matches!(Ven::new(bad, None), Err(VenError::Config(_))));
    let mut bad = VenConfig::new("site-a");
    bad.reports.gpu_board_r_id = "meter_kw".into();
    assert!(matches!(Ven::new(bad, None), Err(VenError::Config(m)) if m.contains("unique")));
}

// ---------------------------------------------------------------------------------------------
// Polling
// ---------------------------------------------------------------------------------------------

#[test]
fn polls_at_the_vtn_requested_frequency_without_drift() {
    let mut sim = Sim::new(VenConfig::new("site-a"), None);
    sim.vtn.poll_freq = Some(secs(7));
    sim.start();
    sim.advance(secs(30));
    assert_eq!(sim.poll_times(), vec![0, 7, 14, 21, 28]);
    assert_eq!(sim.ven.next_wakeup(), t0() + secs(35));
}

#[test]
fn poll_override_wins_and_default_applies_without_a_vtn_frequency() {
    let mut cfg = VenConfig::new("site-a");
    cfg.poll_override = Some(secs(30));
    let mut sim = Sim::registered_with(cfg);
    sim.advance(secs(95));
    assert_eq!(sim.poll_times(), vec![0, 30, 60, 90]);

    let mut sim = Sim::new(VenConfig::new("site-a"), None);
    sim.vtn.poll_freq = None;
    sim.start();
    sim.advance(secs(25));
    assert_eq!(sim.poll_times(), vec![0, 10, 20]);
}

#[test]
fn missed_polls_are_skipped_with_a_warning_not_piled_up() {
    let mut sim = Sim::registered();
    // the caller was stalled for 35 s: one poll now, on the 30 s slot's grid
    sim.now = t0() + secs(35);
    let actions = sim.ven.tick(sim.now);
    sim.run(actions);
    assert_eq!(sim.poll_times(), vec![0, 35]);
    assert!(
        sim.warnings.iter().any(|w| w.contains("missed 2 poll")),
        "{:?}",
        sim.warnings
    );
    assert_eq!(sim.ven.next_wakeup(), t0() + secs(40));
}

#[test]
fn a_poll_that_returns_a_message_is_followed_by_an_immediate_poll() {
    let mut sim = Sim::registered();
    sim.vtn.queue.push_back(distribute("D1", vec![ev("E1", 0)]));
    sim.vtn.queue.push_back(vtn_register_report("RR-1"));
    sim.advance(secs(10));
    // 10 s: distribute → drain poll: RegisterReport → drain poll: nothing
    assert_eq!(sim.poll_times(), vec![0, 10, 10, 10]);
    sim.advance(secs(10));
    assert_eq!(sim.poll_times(), vec![0, 10, 10, 10, 20]);
}

#[test]
fn draining_is_capped_when_the_vtn_always_has_something() {
    let mut sim = Sim::registered();
    sim.vtn.poll_override = Some(vtn_register_report("RR-X"));
    sim.advance(secs(10));
    // the regular poll + 10 drains, then the VEN waits for the next slot
    assert_eq!(sim.poll_times().iter().filter(|t| **t == 10).count(), 11);
    assert!(sim.warnings.iter().any(|w| w.contains("polls in a row")));
    assert_eq!(sim.ven.next_wakeup(), t0() + secs(20));
}

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

#[test]
fn request_event_at_start_syncs_the_open_events() {
    let mut sim = Sim::new(VenConfig::new("site-a"), None);
    sim.vtn.on_request_event = Some(distribute("SYNC-1", vec![ev("E1", 3)]));
    sim.start();
    let changes = sim.last_changes();
    assert_eq!(changes.len(), 1);
    let u = upsert(&changes[0]);
    assert_eq!((u.event_id.as_str(), u.modification_number, u.test), ("E1", 3, false));
    assert_eq!(u.schedule.start, t0() + TimeDelta::hours(1));
    assert_eq!(u.schedule.end, Some(t0() + TimeDelta::hours(2)));
    assert_eq!(u.schedule.start_after, Some(TimeDelta::minutes(5)));
    assert_eq!(u.schedule.ramp_up, Some(TimeDelta::minutes(10)));
    assert_eq!(u.schedule.recovery, Some(TimeDelta::minutes(15)));
    assert_eq!(u.signals.len(), 1);
    match &u.signals[0].meaning {
        SignalMeaning::Load(iv) => {
            assert_eq!(iv.len(), 1);
            assert_eq!(iv[0].target, LoadTarget::Ceiling { kw: 500.0 });
            assert_eq!(iv[0].start, t0() + TimeDelta::hours(1));
            assert_eq!(iv[0].duration_s, Some(3600));
        }
        other => panic!("{other:?}"),
    }
    let r = one_response(&sim.created_events_since(0));
    assert_eq!(
        r,
        EventResponseOut {
            code: 200,
            description: "OK".into(),
            request_id: "SYNC-1".into(),
            event_id: "E1".into(),
            modification_number: 3,
            opt: OptType::OptIn,
        }
    );
    // CreatedEvent goes before the first poll
    assert_eq!(
        sim.names_since(0)[2..],
        ["oadrRegisterReport", "oadrRequestEvent", "oadrCreatedEvent", "oadrPoll"]
    );
}

/// A VEN resumed from an earlier run's exchanges (a restart, or a replica taking over) does not
/// answer again a version the VTN already has its answer to; a version nobody answered is
/// decided and answered; the book it resumed cancels and replaces as the earlier run's would.
#[test]
fn a_resumed_ven_answers_each_event_version_once_across_the_restart() {
    let reg = Registration {
        ven_id: "VEN-9".into(),
        registration_id: "REG-9".into(),
        vtn_id: Some("VTN-1".into()),
        poll_freq: Some(secs(30)),
    };
    let answered = |id: &str, modification: u32, opt: OptType| {
        Resumed::Answered(CreatedEvent {
            response: ei("200"),
            event_responses: vec![flexgate_openadr::oadr2b::EventResponse {
                code: "200".into(),
                description: None,
                request_id: Some("D1".into()),
                event_id: id.into(),
                modification_number: modification,
                opt,
            }],
            ven_id: "VEN-9".into(),
        })
    };
    let received = |request: &str, events: Vec<Event>| match distribute(request, events) {
        Message::DistributeEvent(d) => Resumed::Received(d),
        other => panic!("{other:?}"),
    };
    let mut sim = Sim::new(VenConfig::new("site-a"), Some(reg));
    sim.ven.resume(
        sim.now,
        vec![
            // E0 was cancelled by its absence from a later distribute: it is not resumed.
            received("D0", vec![ev("E0", 0)]),
            received("D1", vec![ev("E1", 1), ev("E2", 0)]),
            // The earlier run answered E1, and stopped before answering E2.
            answered("E1", 1, OptType::OptOut),
            // An answer to a version since replaced marks nothing.
            answered("E0", 0, OptType::OptIn),
        ],
    );
    assert_eq!(
        sim.ven.events().count(),
        1,
        "E0 is gone, E2 unanswered is forgotten, E1 is known"
    );
    assert_eq!(sim.ven.event("E1").and_then(|k| k.opt), Some(OptType::OptOut));
    sim.vtn.on_request_event = Some(distribute("SYNC", vec![ev("E1", 1), ev("E2", 0)]));
    sim.start();
    // E1 was acted on and answered by the earlier run: no change, no answer. E2, never
    // answered, may never have reached the caller: it comes again as new, and is answered.
    let changes = sim.last_changes();
    assert!(
        matches!(&changes[..], [EventChange::Upsert(u)] if u.event_id == "E2"),
        "{changes:?}"
    );
    let r = one_response(&sim.created_events_since(0));
    assert_eq!(
        (r.event_id.as_str(), r.modification_number, r.opt),
        ("E2", 0, OptType::OptIn)
    );
    // A repeat of both is answered for neither: the VTN has both answers now.
    let m = sim.mark();
    sim.deliver(distribute("D2", vec![ev("E1", 1), ev("E2", 0)]));
    assert!(sim.created_events_since(m).is_empty());
    // A new version of E1 is an upsert answered afresh; E2, missing, is cancelled.
    let m = sim.mark();
    sim.deliver(distribute("D3", vec![ev("E1", 2)]));
    let changes = sim.last_changes();
    assert!(matches!(&changes[0], EventChange::Upsert(u) if u.event_id == "E1" && u.modification_number == 2));
    assert!(
        matches!(&changes[1], EventChange::Cancel { event_id, reason: CancelReason::Implied, .. } if event_id == "E2")
    );
    let r = one_response(&sim.created_events_since(m));
    assert_eq!((r.event_id.as_str(), r.modification_number), ("E1", 2));
}

/// An event the caller could not take is withheld (no answer) and forgotten, and the VEN asks the
/// VTN for every event again later: the VTN's answer brings it back as new, answered then.
#[test]
fn a_withheld_event_comes_back_from_a_later_request_for_events() {
    let mut sim = Sim::registered();
    sim.auto_answer = false;
    let m = sim.mark();
    sim.deliver(distribute("D1", vec![ev("E1", 0)]));
    let pending = sim
        .outcomes
        .iter()
        .rev()
        .find_map(|o| o.pending.clone())
        .expect("a pending answer");
    let mut pending = pending;
    pending.withhold("E1");
    sim.ven.forget_event("E1");
    let actions = sim.ven.answer_distribute(pending, Vec::new());
    sim.run(actions);
    assert!(sim.created_events_since(m).is_empty(), "nothing answered");
    sim.ven.request_events_at(sim.now + secs(5));
    sim.vtn.on_request_event = Some(distribute("SYNC", vec![ev("E1", 0)]));
    sim.auto_answer = true;
    let m = sim.mark();
    sim.advance(secs(6));
    assert_eq!(
        sim.names_since(m).iter().filter(|n| **n == "oadrRequestEvent").count(),
        1,
        "{:?}",
        sim.names_since(m)
    );
    let r = one_response(&sim.created_events_since(m));
    assert_eq!((r.event_id.as_str(), r.opt), ("E1", OptType::OptIn));
}

#[test]
fn modification_number_lower_equal_higher() {
    let mut sim = Sim::registered();
    sim.decisions
        .insert("E1".into(), OptDecision::opt_out("E1", "maintenance window"));
    sim.deliver(distribute("D1", vec![ev("E1", 1)]));
    assert!(matches!(&sim.last_changes()[..], [EventChange::Upsert(u)] if u.modification_number == 1));
    let m = sim.mark();
    let r = one_response(&sim.created_events_since(0));
    assert_eq!(
        (r.opt, r.description.as_str(), r.request_id.as_str()),
        (OptType::OptOut, "maintenance window", "D1")
    );

    // equal: unchanged, the caller is not asked again, and the VTN, which accepted our answer
    // to this version, gets no second one
    sim.decisions.insert("E1".into(), OptDecision::opt_in("E1"));
    sim.deliver(distribute("D2", vec![ev("E1", 1)]));
    assert!(sim.last_changes().is_empty());
    assert!(sim.created_events_since(m).is_empty());
    // ...unless our answer did not reach it: then the stored opt is sent again (by the
    // retry of the lost answer or as the repeat's answer: once either way)
    let mut lost = Sim::registered();
    lost.decisions
        .insert("E1".into(), OptDecision::opt_out("E1", "maintenance window"));
    lost.vtn.fail = 1;
    lost.vtn.fail_names = vec!["oadrCreatedEvent"];
    lost.deliver(distribute("D1", vec![ev("E1", 1)]));
    let m2 = lost.mark();
    lost.deliver(distribute("D2", vec![ev("E1", 1)]));
    let r = one_response(&lost.created_events_since(m2));
    assert_eq!((r.opt, r.modification_number), (OptType::OptOut, 1));

    // higher: the whole event is replaced, and decided again
    let m = sim.mark();
    sim.deliver(distribute("D3", vec![ev_kw("E1", 2, 350.0)]));
    let changes = sim.last_changes();
    let u = upsert(&changes[0]);
    assert_eq!(u.modification_number, 2);
    assert_eq!(
        u.signals[0].meaning.intervals()[0].target,
        LoadTarget::Ceiling { kw: 350.0 }
    );
    let r = one_response(&sim.created_events_since(m));
    assert_eq!((r.opt, r.modification_number), (OptType::OptIn, 2));

    // lower: stale, ignored with a warning, answered 450
    let m = sim.mark();
    sim.deliver(distribute("D4", vec![ev("E1", 1)]));
    assert!(sim.last_changes().is_empty());
    assert!(sim.warnings.iter().any(|w| w.contains("older than the known 2")));
    let r = one_response(&sim.created_events_since(m));
    assert_eq!((r.code, r.opt, r.modification_number), (450, OptType::OptIn, 1));
    let known = sim.ven.event("E1").unwrap();
    assert_eq!(known.event.modification_number, 2);
    assert_eq!(known.opt, Some(OptType::OptIn));
}

#[test]
fn implied_cancellation_of_events_missing_from_a_distribute() {
    let mut sim = Sim::registered();
    sim.deliver(distribute("D1", vec![ev("E1", 0), ev("E2", 0)]));
    assert_eq!(sim.last_changes().len(), 2);
    let m = sim.mark();
    sim.deliver(distribute("D2", vec![ev("E2", 0)]));
    assert_eq!(
        sim.last_changes(),
        vec![EventChange::Cancel {
            event_id: "E1".into(),
            modification_number: 0,
            reason: CancelReason::Implied,
            recovery: Some(TimeDelta::minutes(15)),
        }]
    );
    assert!(sim.ven.event("E1").is_none());
    // E2 unchanged, and the VTN accepted our answer to it already: no second answer
    assert!(sim.created_events_since(m).is_empty());
}

#[test]
fn an_event_that_already_ended_disappears_without_a_cancel() {
    let mut sim = Sim::registered();
    sim.deliver(distribute("D1", vec![ev("E1", 0)]));
    // after the end (2 h) plus start_after (5 min)
    sim.advance(TimeDelta::hours(2) + TimeDelta::minutes(6));
    sim.deliver(distribute("D2", vec![]));
    assert!(sim.last_changes().is_empty());
    assert_eq!(sim.ven.events().count(), 0);
}

#[test]
fn empty_distribute_clears_everything_and_sends_no_created_event() {
    let mut sim = Sim::registered();
    sim.deliver(distribute("D1", vec![ev("E1", 0), ev("E2", 4)]));
    let m = sim.mark();
    sim.deliver(distribute("D2", vec![]));
    let cancelled: Vec<(String, u32, CancelReason)> = sim
        .last_changes()
        .into_iter()
        .map(|c| match c {
            EventChange::Cancel {
                event_id,
                modification_number,
                reason,
                ..
            } => (event_id, modification_number, reason),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        cancelled,
        vec![
            ("E1".into(), 0, CancelReason::Implied),
            ("E2".into(), 4, CancelReason::Implied)
        ]
    );
    assert!(sim.created_events_since(m).is_empty());
    assert_eq!(sim.ven.events().count(), 0);
}

#[test]
fn bare_response_to_request_event_means_no_events() {
    let mut sim = Sim::registered();
    sim.deliver(distribute("D1", vec![ev("E1", 0)]));
    // the VTN asks us to re-register; afterwards RequestEvent gets a bare oadrResponse
    sim.deliver(Message::RequestReregistration(RequestReregistration {
        ven_id: Some("VEN-1".into()),
    }));
    assert!(matches!(
        &sim.last_changes()[..],
        [EventChange::Cancel { event_id, reason: CancelReason::Implied, .. }] if event_id == "E1"
    ));
}

#[test]
fn explicit_cancel_and_cancel_of_an_unknown_event() {
    let mut sim = Sim::registered();
    sim.deliver(distribute("D1", vec![ev("E1", 0)]));
    let m = sim.mark();
    let mut cancelled = ev("E1", 1);
    cancelled.status = EventStatus::Cancelled;
    let mut unknown = ev("E-GHOST", 7);
    unknown.status = EventStatus::Cancelled;
    sim.deliver(distribute("D2", vec![cancelled.clone(), unknown.clone()]));
    assert_eq!(
        sim.last_changes(),
        vec![EventChange::Cancel {
            event_id: "E1".into(),
            modification_number: 1,
            reason: CancelReason::Explicit,
            recovery: Some(TimeDelta::minutes(15)),
        }]
    );
    let created = sim.created_events_since(m);
    assert_eq!(created.len(), 1);
    let got: Vec<(String, u32, u16, OptType)> = created[0]
        .iter()
        .map(|r| (r.event_id.clone(), r.modification_number, r.code, r.opt))
        .collect();
    assert_eq!(
        got,
        vec![
            ("E1".into(), 1, 200, OptType::OptIn),
            ("E-GHOST".into(), 7, 200, OptType::OptIn)
        ]
    );
    assert_eq!(sim.ven.event("E1").unwrap().state, EventState::Cancelled);
    // re-sent cancelled event: unchanged, no second cancel
    sim.deliver(distribute("D3", vec![cancelled, unknown]));
    assert!(sim.last_changes().is_empty());
    // a later distribute without it: no implied cancel either (already cancelled)
    sim.deliver(distribute("D4", vec![]));
    assert!(sim.last_changes().is_empty());
}

#[test]
fn completed_status_drops_the_event() {
    let mut sim = Sim::registered();
    sim.deliver(distribute("D1", vec![ev("E1", 0)]));
    let mut done = ev("E1", 0); // openleadr recomputes the status without bumping the number
    done.status = EventStatus::Completed;
    sim.deliver(distribute("D2", vec![done]));
    assert!(matches!(
        &sim.last_changes()[..],
        [EventChange::Cancel { event_id, reason: CancelReason::Completed, .. }] if event_id == "E1"
    ));
}

#[test]
fn response_required_never_sends_no_created_event() {
    let mut sim = Sim::registered();
    let mut quiet = ev("E1", 0);
    quiet.response_required = Some(ResponseRequired::Never);
    let m = sim.mark();
    sim.deliver(distribute("D1", vec![quiet.clone()]));
    // the event is still ours and surfaced
    assert!(matches!(&sim.last_changes()[..], [EventChange::Upsert(u)] if u.event_id == "E1"));
    assert_eq!(sim.ven.event("E1").unwrap().opt, Some(OptType::OptIn));
    assert!(sim.created_events_since(m).is_empty());
    assert!(!sim.names_since(m).contains(&"oadrCreatedEvent"));

    // mixed: only the `always` one is answered; absent responseRequired counts as always
    let mut defaulted = ev("E2", 0);
    defaulted.response_required = None;
    let m = sim.mark();
    sim.deliver(distribute("D2", vec![quiet, defaulted]));
    let r = one_response(&sim.created_events_since(m));
    assert_eq!(r.event_id, "E2");
}

#[test]
fn two_phase_answer_can_come_later() {
    let mut sim = Sim::registered();
    sim.auto_answer = false;
    sim.deliver(distribute("D1", vec![ev("E1", 0), ev("E2", 0)]));
    let pending = sim.outcomes.last().unwrap().pending.clone().unwrap();
    assert_eq!(pending.request_id(), "D1");
    assert_eq!(pending.needs_decision(), vec!["E1", "E2"]);
    assert!(pending.responds());
    // polling goes on meanwhile
    sim.advance(secs(10));
    let m = sim.mark();
    let actions = sim
        .ven
        .answer_distribute(pending, vec![OptDecision::opt_in("E2"), OptDecision::opt_in("E9")]);
    sim.run(actions);
    let created = sim.created_events_since(m);
    let got: Vec<(String, OptType, String)> = created[0]
        .iter()
        .map(|r| (r.event_id.clone(), r.opt, r.description.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("E1".into(), OptType::OptOut, "no decision from the site".into()),
            ("E2".into(), OptType::OptIn, "OK".into())
        ]
    );
    assert!(sim.warnings.iter().any(|w| w.contains("no opt decision for event E1")));
    assert!(sim.warnings.iter().any(|w| w.contains("E9") && w.contains("not asked")));
}

#[test]
fn target_mismatch_is_opted_out_by_the_ven() {
    let mut cfg = VenConfig::new("site-a");
    cfg.group_ids = vec!["GROUP-A".into()];
    let mut sim = Sim::registered_with(cfg);
    let mut other = ev("E1", 0);
    other.targets.ven_id = vec!["VEN-2".into()];
    let mut by_group = ev("E2", 0);
    by_group.targets.group_id = vec!["GROUP-B".into(), "GROUP-A".into()];
    let mut by_ven = ev("E3", 0);
    by_ven.targets.ven_id = vec!["VEN-1".into()];
    sim.auto_answer = false;
    sim.deliver(distribute("D1", vec![other, by_group, by_ven]));
    let outcome = sim.outcomes.last().unwrap().clone();
    match &outcome.changes[0] {
        EventChange::Refused {
            event_id, code, reason, ..
        } => {
            assert_eq!((event_id.as_str(), *code), ("E1", 200));
            assert!(reason.contains("eiTarget does not match"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&outcome.changes[1], EventChange::Upsert(u) if u.event_id == "E2"));
    assert!(matches!(&outcome.changes[2], EventChange::Upsert(u) if u.event_id == "E3"));
    let pending = outcome.pending.unwrap();
    assert_eq!(pending.needs_decision(), vec!["E2", "E3"]);
    let m = sim.mark();
    let actions = sim
        .ven
        .answer_distribute(pending, vec![OptDecision::opt_in("E2"), OptDecision::opt_in("E3")]);
    sim.run(actions);
    let created = sim.created_events_since(m);
    let got: Vec<(String, u16, OptType)> = created[0].iter().map(|r| (r.event_id.clone(), r.code, r.opt)).collect();
    assert_eq!(
        got,
        vec![
            ("E1".into(), 200, OptType::OptOut),
            ("E2".into(), 200, OptType::OptIn),
            ("E3".into(), 200, OptType::OptIn)
        ]
    );
    assert!(matches!(
        sim.ven.event("E1").unwrap().state,
        EventState::Refused { code: 200, .. }
    ));
}

#[test]
fn a_signal_targeted_elsewhere_is_left_out() {
    let mut cfg = VenConfig::new("site-a");
    cfg.resource_ids = vec!["RACK-1".into()];
    let mut sim = Sim::registered_with(cfg);
    let mut e = ev("E1", 0);
    let mut elsewhere = e.signals[0].clone();
    elsewhere.id = "S2".into();
    elsewhere.signal_type = "bogus".into(); // would be refused if it were ours
    elsewhere.targets = Some(Targets {
        resource_id: vec!["RACK-9".into()],
        ..Targets::default()
    });
    e.signals.push(elsewhere);
    sim.deliver(distribute("D1", vec![e]));
    let changes = sim.last_changes();
    let u = upsert(&changes[0]);
    assert_eq!(u.signals.len(), 1);
    assert_eq!(u.signals[0].id, "S1");
}

#[test]
fn market_context_not_enrolled_is_opted_out() {
    let mut cfg = VenConfig::new("site-a");
    cfg.market_contexts = vec!["http://prog".into()];
    let mut sim = Sim::registered_with(cfg);
    let mut foreign = ev("E1", 0);
    foreign.market_context = Some("http://other-program".into());
    let m = sim.mark();
    sim.deliver(distribute("D1", vec![foreign, ev("E2", 0)]));
    let created = sim.created_events_since(m);
    assert_eq!(created[0][0].opt, OptType::OptOut);
    assert_eq!(created[0][0].code, 200);
    assert!(
        created[0][0].description.contains("http://other-program"),
        "{:?}",
        created[0][0]
    );
    assert_eq!(created[0][1].opt, OptType::OptIn);
    assert!(matches!(&sim.last_changes()[0], EventChange::Refused { event_id, .. } if event_id == "E1"));
}

#[test]
fn unsupported_signal_is_opted_out_with_460() {
    let mut sim = Sim::registered();
    let mut e = ev("E1", 0);
    e.signals[0].name = "x-CUSTOM_SIGNAL".into();
    let m = sim.mark();
    sim.deliver(distribute("D1", vec![e]));
    let r = one_response(&sim.created_events_since(m));
    assert_eq!((r.code, r.opt), (460, OptType::OptOut));
    assert!(r.description.contains("x-CUSTOM_SIGNAL"), "{}", r.description);
    assert!(matches!(
        &sim.last_changes()[..],
        [EventChange::Refused { code: 460, .. }]
    ));
    // never handed over as actionable
    let pending = sim.outcomes.last().unwrap().pending.clone().unwrap();
    assert!(pending.needs_decision().is_empty());
}

#[test]
fn out_of_range_value_is_opted_out_with_454() {
    let mut sim = Sim::registered();
    let mut e = ev("E1", 0);
    e.signals[0].name = "LOAD_CONTROL".into();
    e.signals[0].signal_type = "x-loadControlCapacity".into();
    e.signals[0].intervals[0].values = vec![8.0];
    let m = sim.mark();
    sim.deliver(distribute("D1", vec![e]));
    let r = one_response(&sim.created_events_since(m));
    assert_eq!((r.code, r.opt), (454, OptType::OptOut));
    assert!(r.description.contains("[0, 1]"), "{}", r.description);
    // a fixed version (higher modificationNumber) is accepted again
    let mut fixed = ev("E1", 1);
    fixed.signals[0].name = "LOAD_CONTROL".into();
    fixed.signals[0].signal_type = "x-loadControlCapacity".into();
    fixed.signals[0].intervals[0].values = vec![0.5];
    sim.deliver(distribute("D2", vec![fixed]));
    let changes = sim.last_changes();
    assert_eq!(
        upsert(&changes[0]).signals[0].meaning.intervals()[0].target,
        LoadTarget::CapacityFraction { fraction: 0.5 }
    );
}

#[test]
fn test_event_is_surfaced_acknowledged_and_flagged() {
    let mut sim = Sim::registered();
    let mut e = ev("T1", 0);
    e.test = true;
    let m = sim.mark();
    sim.deliver(distribute("D1", vec![e]));
    let changes = sim.last_changes();
    let u = upsert(&changes[0]);
    assert!(u.test);
    assert_eq!(sim.ven.event("T1").unwrap().state, EventState::Test);
    let pending = sim.outcomes.last().unwrap().pending.clone().unwrap();
    assert!(pending.needs_decision().is_empty());
    let r = one_response(&sim.created_events_since(m));
    assert_eq!((r.code, r.opt), (200, OptType::OptIn));
    assert!(r.description.contains("test event"));
}

#[test]
fn distribute_from_another_vtn_is_answered_452_and_ignored() {
    let mut sim = Sim::registered();
    let m = sim.mark();
    sim.deliver(distribute_from("VTN-EVIL", "D1", vec![ev("E1", 0)]));
    assert!(sim.outcomes.is_empty());
    assert_eq!(sim.ven.events().count(), 0);
    let r = one_response(&sim.created_events_since(m));
    assert_eq!((r.code, r.opt, r.event_id.as_str()), (452, OptType::OptOut, "E1"));
}

#[test]
fn opt_out_later_sends_create_opt_and_sticks() {
    let mut sim = Sim::registered();
    sim.deliver(distribute("D1", vec![ev("E1", 2)]));
    let m = sim.mark();
    let actions = sim.ven.opt_out(sim.now, "E1", "mustRun");
    sim.run(actions);
    match &sim.sent_since(m)[..] {
        [
            Outgoing::CreateOpt {
                opt,
                reason,
                event_id,
                modification_number,
                ven_id,
                ..
            },
        ] => {
            assert_eq!(
                (*opt, reason.as_str(), event_id.as_str()),
                (OptType::OptOut, "mustRun", "E1")
            );
            assert_eq!((*modification_number, ven_id.as_str()), (2, "VEN-1"));
        }
        other => panic!("{other:?}"),
    }
    let m = sim.mark();
    sim.deliver(distribute("D2", vec![ev("E1", 2)]));
    assert_eq!(one_response(&sim.created_events_since(m)).opt, OptType::OptOut);
    // an unknown event: nothing sent, a warning
    let m = sim.mark();
    let actions = sim.ven.opt_out(sim.now, "NOPE", "mustRun");
    sim.run(actions);
    assert!(sim.sent_since(m).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Re-registration and cancellation
// ---------------------------------------------------------------------------------------------

#[test]
fn reregistration_on_request_keeps_events_and_reports() {
    let mut sim = Sim::registered();
    sim.vtn.on_request_event = Some(distribute("SYNC", vec![ev("E1", 0)]));
    sim.deliver(create_report(
        "CR-1",
        &[report_request("RR-1", "TELEMETRY_USAGE", "PT10S", "PT10S", &[])],
    ));
    sim.deliver(distribute("D1", vec![ev("E1", 0)]));
    let m = sim.mark();
    sim.deliver(Message::RequestReregistration(RequestReregistration {
        ven_id: Some("VEN-1".into()),
    }));
    assert_eq!(
        sim.names_since(m),
        vec![
            "oadrPoll",
            "oadrResponse",
            "oadrCreatePartyRegistration",
            "oadrRegisterReport",
            "oadrRequestEvent",
            "oadrPoll"
        ]
    );
    // (the same registration: the VTN has our answer to E1 and gets no second one)
    let sent = sim.sent_since(m);
    assert!(matches!(&sent[1], Outgoing::Response { response, .. } if response.code == 200));
    match &sent[2] {
        Outgoing::CreatePartyRegistration {
            registration_id,
            ven_id,
            ..
        } => {
            assert_eq!(registration_id.as_deref(), Some("REG-1"));
            assert_eq!(ven_id.as_deref(), Some("VEN-1"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.persisted.len(), 2);
    // the event is unchanged after the re-sync; the report request survives
    assert!(sim.last_changes().is_empty());
    assert_eq!(sim.ven.event("E1").unwrap().opt, Some(OptType::OptIn));
    assert_eq!(sim.ven.report_request_ids(), vec!["RR-1".to_string()]);
}

#[test]
fn reregistration_after_an_unknown_ven_response() {
    let mut sim = Sim::registered();
    let m = sim.mark();
    sim.vtn.queue.push_back(response("463"));
    sim.advance(secs(10));
    assert_eq!(
        sim.names_since(m)[..3],
        ["oadrPoll", "oadrCreatePartyRegistration", "oadrRegisterReport"]
    );
    assert!(
        sim.warnings
            .iter()
            .any(|w| w.contains("re-registering") && w.contains("463"))
    );
    assert_eq!(sim.ven.phase(), Phase::Registered);

    // 452 to a poll also means "who are you?"
    let m = sim.mark();
    sim.vtn.queue.push_back(response("452"));
    sim.advance(secs(10));
    assert!(sim.names_since(m).contains(&"oadrCreatePartyRegistration"));

    // ... but 452 to an oadrCreatedEvent is about the event: a warning only
    let m = sim.mark();
    let actions = sim.ven.handle(
        sim.now,
        Some(&Outgoing::CreatedEvent {
            ven_id: "VEN-1".into(),
            responses: vec![],
        }),
        response("452"),
    );
    sim.run(actions);
    assert!(sim.sent_since(m).is_empty());
    assert_eq!(sim.ven.phase(), Phase::Registered);
}

#[test]
fn renewal_refused_falls_back_to_a_fresh_registration() {
    let mut sim = Sim::registered();
    sim.deliver(Message::RequestReregistration(RequestReregistration { ven_id: None }));
    // script: the renewal gets a non-200
    let actions = sim.ven.handle(
        sim.now,
        None,
        Message::RequestReregistration(RequestReregistration { ven_id: None }),
    );
    // (already registered again, so a second request starts another renewal)
    let renew = actions
        .iter()
        .find_map(|a| match a {
            Action::Send(o @ Outgoing::CreatePartyRegistration { .. }) => Some(o.clone()),
            _ => None,
        })
        .expect("a renewal");
    let refused = Message::CreatedPartyRegistration(CreatedPartyRegistration {
        response: ei("452"),
        registration_id: None,
        ven_id: None,
        vtn_id: Some("VTN-1".into()),
        profiles: vec![],
        poll_freq: None,
    });
    let actions = sim.ven.handle(sim.now, Some(&renew), refused);
    assert!(actions.contains(&Action::Persist(None)), "{actions:?}");
    assert_eq!(sim.ven.phase(), Phase::Querying);
    assert!(sim.ven.registration().is_none());
    sim.run(actions);
    sim.advance(secs(5));
    assert_eq!(sim.ven.phase(), Phase::Registered);
    assert_eq!(sim.ven.registration().unwrap().registration_id, "REG-3");
}

#[test]
fn vtn_cancels_the_registration() {
    let mut sim = Sim::registered();
    sim.deliver(distribute("D1", vec![ev("E1", 0)]));
    sim.deliver(create_report(
        "CR-1",
        &[report_request("RR-1", "TELEMETRY_STATUS", "PT10S", "PT10S", &[])],
    ));
    let m = sim.mark();
    sim.deliver(Message::CancelPartyRegistration(CancelPartyRegistration {
        request_id: "CPR-1".into(),
        registration_id: "REG-1".into(),
        ven_id: Some("VEN-1".into()),
    }));
    let sent = sim.sent_since(m);
    match &sent[1] {
        Outgoing::CanceledPartyRegistration {
            response,
            registration_id,
            ven_id,
        } => {
            assert_eq!((response.code, response.request_id.as_str()), (200, "CPR-1"));
            assert_eq!((registration_id.as_deref(), ven_id.as_str()), (Some("REG-1"), "VEN-1"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.persisted[1], None);
    assert!(sim.outcomes.iter().any(|o| o.pending.is_none()
        && o.changes
            == vec![EventChange::Cancel {
                event_id: "E1".into(),
                modification_number: 0,
                reason: CancelReason::RegistrationEnded,
                recovery: Some(TimeDelta::minutes(15)),
            }]));
    // and starts over: a fresh registration
    assert_eq!(
        sim.names_since(m)[2..4],
        ["oadrQueryRegistration", "oadrCreatePartyRegistration"]
    );
    assert_eq!(sim.ven.registration().unwrap().registration_id, "REG-2");
    assert!(sim.ven.report_request_ids().is_empty());
}

#[test]
fn cancellation_of_someone_elses_registration_is_refused_452() {
    let mut sim = Sim::registered();
    let m = sim.mark();
    sim.push(Message::CancelPartyRegistration(CancelPartyRegistration {
        request_id: "CPR-9".into(),
        registration_id: "REG-OTHER".into(),
        ven_id: None,
    }));
    match &sim.sent_since(m)[..] {
        [Outgoing::CanceledPartyRegistration { response, .. }] => assert_eq!(response.code, 452),
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.ven.registration().unwrap().registration_id, "REG-1");
}

#[test]
fn ven_cancels_its_registration_and_stops() {
    let mut sim = Sim::registered();
    sim.deliver(distribute("D1", vec![ev("E1", 0)]));
    let m = sim.mark();
    let actions = sim.ven.cancel_registration(sim.now);
    // the fake VTN answers with a plain oadrResponse 200 (openleadr's default handler)
    sim.run(actions);
    match &sim.sent_since(m)[..] {
        [
            Outgoing::CancelPartyRegistration {
                registration_id,
                ven_id,
                ..
            },
        ] => assert_eq!((registration_id.as_str(), ven_id.as_str()), ("REG-1", "VEN-1")),
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.persisted.last(), Some(&None));
    assert_eq!(sim.ven.phase(), Phase::Stopped);
    assert!(matches!(
        &sim.last_changes()[..],
        [EventChange::Cancel {
            reason: CancelReason::RegistrationEnded,
            ..
        }]
    ));
    assert_eq!(sim.ven.next_wakeup(), DateTime::<Utc>::MAX_UTC);
    // start again: registers afresh
    sim.start();
    assert_eq!(sim.ven.registration().unwrap().registration_id, "REG-2");
}

// ---------------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------------

#[test]
fn vtn_register_report_is_answered_with_registered_report() {
    let mut sim = Sim::registered();
    let m = sim.mark();
    sim.deliver(vtn_register_report("VTN-RR-7"));
    match &sim.sent_since(m)[1] {
        Outgoing::RegisteredReport { response, ven_id } => {
            assert_eq!(
                (response.code, response.request_id.as_str(), ven_id.as_str()),
                (200, "VTN-RR-7", "VEN-1")
            );
        }
        other => panic!("{other:?}"),
    }
}

fn update_reports(sim: &Sim, mark: usize) -> Vec<(i64, Vec<ReportDataOut>)> {
    sim.sent[mark..]
        .iter()
        .filter_map(|(t, o)| match o {
            Outgoing::UpdateReport { reports, .. } => Some(((*t - t0()).num_seconds(), reports.clone())),
            _ => None,
        })
        .collect()
}

fn floats(report: &ReportDataOut) -> Vec<(i64, String, f64)> {
    report
        .intervals
        .iter()
        .flat_map(|i| {
            i.points.iter().map(move |(r, p)| match p {
                ReportPayloadOut::Float(v) => ((i.start - t0()).num_seconds(), r.clone(), *v),
                other => panic!("{other:?}"),
            })
        })
        .collect()
}

#[test]
fn registered_report_with_requests_starts_reports_at_their_cadence() {
    let mut sim = Sim::new(VenConfig::new("site-a"), None);
    sim.vtn.on_register_report = Some(registered_report(&[report_request(
        "RR-U",
        "TELEMETRY_USAGE",
        "PT10S",
        "PT30S",
        &["meter_kw", "gpu_board_kw"],
    )]));
    sim.start();
    let created = sim
        .sent
        .iter()
        .find_map(|(_, o)| match o {
            Outgoing::CreatedReport {
                response,
                pending_report_request_ids,
                ..
            } => Some((response.clone(), pending_report_request_ids.clone())),
            _ => None,
        })
        .expect("oadrCreatedReport");
    assert_eq!((created.0.code, created.0.request_id.as_str()), (200, "ECHO"));
    assert_eq!(created.1, vec!["RR-U".to_string()]);

    // telemetry every 5 s: 1000, 1005, 1010 ... kW
    let m = sim.mark();
    for k in 0..=18 {
        let at = t0() + secs(5 * k);
        sim.ven.record_sample(at, sample(1000.0 + 5.0 * k as f64)).unwrap();
        sim.advance_to(at);
    }
    sim.advance_to(t0() + secs(90));
    let updates = update_reports(&sim, m);
    let times: Vec<i64> = updates.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, vec![30, 60, 90]);
    let first = &updates[0].1[0];
    assert_eq!(
        (
            first.report_request_id.as_str(),
            first.report_specifier_id.as_str(),
            first.report_name.as_str()
        ),
        ("RR-U", "TELEMETRY_USAGE", "TELEMETRY_USAGE")
    );
    assert_eq!((first.start - t0(), first.duration), (secs(0), secs(30)));
    // slot T holds the latest sample at T (recorded before the tick at T), for [T-10, T)
    assert_eq!(
        floats(first),
        vec![
            (0, "meter_kw".into(), 1010.0),
            (0, "gpu_board_kw".into(), 606.0),
            (10, "meter_kw".into(), 1020.0),
            (10, "gpu_board_kw".into(), 612.0),
            (20, "meter_kw".into(), 1030.0),
            (20, "gpu_board_kw".into(), 618.0),
        ]
    );
    assert!(first.intervals.iter().all(|i| i.duration == secs(10)));
    let third = &updates[2].1[0];
    assert_eq!(floats(third)[4], (80, "meter_kw".into(), 1090.0));
    // report IDs are unique
    assert_ne!(updates[0].1[0].report_id, updates[1].1[0].report_id);
}

#[test]
fn usage_and_status_due_together_go_in_separate_messages() {
    // openleadr 0.5.36 answers 500 to a TELEMETRY_STATUS update; in one message with the usage
    // data, the usage would be refused with it every period (issue 12, item 8).
    let mut sim = Sim::new(VenConfig::new("site-a"), None);
    sim.vtn.on_register_report = Some(registered_report(&[
        report_request(
            "RR-U",
            "TELEMETRY_USAGE",
            "PT10S",
            "PT30S",
            &["meter_kw", "gpu_board_kw"],
        ),
        report_request("RR-S", "TELEMETRY_STATUS", "PT10S", "PT30S", &["status"]),
    ]));
    sim.start();
    let m = sim.mark();
    for k in 0..=6 {
        let at = t0() + secs(5 * k);
        sim.ven.record_sample(at, sample(1000.0 + 5.0 * k as f64)).unwrap();
        sim.advance_to(at);
    }
    let updates = update_reports(&sim, m);
    assert!(updates.len() >= 2, "{updates:?}");
    assert!(
        updates.iter().all(|(_, reports)| reports.len() == 1),
        "one report per oadrUpdateReport: {updates:?}"
    );
    let at_30: Vec<&str> = updates
        .iter()
        .filter(|(t, _)| *t == 30)
        .map(|(_, r)| r[0].report_request_id.as_str())
        .collect();
    assert_eq!(at_30, vec!["RR-U", "RR-S"]);
}

#[test]
fn create_report_status_with_every_sample_and_cancel_report() {
    let mut sim = Sim::registered();
    sim.ven.record_sample(sim.now, sample(800.0)).unwrap();
    let m = sim.mark();
    sim.deliver(create_report(
        "CR-1",
        &[report_request("RR-S", "TELEMETRY_STATUS", "PT15S", "PT0S", &["status"])],
    ));
    let sent = sim.sent_since(m);
    match &sent[1] {
        Outgoing::CreatedReport {
            response,
            pending_report_request_ids,
            ven_id,
        } => {
            assert_eq!(
                (response.code, response.request_id.as_str(), ven_id.as_str()),
                (200, "CR-1", "VEN-1")
            );
            assert_eq!(pending_report_request_ids, &vec!["RR-S".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    let accepted_at = sim.now;
    let m = sim.mark();
    for k in 1..=4 {
        let at = accepted_at + secs(15 * k - 1);
        sim.advance_to(at);
        sim.ven.record_sample(at, sample(800.0 - 10.0 * k as f64)).unwrap();
    }
    sim.advance_to(accepted_at + secs(60));
    let updates = update_reports(&sim, m);
    let offsets: Vec<i64> = updates
        .iter()
        .map(|(t, _)| *t - (accepted_at - t0()).num_seconds())
        .collect();
    assert_eq!(offsets, vec![15, 30, 45, 60]);
    let last = &updates[3].1[0];
    assert_eq!(last.report_name, "TELEMETRY_STATUS");
    assert_eq!(last.intervals.len(), 1);
    assert_eq!(
        last.intervals[0].points,
        vec![(
            "status".to_string(),
            ReportPayloadOut::ResourceStatus {
                online: true,
                manual_override: false,
                capacity_available_kw: Some(190.0),
            }
        )]
    );

    // CancelReport: answered, and no more updates
    let m = sim.mark();
    sim.deliver(cancel_report("CAN-1", "RR-S", false));
    match &sim.sent_since(m)[1] {
        Outgoing::CanceledReport {
            response,
            pending_report_request_ids,
            ..
        } => {
            assert_eq!((response.code, response.request_id.as_str()), (200, "CAN-1"));
            assert!(pending_report_request_ids.is_empty());
        }
        other => panic!("{other:?}"),
    }
    sim.advance(secs(120));
    assert!(update_reports(&sim, m).is_empty());
    assert!(sim.ven.report_request_ids().is_empty());
}

#[test]
fn cancel_report_with_report_to_follow_sends_what_was_collected() {
    let mut sim = Sim::registered();
    sim.ven.record_sample(sim.now, sample(500.0)).unwrap();
    sim.deliver(create_report(
        "CR-1",
        &[report_request(
            "RR-U",
            "TELEMETRY_USAGE",
            "PT10S",
            "PT60S",
            &["meter_kw"],
        )],
    ));
    sim.advance(secs(25));
    sim.ven.record_sample(sim.now, sample(500.0)).unwrap();
    let m = sim.mark();
    sim.push(cancel_report("CAN-1", "RR-U", true));
    let sent = sim.sent_since(m);
    assert_eq!(
        sent.iter().map(Outgoing::name).collect::<Vec<_>>(),
        vec!["oadrCanceledReport", "oadrUpdateReport"]
    );
    match &sent[1] {
        Outgoing::UpdateReport { reports, .. } => {
            assert_eq!(reports[0].intervals.len(), 2);
            assert_eq!(floats(&reports[0])[0].2, 500.0);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_report_specifier_or_rid_is_refused_452() {
    let mut sim = Sim::registered();
    let m = sim.mark();
    sim.deliver(create_report(
        "CR-1",
        &[
            report_request("RR-1", "HISTORY_USAGE", "PT10S", "PT10S", &[]),
            report_request("RR-2", "TELEMETRY_USAGE", "PT10S", "PT10S", &["voltage"]),
            report_request("RR-3", "TELEMETRY_USAGE", "PT10S", "PT10S", &["meter_kw"]),
        ],
    ));
    match &sim.sent_since(m)[1] {
        Outgoing::CreatedReport {
            response,
            pending_report_request_ids,
            ..
        } => {
            assert_eq!(response.code, 452);
            assert!(response.description.contains("HISTORY_USAGE") && response.description.contains("voltage"));
            assert_eq!(pending_report_request_ids, &vec!["RR-3".to_string()]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_report_request_without_a_specifier_is_refused() {
    let mut sim = Sim::registered();
    let m = sim.mark();
    sim.deliver(xml(
        r#"<oadr:oadrCreateReport ei:schemaVersion="2.0b"><pyld:requestID>CR-1</pyld:requestID><oadr:oadrReportRequest><ei:reportRequestID>RR-BARE</ei:reportRequestID></oadr:oadrReportRequest></oadr:oadrCreateReport>"#,
    ));
    match &sim.sent_since(m)[1] {
        Outgoing::CreatedReport {
            response,
            pending_report_request_ids,
            ..
        } => {
            assert_eq!(response.code, 452);
            assert!(response.description.contains("RR-BARE"), "{}", response.description);
            assert!(pending_report_request_ids.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn absurd_report_periods_are_refused() {
    let mut sim = Sim::registered();
    let m = sim.mark();
    sim.deliver(create_report(
        "CR-1",
        &[report_request("RR-1", "TELEMETRY_USAGE", "P400D", "P400D", &[])],
    ));
    match &sim.sent_since(m)[1] {
        Outgoing::CreatedReport {
            response,
            pending_report_request_ids,
            ..
        } => {
            assert_eq!(response.code, 452);
            assert!(
                response.description.contains("longer than 31 days"),
                "{}",
                response.description
            );
            assert!(pending_report_request_ids.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn metadata_request_resends_register_report() {
    let mut sim = Sim::registered();
    let m = sim.mark();
    sim.deliver(create_report(
        "CR-M",
        &[report_request("RR-M", "METADATA", "PT0S", "PT0S", &[])],
    ));
    assert_eq!(sim.names_since(m)[1..3], ["oadrCreatedReport", "oadrRegisterReport"]);
}

#[test]
fn stale_telemetry_is_left_out_and_updated_report_can_cancel() {
    let mut sim = Sim::registered();
    sim.ven.record_sample(sim.now, sample(700.0)).unwrap();
    sim.deliver(create_report(
        "CR-1",
        &[report_request(
            "RR-U",
            "TELEMETRY_USAGE",
            "PT30S",
            "PT60S",
            &["meter_kw"],
        )],
    ));
    let m = sim.mark();
    // accepted at 10 s; no new telemetry: the slot at 40 s is fresh enough (<= 60 s old), the
    // slots at 70, 100 and 130 s are not, so the send at 130 s has nothing to send
    sim.advance(secs(120));
    let updates = update_reports(&sim, m);
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].0, 70);
    assert_eq!(updates[0].1[0].intervals.len(), 1);
    assert!(sim.warnings.iter().any(|w| w.contains("no telemetry fresh enough")));
    // an oadrUpdatedReport may carry a cancellation
    let updated = xml(
        r#"<oadr:oadrUpdatedReport ei:schemaVersion="2.0b"><ei:eiResponse><ei:responseCode>200</ei:responseCode><ei:responseDescription>OK</ei:responseDescription><pyld:requestID>x</pyld:requestID></ei:eiResponse><oadr:oadrCancelReport ei:schemaVersion="2.0b"><pyld:requestID>CAN-2</pyld:requestID><ei:reportRequestID>RR-U</ei:reportRequestID><pyld:reportToFollow>false</pyld:reportToFollow><ei:venID>VEN-1</ei:venID></oadr:oadrCancelReport><ei:venID>VEN-1</ei:venID></oadr:oadrUpdatedReport>"#,
    );
    sim.push(updated);
    assert!(sim.ven.report_request_ids().is_empty());
    assert!(sim.ven.record_sample(sim.now, sample(f64::NAN)).is_err());
}

// ---------------------------------------------------------------------------------------------
// Transport failures
// ---------------------------------------------------------------------------------------------

#[test]
fn registration_transport_failures_back_off_exponentially() {
    let mut sim = Sim::new(VenConfig::new("site-a"), None);
    sim.vtn.fail = 3;
    sim.start();
    sim.advance(secs(30));
    let queries: Vec<i64> = sim
        .sent
        .iter()
        .filter(|(_, o)| o.name() == "oadrQueryRegistration")
        .map(|(t, _)| (*t - t0()).num_seconds())
        .collect();
    // fails at 0, 2 (+2), 6 (+4); succeeds at 14 (+8)
    assert_eq!(queries, vec![0, 2, 6, 14]);
    assert_eq!(sim.ven.phase(), Phase::Registered);
    assert_eq!(sim.poll_times(), vec![14, 24]);
}

#[test]
fn failed_polls_pause_on_the_grid_and_other_messages_are_retried_then_dropped() {
    let mut sim = Sim::registered();
    sim.vtn.fail = 4;
    sim.vtn.fail_names = vec!["oadrPoll"];
    sim.advance(secs(100));
    // polls at 10 (fail, pause 2 s), 20 (fail, 4 s), 30 (fail, 8 s), 40 (fail, 16 s: 50 skipped), 60 ok
    assert_eq!(sim.poll_times(), vec![0, 10, 20, 30, 40, 60, 70, 80, 90, 100]);

    // a CreatedEvent that keeps failing is retried max_attempts (5) times in all, then dropped
    sim.vtn.fail = 100;
    sim.vtn.fail_names = vec!["oadrCreatedEvent"];
    sim.push(distribute("D1", vec![ev("E1", 0)]));
    sim.advance(TimeDelta::minutes(10));
    let attempts = sim.sent.iter().filter(|(_, o)| o.name() == "oadrCreatedEvent").count();
    assert_eq!(attempts, 5);
    assert!(sim.warnings.iter().any(|w| w.contains("dropped after 5 attempts")));
    // a success resets the backoff: polls are back to every 10 s
    let polls = sim.poll_times();
    assert_eq!(polls[polls.len() - 2..], [690, 700]);
}

#[test]
fn an_event_the_decoder_found_unusable_is_refused_454_with_its_reason() {
    // A duration `PT` (no components) must never become an open-ended curtailment: the decoder
    // marks the event, the VEN opts out of it with 454 and the reason, the others go on.
    let mut sim = Sim::registered_with(VenConfig::new("site-a"));
    let mut broken = ev("E1", 0);
    broken.invalid = vec!["eiActivePeriod/properties/duration/duration: `PT` has no components".into()];
    sim.auto_answer = false;
    sim.deliver(distribute("D1", vec![broken, ev("E2", 0)]));
    let outcome = sim.outcomes.last().unwrap().clone();
    match &outcome.changes[0] {
        EventChange::Refused {
            event_id, code, reason, ..
        } => {
            assert_eq!((event_id.as_str(), *code), ("E1", 454));
            assert!(reason.contains("duration"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&outcome.changes[1], EventChange::Upsert(u) if u.event_id == "E2"));
}
