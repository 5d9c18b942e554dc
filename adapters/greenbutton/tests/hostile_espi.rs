//! Bad and hostile Green Button files: each is refused whole, with an error naming the element
//! and the line where a person would look, and memory stays bounded while reading.
// Test helpers outside #[test] functions unwrap too: a failure is the test's failure.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::time::Instant;

use common::{RT, T0, block, feed, good, line_of, reading, readings};
use flexgate_greenbutton::{ImportError, Limits, Reason, import_espi, import_espi_file};

fn refuse(doc: &str) -> ImportError {
    match import_espi(doc.as_bytes(), &Limits::default()) {
        Ok(got) => panic!("accepted {} readings of a bad file", got.readings.len()),
        Err(e) => e,
    }
}

#[test]
fn the_good_file_reads() {
    let got = import_espi(good().as_bytes(), &Limits::default()).unwrap();
    assert_eq!(got.readings.len(), 96);
    assert_eq!(got.readings[0].value, Some(250.0));
}

#[test]
fn a_multiplier_outside_espi_is_refused_at_its_element() {
    let doc = feed(
        &RT.replace(">0</espi:powerOfTenMultiplier>", ">7</espi:powerOfTenMultiplier>"),
        &block(T0, 86_400, &readings(T0, 96, 250)),
    );
    let e = refuse(&doc);
    assert_eq!(e.element, "ReadingType/powerOfTenMultiplier");
    assert_eq!(e.line, Some(10));
    assert_eq!(e.reason, Reason::Multiplier { value: 7 });
    assert!(e.to_string().starts_with("line 10, column "), "{e}");
}

#[test]
fn a_multiplier_that_makes_values_absurd_is_refused_at_the_first_absurd_value() {
    // 250 × 10^9 Wh in 15 minutes is a mean of 1 TW: a kilo-for-giga slip.
    let doc = feed(
        &RT.replace(">0</espi:powerOfTenMultiplier>", ">9</espi:powerOfTenMultiplier>"),
        &block(T0, 86_400, &readings(T0, 96, 250)),
    );
    let e = refuse(&doc);
    assert_eq!(e.element, "IntervalReading/value");
    assert_eq!(e.line, Some(line_of(&doc, "<espi:IntervalReading>")));
    assert!(
        matches!(
            e.reason,
            Reason::Absurd {
                value: 250,
                multiplier: 9,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("is the powerOfTenMultiplier right?"), "{e}");
    // The same values at 10^3 (kWh) are a plausible 1 MW.
    let ok = feed(
        &RT.replace(">0</espi:powerOfTenMultiplier>", ">3</espi:powerOfTenMultiplier>"),
        &block(T0, 86_400, &readings(T0, 96, 250)),
    );
    assert_eq!(
        import_espi(ok.as_bytes(), &Limits::default()).unwrap().readings[0].value,
        Some(250_000.0)
    );
}

#[test]
fn overlapping_intervals_are_refused_at_the_second() {
    let rs = format!("{}{}", reading(T0, 900, "1"), reading(T0 + 600, 900, "1"));
    let doc = feed(RT, &block(T0, 86_400, &rs));
    let e = refuse(&doc);
    assert_eq!(e.element, "IntervalReading");
    assert_eq!(
        e.line,
        Some(line_of(&doc, &format!("<espi:start>{}</espi:start>", T0 + 600)))
    );
    assert!(matches!(e.reason, Reason::Overlap { .. }), "{e}");
}

#[test]
fn out_of_order_intervals_are_refused_within_and_across_blocks() {
    let rs = format!("{}{}", reading(T0 + 900, 900, "1"), reading(T0, 900, "1"));
    let e = refuse(&feed(RT, &block(T0, 86_400, &rs)));
    assert!(matches!(e.reason, Reason::OutOfOrder { .. }), "{e}");
    // Two blocks in the wrong order: the second one's first reading is named.
    let doc = feed(
        RT,
        &format!(
            "{}{}",
            block(T0 + 86_400, 86_400, &readings(T0 + 86_400, 96, 1)),
            block(T0, 86_400, &readings(T0, 96, 1))
        ),
    );
    let e = refuse(&doc);
    assert!(matches!(e.reason, Reason::OutOfOrder { .. }), "{e}");
    assert_eq!(
        e.line,
        Some(line_of(
            &doc,
            &format!("<espi:start>{T0}</espi:start></espi:timePeriod>")
        ))
    );
}

#[test]
fn reading_types_the_site_cannot_use_are_refused_naming_the_element() {
    let cases = [
        (
            "<espi:commodity>1<",
            "<espi:commodity>7<",
            "ReadingType/commodity",
            "natural gas",
        ),
        ("<espi:uom>72<", "<espi:uom>169<", "ReadingType/uom", "therm"),
        ("<espi:uom>72<", "<espi:uom>73<", "ReadingType/uom", "reactive"),
        (
            "<espi:flowDirection>1<",
            "<espi:flowDirection>19<",
            "ReadingType/flowDirection",
            "reverse",
        ),
        (
            "<espi:accumulationBehaviour>4<",
            "<espi:accumulationBehaviour>1<",
            "ReadingType/accumulationBehaviour",
            "register",
        ),
        (
            "<espi:accumulationBehaviour>4<",
            "<espi:accumulationBehaviour>12<",
            "ReadingType/accumulationBehaviour",
            "instantaneous",
        ),
        (
            "<espi:kind>12<",
            "<espi:kind>12</espi:kind><espi:dataQualifier>8<",
            "ReadingType/dataQualifier",
            "maximum",
        ),
    ];
    for (from, to, element, why) in cases {
        let rt = RT.replace(from, to).replace("</espi:kind></espi:kind>", "</espi:kind>");
        let rt = if to.contains("dataQualifier") {
            RT.replace(
                "<espi:flowDirection>",
                "<espi:dataQualifier>8</espi:dataQualifier><espi:flowDirection>",
            )
        } else {
            rt
        };
        let e = refuse(&feed(&rt, &block(T0, 86_400, &readings(T0, 96, 250))));
        assert_eq!(e.element, element, "{e}");
        assert_eq!(e.line, Some(10));
        assert!(matches!(e.reason, Reason::Unusable(_)), "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
    // A gas UsagePoint says so even when its ReadingType does not name the commodity.
    let doc = good().replace("<espi:kind>0</espi:kind>", "<espi:kind>1</espi:kind>");
    let e = refuse(&doc);
    assert_eq!(e.element, "UsagePoint/ServiceCategory/kind");
    assert!(e.to_string().contains("gas"), "{e}");
}

#[test]
fn a_reading_outside_its_block_is_refused() {
    let doc = feed(RT, &block(T0, 3600, &readings(T0, 5, 1)));
    let e = refuse(&doc);
    assert!(matches!(e.reason, Reason::OutsideBlock { .. }), "{e}");
    assert_eq!(
        e.line,
        Some(line_of(&doc, &format!("<espi:start>{}</espi:start>", T0 + 3600)))
    );
}

#[test]
fn negative_and_zero_durations_are_named() {
    let e = refuse(&feed(RT, &block(T0, 86_400, &reading(T0, -900, "1"))));
    assert_eq!(e.element, "IntervalReading/timePeriod/duration");
    assert_eq!(e.reason, Reason::NegativeDuration("-900".into()));
    let e = refuse(&feed(RT, &block(T0, -86_400, &reading(T0, 900, "1"))));
    assert_eq!(e.element, "IntervalBlock/interval/duration");
    assert!(matches!(e.reason, Reason::NegativeDuration(_)));
    let e = refuse(&feed(RT, &block(T0, 86_400, &reading(T0, 0, "1"))));
    assert_eq!(e.reason, Reason::ZeroDuration);
}

#[test]
fn values_that_are_negative_nan_or_not_integers_are_named() {
    for (v, want) in [
        ("-5", "negative"),
        ("NaN", "not a finite number"),
        ("inf", "not a finite number"),
        ("12.5", "Int48"),
        ("twelve", "an integer"),
        ("281474976710656", "Int48"),
    ] {
        let doc = feed(
            RT,
            &block(
                T0,
                86_400,
                &format!("{}{}", reading(T0, 900, "1"), reading(T0 + 900, 900, v)),
            ),
        );
        let e = refuse(&doc);
        assert_eq!(e.element, "IntervalReading/value");
        assert_eq!(e.line, Some(line_of(&doc, &format!(">{v}</espi:value>"))), "{v}");
        assert!(e.to_string().contains(want), "{v}: {e}");
    }
}

#[test]
fn mixed_interval_lengths_are_refused() {
    let rs = format!("{}{}", reading(T0, 900, "1"), reading(T0 + 900, 300, "1"));
    let e = refuse(&feed(RT, &block(T0, 86_400, &rs)));
    assert!(
        matches!(
            e.reason,
            Reason::Length {
                got_s: 300,
                expected_s: 900,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn missing_required_elements_are_named() {
    let e = refuse(&feed(
        &RT.replace("<espi:uom>72</espi:uom>", ""),
        &block(T0, 86_400, &readings(T0, 4, 1)),
    ));
    assert_eq!((e.element.as_str(), e.line), ("ReadingType", Some(10)));
    assert!(e.to_string().contains("uom is required"), "{e}");
    let e = refuse(&feed(
        &RT.replace("<espi:intervalLength>900</espi:intervalLength>", ""),
        &block(T0, 86_400, &readings(T0, 4, 1)),
    ));
    assert!(e.to_string().contains("intervalLength"), "{e}");
    let no_rt = good().replace(&format!("<espi:ReadingType>{RT}</espi:ReadingType>"), "");
    let e = refuse(&no_rt);
    assert!(e.to_string().contains("ReadingType"), "{e}");
    let doc = feed(
        RT,
        &block(
            T0,
            86_400,
            "<espi:IntervalReading><espi:timePeriod><espi:duration>900</espi:duration></espi:timePeriod><espi:value>1</espi:value></espi:IntervalReading>\n",
        ),
    );
    let e = refuse(&doc);
    assert_eq!(e.element, "IntervalReading/timePeriod");
    assert!(e.to_string().contains("start is required"), "{e}");
    let e = refuse(&feed(
        RT,
        &block(
            T0,
            86_400,
            "<espi:IntervalReading><espi:ReadingQuality/><espi:value>1</espi:value></espi:IntervalReading>",
        ),
    ));
    assert_eq!(e.element, "IntervalReading/ReadingQuality");
}

#[test]
fn unknown_quality_codes_and_times_in_milliseconds_are_refused() {
    let doc = feed(
        RT,
        &block(
            T0,
            86_400,
            &reading(T0, 900, "1").replace(
                "<espi:timePeriod>",
                "<espi:ReadingQuality><espi:quality>42</espi:quality></espi:ReadingQuality><espi:timePeriod>",
            ),
        ),
    );
    assert_eq!(refuse(&doc).reason, Reason::QualityCode(42));
    let ms = T0 * 1000;
    let e = refuse(&feed(RT, &block(T0, 86_400, &reading(ms, 900, "1"))));
    assert!(matches!(e.reason, Reason::TimeRange { .. }), "{e}");
    assert!(e.to_string().contains("milliseconds?"), "{e}");
}

#[test]
fn a_dtd_is_refused_before_any_entity_is_expanded() {
    // The billion laughs: refused at the DOCTYPE, line 2, without expanding anything.
    let laughs = r#"<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;"><!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<feed xmlns="http://www.w3.org/2005/Atom"><title>&lol3;</title></feed>"#;
    let e = refuse(laughs);
    assert_eq!((e.element.as_str(), e.line, e.column), ("DOCTYPE", Some(2), Some(1)));
    assert_eq!(e.reason, Reason::Doctype);
    // An external entity (XXE) likewise.
    let xxe = good().replacen(
        "<feed",
        "<!DOCTYPE feed [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]>\n<feed",
        1,
    );
    assert_eq!(refuse(&xxe).reason, Reason::Doctype);
    // A reference to an entity that no DTD declared.
    let doc = good().replacen("<espi:value>250</espi:value>", "<espi:value>&big;</espi:value>", 1);
    let e = refuse(&doc);
    assert_eq!(e.reason, Reason::Entity { name: "big".into() });
    assert_eq!(e.line, Some(line_of(&doc, "&big;")));
    // Predefined entities and character references are plain XML: they read.
    let ok = good().replacen("<espi:value>250</espi:value>", "<espi:value>&#50;50</espi:value>", 1);
    assert_eq!(
        import_espi(ok.as_bytes(), &Limits::default()).unwrap().readings[0].value,
        Some(250.0)
    );
}

#[test]
fn a_two_gigabyte_file_is_refused_at_once_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.xml");
    let f = std::fs::File::create(&path).unwrap();
    // Sparse: no disk is used and nothing could be read in time anyway.
    f.set_len(2 * 1024 * 1024 * 1024).unwrap();
    drop(f);
    let t = Instant::now();
    let e = import_espi_file(&path, &Limits::default()).unwrap_err();
    assert!(t.elapsed().as_millis() < 500, "took {:?}", t.elapsed());
    assert_eq!(e.element, "file");
    assert_eq!(
        e.reason,
        Reason::TooLarge {
            size: 2 * 1024 * 1024 * 1024,
            limit: 512 * 1024 * 1024
        }
    );
    assert!(e.to_string().contains("nothing was read"), "{e}");
}

#[test]
fn a_stream_past_the_byte_limit_is_refused_when_it_passes_it() {
    let limits = Limits {
        max_bytes: 1 << 20,
        ..Limits::default()
    };
    // An endless document: a root, then small elements forever (each token is short, so only
    // the byte limit can stop it).
    struct Endless(usize);
    impl Read for Endless {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            const UNIT: &[u8] = b"<x/>\n";
            for b in out.iter_mut() {
                *b = UNIT[self.0 % UNIT.len()];
                self.0 += 1;
            }
            Ok(out.len())
        }
    }
    let endless = "<feed xmlns=\"http://www.w3.org/2005/Atom\">"
        .as_bytes()
        .chain(Endless(0));
    let e = import_espi(endless, &limits).unwrap_err();
    assert_eq!(e.reason, Reason::ReadTooMuch { limit: 1 << 20 });
}

#[test]
fn one_huge_text_or_tag_is_refused_at_the_token_limit() {
    let text = format!(
        "<feed xmlns=\"http://www.w3.org/2005/Atom\"><title>{}</title></feed>",
        "x".repeat(1 << 20)
    );
    let e = refuse(&text);
    assert!(matches!(e.reason, Reason::TokenTooLong { limit: 65_536 }), "{e}");
    let tag = format!(
        "<feed xmlns=\"http://www.w3.org/2005/Atom\" a=\"{}\"/>",
        "x".repeat(1 << 20)
    );
    assert!(matches!(refuse(&tag).reason, Reason::TokenTooLong { .. }));
}

#[test]
fn deep_nesting_and_too_many_readings_are_refused() {
    let deep = format!("{}{}", "<a>".repeat(100), "</a>".repeat(100));
    assert_eq!(refuse(&deep).reason, Reason::TooDeep { limit: 32 });
    let limits = Limits {
        max_readings: 50,
        ..Limits::default()
    };
    let doc = good();
    let e = import_espi(doc.as_bytes(), &limits).unwrap_err();
    assert_eq!(e.reason, Reason::TooManyReadings { limit: 50 });
    assert_eq!(e.element, "IntervalReading");
}

#[test]
fn non_utf8_malformed_and_truncated_files_are_refused() {
    let mut bytes = good().into_bytes();
    let at = bytes.windows(5).position(|w| w == b"<titl").unwrap() + 7;
    bytes[at] = 0xFF;
    let e = import_espi(&bytes[..], &Limits::default()).unwrap_err();
    assert!(matches!(e.reason, Reason::NotUtf8 { .. }), "{e}");
    assert_eq!(e.line, Some(3));
    let latin1 = good().replacen("encoding=\"UTF-8\"", "encoding=\"ISO-8859-1\"", 1);
    assert_eq!(refuse(&latin1).reason, Reason::Encoding("ISO-8859-1".into()));
    let doc = good();
    let truncated = &doc[..doc.len() / 2];
    assert!(matches!(refuse(truncated).reason, Reason::Xml(_)));
    let mismatched = good().replacen("</espi:IntervalBlock>", "</espi:IntervalBlocks>", 1);
    assert!(matches!(refuse(&mismatched).reason, Reason::Xml(_)));
    assert!(matches!(refuse("").reason, Reason::Xml(_)));
    assert!(matches!(refuse("<a/><b/>").reason, Reason::Xml(_)));
}

#[test]
fn an_unlinked_block_among_several_meters_is_refused() {
    // A second MeterReading makes links decide; a block with no matching link cannot be placed.
    let doc = good()
        .replacen(
            "<entry><id>urn:test:rt</id>",
            "<entry><id>urn:test:mr2</id><link rel=\"self\" href=\"UsagePoint/1/MeterReading/2\"/><link rel=\"related\" href=\"ReadingType/1\"/><title>mr2</title><updated>2026-07-02T00:00:00Z</updated><content><espi:MeterReading/></content></entry>\n<entry><id>urn:test:rt</id>",
            1,
        )
        .replace("rel=\"up\" href=\"UsagePoint/1/MeterReading/1/", "rel=\"up\" href=\"UsagePoint/1/MeterReading/9/")
        .replace("MeterReading/1/IntervalBlock/", "MeterReading/9/IntervalBlock/");
    let e = refuse(&doc);
    assert_eq!(e.reason, Reason::Unlinked);
    assert_eq!(e.element, "IntervalBlock");
}
