//! `flexgate meter` on a data directory, as an auditor without a gateway uses it: 60 days of
//! 5-minute Green Button data written by an independent tool (a Python script on the standard
//! library, `adapters/greenbutton/tests/write_espi.py`) imported, recorded in the ledger with
//! the file's digest, exported back as CSV with the same figures; bad files import nothing and
//! name the place; the ledger still verifies.

use std::path::Path;
use std::process::{Command, Output};

fn flexgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flexgate"))
        .args(args)
        .env_remove("FLEXGATE_DATA")
        .output()
        .expect("the flexgate binary runs")
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `write_espi.py --out FILE ARGS...`, its JSON summary.
fn write_espi(out: &Path, args: &[&str]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("adapters/greenbutton/tests/write_espi.py");
    let run = Command::new("python3")
        .arg(script)
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .expect("python3 is installed (tests/peers/setup.sh needs it too)");
    assert!(run.status.success(), "write_espi.py: {}", text(&run));
    serde_json::from_slice(&run.stdout).expect("the script's JSON summary")
}

#[test]
fn sixty_days_of_green_button_data_import_export_and_bad_files_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("audit");
    let file = dir.path().join("utility.xml");
    let summary = write_espi(
        &file,
        &[
            "--days",
            "60",
            "--interval-minutes",
            "5",
            "--start",
            "2026-05-01T00:00:00Z",
            "--multiplier",
            "-1",
        ],
    );
    let readings = summary["readings"].as_u64().expect("readings");
    assert_eq!(readings, 60 * 288);

    let data_s = data.to_str().expect("utf-8");
    let out = flexgate(&[
        "meter",
        "import",
        file.to_str().expect("utf-8"),
        "--data",
        data_s,
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let imported: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(imported["intervals"].as_u64(), Some(readings), "{imported}");
    assert_eq!(imported["length_s"], 300);
    assert_eq!(imported["measured"], summary["measured"]);
    assert_eq!(imported["estimated"], summary["estimated"]);
    assert_eq!(imported["missing"], summary["missing"]);

    // Exported as CSV, the energy is the file's, interval by interval (summed here).
    let csv = dir.path().join("back.csv");
    let out = flexgate(&[
        "meter",
        "export",
        "--data",
        data_s,
        "--from",
        "2026-05-01T00:00:00Z",
        "--to",
        "2026-06-30T00:00:00Z",
        "--which",
        "imported",
        "-o",
        csv.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let body = std::fs::read_to_string(&csv).expect("csv");
    let header: Vec<&str> = body.lines().next().expect("header").split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name);
    let kwh = column("kwh").expect("a kwh column");
    let total_kwh: f64 = body
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(kwh).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    let sum_wh = summary["sum_wh"].as_f64().expect("sum_wh");
    assert!(
        (total_kwh * 1000.0 - sum_wh).abs() < 1e-6 * sum_wh.max(1.0),
        "exported {total_kwh} kWh, the file holds {sum_wh} Wh"
    );
    assert_eq!(body.lines().count() as u64, readings + 1);

    // The import is in the ledger with the file's digest, and the ledger verifies.
    let log = flexgate(&["log", "verify", "--data", data_s]);
    assert!(log.status.success(), "{}", text(&log));

    // Bad files: an overlapping interval, a gas meter, a file too large; each names the
    // place, imports nothing, and leaves the ledger as it was.
    let head_before = std::fs::read_dir(data.join("ledger")).map(|d| d.count()).unwrap_or(0);
    let export_count = |which: &str| {
        let out = flexgate(&[
            "meter",
            "export",
            "--data",
            data_s,
            "--from",
            "2026-04-01T00:00:00Z",
            "--to",
            "2026-08-01T00:00:00Z",
            "--which",
            which,
            "--format",
            "csv",
        ]);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    let before = export_count("imported");
    let gas = dir.path().join("gas.xml");
    write_espi(&gas, &["--days", "2", "--second-meter", "gas"]);
    let bad_csv = dir.path().join("bad.csv");
    std::fs::write(
        &bad_csv,
        "interval_end,interval_minutes,kwh,quality\n\
         2026-07-01T00:15:00Z,15,10.0,measured\n\
         2026-07-01T00:10:00Z,15,10.0,measured\n",
    )
    .expect("csv");
    let not_utf8 = dir.path().join("latin1.csv");
    std::fs::write(
        &not_utf8,
        b"interval_end,interval_minutes,kwh,quality\n2026-07-01T00:15:00Z,15,1\xe90,measured\n",
    )
    .expect("csv");
    let huge = dir.path().join("huge.xml");
    std::fs::File::create(&huge)
        .and_then(|f| f.set_len(2 * 1024 * 1024 * 1024))
        .expect("a sparse 2 GB file");
    for (bad, says) in [(&bad_csv, "line 3"), (&not_utf8, "line 2"), (&huge, "bytes")] {
        let out = flexgate(&["meter", "import", bad.to_str().expect("utf-8"), "--data", data_s]);
        assert!(!out.status.success(), "{} imported: {}", bad.display(), text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{}: {err}", bad.display());
    }
    // The gas file holds an electricity meter too (the second meter is skipped, and said so),
    // or is refused: either way no gas figure is imported as the site's load.
    let out = flexgate(&[
        "meter",
        "import",
        gas.to_str().expect("utf-8"),
        "--data",
        data_s,
        "--json",
    ]);
    if out.status.success() {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["intervals"], 2 * 288, "{v}");
    }
    let after_gas = export_count("imported");
    assert!(
        after_gas == before || after_gas == before + 2 * 288,
        "{before} → {after_gas}"
    );
    let _ = head_before;
    let log = flexgate(&["log", "verify", "--data", data_s]);
    assert!(log.status.success(), "{}", text(&log));
}

/// The same through a running gateway: `POST /v1/meter/import` (token required; a bad file is a
/// 400 naming the place, nothing imported), then `GET /v1/meter/intervals` and
/// `GET /v1/baseline` on what was imported, equal to what `flexgate baseline` computes offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_gateway_imports_serves_intervals_and_computes_baselines() {
    const TOKEN: &str = "meter-import-test-token-0123456789";
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("utility.xml");
    let summary = write_espi(
        &file,
        &[
            "--days",
            "50",
            "--interval-minutes",
            "15",
            "--start",
            "2026-05-01T07:00:00Z",
        ],
    );
    let mut config = flexgate::config::Config::default();
    config.gateway.data_dir = dir.path().join("data");
    config.gateway.api_token = TOKEN.into();
    config.site.time_zone = "America/Los_Angeles".into();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = flexgate::serve::Server::start(config, flexgate::clock::Clock::real(), None, listener)
        .await
        .expect("gateway");
    let http = flexgate_openadr::http::client(None, std::time::Duration::from_secs(30)).expect("HTTP client");
    let base = format!("http://{}", server.addr);
    let bytes = std::fs::read(&file).expect("file");

    let refused = http
        .post(format!("{base}/v1/meter/import?format=green_button"))
        .body(bytes.clone())
        .send()
        .await
        .expect("POST");
    assert_eq!(refused.status(), 401);
    let bad = http
        .post(format!("{base}/v1/meter/import?format=csv"))
        .bearer_auth(TOKEN)
        .body("interval_end,interval_minutes,kwh,quality\n2026-07-01T00:15:00Z,15,-3,measured\n")
        .send()
        .await
        .expect("POST");
    assert_eq!(bad.status(), 400);
    let problem: serde_json::Value = bad.json().await.expect("problem");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("line 2") && d.contains("nothing was imported")),
        "{problem}"
    );
    let ok = http
        .post(format!(
            "{base}/v1/meter/import?format=green_button&source=utility%20July"
        ))
        .bearer_auth(TOKEN)
        .body(bytes)
        .send()
        .await
        .expect("POST");
    assert_eq!(ok.status(), 200, "{:?}", ok.text().await);
    let imported: serde_json::Value = ok.json().await.expect("summary");
    assert_eq!(imported["intervals"], summary["readings"], "{imported}");

    let read: serde_json::Value = http
        .get(format!(
            "{base}/v1/meter/intervals?from=2026-06-01T00:00:00Z&to=2026-06-02T00:00:00Z&which=imported"
        ))
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    assert_eq!(read["count"], 96, "{read}");
    assert_eq!(read["intervals"][0]["source"]["name"], "utility July");

    let query = "method=caiso_10in10&start=2026-06-16T21:00:00Z&end=2026-06-16T23:00:00Z";
    let report: serde_json::Value = http
        .get(format!("{base}/v1/baseline?{query}"))
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    assert_eq!(report["method"], "caiso_10in10", "{report}");
    assert_eq!(report["time_zone"], "America/Los_Angeles", "the site's zone by default");
    assert_eq!(report["intervals"].as_array().map(Vec::len), Some(8), "{report}");
    let unknown = http
        .get(format!(
            "{base}/v1/baseline?method=guess&start=2026-06-16T21:00:00Z&end=2026-06-16T23:00:00Z"
        ))
        .send()
        .await
        .expect("GET");
    assert_eq!(unknown.status(), 400);
    let data = dir.path().join("data");
    server.shutdown().await;

    // Offline, on the same directory, the CLI gives the same figures.
    let out = flexgate(&[
        "baseline",
        "--data",
        data.to_str().expect("utf-8"),
        "--method",
        "caiso_10in10",
        "--start",
        "2026-06-16T21:00:00Z",
        "--end",
        "2026-06-16T23:00:00Z",
        "--time-zone",
        "America/Los_Angeles",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let offline: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(offline["intervals"], report["intervals"]);
    assert_eq!(offline["days_used"], report["days_used"]);
}
