//! Fuzz target for the `dr.event/1` codec: `parse_dr_event` and `DrEvent::to_json`, on the input
//! as it is and wrapped so that fragments reach the deeper code. The properties are in
//! `checks.rs` ([`checks::dr_event`], [`checks::dr_event_all`]).
#![no_main]

mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    checks::dr_event_all(data);
});
