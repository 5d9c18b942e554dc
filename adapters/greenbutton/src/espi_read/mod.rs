//! Green Button (NAESB ESPI) XML import: one pass over the file with quick-xml, keeping only the
//! readings and the few resources that say what they are.
//!
//! A Green Button file is an Atom feed whose entries each hold one ESPI resource in `content`:
//! `UsagePoint`, `MeterReading`, `ReadingType`, `IntervalBlock`s, `LocalTimeParameters`. The
//! entries are tied together by Atom links (a MeterReading's `related` link names its
//! ReadingType; an IntervalBlock's `up` link names its MeterReading's collection of blocks), and
//! they may come in any order, so the readings are collected as read and checked once the whole
//! file is known (`assemble.rs`). A bare ESPI document (the resources in any other wrapper, or
//! one resource as the root) reads the same way, without links.
//!
//! What is refused while reading (the rest is in `assemble.rs`): a DOCTYPE (no DTD, so no entity
//! can be declared), any entity reference but XML's five, a declared encoding other than UTF-8
//! and bytes that are not UTF-8, malformed XML, nesting deeper than [`Limits::max_depth`], any
//! one tag or text longer than [`Limits::max_token_bytes`], more than [`Limits::max_bytes`], more
//! readings, blocks or resources than their limits, an element the schema allows once appearing
//! twice, and every value that does not parse as its ESPI type (with negative durations,
//! negative or non-finite values and times outside 1970..2100 named as such).

mod assemble;
mod tags;

use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

use quick_xml::NsReader;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::ResolveResult;

use crate::error::{ImportError, Place, Reason, quote};
use crate::limits::{Bounded, Limits, open_checked};
use crate::quality;
use crate::reading::{Quality, Reading};
use crate::reading_type::{Field, LocalTimeParameters, MULTIPLIERS, ReadingTypeFields, ReadingTypeInfo};
use tags::{LtField, Ns, RtField, Tag};

/// A Green Button import: every reading of one MeterReading, and what they are.
#[derive(Debug, Clone, PartialEq)]
pub struct EspiImport {
    /// The readings, in time order (interval data of one length, none overlapping).
    pub readings: Vec<Reading>,
    /// The ReadingType of the MeterReading imported.
    pub reading_type: ReadingTypeInfo,
    /// The customer's zone as the file states it, if it does.
    pub local_time: Option<LocalTimeParameters>,
    /// The imported MeterReading's Atom `self` link, when the file has one.
    pub meter_reading: Option<String>,
    /// The UsagePoint's `ServiceCategory/kind` (0 electricity), when the file holds one
    /// UsagePoint that states it.
    pub service_kind: Option<u16>,
    /// Other MeterReadings of the file that were not imported, with why (a gas meter, the
    /// energy a site with generation sent to the grid...). Say so to the operator: a net
    /// metered site's delivered channel alone overstates its load.
    pub skipped: Vec<Skipped>,
}

/// A MeterReading of the file that was not imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Its Atom `self` link, if it has one.
    pub meter_reading: Option<String>,
    /// Its line.
    pub line: u64,
    /// Why it was not imported.
    pub reason: String,
}

/// Imports a Green Button file. A file over [`Limits::max_bytes`] is refused from its size,
/// before it is read.
pub fn import_espi_file(path: &Path, limits: &Limits) -> Result<EspiImport, ImportError> {
    let file = open_checked(path, limits)?;
    import_espi(file, limits)
}

/// Imports Green Button XML from a stream (buffered here: pass the `File` or the bytes as they
/// are). Where the file holds several usable MeterReadings, the import is refused unless one is
/// chosen with [`import_espi_selecting`].
pub fn import_espi<R: Read>(input: R, limits: &Limits) -> Result<EspiImport, ImportError> {
    let collected = collect(input, limits)?;
    assemble::assemble(collected, limits, None)
}

/// Imports the MeterReading whose Atom `self` link ends with `meter_reading` (for files holding
/// several, e.g. two meters of one site).
pub fn import_espi_selecting<R: Read>(
    input: R,
    limits: &Limits,
    meter_reading: &str,
) -> Result<EspiImport, ImportError> {
    let collected = collect(input, limits)?;
    assemble::assemble(collected, limits, Some(meter_reading))
}

/// Atom links of one entry.
#[derive(Debug, Clone, Default)]
struct Links {
    self_href: Option<String>,
    up: Option<String>,
    related: Vec<String>,
}

/// Links per entry beyond which a file is refused (Green Button entries carry up to about 5).
const MAX_LINKS: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Res {
    UsagePoint,
    MeterReading,
    ReadingType,
    Block,
}

#[derive(Debug, Default)]
struct Entry {
    links: Links,
    resource: Option<(Res, usize)>,
}

#[derive(Debug, Default)]
struct UsagePointRec {
    kind: Field<u16>,
}

#[derive(Debug, Default)]
struct MeterReadingRec {
    place: Place,
    links: Links,
}

#[derive(Debug, Default)]
struct ReadingTypeRec {
    fields: ReadingTypeFields,
    links: Links,
}

/// A `DateTimeInterval` (block `interval`, reading `timePeriod`).
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    start: Option<i64>,
    duration: Option<u32>,
    place: Place,
}

#[derive(Debug, Default)]
struct BlockRec {
    place: Place,
    /// Start (s since 1970), duration (s), place of `interval`.
    interval: Option<(i64, u32, Place)>,
    /// Its readings: `raws[first..end]`.
    first: usize,
    end: usize,
    links: Links,
}

/// A line and column, packed: one of these per reading is kept until the end.
#[derive(Debug, Clone, Copy, Default)]
struct Pos {
    line: u32,
    column: u32,
}

impl From<Place> for Pos {
    fn from(p: Place) -> Pos {
        Pos {
            line: u32::try_from(p.line).unwrap_or(u32::MAX),
            column: u32::try_from(p.column).unwrap_or(u32::MAX),
        }
    }
}

impl From<Pos> for Place {
    fn from(p: Pos) -> Place {
        Place {
            line: u64::from(p.line),
            column: u64::from(p.column),
        }
    }
}

/// One `IntervalReading` as read. Sentinels instead of `Option`s keep it at 40 bytes.
#[derive(Debug, Clone, Copy)]
struct RawReading {
    /// `timePeriod/start`, s since 1970; [`NONE_I64`] when there is no `timePeriod`.
    start: i64,
    /// `timePeriod/duration`, s; 0 when there is no `timePeriod` (a zero duration is refused).
    duration: u32,
    /// `value`; [`NONE_I64`] when absent (negative values are refused).
    value: i64,
    /// Worst class of its `ReadingQuality` codes; `None` when it has none.
    quality: Option<Quality>,
    has_period: bool,
    place: Pos,
    value_place: Pos,
}

const NONE_I64: i64 = i64::MIN;

/// ESPI's Int48 maximum.
const INT48_MAX: i64 = (1 << 48) - 1;

/// What one pass over the file found.
#[derive(Debug, Default)]
struct Collected {
    usage_points: Vec<UsagePointRec>,
    meter_readings: Vec<MeterReadingRec>,
    reading_types: Vec<ReadingTypeRec>,
    blocks: Vec<BlockRec>,
    raws: Vec<RawReading>,
    local_time: Option<LocalTimeParameters>,
    local_times: usize,
}

/// The reader's state between events.
struct State<'l> {
    limits: &'l Limits,
    stack: Vec<(Tag, Place)>,
    root_seen: bool,
    text: String,
    out: Collected,
    entry: Option<Entry>,
    up: UsagePointRec,
    rt: ReadingTypeFields,
    block: BlockRec,
    reading: RawReading,
    span: Span,
    quality_code: Option<Quality>,
    lt: LocalTimeParameters,
}

fn xml_err(element: &str, place: Place, e: impl std::fmt::Display) -> ImportError {
    ImportError::at(element, place, Reason::Xml(e.to_string()))
}

/// Reads the whole input, returning what it holds or the first error.
fn collect<R: Read>(input: R, limits: &Limits) -> Result<Collected, ImportError> {
    let mut reader = NsReader::from_reader(Bounded::new(input, limits));
    {
        let config = reader.config_mut();
        config.check_end_names = true;
        config.expand_empty_elements = false;
        config.allow_unmatched_ends = false;
    }
    let mut state = State {
        limits,
        stack: Vec::with_capacity(16),
        root_seen: false,
        text: String::new(),
        out: Collected::default(),
        entry: None,
        up: UsagePointRec::default(),
        rt: ReadingTypeFields::default(),
        block: BlockRec::default(),
        reading: RawReading::empty(Place::default()),
        span: Span::default(),
        quality_code: None,
        lt: LocalTimeParameters::default(),
    };
    let mut buf = Vec::new();
    loop {
        buf.clear();
        reader.get_mut().mark();
        let place = reader.get_ref().place();
        let offset = reader.get_ref().offset();
        let (ns, event) = match reader.read_resolved_event_into(&mut buf) {
            Ok((res, ev)) => {
                let ns = match res {
                    ResolveResult::Bound(n) => Ns::of(Some(n.as_ref())),
                    ResolveResult::Unbound => Ns::of(None),
                    ResolveResult::Unknown(p) => {
                        return Err(xml_err("element", place, format!("undeclared namespace prefix {p:?}")));
                    }
                };
                (ns, ev)
            }
            Err(e) => return Err(read_error(e, reader.get_ref(), place, offset)),
        };
        match event {
            Event::Start(e) => {
                let tag = state.open(ns, &e, place)?;
                state.stack.push((tag, place));
            }
            Event::Empty(e) => {
                let tag = state.open(ns, &e, place)?;
                state.close(tag, place)?;
            }
            Event::End(_) => {
                let (tag, start) = state
                    .stack
                    .pop()
                    .ok_or_else(|| xml_err("element", place, "end tag without a start tag"))?;
                state.close(tag, start)?;
            }
            Event::Text(t) => state.text(&t.xml10_content(), place)?,
            Event::CData(t) => state.text(&t.xml10_content(), place)?,
            Event::GeneralRef(r) => {
                let ch = if r.is_char_ref() {
                    match r.resolve_char_ref() {
                        Ok(Some(c)) => c,
                        _ => {
                            return Err(ImportError::at(
                                "reference",
                                place,
                                Reason::Entity {
                                    name: quote(&r.xml10_content()),
                                },
                            ));
                        }
                    }
                } else {
                    let name = r.xml10_content();
                    match &*name {
                        "lt" => '<',
                        "gt" => '>',
                        "amp" => '&',
                        "quot" => '"',
                        "apos" => '\'',
                        _ => {
                            return Err(ImportError::at(
                                "reference",
                                place,
                                Reason::Entity { name: quote(&name) },
                            ));
                        }
                    }
                };
                let mut tmp = [0u8; 4];
                state.text(ch.encode_utf8(&mut tmp), place)?;
            }
            Event::DocType(_) => return Err(ImportError::at("DOCTYPE", place, Reason::Doctype)),
            Event::Decl(d) => {
                if let Some(enc) = d.encoding() {
                    let enc = enc.map_err(|e| xml_err("xml declaration", place, e))?;
                    if !enc.eq_ignore_ascii_case("utf-8") && !enc.eq_ignore_ascii_case("utf8") {
                        return Err(ImportError::at("xml declaration", place, Reason::Encoding(quote(&enc))));
                    }
                }
            }
            Event::Comment(_) | Event::PI(_) => {}
            Event::Eof => break,
        }
    }
    if let Some(&(tag, start)) = state.stack.last() {
        return Err(xml_err(
            tag.name(),
            start,
            "the file ends before this element is closed",
        ));
    }
    if !state.root_seen {
        return Err(ImportError::file(Reason::Xml("no root element".into())));
    }
    Ok(state.out)
}

/// Maps a quick-xml error to the reason, telling a limit hit by [`Bounded`] from a real I/O
/// error.
fn read_error<R: Read>(e: quick_xml::Error, bounded: &Bounded<R>, place: Place, offset: u64) -> ImportError {
    use quick_xml::encoding::EncodingError;
    match e {
        quick_xml::Error::Io(io) => match bounded.hit() {
            Some(reason @ Reason::ReadTooMuch { .. }) => ImportError::file(reason.clone()),
            Some(reason) => ImportError::at("token", place, reason.clone()),
            None => ImportError::file(Reason::Io(io.to_string())),
        },
        quick_xml::Error::Encoding(EncodingError::Utf8(u)) => ImportError::at(
            "file",
            place,
            Reason::NotUtf8 {
                byte: offset + u.valid_up_to() as u64,
                in_line: None,
            },
        ),
        quick_xml::Error::Escape(esc) => ImportError::at("reference", place, Reason::Xml(esc.to_string())),
        other => xml_err("element", place, other),
    }
}

impl RawReading {
    fn empty(place: Place) -> Self {
        RawReading {
            start: NONE_I64,
            duration: 0,
            value: NONE_I64,
            quality: None,
            has_period: false,
            place: place.into(),
            value_place: place.into(),
        }
    }
}

impl State<'_> {
    fn too_many(
        &self,
        place: Place,
        element: &str,
        len: usize,
        limit: usize,
        which: &'static str,
    ) -> Result<(), ImportError> {
        if len >= limit {
            return Err(ImportError::at(element, place, Reason::TooMany { limit, which }));
        }
        Ok(())
    }

    /// A start tag: finds what it is and begins what it starts.
    fn open(&mut self, ns: Ns, e: &BytesStart<'_>, place: Place) -> Result<Tag, ImportError> {
        if self.stack.len() >= self.limits.max_depth {
            return Err(ImportError::at(
                "element",
                place,
                Reason::TooDeep {
                    limit: self.limits.max_depth,
                },
            ));
        }
        let parent = self.stack.last().map(|&(t, _)| t);
        if parent.is_none() {
            if self.root_seen {
                return Err(xml_err("element", place, "a second root element"));
            }
            self.root_seen = true;
        }
        let local = e.local_name();
        let tag = Tag::child(parent, ns, local.as_ref());
        let max_resources = self.limits.max_resources;
        match tag {
            Tag::Entry => self.entry = Some(Entry::default()),
            Tag::Link => self.link(e, place)?,
            Tag::UsagePoint => {
                self.too_many(
                    place,
                    "UsagePoint",
                    self.out.usage_points.len(),
                    max_resources,
                    "max_resources",
                )?;
                self.up = UsagePointRec::default();
            }
            Tag::MeterReading => {
                self.too_many(
                    place,
                    "MeterReading",
                    self.out.meter_readings.len(),
                    max_resources,
                    "max_resources",
                )?;
            }
            Tag::ReadingType => {
                self.too_many(
                    place,
                    "ReadingType",
                    self.out.reading_types.len(),
                    max_resources,
                    "max_resources",
                )?;
                self.rt = ReadingTypeFields {
                    place,
                    ..ReadingTypeFields::default()
                };
            }
            Tag::IntervalBlock => {
                self.too_many(
                    place,
                    "IntervalBlock",
                    self.out.blocks.len(),
                    self.limits.max_blocks,
                    "max_blocks",
                )?;
                self.block = BlockRec {
                    place,
                    first: self.out.raws.len(),
                    ..BlockRec::default()
                };
            }
            Tag::BlockInterval => {
                if self.block.interval.is_some() {
                    return Err(ImportError::at(tag.name(), place, Reason::Duplicate));
                }
                self.span = Span {
                    place,
                    ..Span::default()
                };
            }
            Tag::TimePeriod => {
                if self.reading.has_period {
                    return Err(ImportError::at(tag.name(), place, Reason::Duplicate));
                }
                self.span = Span {
                    place,
                    ..Span::default()
                };
            }
            Tag::IntervalReading => {
                if self.out.raws.len() >= self.limits.max_readings {
                    return Err(ImportError::at(
                        tag.name(),
                        place,
                        Reason::TooManyReadings {
                            limit: self.limits.max_readings,
                        },
                    ));
                }
                self.reading = RawReading::empty(place);
            }
            Tag::ReadingQuality => self.quality_code = None,
            Tag::LocalTimeParameters => {
                self.too_many(
                    place,
                    "LocalTimeParameters",
                    self.out.local_times,
                    max_resources,
                    "max_resources",
                )?;
                self.lt = LocalTimeParameters::default();
            }
            t if t.is_leaf() => self.text.clear(),
            _ => {}
        }
        Ok(tag)
    }

    /// An end tag (or the end of an empty element) of `tag`, which started at `place`.
    fn close(&mut self, tag: Tag, place: Place) -> Result<(), ImportError> {
        if tag.is_leaf() {
            let text = std::mem::take(&mut self.text);
            let result = self.leaf(tag, text.trim(), place);
            self.text = text;
            return result;
        }
        match tag {
            Tag::Entry => {
                if let Some(entry) = self.entry.take()
                    && let Some((res, i)) = entry.resource
                {
                    let links = entry.links;
                    match res {
                        Res::MeterReading => self.out.meter_readings[i].links = links,
                        Res::ReadingType => self.out.reading_types[i].links = links,
                        Res::Block => self.out.blocks[i].links = links,
                        Res::UsagePoint => {}
                    }
                }
            }
            Tag::UsagePoint => {
                let rec = std::mem::take(&mut self.up);
                self.out.usage_points.push(rec);
                self.claim(Res::UsagePoint, self.out.usage_points.len() - 1);
            }
            Tag::MeterReading => {
                self.out.meter_readings.push(MeterReadingRec {
                    place,
                    links: Links::default(),
                });
                self.claim(Res::MeterReading, self.out.meter_readings.len() - 1);
            }
            Tag::ReadingType => {
                let fields = std::mem::take(&mut self.rt);
                self.out.reading_types.push(ReadingTypeRec {
                    fields,
                    links: Links::default(),
                });
                self.claim(Res::ReadingType, self.out.reading_types.len() - 1);
            }
            Tag::IntervalBlock => {
                let mut block = std::mem::take(&mut self.block);
                block.end = self.out.raws.len();
                self.out.blocks.push(block);
                self.claim(Res::Block, self.out.blocks.len() - 1);
            }
            Tag::BlockInterval => {
                let (start, duration) = self.span_parts(tag)?;
                self.block.interval = Some((start, duration, place));
            }
            Tag::TimePeriod => {
                let (start, duration) = self.span_parts(tag)?;
                self.reading.start = start;
                self.reading.duration = duration;
                self.reading.has_period = true;
            }
            Tag::ReadingQuality => {
                let q = self
                    .quality_code
                    .ok_or_else(|| ImportError::at(tag.name(), place, Reason::Missing { what: "quality".into() }))?;
                self.reading.quality = Some(match self.reading.quality {
                    Some(prev) => quality::worse(prev, q),
                    None => q,
                });
            }
            Tag::IntervalReading => self.out.raws.push(self.reading),
            Tag::LocalTimeParameters => {
                self.out.local_times += 1;
                if self.out.local_time.is_none() {
                    self.out.local_time = Some(std::mem::take(&mut self.lt));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Ties a resource to the entry it is in, for the entry's links.
    fn claim(&mut self, res: Res, i: usize) {
        if let Some(entry) = self.entry.as_mut()
            && entry.resource.is_none()
        {
            entry.resource = Some((res, i));
        }
    }

    fn span_parts(&self, tag: Tag) -> Result<(i64, u32), ImportError> {
        let missing =
            |what: &str| ImportError::at(tag.name(), self.span.place, Reason::Missing { what: what.to_string() });
        let start = self.span.start.ok_or_else(|| missing("start"))?;
        let duration = self.span.duration.ok_or_else(|| missing("duration"))?;
        Ok((start, duration))
    }

    /// Text inside the current element.
    fn text(&mut self, chunk: &str, place: Place) -> Result<(), ImportError> {
        match self.stack.last() {
            Some(&(tag, _)) if tag.is_leaf() => {
                if self.text.len() + chunk.len() > self.limits.max_token_bytes {
                    return Err(ImportError::at(
                        tag.name(),
                        place,
                        Reason::TokenTooLong {
                            limit: self.limits.max_token_bytes,
                        },
                    ));
                }
                self.text.push_str(chunk);
            }
            Some(_) => {}
            None if chunk.trim().is_empty() => {}
            None => return Err(xml_err("text", place, "text outside the root element")),
        }
        Ok(())
    }

    /// An Atom link: `rel` and `href` (entity-checked, predefined entities only).
    fn link(&mut self, e: &BytesStart<'_>, place: Place) -> Result<(), ImportError> {
        let Some(entry) = self.entry.as_mut() else {
            return Ok(());
        };
        let mut rel: Option<Cow<'_, str>> = None;
        let mut href: Option<Cow<'_, str>> = None;
        for attr in e.attributes() {
            let attr = attr.map_err(|err| xml_err("link", place, err))?;
            let value = attr
                .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .map_err(|err| {
                    ImportError::at(
                        "link",
                        place,
                        Reason::Entity {
                            name: quote(&err.to_string()),
                        },
                    )
                })?;
            match attr.key.local_name().as_ref() {
                "rel" => rel = Some(value),
                "href" => href = Some(value),
                _ => {}
            }
        }
        let Some(href) = href else { return Ok(()) };
        let href = href.into_owned();
        match rel.as_deref().unwrap_or("alternate") {
            "self" => entry.links.self_href = Some(href),
            "up" => entry.links.up = Some(href),
            "related" => {
                if entry.links.related.len() >= MAX_LINKS {
                    return Err(ImportError::at(
                        "link",
                        place,
                        Reason::TooMany {
                            limit: MAX_LINKS,
                            which: "links per entry",
                        },
                    ));
                }
                entry.links.related.push(href);
            }
            _ => {}
        }
        Ok(())
    }

    /// A leaf's text, parsed into the resource being read.
    fn leaf(&mut self, tag: Tag, text: &str, place: Place) -> Result<(), ImportError> {
        let name = tag.name();
        match tag {
            Tag::ServiceKind => set(&mut self.up.kind, uint(text, name, place)?, name, place),
            Tag::RtLeaf(f) => self.rt_leaf(f, text, place),
            Tag::BlockDuration | Tag::PeriodDuration => {
                let d = duration(text, name, place)?;
                set_opt(&mut self.span.duration, d, name, place)
            }
            Tag::BlockStart | Tag::PeriodStart => {
                let t = time(text, name, place)?;
                set_opt(&mut self.span.start, t, name, place)
            }
            Tag::Value => {
                if self.reading.value != NONE_I64 {
                    return Err(ImportError::at(name, place, Reason::Duplicate));
                }
                self.reading.value = value(text, name, place)?;
                self.reading.value_place = place.into();
                Ok(())
            }
            Tag::QualityCode => {
                let code: u64 = uint(text, name, place)?;
                let class =
                    quality::class_of(code).ok_or_else(|| ImportError::at(name, place, Reason::QualityCode(code)))?;
                set_opt(&mut self.quality_code, class, name, place)
            }
            Tag::LtLeaf(f) => {
                let lt = &mut self.lt;
                match f {
                    LtField::TzOffset => set_opt(&mut lt.tz_offset_s, int(text, name, place)?, name, place),
                    LtField::DstOffset => set_opt(&mut lt.dst_offset_s, int(text, name, place)?, name, place),
                    LtField::DstStartRule => set_opt(&mut lt.dst_start_rule, hex(text, name, place)?, name, place),
                    LtField::DstEndRule => set_opt(&mut lt.dst_end_rule, hex(text, name, place)?, name, place),
                }
            }
            _ => Ok(()),
        }
    }

    fn rt_leaf(&mut self, f: RtField, text: &str, place: Place) -> Result<(), ImportError> {
        let name = Tag::RtLeaf(f).name();
        let rt = &mut self.rt;
        let field = match f {
            RtField::IntervalLength => {
                let v: u32 = uint(text, name, place)?;
                return set(&mut rt.interval_length, v, name, place);
            }
            RtField::PowerOfTenMultiplier => {
                let v = text.parse::<i64>().map_err(|_| {
                    ImportError::at(
                        name,
                        place,
                        Reason::Invalid {
                            value: quote(text),
                            expected: "an integer (ESPI's powerOfTenMultiplier)",
                        },
                    )
                })?;
                let m = i8::try_from(v)
                    .ok()
                    .filter(|m| MULTIPLIERS.contains(m))
                    .ok_or_else(|| ImportError::at(name, place, Reason::Multiplier { value: v }))?;
                return set(&mut rt.power_of_ten_multiplier, m, name, place);
            }
            RtField::AccumulationBehaviour => &mut rt.accumulation_behaviour,
            RtField::Commodity => &mut rt.commodity,
            RtField::Currency => &mut rt.currency,
            RtField::DataQualifier => &mut rt.data_qualifier,
            RtField::DefaultQuality => &mut rt.default_quality,
            RtField::FlowDirection => &mut rt.flow_direction,
            RtField::Kind => &mut rt.kind,
            RtField::Phase => &mut rt.phase,
            RtField::Uom => &mut rt.uom,
        };
        let v: u16 = uint(text, name, place)?;
        set(field, v, name, place)
    }
}

fn set<T>(field: &mut Field<T>, v: T, name: &str, place: Place) -> Result<(), ImportError> {
    if field.value.is_some() {
        return Err(ImportError::at(name, place, Reason::Duplicate));
    }
    *field = Field { value: Some(v), place };
    Ok(())
}

fn set_opt<T>(field: &mut Option<T>, v: T, name: &str, place: Place) -> Result<(), ImportError> {
    if field.is_some() {
        return Err(ImportError::at(name, place, Reason::Duplicate));
    }
    *field = Some(v);
    Ok(())
}

fn invalid(name: &str, place: Place, text: &str, expected: &'static str) -> ImportError {
    ImportError::at(
        name,
        place,
        Reason::Invalid {
            value: quote(text),
            expected,
        },
    )
}

/// An unsigned integer of ESPI's UInt8/16/32 types (the type's range is checked by `T`).
fn uint<T: TryFrom<u64>>(text: &str, name: &str, place: Place) -> Result<T, ImportError> {
    text.parse::<u64>()
        .ok()
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| invalid(name, place, text, "an unsigned integer in the element's ESPI range"))
}

fn int(text: &str, name: &str, place: Place) -> Result<i64, ImportError> {
    text.parse::<i64>()
        .map_err(|_| invalid(name, place, text, "an integer"))
}

/// A packed DST rule: hexadecimal, at most 8 bytes' worth.
fn hex(text: &str, name: &str, place: Place) -> Result<String, ImportError> {
    if text.is_empty() || text.len() > 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(invalid(name, place, text, "a hexadecimal DST rule"));
    }
    Ok(text.to_string())
}

/// A duration (ESPI UInt32 seconds), refusing negative and zero ones by name.
fn duration(text: &str, name: &str, place: Place) -> Result<u32, ImportError> {
    match text.parse::<i64>() {
        Ok(v) if v < 0 => Err(ImportError::at(name, place, Reason::NegativeDuration(quote(text)))),
        Ok(0) => Err(ImportError::at(name, place, Reason::ZeroDuration)),
        Ok(v) => u32::try_from(v).map_err(|_| invalid(name, place, text, "a duration in seconds (UInt32)")),
        Err(_) => Err(invalid(name, place, text, "a duration in whole seconds (UInt32)")),
    }
}

/// A time (ESPI TimeType: seconds since 1970), within 1970..2100.
fn time(text: &str, name: &str, place: Place) -> Result<i64, ImportError> {
    let v = text
        .parse::<i64>()
        .map_err(|_| invalid(name, place, text, "a time in whole seconds since 1970 (TimeType)"))?;
    if crate::series::utc(v).is_none() {
        return Err(ImportError::at(name, place, Reason::TimeRange { value: quote(text) }));
    }
    Ok(v)
}

/// A reading's value (ESPI Int48), refusing negative and non-finite ones by name.
fn value(text: &str, name: &str, place: Place) -> Result<i64, ImportError> {
    match text.parse::<i64>() {
        Ok(v) if v < 0 => Err(ImportError::at(name, place, Reason::NegativeValue(quote(text)))),
        Ok(v) if v > INT48_MAX => Err(invalid(name, place, text, "an ESPI Int48 (at most 2^48 - 1)")),
        Ok(v) => Ok(v),
        Err(_) => match text.parse::<f64>() {
            Ok(f) if !f.is_finite() => Err(ImportError::at(name, place, Reason::NotFinite(quote(text)))),
            Ok(f) if f < 0.0 => Err(ImportError::at(name, place, Reason::NegativeValue(quote(text)))),
            Ok(_) => Err(invalid(
                name,
                place,
                text,
                "an integer (ESPI values are Int48; the ReadingType's powerOfTenMultiplier scales them)",
            )),
            Err(_) => Err(invalid(name, place, text, "an integer")),
        },
    }
}

#[cfg(test)]
mod tests;
