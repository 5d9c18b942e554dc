//! The OpenADR 3 decoder's own rules, beyond what `oadr3.rs` checks on fixtures: duplicate keys
//! are refused with their path; numbers, durations and timestamps read exactly as serde_json,
//! the previous duration parser and chrono read them (the decoder reads them itself, for speed,
//! so each is compared with the reference on many inputs); every limit still holds wherever the
//! value stands; and the kind of a document is found whatever order its members come in.

use chrono::{DateTime, TimeDelta, Utc};
use flexgate_openadr::oadr3::{
    DecodeError, Document, DurationError, Event, IsoDuration, Limits, NotifiedObject, PayloadValue, decode_any,
    decode_any_with_limits, decode_events, parse_timestamp,
};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/oadr3/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// A small deterministic generator (xorshift), so the generated cases are the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

// ---------------------------------------------------------------- duplicate keys

#[test]
fn duplicate_keys_are_refused_with_their_path() {
    let cases: [(&[u8], &str); 10] = [
        (
            br#"{"programID":"p","priority":1,"priority":0,"intervals":[]}"#,
            "priority",
        ),
        (
            br#"[{"programID":"p","intervals":[{"id":0,"id":1,"payloads":[]}]}]"#,
            "[0].intervals[0].id",
        ),
        (
            br#"{"programID":"p","x-vendor":1,"intervals":[],"x-vendor":2}"#,
            "x-vendor",
        ),
        (
            br#"{"programID":"p","targets":[{"type":"GROUP","type":"VEN_NAME","values":["v"]}],"intervals":[]}"#,
            "targets[0].type",
        ),
        (
            br#"{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"CURVE","values":[{"x":1,"x":2}]}]}]}"#,
            "intervals[0].payloads[0].values[0].x",
        ),
        (
            br#"{"operation":"PUT","objectType":"EVENT","operation":"DELETE","object":{"programID":"p"}}"#,
            "operation",
        ),
        // A key that says what the document is, twice: refused before either value decides.
        (
            br#"{"objectType":"PROGRAM","programName":"n","objectType":"EVENT"}"#,
            "objectType",
        ),
        // The same key, once escaped: the same member.
        (
            br#"{"id":"a","\u0069d":"b","programID":"p","intervals":[]}"#,
            "\\u0069d",
        ),
        (
            br#"{"programName":"n","payloadDescriptors":[{"payloadType":"A","payloadType":"B"}]}"#,
            "payloadDescriptors[0].payloadType",
        ),
        (
            br#"{"operation":"POST","object":{"programID":"p","intervals":[],"programID":"q"}}"#,
            "object.programID",
        ),
    ];
    for (doc, path) in cases {
        let text = String::from_utf8_lossy(doc);
        let e = decode_any(doc).expect_err(&text);
        assert_eq!(
            e.to_string(),
            format!("{path}: appears more than once; send each field once"),
            "{text}"
        );
        assert_eq!(e, DecodeError::Duplicate { path: path.into() }, "{text}");
    }
    // The client's GET /events path refuses them too.
    let e = decode_events(
        br#"[{"programID":"p","intervals":[]},{"programID":"p","programID":"q","intervals":[]}]"#,
        &Limits::default(),
    )
    .expect_err("duplicate in the second event");
    assert_eq!(
        e,
        DecodeError::Duplicate {
            path: "[1].programID".into()
        }
    );
}

#[test]
fn equal_values_under_different_keys_are_not_duplicates() {
    let doc =
        br#"{"programID":"p","a":1,"b":1,"intervals":[{"id":0,"payloads":[{"type":"X","values":[{"x":1,"y":1}]}]}]}"#;
    let Document::Event(e) = decode_any(doc).expect("decodes") else {
        panic!("an event")
    };
    assert_eq!(e.extra.len(), 2);
    assert_eq!(
        e.intervals[0].payloads[0].values[0],
        PayloadValue::Point { x: 1.0, y: 1.0 }
    );
}

// ---------------------------------------------------------------- numbers as serde_json reads them

/// The payload value the decoder reads for the JSON number `text`.
fn decoded_number(text: &str) -> Result<serde_json::Number, DecodeError> {
    let doc = format!(r#"{{"programID":"p","intervals":[{{"id":0,"payloads":[{{"type":"X","values":[{text}]}}]}}]}}"#);
    let Document::Event(e) = decode_any(doc.as_bytes())? else {
        panic!("{doc}: not an event")
    };
    match &e.intervals[0].payloads[0].values[0] {
        PayloadValue::Number(n) => Ok(n.clone()),
        other => panic!("{text}: decoded as {other:?}"),
    }
}

/// Same variant (u64, i64 or f64) and the same bits.
fn same_number(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    (a.as_u64(), a.as_i64(), a.is_f64(), a.as_f64().map(f64::to_bits))
        == (b.as_u64(), b.as_i64(), b.is_f64(), b.as_f64().map(f64::to_bits))
}

#[test]
fn numbers_read_as_serde_json_reads_them() {
    let awkward = [
        "0",
        "-0",
        "-0.0",
        "800",
        "800.0",
        "0.1",
        "0.30000000000000004",
        "1e2",
        "1E-7",
        "2.5e+3",
        "123456.789012345",
        "1234567890.12345",
        "0.000001",
        "9007199254740993",
        "9007199254740993.0",
        "123456789012345678",
        "9999999999999999999",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "3.141592653589793238462643",
        "44444444444444444444444444444444444444444444445.2",
        "2.2250738585072014e-308",
        "5e-324",
        "1e-400",
        "1.7976931348623157e308",
        "100000000000000000000000000000000000000000000000000000000000000000000000000000",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let digits = |rng: &mut Rng, n: usize| -> String {
        let mut s: String = (0..n).map(|_| char::from(b'0' + rng.below(10) as u8)).collect();
        if s.len() > 1 && s.starts_with('0') {
            s.replace_range(0..1, "1");
        }
        s
    };
    let mut generated = Vec::new();
    for _ in 0..3000 {
        let int_len = 1 + rng.below(20);
        let int = digits(&mut rng, int_len);
        let sign = if rng.below(3) == 0 { "-" } else { "" };
        let text = match rng.below(3) {
            0 => format!("{sign}{int}"),
            1 => {
                // Fraction digits may start with zeros: built backwards from a digit string.
                let frac_len = 1 + rng.below(18);
                let frac: String = digits(&mut rng, frac_len).chars().rev().collect();
                format!("{sign}{int}.{frac}")
            }
            _ => format!("{sign}{int}e{}{}", rng.pick(&["", "+", "-"]), rng.below(320)),
        };
        generated.push(text);
    }
    for text in awkward.iter().map(|s| s.to_string()).chain(generated) {
        match serde_json::from_str::<serde_json::Number>(&text) {
            Ok(expected) => {
                let got = decoded_number(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
                assert!(
                    same_number(&got, &expected),
                    "{text}: decoded {got:?}, serde_json {expected:?}"
                );
            }
            // serde_json refuses what does not fit an f64; the decoder says where it is.
            Err(_) => assert_eq!(
                decoded_number(&text),
                Err(DecodeError::Number {
                    path: "intervals[0].payloads[0].values[0]".into(),
                    text: if text.len() > 64 {
                        format!("{}…", &text[..64])
                    } else {
                        text.clone()
                    },
                }),
                "{text}"
            ),
        }
    }
}

#[test]
fn the_model_decodes_as_plain_serde_decodes_it() {
    let bench =
        std::fs::read(format!("{}/benches/inputs/events_200.json", env!("CARGO_MANIFEST_DIR"))).expect("bench input");
    let via_serde: Vec<Event> = serde_json::from_slice(&bench).expect("serde");
    assert_eq!(
        decode_events(&bench, &Limits::default()).expect("decode_events"),
        via_serde
    );
    assert_eq!(decode_any(&bench).expect("decode_any"), Document::Events(via_serde));
    for name in [
        "v31_events_capacity.json",
        "verbose_durations.json",
        "all_payload_types.json",
        "per_interval_overrides.json",
        "multi_value_price.json",
        "out_of_range.json",
    ] {
        let bytes = fixture(name);
        // A list, or a single event (which decode_events reads as a list of one).
        let via_serde: Vec<Event> = serde_json::from_slice(&bytes)
            .or_else(|_| serde_json::from_slice::<Event>(&bytes).map(|e| vec![e]))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let decoded = decode_events(&bytes, &Limits::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(decoded, via_serde, "{name}");
    }
}

// ---------------------------------------------------------------- durations and timestamps

/// The ISO 8601 duration parser as it was before it stopped allocating (reference).
fn reference_duration(input: &str) -> Result<(u32, u32, TimeDelta), DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let s = match s.as_bytes()[0] {
        b'-' => return Err(DurationError::Negative),
        b'+' => &s[1..],
        _ => s,
    };
    let s = s.strip_prefix('P').ok_or(DurationError::MissingP)?;
    const DATE: [char; 4] = ['Y', 'M', 'W', 'D'];
    const TIME: [char; 3] = ['H', 'M', 'S'];
    let (mut in_time, mut next_idx, mut years, mut months) = (false, 0usize, 0u32, 0u32);
    let (mut nanos, mut components, mut time_components) = (0i128, 0, 0);
    let mut num = String::new();
    let mut saw_fraction = false;
    for c in s.chars() {
        if c.is_ascii_digit() || c == '.' || c == ',' {
            if saw_fraction {
                return Err(DurationError::Fraction);
            }
            if num.len() > 40 {
                return Err(DurationError::Overflow);
            }
            num.push(if c == ',' { '.' } else { c });
            continue;
        }
        if c == 'T' {
            if in_time || !num.is_empty() {
                return Err(DurationError::Unexpected(c));
            }
            in_time = true;
            next_idx = 0;
            continue;
        }
        let table: &[char] = if in_time { &TIME } else { &DATE };
        let Some(idx) = table.iter().position(|&d| d == c) else {
            return Err(DurationError::Unexpected(c));
        };
        if idx < next_idx || num.is_empty() {
            return Err(DurationError::Unexpected(c));
        }
        next_idx = idx + 1;
        let (int_part, frac_part) = match num.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (num.as_str(), None),
        };
        if int_part.is_empty() && frac_part.is_none_or(|f| f.is_empty()) {
            return Err(DurationError::Unexpected(c));
        }
        let has_fraction = frac_part.is_some_and(|f| f.chars().any(|d| d != '0'));
        if frac_part.is_some() {
            saw_fraction = true;
        }
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse::<u128>().map_err(|_| DurationError::Overflow)?
        };
        match (in_time, c) {
            (false, 'Y') | (false, 'M') => {
                if has_fraction {
                    return Err(DurationError::Fraction);
                }
                let n = u32::try_from(whole).map_err(|_| DurationError::Overflow)?;
                if c == 'Y' {
                    years = n;
                } else {
                    months = n;
                }
            }
            _ => {
                let unit: i128 = match (in_time, c) {
                    (false, 'W') => 7 * 86_400 * 1_000_000_000,
                    (false, 'D') => 86_400 * 1_000_000_000,
                    (true, 'H') => 3_600 * 1_000_000_000,
                    (true, 'M') => 60 * 1_000_000_000,
                    _ => 1_000_000_000,
                };
                let whole = i128::try_from(whole).map_err(|_| DurationError::Overflow)?;
                let mut value = whole.checked_mul(unit).ok_or(DurationError::Overflow)?;
                if let Some(f) = frac_part {
                    let digits: String = f.chars().take(18).collect();
                    if !digits.is_empty() {
                        let exp = u32::try_from(digits.len()).map_err(|_| DurationError::Overflow)?;
                        let frac: i128 = digits.parse().map_err(|_| DurationError::Overflow)?;
                        value += frac * unit / 10i128.pow(exp);
                    }
                }
                nanos = nanos.checked_add(value).ok_or(DurationError::Overflow)?;
            }
        }
        num.clear();
        components += 1;
        if in_time {
            time_components += 1;
        }
    }
    if !num.is_empty() {
        return Err(DurationError::Dangling);
    }
    if components == 0 || (in_time && time_components == 0) {
        return Err(DurationError::NoComponents);
    }
    let secs = i64::try_from(nanos / 1_000_000_000).map_err(|_| DurationError::Overflow)?;
    let sub = u32::try_from(nanos % 1_000_000_000).map_err(|_| DurationError::Overflow)?;
    let fixed = TimeDelta::new(secs, sub).ok_or(DurationError::Overflow)?;
    Ok((years, months, fixed))
}

#[test]
fn durations_parse_as_the_reference_parser_did() {
    let known = [
        "PT30M",
        "P0Y0M0DT0H30M0S",
        "P9999Y",
        "P1Y2M3DT4H5M6.25S",
        "PT0.5S",
        "PT1,5S",
        "PT1.5H30M",
        "PT1.0H30M",
        "P1.5Y",
        "PT1.2.3S",
        "PT1,2.3S",
        "P.5D",
        "P.D",
        "PT",
        "P",
        "-PT5M",
        " +PT1H ",
        "P2W",
        "P1M1Y",
        "PT1M1H",
        "P1H",
        "PT5",
        "P99999999999Y",
        "PT99999999999999999999999999999999999999999S",
        "PT999999999999999999999999999999999999999S",
        "P106751991167300D",
        "P106751991167301D",
        "PT0.1234567890123456789S",
        "P1DT",
        "P1TD",
        "PTé",
        "P1é",
        "",
    ];
    let alphabet = [
        "P", "T", "Y", "M", "W", "D", "H", "S", "0", "1", "5", "9", "12", "99999", ".", ",", "-", "+", " ", "é",
    ];
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut generated: Vec<String> = Vec::new();
    for _ in 0..20_000 {
        let n = rng.below(12);
        let mut s = String::from(if rng.below(8) == 0 { "" } else { "P" });
        for _ in 0..n {
            s.push_str(rng.pick(&alphabet));
        }
        generated.push(s);
    }
    for s in known.iter().map(|s| s.to_string()).chain(generated) {
        let got = IsoDuration::parse(&s).map(|d| (d.years(), d.months(), d.fixed_part()));
        assert_eq!(got, reference_duration(&s), "{s:?}");
    }
}

/// `parse_timestamp` as it was: the sentinel, else chrono's RFC 3339 parser (reference).
fn reference_timestamp(input: &str) -> Option<DateTime<Utc>> {
    let s = input.trim();
    if let Some(rest) = s.strip_prefix("0001-01-01")
        && (rest.is_empty() || rest.starts_with(['T', 't', ' ']))
    {
        return Some(flexgate_openadr::oadr3::now_sentinel());
    }
    DateTime::parse_from_rfc3339(s).ok().map(|d| d.with_timezone(&Utc))
}

#[test]
fn timestamps_parse_as_chrono_parses_them() {
    let known = [
        "2026-07-01T18:00:00Z",
        "2026-07-01T18:00:00.639004168Z",
        "2026-07-01T18:00:00.6390041681Z",
        "2026-07-01T18:00:00.Z",
        "2026-07-01T18:00:00+02:00",
        "2026-07-01T18:00:00-05:30",
        "2026-07-01T18:00:00-00:00",
        "2026-07-01T18:00:00+24:00",
        "2026-07-01T18:00:00+23:60",
        "2026-07-01t18:00:00z",
        "2026-07-01 18:00:00Z",
        "2026-07-01T18:00:60Z",
        "2016-12-31T23:59:60Z",
        "2026-02-29T00:00:00Z",
        "2024-02-29T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-07-01T24:00:00Z",
        "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999999999-23:59",
        "0001-01-01T00:00:00Z",
        "0001-01-01",
        "2026-07-01T18:00:00",
        "2026-07-01T18:00:00+0200",
        "2026-07-01T18:00:00Z ",
        " 2026-07-01T18:00:00Z",
        "2026-07-01T18:00:00ZZ",
    ];
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let two = |rng: &mut Rng, hi: usize| format!("{:02}", rng.below(hi));
    let mut generated: Vec<String> = Vec::new();
    for _ in 0..20_000 {
        let fraction = match rng.below(4) {
            0 => String::new(),
            1 => ".".to_string(),
            _ => format!(".{}", "123456789012".get(..1 + rng.below(12)).unwrap_or("1")),
        };
        let offset = match rng.below(4) {
            0 => "Z".to_string(),
            1 => rng.pick(&["z", "", "+0000", "+00:0", " Z"]).to_string(),
            _ => format!("{}{}:{}", rng.pick(&["+", "-"]), two(&mut rng, 26), two(&mut rng, 62)),
        };
        generated.push(format!(
            "{:04}-{}-{}{}{}:{}:{}{fraction}{offset}",
            rng.below(10_000),
            two(&mut rng, 14),
            two(&mut rng, 33),
            rng.pick(&["T", "T", "T", "t", " "]),
            two(&mut rng, 26),
            two(&mut rng, 61),
            two(&mut rng, 62),
        ));
    }
    for s in known.iter().map(|s| s.to_string()).chain(generated) {
        assert_eq!(parse_timestamp(&s).ok(), reference_timestamp(&s), "{s:?}");
    }
}

// ---------------------------------------------------------------- limits wherever the value stands

#[test]
fn limits_and_syntax_hold_in_every_position() {
    let small = Limits {
        max_bytes: 4096,
        max_depth: 5,
        max_list: 3,
    };
    let cases: [(&[u8], DecodeError); 6] = [
        // Members count towards the list limit too.
        (
            br#"{"programID":"p","intervals":[],"a":1,"b":2}"#,
            DecodeError::TooMany {
                path: "$".into(),
                limit: 3,
            },
        ),
        // An unknown field is read, limits and all, before it is kept.
        (
            br#"{"programID":"p","x":{"y":{"z":{"w":[[1]]}}}}"#,
            DecodeError::TooDeep {
                path: "x.y.z.w[0]".into(),
                limit: 5,
            },
        ),
        (
            br#"{"programID":"p","x":[1e999]}"#,
            DecodeError::Number {
                path: "x[0]".into(),
                text: "1e999".into(),
            },
        ),
        // Where a string belongs, an out-of-range number is still reported as one.
        (
            br#"{"programID":"p","eventName":-1e400}"#,
            DecodeError::Number {
                path: "eventName".into(),
                text: "-1e400".into(),
            },
        ),
        (
            br#"{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"A"},{"type":"B"},{"type":"C"},{"type":"D"}]}]}"#,
            DecodeError::TooMany {
                path: "intervals[0].payloads".into(),
                limit: 3,
            },
        ),
        // A document of no known kind is read to its end first: the limit is what is wrong.
        (
            br#"{"foo":1,"bar":[[[[[1]]]]]}"#,
            DecodeError::TooDeep {
                path: "bar[0][0][0][0]".into(),
                limit: 5,
            },
        ),
    ];
    for (doc, expected) in cases {
        assert_eq!(
            decode_any_with_limits(doc, &small),
            Err(expected),
            "{}",
            String::from_utf8_lossy(doc)
        );
    }
    // A limit above the ceiling is held at 128 levels.
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let generous = Limits {
        max_depth: 1_000_000,
        ..Limits::default()
    };
    assert!(matches!(
        decode_events(deep.as_bytes(), &generous),
        Err(DecodeError::TooDeep { limit: 128, .. })
    ));
    let syntax: [&[u8]; 11] = [
        br#"[{"programID":"p",}]"#,
        br#"[{"programID":"p"},]"#,
        br#"[{"programID":01}]"#,
        br#"[{"programID":"p","priority":1.}]"#,
        br#"[{"programID":"a\qb"}]"#,
        br#"[{"programID":"a\ud800b"}]"#,
        b"[{\"programID\":\"a\x01b\"}]",
        b"[{\"programID\":\"\xff\"}]",
        br#"[{"programID":"p"}] x"#,
        br#"[{"programID":"p"]"#,
        br#"[{"programID":tru}]"#,
    ];
    for doc in syntax {
        let e = decode_any(doc).expect_err(&String::from_utf8_lossy(doc));
        assert!(
            matches!(e, DecodeError::Syntax { .. }),
            "{}: {e}",
            String::from_utf8_lossy(doc)
        );
    }
    // Escapes are decoded, surrogate pairs included.
    let Document::Event(e) = decode_any(br#"{"programID":"\u00e9\ud83d\ude00\n\"","intervals":[]}"#).expect("escapes")
    else {
        panic!("an event")
    };
    assert_eq!(e.program_id, "é😀\n\"");
}

// ---------------------------------------------------------------- kinds

#[test]
fn the_kind_of_a_document_is_found_in_any_member_order() {
    // A notification whose objectType comes after its object.
    let doc = br#"{"object":{"id":"e","programID":"p","intervals":[{"id":3,"payloads":[]}]},"operation":"POST","objectType":"EVENT"}"#;
    let Document::Notification(n) = decode_any(doc).expect("notification") else {
        panic!("a notification")
    };
    assert!(matches!(&n.object, NotifiedObject::Event(e) if e.intervals[0].id == 3));
    // Without objectType: the object's own members say it is a program.
    let doc = br#"{"operation":"DELETE","object":{"id":"p1","programName":"n"}}"#;
    let Document::Notification(n) = decode_any(doc).expect("notification") else {
        panic!("a notification")
    };
    assert_eq!(n.object_type, "PROGRAM");
    assert!(matches!(&n.object, NotifiedObject::Program(p) if p.program_name == "n"));
    // An error inside the object names its path through it.
    let doc = br#"{"object":{"programID":"p","intervals":[{"payloads":[]}]},"objectType":"EVENT","operation":"PUT"}"#;
    assert_eq!(
        decode_any(doc),
        Err(DecodeError::Missing {
            path: "object.intervals[0].id".into()
        })
    );
    // Another kind in a list is refused as such, also where reading it as the list's kind fails.
    let doc = br#"[{"programID":"p","intervals":[]},{"programName":"n","intervals":7}]"#;
    let e = decode_any(doc).expect_err("mixed list");
    assert_eq!(e.to_string(), "[1]: a list of EVENT objects holds another kind");
    let doc = br#"[{"programID":"p","intervals":[]},{"objectType":"REPORT","eventID":"e"}]"#;
    let e = decode_any(doc).expect_err("mixed list");
    assert_eq!(e.to_string(), "[1]: a list of EVENT objects holds another kind");
    // Elements that say nothing of their kind are read as the list's.
    let doc = br#"[{"programName":"a"},{"id":"b"}]"#;
    let Document::Programs(ps) = decode_any(doc).expect("programs") else {
        panic!("programs")
    };
    assert_eq!(ps[1].id.as_deref(), Some("b"));
}
