//! The public API as the reports use it: every chart is an SVG document that a real XML parser
//! (quick-xml, not the unit tests' own well-formedness check) reads, with the names a reader
//! and a screen reader see; clock axes read local time with each tick's DST offset, including
//! on the days the clocks change; the same chart renders to the same bytes.

use flexgate_plot::{AxisFormat, Band, Chart, LineStyle, Marker, Series, clock_axis_label};
use quick_xml::events::Event;
use std::path::PathBuf;

/// An element of the parsed document: its name, attributes (unescaped) and children.
#[derive(Debug)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Node>,
}

#[derive(Debug)]
enum Node {
    Element(Element),
    Text(String),
}

impl Element {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|n| match n {
            Node::Element(e) => Some(e),
            Node::Text(_) => None,
        })
    }

    /// This element and every element below it, in document order.
    fn descendants(&self) -> Vec<&Element> {
        let mut out = vec![self];
        for child in self.elements() {
            out.extend(child.descendants());
        }
        out
    }

    /// The text a reader sees: every text node below, concatenated.
    fn text(&self) -> String {
        self.children
            .iter()
            .map(|n| match n {
                Node::Text(t) => t.clone(),
                Node::Element(e) => e.text(),
            })
            .collect()
    }

    /// The `<g class="…">` groups with this class, anywhere below.
    fn groups(&self, class: &str) -> Vec<&Element> {
        self.descendants()
            .into_iter()
            .filter(|e| e.name == "g" && e.attr("class") == Some(class))
            .collect()
    }
}

/// Parses `svg` with quick-xml, checking end names, attribute uniqueness and references, and
/// returns the one root element. Panics, naming the byte offset, on anything not well formed.
fn parse(svg: &str) -> Element {
    let mut reader = quick_xml::Reader::from_str(svg);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let open = |e: &quick_xml::events::BytesStart<'_>| Element {
        name: e.name().as_ref().to_string(),
        attrs: e
            .attributes()
            .map(|a| {
                let a = a.expect("a well-formed, unique attribute");
                (
                    a.key.as_ref().to_string(),
                    a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                        .expect("an attribute value with valid references")
                        .into_owned(),
                )
            })
            .collect(),
        children: Vec::new(),
    };
    let push_text = |stack: &mut Vec<Element>, text: String| match stack.last_mut() {
        Some(parent) => parent.children.push(Node::Text(text)),
        None => assert!(text.trim().is_empty(), "text outside the root: {text:?}"),
    };
    loop {
        let position = reader.buffer_position();
        match reader.read_event() {
            Err(e) => panic!("not well formed at byte {position}: {e}\n{svg}"),
            Ok(Event::Eof) => break,
            Ok(Event::Start(e)) => stack.push(open(&e)),
            Ok(Event::Empty(e)) => {
                let element = open(&e);
                match stack.last_mut() {
                    Some(parent) => parent.children.push(Node::Element(element)),
                    None => {
                        assert!(root.replace(element).is_none(), "a second root element");
                    }
                }
            }
            Ok(Event::End(_)) => {
                let element = stack.pop().expect("an end tag with its start");
                match stack.last_mut() {
                    Some(parent) => parent.children.push(Node::Element(element)),
                    None => assert!(root.replace(element).is_none(), "a second root element"),
                }
            }
            Ok(Event::Text(t)) => push_text(&mut stack, t.xml10_content().into_owned()),
            Ok(Event::GeneralRef(r)) => {
                let c = if r.is_char_ref() {
                    r.resolve_char_ref()
                        .expect("a valid character reference")
                        .expect("a char")
                } else {
                    match &*r.xml10_content() {
                        "lt" => '<',
                        "gt" => '>',
                        "amp" => '&',
                        "quot" => '"',
                        "apos" => '\'',
                        other => panic!("an undefined entity &{other};"),
                    }
                };
                push_text(&mut stack, c.to_string());
            }
            Ok(other) => panic!("the renderer writes elements and text only, not {other:?}"),
        }
    }
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    root.expect("a root element")
}

/// The x axis's tick labels, left to right (they are centred under their ticks; the y axis's
/// are right-aligned beside theirs).
fn x_tick_labels(svg: &Element) -> Vec<String> {
    let groups = svg.groups("tick-labels");
    assert_eq!(groups.len(), 1, "one group of tick labels");
    groups[0]
        .elements()
        .filter(|t| t.attr("text-anchor") == Some("middle"))
        .map(Element::text)
        .collect()
}

/// The texts drawn directly in the root (title, axis labels), not in a group.
fn root_texts(svg: &Element) -> Vec<String> {
    svg.elements().filter(|e| e.name == "text").map(Element::text).collect()
}

fn unix(rfc3339: &str) -> f64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("RFC 3339")
        .timestamp() as f64
}

fn new_york() -> chrono_tz::Tz {
    "America/New_York".parse().expect("zone")
}

/// An audit's chart: metered power on the site's clock against a stepped ceiling, the event's
/// phases shaded, an opt-out marked, names with every character XML escapes.
fn audit_chart() -> Chart {
    let tz = new_york();
    let t0 = unix("2026-07-14T17:00:00Z"); // 13:00 EDT
    let meter: Vec<(f64, f64)> = (0..=48)
        .map(|i| (t0 + 300.0 * f64::from(i), 900.0 + 60.0 * (f64::from(i) / 5.0).sin()))
        .collect();
    let ceiling = [
        (t0, 1000.0),
        (t0 + 3600.0, 850.0),
        (t0 + 10_800.0, 1000.0),
        (t0 + 14_400.0, 1000.0),
    ];
    let at = chrono::DateTime::from_timestamp(t0 as i64, 0).expect("instant");
    Chart::new("Site meter & ceiling <event \"ev-1\">", clock_axis_label(tz, at), "kW")
        .x_format(AxisFormat::Clock(tz))
        .y_from_zero(true)
        .series(Series::new("meter (measured)", meter))
        .series(Series::new("ceiling 'in force'", ceiling).style(LineStyle::Step))
        .series(Series::new("baseline", [(t0, 980.0), (t0 + 14_400.0, 980.0)]).style(LineStyle::Dashed))
        .band(Band {
            from: t0 + 2700.0,
            to: t0 + 3600.0,
            label: "ramping".into(),
            colour: "#56b4e9",
        })
        .band(Band {
            from: t0 + 3600.0,
            to: t0 + 10_800.0,
            label: "event in force".into(),
            colour: "#e69f00",
        })
        .marker(Marker {
            at: t0 + 7200.0,
            label: "opted out by a&b <ops>".into(),
        })
}

#[test]
fn a_chart_is_svg_that_an_xml_parser_reads_with_names_for_readers() {
    let svg_text = audit_chart().to_svg();
    let svg = parse(&svg_text);
    assert_eq!(svg.name, "svg");
    assert_eq!(svg.attr("xmlns"), Some("http://www.w3.org/2000/svg"));
    assert_eq!(svg.attr("viewBox"), Some("0 0 900 500"));
    // role="img" with a <title> first: a screen reader announces the chart by its title.
    assert_eq!(svg.attr("role"), Some("img"));
    let first = svg.elements().next().expect("a first child");
    assert_eq!(first.name, "title");
    assert_eq!(first.text(), "Site meter & ceiling <event \"ev-1\">");
    // The visible title, the axis labels: text, escaped and read back exactly.
    let texts = root_texts(&svg);
    assert!(
        texts.contains(&"Site meter & ceiling <event \"ev-1\">".to_string()),
        "{texts:?}"
    );
    assert!(
        texts.contains(&"local time, America/New_York (EDT, UTC−04:00)".to_string()),
        "{texts:?}"
    );
    assert!(texts.contains(&"kW".to_string()), "{texts:?}");
    // Each series, band and marker is a group named by its own <title> (a tooltip, and what
    // assistive technology reads), and the legend names the series in order.
    let series: Vec<String> = svg
        .groups("series")
        .iter()
        .map(|g| {
            g.elements()
                .next()
                .filter(|t| t.name == "title")
                .expect("a title")
                .text()
        })
        .collect();
    assert_eq!(series, ["meter (measured)", "ceiling 'in force'", "baseline"]);
    let bands: Vec<String> = svg
        .groups("band")
        .iter()
        .map(|g| g.elements().next().expect("a title").text())
        .collect();
    assert_eq!(bands, ["ramping", "event in force"]);
    let markers = svg.groups("marker");
    assert_eq!(markers.len(), 1);
    assert_eq!(
        markers[0].elements().next().expect("a title").text(),
        "opted out by a&b <ops>"
    );
    assert!(
        markers[0].text().ends_with("opted out by a&b <ops>"),
        "the marker's visible label"
    );
    let legend: Vec<String> = svg.groups("legend")[0]
        .elements()
        .filter(|e| e.name == "text")
        .map(Element::text)
        .collect();
    assert_eq!(legend, ["meter (measured)", "ceiling 'in force'", "baseline"]);
    // The step line is a path of horizontal and vertical moves only.
    let step = svg.groups("series")[1]
        .elements()
        .find(|e| e.name == "path")
        .expect("the step line");
    let d = step.attr("d").expect("path data");
    assert!(
        d.starts_with('M') && d.contains(" H") && d.contains(" V") && !d.contains(" L"),
        "{d}"
    );
    // No script, no event handlers, no external references: the document is inert.
    for e in svg.descendants() {
        assert!(
            !matches!(e.name.as_str(), "script" | "foreignObject" | "image" | "use"),
            "<{}>",
            e.name
        );
        for (key, value) in &e.attrs {
            assert!(!key.starts_with("on") && !key.contains("href"), "{key} on <{}>", e.name);
            assert!(!value.contains("NaN") && !value.contains("inf"), "{key}={value}");
        }
    }
}

#[test]
fn every_kind_of_chart_is_read_by_the_parser() {
    let charts = [
        Chart::new("", "", ""),
        Chart::new("no data", "x", "y").series(Series::new("meter", [])),
        Chart::new("non-finite", "t", "W")
            .x_format(AxisFormat::Time)
            .series(Series::new("meter", [(f64::NAN, 1.0), (1.0, f64::INFINITY)])),
        Chart::new("percent", "cut", "tokens/s")
            .x_format(AxisFormat::Percent)
            .series(Series::new(
                "proportional",
                [(0.0, 5200.0), (0.1, 4900.0), (0.3, 3900.0)],
            )),
        Chart::new("control \u{7} characters\u{0}", "x\ty", "y")
            .series(Series::new("bell\u{7}", [(0.0, 1.0), (1.0, 2.0)])),
        Chart::new("tiny", "x", "y")
            .size(0, 0)
            .series(Series::new("p", [(-1e300, -1e300), (1e300, 1e300)])),
    ];
    for chart in charts {
        let svg = parse(&chart.to_svg());
        assert_eq!(svg.name, "svg", "{}", chart.title);
        let empty = chart
            .series
            .iter()
            .all(|s| s.points.iter().all(|(x, y)| !(x.is_finite() && y.is_finite())));
        assert_eq!(
            root_texts(&svg).iter().any(|t| t == "no data"),
            empty,
            "{}: a chart without drawable points says so",
            chart.title
        );
    }
}

/// A clock chart across one local span, its x tick labels and the axis label at its start.
fn clock_chart(tz: chrono_tz::Tz, from: &str, to: &str, step_s: f64) -> (Vec<String>, String) {
    let (a, b) = (unix(from), unix(to));
    let points: Vec<(f64, f64)> = (0..)
        .map(|i| a + step_s * f64::from(i))
        .take_while(|&t| t <= b)
        .map(|t| (t, 500.0))
        .collect();
    let at = chrono::DateTime::from_timestamp(a as i64, 0).expect("instant");
    let svg = Chart::new("meter", clock_axis_label(tz, at), "kW")
        .x_format(AxisFormat::Clock(tz))
        .series(Series::new("meter", points))
        .to_svg();
    let root = parse(&svg);
    (x_tick_labels(&root), clock_axis_label(tz, at))
}

/// The spring change in New York (8 March 2026, 02:00 EST → 03:00 EDT): the ticks stay on whole
/// local hours and 02:00, which did not happen, is never labelled.
#[test]
fn the_clock_axis_skips_the_hour_that_spring_forward_removes() {
    let (labels, axis) = clock_chart(new_york(), "2026-03-08T05:00:00Z", "2026-03-08T10:00:00Z", 900.0);
    assert_eq!(labels, ["00:00", "01:00", "03:00", "04:00", "05:00", "06:00"], "{axis}");
    assert_eq!(axis, "local time, America/New_York (EST, UTC−05:00)");
}

/// The autumn change (1 November 2026, 02:00 EDT → 01:00 EST): 01:00 happens twice, and the
/// axis shows both, an hour apart, as the site's clock and the utility's notice read them.
#[test]
fn the_clock_axis_shows_the_hour_that_fall_back_repeats() {
    let (labels, axis) = clock_chart(new_york(), "2026-11-01T04:00:00Z", "2026-11-01T09:00:00Z", 900.0);
    assert_eq!(labels, ["00:00", "01:00", "01:00", "02:00", "03:00", "04:00"], "{axis}");
    assert_eq!(axis, "local time, America/New_York (EDT, UTC−04:00)");
}

/// Zones whose clocks skip midnight (Santiago: 6 September 2026 starts at 01:00; Havana: 8 March
/// 2026 too): an axis that starts on such a day has no local midnight to count ticks from.
/// (plotters' date-time axis panics on both, in chrono's `Date::and_hms`; see the README.)
#[test]
fn a_clock_axis_starting_on_a_day_without_midnight_renders() {
    for (zone, from, to, axis_label, first) in [
        (
            "America/Santiago",
            "2026-09-06T12:00:00Z",
            "2026-09-07T00:00:00Z",
            "local time, America/Santiago (-03, UTC−03:00)",
            "08:00", // 09:00 local, on 2-hour ticks
        ),
        (
            "America/Havana",
            "2026-03-08T12:00:00Z",
            "2026-03-09T00:00:00Z",
            "local time, America/Havana (CDT, UTC−04:00)",
            "08:00",
        ),
    ] {
        let tz: chrono_tz::Tz = zone.parse().expect("zone");
        let (labels, axis) = clock_chart(tz, from, to, 1800.0);
        assert_eq!(axis, axis_label);
        assert!(labels.len() >= 3, "{zone}: {labels:?}");
        assert!(
            labels.iter().all(|l| l.len() == 5 && l.ends_with(":00")),
            "{zone}: whole local hours: {labels:?}"
        );
        assert_eq!(labels.first().map(String::as_str), Some(first), "{zone}: {labels:?}");
    }
}

#[test]
fn the_axis_label_names_the_zone_and_its_offset_at_that_instant() {
    let tz = new_york();
    let summer = chrono::DateTime::from_timestamp(unix("2026-07-14T17:00:00Z") as i64, 0).expect("instant");
    let winter = chrono::DateTime::from_timestamp(unix("2026-12-02T18:00:00Z") as i64, 0).expect("instant");
    assert_eq!(
        clock_axis_label(tz, summer),
        "local time, America/New_York (EDT, UTC−04:00)"
    );
    assert_eq!(
        clock_axis_label(tz, winter),
        "local time, America/New_York (EST, UTC−05:00)"
    );
    let kolkata: chrono_tz::Tz = "Asia/Kolkata".parse().expect("zone");
    assert_eq!(
        clock_axis_label(kolkata, summer),
        "local time, Asia/Kolkata (IST, UTC+05:30)"
    );
}

/// The same chart gives the same bytes: rendered twice, cloned, or with its points in another
/// order (they are drawn sorted by x), so reports can be compared as text.
#[test]
fn the_same_chart_renders_the_same_bytes() {
    let chart = audit_chart();
    let once = chart.to_svg();
    assert_eq!(once, chart.to_svg());
    assert_eq!(once, chart.clone().to_svg());
    let mut shuffled = chart.clone();
    for series in &mut shuffled.series {
        series.points.reverse();
        let half = series.points.len() / 2;
        series.points.rotate_left(half);
    }
    assert_eq!(once, shuffled.to_svg());
    let from_threads: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(|| chart.to_svg())).collect();
        handles.into_iter().map(|h| h.join().expect("render")).collect()
    });
    assert!(from_threads.iter().all(|svg| *svg == once));
}

/// The audit chart's SVG as committed (`tests/golden/audit_chart.svg`): a change to what the
/// renderer writes shows in review as a diff of this file. `FLEXGATE_PLOT_BLESS=1 cargo test -p
/// flexgate-plot` rewrites it after an intended change.
#[test]
fn the_audit_chart_matches_its_golden_file() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/audit_chart.svg");
    let actual = audit_chart().to_svg();
    if std::env::var_os("FLEXGATE_PLOT_BLESS").is_some() {
        std::fs::write(&path, &actual).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if actual != expected {
        let line = actual
            .lines()
            .zip(expected.lines())
            .position(|(a, e)| a != e)
            .map_or_else(|| "the length".to_string(), |n| format!("line {}", n + 1));
        panic!(
            "the rendered SVG differs from {} at {line}; if the change is intended, run with FLEXGATE_PLOT_BLESS=1",
            path.display()
        );
    }
}

/// The parser above is a real check: it refuses what is not well formed.
#[test]
fn the_test_parser_refuses_documents_that_are_not_well_formed() {
    for bad in [
        "<svg><g></svg>",
        "<svg>a &nope; b</svg>",
        "<svg a=\"1\" a=\"2\"/>",
        "<svg/><svg/>",
        "<svg><script>alert(1)</script><!-- x --></svg>",
    ] {
        assert!(std::panic::catch_unwind(|| parse(bad)).is_err(), "{bad}");
    }
    assert_eq!(parse("<svg a=\"&amp;\"><g/>x &lt; y</svg>\n").text(), "x < y");
}
