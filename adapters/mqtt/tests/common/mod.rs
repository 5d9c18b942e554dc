//! Test fixtures: an in-process rumqttd broker, a TCP proxy that can cut connections and
//! switch brokers, a scripted broker that refuses CONNECT, one that sends the largest packet
//! MQTT allows, and an observer client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use flexgate_mqtt::settings::Backoff;
use flexgate_mqtt::{MqttSettings, Topics};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, Publish, QoS};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
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

/// What the broker of [`largest_packet_broker`] saw.
pub struct ScriptedBroker {
    /// Where it listens (127.0.0.1).
    pub port: u16,
    /// CONNECT packets received (one per connection).
    pub connects: Arc<AtomicUsize>,
    /// The packet id of every PUBACK a client sent.
    pub pubacks: mpsc::UnboundedReceiver<u16>,
}

/// The largest remaining length MQTT 3.1.1 can express, as its four-byte encoding.
const MAX_REMAINING: usize = 268_435_455;
const MAX_REMAINING_ENCODED: [u8; 4] = [0xFF, 0xFF, 0xFF, 0x7F];

/// A scripted MQTT 3.1.1 broker. To each client it answers CONNECT, SUBSCRIBE, PINGREQ and
/// QoS 1 publishes; after the SubAck it sends a QoS 1 PUBLISH on `huge_topic` (packet id 7)
/// whose remaining length is the largest MQTT allows (268,435,455 bytes, streamed from one
/// shared 1 MiB buffer), then one on `small_topic` carrying `small` (packet id 8). Mosquitto
/// would keep such a message on disk, which the test machine cannot spare, hence the script.
pub async fn largest_packet_broker(huge_topic: &str, small_topic: &str, small: Vec<u8>) -> ScriptedBroker {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connects = Arc::new(AtomicUsize::new(0));
    let (puback_tx, pubacks) = mpsc::unbounded_channel();
    let (huge_topic, small_topic) = (huge_topic.to_owned(), small_topic.to_owned());
    let counted = connects.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (mut rd, mut wr) = stream.into_split();
            let (out, mut queue) = mpsc::unbounded_channel::<bytes::Bytes>();
            tokio::spawn(async move {
                while let Some(chunk) = queue.recv().await {
                    if wr.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            });
            let (huge_topic, small_topic, small) = (huge_topic.clone(), small_topic.clone(), small.clone());
            let (counted, puback_tx) = (counted.clone(), puback_tx.clone());
            tokio::spawn(async move {
                while let Ok((first, body)) = read_packet(&mut rd).await {
                    let reply: Option<Vec<u8>> = match first >> 4 {
                        1 => {
                            counted.fetch_add(1, Ordering::SeqCst);
                            Some(vec![0x20, 0x02, 0x00, 0x00])
                        }
                        8 => {
                            let _ = out.send(bytes::Bytes::from(vec![0x90, 0x03, body[0], body[1], 0x01]));
                            send_largest_publish(&out, &huge_topic, 7);
                            let _ = out.send(bytes::Bytes::from(publish_packet(&small_topic, 8, &small)));
                            None
                        }
                        3 if first & 0x06 != 0 => {
                            let topic_len = usize::from(u16::from_be_bytes([body[0], body[1]]));
                            let id = &body[2 + topic_len..4 + topic_len];
                            Some(vec![0x40, 0x02, id[0], id[1]])
                        }
                        4 => {
                            let _ = puback_tx.send(u16::from_be_bytes([body[0], body[1]]));
                            None
                        }
                        12 => Some(vec![0xD0, 0x00]),
                        _ => None,
                    };
                    if let Some(reply) = reply {
                        let _ = out.send(bytes::Bytes::from(reply));
                    }
                }
            });
        }
    });
    ScriptedBroker {
        port,
        connects,
        pubacks,
    }
}

fn send_largest_publish(out: &mpsc::UnboundedSender<bytes::Bytes>, topic: &str, packet_id: u16) {
    let mut head = vec![0x32];
    head.extend_from_slice(&MAX_REMAINING_ENCODED);
    head.extend_from_slice(&u16::try_from(topic.len()).unwrap().to_be_bytes());
    head.extend_from_slice(topic.as_bytes());
    head.extend_from_slice(&packet_id.to_be_bytes());
    let mut left = MAX_REMAINING - (head.len() - 1 - MAX_REMAINING_ENCODED.len());
    let _ = out.send(bytes::Bytes::from(head));
    let chunk = bytes::Bytes::from(vec![b'x'; 1 << 20]);
    while left > 0 {
        let n = left.min(chunk.len());
        let _ = out.send(chunk.slice(..n));
        left -= n;
    }
}

fn publish_packet(topic: &str, packet_id: u16, payload: &[u8]) -> Vec<u8> {
    let remaining = 2 + topic.len() + 2 + payload.len();
    let mut p = vec![0x32];
    let mut n = remaining;
    loop {
        let mut byte = u8::try_from(n % 128).unwrap();
        n /= 128;
        if n > 0 {
            byte |= 0x80;
        }
        p.push(byte);
        if n == 0 {
            break;
        }
    }
    p.extend_from_slice(&u16::try_from(topic.len()).unwrap().to_be_bytes());
    p.extend_from_slice(topic.as_bytes());
    p.extend_from_slice(&packet_id.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// One MQTT packet: its first byte and its body.
async fn read_packet(rd: &mut (impl tokio::io::AsyncRead + Unpin)) -> std::io::Result<(u8, Vec<u8>)> {
    let first = rd.read_u8().await?;
    let (mut len, mut shift) = (0usize, 0u32);
    loop {
        let byte = rd.read_u8().await?;
        len |= usize::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 21 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "remaining length"));
        }
    }
    let mut body = vec![0; len];
    rd.read_exact(&mut body).await?;
    Ok((first, body))
}
