//! OpenADR 2.0b decode benchmarks.
//!
//! Inputs are `benches/inputs/distribute_{1,10,50}.xml`: one oadrDistributeEvent each, with 1, 10
//! and 50 events, written by openleadr 0.5.36 itself (`make_bench_inputs.py`), so the bytes are
//! what openleadr's VTN sends: each event has one LOAD_DISPATCH setpoint signal with 4 intervals,
//! a powerReal kW itemBase, a venID and a groupID target, and a market context.
//!
//! - `oadr2b_decode/<file>`: `decode` (XML to `Message`).
//! - `oadr2b_decode_json/<file>`: `decode` then `normalized_json` (the JSON view).
//!
//! Throughput is in input bytes. `compare.sh` runs these and openleadr's `parse_message` on the
//! same files and prints both medians. CI smoke: `cargo bench -p flexgate-openadr --bench decode
//! -- --test` runs each benchmark once.
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flexgate_openadr::oadr2b::{Message, decode, normalized_json};
use std::hint::black_box;

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

criterion_group!(benches, bench_decode);
criterion_main!(benches);
