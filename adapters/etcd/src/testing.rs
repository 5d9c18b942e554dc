//! For tests (feature `testing`): a real three-member etcd cluster on 127.0.0.1, Debian's
//! `etcd-server` (installed by the workspace's `tests/peers/setup.sh --only etcd`). Members can be
//! killed and started again with their data, to take the quorum away and give it back.
//! Everything is killed when the cluster drops. It panics, loudly, when etcd is missing or the
//! cluster does not come up: a test that needs etcd never passes without it.

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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Cluster {
    /// Three members, started and answering.
    pub fn start() -> Self {
        Self::start_with(&[
            (free_port(), free_port()),
            (free_port(), free_port()),
            (free_port(), free_port()),
        ])
    }

    /// Three members on these (client, peer) ports: for examples that name their ports.
    pub fn start_on(ports: [(u16, u16); 3]) -> Self {
        Self::start_with(&ports)
    }

    /// Three members whose client URLs are `https://` with `tls`, requiring client
    /// certificates.
    pub fn start_tls(tls: ServerTls) -> Self {
        Self::start_full(
            &[
                (free_port(), free_port()),
                (free_port(), free_port()),
                (free_port(), free_port()),
            ],
            Some(tls),
        )
    }

    fn start_with(ports: &[(u16, u16)]) -> Self {
        Self::start_full(ports, None)
    }

    fn start_full(ports: &[(u16, u16)], tls: Option<ServerTls>) -> Self {
        assert!(
            std::path::Path::new(ETCD).exists(),
            "{ETCD} is not installed: run `bash tests/peers/setup.sh --only etcd`"
        );
        let dir = tempfile::tempdir().expect("dir");
        let members: Vec<Member> = ports
            .iter()
            .enumerate()
            .map(|(i, (client_port, peer_port))| Member {
                name: format!("m{}", i + 1),
                client_port: *client_port,
                peer_port: *peer_port,
                metrics_port: free_port(),
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
        cluster.wait_healthy(Duration::from_secs(30));
        cluster
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
            for m in &self.members {
                if health(&format!("http://127.0.0.1:{}", m.metrics_port)) {
                    return;
                }
            }
            if Instant::now() > deadline {
                let logs: String = self
                    .members
                    .iter()
                    .map(|m| {
                        let text = std::fs::read_to_string(self.dir.path().join(format!("{}.log", m.name)))
                            .unwrap_or_default();
                        let tail: Vec<&str> = text.lines().rev().take(10).collect();
                        format!(
                            "--- {} ---\n{}\n",
                            m.name,
                            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                        )
                    })
                    .collect();
                panic!("the etcd cluster did not become healthy in {within:?}\n{logs}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
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
