//! Fuzz target for the MQTT payload screening: everything the flexgate gateway does with a
//! received payload before its own strict parse (`Screen::admit`: the Ed25519 signature check
//! for the topic, then the screen's header, topic and freshness checks), plus topic parsing
//! and the agreement of signing with verifying. The invariants are in `screen_check.rs`,
//! shared with the corpus replay test; a violation is a panic, which libFuzzer reports as a
//! crash.
#![no_main]

mod screen_check;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = screen_check::check(data);
});
