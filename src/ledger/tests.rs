use super::store::FORMAT;
use super::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn rec(kind: RecordKind, body: Value) -> NewRecord {
    NewRecord::new(kind, body)
}

async fn append_n(ledger: &Ledger, n: usize) -> Vec<Appended> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            ledger
                .append(rec(RecordKind::Measurement, json!({"i": i, "kw": 1.5})))
                .await
                .unwrap()
        }));
    }
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.unwrap());
    }
    out
}

/// Opens the raw sled store of a closed ledger (for tampering).
fn raw_records(dir: &Path) -> (sled::Db, sled::Tree) {
    let db = super::sled_config(dir).open().unwrap();
    let records = db.open_tree("records").unwrap();
    (db, records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_chain_of_1000_appends_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    let appended = append_n(&ledger, 1000).await;
    assert!(appended.iter().all(|a| !a.duplicate));
    let (seq, hash) = ledger.head();
    assert_eq!(seq, 1000);
    assert_eq!(ledger.len(), 1000);
    assert_eq!(
        ledger.verify().unwrap(),
        VerifyReport {
            records: 1000,
            head_hash: hash.clone()
        }
    );
    // records link up, and the stored form is the canonical form
    let mut prev = GENESIS_HASH.to_string();
    for (i, record) in ledger.iter_from(1).enumerate() {
        let record = record.unwrap();
        assert_eq!(record.seq, i as u64 + 1);
        assert_eq!(record.prev_hash, prev);
        prev = record.hash;
    }
    assert_eq!(prev, hash);
    ledger.close().await.unwrap();
    assert_eq!(
        verify(dir.path()).unwrap(),
        VerifyReport {
            records: 1000,
            head_hash: hash
        }
    );
}

#[tokio::test]
async fn ledger_hash_formula_is_the_documented_one() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    let a = ledger
        .append(rec(RecordKind::Startup, json!({"z": 1, "a": [true, null]})))
        .await
        .unwrap();
    let record = ledger.get(a.seq).unwrap().unwrap();
    let mut value = serde_json::to_value(&record).unwrap();
    value.as_object_mut().unwrap().remove("hash");
    let mut hasher = Sha256::new();
    hasher.update([0u8; 32]);
    hasher.update(canonical_json(&value).as_bytes());
    assert_eq!(hex::encode(hasher.finalize()), a.hash);
    assert_eq!(record.prev_hash, GENESIS_HASH);
    ledger.close().await.unwrap();
}

#[tokio::test]
async fn ledger_tampered_body_is_reported_at_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    for i in 0..10 {
        ledger
            .append(rec(RecordKind::Plan, json!({"cap_w": 300 + i})))
            .await
            .unwrap();
    }
    ledger.close().await.unwrap();
    {
        let (db, records) = raw_records(dir.path());
        let mut record: Record = serde_json::from_slice(&records.get(7u64.to_be_bytes()).unwrap().unwrap()).unwrap();
        record.body = json!({"cap_w": 9999});
        records
            .insert(7u64.to_be_bytes(), serde_json::to_vec(&record).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    let failure = verify(dir.path()).unwrap_err();
    assert_eq!(failure.seq, 7, "{failure}");
    assert!(failure.reason.contains("hash mismatch"), "{failure}");
    // The ledger still opens (only the last record is checked at open) and still appends.
    let ledger = Ledger::open(dir.path()).await.unwrap();
    assert_eq!(ledger.verify().unwrap_err().seq, 7);
    ledger.close().await.unwrap();
}

#[tokio::test]
async fn ledger_rehashed_tampering_is_caught_by_the_next_link() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    for i in 0..5 {
        ledger.append(rec(RecordKind::Plan, json!({"cap_w": i}))).await.unwrap();
    }
    ledger.close().await.unwrap();
    {
        // A forger who also recomputes the record's own hash breaks record 4's prev_hash.
        let (db, records) = raw_records(dir.path());
        let mut record: Record = serde_json::from_slice(&records.get(3u64.to_be_bytes()).unwrap().unwrap()).unwrap();
        record.body = json!({"cap_w": 42});
        let mut value = serde_json::to_value(&record).unwrap();
        value.as_object_mut().unwrap().remove("hash");
        record.hash = super::store::chain_hash(&record.prev_hash, &value).unwrap();
        let stored = canonical_json(&serde_json::to_value(&record).unwrap());
        records.insert(3u64.to_be_bytes(), stored.as_bytes()).unwrap();
        db.flush().unwrap();
    }
    let failure = verify(dir.path()).unwrap_err();
    assert_eq!(failure.seq, 4, "{failure}");
    assert!(failure.reason.contains("prev_hash"), "{failure}");
}

#[tokio::test]
async fn ledger_deleted_record_is_reported_as_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    for i in 0..10 {
        ledger
            .append(rec(RecordKind::Measurement, json!({"i": i})))
            .await
            .unwrap();
    }
    ledger.close().await.unwrap();
    {
        let (db, records) = raw_records(dir.path());
        records.remove(4u64.to_be_bytes()).unwrap();
        db.flush().unwrap();
    }
    let failure = verify(dir.path()).unwrap_err();
    assert_eq!(failure.seq, 4, "{failure}");
    assert!(failure.reason.contains("missing"), "{failure}");
}

#[tokio::test]
async fn ledger_corrupt_store_fails_cleanly_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    for i in 0..3 {
        ledger
            .append(rec(RecordKind::Measurement, json!({"i": i})))
            .await
            .unwrap();
    }
    ledger.close().await.unwrap();
    {
        let (db, records) = raw_records(dir.path());
        records.insert(3u64.to_be_bytes(), &b"{not json"[..]).unwrap();
        db.flush().unwrap();
    }
    let failure = verify(dir.path()).unwrap_err();
    assert_eq!(failure.seq, 3);
    assert!(failure.reason.contains("cannot decode"), "{failure}");
    let error = Ledger::open(dir.path()).await.unwrap_err();
    assert!(matches!(error, LedgerError::Corrupt { seq: 3, .. }), "{error}");
    assert!(error.to_string().contains("record 3 is corrupt"), "{error}");
    assert!(error.to_string().contains("move the directory aside"), "{error}");
    let mut out = Vec::new();
    assert!(matches!(
        export(dir.path(), ExportFormat::Jsonl, None, &mut out),
        Err(LedgerError::Corrupt { seq: 3, .. })
    ));
}

#[tokio::test]
async fn ledger_duplicate_returns_the_original_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    let first = ledger
        .append(
            rec(RecordKind::RawInput, json!({"raw": "a"}))
                .with_dedup_key("evt-1/0")
                .with_event("evt-1"),
        )
        .await
        .unwrap();
    ledger.append(rec(RecordKind::Ack, json!({}))).await.unwrap();
    let head = ledger.head();
    let again = ledger
        .append(rec(RecordKind::RawInput, json!({"raw": "different"})).with_dedup_key("evt-1/0"))
        .await
        .unwrap();
    assert_eq!(
        again,
        Appended {
            seq: first.seq,
            hash: first.hash.clone(),
            duplicate: true
        }
    );
    assert_eq!(ledger.head(), head);
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger.find_dedup("evt-1/0").unwrap(), Some(first.seq));
    assert_eq!(ledger.find_dedup("evt-2/0").unwrap(), None);
    assert_eq!(ledger.get(1).unwrap().unwrap().body, json!({"raw": "a"}));

    // Duplicates within one group commit: fire many at once.
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            ledger
                .append(rec(RecordKind::RawInput, json!({})).with_dedup_key("evt-9/1"))
                .await
                .unwrap()
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    assert_eq!(results.iter().filter(|a| !a.duplicate).count(), 1);
    assert!(results.iter().all(|a| a.seq == 3 && a.hash == results[0].hash));
    assert_eq!(ledger.len(), 3);
    ledger.close().await.unwrap();
    assert_eq!(verify(dir.path()).unwrap().records, 3);

    // And after a reopen.
    let ledger = Ledger::open(dir.path()).await.unwrap();
    let after = ledger
        .append(rec(RecordKind::RawInput, json!({})).with_dedup_key("evt-1/0"))
        .await
        .unwrap();
    assert_eq!(
        after,
        Appended {
            seq: first.seq,
            hash: first.hash,
            duplicate: true
        }
    );
    assert_eq!(ledger.len(), 3);
    ledger.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ledger_concurrent_appends_get_distinct_consecutive_seqs() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..50 {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..20 {
                let a = ledger
                    .append(rec(RecordKind::Dispatch, json!({"task": t, "i": i})).with_dedup_key(format!("{t}/{i}")))
                    .await
                    .unwrap();
                assert!(!a.duplicate);
                seqs.push(a.seq);
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let seqs = task.await.unwrap();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "one task's appends are ordered");
        all.extend(seqs);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=1000).collect::<Vec<u64>>());
    let report = ledger.verify().unwrap();
    assert_eq!(report.records, 1000);
    ledger.close().await.unwrap();
    assert_eq!(verify(dir.path()).unwrap(), report);
}

#[tokio::test]
async fn ledger_reopen_continues_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    assert_eq!(ledger.head(), (0, GENESIS_HASH.to_string()));
    assert!(ledger.is_empty());
    for i in 0..5 {
        ledger
            .append(rec(RecordKind::Startup, json!({"run": 1, "i": i})))
            .await
            .unwrap();
    }
    let head = ledger.head();
    ledger.close().await.unwrap();

    let ledger = Ledger::open(dir.path()).await.unwrap();
    assert_eq!(ledger.head(), head);
    let next = ledger
        .append(rec(RecordKind::Startup, json!({"run": 2})))
        .await
        .unwrap();
    assert_eq!(next.seq, 6);
    assert_eq!(ledger.get(6).unwrap().unwrap().prev_hash, head.1);
    assert_eq!(
        ledger.iter_from(4).map(|r| r.unwrap().seq).collect::<Vec<_>>(),
        vec![4, 5, 6]
    );
    assert!(ledger.get(7).unwrap().is_none());
    assert!(ledger.get(0).unwrap().is_none());
    ledger.close().await.unwrap();
    let report = verify(dir.path()).unwrap();
    assert_eq!(report.records, 6);
    assert_eq!(report.head_hash, next.hash);
}

#[tokio::test]
async fn ledger_second_open_is_locked_and_closed_handles_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    let clone = ledger.clone();
    let error = Ledger::open(dir.path()).await.unwrap_err();
    assert!(matches!(error, LedgerError::Locked { .. }), "{error}");
    assert!(error.to_string().contains("is a gateway running?"), "{error}");
    let failure = verify(dir.path()).unwrap_err();
    assert_eq!(failure.seq, 0);
    assert!(failure.reason.contains("locked"), "{failure}");

    ledger.close().await.unwrap();
    let error = clone.append(rec(RecordKind::Operator, json!({}))).await.unwrap_err();
    assert!(matches!(error, LedgerError::Closed), "{error}");
    drop(clone);
    // The lock is gone once the last handle is.
    let ledger = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || verify(&dir)
    })
    .await
    .unwrap();
    assert_eq!(ledger.unwrap().records, 0);
}

#[test]
fn ledger_verify_and_export_do_not_create_a_missing_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let failure = verify(&missing).unwrap_err();
    assert_eq!(failure.seq, 0);
    assert!(failure.reason.contains("no ledger"), "{failure}");
    assert!(!missing.exists());
    let mut out = Vec::new();
    assert!(matches!(
        export(&missing, ExportFormat::Csv, None, &mut out),
        Err(LedgerError::NotFound { .. })
    ));
}

#[tokio::test]
async fn ledger_export_jsonl_and_csv() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    ledger
        .append(
            rec(
                RecordKind::RawInput,
                json!({"text": "a, \"quoted\"\nsecond line", "z": 1, "a": 2}),
            )
            .with_event("e1"),
        )
        .await
        .unwrap();
    ledger
        .append(
            rec(RecordKind::Measurement, json!({"kw": 12.5}))
                .with_event("e2")
                .with_dedup_key("m,1"),
        )
        .await
        .unwrap();
    ledger
        .append(rec(RecordKind::EventState, json!({"state": "active"})).with_event("e1"))
        .await
        .unwrap();
    let mut live = Vec::new();
    assert_eq!(ledger.export(ExportFormat::Jsonl, None, &mut live).unwrap(), 3);
    ledger.close().await.unwrap();

    let mut jsonl = Vec::new();
    assert_eq!(export(dir.path(), ExportFormat::Jsonl, None, &mut jsonl).unwrap(), 3);
    assert_eq!(jsonl, live);
    let text = String::from_utf8(jsonl).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    for (i, line) in lines.iter().enumerate() {
        let value: Value = serde_json::from_str(line).unwrap();
        assert_eq!(canonical_json(&value), *line, "each line is canonical");
        let record: Record = serde_json::from_value(value).unwrap();
        assert_eq!(record.seq, i as u64 + 1);
    }
    assert!(lines[0].starts_with(r#"{"body":{"a":2,"text":"a, \"quoted\"\nsecond line","z":1},"dedup_key":null,"#));

    let mut filtered = Vec::new();
    assert_eq!(
        export(dir.path(), ExportFormat::Jsonl, Some("e1"), &mut filtered).unwrap(),
        2
    );
    let seqs: Vec<u64> = String::from_utf8(filtered)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Record>(l).unwrap().seq)
        .collect();
    assert_eq!(seqs, vec![1, 3]);

    let mut csv = Vec::new();
    assert_eq!(export(dir.path(), ExportFormat::Csv, None, &mut csv).unwrap(), 3);
    let csv = String::from_utf8(csv).unwrap();
    let rows = parse_csv(&csv);
    assert_eq!(rows.len(), 4);
    assert_eq!(
        rows[0],
        ["seq", "time", "kind", "event", "dedup_key", "hash", "prev_hash", "body"]
    );
    assert_eq!(rows[1][0], "1");
    assert_eq!(rows[1][2], "raw_input");
    assert_eq!(rows[1][3], "e1");
    assert_eq!(rows[1][4], "");
    assert_eq!(rows[1][6], GENESIS_HASH);
    assert_eq!(rows[1][7], r#"{"a":2,"text":"a, \"quoted\"\nsecond line","z":1}"#);
    assert_eq!(
        serde_json::from_str::<Value>(&rows[1][7]).unwrap()["text"],
        "a, \"quoted\"\nsecond line"
    );
    assert_eq!(rows[2][4], "m,1");
    assert_eq!(rows[2][5], rows[3][6], "hash of 2 is prev_hash of 3");
    assert!(chrono::DateTime::parse_from_rfc3339(&rows[2][1]).is_ok());

    let mut csv = Vec::new();
    assert_eq!(export(dir.path(), ExportFormat::Csv, Some("e2"), &mut csv).unwrap(), 1);
    assert_eq!(parse_csv(&String::from_utf8(csv).unwrap()).len(), 2);
}

/// A strict RFC 4180 reader for the test.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => {
                assert!(field.is_empty(), "quote inside an unquoted field");
                quoted = true;
            }
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(
        !quoted && field.is_empty() && row.is_empty(),
        "ends with a complete line"
    );
    rows
}

#[test]
fn ledger_csv_quoting() {
    use super::store::csv_field;
    assert_eq!(csv_field("plain"), "plain");
    assert_eq!(csv_field("a,b"), "\"a,b\"");
    assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
    assert_eq!(csv_field("cr\r"), "\"cr\r\"");
}

#[test]
fn ledger_canonical_json_sorts_nested_keys_and_is_stable() {
    let a = json!({"b": {"z": 1, "a": [{"y": null, "x": true}]}, "a": "s"});
    let mut b = serde_json::Map::new();
    b.insert("a".into(), json!("s"));
    b.insert("b".into(), json!({"a": [{"x": true, "y": null}], "z": 1}));
    let b = Value::Object(b);
    let expected = r#"{"a":"s","b":{"a":[{"x":true,"y":null}],"z":1}}"#;
    assert_eq!(canonical_json(&a), expected);
    assert_eq!(canonical_json(&b), expected);
    // Re-parsing the canonical form and canonicalising again changes nothing.
    let reparsed: Value = serde_json::from_str(expected).unwrap();
    assert_eq!(canonical_json(&reparsed), expected);
}

#[test]
fn ledger_canonical_json_matches_the_rfc_8785_example() {
    // RFC 8785 §3.2.2 / §3.2.3 sample input and output.
    // The numbers are Rust literals, so the test is about canonicalisation alone, whatever the
    // parser (the workspace's serde_json has `float_roundtrip`; without it 333333333.33333329
    // reads one ULP off).
    let input = r#"{
        "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
        "literals": [null, true, false]
    }"#;
    let mut value: Value = serde_json::from_str(input).unwrap();
    #[allow(clippy::excessive_precision)]
    let numbers = json!([333333333.33333329_f64, 1E30, 4.50, 2e-3, 0.000000000000000000000000001]);
    value.as_object_mut().unwrap().insert("numbers".into(), numbers);
    assert_eq!(
        canonical_json(&value),
        r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
    );
}

#[test]
fn ledger_canonical_json_sorts_by_utf16_code_units() {
    // RFC 8785 §3.2.3: "\u{1F600}" (surrogates D83D DE00) sorts before "\u{FB33}" in UTF-16,
    // although it is after it in code-point (and UTF-8 byte) order.
    let value = json!({
        "\u{20ac}": "Euro Sign",
        "\r": "Carriage Return",
        "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\u{1f600}": "Emoji: Grinning Face",
        "\u{80}": "Control",
        "\u{f6}": "Latin Small Letter O With Diaeresis"
    });
    let order: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(&canonical_json(&value))
        .unwrap()
        .values()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        order,
        [
            "Carriage Return",
            "One",
            "Control",
            "Latin Small Letter O With Diaeresis",
            "Euro Sign",
            "Emoji: Grinning Face",
            "Hebrew Letter Dalet With Dagesh"
        ]
    );
}

#[test]
fn ledger_canonical_json_numbers() {
    let cases: &[(Value, &str)] = &[
        (json!(0), "0"),
        (json!(-0.0), "0"),
        (json!(1.0), "1"),
        (json!(-1.5), "-1.5"),
        (json!(1e21), "1e+21"),
        (json!(1e20), "100000000000000000000"),
        (json!(123456789012.0), "123456789012"),
        (json!(0.000001), "0.000001"),
        (json!(0.0000001), "1e-7"),
        (json!(1.5e-7), "1.5e-7"),
        (json!(5e-324), "5e-324"),
        (json!(1.7976931348623157e308), "1.7976931348623157e+308"),
        (json!(0.1), "0.1"),
        (json!(u64::MAX), "18446744073709551615"), // exact: the documented deviation
        (json!(i64::MIN), "-9223372036854775808"),
    ];
    for (value, expected) in cases {
        assert_eq!(canonical_json(value), *expected, "{value:?}");
    }
    // Control characters and non-ASCII text.
    assert_eq!(
        canonical_json(&json!("\u{1}\u{1f}\u{7f}é\u{8}\u{c}")),
        "\"\\u0001\\u001f\u{7f}é\\b\\f\""
    );
}

#[test]
fn ledger_record_kinds_are_snake_case() {
    assert_eq!(serde_json::to_value(RecordKind::RawInput).unwrap(), json!("raw_input"));
    assert_eq!(
        serde_json::to_value(RecordKind::EventState).unwrap(),
        json!("event_state")
    );
    assert_eq!(
        serde_json::from_value::<RecordKind>(json!("checkpoint")).unwrap(),
        RecordKind::Checkpoint
    );
    assert_eq!(FORMAT, "flexgate-ledger/1");
}

/// Deterministic xorshift64 for test data.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[tokio::test]
async fn ledger_floats_that_serde_json_misreads_still_verify() {
    // serde_json without `float_roundtrip` reads "1429.1796795561945" back as ...943; about one
    // random double in five does not round-trip. The workspace enables the feature, but hashes
    // and exports must not depend on any parser's rounding: they use the stored bytes.
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let floats: Vec<f64> = (0..200)
        .map(|_| f64::from_bits((xorshift(&mut state) >> 2) | 0x3ff0_0000_0000_0000) * 1000.0)
        .collect();
    ledger
        .append(rec(RecordKind::Measurement, json!({"kw": 1429.1796795561945_f64})))
        .await
        .unwrap();
    for chunk in floats.chunks(10) {
        ledger
            .append(rec(RecordKind::Measurement, json!({"kw": chunk})))
            .await
            .unwrap();
    }
    assert_eq!(ledger.verify().unwrap().records, 21);
    let head = ledger.head();
    ledger.close().await.unwrap();
    assert_eq!(verify(dir.path()).unwrap().head_hash, head.1);
    let ledger = Ledger::open(dir.path()).await.unwrap(); // open checks the last record's hash
    ledger.close().await.unwrap();

    let mut jsonl = Vec::new();
    export(dir.path(), ExportFormat::Jsonl, None, &mut jsonl).unwrap();
    let jsonl = String::from_utf8(jsonl).unwrap();
    assert!(
        jsonl
            .lines()
            .next()
            .unwrap()
            .contains(r#""body":{"kw":1429.1796795561945}"#)
    );
    let mut csv = Vec::new();
    export(dir.path(), ExportFormat::Csv, None, &mut csv).unwrap();
    assert!(
        String::from_utf8(csv)
            .unwrap()
            .contains(r#""{""kw"":1429.1796795561945}""#)
    );
    // Every exported line hashes to its own hash with a plain re-implementation of the rule
    // (strip "hash", SHA-256 over prev hash bytes and the rest), as an outside auditor would.
    let mut prev = GENESIS_HASH.to_string();
    for line in jsonl.lines() {
        let record: Record = serde_json::from_str(line).unwrap();
        let marker = format!(r#","hash":"{}""#, record.hash);
        let unhashed = line.replacen(&marker, "", 1);
        let mut hasher = Sha256::new();
        hasher.update(hex::decode(&prev).unwrap());
        hasher.update(unhashed.as_bytes());
        assert_eq!(hex::encode(hasher.finalize()), record.hash);
        prev = record.hash;
    }
}

#[test]
fn ledger_raw_member_removal() {
    use super::raw::{member_text, object_members, without_member};
    let cases = [
        (
            r#"{"a":1,"hash":"h","z":[1,{"hash":2}]}"#,
            r#"{"a":1,"z":[1,{"hash":2}]}"#,
        ),
        (r#"{"hash":"h","z":"x,}\"y"}"#, r#"{"z":"x,}\"y"}"#),
        (r#"{"a":{"b":"}"},"hash":"h"}"#, r#"{"a":{"b":"}"}}"#),
        (r#"{"hash":"h"}"#, r#"{}"#),
        (r#" { "a" : 1 , "hash" : "h" } "#, r#" { "a" : 1 } "#),
    ];
    for (text, expected) in cases {
        let members = object_members(text).unwrap();
        assert_eq!(without_member(text, &members, "hash").unwrap(), expected, "{text}");
        assert_eq!(member_text(text, &members, "hash"), Some(r#""h""#));
    }
    assert!(object_members(r#"{"a":1,"a":2}"#).is_err());
    assert!(object_members(r#"[1]"#).is_err());
    assert!(object_members(r#"{"a":1} x"#).is_err());
    assert!(object_members(r#"{"a":"#).is_err());
    assert!(without_member("{}", &object_members("{}").unwrap(), "hash").is_none());
}

/// The ledger is evidence: other users of the machine may not read it (issue 15: it was 0644
/// while the token file was 0600). A ledger made before, with open modes, is narrowed at open.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_files_are_private_to_the_gateway_user() {
    use std::os::unix::fs::PermissionsExt;
    fn modes(dir: &Path, out: &mut Vec<(PathBuf, u32, bool)>) {
        let meta = std::fs::metadata(dir).unwrap();
        out.push((dir.to_path_buf(), meta.permissions().mode() & 0o777, true));
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                modes(&entry.path(), out);
            } else {
                let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
                out.push((entry.path(), mode, false));
            }
        }
    }
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data").join("ledger");
    let ledger = Ledger::open(&dir).await.unwrap();
    append_n(&ledger, 20).await;
    ledger.close().await.unwrap();
    // A ledger whose files were left world-readable (as sled made them before this fix).
    for (path, _, _) in {
        let mut all = Vec::new();
        modes(&dir, &mut all);
        all
    } {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let ledger = Ledger::open(&dir).await.unwrap();
    let mut all = Vec::new();
    modes(&dir, &mut all);
    assert!(all.iter().filter(|(_, _, is_dir)| !is_dir).count() >= 2, "{all:?}");
    for (path, mode, is_dir) in &all {
        let wanted = if *is_dir { 0o700 } else { 0o600 };
        assert_eq!(*mode, wanted, "{} has mode {mode:o}", path.display());
    }
    ledger.close().await.unwrap();
}

/// A quorum for the tests: keeps what it was handed, and fails as scripted.
#[derive(Clone, Default)]
struct FakeQuorum {
    epoch: u64,
    taken: Arc<Mutex<Vec<replica::StagedRecord>>>,
    /// The answer to give next (then `Ok` again).
    next_error: Arc<Mutex<Option<replica::QuorumError>>>,
}

impl replica::Quorum for FakeQuorum {
    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn commit(&mut self, after: (u64, &str), batch: &[replica::StagedRecord]) -> Result<(), replica::QuorumError> {
        if let Some(e) = self.next_error.lock().unwrap().take() {
            return Err(e);
        }
        let mut taken = self.taken.lock().unwrap();
        let (last_seq, last_hash) = taken
            .last()
            .map_or((0, GENESIS_HASH.to_string()), |r| (r.seq, r.hash.clone()));
        assert_eq!(
            (after.0, after.1),
            (last_seq, last_hash.as_str()),
            "batches continue the chain"
        );
        taken.extend(batch.iter().cloned());
        Ok(())
    }
}

#[tokio::test]
async fn a_leaders_batches_go_through_the_quorum_first_and_carry_its_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).await.unwrap();
    // Before leading, a single gateway's records have no epoch member at all.
    ledger
        .append(rec(RecordKind::Measurement, json!({"i": 0})))
        .await
        .unwrap();
    let quorum = FakeQuorum {
        epoch: 41,
        ..FakeQuorum::default()
    };
    // The quorum sees the whole chain from record 1 in this test: hand it the first one.
    quorum.taken.lock().unwrap().push(replica::StagedRecord {
        seq: 1,
        hash: ledger.head().1,
        text: String::new(),
    });
    ledger.lead(Box::new(quorum.clone())).await.unwrap();
    append_n(&ledger, 20).await;
    assert_eq!(ledger.len(), 21);
    assert_eq!(quorum.taken.lock().unwrap().len(), 21);
    let records: Vec<Record> = ledger.iter_from(1).map(Result::unwrap).collect();
    assert_eq!(records[0].epoch, None);
    assert!(records[1..].iter().all(|r| r.epoch == Some(41)));
    // What the quorum was handed is exactly what was stored, and the chain verifies.
    for (staged, record) in quorum.taken.lock().unwrap()[1..].iter().zip(&records[1..]) {
        assert_eq!(staged.hash, record.hash);
        assert!(staged.text.contains("\"epoch\":41"), "{}", staged.text);
    }
    ledger.verify().unwrap();

    // A batch the quorum cannot take is refused as retryable and leaves no trace; the next one
    // continues the chain without a gap.
    let head = ledger.head();
    *quorum.next_error.lock().unwrap() = Some(replica::QuorumError::NotDurable("no quorum".into()));
    let refused = ledger.append(rec(RecordKind::Measurement, json!({"i": "lost"}))).await;
    assert!(matches!(refused, Err(LedgerError::NotDurable { .. })), "{refused:?}");
    assert_eq!(ledger.head(), head);
    // Halted: everything is refused until the replica leads again (having rebuilt its state
    // from what is durable), and the mode says so.
    assert!(matches!(
        *ledger.writer_mode().borrow(),
        replica::WriterMode::Halted { .. }
    ));
    let refused = ledger
        .append(rec(RecordKind::Measurement, json!({"i": "on a dirty state"})))
        .await;
    assert!(matches!(refused, Err(LedgerError::NotDurable { .. })), "{refused:?}");
    assert_eq!(ledger.head(), head);
    ledger.lead(Box::new(quorum.clone())).await.unwrap();
    assert_eq!(
        *ledger.writer_mode().borrow(),
        replica::WriterMode::Leader { epoch: 41 }
    );
    let next = ledger
        .append(rec(RecordKind::Measurement, json!({"i": "next"})))
        .await
        .unwrap();
    assert_eq!(next.seq, head.0 + 1);

    // Deposed: refused, and from then on the writer follows.
    *quorum.next_error.lock().unwrap() = Some(replica::QuorumError::Deposed("epoch 42 leads".into()));
    for _ in 0..2 {
        let refused = ledger.append(rec(RecordKind::Measurement, json!({"i": "late"}))).await;
        assert!(matches!(refused, Err(LedgerError::NotLeader)), "{refused:?}");
    }
    assert_eq!(*ledger.writer_mode().borrow(), replica::WriterMode::Follower);
    ledger.verify().unwrap();
    ledger.close().await.unwrap();
}

#[tokio::test]
async fn a_follower_takes_in_the_leaders_records_and_refuses_any_that_do_not_continue_its_chain() {
    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let leader = Ledger::open(dir_a.path()).await.unwrap();
    let quorum = FakeQuorum {
        epoch: 7,
        ..FakeQuorum::default()
    };
    leader.lead(Box::new(quorum.clone())).await.unwrap();
    append_n(&leader, 10).await;
    let texts: Vec<String> = quorum.taken.lock().unwrap().iter().map(|r| r.text.clone()).collect();

    let follower = Ledger::open(dir_b.path()).await.unwrap();
    follower.follow().await.unwrap();
    assert!(matches!(
        follower.append(rec(RecordKind::Measurement, json!({}))).await,
        Err(LedgerError::NotLeader)
    ));
    assert_eq!(follower.replicate(texts[..6].to_vec()).await.unwrap(), 6);
    // A repeat (overlapping) is harmless.
    assert_eq!(follower.replicate(texts[4..].to_vec()).await.unwrap(), 10);
    assert_eq!(follower.head(), leader.head());
    follower.verify().unwrap();

    // Tampered, out of order, or from another chain: refused, nothing written.
    append_n(&leader, 2).await;
    let more: Vec<String> = quorum.taken.lock().unwrap()[10..]
        .iter()
        .map(|r| r.text.clone())
        .collect();
    let tampered = more[0].replace("\"i\":", "\"j\":");
    for bad in [vec![tampered], vec![more[1].clone()]] {
        let refused = follower.replicate(bad).await;
        assert!(matches!(refused, Err(LedgerError::Diverged { .. })), "{refused:?}");
        assert_eq!(follower.len(), 10);
    }
    let other = tempfile::tempdir().unwrap();
    let stranger = Ledger::open(other.path()).await.unwrap();
    let q2 = FakeQuorum {
        epoch: 7,
        ..FakeQuorum::default()
    };
    stranger.lead(Box::new(q2.clone())).await.unwrap();
    append_n(&stranger, 11).await;
    let foreign = q2.taken.lock().unwrap()[10].text.clone();
    assert!(matches!(
        follower.replicate(vec![foreign]).await,
        Err(LedgerError::Diverged { .. })
    ));
    assert_eq!(follower.replicate(more).await.unwrap(), 12);
    follower.verify().unwrap();
    // The leader itself is never handed replicated records.
    assert!(matches!(
        leader.replicate(Vec::new()).await,
        Err(LedgerError::Diverged { .. })
    ));
    for l in [leader, follower, stranger] {
        l.close().await.unwrap();
    }
}
