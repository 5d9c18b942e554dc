//! Which element is which: an element is known by its parent and its local name, and must be
//! in its own namespace (Atom's for the feed, ESPI's for the resources) or in none (some
//! producers leave the resources unqualified).

/// Atom (RFC 4287).
pub(crate) const NS_ATOM: &str = "http://www.w3.org/2005/Atom";
/// NAESB ESPI.
pub(crate) const NS_ESPI: &str = "http://naesb.org/espi";

/// An element's namespace, as far as this reader cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ns {
    Atom,
    Espi,
    /// No namespace.
    None,
    /// Any other.
    Other,
}

impl Ns {
    pub(crate) fn of(uri: Option<&str>) -> Ns {
        match uri {
            None => Ns::None,
            Some(NS_ATOM) => Ns::Atom,
            Some(NS_ESPI) => Ns::Espi,
            Some(_) => Ns::Other,
        }
    }
}

/// A field of a `ReadingType` that is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RtField {
    AccumulationBehaviour,
    Commodity,
    Currency,
    DataQualifier,
    DefaultQuality,
    FlowDirection,
    IntervalLength,
    Kind,
    Phase,
    PowerOfTenMultiplier,
    Uom,
}

impl RtField {
    fn of(name: &str) -> Option<RtField> {
        Some(match name {
            "accumulationBehaviour" => RtField::AccumulationBehaviour,
            "commodity" => RtField::Commodity,
            "currency" => RtField::Currency,
            "dataQualifier" => RtField::DataQualifier,
            "defaultQuality" => RtField::DefaultQuality,
            "flowDirection" => RtField::FlowDirection,
            "intervalLength" => RtField::IntervalLength,
            "kind" => RtField::Kind,
            "phase" => RtField::Phase,
            "powerOfTenMultiplier" => RtField::PowerOfTenMultiplier,
            "uom" => RtField::Uom,
            _ => return None,
        })
    }
}

/// A field of `LocalTimeParameters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LtField {
    DstEndRule,
    DstOffset,
    DstStartRule,
    TzOffset,
}

/// An element in its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tag {
    /// An element outside every resource that is none of the below (a wrapper, Atom's `title`,
    /// `id`...): resources inside it are still found, so a bare ESPI document in any wrapper
    /// reads.
    Container,
    /// An unknown element inside a resource: ignored with all it holds.
    Ignored,
    Feed,
    Entry,
    Link,
    Content,
    UsagePoint,
    ServiceCategory,
    ServiceKind,
    MeterReading,
    ReadingType,
    RtLeaf(RtField),
    IntervalBlock,
    BlockInterval,
    BlockDuration,
    BlockStart,
    IntervalReading,
    TimePeriod,
    PeriodDuration,
    PeriodStart,
    Value,
    ReadingQuality,
    QualityCode,
    LocalTimeParameters,
    LtLeaf(LtField),
}

impl Tag {
    /// The element's name in errors (with its parent where the local name is ambiguous).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Tag::Container | Tag::Ignored => "element",
            Tag::Feed => "feed",
            Tag::Entry => "entry",
            Tag::Link => "link",
            Tag::Content => "content",
            Tag::UsagePoint => "UsagePoint",
            Tag::ServiceCategory => "UsagePoint/ServiceCategory",
            Tag::ServiceKind => "UsagePoint/ServiceCategory/kind",
            Tag::MeterReading => "MeterReading",
            Tag::ReadingType => "ReadingType",
            Tag::RtLeaf(f) => match f {
                RtField::AccumulationBehaviour => "ReadingType/accumulationBehaviour",
                RtField::Commodity => "ReadingType/commodity",
                RtField::Currency => "ReadingType/currency",
                RtField::DataQualifier => "ReadingType/dataQualifier",
                RtField::DefaultQuality => "ReadingType/defaultQuality",
                RtField::FlowDirection => "ReadingType/flowDirection",
                RtField::IntervalLength => "ReadingType/intervalLength",
                RtField::Kind => "ReadingType/kind",
                RtField::Phase => "ReadingType/phase",
                RtField::PowerOfTenMultiplier => "ReadingType/powerOfTenMultiplier",
                RtField::Uom => "ReadingType/uom",
            },
            Tag::IntervalBlock => "IntervalBlock",
            Tag::BlockInterval => "IntervalBlock/interval",
            Tag::BlockDuration => "IntervalBlock/interval/duration",
            Tag::BlockStart => "IntervalBlock/interval/start",
            Tag::IntervalReading => "IntervalReading",
            Tag::TimePeriod => "IntervalReading/timePeriod",
            Tag::PeriodDuration => "IntervalReading/timePeriod/duration",
            Tag::PeriodStart => "IntervalReading/timePeriod/start",
            Tag::Value => "IntervalReading/value",
            Tag::ReadingQuality => "IntervalReading/ReadingQuality",
            Tag::QualityCode => "IntervalReading/ReadingQuality/quality",
            Tag::LocalTimeParameters => "LocalTimeParameters",
            Tag::LtLeaf(f) => match f {
                LtField::DstEndRule => "LocalTimeParameters/dstEndRule",
                LtField::DstOffset => "LocalTimeParameters/dstOffset",
                LtField::DstStartRule => "LocalTimeParameters/dstStartRule",
                LtField::TzOffset => "LocalTimeParameters/tzOffset",
            },
        }
    }

    /// Whether the element's text is read.
    pub(crate) fn is_leaf(self) -> bool {
        matches!(
            self,
            Tag::ServiceKind
                | Tag::RtLeaf(_)
                | Tag::BlockDuration
                | Tag::BlockStart
                | Tag::PeriodDuration
                | Tag::PeriodStart
                | Tag::Value
                | Tag::QualityCode
                | Tag::LtLeaf(_)
        )
    }

    /// The tag of a child `name` in namespace `ns` of an element tagged `parent` (`None`: the
    /// root).
    pub(crate) fn child(parent: Option<Tag>, ns: Ns, name: &str) -> Tag {
        let atom = matches!(ns, Ns::Atom | Ns::None);
        let espi = matches!(ns, Ns::Espi | Ns::None);
        let outside = matches!(
            parent,
            None | Some(Tag::Container | Tag::Feed | Tag::Entry | Tag::Content)
        );
        if outside {
            if espi {
                match name {
                    "UsagePoint" => return Tag::UsagePoint,
                    "MeterReading" => return Tag::MeterReading,
                    "ReadingType" => return Tag::ReadingType,
                    "IntervalBlock" => return Tag::IntervalBlock,
                    "LocalTimeParameters" => return Tag::LocalTimeParameters,
                    _ => {}
                }
            }
            if atom {
                match (parent, name) {
                    (None, "feed") => return Tag::Feed,
                    (None | Some(Tag::Feed), "entry") => return Tag::Entry,
                    (Some(Tag::Entry), "link") => return Tag::Link,
                    (Some(Tag::Entry), "content") => return Tag::Content,
                    _ => {}
                }
            }
            return Tag::Container;
        }
        if !espi {
            return Tag::Ignored;
        }
        match (parent, name) {
            (Some(Tag::UsagePoint), "ServiceCategory") => Tag::ServiceCategory,
            (Some(Tag::ServiceCategory), "kind") => Tag::ServiceKind,
            (Some(Tag::ReadingType), n) => RtField::of(n).map_or(Tag::Ignored, Tag::RtLeaf),
            (Some(Tag::IntervalBlock), "interval") => Tag::BlockInterval,
            (Some(Tag::IntervalBlock), "IntervalReading") => Tag::IntervalReading,
            (Some(Tag::BlockInterval), "duration") => Tag::BlockDuration,
            (Some(Tag::BlockInterval), "start") => Tag::BlockStart,
            (Some(Tag::IntervalReading), "timePeriod") => Tag::TimePeriod,
            (Some(Tag::IntervalReading), "value") => Tag::Value,
            (Some(Tag::IntervalReading), "ReadingQuality") => Tag::ReadingQuality,
            (Some(Tag::TimePeriod), "duration") => Tag::PeriodDuration,
            (Some(Tag::TimePeriod), "start") => Tag::PeriodStart,
            (Some(Tag::ReadingQuality), "quality") => Tag::QualityCode,
            (Some(Tag::LocalTimeParameters), "dstEndRule") => Tag::LtLeaf(LtField::DstEndRule),
            (Some(Tag::LocalTimeParameters), "dstOffset") => Tag::LtLeaf(LtField::DstOffset),
            (Some(Tag::LocalTimeParameters), "dstStartRule") => Tag::LtLeaf(LtField::DstStartRule),
            (Some(Tag::LocalTimeParameters), "tzOffset") => Tag::LtLeaf(LtField::TzOffset),
            _ => Tag::Ignored,
        }
    }
}
