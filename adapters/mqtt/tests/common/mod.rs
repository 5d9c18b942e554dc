//! Test fixtures: an in-process rumqttd broker, a TCP proxy that can cut connections and
//! switch brokers, a scripted broker that refuses CONNECT, and an observer client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use flexgate_mqtt::settings::Backoff;
use flexgate_mqtt::{MqttSettings, Topics};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, Publish, QoS};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub const WAIT: Duration = Duration::from_secs(10);

/// Starts rumqttd (v4 server on 127.0.0.1) on a free port, optionally with one user, and
/// waits until it accepts TCP. The broker runs until the test process exits (rumqttd has no
/// shutdown API).
pub fn start_broker(auth: Option<(&str, &str)>) -> u16 {
    let port = StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let connections = rumqttd::ConnectionSettings {
        connection_timeout_ms: 5000,
        max_payload_size: 1 << 20,
        max_inflight_count: 100,
        auth: auth.map(|(u, p)| HashMap::from([(u.to_owned(), p.to_owned())])),
        external_auth: None,
        dynamic_filters: true,
    };
    let server = rumqttd::ServerSettings {
        name: format!("v4-{port}"),
        listen: SocketAddr::from(([127, 0, 0, 1], port)),
        tls: None,
        next_connection_delay_ms: 1,
        connections,
    };
    let config = rumqttd::Config {
        id: 0,
        router: rumqttd::RouterConfig {
            max_connections: 100,
            max_outgoing_packet_count: 200,
            max_segment_size: 1 << 20,
            max_segment_count: 10,
            ..Default::default()
        },
        v4: Some(HashMap::from([("1".to_owned(), server)])),
        ..Default::default()
    };
    std::thread::spawn(move || {
        let mut broker = rumqttd::Broker::new(config);
        let _ = broker.start();
    });
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return port;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("rumqttd did not start on port {port}");
}

/// Link settings for tests: fast backoff, short keep-alive.
pub fn settings(port: u16, client_id: &str, site: &str) -> MqttSettings {
    let mut s = MqttSettings::new(
        &format!("mqtt://127.0.0.1:{port}"),
        client_id,
        Topics::for_site(site).unwrap(),
    )
    .unwrap();
    s.keep_alive = Duration::from_secs(5);
    s.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(400),
    };
    s.connect_timeout_s = 5;
    s
}

/// A TCP proxy in front of a broker: `cut` drops every open connection (a network failure),
/// `set_upstream` points new connections at another broker (a broker restart that lost its
/// sessions).
pub struct Proxy {
    pub port: u16,
    upstream: Arc<AtomicU16>,
    refusing: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let upstream = Arc::new(AtomicU16::new(upstream));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
        let refusing = Arc::new(AtomicBool::new(false));
        let (up, cs, refuse) = (upstream.clone(), conns.clone(), refusing.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if refuse.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let target = up.load(Ordering::SeqCst);
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                cs.lock().unwrap().push(task);
            }
        });
        Proxy {
            port,
            upstream,
            refusing,
            conns,
            accept,
        }
    }

    pub fn cut(&self) {
        for task in self.conns.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// While refusing, new connections are closed at once (the network is down).
    pub fn set_refusing(&self, refusing: bool) {
        self.refusing.store(refusing, Ordering::SeqCst);
    }

    pub fn set_upstream(&self, port: u16) {
        self.upstream.store(port, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// A scripted broker that answers every CONNECT with a CONNACK carrying `code` (MQTT 3.1.1
/// return codes: 4 bad user name or password, 5 not authorized) and closes.
pub async fn refusing_broker(code: u8) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(&[0x20, 0x02, 0x00, code]).await;
                let _ = s.shutdown().await;
            });
        }
    });
    port
}

/// A plain rumqttc client (clean session) subscribed to `filter`, forwarding every publish.
/// Returns once the subscription is acknowledged.
pub async fn observer(port: u16, id: &str, filter: &str) -> (AsyncClient, mpsc::UnboundedReceiver<Publish>) {
    let mut options = MqttOptions::new(id, "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(5));
    let (client, mut eventloop) = AsyncClient::new(options, 64);
    let (tx, rx) = mpsc::unbounded_channel();
    let (subscribed_tx, mut subscribed_rx) = mpsc::unbounded_channel();
    let sub = client.clone();
    let filter = filter.to_owned();
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    let _ = sub.try_subscribe(filter.clone(), QoS::AtLeastOnce);
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    let _ = subscribed_tx.send(());
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    if tx.send(p).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    });
    tokio::time::timeout(WAIT, subscribed_rx.recv())
        .await
        .expect("observer subscribed in time");
    (client, rx)
}

/// The next publish on `rx` whose topic is `topic`, skipping others.
pub async fn next_on(rx: &mut mpsc::UnboundedReceiver<Publish>, topic: &str) -> Publish {
    tokio::time::timeout(WAIT, async {
        loop {
            let p = rx.recv().await.expect("observer alive");
            if p.topic == topic {
                return p;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("nothing on {topic} in time"))
}

/// A minimal valid `dr.event/1` document (the window ends far in the future).
pub fn event_doc(id: &str, revision: u64) -> String {
    format!(
        r#"{{"schema":"dr.event/1","event_id":"{id}","revision":{revision},"target":{{"form":"ceiling","point":"meter","kw":8000}},"window":{{"start":"2099-07-14T19:00:00Z","duration_s":3600}}}}"#
    )
}
