//! For tests (feature `testing`): a real three-member etcd cluster on 127.0.0.1, Debian's
//! `etcd-server` (installed by the workspace's `tests/peers/setup.sh --only etcd`). Members can be
//! killed and started again with their data, to take the quorum away and give it back.
//! Everything is killed when the cluster drops. It panics, loudly, when etcd is missing or the
//! cluster does not come up: a test that needs etcd never passes without it.
//!
//! It also hands out the ports ([`spare_port`]) of every other service a test binary starts
//! beside its clusters (brokers, gateways, VTNs), from the same counter, so that none of them
//! races another for a port.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian installs etcd.
pub const ETCD: &str = "/usr/bin/etcd";

/// One member.
pub struct Member {
    /// Its name (`m1` …).
    pub name: String,
    /// Its client port.
    pub client_port: u16,
    /// Its peer port.
    pub peer_port: u16,
    /// Where it serves `/health` and `/metrics` over plain HTTP (whatever its client URLs are).
    pub metrics_port: u16,
    child: Option<Child>,
}

/// The members' TLS on their client URLs (PEM files): a certificate for 127.0.0.1, and the CA
/// whose client certificates they require (`--client-cert-auth`).
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The CA that signs the members' certificate and the clients' certificates.
    pub ca_file: PathBuf,
    /// The members' certificate (valid for 127.0.0.1).
    pub cert_file: PathBuf,
    /// Its key.
    pub key_file: PathBuf,
}

/// The cluster.
pub struct Cluster {
    /// Data directories and logs.
    pub dir: tempfile::TempDir,
    /// Its members.
    pub members: Vec<Member>,
    initial: String,
    tls: Option<ServerTls>,
}

impl Member {
    fn is_healthy(&self) -> bool {
        health(&format!("http://127.0.0.1:{}", self.metrics_port))
    }
}

/// Ports for the test clusters come from below Linux's ephemeral range (32768–60999), where no
/// outgoing connection takes one, and from a counter, so that clusters started at once by one
/// test binary never pick the same port; a port another process holds is skipped.
const SPARE_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A port on 127.0.0.1 that nothing listens on now and that this process has not handed out
/// before, for a service a test starts and that binds it itself.
///
/// A port taken from `bind("127.0.0.1:0")` and released is in the ephemeral range: another
/// test's `bind(0)` or any outgoing connection can take it before the service binds it, and
/// the service then fails to start or, worse, the test talks to another test's service. Every
/// test of a binary that starts services should take its ports here, from one counter.
#[must_use]
pub fn spare_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = u32::from(SPARE_PORTS.end - SPARE_PORTS.start);
    // Start each process somewhere else in the range: test binaries run one after another, but
    // a member killed by the previous one may still be closing its sockets.
    let offset = (std::process::id().wrapping_mul(7919)) % span;
    for _ in 0..span {
        let n = (NEXT.fetch_add(1, Ordering::Relaxed) + offset) % span;
        let port = SPARE_PORTS.start + u16::try_from(n).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {SPARE_PORTS:?} on 127.0.0.1")
}

fn spare_ports() -> Vec<(u16, u16)> {
    (0..3).map(|_| (spare_port(), spare_port())).collect()
}

/// How many times a cluster is started on fresh ports when a member could not bind its own.
const START_ATTEMPTS: usize = 5;

impl Cluster {
    /// Three members, started and answering.
    pub fn start() -> Self {
        Self::start_full(None, None)
    }

    /// Three members on these (client, peer) ports: for examples that name their ports.
    pub fn start_on(ports: [(u16, u16); 3]) -> Self {
        Self::start_full(Some(&ports), None)
    }

    /// Three members whose client URLs are `https://` with `tls`, requiring client
    /// certificates.
    pub fn start_tls(tls: ServerTls) -> Self {
        Self::start_full(None, Some(tls))
    }

    /// Start the members on `ports` (chosen here when `None`) and wait until every one has
    /// joined. Another process can take a chosen port between the choice and etcd's bind; the
    /// member then exits at once, and the cluster is started again on other ports.
    fn start_full(ports: Option<&[(u16, u16)]>, tls: Option<ServerTls>) -> Self {
        assert!(
            std::path::Path::new(ETCD).exists(),
            "{ETCD} is not installed: run `bash tests/peers/setup.sh --only etcd`"
        );
        let mut attempt = 1;
        loop {
            let chosen = ports.map_or_else(spare_ports, <[(u16, u16)]>::to_vec);
            let mut cluster = Self::spawn(&chosen, tls.clone());
            // Every member, not just one: a member that has not joined when a test kills
            // another leaves the survivors without a quorum.
            match cluster.wait_joined(Duration::from_secs(30)) {
                Ok(()) => return cluster,
                Err(exited) if attempt < START_ATTEMPTS && cluster.could_not_bind(exited) => {
                    drop(cluster);
                    attempt += 1;
                }
                Err(exited) => panic!(
                    "etcd member {} exited while the cluster started (attempt {attempt})\n{}",
                    cluster.members[exited].name,
                    cluster.log_tails(10)
                ),
            }
        }
    }

    fn spawn(ports: &[(u16, u16)], tls: Option<ServerTls>) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let members: Vec<Member> = ports
            .iter()
            .enumerate()
            .map(|(i, (client_port, peer_port))| Member {
                name: format!("m{}", i + 1),
                client_port: *client_port,
                peer_port: *peer_port,
                metrics_port: spare_port(),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            dir,
            members,
            initial,
            tls,
        };
        for i in 0..cluster.members.len() {
            cluster.start_member(i);
        }
        cluster
    }

    /// Wait until every member reports the cluster healthy; `Err(i)` when member `i` exited
    /// first. Panics, with the members' logs, when they do not join within `within`.
    fn wait_joined(&mut self, within: Duration) -> Result<(), usize> {
        let deadline = Instant::now() + within;
        loop {
            for (i, m) in self.members.iter_mut().enumerate() {
                if let Some(child) = &mut m.child
                    && matches!(child.try_wait(), Ok(Some(_)))
                {
                    m.child = None;
                    return Err(i);
                }
            }
            if self.members.iter().all(Member::is_healthy) {
                return Ok(());
            }
            assert!(
                Instant::now() <= deadline,
                "the etcd members did not all become healthy in {within:?}\n{}",
                self.log_tails(10)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether member `i`'s log says a port it was given was taken.
    fn could_not_bind(&self, i: usize) -> bool {
        std::fs::read_to_string(self.dir.path().join(format!("{}.log", self.members[i].name)))
            .is_ok_and(|log| log.contains("address already in use"))
    }

    fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(&self.members[i].name)
    }

    /// Start member `i` (again, with its data, if it ran before).
    pub fn start_member(&mut self, i: usize) {
        let m = &self.members[i];
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", m.name))).expect("log");
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut command = Command::new(ETCD);
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert_file)
                .arg("--key-file")
                .arg(&tls.key_file)
                .arg("--trusted-ca-file")
                .arg(&tls.ca_file)
                .arg("--client-cert-auth");
        }
        let child = command
            .args([
                "--name",
                &m.name,
                "--data-dir",
                &self.data_dir(i).to_string_lossy(),
                "--listen-client-urls",
                &format!("{scheme}://127.0.0.1:{}", m.client_port),
                "--advertise-client-urls",
                &format!("{scheme}://127.0.0.1:{}", m.client_port),
                "--listen-metrics-urls",
                &format!("http://127.0.0.1:{}", m.metrics_port),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{}", m.peer_port),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", m.peer_port),
                "--initial-cluster",
                &self.initial,
                "--initial-cluster-token",
                "flexgate-test",
                "--heartbeat-interval",
                "50",
                "--election-timeout",
                "500",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.members[i].child = Some(child);
    }

    /// Kill member `i` (SIGKILL).
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.members
            .iter()
            .map(|m| format!("{scheme}://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// Wait until a member reports the cluster healthy (it has a leader and a quorum).
    pub fn wait_healthy(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if self.members.iter().any(|m| m.is_healthy()) {
                return;
            }
            assert!(
                Instant::now() <= deadline,
                "the etcd cluster did not become healthy in {within:?}\n{}",
                self.log_tails(10)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last `lines` of each member's log, for a test's failure message.
    #[must_use]
    pub fn log_tails(&self, lines: usize) -> String {
        self.members
            .iter()
            .map(|m| {
                let text = std::fs::read_to_string(self.dir.path().join(format!("{}.log", m.name))).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(lines).collect();
                format!(
                    "--- {} ---\n{}\n",
                    m.name,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect()
    }
}

/// `GET /health` answers `{"health":"true"}` only with a leader and a quorum.
fn health(endpoint: &str) -> bool {
    let Some(addr) = endpoint.strip_prefix("http://") else {
        return false;
    };
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    use std::io::{Read, Write};
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
    }
}

/// An HTTP client without TLS settings, for clusters on loopback. The caller installs a rustls
/// provider first where the workspace's reqwest has none of its own.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder().build().expect("an HTTP client")
}
