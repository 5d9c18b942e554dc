//! The ack of an event goes out only after the ledger's files are on stable storage
//! (issue 12, item 5), checked on the real binary with `strace`.
//!
//! sled's flush ends in `sync_file_range(2)`, which flushes neither the drive's write cache nor
//! file metadata. The ledger writer follows every flush with `fdatasync(2)` on sled's log file
//! (`src/ledger/durable.rs`). This test traces `flexgate run`, submits one event and checks, in
//! the trace, that after the event's request is read, its records are written to the log file
//! (`pwrite64` on a descriptor opened on `<data>/ledger/db`) and an `fdatasync` of that file
//! follows before the HTTP answer.
//!
//! `strace` comes from Debian's package; `tests/peers/setup.sh` installs it. The test fails,
//! never skips, without it.
#![allow(clippy::disallowed_methods, reason = "test events run on the wall clock")]

use flexgate::http_client::request;
use serde_json::json;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "durability-test-token";

fn free_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], flexgate_etcd::testing::spare_port()))
}

/// One traced system call: the thread, the call's name, its first argument and result.
#[derive(Debug)]
struct Call<'a> {
    line: &'a str,
    name: &'a str,
    first_arg: &'a str,
    result: Option<i64>,
}

/// strace splits a call that another thread interrupts into `name(args <unfinished ...>` and,
/// later, `<... name resumed>) = result` on the same pid. Joins each pair into one line, placed
/// where the call finished, so that an `openat` of the log file keeps its path and its fd, and
/// a sync counts as done only once it returned.
fn join_unfinished(text: &str) -> Vec<String> {
    let mut pending: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut lines = Vec::new();
    for line in text.lines() {
        let pid = line.split_whitespace().next().unwrap_or("");
        if let Some(start) = line.strip_suffix(" <unfinished ...>") {
            pending.insert(pid, start);
        } else if let Some((_, rest)) = line.split_once(" resumed>")
            && line.contains("<... ")
            && let Some(start) = pending.remove(pid)
        {
            lines.push(format!("{start}{rest}"));
        } else {
            lines.push(line.to_string());
        }
    }
    lines
}

#[test]
fn interrupted_calls_are_joined_with_their_results() {
    let text = "11435 21:05:11.228249 openat(AT_FDCWD, \"/d/ledger/db\", O_RDONLY|O_CLOEXEC <unfinished ...>\n\
                11430 21:05:11.228260 fdatasync(11) = 0\n\
                11435 21:05:11.228300 <... openat resumed>) = 13\n";
    let lines = join_unfinished(text);
    assert_eq!(lines.len(), 2);
    let open = parse(&lines[1]).expect("a call");
    assert_eq!((open.name, open.result), ("openat", Some(13)));
    assert!(open.line.contains("/d/ledger/db"));
}

fn parse(line: &str) -> Option<Call<'_>> {
    // "<pid> <hh:mm:ss.us> name(args...) = result" (strace pads the pid with spaces)
    let rest = line.trim_start();
    let (_thread, rest) = rest.split_once(' ')?;
    let (_time, rest) = rest.trim_start().split_once(' ')?;
    let open = rest.find('(')?;
    let name = &rest[..open];
    let args = &rest[open + 1..];
    let first_arg = args.split([',', ')']).next().unwrap_or("").trim();
    let result = rest
        .rsplit_once(" = ")
        .and_then(|(_, r)| r.split(' ').next()?.parse().ok());
    Some(Call {
        line,
        name,
        first_arg,
        result,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ack_is_sent_after_fdatasync_of_the_ledger_not_only_sync_file_range() {
    let strace = Command::new("strace").arg("-V").output();
    assert!(
        strace.is_ok_and(|o| o.status.success()),
        "strace is required (Debian package `strace`; tests/peers/setup.sh installs it)"
    );
    let dir = tempfile::tempdir().expect("dir");
    let trace = dir.path().join("trace.txt");
    let data = dir.path().join("data");
    let addr = free_port();
    let mut child = Command::new("strace")
        .args(["-f", "-tt", "-qq", "-s", "64", "-o"])
        .arg(&trace)
        .args([
            "-e",
            "trace=openat,read,recvfrom,pwrite64,pwritev,fdatasync,fsync,sync_file_range,write,writev,sendto,sendmsg",
        ])
        .arg(env!("CARGO_BIN_EXE_flexgate"))
        .args(["run", "--data"])
        .arg(&data)
        .args(["--listen", &addr.to_string()])
        .env("FLEXGATE_API_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace starts");

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = request(addr, "GET", "/healthz", None, None).await
            && r.status == 200
        {
            break;
        }
        assert!(Instant::now() < deadline, "the traced gateway did not become healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let start = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let body = json!({"schema": "dr.event/1", "event_id": "ev-durable", "revision": 1, "site": "site-1",
                      "target": {"form": "ceiling", "point": "meter", "kw": 120},
                      "window": {"start": start, "ramp_s": 0, "duration_s": 600, "recovery_s": 0}})
    .to_string();
    let answer = request(addr, "POST", "/v1/events", Some(TOKEN), Some(body.as_bytes()))
        .await
        .expect("POST");
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    // strace writes the trace as the calls return; stop the gateway cleanly and let strace end.
    let gateway_pid = std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat.split(' ').nth(3) == Some(&child.id().to_string()))
        })
        .expect("the gateway is strace's child");
    let _ = Command::new("kill").args(["-TERM", &gateway_pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    let text = std::fs::read_to_string(&trace).expect("trace");
    let lines = join_unfinished(&text);
    let calls: Vec<Call<'_>> = lines.iter().filter_map(|l| parse(l)).collect();
    let db_path = format!("{}\"", data.join("ledger").join("db").display());
    let db_fds: HashSet<String> = calls
        .iter()
        .filter(|c| c.name == "openat" && c.line.contains(&db_path))
        .filter_map(|c| c.result.filter(|fd| *fd >= 0).map(|fd| fd.to_string()))
        .collect();
    assert!(
        !db_fds.is_empty(),
        "the trace shows the ledger's log file ({db_path}) opened:\n{}",
        calls
            .iter()
            .filter(|c| c.name == "openat" && c.line.contains("ledger"))
            .map(|c| c.line)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let request = calls
        .iter()
        .position(|c| matches!(c.name, "read" | "recvfrom") && c.line.contains("POST /v1/events"))
        .expect("the trace shows the request being read");
    let answered = calls[request..]
        .iter()
        .position(|c| matches!(c.name, "write" | "writev" | "sendto" | "sendmsg") && c.line.contains("HTTP/1.1 200"))
        .map(|i| i + request)
        .expect("the trace shows the HTTP answer to the event");
    // Between reading the request and writing the answer: the event's records are written to
    // the log file, and an fdatasync of the log follows that write before the answer. (sled's
    // own background flusher calls sync_file_range on its own schedule, from other threads, so
    // the order is checked on the writes and the fdatasync, not on sync_file_range.)
    let is_log_sync =
        |c: &Call<'_>| matches!(c.name, "fdatasync" | "fsync") && db_fds.contains(c.first_arg) && c.result == Some(0);
    let first_write = calls[request..answered]
        .iter()
        .position(|c| matches!(c.name, "pwrite64" | "pwritev") && db_fds.contains(c.first_arg))
        .map(|i| i + request)
        .expect("the event's records are written to the log file before the answer");
    let synced = calls[first_write..answered].iter().any(is_log_sync);
    assert!(
        synced,
        "no fdatasync of the ledger's log file (fds {db_fds:?}) between the write of the event's records and \
         the ack:\n{}",
        calls[first_write..=answered]
            .iter()
            .map(|c| c.line)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
