//! `flexgate-modbus`: reads a site's power meter over Modbus TCP, so that the gateway acts on
//! the revenue meter's own figure instead of a model of it.
//!
//! - [`register`] (pure): where a quantity lives in a meter's register map (unit id, table,
//!   address, type, word and byte order, scale to kW), checked when loaded, and the decoding of
//!   the words a read returns;
//! - [`reader`]: the TCP client ([`ModbusMeter`]) with a deadline on the connect and on each
//!   request, reconnecting after a timeout or a broken link, with errors that name the meter,
//!   the address and the Modbus exception.
//!
//! Reusable alone: nothing here knows about the gateway. Example register maps for two common
//! meter families are in this crate's README.

pub mod reader;
pub mod register;

pub use reader::{ModbusMeter, ReadError};
pub use register::{DecodeError, Order, Register, RegisterError, Table, ValueType};
