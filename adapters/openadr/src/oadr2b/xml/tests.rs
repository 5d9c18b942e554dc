//! The fast parser against the reference one: whatever the fast one accepts, the reference
//! one must accept too, with the same tree.

use super::*;

fn same(a: Node<'_>, b: Node<'_>) -> bool {
    a.ns_uri() == b.ns_uri()
        && a.name() == b.name()
        && a.text() == b.text()
        && a.children().count() == b.children().count()
        && a.children().zip(b.children()).all(|(x, y)| same(x, y))
}

/// Checks one document; returns whether the fast parser took it.
fn check(doc: &[u8], limits: &Limits) -> bool {
    let Ok(text) = std::str::from_utf8(doc) else {
        return false;
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(fast) = fast::parse(text, limits) else {
        return false;
    };
    match reference::parse(text, limits) {
        Ok(reference) => assert!(
            same(fast.root(), reference.root()),
            "trees differ for {text:?}:\nfast {:?}\nreference {:?}",
            fast.root(),
            reference.root()
        ),
        Err(e) => panic!("the fast parser accepted what the reference refuses ({e}): {text:?}"),
    }
    true
}

/// Wrappers like those of the fuzz target (`fuzz/fuzz_targets/decode_2b.rs`).
const PAYLOAD_OPEN: &str = concat!(
    r#"<oadr:oadrPayload xmlns:oadr="http://openadr.org/oadr-2.0b/2012/07""#,
    r#" xmlns:ei="http://docs.oasis-open.org/ns/energyinterop/201110""#,
    r#" xmlns:pyld="http://docs.oasis-open.org/ns/energyinterop/201110/payloads""#,
    r#" xmlns:emix="http://docs.oasis-open.org/ns/emix/2011/06""#,
    r#" xmlns:power="http://docs.oasis-open.org/ns/emix/2011/06/power""#,
    r#" xmlns:scale="http://docs.oasis-open.org/ns/emix/2011/06/siscale""#,
    r#" xmlns:xcal="urn:ietf:params:xml:ns:icalendar-2.0""#,
    r#" xmlns:strm="urn:ietf:params:xml:ns:icalendar-2.0:stream""#,
    r#" xmlns:ds="http://www.w3.org/2000/09/xmldsig#">"#,
    r#"<oadr:oadrSignedObject>"#,
);
const PAYLOAD_CLOSE: &str = "</oadr:oadrSignedObject></oadr:oadrPayload>";
const EVENT_OPEN: &str = concat!(
    r#"<oadr:oadrDistributeEvent ei:schemaVersion="2.0b"><pyld:requestID>R</pyld:requestID>"#,
    r#"<ei:vtnID>V</ei:vtnID><oadr:oadrEvent><ei:eiEvent>"#,
);
const EVENT_CLOSE: &str = "</ei:eiEvent></oadr:oadrEvent></oadr:oadrDistributeEvent>";

/// The documents in `dir`: relative to the crate, or absolute (the `OADR2B_EXTRA_CORPUS`
/// directory: set it to a fresh fuzzing corpus to compare the parsers on that too).
fn files(dir: &str) -> Vec<Vec<u8>> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths.into_iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// What mutations insert: markup the fast parser handles, markup it leaves to the reference
/// parser, and broken markup.
const SNIPPETS: [&str; 30] = [
    "<!-- c -->",
    "<!---->",
    "<!--->-->",
    "<!-- a -- b -->",
    "<!--",
    "\r\n",
    "\r",
    "&amp;",
    "&lt;&gt;&quot;&apos;",
    "&#65;",
    "&nbsp;",
    "&",
    "<![CDATA[x]]>",
    " xmlns=\"\"",
    " xmlns:ei=\"urn:x\"",
    " xmlns:=\"urn:x\"",
    " xmlns:q=\"\"",
    "<?pi x?>",
    "<x/>",
    "<ei:x a='1' b=\"2\" />",
    "</x>",
    " a=\"1\"",
    " a=\"1\" a=\"2\"",
    " a = \"1\"",
    " a=\"x>y\"",
    "  ",
    ":",
    "<ei:x>1</ei:x >",
    "<xml:x/>",
    "\u{e9}",
];

#[test]
fn many_attributes_go_to_the_reference_parser() {
    let tag = |n: usize| {
        let attrs: String = (0..n).map(|i| format!(" a{i}=\"{i}\"")).collect();
        format!("<x{attrs}/>")
    };
    let limits = Limits::default();
    assert!(check(tag(32).as_bytes(), &limits));
    let many = tag(20_000);
    assert!(fast::parse(&many, &limits).is_none());
    assert!(reference::parse(&many, &limits).is_ok());
    let dup = format!("<x{} a7=\"again\"/>", &tag(40)[2..tag(40).len() - 2]);
    assert!(fast::parse(&dup, &limits).is_none());
    assert!(matches!(parse(dup.as_bytes(), &limits), Err(DecodeError::Xml { .. })));
}

#[test]
fn the_fast_parser_agrees_with_the_reference_one() {
    let limits = Limits::default();
    let mut docs = files("fuzz/corpus/decode_2b");
    docs.extend(files("fuzz/seeds"));
    if let Some(extra) = std::env::var_os("OADR2B_EXTRA_CORPUS") {
        docs.extend(files(&extra.to_string_lossy()));
    }
    let fixtures: Vec<Vec<u8>> = files("tests/fixtures")
        .into_iter()
        .chain(files("benches/inputs"))
        .filter(|d| d.trim_ascii_start().starts_with(b"<"))
        .collect();
    for f in &fixtures {
        assert!(check(f, &limits), "the fast parser must take every fixture");
    }
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let (mut taken, mut total) = (0usize, 0usize);
    // Every document alone and, as the fuzz target does, wrapped in a payload that declares
    // every prefix and in an otherwise valid event, so that fragments reach the parser whole.
    for doc in docs.iter().chain(&fixtures) {
        total += 1;
        taken += usize::from(check(doc, &limits));
        if let Ok(s) = std::str::from_utf8(doc) {
            for wrapped in [
                format!("{PAYLOAD_OPEN}{s}{PAYLOAD_CLOSE}"),
                format!("{PAYLOAD_OPEN}{EVENT_OPEN}{s}{EVENT_CLOSE}{PAYLOAD_CLOSE}"),
            ] {
                total += 1;
                taken += usize::from(check(wrapped.as_bytes(), &limits));
            }
        }
    }
    for doc in &fixtures {
        for _ in 0..300 {
            let mut d = doc.clone();
            let at = rnd(d.len());
            match rnd(5) {
                0 => d[at] = b"<>/&;:\"' x0-=\r\n?!#"[rnd(18)],
                1 => {
                    let end = (at + rnd(40)).min(d.len());
                    d.drain(at..end);
                }
                2 => {
                    let s = SNIPPETS[rnd(SNIPPETS.len())];
                    d.splice(at..at, s.bytes());
                }
                3 => {
                    // After a tag, or inside one before its `>`, where markup stays well-formed.
                    if let Some(gt) = d[at..].iter().position(|&b| b == b'>') {
                        let s = SNIPPETS[rnd(SNIPPETS.len())];
                        let at = at + gt + rnd(2);
                        d.splice(at..at, s.bytes());
                    }
                }
                _ => {
                    let end = (at + rnd(200)).min(d.len());
                    let chunk = d[at..end].to_vec();
                    d.splice(at..at, chunk);
                }
            }
            total += 1;
            taken += usize::from(check(&d, &limits));
        }
    }
    // Tight limits: the fast parser must give up where the reference one refuses.
    let tight = Limits {
        max_depth: 6,
        max_elements: 40,
        ..Limits::default()
    };
    for doc in &fixtures {
        check(doc, &tight);
    }
    eprintln!("the fast parser took {taken} of {total} documents");
    // The comparison means something only if the fast parser took many (most corpus files
    // are hostile and go to the reference parser).
    assert!(taken > 1_000, "the fast parser took only {taken} of {total}");
}
