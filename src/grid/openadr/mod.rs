//! OpenADR wiring: the 2.0b VEN and the 3.x client, connected to the gateway's event book.
//!
//! Protocol work (XML, JSON, the VEN state machine, HTTP) lives in the `flexgate-openadr`
//! crate; this module only runs it against the gateway: it records what the VTN sent, turns
//! OpenADR events into `GridEvent`s, submits them, and feeds the gateway's decisions back as
//! opt-in/opt-out.

pub mod map;
pub mod push;
pub mod ven2b;
pub mod ven3;
