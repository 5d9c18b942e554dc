//! The openleadr 0.5.36 VTN (PyPI) that the OpenADR 2.0b tests run on 127.0.0.1, from
//! `tests/peers/oadr2b_vtn.py` with the virtualenv that `tests/peers/setup.sh` creates (the
//! README test command runs it first).

use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A running VTN; killed when dropped.
pub struct Vtn {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Drop for Vtn {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Vtn {
    /// A VTN polled every second, asking reports every 2 s.
    pub async fn start() -> Vtn {
        Self::start_with(&[]).await
    }

    /// [`Vtn::start`] with extra arguments for the script.
    pub async fn start_with(extra: &[&str]) -> Vtn {
        let python = std::env::var("FLEXGATE_OADR2B_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|_| workspace().join("target/peers/oadr2b-venv/bin/python"));
        assert!(
            python.exists(),
            "{} is missing: run `bash tests/peers/setup.sh` (the README test command does) to install openleadr \
             0.5.36",
            python.display()
        );
        let mut child = Command::new(&python)
            .arg(workspace().join("tests/peers/oadr2b_vtn.py"))
            .args([
                "--port",
                "0",
                "--poll-freq",
                "1",
                "--report-sampling",
                "2",
                "--exit-on-stdin-eof",
            ])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the openleadr VTN");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.expect("read VTN stdout") {
                if let Some(port) = line.strip_prefix("READY ") {
                    return port.trim().parse::<u16>().expect("port");
                }
            }
            panic!("the VTN exited before it was ready");
        })
        .await
        .expect("the VTN did not print READY within 60 s");
        // Keep draining stdout so the VTN never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Vtn {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// An admin request (e.g. `/admin/event`); an `error` member fails the test.
    pub async fn post(&self, path: &str, body: Value) -> Value {
        let bytes = serde_json::to_vec(&body).expect("json");
        let resp = flexgate::http_client::request(self.addr, "POST", path, None, Some(&bytes))
            .await
            .expect("VTN admin request");
        let value = resp.json().expect("VTN admin answer is JSON");
        assert!(value.get("error").is_none(), "{path} {body}: {value}");
        value
    }

    /// The VTN's admin view: registrations, events, opt responses.
    pub async fn state(&self) -> Value {
        flexgate::http_client::request(self.addr, "GET", "/admin/state?raw=0", None, None)
            .await
            .expect("VTN state")
            .json()
            .expect("VTN state JSON")
    }
}

/// The program (market context) the test VTN's events are in.
pub const PROGRAM: &str = "http://flexgate.test/dr";

impl Vtn {
    /// A VEN named `ven_name` polling this VTN, enrolled in [`PROGRAM`], in group `dc-east`.
    pub fn ven_config(&self, ven_name: &str) -> flexgate::config::OpenAdr2bConfig {
        flexgate::config::OpenAdr2bConfig {
            url: format!("http://{}", self.addr),
            ven_name: ven_name.into(),
            ven_id: None,
            vtn_id: Some("flexgate-test-vtn".into()),
            market_contexts: vec![PROGRAM.into()],
            group_ids: vec!["dc-east".into()],
            resource_ids: Vec::new(),
            party_ids: Vec::new(),
            poll_s: None,
            timeout_s: 5,
            tls: None,
            push_url: None,
            push_token: None,
        }
    }

    /// The venID the VTN gave an active registration of `ven_name`, once there is one.
    pub async fn registered_ven_id(&self, ven_name: &str) -> Option<String> {
        let state = self.state().await;
        state["registrations"].as_array()?.iter().find_map(|r| {
            (r["ven_name"] == ven_name && r["active"] == true).then(|| r["ven_id"].as_str().map(str::to_string))?
        })
    }
}
