//! Unit tests of the reader on small hand-written documents; the hostile files, the Python
//! writer's feeds and the round trips are in `tests/`.

use super::*;

fn doc(readings: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<IntervalData xmlns="http://naesb.org/espi">
<ReadingType><accumulationBehaviour>4</accumulationBehaviour><commodity>1</commodity><flowDirection>1</flowDirection><intervalLength>900</intervalLength><powerOfTenMultiplier>0</powerOfTenMultiplier><uom>72</uom></ReadingType>
<IntervalBlock><interval><duration>3600</duration><start>1782864000</start></interval>
{readings}
</IntervalBlock>
</IntervalData>"#
    )
}

#[test]
fn a_bare_document_reads_with_implicit_time_periods() {
    let xml = doc(
        "<IntervalReading><value>100</value></IntervalReading>\n<IntervalReading><ReadingQuality><quality>9</quality></ReadingQuality><value>200</value></IntervalReading>\n<IntervalReading/>",
    );
    let got = import_espi(xml.as_bytes(), &Limits::default()).unwrap();
    assert_eq!(got.readings.len(), 3);
    assert_eq!(got.readings[1].start.timestamp(), 1_782_864_900);
    assert_eq!(got.readings[1].quality, Quality::Estimated);
    assert_eq!(got.readings[2].quality, Quality::Missing);
    assert_eq!(got.readings[2].value, None);
    assert_eq!(got.reading_type.interval_length_s, 900);
}

#[test]
fn errors_name_the_element_line_and_column() {
    let xml = doc(
        "<IntervalReading><value>100</value></IntervalReading>\n  <IntervalReading><value>-5</value></IntervalReading>",
    );
    let e = import_espi(xml.as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!(e.element, "IntervalReading/value");
    assert_eq!((e.line, e.column), (Some(6), Some(20)), "{e}");
    assert!(matches!(e.reason, Reason::NegativeValue(_)), "{e}");
}

#[test]
fn duplicates_are_refused() {
    let xml = doc("<IntervalReading><value>1</value><value>2</value></IntervalReading>");
    let e = import_espi(xml.as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!(e.reason, Reason::Duplicate, "{e}");
}
