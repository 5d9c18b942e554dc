//! `flexgate forecast` against a running gateway (the simulated cluster): the table, and the
//! day-ahead declaration, which agrees with `GET /v1/forecast` hour by hour.

mod common;

use common::hours::{least_p10_by_clock_hour, rfc3339};
use std::process::Command;

const TOKEN: &str = "forecast-test-token-0123456789";

fn flexgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flexgate"))
        .args(args)
        .env_remove("FLEXGATE_LISTEN")
        .output()
        .expect("flexgate runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_declaration_agrees_with_the_gateways_forecast() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config_file = dir.path().join("flexgate.toml");
    std::fs::write(
        &config_file,
        format!(
            "[gateway]\ndata_dir = \"{}\"\napi_token = \"{TOKEN}\"\n",
            dir.path().join("data").display()
        ),
    )
    .expect("config");
    let config = flexgate::config::Config::load(Some(&config_file)).expect("the configuration loads");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = flexgate::serve::Server::start(config, flexgate::clock::Clock::real(), None, listener)
        .await
        .expect("gateway");
    let addr = server.addr.to_string();
    // The first telemetry pass makes the curve and the forecast.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = flexgate::http_client::request(server.addr, "GET", "/v1/forecast", None, None)
            .await
            .expect("GET");
        if r.status == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no forecast: {}", r.text());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let run = |args: Vec<&'static str>| {
        let addr = addr.clone();
        tokio::task::spawn_blocking(move || {
            let mut all = vec!["forecast", "--gateway", addr.as_str()];
            all.extend(args);
            flexgate(&all)
        })
    };
    let table = run(vec![]).await.expect("ran");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{}", String::from_utf8_lossy(&table.stderr));
    assert!(
        text.contains("| hour (UTC) | P10 kW | P50 kW | P90 kW |") && text.contains("queue"),
        "{text}"
    );
    // Clock hours: 48, or 49 when the forecast does not start on the hour.
    let rows = text.lines().filter(|l| l.starts_with("| 20")).count();
    assert!(rows == 48 || rows == 49, "{text}");
    // The declaration at 90 % is each hour's least P10 of the same forecast.
    let mut agreed = false;
    for _ in 0..3 {
        let doc = run(vec!["--format", "json"]).await.expect("ran");
        let declared = run(vec!["--declare", "--format", "json"]).await.expect("ran");
        assert!(
            declared.status.success(),
            "{}",
            String::from_utf8_lossy(&declared.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&doc.stdout).expect("JSON");
        let declared: serde_json::Value = serde_json::from_slice(&declared.stdout).expect("JSON");
        if doc["generated_at"] != declared["forecast_generated_at"] {
            continue; // refreshed in between: ask again
        }
        assert_eq!(declared["schema"], "flexgate.declaration/1");
        assert_eq!(declared["confidence"], 0.9);
        let oracle = least_p10_by_clock_hour(&doc);
        let hours = declared["hours"].as_array().expect("hours");
        assert_eq!(hours.len(), oracle.len());
        for (hour, (start, least)) in hours.iter().zip(&oracle) {
            assert_eq!(hour["start"], rfc3339(*start), "on the clock hour");
            let kw = hour["available_kw"].as_f64().expect("kW");
            assert!((kw - least / 1000.0).abs() < 1e-9, "hour {start}: {kw} vs {least} W");
        }
        agreed = true;
        break;
    }
    assert!(agreed, "the forecast kept changing between the two reads");
    let csv = run(vec!["--declare", "--confidence", "50", "--format", "csv"])
        .await
        .expect("ran");
    let csv = String::from_utf8_lossy(&csv.stdout);
    assert!(
        csv.starts_with("hour_start,hour_end,available_kw,confidence,cost_ceiling,objective\n"),
        "{csv}"
    );
    assert!(csv.lines().count() == 49 || csv.lines().count() == 50, "{csv}");
    assert!(
        csv.lines().nth(1).is_some_and(|l| l.contains(",0.50,0.1,progress")),
        "{csv}"
    );
    // Recorded on the gateway, with an operator's figure and reason for the first hour.
    let doc: serde_json::Value =
        serde_json::from_slice(&run(vec!["--format", "json"]).await.expect("ran").stdout).expect("JSON");
    let first = rfc3339(least_p10_by_clock_hour(&doc)[0].0);
    let record = |args: Vec<String>, token: Option<&'static str>| {
        let addr = addr.clone();
        tokio::task::spawn_blocking(move || {
            let mut command = Command::new(env!("CARGO_BIN_EXE_flexgate"));
            command
                .args([
                    "forecast",
                    "--gateway",
                    addr.as_str(),
                    "--declare",
                    "--record",
                    "--operator",
                    "ana",
                ])
                .args(args)
                .env_remove("FLEXGATE_LISTEN")
                .env_remove("FLEXGATE_API_TOKEN");
            if let Some(t) = token {
                command.env("FLEXGATE_API_TOKEN", t);
            }
            command.output().expect("flexgate runs")
        })
    };
    let no_token = record(Vec::new(), None).await.expect("ran");
    assert!(!no_token.status.success());
    assert!(String::from_utf8_lossy(&no_token.stderr).contains("FLEXGATE_API_TOKEN"));
    let no_reason = record(vec!["--override".into(), format!("{first}=2.5")], Some(TOKEN))
        .await
        .expect("ran");
    assert!(!no_reason.status.success());
    assert!(String::from_utf8_lossy(&no_reason.stderr).contains("no reason given"));
    let recorded = record(
        vec![
            "--override".into(),
            format!("{first}=2.5:chiller maintenance"),
            "--format".into(),
            "csv".into(),
        ],
        Some(TOKEN),
    )
    .await
    .expect("ran");
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    let csv = String::from_utf8_lossy(&recorded.stdout);
    assert!(
        csv.starts_with("hour_start,hour_end,available_kw,forecast_kw,from,reason\n"),
        "{csv}"
    );
    assert!(
        csv.lines()
            .nth(1)
            .is_some_and(|l| l.contains(",2.500,") && l.contains(",operator,\"chiller maintenance\"")),
        "{csv}"
    );
    assert!(csv.lines().count() == 49 || csv.lines().count() == 50, "{csv}");
    let in_force = flexgate::http_client::request(server.addr, "GET", "/v1/declarations", None, None)
        .await
        .expect("GET")
        .json()
        .expect("JSON");
    assert_eq!(in_force["hours"][0]["available_w"], 2500.0, "{in_force}");
    assert_eq!(in_force["hours"][0]["operator"], "ana");
    // Without a gateway, a clear error.
    let none = flexgate(&["forecast", "--gateway", "127.0.0.1:9"]);
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("cannot reach the gateway"));
    server.shutdown().await;
}
