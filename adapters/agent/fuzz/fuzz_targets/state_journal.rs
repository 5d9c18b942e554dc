//! Fuzz target for the agent's state file: the bytes of `<state_dir>/leases.json` through
//! `state::parse` and `LeaseBook::from_state` (what the agent does at start), then the start-up
//! reconcile and the dead-man switch. The properties are in `checks.rs`
//! ([`checks::state_journal`]).
#![no_main]

mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| checks::state_journal(data));
