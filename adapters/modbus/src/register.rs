//! Where a meter keeps a value and how to read it: the register map of one quantity, checked
//! when it is loaded, and the decoding of the 16-bit words a read returns. Pure: no I/O.
//!
//! Meters disagree on everything a register map can vary: the table (holding or input
//! registers), the numeric type, the order of the 16-bit words of a 32- or 64-bit value ("word
//! swap"), the order of the two bytes inside each word, and the unit (W, kW, 0.1 kW). A wrong
//! guess does not fail, it reads a wrong number, so each of these is spelled out in the
//! configuration and none is defaulted silently except the common big-endian orders.

use serde::{Deserialize, Serialize};

/// Which Modbus table holds the value (function code 0x03 or 0x04).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Table {
    /// Holding registers, read with function 0x03.
    Holding,
    /// Input registers, read with function 0x04.
    Input,
}

/// The numeric type stored at the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueType {
    /// Signed 16-bit integer, one register.
    Int16,
    /// Unsigned 16-bit integer, one register.
    Uint16,
    /// Signed 32-bit integer, two registers.
    Int32,
    /// Unsigned 32-bit integer, two registers.
    Uint32,
    /// IEEE 754 single precision, two registers.
    Float32,
    /// IEEE 754 double precision, four registers.
    Float64,
}

impl ValueType {
    /// How many 16-bit registers the value spans.
    #[must_use]
    pub fn registers(self) -> u16 {
        match self {
            ValueType::Int16 | ValueType::Uint16 => 1,
            ValueType::Int32 | ValueType::Uint32 | ValueType::Float32 => 2,
            ValueType::Float64 => 4,
        }
    }
}

/// Order of several things: the words of a multi-register value, or the bytes inside a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// Most significant first (the Modbus convention for bytes, and most meters' for words).
    #[default]
    BigEndian,
    /// Least significant first ("word swap" for words, "byte swap" for bytes).
    LittleEndian,
}

/// One quantity's place in a meter's register map, as configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Register {
    /// The Modbus unit (slave) id, 0–247 (many TCP meters answer on 1; gateways to RS-485
    /// buses use the bus address).
    pub unit_id: u8,
    /// Holding or input registers.
    pub table: Table,
    /// Protocol address of the first register, 0-based as sent on the wire. Manuals often list
    /// 1-based "register numbers" (e.g. 3060 or 30053): subtract 1 (and the 30001/40001 table
    /// offset where the manual uses one).
    pub address: u16,
    /// The numeric type.
    #[serde(rename = "type")]
    pub value_type: ValueType,
    /// Order of the words of a 32- or 64-bit value.
    #[serde(default)]
    pub word_order: Order,
    /// Order of the two bytes inside each word.
    #[serde(default)]
    pub byte_order: Order,
    /// Multiplier from the decoded number to kW (0.001 for a meter reporting W, 0.1 for one
    /// reporting 0.1 kW steps, 1 for kW).
    pub scale_to_kw: f64,
}

/// A register map that cannot be right.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RegisterError {
    /// Unit ids above 247 are reserved.
    #[error("unit_id {0} is out of range: Modbus unit ids are 0-247")]
    UnitId(u8),
    /// The value would run past the last register address.
    #[error("a {value_type:?} at address {address} needs {registers} registers and runs past address 65535")]
    PastTheEnd {
        /// Address.
        address: u16,
        /// The type.
        value_type: ValueType,
        /// Registers it needs.
        registers: u16,
    },
    /// The scale must be a finite, non-zero number.
    #[error("scale_to_kw must be a finite non-zero number, not {0}")]
    Scale(f64),
}

/// A value that the words cannot give.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// The read returned another number of registers than the type needs.
    #[error("expected {expected} registers, got {got}")]
    Length {
        /// Registers the type needs.
        expected: u16,
        /// Registers returned.
        got: usize,
    },
    /// A float register holds NaN or an infinity (some meters write NaN while starting up).
    #[error("the register holds {0}, not a number of kW")]
    NotFinite(f64),
}

impl Register {
    /// Checks what a configuration can get wrong before any read.
    ///
    /// # Errors
    /// The first problem found.
    pub fn validate(&self) -> Result<(), RegisterError> {
        if self.unit_id > 247 {
            return Err(RegisterError::UnitId(self.unit_id));
        }
        let registers = self.value_type.registers();
        if u32::from(self.address) + u32::from(registers) > 65_536 {
            return Err(RegisterError::PastTheEnd {
                address: self.address,
                value_type: self.value_type,
                registers,
            });
        }
        if !self.scale_to_kw.is_finite() || self.scale_to_kw == 0.0 {
            return Err(RegisterError::Scale(self.scale_to_kw));
        }
        Ok(())
    }

    /// The reading in kW from the words a read of [`Self::value_type`]`.registers()` registers
    /// at [`Self::address`] returned.
    ///
    /// # Errors
    /// A wrong number of words, or a float that is not finite.
    pub fn decode_kw(&self, words: &[u16]) -> Result<f64, DecodeError> {
        let expected = self.value_type.registers();
        if words.len() != usize::from(expected) {
            return Err(DecodeError::Length {
                expected,
                got: words.len(),
            });
        }
        // Bring the value into big-endian byte order, most significant word first.
        let mut bytes = [0u8; 8];
        let n = words.len();
        for (i, word) in words.iter().enumerate() {
            let slot = match self.word_order {
                Order::BigEndian => i,
                Order::LittleEndian => n - 1 - i,
            };
            let [hi, lo] = word.to_be_bytes();
            let (first, second) = match self.byte_order {
                Order::BigEndian => (hi, lo),
                Order::LittleEndian => (lo, hi),
            };
            bytes[2 * slot] = first;
            bytes[2 * slot + 1] = second;
        }
        let raw = match self.value_type {
            ValueType::Int16 => f64::from(i16::from_be_bytes([bytes[0], bytes[1]])),
            ValueType::Uint16 => f64::from(u16::from_be_bytes([bytes[0], bytes[1]])),
            ValueType::Int32 => f64::from(i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            ValueType::Uint32 => f64::from(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            ValueType::Float32 => f64::from(f32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            ValueType::Float64 => f64::from_be_bytes(bytes),
        };
        if !raw.is_finite() {
            return Err(DecodeError::NotFinite(raw));
        }
        Ok(raw * self.scale_to_kw)
    }
}

/// The words a meter would hold for `value` (before scaling) under `register`'s type and
/// orders: the inverse of [`Register::decode_kw`], for tests and for simulated meters.
#[must_use]
pub fn encode(register: &Register, value: f64) -> Vec<u16> {
    let be: Vec<u8> = match register.value_type {
        // Saturating casts: the caller picks a value the type can hold.
        ValueType::Int16 => (value as i16).to_be_bytes().to_vec(),
        ValueType::Uint16 => (value as u16).to_be_bytes().to_vec(),
        ValueType::Int32 => (value as i32).to_be_bytes().to_vec(),
        ValueType::Uint32 => (value as u32).to_be_bytes().to_vec(),
        ValueType::Float32 => (value as f32).to_be_bytes().to_vec(),
        ValueType::Float64 => value.to_be_bytes().to_vec(),
    };
    let mut words: Vec<u16> = be
        .chunks_exact(2)
        .map(|pair| match register.byte_order {
            Order::BigEndian => u16::from_be_bytes([pair[0], pair[1]]),
            Order::LittleEndian => u16::from_be_bytes([pair[1], pair[0]]),
        })
        .collect();
    if register.word_order == Order::LittleEndian {
        words.reverse();
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn register(value_type: ValueType, word_order: Order, byte_order: Order) -> Register {
        Register {
            unit_id: 1,
            table: Table::Holding,
            address: 3059,
            value_type,
            word_order,
            byte_order,
            scale_to_kw: 1.0,
        }
    }

    #[test]
    fn known_words_decode_to_known_values() {
        // 1234.5 as float32 is 0x449A5000.
        let be = register(ValueType::Float32, Order::BigEndian, Order::BigEndian);
        assert_eq!(be.decode_kw(&[0x449A, 0x5000]), Ok(1234.5));
        let word_swapped = register(ValueType::Float32, Order::LittleEndian, Order::BigEndian);
        assert_eq!(word_swapped.decode_kw(&[0x5000, 0x449A]), Ok(1234.5));
        let byte_swapped = register(ValueType::Float32, Order::BigEndian, Order::LittleEndian);
        assert_eq!(byte_swapped.decode_kw(&[0x9A44, 0x0050]), Ok(1234.5));
        // -2 as int32 with a 0.1 kW step: -0.2 kW.
        let mut tenths = register(ValueType::Int32, Order::BigEndian, Order::BigEndian);
        tenths.scale_to_kw = 0.1;
        let kw = tenths.decode_kw(&[0xFFFF, 0xFFFE]).expect("decodes");
        assert!((kw + 0.2).abs() < 1e-12, "{kw}");
        // Watts to kW.
        let mut watts = register(ValueType::Uint32, Order::BigEndian, Order::BigEndian);
        watts.scale_to_kw = 0.001;
        assert_eq!(watts.decode_kw(&[0x0001, 0x0000]), Ok(65.536));
    }

    #[test]
    fn wrong_lengths_and_non_numbers_are_refused() {
        let f = register(ValueType::Float32, Order::BigEndian, Order::BigEndian);
        assert_eq!(f.decode_kw(&[0x449A]), Err(DecodeError::Length { expected: 2, got: 1 }));
        assert!(matches!(f.decode_kw(&[0x7FC0, 0x0000]), Err(DecodeError::NotFinite(v)) if v.is_nan()));
        assert_eq!(
            f.decode_kw(&[0x7F80, 0x0000]),
            Err(DecodeError::NotFinite(f64::INFINITY))
        );
    }

    #[test]
    fn impossible_maps_are_refused_when_loaded() {
        let mut r = register(ValueType::Float64, Order::BigEndian, Order::BigEndian);
        r.address = 65_533;
        assert!(matches!(r.validate(), Err(RegisterError::PastTheEnd { .. })));
        r.address = 65_532;
        assert_eq!(r.validate(), Ok(()));
        r.unit_id = 248;
        assert_eq!(r.validate(), Err(RegisterError::UnitId(248)));
        r.unit_id = 1;
        for bad in [0.0, f64::NAN, f64::INFINITY] {
            r.scale_to_kw = bad;
            assert!(matches!(r.validate(), Err(RegisterError::Scale(_))), "{bad}");
        }
    }

    #[test]
    fn a_register_map_reads_from_toml_and_refuses_typos() {
        let r: Register =
            toml::from_str("unit_id = 1\ntable = \"input\"\naddress = 52\ntype = \"float32\"\nscale_to_kw = 0.001\n")
                .expect("parses");
        assert_eq!(
            (r.table, r.value_type, r.word_order, r.byte_order),
            (Table::Input, ValueType::Float32, Order::BigEndian, Order::BigEndian)
        );
        let typo = toml::from_str::<Register>(
            "unit_id = 1\ntable = \"input\"\naddress = 52\ntype = \"float32\"\nscale_to_kw = 1\nword_oder = \"little_endian\"\n",
        );
        assert!(typo.is_err(), "an unknown key must not be ignored");
    }

    fn any_order() -> impl Strategy<Value = Order> {
        prop_oneof![Just(Order::BigEndian), Just(Order::LittleEndian)]
    }

    proptest! {
        #[test]
        fn every_type_and_order_round_trips(word in any_order(), byte in any_order(),
                                             i in any::<i32>(), f in -1.0e12f64..1.0e12) {
            for (value_type, value) in [
                (ValueType::Int16, f64::from(i as i16)),
                (ValueType::Uint16, f64::from(i as u16)),
                (ValueType::Int32, f64::from(i)),
                (ValueType::Uint32, f64::from(i as u32)),
                (ValueType::Float32, f64::from(f as f32)),
                (ValueType::Float64, f),
            ] {
                let r = register(value_type, word, byte);
                let words = encode(&r, value);
                prop_assert_eq!(words.len(), usize::from(value_type.registers()));
                prop_assert_eq!(r.decode_kw(&words), Ok(value));
            }
        }

        #[test]
        fn decoding_any_words_never_panics(words in proptest::collection::vec(any::<u16>(), 0..6),
                                           word in any_order(), byte in any_order()) {
            for value_type in [ValueType::Int16, ValueType::Uint16, ValueType::Int32, ValueType::Uint32, ValueType::Float32, ValueType::Float64] {
                let r = register(value_type, word, byte);
                match r.decode_kw(&words) {
                    Ok(kw) => prop_assert!(kw.is_finite()),
                    Err(DecodeError::Length { expected, got }) => prop_assert!(usize::from(expected) != got),
                    Err(DecodeError::NotFinite(_)) => prop_assert!(matches!(value_type, ValueType::Float32 | ValueType::Float64)),
                }
            }
        }
    }
}
