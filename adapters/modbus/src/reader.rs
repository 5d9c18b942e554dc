//! The Modbus TCP client: one connection per meter, every step under a deadline, every failure
//! named so that the gateway can say in its ledger why a sample is missing.
//!
//! A request that timed out leaves the TCP stream in an unknown state (the answer may still
//! arrive and be taken for the next one's), and a transport error leaves it broken: after
//! either the connection is dropped and the next read reconnects. An exception response (the
//! meter answered "illegal data address", "device busy", …) keeps the connection.

use crate::register::{DecodeError, Register, Table};
use std::net::SocketAddr;
use std::time::Duration;
use tokio_modbus::client::{Context, Reader};
use tokio_modbus::prelude::SlaveContext;

/// Why a reading could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No TCP connection within the deadline, or refused.
    #[error("cannot connect to the Modbus meter at {addr}: {detail}")]
    Connect {
        /// The meter.
        addr: SocketAddr,
        /// What happened.
        detail: String,
    },
    /// Connected, but the meter did not answer within the deadline.
    #[error("the Modbus meter at {addr} did not answer within {} ms", .after.as_millis())]
    Timeout {
        /// The meter.
        addr: SocketAddr,
        /// The deadline.
        after: Duration,
    },
    /// The connection broke, or the answer was not valid Modbus.
    #[error("Modbus link to {addr} failed: {detail}")]
    Link {
        /// The meter.
        addr: SocketAddr,
        /// What happened.
        detail: String,
    },
    /// The meter answered with a Modbus exception.
    #[error("the Modbus meter at {addr} answered exception {code:#04x} ({name}) for unit {unit_id}, address {address}")]
    Exception {
        /// The meter.
        addr: SocketAddr,
        /// The unit id asked.
        unit_id: u8,
        /// The address asked.
        address: u16,
        /// The exception code.
        code: u8,
        /// Its name.
        name: String,
    },
    /// The registers do not hold a number of kW.
    #[error("the Modbus meter at {addr}, address {address}: {source}")]
    Decode {
        /// The meter.
        addr: SocketAddr,
        /// The address read.
        address: u16,
        /// Why.
        source: DecodeError,
    },
}

/// One meter reachable over Modbus TCP.
pub struct ModbusMeter {
    addr: SocketAddr,
    timeout: Duration,
    context: Option<Context>,
}

impl std::fmt::Debug for ModbusMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModbusMeter")
            .field("addr", &self.addr)
            .field("timeout", &self.timeout)
            .field("connected", &self.context.is_some())
            .finish()
    }
}

impl ModbusMeter {
    /// A meter at `addr`; `timeout` bounds the connect and each request. Nothing is opened
    /// until the first read.
    #[must_use]
    pub fn new(addr: SocketAddr, timeout: Duration) -> Self {
        Self {
            addr,
            timeout,
            context: None,
        }
    }

    /// Whether a connection is open now.
    #[must_use]
    pub fn is_connected(&self) -> bool {
        self.context.is_some()
    }

    /// Reads `register` and returns it in kW. Connects first where no connection is open.
    ///
    /// # Errors
    /// See [`ReadError`]; after a timeout or a link failure the connection is dropped.
    pub async fn read_kw(&mut self, register: &Register) -> Result<f64, ReadError> {
        let addr = self.addr;
        let timeout = self.timeout;
        let mut context = match self.context.take() {
            Some(context) => context,
            None => match tokio::time::timeout(timeout, tokio_modbus::client::tcp::connect(addr)).await {
                Ok(Ok(context)) => context,
                Ok(Err(e)) => {
                    return Err(ReadError::Connect {
                        addr,
                        detail: e.to_string(),
                    });
                }
                Err(_) => {
                    return Err(ReadError::Connect {
                        addr,
                        detail: format!("no connection within {} ms", timeout.as_millis()),
                    });
                }
            },
        };
        context.set_slave(tokio_modbus::Slave(register.unit_id));
        let count = register.value_type.registers();
        let request = async {
            match register.table {
                Table::Holding => context.read_holding_registers(register.address, count).await,
                Table::Input => context.read_input_registers(register.address, count).await,
            }
        };
        let answer = tokio::time::timeout(timeout, request).await;
        let words = match answer {
            Err(_) => return Err(ReadError::Timeout { addr, after: timeout }),
            Ok(Err(e)) => {
                return Err(ReadError::Link {
                    addr,
                    detail: e.to_string(),
                });
            }
            Ok(Ok(Err(exception))) => {
                self.context = Some(context);
                return Err(ReadError::Exception {
                    addr,
                    unit_id: register.unit_id,
                    address: register.address,
                    code: u8::from(exception),
                    name: exception.to_string(),
                });
            }
            Ok(Ok(Ok(words))) => words,
        };
        self.context = Some(context);
        register.decode_kw(&words).map_err(|source| ReadError::Decode {
            addr,
            address: register.address,
            source,
        })
    }
}
