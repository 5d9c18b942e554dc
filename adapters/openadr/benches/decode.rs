//! OpenADR 2.0b and 3 decode benchmarks.
//!
//! ## 2.0b
//!
//! Inputs are `benches/inputs/distribute_{1,10,50}.xml`: one oadrDistributeEvent each, with 1, 10
//! and 50 events, written by openleadr 0.5.36 itself (`make_bench_inputs.py`), so the bytes are
//! what openleadr's VTN sends: each event has one LOAD_DISPATCH setpoint signal with 4 intervals,
//! a powerReal kW itemBase, a venID and a groupID target, and a market context.
//!
//! - `oadr2b_decode/<file>`: `decode` (XML to `Message`).
//! - `oadr2b_decode_json/<file>`: `decode` then `normalized_json` (the JSON view).
//!
//! ## 3
//!
//! Input: `benches/inputs/events_200.json`, a `GET /events` answer of 200 events in the form
//! openleadr-rs 0.1 writes them (`make_oadr3_inputs.py`). One group, `oadr3_decode`, so the
//! reference is measured in the same run on the same bytes:
//!
//! - `decode_events`: [`oadr3::decode_events`], what the client runs on a `GET /events` page (size,
//!   depth, list-length, number-range and duplicate-key checks, field-path errors, timestamps and
//!   durations parsed, unknown fields kept);
//! - `decode_any`: [`oadr3::decode_any`], the same plus recognising the kind of document;
//! - `openleadr_wire`: `serde_json::from_str::<Vec<openleadr_wire::Event>>`, openleadr-rs's own
//!   wire types (its VTN and VEN decode this way). It is given a `&str` prepared outside the
//!   timed loop, so it skips the UTF-8 check the other two do on their bytes.
//!
//! Before timing, both decoders must accept the file and agree on every event's id, program,
//! interval ids and values, so the comparison is of equal work on valid input.
//!
//! Throughput is in input bytes. `compare.sh` runs these and openleadr's `parse_message` on the
//! same files and prints the medians and ratios of both versions. CI smoke: `cargo bench -p
//! flexgate-openadr --bench decode -- --test` runs each benchmark once.
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flexgate_openadr::oadr2b::{Message, decode, normalized_json};
use flexgate_openadr::oadr3;
use std::hint::black_box;

const OADR3_INPUT: (&str, usize) = ("events_200.json", 200);

const INPUTS: [(&str, usize); 3] = [
    ("distribute_1.xml", 1),
    ("distribute_10.xml", 10),
    ("distribute_50.xml", 50),
];

fn load(name: &str, events: usize) -> Vec<u8> {
    let path = format!("{}/benches/inputs/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e} (run make_bench_inputs.py)"));
    // Check once, outside the timed loop, that the input decodes to what it should.
    match decode(&bytes) {
        Ok(Message::DistributeEvent(d)) => assert_eq!(d.events.len(), events, "{path}: event count"),
        Ok(other) => panic!("{path}: expected oadrDistributeEvent, got {}", other.name()),
        Err(e) => panic!("{path}: {e}"),
    }
    bytes
}

fn bench_decode(c: &mut Criterion) {
    let inputs: Vec<(&str, Vec<u8>)> = INPUTS.iter().map(|&(name, n)| (name, load(name, n))).collect();

    let mut group = c.benchmark_group("oadr2b_decode");
    for (name, bytes) in &inputs {
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), bytes, |b, bytes| {
            b.iter(|| decode(black_box(bytes)))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("oadr2b_decode_json");
    for (name, bytes) in &inputs {
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), bytes, |b, bytes| {
            b.iter(|| decode(black_box(bytes)).map(|m| normalized_json(&m)))
        });
    }
    group.finish();
}

/// Reads the OpenADR 3 input and checks that both decoders accept it and read the same events.
fn load_oadr3() -> String {
    let (name, count) = OADR3_INPUT;
    let path = format!("{}/benches/inputs/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (run make_oadr3_inputs.py)"));
    let ours =
        oadr3::decode_events(text.as_bytes(), &oadr3::Limits::default()).unwrap_or_else(|e| panic!("{path}: {e}"));
    let theirs: Vec<openleadr_wire::Event> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: openleadr-wire: {e}"));
    assert_eq!((ours.len(), theirs.len()), (count, count), "{path}: event count");
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a.id.as_deref(), Some(b.id.as_str()), "{path}: id");
        assert_eq!(a.program_id, b.content.program_id.as_str(), "{path}: programID");
        assert_eq!(a.intervals.len(), b.content.intervals.len(), "{path}: intervals");
        for (ia, ib) in a.intervals.iter().zip(&b.content.intervals) {
            assert_eq!(ia.id, i64::from(ib.id), "{path}: interval id");
            let va: Vec<Option<f64>> = ia
                .payloads
                .iter()
                .flat_map(|p| p.values.iter().map(|v| v.as_f64()))
                .collect();
            let vb: Vec<Option<f64>> = ib
                .payloads
                .iter()
                .flat_map(|p| p.values.iter())
                .map(|v| match v {
                    openleadr_wire::values_map::Value::Number(f) => Some(*f),
                    openleadr_wire::values_map::Value::Integer(i) => Some(*i as f64),
                    _ => None,
                })
                .collect();
            assert_eq!(va, vb, "{path}: values of {:?}", a.id);
        }
    }
    assert!(matches!(oadr3::decode_any(text.as_bytes()), Ok(oadr3::Document::Events(es)) if es == ours));
    text
}

fn bench_oadr3(c: &mut Criterion) {
    let text = load_oadr3();
    let mut group = c.benchmark_group("oadr3_decode");
    group.throughput(Throughput::Bytes(text.len() as u64));
    let limits = oadr3::Limits::default();
    group.bench_function("decode_events", |b| {
        b.iter(|| oadr3::decode_events(black_box(text.as_bytes()), &limits))
    });
    group.bench_function("decode_any", |b| {
        b.iter(|| oadr3::decode_any(black_box(text.as_bytes())))
    });
    group.bench_function("openleadr_wire", |b| {
        b.iter(|| serde_json::from_str::<Vec<openleadr_wire::Event>>(black_box(&text)))
    });
    group.finish();
}

criterion_group!(benches, bench_decode, bench_oadr3);
criterion_main!(benches);
