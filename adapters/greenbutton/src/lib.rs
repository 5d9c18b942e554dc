//! `flexgate-greenbutton`: a utility's interval meter data in and out, as Green Button (NAESB
//! ESPI XML in an Atom feed) and as a documented CSV.
//!
//! Settlement is computed on the utility's revenue-meter interval data, so the gateway imports
//! it (`flexgate meter import`) and exports its own (`flexgate meter export`). This crate is the
//! file formats only: it reads a file into [`Reading`]s, or refuses it whole with an
//! [`ImportError`] naming the element (or CSV column), the line and the column; and writes
//! readings back out. The gateway converts [`Reading`]s to its own intervals.
//!
//! - [`espi_read`]: Green Button import, streaming over quick-xml with bounded memory
//!   ([`Limits`]); refuses DTDs and entities, malformed and oversized input, unusable
//!   ReadingTypes ([`reading_type`]), bad multipliers, out-of-order or overlapping intervals,
//!   readings outside their block, and values that are negative, non-finite or absurd.
//! - [`csv_read`]: the CSV format (spec in the README), with the same bounds and rules.
//! - [`espi_write`], [`csv_write`]: exports that import back to the same readings.
//! - [`quality`]: ESPI quality codes → measured / estimated / missing.
//!
//! Nothing partial: an import returns all of a file's readings or an error, never some of them.
//! Reusable alone: no flexgate crate is a dependency.
//!
//! ```
//! use flexgate_greenbutton::{import_csv, write_espi, import_espi, EspiMeta, Limits};
//! let csv = "interval_end,interval_minutes,kwh,quality\n\
//!            2026-07-01T00:15:00Z,15,12.5,measured\n\
//!            2026-07-01T00:30:00Z,15,,missing\n";
//! let rows = import_csv(csv.as_bytes(), &Limits::default()).unwrap();
//! let mut xml = Vec::new();
//! let updated = rows.readings[0].start;
//! write_espi(&mut xml, &rows.readings, &EspiMeta::new("urn:example:site-a", "Site A", updated)).unwrap();
//! let back = import_espi(&xml[..], &Limits::default()).unwrap();
//! assert_eq!(back.readings, rows.readings);
//! assert_eq!(back.readings[0].value, Some(12_500.0)); // Wh
//! ```

pub mod csv_read;
pub mod csv_write;
mod decimal;
pub mod error;
pub mod espi_read;
pub mod espi_write;
pub mod limits;
pub mod quality;
pub mod reading;
pub mod reading_type;
mod series;

pub use csv_read::{CsvImport, import_csv, import_csv_file};
pub use csv_write::write_csv;
pub use error::{ExportError, ImportError, Place, Reason};
pub use espi_read::{EspiImport, Skipped, import_espi, import_espi_file, import_espi_selecting};
pub use espi_write::{EXPORT_MULTIPLIER, EspiMeta, write_espi};
pub use limits::Limits;
pub use reading::{Quality, Reading, Unit};
pub use reading_type::{LocalTimeParameters, ReadingTypeInfo};
