//! A real Mosquitto broker on 127.0.0.1 for integration tests: its own configuration, port and
//! persistence directory per test, stopped (SIGTERM, so it saves its persistence) or killed on
//! drop. Installed by `tests/peers/setup.sh` (the README test command runs it); a missing
//! binary fails the test with that instruction.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running broker.
pub struct Mosquitto {
    child: Option<Child>,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    conf: PathBuf,
}

fn binary() -> PathBuf {
    for candidate in ["/usr/sbin/mosquitto", "/usr/bin/mosquitto", "/usr/local/sbin/mosquitto"] {
        if Path::new(candidate).is_file() {
            return PathBuf::from(candidate);
        }
    }
    panic!("mosquitto is not installed: run `bash tests/peers/setup.sh` (the README test command does)");
}

impl Mosquitto {
    /// Starts a broker with persistence in `dir` (so a restart keeps sessions and queued
    /// messages) on a free port.
    pub fn start(dir: &Path) -> Mosquitto {
        let port = flexgate_etcd::testing::spare_port();
        let conf = dir.join("mosquitto.conf");
        std::fs::create_dir_all(dir.join("data")).expect("broker data dir");
        // Started as root, mosquitto drops to the `mosquitto` user, which cannot write its
        // persistence into a root-owned temporary directory; `user root` keeps it as is.
        let user = if is_root() { "user root\n" } else { "" };
        std::fs::write(
            &conf,
            format!(
                "{user}listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\n\
                 autosave_interval 1\nmax_queued_messages 100000\nmax_inflight_messages 1000\nset_tcp_nodelay true\n\
                 log_dest file {}\n",
                dir.join("data").display(),
                dir.join("mosquitto.log").display()
            ),
        )
        .expect("broker config");
        let mut broker = Mosquitto {
            child: None,
            port,
            conf,
        };
        broker.launch();
        broker
    }

    fn launch(&mut self) {
        let child = Command::new(binary())
            .arg("-c")
            .arg(&self.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start mosquitto");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "mosquitto did not listen on {} within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `mqtt://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// Stops the broker gracefully (it writes its persistence file).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops and starts it again on the same port with the same persistence.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
