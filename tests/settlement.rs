//! A season's settlement end to end: 55 days of 15-minute interval data written as Green Button
//! by an independent tool (`adapters/greenbutton/tests/write_espi.py`, Python's standard
//! library) imported into a running gateway, an event of the `caiso-pdr` program submitted to
//! it, and the settlement (`GET /v1/settlement` on the running gateway, `flexgate settlement`
//! on its stopped directory) held against an independent Python computation of CAISO's
//! 10-in-10 on the same data (`tests/settlement_check.py`): the days, the adjustment, every
//! interval's baseline, the delivered reduction, the performance factor and the payment.
#![allow(clippy::disallowed_methods, reason = "the event is placed on the wall clock")]

mod common;

use std::path::Path;
use std::process::Command;

const TOKEN: &str = "settlement-test-token-0123456789";
const COMMITTED_KW: f64 = 100.0;
const PRICE: f64 = 120.0;

fn python(args: &[&str]) -> serde_json::Value {
    let out = Command::new("python3")
        .args(args)
        .output()
        .expect("python3 is installed (tests/peers/setup.sh needs it too)");
    assert!(
        out.status.success(),
        "python3 {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from the script")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seasons_settlement_equals_an_independent_computation_of_the_programs_method() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    // Data from 50 days ago to five days ahead (an event is only accepted ahead of its start, so
    // the data covers the event's window as a utility's file would once it has happened).
    let now = chrono::Utc::now();
    let today = now.date_naive().and_time(chrono::NaiveTime::MIN).and_utc();
    let first = today - chrono::Duration::days(50);
    let file = dir.path().join("utility.xml");
    let dump = dir.path().join("dump.json");
    let summary = python(&[
        root.join("adapters/greenbutton/tests/write_espi.py")
            .to_str()
            .expect("utf-8"),
        "--out",
        file.to_str().expect("utf-8"),
        "--days",
        "55",
        "--interval-minutes",
        "15",
        "--start",
        &first.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "--estimated-every",
        "1000000000",
        "--missing-every",
        "1000000000",
        "--dump",
    ]);
    std::fs::write(&dump, summary.to_string()).expect("dump");

    let config_file = dir.path().join("flexgate.toml");
    std::fs::write(
        &config_file,
        format!(
            "[gateway]\ndata_dir = \"{}\"\napi_token = \"{TOKEN}\"\n\n[site]\ntime_zone = \"America/Los_Angeles\"\n\n\
             [[settlement.programs]]\nname = \"caiso-pdr\"\nbaseline = {{ method = \"caiso_10in10\" }}\n\
             committed_kw = {COMMITTED_KW}\nprice_per_mwh = {PRICE}\ndefault = true\n",
            dir.path().join("data").display()
        ),
    )
    .expect("config");
    let config = flexgate::config::Config::load(Some(&config_file)).expect("the configuration loads");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = flexgate::serve::Server::start(config, flexgate::clock::Clock::real(), None, listener)
        .await
        .expect("gateway");
    let http = flexgate_openadr::http::client(None, std::time::Duration::from_secs(60)).expect("HTTP client");
    let base = format!("http://{}", server.addr);
    let imported = http
        .post(format!("{base}/v1/meter/import?format=green_button&source=utility"))
        .bearer_auth(TOKEN)
        .body(std::fs::read(&file).expect("file"))
        .send()
        .await
        .expect("POST");
    assert_eq!(imported.status(), 200, "{:?}", imported.text().await);

    // An event of the program at 14:00 in Los Angeles on the next weekday at least 30 minutes
    // ahead, for an hour (a weekday event: the 10-in-10 of weekdays).
    let start = {
        use chrono::{Datelike, TimeZone};
        let la = chrono_tz::America::Los_Angeles;
        let mut day = now.with_timezone(&la).date_naive();
        loop {
            let at = la
                .from_local_datetime(&day.and_hms_opt(14, 0, 0).expect("14:00"))
                .single()
                .expect("14:00 exists");
            let weekday = !matches!(day.weekday(), chrono::Weekday::Sat | chrono::Weekday::Sun);
            if weekday && at.with_timezone(&chrono::Utc) > now + chrono::Duration::minutes(30) {
                break at.with_timezone(&chrono::Utc);
            }
            day = day.succ_opt().expect("a next day");
        }
    };
    let end = start + chrono::Duration::hours(1);
    let event = serde_json::json!({
        "schema": "dr.event/1", "event_id": "ev-settle", "revision": 1, "site": "site-1",
        "program": "caiso-pdr",
        "target": {"form": "ceiling", "point": "meter", "kw": 10.0},
        "window": {"start": start.to_rfc3339(), "ramp_s": 0, "duration_s": 3600, "recovery_s": 0}
    });
    let acked = http
        .post(format!("{base}/v1/events"))
        .bearer_auth(TOKEN)
        .json(&event)
        .send()
        .await
        .expect("POST");
    assert_eq!(acked.status(), 200, "{:?}", acked.text().await);

    let period = format!(
        "from={}&to={}",
        today.format("%Y-%m-%d"),
        (today + chrono::Duration::days(5)).format("%Y-%m-%d")
    );
    let live: serde_json::Value = http
        .get(format!("{base}/v1/settlement?{period}"))
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    // The printable page: every figure names its method and what data it stands on.
    let page = http
        .get(format!("{base}/v1/settlement.html?{period}"))
        .send()
        .await
        .expect("GET");
    assert_eq!(page.status(), 200);
    let csp = page
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let html = page.text().await.expect("text");
    assert!(
        html.contains("ev-settle") && html.contains("caiso_10in10 v1") && html.contains("imported"),
        "{html}"
    );
    server.shutdown().await;

    // `flexgate` on the stopped gateway's directory; `settlement ARGS`: the period's settlement.
    let data_dir = dir.path().join("data");
    let from_day = today.format("%Y-%m-%d").to_string();
    let to_day = (today + chrono::Duration::days(5)).format("%Y-%m-%d").to_string();
    let run = |args: &[&std::ffi::OsStr]| {
        Command::new(env!("CARGO_BIN_EXE_flexgate"))
            .args(args)
            .env("FLEXGATE_CHROMIUM", common::chromium::chromium())
            .env_remove("FLEXGATE_DATA")
            .output()
            .expect("flexgate runs")
    };
    let settlement = |extra: &[&std::ffi::OsStr]| {
        let mut args: Vec<&std::ffi::OsStr> = ["settlement", "--data"].map(std::ffi::OsStr::new).to_vec();
        args.extend([data_dir.as_os_str(), "--config".as_ref(), config_file.as_os_str()]);
        args.extend(["--from", &from_day, "--to", &to_day].map(std::ffi::OsStr::new));
        args.extend(extra);
        run(&args)
    };

    // Offline, the same directory gives the same settlement.
    let out = settlement(&["--format".as_ref(), "json".as_ref()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let offline: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(offline["events"], live["events"], "the API and the CLI agree");

    // The report's ledger head is signed with the site's key: the running gateway's and the
    // offline command's are one key (the data directory's), which `log site-key` prints, and
    // `log verify --checkpoints` checks the report against the ledger and the key.
    let out = run(&[
        "log".as_ref(),
        "site-key".as_ref(),
        "--data".as_ref(),
        data_dir.as_os_str(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let site_key = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(site_key.len(), 64, "{site_key}");
    for report in [&live, &offline] {
        assert_eq!(report["ledger_head_signature"]["public_key"], site_key.as_str());
        assert_eq!(report["ledger_head_signature"]["seq"], report["ledger_head"][0]);
    }
    let report_file = dir.path().join("season.json");
    std::fs::write(&report_file, offline.to_string()).expect("report");
    let verify = |file: &Path| {
        run(&[
            "log".as_ref(),
            "verify".as_ref(),
            "--data".as_ref(),
            data_dir.as_os_str(),
            "--checkpoints".as_ref(),
            file.as_os_str(),
            "--site-key".as_ref(),
            site_key.as_ref(),
        ])
    };
    let out = verify(&report_file);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("signed by site key"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The head edited (to match a rewritten ledger): refused, naming why.
    let mut edited = offline.clone();
    edited["ledger_head"][1] = serde_json::json!("0".repeat(64));
    let edited_file = dir.path().join("edited.json");
    std::fs::write(&edited_file, edited.to_string()).expect("report");
    let out = verify(&edited_file);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("changed after it was signed"),
        "{said}"
    );

    let event = &offline["events"][0];
    assert_eq!(event["event_id"], "ev-settle", "{offline}");
    assert_eq!(event["settled_by"], "caiso-pdr");
    assert_eq!(event["method"], "caiso_10in10");
    assert_eq!(event["committed_from"], "program");
    let report = &event["baseline"]["Ok"];
    assert!(report.is_object(), "a baseline: {event}");

    let check = python(&[
        root.join("tests/settlement_check.py").to_str().expect("utf-8"),
        dump.to_str().expect("utf-8"),
        &start.timestamp().to_string(),
        &end.timestamp().to_string(),
        "America/Los_Angeles",
        &COMMITTED_KW.to_string(),
        &PRICE.to_string(),
    ]);
    // The same days, most recent first.
    let ours: Vec<&str> = report["days_used"]
        .as_array()
        .expect("days")
        .iter()
        .filter(|d| d["counted"] == true)
        .filter_map(|d| d["date"].as_str())
        .collect();
    let theirs: Vec<&str> = check["days_used"]
        .as_array()
        .expect("days")
        .iter()
        .filter_map(|d| d.as_str())
        .collect();
    assert_eq!(ours, theirs, "the baseline days");
    let ratio = report["adjustment"]["value"].as_f64().expect("an adjustment");
    assert!(
        close(ratio, check["ratio"].as_f64().expect("ratio")),
        "{ratio} vs {}",
        check["ratio"]
    );
    let intervals = report["intervals"].as_array().expect("intervals");
    assert_eq!(intervals.len(), 4, "an hour of 15-minute intervals");
    for (i, ours) in intervals.iter().enumerate() {
        let b = ours["baseline_kw"].as_f64().expect("baseline");
        let a = ours["adjusted_baseline_kw"].as_f64().expect("adjusted");
        assert!(
            close(b, check["baseline_kw"][i].as_f64().expect("theirs")),
            "interval {i}: {b} vs {}",
            check["baseline_kw"][i]
        );
        assert!(
            close(a, check["adjusted_kw"][i].as_f64().expect("theirs")),
            "interval {i}: {a} vs {}",
            check["adjusted_kw"][i]
        );
    }
    let perf = &event["performance"];
    for (ours, theirs) in [
        (perf["delivered_kw"].as_f64(), check["delivered_kw"].as_f64()),
        (
            perf["performance_factor"].as_f64(),
            check["performance_factor"].as_f64(),
        ),
        (event["payment"].as_f64(), check["payment"].as_f64()),
    ] {
        let (ours, theirs) = (ours.expect("ours"), theirs.expect("theirs"));
        assert!(close(ours, theirs), "{ours} vs {theirs}");
    }
    assert_eq!(event["data"]["imported"], 4);
    assert_eq!(event["data"]["measured"], 4);
    assert_eq!(event["warnings"], serde_json::json!([]), "nothing to warn of: {event}");

    // The page in a headless Chromium (a screenshot for a reviewer) and as PDF.
    let page_file = dir.path().join("season.html");
    let pdf_file = dir.path().join("season.pdf");
    for (format, file) in [("html", &page_file), ("pdf", &pdf_file)] {
        let out = settlement(&["--format".as_ref(), format.as_ref(), "-o".as_ref(), file.as_os_str()]);
        assert!(
            out.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let pdf = std::fs::read(&pdf_file).expect("the PDF");
    assert!(
        pdf.starts_with(b"%PDF-") && pdf.len() > 2_000,
        "a PDF of {} bytes",
        pdf.len()
    );
    let shots = root.join("target/dashboard-screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    let url = format!("file://{}", page_file.display());
    let loaded = common::chromium::load(&url, &dir.path().join("profile"));
    assert!(loaded.console.is_empty(), "{:?}", loaded.console);
    assert!(loaded.dom.contains("caiso_10in10 v1"), "the page shows the method");
    common::chromium::screenshot(&url, &dir.path().join("profile"), &shots.join("settlement.png"));
    eprintln!(
        "season report: {} and {} ({} bytes of PDF); screenshot in {}",
        page_file.display(),
        pdf_file.display(),
        pdf.len(),
        shots.join("settlement.png").display()
    );

    // The utility re-issues the event day's morning: the load in the adjustment window (4 h to
    // 1 h before the start) was a third lower. The settlement warns of pre-curtailment.
    let csv = dir.path().join("correction.csv");
    let mut rows = String::from("interval_end,interval_minutes,kw,quality\n");
    let mut t = start - chrono::Duration::hours(4) + chrono::Duration::minutes(15);
    while t <= start - chrono::Duration::hours(1) {
        rows.push_str(&format!("{},15,400.0,measured\n", t.to_rfc3339()));
        t += chrono::Duration::minutes(15);
    }
    std::fs::write(&csv, rows).expect("csv");
    let out = run(&[
        "meter".as_ref(),
        "import".as_ref(),
        csv.as_os_str(),
        "--data".as_ref(),
        data_dir.as_os_str(),
        "--source".as_ref(),
        "utility correction".as_ref(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = settlement(&["--format".as_ref(), "json".as_ref()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let corrected: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let warnings = corrected["events"][0]["warnings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .is_some_and(|w| w.contains("adjustment window") && w.contains("lowers its baseline"))),
        "{warnings:?}"
    );
    let factor = corrected["events"][0]["baseline"]["Ok"]["adjustment"]["value"]
        .as_f64()
        .expect("factor");
    assert!(
        factor < ratio,
        "the lowered morning lowers the adjustment: {ratio} → {factor}"
    );
    eprintln!(
        "settled {}: baseline days {theirs:?}, adjustment ×{ratio:.4}, delivered {:.2} kW, performance {:.1} %, payment {:.4}: equal to the independent computation",
        event["event_id"],
        perf["delivered_kw"].as_f64().unwrap_or(f64::NAN),
        perf["performance_factor"].as_f64().unwrap_or(f64::NAN) * 100.0,
        event["payment"].as_f64().unwrap_or(f64::NAN)
    );
}
