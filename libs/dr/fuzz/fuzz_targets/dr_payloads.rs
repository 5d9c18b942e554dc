//! Fuzz target for the documents the gateway publishes (`dr.ack/1`, `dr.status/1`,
//! `dr.telemetry/1`, `dr.report/1`): every input is read as each of the four, and what is
//! accepted must write and read back unchanged. The properties are in `checks.rs`
//! ([`checks::payloads`]).
#![no_main]

mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    checks::payloads(data);
});
