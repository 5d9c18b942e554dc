//! Fuzz target for the agent's lease API: the body of `PUT /v1/leases/{id}` through
//! `api::decode_lease_request` (the function the HTTP handler calls) and, when accepted,
//! through the lease book on simulated GPUs. The properties are in `checks.rs`
//! ([`checks::lease_request`]).
#![no_main]

mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| checks::lease_request(data));
