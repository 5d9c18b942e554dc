//! Errors: an import names the place (element or column, line, column) and the reason; an
//! export names the reading.
//!
//! Why one struct with a place and a reason rather than one enum per format: the person reading
//! the error opens the file at the line it names, whichever format it is, and the gateway shows
//! the same four fields for both (`POST /v1/meter/import` answers them as JSON).

use chrono::{DateTime, Utc};

/// Why an import was refused. Nothing of the file is returned with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", render(self))]
pub struct ImportError {
    /// Where: the element (`IntervalReading/value`, `ReadingType/uom`, `DOCTYPE`) or, in a CSV,
    /// the column's name (`kwh`) or `header`/`row`; `file` for what concerns the whole file.
    pub element: String,
    /// 1-based line, when the error has a place in the file.
    pub line: Option<u64>,
    /// 1-based column: in XML, the character where the element's start tag begins; in a CSV,
    /// the field's number (1 is the first field).
    pub column: Option<u64>,
    /// What is wrong.
    pub reason: Reason,
}

fn render(e: &ImportError) -> String {
    match (e.line, e.column) {
        (Some(l), Some(c)) => format!("line {l}, column {c}: {}: {}", e.element, e.reason),
        (Some(l), None) => format!("line {l}: {}: {}", e.element, e.reason),
        _ => format!("{}: {}", e.element, e.reason),
    }
}

impl ImportError {
    /// An error about the whole file (size, I/O), with no line.
    pub(crate) fn file(reason: Reason) -> Self {
        ImportError {
            element: "file".into(),
            line: None,
            column: None,
            reason,
        }
    }

    /// An error at a place.
    pub(crate) fn at(element: impl Into<String>, place: Place, reason: Reason) -> Self {
        ImportError {
            element: element.into(),
            line: Some(place.line),
            column: Some(place.column),
            reason,
        }
    }
}

/// A place in the input: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Place {
    /// 1-based line.
    pub line: u64,
    /// 1-based column (characters in XML, fields in a CSV).
    pub column: u64,
}

/// What is wrong with an input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Reason {
    /// The file is larger than the limit (checked before reading anything).
    #[error("the file is {size} bytes, over the import limit of {limit} bytes (Limits::max_bytes); nothing was read")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// More bytes came from a stream than the limit allows.
    #[error("more than {limit} bytes read, over the import limit (Limits::max_bytes)")]
    ReadTooMuch {
        /// The limit.
        limit: u64,
    },
    /// Reading failed.
    #[error("read failed: {0}")]
    Io(String),
    /// Bytes that are not UTF-8.
    #[error("not UTF-8: invalid byte sequence at byte {byte} of the file{}", hint(*in_line))]
    NotUtf8 {
        /// 0-based offset of the first bad byte in the file.
        byte: u64,
        /// 1-based byte in its line, where known.
        in_line: Option<u64>,
    },
    /// An XML declaration naming an encoding other than UTF-8.
    #[error("declares encoding {0:?}; only UTF-8 is read")]
    Encoding(String),
    /// Not well-formed XML.
    #[error("malformed XML: {0}")]
    Xml(String),
    /// A document type declaration.
    #[error("a DOCTYPE is refused: Green Button files have none, and a DTD is where entity expansion begins")]
    Doctype,
    /// A reference to an entity other than the five predefined ones.
    #[error(
        "the entity reference &{name}; is refused: only XML's five predefined entities and character references are read"
    )]
    Entity {
        /// The entity's name as written.
        name: String,
    },
    /// Elements nested deeper than the limit.
    #[error("elements nested deeper than {limit} (Limits::max_depth)")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// One tag, text or CSV line longer than the limit.
    #[error("one tag, text or line is longer than {limit} bytes (Limits::max_token_bytes)")]
    TokenTooLong {
        /// The limit.
        limit: usize,
    },
    /// More readings than the limit.
    #[error("more than {limit} readings (Limits::max_readings)")]
    TooManyReadings {
        /// The limit.
        limit: usize,
    },
    /// More IntervalBlocks, MeterReadings, ReadingTypes or UsagePoints than the limit.
    #[error("more than {limit} of these (Limits::{which})")]
    TooMany {
        /// The limit.
        limit: usize,
        /// The limit's name.
        which: &'static str,
    },
    /// A required element (or CSV column) is absent.
    #[error("{what} is required and missing")]
    Missing {
        /// What is missing.
        what: String,
    },
    /// An element the schema allows once appears twice.
    #[error("appears twice; the schema allows it once")]
    Duplicate,
    /// A value that does not parse as what it must be.
    #[error("{value:?} is not {expected}")]
    Invalid {
        /// The text as written (shortened when long).
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// A power-of-ten multiplier outside ESPI's.
    #[error(
        "powerOfTenMultiplier {value} is not one of ESPI's multipliers (-12, -9, -6, -3, -2, -1, 0, 1, 2, 3, 6, 9, 12)"
    )]
    Multiplier {
        /// The multiplier.
        value: i64,
    },
    /// A value that, after the multiplier, is no site's demand.
    #[error(
        "{value} × 10^{multiplier} {unit} over {duration_s} s is a mean demand of {mean_w:.3e} W, above the limit of {limit_w:.3e} W (Limits::max_site_power_w): is the powerOfTenMultiplier right?"
    )]
    Absurd {
        /// The value as written.
        value: i64,
        /// The multiplier.
        multiplier: i8,
        /// Wh or W.
        unit: &'static str,
        /// The interval's length.
        duration_s: u32,
        /// The mean demand it implies.
        mean_w: f64,
        /// The limit.
        limit_w: f64,
    },
    /// A figure (not ESPI's) implying a mean demand above the limit.
    #[error(
        "a mean demand of {mean_w:.3e} W over the interval, above the limit of {limit_w:.3e} W (Limits::max_site_power_w): kWh written as Wh?"
    )]
    TooHigh {
        /// The mean demand it implies.
        mean_w: f64,
        /// The limit.
        limit_w: f64,
    },
    /// A negative figure.
    #[error(
        "negative value {0}: a site's consumption cannot be negative (net data where the site exported is not supported)"
    )]
    NegativeValue(String),
    /// NaN or infinity.
    #[error("value {0:?} is not a finite number")]
    NotFinite(String),
    /// A negative duration.
    #[error("negative duration {0}")]
    NegativeDuration(String),
    /// A zero duration.
    #[error("zero duration: an interval must last at least one second")]
    ZeroDuration,
    /// A time outside what the importer accepts.
    #[error("time {value} is outside 1970-01-01 to 2100-01-01 (seconds since 1970 are expected; milliseconds?)")]
    TimeRange {
        /// The time as written.
        value: String,
    },
    /// An interval that starts before the previous one.
    #[error("interval starting {start} comes after one starting {previous_start}: intervals must be in time order")]
    OutOfOrder {
        /// Its start.
        start: DateTime<Utc>,
        /// The previous interval's start.
        previous_start: DateTime<Utc>,
    },
    /// An interval that starts before the previous one ends.
    #[error("interval {start} to {end} overlaps the previous one, {previous_start} to {previous_end}")]
    Overlap {
        /// Its start.
        start: DateTime<Utc>,
        /// Its end.
        end: DateTime<Utc>,
        /// The previous interval's start.
        previous_start: DateTime<Utc>,
        /// The previous interval's end.
        previous_end: DateTime<Utc>,
    },
    /// A reading outside its IntervalBlock's interval.
    #[error("reading {start} to {end} lies outside its IntervalBlock's interval {block_start} to {block_end}")]
    OutsideBlock {
        /// The reading's start.
        start: DateTime<Utc>,
        /// The reading's end.
        end: DateTime<Utc>,
        /// The block's start.
        block_start: DateTime<Utc>,
        /// The block's end.
        block_end: DateTime<Utc>,
    },
    /// An interval whose length differs from the series'.
    #[error("interval lasts {got_s} s; the series' intervals last {expected_s} s ({source_of_length})")]
    Length {
        /// Its length.
        got_s: u64,
        /// The series' length.
        expected_s: u64,
        /// Where the series' length comes from.
        source_of_length: &'static str,
    },
    /// A ReadingType the site cannot use.
    #[error("this ReadingType cannot be the site's interval load: {0}")]
    Unusable(String),
    /// A quality code that is not ESPI's.
    #[error("quality code {0} is not an ESPI QualityOfReading (0, 7 to 19)")]
    QualityCode(u64),
    /// Several usable MeterReadings and no choice made.
    #[error("{0}")]
    Ambiguous(String),
    /// An IntervalBlock no MeterReading claims.
    #[error(
        "cannot tell which MeterReading this IntervalBlock belongs to: the file holds several, and no Atom link (rel=up or self) of this block's entry matches one"
    )]
    Unlinked,
    /// No readings at all.
    #[error("no IntervalReading in the file")]
    NoReadings,
    /// A CSV header problem.
    #[error("{0}")]
    Header(String),
    /// A CSV row with the wrong number of fields.
    #[error("{got} fields; the header has {expected}")]
    FieldCount {
        /// Fields in the row.
        got: usize,
        /// Fields in the header.
        expected: usize,
    },
    /// A quoted CSV field.
    #[error("quoted fields are not part of this CSV format (README: no field holds a comma or a quote)")]
    Quoted,
    /// A missing CSV row that carries a figure, or a present one without.
    #[error("quality {quality} {}", if *has_value { "must leave the figure empty" } else { "needs a figure" })]
    QualityValue {
        /// The row's quality.
        quality: &'static str,
        /// Whether it had a figure.
        has_value: bool,
    },
}

fn hint(in_line: Option<u64>) -> String {
    in_line.map(|b| format!(" (byte {b} of its line)")).unwrap_or_default()
}

/// Shortens a value quoted in an error, so a hostile megabyte of text is not echoed back.
pub(crate) fn quote(s: &str) -> String {
    const MAX: usize = 64;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Why an export was refused (nothing useful was written: the caller discards the output).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Writing failed.
    #[error("write failed: {0}")]
    Io(#[from] std::io::Error),
    /// A reading that does not fit the format or the series rules.
    #[error("reading {index} (start {start}): {reason}")]
    Reading {
        /// Its position in the slice.
        index: usize,
        /// Its start.
        start: DateTime<Utc>,
        /// What is wrong.
        reason: String,
    },
    /// An export option that is not valid.
    #[error("{0}")]
    Options(String),
}
