//! OpenADR 2.0b push mode: the VTN POSTs oadrDistributeEvent to the gateway's
//! `/OpenADR2/Simple/2.0b/EiEvent`, authenticated with the push token; the VEN answers with
//! oadrCreatedEvent to the VTN; an operator opt-out goes to the VTN as oadrCreateOpt. openleadr has no push mode, so the VTN here is a small canned
//! server that registers the VEN and records what it receives.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use chrono::{SecondsFormat, Utc};
use flexgate::clock::Clock;
use flexgate::config::{Config, OpenAdr2bConfig};
use flexgate::serve::Server;
use flexgate_openadr::oadr2b::{Message, decode};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PUSH_TOKEN: &str = "push-token-0123456789abcdef";
const NS: &str = r#"xmlns:oadr="http://openadr.org/oadr-2.0b/2012/07" xmlns:ei="http://docs.oasis-open.org/ns/energyinterop/201110" xmlns:pyld="http://docs.oasis-open.org/ns/energyinterop/201110/payloads" xmlns:emix="http://docs.oasis-open.org/ns/emix/2011/06" xmlns:power="http://docs.oasis-open.org/ns/emix/2011/06/power" xmlns:scale="http://docs.oasis-open.org/ns/emix/2011/06/siscale" xmlns:xcal="urn:ietf:params:xml:ns:icalendar-2.0" xmlns:strm="urn:ietf:params:xml:ns:icalendar-2.0:stream""#;

type Seen = Arc<Mutex<Vec<Message>>>;

fn payload(inner: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><oadr:oadrPayload {NS}><oadr:oadrSignedObject>{inner}</oadr:oadrSignedObject></oadr:oadrPayload>"#
    )
}

async fn vtn(State(seen): State<Seen>, Path(_service): Path<String>, body: Bytes) -> String {
    let msg = decode(&body).expect("the VEN sends valid 2.0b");
    let reply = match &msg {
        Message::QueryRegistration(_) | Message::CreatePartyRegistration(_) => payload(
            r#"<oadr:oadrCreatedPartyRegistration ei:schemaVersion="2.0b"><ei:eiResponse><ei:responseCode>200</ei:responseCode><ei:responseDescription>OK</ei:responseDescription><pyld:requestID/></ei:eiResponse><ei:registrationID>reg-1</ei:registrationID><ei:venID>ven-push</ei:venID><ei:vtnID>fake-vtn</ei:vtnID><oadr:oadrProfiles><oadr:oadrProfile><oadr:oadrProfileName>2.0b</oadr:oadrProfileName><oadr:oadrTransports><oadr:oadrTransport><oadr:oadrTransportName>simpleHttp</oadr:oadrTransportName></oadr:oadrTransport></oadr:oadrTransports></oadr:oadrProfile></oadr:oadrProfiles></oadr:oadrCreatedPartyRegistration>"#,
        ),
        _ => payload(
            r#"<oadr:oadrResponse ei:schemaVersion="2.0b"><ei:eiResponse><ei:responseCode>200</ei:responseCode><ei:responseDescription>OK</ei:responseDescription><pyld:requestID/></ei:eiResponse><ei:venID>ven-push</ei:venID></oadr:oadrResponse>"#,
        ),
    };
    seen.lock().expect("lock").push(msg);
    reply
}

fn distribute(event_id: &str, kw: f64) -> String {
    let start = (Utc::now() + chrono::Duration::seconds(60)).to_rfc3339_opts(SecondsFormat::Secs, true);
    payload(&format!(
        r#"<oadr:oadrDistributeEvent ei:schemaVersion="2.0b"><pyld:requestID>push-1</pyld:requestID><ei:vtnID>fake-vtn</ei:vtnID><oadr:oadrEvent><ei:eiEvent><ei:eventDescriptor><ei:eventID>{event_id}</ei:eventID><ei:modificationNumber>0</ei:modificationNumber><ei:eiMarketContext><emix:marketContext>http://prog</emix:marketContext></ei:eiMarketContext><ei:createdDateTime>{start}</ei:createdDateTime><ei:eventStatus>far</ei:eventStatus></ei:eventDescriptor><ei:eiActivePeriod><xcal:properties><xcal:dtstart><xcal:date-time>{start}</xcal:date-time></xcal:dtstart><xcal:duration><xcal:duration>PT10M</xcal:duration></xcal:duration></xcal:properties><xcal:components/></ei:eiActivePeriod><ei:eiEventSignals><ei:eiEventSignal><strm:intervals><ei:interval><xcal:duration><xcal:duration>PT10M</xcal:duration></xcal:duration><xcal:uid><xcal:text>0</xcal:text></xcal:uid><ei:signalPayload><ei:payloadFloat><ei:value>{kw}</ei:value></ei:payloadFloat></ei:signalPayload></ei:interval></strm:intervals><ei:signalName>LOAD_DISPATCH</ei:signalName><ei:signalType>setpoint</ei:signalType><ei:signalID>S1</ei:signalID><power:powerReal><power:itemDescription>RealPower</power:itemDescription><power:itemUnits>W</power:itemUnits><scale:siScaleCode>k</scale:siScaleCode><power:powerAttributes><power:hertz>60</power:hertz><power:voltage>230</power:voltage><power:ac>true</power:ac></power:powerAttributes></power:powerReal></ei:eiEventSignal></ei:eiEventSignals><ei:eiTarget><ei:venID>ven-push</ei:venID></ei:eiTarget></ei:eiEvent><oadr:oadrResponseRequired>always</oadr:oadrResponseRequired></oadr:oadrEvent></oadr:oadrDistributeEvent>"#
    ))
}

async fn push(addr: std::net::SocketAddr, token: Option<&str>, body: &str) -> u16 {
    push_to(addr, "/OpenADR2/Simple/2.0b/EiEvent", token, body).await.0
}

async fn push_to(addr: std::net::SocketAddr, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let answer = flexgate::http_client::request(addr, "POST", path, token, Some(body.as_bytes()))
        .await
        .expect("push request");
    (answer.status, String::from_utf8_lossy(&answer.body).into_owned())
}

/// The first oadrCreatedEvent the VTN got that mentions `event_id`, as debug text.
async fn created_event_for(seen: &Seen, event_id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = seen.lock().expect("lock").iter().find_map(|m| match m {
            Message::CreatedEvent(c) => Some(format!("{c:?}")).filter(|text| text.contains(event_id)),
            _ => None,
        });
        if let Some(text) = found {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no oadrCreatedEvent for {event_id} reached the VTN"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_distribute_is_authenticated_applied_and_answered() {
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route("/OpenADR2/Simple/2.0b/{service}", axum::routing::post(vtn))
        .with_state(seen.clone());
    let vtn_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let vtn_addr = vtn_listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(vtn_listener, app).await });

    let dir = tempfile::tempdir().expect("tempdir");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let gw_addr = listener.local_addr().expect("addr");
    let mut config = Config::default();
    config.gateway.data_dir = dir.path().to_path_buf();
    config.gateway.api_token = "it-token-0123456789".into();
    config.openadr2b = Some(OpenAdr2bConfig {
        url: format!("http://{vtn_addr}"),
        ven_name: "push-site".into(),
        ven_id: None,
        vtn_id: Some("fake-vtn".into()),
        market_contexts: Vec::new(),
        group_ids: Vec::new(),
        resource_ids: Vec::new(),
        party_ids: Vec::new(),
        poll_s: None,
        timeout_s: 5,
        tls: None,
        push_url: Some(format!("http://{gw_addr}/OpenADR2/Simple/2.0b")),
        push_token: Some(PUSH_TOKEN.into()),
    });
    let server = Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen
        .lock()
        .expect("lock")
        .iter()
        .any(|m| matches!(m, Message::RequestEvent(_)))
    {
        assert!(Instant::now() < deadline, "the VEN did not register and request events");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    {
        let seen = seen.lock().expect("lock");
        let registration = seen
            .iter()
            .find_map(|m| match m {
                Message::CreatePartyRegistration(r) => Some(r.clone()),
                _ => None,
            })
            .expect("registration");
        assert!(
            registration.http_pull_model == Some(false),
            "push mode registers with oadrHttpPullModel=false"
        );
        assert_eq!(
            registration.transport_address.as_deref(),
            Some(format!("http://{gw_addr}/OpenADR2/Simple/2.0b").as_str())
        );
        assert!(
            !seen.iter().any(|m| matches!(m, Message::Poll(_))),
            "a push VEN does not poll"
        );
    }

    // Unauthenticated or malformed pushes change nothing.
    assert_eq!(push(gw_addr, None, &distribute("E-bad", 100.0)).await, 401);
    assert_eq!(
        push(gw_addr, Some("wrong-token-0123456789"), &distribute("E-bad", 100.0)).await,
        401
    );
    assert_eq!(push(gw_addr, Some(PUSH_TOKEN), "<oadrPayload").await, 400);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(server.gateway.read().event("E-bad").await.is_none());

    // An authenticated push reaches the book and is answered with oadrCreatedEvent.
    assert_eq!(push(gw_addr, Some(PUSH_TOKEN), &distribute("E-push", 123.0)).await, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    let created = loop {
        let found = seen.lock().expect("lock").iter().find_map(|m| match m {
            Message::CreatedEvent(c) => Some(c.clone()),
            _ => None,
        });
        if let Some(c) = found {
            break c;
        }
        assert!(Instant::now() < deadline, "no oadrCreatedEvent reached the VTN");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let answer = format!("{created:?}");
    assert!(answer.contains("E-push") && answer.contains("OptIn"), "{answer}");
    let event = server.gateway.read().event("E-push").await.expect("E-push in the book");
    assert_eq!(event["detail"]["ceilings"][0]["ceiling_kw"].as_f64(), Some(123.0));

    // An operator's opt-out is told to the VTN with oadrCreateOpt.
    server
        .gateway
        .driver()
        .operator_opt_out("E-push", "Ada (site operator)", "must-run training checkpoint")
        .await
        .expect("opt-out");
    let deadline = Instant::now() + Duration::from_secs(10);
    let opt = loop {
        let found = seen.lock().expect("lock").iter().find_map(|m| match m {
            Message::CreateOpt(o) => Some(format!("{o:?}")),
            _ => None,
        });
        if let Some(o) = found {
            break o;
        }
        assert!(Instant::now() < deadline, "no oadrCreateOpt reached the VTN");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        opt.contains("E-push") && opt.contains("must-run training checkpoint"),
        "{opt}"
    );

    // (After the opt-out: a distribute without E-push would end E-push at the VEN.)
    // Only the services a VTN pushes to exist, and each message only on its own service: a
    // path segment such as `../../v1/events` is not taken for EiEvent.
    for path in [
        "/OpenADR2/Simple/2.0b/..%2F..%2Fv1%2Fevents",
        "/OpenADR2/Simple/2.0b/NoSuchService",
    ] {
        let (status, text) = push_to(gw_addr, path, Some(PUSH_TOKEN), &distribute("E-path", 90.0)).await;
        assert_eq!(status, 404, "{path}: {text}");
        assert!(text.contains("EiEvent, EiReport, EiRegisterParty"), "{text}");
        // The same problem shape as the rest of the port's API.
        let problem: serde_json::Value = serde_json::from_str(&text).expect("a problem document");
        assert_eq!(
            (problem["type"].as_str(), problem["status"].as_u64()),
            (Some("about:blank"), Some(404))
        );
    }
    let (status, text) = push_to(
        gw_addr,
        "/OpenADR2/Simple/2.0b/EiReport",
        Some(PUSH_TOKEN),
        &distribute("E-path", 90.0),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("belongs to the EiEvent service"), "{text}");
    assert!(server.gateway.read().event("E-path").await.is_none());

    // An event duration without components (`PT`) is not "no end": the VEN answers 454 with
    // the reason, and the event never enters the book (issue 12, item 2, end to end).
    let no_components = distribute("E-pt", 100.0).replacen(
        "<xcal:duration><xcal:duration>PT10M</xcal:duration></xcal:duration></xcal:properties>",
        "<xcal:duration><xcal:duration>PT</xcal:duration></xcal:duration></xcal:properties>",
        1,
    );
    assert!(no_components.contains(">PT<"), "the fixture changed");
    assert_eq!(push(gw_addr, Some(PUSH_TOKEN), &no_components).await, 200);
    let refused = created_event_for(&seen, "E-pt").await;
    assert!(refused.contains("454"), "{refused}");
    assert!(
        server.gateway.read().event("E-pt").await.is_none(),
        "an invalid duration must not enter the book"
    );
    server.shutdown().await;
}
