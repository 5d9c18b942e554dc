//! Helpers shared by the integration tests.

#[allow(dead_code)] // each test binary uses a part
pub mod mosquitto;
