//! Helpers shared by the integration tests.

#[allow(dead_code)]
pub mod agent;
#[allow(dead_code)]
pub mod chromium;
#[allow(dead_code)]
pub mod hours;
#[allow(dead_code)] // each test binary uses a part
pub mod mosquitto;
#[allow(dead_code)]
pub mod oadr2b_vtn;
#[allow(dead_code)]
pub mod pki;
#[allow(dead_code)]
pub mod slurm;
