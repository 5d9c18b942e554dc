//! OpenADR 3 decode against openleadr-rs's wire types, interleaved, for a machine shared with
//! other work.
//!
//! Criterion measures one benchmark after the other, a few seconds each, so on a machine whose
//! load changes by the second (other builds, fuzzers) the ratio of two medians measures the load
//! as much as the decoders: on this 2-core machine the same code gave 1.7× to 3.3×. Here the
//! three decoders take turns instead: each round times 100 decodes of each, in an order that
//! rotates from round to round, so a change of load falls on all three alike. The figures are
//! the medians over the rounds of each decoder's time per decode, and the median of the
//! per-round ratios.
//!
//! ```sh
//! cargo bench -p flexgate-openadr --bench oadr3_interleaved     # OADR3_ROUNDS=41 by default
//! ```
//!
//! Same input and same check as `decode.rs`'s `oadr3_decode` group: `events_200.json` must
//! decode with both decoders to 200 events (the full field-by-field check is in `decode.rs`).
//!
//! The allocator matters as much as the decoders. In a fresh process glibc returns the top of
//! the heap to the kernel whenever more than 128 KiB of it is free, which happens after every
//! one of flexgate's decodes (not after openleadr-wire's), so each of ours pays some hundred page
//! faults to get it back. glibc stops doing that once the process has freed a block it had
//! mapped on its own (any allocation of 128 KiB or more): it then raises its thresholds to that
//! size. A gateway has done so the first time it dropped a large HTTP body (a 200-event page is
//! 190 KB), so this harness frees one 4 MiB block before it starts, to measure that state.
//! `OADR3_FRESH_HEAP=1` skips it, to measure the fresh process.
use flexgate_openadr::oadr3;
use std::hint::black_box;
use std::time::{Duration, Instant};

const PER_ROUND: u32 = 100;

type Decoder = fn(&str) -> usize;

fn decode_events(text: &str) -> usize {
    oadr3::decode_events(black_box(text.as_bytes()), &oadr3::Limits::default()).map_or(0, |v| v.len())
}

fn decode_any(text: &str) -> usize {
    oadr3::decode_any(black_box(text.as_bytes())).map_or(0, |d| d.events().len())
}

fn openleadr_wire(text: &str) -> usize {
    serde_json::from_str::<Vec<openleadr_wire::Event>>(black_box(text)).map_or(0, |v| v.len())
}

/// Time per decode over `PER_ROUND` decodes.
fn time(decoder: Decoder, text: &str) -> Duration {
    let start = Instant::now();
    for _ in 0..PER_ROUND {
        black_box(decoder(text));
    }
    start.elapsed() / PER_ROUND
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn quartiles(mut xs: Vec<f64>) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 4], xs[3 * xs.len() / 4])
}

fn main() {
    let path = format!("{}/benches/inputs/events_200.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (run make_oadr3_inputs.py)"));
    let decoders: [(&str, Decoder); 3] = [
        ("decode_events", decode_events),
        ("decode_any", decode_any),
        ("openleadr_wire", openleadr_wire),
    ];
    for (name, decoder) in decoders {
        assert_eq!(decoder(&text), 200, "{path}: {name} must decode 200 events");
        for _ in 0..20 {
            black_box(decoder(&text)); // warm up
        }
    }
    let fresh = std::env::var_os("OADR3_FRESH_HEAP").is_some();
    if !fresh {
        // Allocated and freed as the body of a large response would be (see the module doc).
        black_box(vec![1u8; 4 << 20]);
    }
    let rounds: usize = std::env::var("OADR3_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(41);
    let mut us: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds {
        for k in 0..3 {
            let i = (round + k) % 3;
            us[i].push(time(decoders[i].1, &text).as_secs_f64() * 1e6);
        }
    }
    let ratio = |i: usize| median(us[2].iter().zip(&us[i]).map(|(w, o)| w / o).collect());
    println!(
        "oadr3 interleaved: {rounds} rounds x {PER_ROUND} decodes each, {} bytes, {} heap",
        text.len(),
        if fresh { "fresh" } else { "warmed" }
    );
    for (i, (name, _)) in decoders.iter().enumerate() {
        let (q1, q3) = quartiles(us[i].clone());
        println!(
            "{name:>15}: median {:8.1} µs per decode (quartiles {q1:.1}–{q3:.1})",
            median(us[i].clone())
        );
    }
    println!(
        "openleadr_wire / decode_events: {:.2}x, openleadr_wire / decode_any: {:.2}x (medians of per-round ratios)",
        ratio(0),
        ratio(1)
    );
}
