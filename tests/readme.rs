//! The README's shell examples, run as written: every ```sh block of README.md, command by
//! command, in a scratch directory that holds `deploy/` and `docs/` of this checkout (the
//! examples run from the repository root), with this build's `flexgate` and `flexgate-agent`
//! first on PATH. A command the test does not know fails it: a new example must be classified
//! here, run or skipped with the reason.
//!
//! What the test changes, and only this: `127.0.0.1:8080` and `mqtt://127.0.0.1:1883` become
//! the free ports of its own gateway and Mosquitto (`FLEXGATE_LISTEN` and
//! `FLEXGATE_AGENT_LISTEN` likewise, for the examples that name no address), and
//! `flexgate simulate` examples get `--workloads 3 --jobs 20` appended so the debug build runs
//! them in seconds (the full-size runs are BENCHMARKS.md's). Servers (`flexgate run`,
//! `flexgate-agent`) are checked to come up and serve, then stopped.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to do with one example.
enum How {
    /// Not run here, and why (where it is run instead).
    Skip(&'static str),
    /// Run it; it must exit with one of these codes, and its stdout contain this text.
    Run {
        codes: &'static [i32],
        stdout_has: &'static str,
    },
    /// A server: it must come up and answer; then it is stopped.
    Serve,
}

/// Where the scratch gateway must be for an example.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gateway {
    /// Running (`flexgate run` in the scratch directory, its generated token in
    /// `flexgate-data/api-token`).
    Running,
    /// Stopped (its data directory unlocked).
    Stopped,
}

fn classify(command: &str) -> (How, Gateway) {
    use Gateway::{Running, Stopped};
    let c = command.trim_start();
    let run = |codes, stdout_has| How::Run { codes, stdout_has };
    match c {
        _ if c.starts_with("cargo run --release -- demo") => (
            How::Skip("the suite's main job: tests/run.sh runs the demo itself (`cargo run -- demo`)"),
            Stopped,
        ),
        _ if c.starts_with("bash tests/run.sh") => (How::Skip("the suite itself, which runs this test"), Stopped),
        _ if c.starts_with("cargo install") => (
            How::Skip("installs into the system; the suite builds the same binaries"),
            Stopped,
        ),
        _ if c.starts_with("flexgate run --print-config") => (run(&[0], "[gateway]"), Stopped),
        _ if c.starts_with("flexgate run") => (How::Serve, Stopped),
        _ if c.starts_with("START=") => (run(&[0], "\"opt\":\"in\""), Running),
        _ if c.starts_with("flexgate log verify --gateway") => (run(&[0], "chain intact"), Running),
        _ if c.starts_with("flexgate forecast --gateway") => (run(&[0], "P10 kW"), Running),
        _ if c.starts_with("flexgate log verify --data") => (run(&[0], "chain intact"), Stopped),
        _ if c.starts_with("flexgate log migrate") => (
            How::Skip(
                "needs a schema-1 ledger: tests/ledger_migrate.rs runs this command on one built from \
                 tests/fixtures/ledger-schema1.jsonl",
            ),
            Stopped,
        ),
        _ if c.starts_with("flexgate log export") => (run(&[0], ""), Stopped),
        _ if c.starts_with("flexgate log site-key") => (run(&[0], ""), Stopped),
        _ if c.starts_with("flexgate settlement") => (run(&[0], ""), Stopped),
        _ if c.starts_with("flexgate meter import") => (run(&[0], "imported"), Stopped),
        _ if c.starts_with("flexgate meter check") => (run(&[0], "imported intervals compared"), Stopped),
        _ if c.starts_with("flexgate meter export") => (run(&[0], ""), Stopped),
        _ if c.starts_with("flexgate audit") => (run(&[0], "ev-2026-0142"), Stopped),
        // The zoo judges its own rows and exits 1 while one fails its acceptance (issue 14).
        _ if c.starts_with("flexgate simulate --zoo") => (run(&[0, 1], "knee"), Stopped),
        _ if c.starts_with("flexgate simulate") => (run(&[0], ""), Stopped),
        _ if c.starts_with("flexgate openadr decode") => (run(&[0], "\"format\""), Stopped),
        _ if c.starts_with("curl -s $VTN/events") => (run(&[0], "\"format\": \"oadr3\""), Stopped),
        _ if c.starts_with("openssl rand") => (run(&[0], ""), Stopped),
        _ if c.starts_with("flexgate-agent") => (How::Serve, Stopped),
        _ if c.starts_with("flexgate pfi") => (run(&[0], "PFI"), Stopped),
        _ if c.starts_with("flexgate profiles list") => (run(&[0], ""), Stopped),
        _ if c.starts_with("flexgate facility") => (run(&[0], ""), Stopped),
        _ if c.starts_with("flexgate predictor") => (run(&[0], ""), Stopped),
        _ if c.starts_with("flexgate openapi") => (run(&[0], "is the document the gateway serves"), Stopped),
        // Against the three-member etcd this test starts on the example's ports, before any
        // replica: nobody leads yet.
        _ if c.starts_with("flexgate ha status") => (run(&[0], "leader: none"), Stopped),
        other => panic!("README example not known to tests/readme.rs; classify it: {other}"),
    }
}

/// The README's shell examples, one command each (a block whose quotes span lines is one
/// command), in order.
fn examples() -> Vec<String> {
    let readme = include_str!("../README.md");
    let mut out = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in readme.lines() {
        match (&mut block, line.trim_start()) {
            (None, l) if l.starts_with("```sh") => block = Some(Vec::new()),
            (Some(lines), l) if l.starts_with("```") => {
                let joined = lines.join("\n");
                if joined.matches('\'').count() % 2 == 0 && lines.iter().any(|l| l.matches('\'').count() % 2 == 1) {
                    out.push(joined);
                } else {
                    out.extend(lines.iter().filter(|l| !l.trim().is_empty()).map(|l| (*l).to_string()));
                }
                block = None;
            }
            (Some(lines), _) => lines.push(line),
            (None, _) => {}
        }
    }
    out
}

fn free_addr() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], flexgate_etcd::testing::spare_port()))
}

/// The scratch directory the examples run in, and what they need around them.
struct Scratch {
    dir: tempfile::TempDir,
    path: String,
    gateway_addr: std::net::SocketAddr,
    mqtt_url: String,
    vtn: String,
}

impl Scratch {
    fn command(&self, script: &str) -> Command {
        let script = script
            .replace("127.0.0.1:8080", &self.gateway_addr.to_string())
            .replace("mqtt://127.0.0.1:1883", &self.mqtt_url);
        let script = if script.trim_start().starts_with("flexgate simulate") {
            // Before a trailing comment, if any.
            match script.split_once("  #") {
                Some((command, comment)) => format!("{command} --workloads 3 --jobs 20  #{comment}"),
                None => format!("{script} --workloads 3 --jobs 20"),
            }
        } else {
            script
        };
        let mut command = Command::new("bash");
        command
            .args(["-o", "pipefail", "-c", &script])
            .current_dir(self.dir.path())
            .env("PATH", &self.path)
            .env("FLEXGATE_LISTEN", self.gateway_addr.to_string())
            .env("FLEXGATE_AGENT_LISTEN", "127.0.0.1:0")
            .env("VTN", &self.vtn)
            .env("RUST_LOG", "warn")
            .env_remove("FLEXGATE_API_TOKEN")
            .env_remove("FLEXGATE_DATA")
            .env_remove("FLEXGATE_CONFIG");
        command
    }
}

/// A server started by an example, stopped on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_listening(addr: std::net::SocketAddr, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Serves one OpenADR 3 event list at `GET /events`, as a VTN would, for the `curl $VTN` example.
fn fake_vtn() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let event = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("adapters/openadr/tests/fixtures/oadr3/all_payload_types.json"),
    )
    .expect("fixture");
    let body = format!("[{event}]");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let _ = std::io::Read::read(&mut stream, &mut request);
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = std::io::Write::write_all(&mut stream, answer.as_bytes());
        }
    });
    format!("http://{addr}")
}

#[test]
fn every_readme_shell_example_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    for shared in ["deploy", "docs", "adapters"] {
        std::os::unix::fs::symlink(root.join(shared), dir.path().join(shared)).expect("symlink");
    }
    let gateway_bin = PathBuf::from(env!("CARGO_BIN_EXE_flexgate"));
    let agent_bin = common::agent::binary();
    let mut path = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect::<Vec<_>>();
    for bin in [&agent_bin, &gateway_bin] {
        path.insert(0, bin.parent().expect("a directory").to_path_buf());
    }
    let broker = dir.path().join("broker");
    std::fs::create_dir_all(&broker).expect("broker dir");
    let mosquitto = common::mosquitto::Mosquitto::start(&broker);
    // deploy/ha/example.toml's etcd cluster, for `flexgate ha status`.
    let _etcd = flexgate_etcd::testing::Cluster::start_on([(12379, 12380), (22379, 22380), (32379, 32380)]);
    let scratch = Scratch {
        path: std::env::join_paths(path).expect("PATH").to_string_lossy().into_owned(),
        gateway_addr: free_addr(),
        mqtt_url: mosquitto.url(),
        vtn: fake_vtn(),
        dir,
    };

    let examples = examples();
    assert!(examples.len() > 25, "{examples:#?}");
    let mut running: Option<Server> = None;
    let (mut ran, mut served, mut skipped) = (0, 0, Vec::new());
    for example in &examples {
        let (how, gateway) = classify(example);
        match (gateway, running.is_some()) {
            (Gateway::Running, false) => {
                let child = scratch
                    .command("flexgate run")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("flexgate run");
                let server = Server(child);
                wait_listening(scratch.gateway_addr, "the gateway");
                running = Some(server);
            }
            (Gateway::Stopped, true) => drop(running.take()),
            _ => {}
        }
        match how {
            How::Skip(why) => skipped.push((example.clone(), why)),
            How::Run { codes, stdout_has } => {
                let out = scratch.command(example).output().expect("bash runs");
                let stdout = String::from_utf8_lossy(&out.stdout);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    out.status.code().is_some_and(|c| codes.contains(&c)),
                    "README example: {example}\nexit {:?}, wanted one of {codes:?}\nstdout: {stdout}\nstderr: {stderr}",
                    out.status.code()
                );
                assert!(
                    stdout.contains(stdout_has),
                    "README example: {example}\nstdout lacks {stdout_has:?}: {stdout}\nstderr: {stderr}"
                );
                assert!(!stderr.contains("panicked"), "{example}: {stderr}");
                ran += 1;
            }
            How::Serve => {
                let is_agent = example.trim_start().starts_with("flexgate-agent");
                let mut child = scratch
                    .command(example)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("the server starts");
                if is_agent {
                    // The agent prints its address once it serves.
                    let stdout = child.stdout.take().expect("stdout");
                    let line = BufReader::new(stdout)
                        .lines()
                        .next()
                        .and_then(Result::ok)
                        .unwrap_or_default();
                    let server = Server(child);
                    let addr = line
                        .strip_prefix("flexgate-agent listening on http://")
                        .and_then(|a| a.trim().parse().ok())
                        .unwrap_or_else(|| panic!("{example}: the agent said {line:?}"));
                    wait_listening(addr, "the agent");
                    drop(server);
                } else {
                    let server = Server(child);
                    wait_listening(scratch.gateway_addr, example);
                    drop(server);
                    // The next gateway may bind the same port and open the same data directory.
                    std::thread::sleep(Duration::from_millis(300));
                }
                served += 1;
            }
        }
    }
    drop(running);
    // What ran left what the README says it does.
    assert!(
        std::fs::read_to_string(scratch.dir.path().join("ev.csv"))
            .expect("ev.csv")
            .contains("ev-2026-0142")
    );
    assert!(scratch.dir.path().join("ev.svg").exists());
    assert!(scratch.dir.path().join("site.json").exists());
    assert!(scratch.dir.path().join("agent.token").exists());
    // The imported Green Button and CSV data exported again: a header and every interval.
    let exported = std::fs::read_to_string(scratch.dir.path().join("may.csv")).expect("may.csv");
    assert_eq!(exported.lines().count(), 1 + 3 * 96 + 8, "{exported}");
    eprintln!(
        "README examples: {ran} run, {served} servers started and stopped, {} skipped:",
        skipped.len()
    );
    for (example, why) in &skipped {
        eprintln!("  skipped `{example}`: {why}");
    }
    assert!(skipped.len() <= 3, "{skipped:?}");
    drop(mosquitto);
}
