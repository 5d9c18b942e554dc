//! Line charts rendered as standalone SVG documents, using nothing beyond `std`, `chrono` and
//! `chrono-tz`.
//!
//! flexgate draws two kinds of report figure with this crate: throughput per job versus power
//! cut, one curve per allocation policy, and (for audit reports) metered power against the grid
//! ceiling over time, on the site's local clock, with the event's phases shaded and an
//! operator's opt-out marked. Both are plain line charts, so a small hand-written
//! renderer is enough. SVG rather than a raster format because it is text: it diffs in review,
//! embeds in HTML reports, opens in any browser and converts losslessly with `rsvg-convert`;
//! and writing it by hand avoids pulling a font rasteriser and a plotting stack into an
//! operational CLI. The README says why this is ours rather than a plotting crate.
//!
//! A leaf crate (no workspace crate, no I/O, no clock): the output is a pure function of the
//! [`Chart`], byte for byte, so tests and reviews can compare charts as text.
//!
//! ```
//! use flexgate_plot::{AxisFormat, Chart, LineStyle, Series};
//! let svg = Chart::new("Throughput under a power cut", "power cut", "tokens/s per job")
//!     .x_format(AxisFormat::Percent)
//!     .series(Series::new("proportional", [(0.0, 1000.0), (0.1, 950.0)]))
//!     .series(Series::new("PFI-aware", [(0.0, 1000.0), (0.1, 990.0)]).style(LineStyle::Dashed))
//!     .to_svg();
//! assert!(svg.starts_with("<svg") && svg.contains("PFI-aware"));
//! ```
//!
//! Text widths are *estimated* from character counts because no font metrics are available
//! without a font library; every estimate errs on the wide side so labels get room rather than
//! overlap.

use std::fmt::Write as _;

/// How a series is drawn between its points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LineStyle {
    /// Straight segments between consecutive points.
    #[default]
    Solid,
    /// Straight segments, dashed: a second visual cue besides colour, so that curves stay
    /// distinguishable in greyscale print and for readers who cannot tell the colours apart.
    Dashed,
    /// Horizontal-then-vertical steps, for piecewise-constant quantities such as a power
    /// ceiling. A ceiling holds its value until the next change, so joining two ceilings with a
    /// sloped line would claim intermediate limits that never existed. The line ends at the last
    /// point: add a final point where the last value stops applying.
    Step,
}

/// How tick values on an axis are labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AxisFormat {
    /// Values are Unix seconds; labels are the wall-clock time in this zone (`14:30`, or
    /// `12-02 14:30` when the axis spans days), each tick with that day's UTC offset (DST).
    /// Ticks fall on whole local minutes and hours. For readers who compare the chart with a
    /// utility's notice or the site's own logs, which speak local time.
    Clock(chrono_tz::Tz),
    /// Plain numbers; large magnitudes get SI suffixes (`1.5k`, `12k`, `1.2M`) so labels stay
    /// short, tiny ones switch to scientific notation.
    #[default]
    Number,
    /// Fractions shown as percentages: 0.3 is labelled `30 %`.
    Percent,
    /// Values are seconds; labels are elapsed `hh:mm` (or `hh:mm:ss` when ticks are closer
    /// than a minute) since the smallest value on the axis. Elapsed rather than wall-clock time
    /// because an audit reader wants "how far into the event", and because it needs no time
    /// zone database. Ticks fall on whole seconds, minutes or hours, not on 1-2-5 multiples.
    Time,
}

/// One named line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Shown in the legend.
    pub name: String,
    /// `(x, y)` points. Drawn in order of increasing `x` (stable for equal `x`), so callers
    /// need not sort. Points with a NaN or infinite coordinate are skipped: one failed sample
    /// should neither blank the figure nor stretch the axes to infinity.
    pub points: Vec<(f64, f64)>,
    /// How the line between points is drawn.
    pub style: LineStyle,
}

impl Series {
    /// A solid series.
    pub fn new(name: impl Into<String>, points: impl IntoIterator<Item = (f64, f64)>) -> Self {
        Series {
            name: name.into(),
            points: points.into_iter().collect(),
            style: LineStyle::Solid,
        }
    }

    /// Sets the line style.
    pub fn style(mut self, style: LineStyle) -> Self {
        self.style = style;
        self
    }
}

/// A shaded span of the x axis behind the lines (an event window, its ramp), labelled at its
/// top left.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Where it starts, in x units.
    pub from: f64,
    /// Where it ends.
    pub to: f64,
    /// Its label.
    pub label: String,
    /// Its fill, drawn at low opacity (`#e69f00`).
    pub colour: &'static str,
}

/// A vertical line at one x value over the lines (an operator's opt-out), labelled at its top.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// Where, in x units.
    pub at: f64,
    /// Its label.
    pub label: String,
}

/// A line chart. Build with [`Chart::new`] and the builder methods, or set fields directly.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Shaded spans behind the lines.
    pub bands: Vec<Band>,
    /// Vertical lines over them.
    pub markers: Vec<Marker>,
    /// Drawn centred above the plot; may be empty.
    pub title: String,
    /// Drawn below the x axis; may be empty.
    pub x_label: String,
    /// Drawn rotated left of the y axis; may be empty.
    pub y_label: String,
    /// Lines, coloured in order from the Okabe–Ito palette.
    pub series: Vec<Series>,
    /// Labelling of the x axis.
    pub x_format: AxisFormat,
    /// Labelling of the y axis.
    pub y_format: AxisFormat,
    /// Stretch the y axis to include zero. Off by default because policy curves often differ by
    /// a few percent and a zero-based axis would flatten them into one line; turn it on when
    /// absolute magnitude matters more than differences (e.g. power against a ceiling).
    pub y_from_zero: bool,
    /// Width of the whole image in pixels (at least 360 is used).
    pub width: u32,
    /// Height of the whole image in pixels (at least 240 is used).
    pub height: u32,
}

impl Chart {
    /// An empty 900 × 500 chart with plain number axes.
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        Chart {
            bands: Vec::new(),
            markers: Vec::new(),
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
            x_format: AxisFormat::Number,
            y_format: AxisFormat::Number,
            y_from_zero: false,
            width: 900,
            height: 500,
        }
    }

    /// Adds a series.
    pub fn series(mut self, series: Series) -> Self {
        self.series.push(series);
        self
    }

    /// Adds a shaded span.
    pub fn band(mut self, band: Band) -> Self {
        self.bands.push(band);
        self
    }

    /// Adds a vertical marker.
    pub fn marker(mut self, marker: Marker) -> Self {
        self.markers.push(marker);
        self
    }

    /// Sets the x axis labelling.
    pub fn x_format(mut self, format: AxisFormat) -> Self {
        self.x_format = format;
        self
    }

    /// Sets the y axis labelling.
    pub fn y_format(mut self, format: AxisFormat) -> Self {
        self.y_format = format;
        self
    }

    /// Sets whether the y axis must include zero.
    pub fn y_from_zero(mut self, from_zero: bool) -> Self {
        self.y_from_zero = from_zero;
        self
    }

    /// Sets the image size in pixels.
    pub fn size(mut self, width: u32, height: u32) -> Self {
        self.width = width;
        self.height = height;
        self
    }

    /// Renders the chart as a standalone SVG document (UTF-8, no XML declaration, so it can
    /// also be inlined into HTML). Never fails: a chart without drawable points still renders
    /// its axes and a "no data" note, so a report shows that something was expected there.
    pub fn to_svg(&self) -> String {
        let data: Vec<Vec<(f64, f64)>> = self.series.iter().map(|s| drawable_points(&s.points)).collect();
        let layout = Layout::new(self, &data);
        let mut out = String::with_capacity(8 * 1024);
        let (w, h) = (layout.width, layout.height);
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" font-family="{FONT_FAMILY}">"#,
            w = num(w),
            h = num(h),
        );
        out.push('\n');
        if !self.title.trim().is_empty() {
            let _ = writeln!(out, "<title>{}</title>", escape(&self.title));
        }
        // An opaque background: viewers with a dark theme would otherwise show black text on
        // black, and converted PNGs would be transparent.
        out.push_str("<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n");
        self.render_axes(&mut out, &layout);
        self.render_bands(&mut out, &layout);
        self.render_series(&mut out, &layout, &data);
        self.render_markers(&mut out, &layout);
        if data.iter().all(Vec::is_empty) {
            // On a white backing so the gridlines do not strike through the note.
            let (cx, cy) = (
                (layout.plot_left + layout.plot_right) / 2.0,
                (layout.plot_top + layout.plot_bottom) / 2.0,
            );
            let _ = writeln!(
                out,
                r##"<rect x="{}" y="{}" width="72" height="24" fill="#ffffff"/>"##,
                num(cx - 36.0),
                num(cy - 12.0),
            );
            let _ = writeln!(
                out,
                r##"<text x="{}" y="{}" text-anchor="middle" font-size="14" font-style="italic" fill="#777777">no data</text>"##,
                num(cx),
                num(cy + 5.0),
            );
        }
        self.render_legend(&mut out, &layout, &data);
        self.render_labels(&mut out, &layout);
        out.push_str("</svg>\n");
        out
    }

    fn render_axes(&self, out: &mut String, l: &Layout) {
        out.push_str("<g class=\"grid\" stroke=\"#e4e4e4\" stroke-width=\"1\">\n");
        for &t in &l.x.ticks {
            let x = crisp(l.x_px(t));
            let _ = writeln!(
                out,
                r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
                num(l.plot_top),
                num(l.plot_bottom),
                x = num(x)
            );
        }
        for &t in &l.y.ticks {
            let y = crisp(l.y_px(t));
            let _ = writeln!(
                out,
                r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}"/>"#,
                num(l.plot_left),
                num(l.plot_right),
                y = num(y)
            );
        }
        out.push_str("</g>\n");
        // A zero line inside the range helps read signs (e.g. negative headroom).
        if l.y.lo < 0.0 && l.y.hi > 0.0 && l.y_format != AxisFormat::Time {
            let y = crisp(l.y_px(0.0));
            let _ = writeln!(
                out,
                r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#9a9a9a" stroke-width="1"/>"##,
                num(l.plot_left),
                num(l.plot_right),
                y = num(y),
            );
        }
        let (left, bottom) = (crisp(l.plot_left), crisp(l.plot_bottom));
        out.push_str("<g class=\"axes\" stroke=\"#555555\" stroke-width=\"1\" fill=\"none\">\n");
        let _ = writeln!(
            out,
            r#"<path d="M{} {} V{} H{}"/>"#,
            num(left),
            num(crisp(l.plot_top)),
            num(bottom),
            num(crisp(l.plot_right)),
        );
        for &t in &l.x.ticks {
            let x = num(crisp(l.x_px(t)));
            let _ = writeln!(
                out,
                r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
                num(bottom),
                num(bottom + TICK_LEN)
            );
        }
        for &t in &l.y.ticks {
            let y = num(crisp(l.y_px(t)));
            let _ = writeln!(
                out,
                r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}"/>"#,
                num(left - TICK_LEN),
                num(left)
            );
        }
        out.push_str("</g>\n");
        let _ = writeln!(
            out,
            r##"<g class="tick-labels" font-size="{}" fill="#333333">"##,
            num(TICK_FONT)
        );
        for (&t, label) in l.x.ticks.iter().zip(&l.x.labels) {
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                num(l.x_px(t)),
                num(l.plot_bottom + TICK_LEN + 3.0 + TICK_FONT),
                escape(label),
            );
        }
        for (&t, label) in l.y.ticks.iter().zip(&l.y.labels) {
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                num(l.plot_left - TICK_LEN - 4.0),
                num(l.y_px(t) + TICK_FONT * 0.35),
                escape(label),
            );
        }
        out.push_str("</g>\n");
    }

    fn render_bands(&self, out: &mut String, l: &Layout) {
        for band in &self.bands {
            if !(band.from.is_finite() && band.to.is_finite()) {
                continue;
            }
            let x0 = l.x_px(band.from.min(band.to)).clamp(l.plot_left, l.plot_right);
            let x1 = l.x_px(band.from.max(band.to)).clamp(l.plot_left, l.plot_right);
            if x1 - x0 < 0.5 {
                continue;
            }
            let _ = writeln!(
                out,
                r#"<g class="band"><title>{}</title><rect x="{}" y="{}" width="{}" height="{}" fill="{}" fill-opacity="0.16"/>"#,
                escape(&band.label),
                num(x0),
                num(l.plot_top),
                num(x1 - x0),
                num(l.plot_bottom - l.plot_top),
                band.colour,
            );
            let label = fit_text(&band.label, (x1 - x0 - 6.0).max(0.0), TICK_FONT);
            if !label.is_empty() {
                let _ = write!(
                    out,
                    r##"<text x="{}" y="{}" font-size="{}" fill="#5a4300">{}</text>"##,
                    num(x0 + 4.0),
                    num(l.plot_top + TICK_FONT + 3.0),
                    num(TICK_FONT),
                    escape(&label),
                );
            }
            out.push_str("</g>\n");
        }
    }

    fn render_markers(&self, out: &mut String, l: &Layout) {
        for marker in self.markers.iter().filter(|m| m.at.is_finite()) {
            let x = l.x_px(marker.at);
            if x < l.plot_left - 0.5 || x > l.plot_right + 0.5 {
                continue;
            }
            let x = num(crisp(x));
            let _ = writeln!(
                out,
                r##"<g class="marker"><title>{label}</title><line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#222222" stroke-width="1.5" stroke-dasharray="3 3"/><text x="{x}" y="{}" text-anchor="middle" font-size="{}" font-weight="bold" fill="#222222">{label}</text></g>"##,
                num(l.plot_top + TICK_FONT * 2.4),
                num(l.plot_bottom),
                num(l.plot_top + TICK_FONT * 2.2),
                num(TICK_FONT),
                label = escape(&marker.label),
            );
        }
    }

    fn render_series(&self, out: &mut String, l: &Layout, data: &[Vec<(f64, f64)>]) {
        for (i, (series, points)) in self.series.iter().zip(data).enumerate() {
            let colour = series_colour(i);
            let _ = writeln!(out, r#"<g class="series" data-index="{i}">"#);
            let _ = writeln!(out, "<title>{}</title>", escape(&series.name));
            let px: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (l.x_px(x), l.y_px(y))).collect();
            let stroke = format!(
                r#"fill="none" stroke="{colour}" stroke-width="2.2" stroke-linejoin="round" stroke-linecap="round"{}"#,
                dash_attr(series.style, i)
            );
            match series.style {
                LineStyle::Step => {
                    if let Some(&(x0, y0)) = px.first() {
                        let mut d = format!("M{} {}", num(x0), num(y0));
                        for &(x, y) in &px[1..] {
                            let _ = write!(d, " H{} V{}", num(x), num(y));
                        }
                        let _ = writeln!(out, r#"<path d="{d}" {stroke}/>"#);
                    }
                }
                LineStyle::Solid | LineStyle::Dashed => {
                    if !px.is_empty() {
                        let pts: Vec<String> = px.iter().map(|&(x, y)| format!("{},{}", num(x), num(y))).collect();
                        let _ = writeln!(out, r#"<polyline points="{}" {stroke}/>"#, pts.join(" "));
                    }
                }
            }
            if shows_markers(points.len()) {
                for &(x, y) in &px {
                    let _ = writeln!(
                        out,
                        r##"<circle cx="{}" cy="{}" r="3.4" fill="{colour}" stroke="#ffffff" stroke-width="1.2"/>"##,
                        num(x),
                        num(y),
                    );
                }
            }
            out.push_str("</g>\n");
        }
    }

    fn render_legend(&self, out: &mut String, l: &Layout, data: &[Vec<(f64, f64)>]) {
        let Some(legend) = &l.legend else { return };
        let _ = writeln!(
            out,
            r##"<g class="legend" font-size="{}" fill="#222222">"##,
            num(LEGEND_FONT)
        );
        let _ = writeln!(
            out,
            r##"<rect x="{}" y="{}" width="{}" height="{}" rx="3" fill="#ffffff" stroke="#cccccc"/>"##,
            num(legend.x),
            num(legend.y),
            num(legend.width),
            num(legend.height),
        );
        for (row, entry) in legend.entries.iter().enumerate() {
            let cy = legend.y + LEGEND_PAD + LEGEND_ROW * (row as f64 + 0.5);
            let sx = legend.x + LEGEND_PAD;
            let text_x = sx + LEGEND_SWATCH + 8.0;
            let Some(i) = entry.series else {
                let _ = writeln!(
                    out,
                    r##"<text x="{}" y="{}" fill="#777777">{}</text>"##,
                    num(text_x),
                    num(cy + LEGEND_FONT * 0.35),
                    escape(&entry.text)
                );
                continue;
            };
            let colour = series_colour(i);
            let style = self.series[i].style;
            let attrs = format!(
                r#"fill="none" stroke="{colour}" stroke-width="2.2" stroke-linecap="round"{}"#,
                dash_attr(style, i)
            );
            if style == LineStyle::Step {
                let _ = writeln!(
                    out,
                    r#"<path d="M{} {} H{} V{} H{}" {attrs}/>"#,
                    num(sx),
                    num(cy + 4.0),
                    num(sx + LEGEND_SWATCH / 2.0),
                    num(cy - 4.0),
                    num(sx + LEGEND_SWATCH),
                );
            } else {
                let _ = writeln!(
                    out,
                    r#"<line x1="{}" y1="{}" x2="{}" y2="{}" {attrs}/>"#,
                    num(sx),
                    num(cy),
                    num(sx + LEGEND_SWATCH),
                    num(cy)
                );
            }
            if shows_markers(data[i].len()) && !data[i].is_empty() {
                let _ = writeln!(
                    out,
                    r##"<circle cx="{}" cy="{}" r="3.4" fill="{colour}" stroke="#ffffff" stroke-width="1.2"/>"##,
                    num(sx + LEGEND_SWATCH / 2.0),
                    num(if style == LineStyle::Step { cy - 4.0 } else { cy }),
                );
            }
            let fill = if data[i].is_empty() { r##" fill="#777777""## } else { "" };
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}"{fill}>{}</text>"#,
                num(text_x),
                num(cy + LEGEND_FONT * 0.35),
                escape(&entry.text)
            );
        }
        out.push_str("</g>\n");
    }

    fn render_labels(&self, out: &mut String, l: &Layout) {
        let title = fit_text(&self.title, l.width - 2.0 * OUTER, TITLE_FONT);
        if !title.is_empty() {
            let _ = writeln!(
                out,
                r##"<text x="{}" y="{}" text-anchor="middle" font-size="{}" font-weight="bold" fill="#111111">{}</text>"##,
                num(l.width / 2.0),
                num(OUTER + TITLE_FONT),
                num(TITLE_FONT),
                escape(&title),
            );
        }
        let x_label = fit_text(&self.x_label, l.plot_right - l.plot_left, AXIS_FONT);
        if !x_label.is_empty() {
            let _ = writeln!(
                out,
                r##"<text x="{}" y="{}" text-anchor="middle" font-size="{}" fill="#222222">{}</text>"##,
                num((l.plot_left + l.plot_right) / 2.0),
                num(l.height - OUTER - 2.0),
                num(AXIS_FONT),
                escape(&x_label),
            );
        }
        let y_label = fit_text(&self.y_label, l.plot_bottom - l.plot_top, AXIS_FONT);
        if !y_label.is_empty() {
            let (x, y) = (OUTER + AXIS_FONT, (l.plot_top + l.plot_bottom) / 2.0);
            let _ = writeln!(
                out,
                r##"<text x="{x}" y="{y}" transform="rotate(-90 {x} {y})" text-anchor="middle" font-size="{}" fill="#222222">{}</text>"##,
                num(AXIS_FONT),
                escape(&y_label),
                x = num(x),
                y = num(y),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Layout

const FONT_FAMILY: &str = "Helvetica, Arial, 'DejaVu Sans', 'Liberation Sans', sans-serif";
const MIN_WIDTH: u32 = 360;
const MIN_HEIGHT: u32 = 240;
const MAX_DIMENSION: u32 = 20_000;
const OUTER: f64 = 12.0;
const TITLE_FONT: f64 = 17.0;
const AXIS_FONT: f64 = 13.0;
const TICK_FONT: f64 = 12.0;
const LEGEND_FONT: f64 = 12.5;
const TICK_LEN: f64 = 5.0;
const LEGEND_PAD: f64 = 8.0;
const LEGEND_ROW: f64 = 22.0;
const LEGEND_SWATCH: f64 = 28.0;
/// Series with at most this many points get a marker on every point: on sparse sweeps the
/// markers show where measurements are (the segments between are interpolation); on dense
/// telemetry they would merge into a thick smear and hide the line.
const MARKER_MAX_POINTS: usize = 30;

/// The Okabe–Ito palette (Okabe & Ito 2008), chosen to stay distinguishable under the common
/// colour-vision deficiencies. Its yellow (#F0E442) is left out: as a thin line on white it is
/// nearly invisible. After seven series the colours repeat, with a dotted line to tell them apart.
const PALETTE: [&str; 7] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000",
];

fn series_colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

fn dash_attr(style: LineStyle, index: usize) -> &'static str {
    match style {
        LineStyle::Dashed => r#" stroke-dasharray="7 4""#,
        _ if index >= PALETTE.len() => r#" stroke-dasharray="1.5 3.5""#,
        _ => "",
    }
}

fn shows_markers(points: usize) -> bool {
    points <= MARKER_MAX_POINTS
}

/// Where everything goes, in SVG pixels. Computed once so rendering and tests agree.
#[derive(Debug, Clone)]
struct Layout {
    width: f64,
    height: f64,
    plot_left: f64,
    plot_right: f64,
    plot_top: f64,
    plot_bottom: f64,
    x: Scale,
    y: Scale,
    y_format: AxisFormat,
    legend: Option<Legend>,
}

/// The legend sits to the right of the plot area, never inside it: policy curves are often
/// within a percent of each other and cross, so any box inside the plot would hide some of
/// them, and guessing an "empty corner" fails exactly on the interesting figures.
#[derive(Debug, Clone)]
struct Legend {
    x: f64,
    y: f64,
    width: f64,
    height: f64,
    entries: Vec<LegendEntry>,
}

#[derive(Debug, Clone)]
struct LegendEntry {
    /// Index into the chart's series; `None` for the "… more" line.
    series: Option<usize>,
    text: String,
}

impl Layout {
    fn new(chart: &Chart, data: &[Vec<(f64, f64)>]) -> Self {
        let width = f64::from(chart.width.clamp(MIN_WIDTH, MAX_DIMENSION));
        let height = f64::from(chart.height.clamp(MIN_HEIGHT, MAX_DIMENSION));

        // Vertical: title band, plot, tick labels, x label.
        let plot_top = OUTER
            + if chart.title.trim().is_empty() {
                8.0
            } else {
                TITLE_FONT + 18.0
            };
        let x_label_band = if chart.x_label.trim().is_empty() {
            0.0
        } else {
            AXIS_FONT + 10.0
        };
        let plot_bottom = height - OUTER - x_label_band - (TICK_LEN + 3.0 + TICK_FONT + 4.0);

        let finite = data.iter().flatten();
        // Bands and markers are part of what the reader must see: the x axis covers them.
        let x_range = min_max(
            finite
                .clone()
                .map(|p| p.0)
                .chain(chart.bands.iter().flat_map(|b| [b.from, b.to]))
                .chain(chart.markers.iter().map(|m| m.at))
                .filter(|v| v.is_finite()),
        );
        let y_range = min_max(finite.map(|p| p.1));

        let y = Scale::fit(
            y_range,
            chart.y_format,
            chart.y_from_zero,
            plot_bottom - plot_top,
            false,
        );
        let y_label_band = if chart.y_label.trim().is_empty() {
            0.0
        } else {
            AXIS_FONT + 10.0
        };
        let y_ticks_w = y.labels.iter().map(|s| text_width(s, TICK_FONT)).fold(0.0, f64::max);
        let plot_left = (OUTER + y_label_band + y_ticks_w + TICK_LEN + 6.0).min(width * 0.35);

        // Horizontal: the legend takes what its names need, up to 30 % of the width.
        let mut entries: Vec<LegendEntry> = Vec::new();
        let max_text_w = width * 0.30 - 2.0 * LEGEND_PAD - LEGEND_SWATCH - 8.0;
        let rows_fit = ((plot_bottom - plot_top + 20.0 - 2.0 * LEGEND_PAD) / LEGEND_ROW)
            .floor()
            .max(1.0) as usize;
        for (i, (series, points)) in chart.series.iter().zip(data).enumerate() {
            if entries.len() + 1 == rows_fit && chart.series.len() > rows_fit {
                entries.push(LegendEntry {
                    series: None,
                    text: format!("… {} more", chart.series.len() - i),
                });
                break;
            }
            let raw = if points.is_empty() {
                format!("{} (no data)", series.name)
            } else {
                series.name.clone()
            };
            entries.push(LegendEntry {
                series: Some(i),
                text: fit_text(&raw, max_text_w, LEGEND_FONT),
            });
        }
        let legend_w = if entries.is_empty() {
            0.0
        } else {
            let text_w = entries
                .iter()
                .map(|e| text_width(&e.text, LEGEND_FONT))
                .fold(0.0, f64::max);
            2.0 * LEGEND_PAD + LEGEND_SWATCH + 8.0 + text_w
        };

        // The last x tick label is centred on the plot's right edge and needs half its width
        // of free space there; try once, then settle the x scale on the final plot width.
        let right_for = |x: &Scale| {
            let half_last = x.labels.last().map_or(0.0, |s| text_width(s, TICK_FONT) / 2.0);
            let gap = (half_last + 6.0).max(if legend_w > 0.0 { 18.0 } else { 0.0 });
            width - OUTER - legend_w - gap
        };
        let provisional = Scale::fit(
            x_range,
            chart.x_format,
            false,
            width - OUTER - legend_w - plot_left,
            true,
        );
        let plot_right = right_for(&provisional).max(plot_left + 60.0);
        let x = Scale::fit(x_range, chart.x_format, false, plot_right - plot_left, true);

        let legend = (!entries.is_empty()).then_some(Legend {
            x: width - OUTER - legend_w,
            y: plot_top,
            width: legend_w,
            height: 2.0 * LEGEND_PAD + LEGEND_ROW * entries.len() as f64,
            entries,
        });
        Layout {
            width,
            height,
            plot_left,
            plot_right,
            plot_top,
            plot_bottom,
            x,
            y,
            y_format: chart.y_format,
            legend,
        }
    }

    fn x_px(&self, v: f64) -> f64 {
        self.plot_left + self.x.fraction(v) * (self.plot_right - self.plot_left)
    }

    fn y_px(&self, v: f64) -> f64 {
        self.plot_bottom - self.y.fraction(v) * (self.plot_bottom - self.plot_top)
    }
}

/// Finite points, sorted by x (stable).
fn drawable_points(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut kept: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .map(|(x, y)| (clamp_magnitude(x), clamp_magnitude(y)))
        .collect();
    kept.sort_by(|a, b| a.0.total_cmp(&b.0));
    kept
}

/// Keeps spans like `max - min` finite: nothing a report plots is anywhere near 1e300.
fn clamp_magnitude(v: f64) -> f64 {
    v.clamp(-1e300, 1e300)
}

fn min_max(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// Estimated rendered width of `s`: 0.6 em per character is on the wide side of the usual
/// sans-serif fonts (digits are 0.55–0.64 em), so labels get room rather than overlap.
fn text_width(s: &str, font_size: f64) -> f64 {
    s.chars().count() as f64 * font_size * 0.6
}

/// `s` shortened with an ellipsis so that it fits in `max_width` pixels.
fn fit_text(s: &str, max_width: f64, font_size: f64) -> String {
    let s = s.trim();
    let max_chars = (max_width / (font_size * 0.6)).floor().max(1.0) as usize;
    if s.chars().count() <= max_chars {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(max_chars.saturating_sub(1)).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

// ---------------------------------------------------------------------------------------------
// Scales and ticks

/// One axis: its domain, tick values and their labels.
#[derive(Debug, Clone, PartialEq)]
struct Scale {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    labels: Vec<String>,
}

impl Scale {
    /// Chooses ticks for data spanning `range` (`None`: no data) on an axis `length_px` long.
    /// The domain is the outermost ticks, so every point lies inside the plot and the frame
    /// edges carry labels.
    fn fit(
        range: Option<(f64, f64)>,
        format: AxisFormat,
        include_zero: bool,
        length_px: f64,
        horizontal: bool,
    ) -> Self {
        let (mut lo, mut hi) = range.unwrap_or((0.0, 1.0));
        let zero_anchored = include_zero && !matches!(format, AxisFormat::Time | AxisFormat::Clock(_));
        if zero_anchored {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        // About one tick per 100 px across and per 50 px up; fewer across if labels collide.
        let per_tick = if horizontal { 100.0 } else { 50.0 };
        let mut target = ((length_px / per_tick).round() as usize).clamp(2, 10);
        loop {
            let scale = Scale::with_target(lo, hi, format, zero_anchored, target);
            if !horizontal || target <= 2 || scale.labels_fit(length_px) {
                return scale;
            }
            target -= 1;
        }
    }

    fn with_target(lo: f64, hi: f64, format: AxisFormat, zero_anchored: bool, target: usize) -> Self {
        let (ticks, labels) = match format {
            AxisFormat::Time => {
                let t = time_ticks(lo, hi, target);
                let labels = time_labels(&t.values, t.step, lo);
                (t, labels)
            }
            AxisFormat::Clock(tz) => {
                let t = clock_ticks(lo, hi, target, tz);
                let labels = clock_labels(&t.values, t.step, tz);
                (t, labels)
            }
            AxisFormat::Number | AxisFormat::Percent => {
                let (mut a, mut b) = widen_degenerate(lo, hi);
                // A flat series at zero with a zero-based axis should sit on the axis, not in
                // the middle of a symmetric range.
                if zero_anchored {
                    if lo >= 0.0 {
                        a = a.max(0.0);
                    } else if hi <= 0.0 {
                        b = b.min(0.0);
                    }
                }
                let t = nice_ticks(a, b, target);
                let labels = match format {
                    AxisFormat::Percent => percent_labels(&t.values, t.step),
                    _ => number_labels(&t.values, t.step),
                };
                (t, labels)
            }
        };
        let lo = ticks.values.first().copied().unwrap_or(0.0);
        let hi = ticks.values.last().copied().unwrap_or(1.0);
        Scale {
            lo,
            hi,
            ticks: ticks.values,
            labels,
        }
    }

    fn labels_fit(&self, length_px: f64) -> bool {
        let spacing = length_px / (self.ticks.len().max(2) - 1) as f64;
        let widest = self.labels.iter().map(|s| text_width(s, TICK_FONT)).fold(0.0, f64::max);
        widest + 10.0 <= spacing
    }

    /// Position of `v` within the domain, 0 at `lo` and 1 at `hi`.
    fn fraction(&self, v: f64) -> f64 {
        let span = self.hi - self.lo;
        if span > 0.0 && span.is_finite() {
            (v - self.lo) / span
        } else {
            0.5
        }
    }
}

/// Tick values and the distance between neighbours.
#[derive(Debug, Clone, PartialEq)]
struct Ticks {
    values: Vec<f64>,
    step: f64,
}

/// Ticks on multiples of 1, 2 or 5 × 10ⁿ covering `[lo, hi]`, with about `target` intervals:
/// such values are what people read and interpolate without effort (Heckbert, "Nice numbers
/// for graph labels", 1990). Among the candidate steps the one whose interval count is closest
/// to `target` wins, ties going to the larger step. A zero-width range is widened first.
fn nice_ticks(lo: f64, hi: f64, target: usize) -> Ticks {
    let (lo, hi) = widen_degenerate(lo, hi);
    let raw = (hi - lo) / target.max(1) as f64;
    let base = 10f64.powf(raw.log10().floor());
    ticks_with_best_step(lo, hi, target, &[base, 2.0 * base, 5.0 * base, 10.0 * base])
}

fn ticks_with_best_step(lo: f64, hi: f64, target: usize, candidates: &[f64]) -> Ticks {
    let fallback = Ticks {
        values: vec![lo, hi],
        step: hi - lo,
    };
    let mut best: Option<(f64, f64)> = None;
    for &step in candidates {
        if !(step.is_finite() && step > 0.0) {
            continue;
        }
        let (first, last) = tick_index_range(lo, hi, step);
        let score = ((last - first) - target as f64).abs();
        if best.is_none_or(|(s, _)| score <= s) {
            best = Some((score, step));
        }
    }
    let Some((_, step)) = best else {
        return fallback;
    };
    let (first, last) = tick_index_range(lo, hi, step);
    let count = last - first;
    if !count.is_finite() || !(1.0..=1000.0).contains(&count) {
        return fallback;
    }
    // Round away representation noise such as 3 × 0.1 = 0.30000000000000004.
    let scale = 10f64.powi(decimals_for(step).min(15) as i32);
    let values = (0..=count as usize)
        .map(|i| {
            let v = (first + i as f64) * step;
            let r = (v * scale).round() / scale;
            if r.is_finite() && (r - v).abs() <= step * 1e-6 {
                r
            } else {
                v
            }
        })
        .collect();
    Ticks { values, step }
}

/// Indices (in units of `step`) of the first tick at or below `lo` and the last at or above
/// `hi`, tolerant of floating-point noise (0.3 / 0.1 = 2.9999999999999996).
fn tick_index_range(lo: f64, hi: f64, step: f64) -> (f64, f64) {
    ((lo / step + 1e-9).floor(), (hi / step - 1e-9).ceil())
}

/// A range to put ticks on even when all values are equal: ±10 % around the value, or −1..1
/// around zero.
fn widen_degenerate(lo: f64, hi: f64) -> (f64, f64) {
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
    let magnitude = lo.abs().max(hi.abs());
    if hi - lo > magnitude * 1e-9 {
        return (lo, hi);
    }
    let mid = lo / 2.0 + hi / 2.0;
    if mid == 0.0 {
        (-1.0, 1.0)
    } else {
        let pad = mid.abs() * 0.1;
        (mid - pad, mid + pad)
    }
}

/// Number of decimals that shows every multiple of `step` exactly, for 1-2-5 steps.
fn decimals_for(step: f64) -> usize {
    if !(step.is_finite() && step > 0.0) {
        return 0;
    }
    (-(step.log10() + 1e-9).floor()).clamp(0.0, 20.0) as usize
}

/// Time steps a reader counts in: seconds, minutes and hours that divide a larger unit evenly.
const TIME_STEPS_S: [f64; 19] = [
    1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0,
    43200.0, 86400.0, 172800.0,
];

/// Ticks for a time axis, starting at `lo` (elapsed 00:00).
fn time_ticks(lo: f64, hi: f64, target: usize) -> Ticks {
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
    let span = if hi - lo >= 1.0 { hi - lo } else { 60.0 };
    let mut candidates = TIME_STEPS_S.to_vec();
    let mut days = 5.0;
    while days * 86400.0 < span && days < 1e12 {
        candidates.extend([days, 2.0 * days, 4.0 * days].map(|d| d * 86400.0));
        days *= 10.0;
        candidates.push(days * 86400.0 / 2.0);
    }
    let rel = ticks_with_best_step(0.0, span, target, &candidates);
    Ticks {
        values: rel.values.iter().map(|t| lo + t).collect(),
        step: rel.step,
    }
}

/// The zone's offset from UTC at Unix second `at`, in seconds.
fn utc_offset_s(tz: chrono_tz::Tz, at: f64) -> f64 {
    use chrono::{Offset as _, TimeZone as _};
    let secs = at.clamp(-1e11, 1e11).floor() as i64;
    chrono::DateTime::from_timestamp(secs, 0).map_or(0.0, |t| {
        f64::from(tz.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc())
    })
}

/// Ticks for a clock axis: whole local minutes and hours (the local offset at the axis start;
/// a DST change inside the axis shifts later ticks by the change, which their labels show).
fn clock_ticks(lo: f64, hi: f64, target: usize, tz: chrono_tz::Tz) -> Ticks {
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
    let hi = if hi - lo >= 1.0 { hi } else { lo + 60.0 };
    let offset = utc_offset_s(tz, lo);
    let mut candidates = TIME_STEPS_S.to_vec();
    candidates.extend([4.0, 7.0, 14.0, 28.0].map(|d| d * 86400.0));
    let local = ticks_with_best_step(lo + offset, hi + offset, target, &candidates);
    Ticks {
        values: local.values.iter().map(|t| t - offset).collect(),
        step: local.step,
    }
}

/// Local wall-clock labels: `HH:MM` (`HH:MM:SS` when ticks are closer than a minute), with the
/// date (`MM-DD HH:MM`) when the axis spans days.
fn clock_labels(values: &[f64], step: f64, tz: chrono_tz::Tz) -> Vec<String> {
    let with_seconds = (step.round() as i64) % 60 != 0;
    let spans_days = match (values.first(), values.last()) {
        (Some(a), Some(b)) => b - a >= 86400.0,
        _ => false,
    };
    let pattern = match (spans_days, with_seconds) {
        (true, _) => "%m-%d %H:%M",
        (false, true) => "%H:%M:%S",
        (false, false) => "%H:%M",
    };
    values
        .iter()
        .map(|&v| {
            chrono::DateTime::from_timestamp(v.clamp(-1e11, 1e11).round() as i64, 0)
                .map(|t| t.with_timezone(&tz).format(pattern).to_string())
                .unwrap_or_default()
        })
        .collect()
}

/// The x-axis label of a clock axis: the zone's name and its abbreviation and offset at `at`
/// (`local time, America/New_York (EST, UTC−05:00)`), so no reader has to guess the zone.
#[must_use]
pub fn clock_axis_label(tz: chrono_tz::Tz, at: chrono::DateTime<chrono::Utc>) -> String {
    let local = at.with_timezone(&tz);
    let offset = local.format("%:z").to_string().replace('-', "−");
    format!("local time, {} ({}, UTC{offset})", tz.name(), local.format("%Z"))
}

/// `hh:mm` since `origin`, or `hh:mm:ss` when ticks are not whole minutes apart.
fn time_labels(values: &[f64], step: f64, origin: f64) -> Vec<String> {
    let with_seconds = (step.round() as i64) % 60 != 0;
    values
        .iter()
        .map(|&v| {
            let rel = (v - origin).round();
            let sign = if rel < 0.0 { "−" } else { "" };
            let total = rel.abs().min(9e15) as u64;
            let (h, m, s) = (total / 3600, total % 3600 / 60, total % 60);
            if with_seconds {
                format!("{sign}{h:02}:{m:02}:{s:02}")
            } else {
                format!("{sign}{h:02}:{m:02}")
            }
        })
        .collect()
}

/// Labels for a number axis: one unit suffix and one decimal count for the whole axis, so the
/// labels line up and compare at a glance.
fn number_labels(values: &[f64], step: f64) -> Vec<String> {
    let max_abs = values.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    let is_zero = |v: f64| v.abs() <= step * 1e-6;
    if max_abs >= 1e15 || (max_abs > 0.0 && max_abs < 1e-4) {
        let digits = (max_abs.log10().floor() - step.log10().floor()).clamp(0.0, 6.0) as usize;
        return values
            .iter()
            .map(|&v| {
                if is_zero(v) {
                    "0".into()
                } else {
                    minus(format!("{v:.digits$e}"))
                }
            })
            .collect();
    }
    const UNITS: [(f64, &str); 5] = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")];
    for (unit, suffix) in UNITS {
        let decimals = decimals_for(step / unit);
        // Use the largest unit the values reach, unless it needs more than two decimals (e.g.
        // 1000..1005 reads better as 1000, 1001 than as 1.000k, 1.001k).
        if (max_abs >= unit && decimals <= 2) || unit == 1.0 {
            return values
                .iter()
                .map(|&v| {
                    if is_zero(v) {
                        "0".into()
                    } else {
                        minus(format!("{:.decimals$}{suffix}", v / unit))
                    }
                })
                .collect();
        }
    }
    Vec::new()
}

/// Labels for a fraction axis as percentages, `30 %`.
fn percent_labels(values: &[f64], step: f64) -> Vec<String> {
    let decimals = decimals_for(step * 100.0);
    let is_zero = |v: f64| v.abs() <= step * 1e-6;
    values
        .iter()
        .map(|&v| {
            if is_zero(v) {
                "0 %".into()
            } else {
                minus(format!("{:.decimals$} %", v * 100.0))
            }
        })
        .collect()
}

/// A typographic minus sign, which is as wide as a plus and reads better than a hyphen.
fn minus(s: String) -> String {
    match s.strip_prefix('-') {
        Some(rest) => format!("−{rest}"),
        None => s,
    }
}

// ---------------------------------------------------------------------------------------------
// Text

/// Escapes `s` for XML text and attribute values, and drops characters XML 1.0 forbids
/// (control characters other than tab, newline and carriage return): a series name copied from
/// a log line must not turn the document invalid.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(' '),
            c if c.is_control() || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// A coordinate with at most two decimals and no trailing zeros; never NaN.
fn num(v: f64) -> String {
    if !v.is_finite() {
        return "0".into();
    }
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.to_string() }
}

/// Puts a 1-px line on a pixel centre so it renders sharp instead of smeared over two pixels.
fn crisp(v: f64) -> f64 {
    v.floor() + 0.5
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_ticks(actual: &Ticks, expected: &[f64]) {
        assert_eq!(actual.values.len(), expected.len(), "{actual:?} vs {expected:?}");
        for (a, e) in actual.values.iter().zip(expected) {
            assert!((a - e).abs() < 1e-9 * e.abs().max(1.0), "{actual:?} vs {expected:?}");
        }
    }

    #[test]
    fn nice_ticks_on_typical_ranges() {
        assert_ticks(&nice_ticks(0.0, 1.0, 5), &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_ticks(&nice_ticks(0.0, 0.4, 5), &[0.0, 0.1, 0.2, 0.3, 0.4]);
        assert_ticks(&nice_ticks(1234.0, 98765.0, 5), &[0.0, 20e3, 40e3, 60e3, 80e3, 100e3]);
        assert_ticks(&nice_ticks(-3.0, 7.0, 5), &[-4.0, -2.0, 0.0, 2.0, 4.0, 6.0, 8.0]);
        // Representation noise must not add an extra tick below 0.3.
        assert_ticks(&nice_ticks(0.3, 0.7, 4), &[0.3, 0.4, 0.5, 0.6, 0.7]);
    }

    #[test]
    fn nice_ticks_on_a_single_value() {
        let t = nice_ticks(5.0, 5.0, 5);
        assert!(t.values.len() >= 3, "{t:?}");
        assert!(t.values[0] < 5.0 && *t.values.last().expect("ticks") > 5.0, "{t:?}");
        assert_ticks(&nice_ticks(0.0, 0.0, 4), &[-1.0, -0.5, 0.0, 0.5, 1.0]);
        let big = nice_ticks(2.5e9, 2.5e9, 5);
        assert!(
            big.values.len() >= 3 && big.values.iter().all(|v| v.is_finite()),
            "{big:?}"
        );
    }

    #[test]
    fn nice_ticks_always_cover_the_range_with_1_2_5_steps() {
        // Deterministic pseudo-random ranges over many magnitudes.
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..2000 {
            let magnitude = 10f64.powf(next() * 40.0 - 20.0);
            let a = (next() - 0.5) * magnitude;
            let b = a + next() * magnitude;
            for target in 2..=10 {
                let t = nice_ticks(a, b, target);
                let (first, last) = (t.values[0], *t.values.last().expect("ticks"));
                assert!(first <= a && last >= b, "{a}..{b}: {t:?}");
                assert!(
                    (2..=2 * target + 3).contains(&t.values.len()),
                    "{a}..{b} target {target}: {t:?}"
                );
                let mantissa = t.step / 10f64.powf(t.step.log10().floor());
                assert!(
                    [1.0, 2.0, 5.0, 10.0].iter().any(|m| (mantissa - m).abs() < 1e-6),
                    "{t:?}"
                );
                assert!(t.values.windows(2).all(|w| w[1] > w[0]), "{t:?}");
            }
        }
    }

    #[test]
    fn number_labels_use_suffixes_and_consistent_decimals() {
        let t = nice_ticks(1234.0, 98765.0, 5);
        assert_eq!(
            number_labels(&t.values, t.step),
            ["0", "20k", "40k", "60k", "80k", "100k"]
        );
        let t = nice_ticks(0.0, 1500.0, 3);
        assert_eq!(number_labels(&t.values, t.step), ["0", "0.5k", "1.0k", "1.5k"]);
        let t = nice_ticks(0.0, 1.2e6, 6);
        assert_eq!(number_labels(&t.values, t.step)[3], "0.6M");
        assert_eq!(number_labels(&[1.2e6], 0.1e6), ["1.2M"]);
        let t = nice_ticks(1000.0, 1005.0, 5);
        assert_eq!(
            number_labels(&t.values, t.step),
            ["1000", "1001", "1002", "1003", "1004", "1005"]
        );
        let t = nice_ticks(0.0, 0.4, 5);
        assert_eq!(number_labels(&t.values, t.step), ["0", "0.1", "0.2", "0.3", "0.4"]);
        let t = nice_ticks(-2.0, 2.0, 4);
        assert_eq!(number_labels(&t.values, t.step), ["−2", "−1", "0", "1", "2"]);
        let t = nice_ticks(0.0, 3e-7, 3);
        assert_eq!(number_labels(&t.values, t.step), ["0", "1e-7", "2e-7", "3e-7"]);
        let t = nice_ticks(0.0, 4e18, 4);
        assert_eq!(number_labels(&t.values, t.step)[4], "4e18");
    }

    #[test]
    fn percent_and_time_labels() {
        let t = nice_ticks(0.0, 0.4, 5);
        assert_eq!(
            percent_labels(&t.values, t.step),
            ["0 %", "10 %", "20 %", "30 %", "40 %"]
        );
        assert_eq!(percent_labels(&[0.3], 0.1), ["30 %"]);
        let t = time_ticks(0.0, 7200.0, 4);
        assert_eq!(
            time_labels(&t.values, t.step, 0.0),
            ["00:00", "00:30", "01:00", "01:30", "02:00"]
        );
        // Relative to the first value, whatever the epoch.
        let start = 1_700_000_123.0;
        let t = time_ticks(start, start + 95.0, 5);
        assert_eq!(t.step, 30.0);
        assert_eq!(
            time_labels(&t.values, t.step, start),
            ["00:00:00", "00:00:30", "00:01:00", "00:01:30", "00:02:00"]
        );
        let t = time_ticks(0.0, 30.0 * 86400.0, 5);
        assert_eq!(t.step, 5.0 * 86400.0);
        assert_eq!(time_labels(&t.values, t.step, 0.0)[1], "120:00");
    }

    #[test]
    fn escaping() {
        assert_eq!(
            escape(r#"A & B <c> "d" 'e'"#),
            "A &amp; B &lt;c&gt; &quot;d&quot; &#39;e&#39;"
        );
        assert_eq!(escape("bell\u{7}\u{0}ok\ttab"), "bellok tab");
        let svg = Chart::new("P&L <draft>", "x < 1", "y & z")
            .series(Series::new("a&b", [(0.0, 1.0), (1.0, 2.0)]))
            .to_svg();
        assert_well_formed(&svg);
        assert!(svg.contains("P&amp;L &lt;draft&gt;") && svg.contains("a&amp;b"));
        assert!(!svg.contains("P&L") && !svg.contains("<draft>"));
    }

    #[test]
    fn non_finite_points_are_skipped() {
        let points = vec![
            (0.0, 1.0),
            (f64::NAN, 2.0),
            (1.0, f64::INFINITY),
            (2.0, 3.0),
            (f64::NEG_INFINITY, 0.0),
            (3.0, f64::NAN),
        ];
        assert_eq!(drawable_points(&points), [(0.0, 1.0), (2.0, 3.0)]);
        let chart = Chart::new("t", "x", "y").series(Series::new("s", points));
        let svg = chart.to_svg();
        assert_well_formed(&svg);
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert_eq!(
            svg.matches("<circle").count(),
            2 + 1,
            "two points plus the legend marker"
        );
        let layout = Layout::new(&chart, &[drawable_points(&chart.series[0].points)]);
        assert!(
            layout.x.lo <= 0.0 && layout.x.hi >= 2.0 && layout.x.hi < 10.0,
            "{:?}",
            layout.x
        );
    }

    fn three_series() -> Chart {
        let cuts = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3];
        Chart::new("Throughput per job vs power cut", "power cut", "tokens/s per job")
            .x_format(AxisFormat::Percent)
            .series(Series::new("uniform cap", cuts.map(|c| (c, 5200.0 * (1.0 - 1.3 * c)))))
            .series(Series::new("proportional", cuts.map(|c| (c, 5200.0 * (1.0 - 1.1 * c)))).style(LineStyle::Dashed))
            .series(
                Series::new("PFI-aware", cuts.map(|c| (c, 5200.0 * (1.0 - 0.7 * c * c - 0.4 * c))))
                    .style(LineStyle::Step),
            )
    }

    #[test]
    fn three_series_chart() {
        let chart = three_series();
        let svg = chart.to_svg();
        assert_well_formed(&svg);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("viewBox=\"0 0 900 500\""));
        for s in &chart.series {
            assert!(svg.contains(&s.name), "{}", s.name);
        }
        assert_eq!(svg.matches("<g class=\"series\"").count(), 3);
        assert_eq!(
            svg.matches("<polyline").count() + svg.matches("<path d=\"M").count() - 1 - 1,
            3,
            "3 lines + axes + legend step"
        );
        assert!(svg.contains("stroke-dasharray"));
        assert!(svg.contains(" H") && svg.contains(" V"), "step path");
        assert!(svg.contains(">30 %<") && svg.contains("k<"), "tick labels");
        assert!(svg.contains("Throughput per job vs power cut"));
        assert_eq!(
            svg.matches("<circle").count(),
            3 * 7 + 3,
            "markers on ≤ 30 points, plus legend"
        );
    }

    #[test]
    fn legend_sits_right_of_the_plot_and_inside_the_image() {
        let chart = three_series();
        let data: Vec<_> = chart.series.iter().map(|s| drawable_points(&s.points)).collect();
        let l = Layout::new(&chart, &data);
        let legend = l.legend.expect("legend");
        assert!(
            legend.x > l.plot_right + 10.0,
            "{legend:?} vs plot right {}",
            l.plot_right
        );
        assert!(legend.x + legend.width <= l.width && legend.y + legend.height <= l.height);
        assert!(l.plot_left > 0.0 && l.plot_right - l.plot_left > 300.0 && l.plot_bottom > l.plot_top);
        // Long names are shortened rather than squeezing the plot away.
        let long = Chart::new("", "", "").series(Series::new("x".repeat(500), [(0.0, 0.0), (1.0, 1.0)]));
        let l = Layout::new(&long, &[drawable_points(&long.series[0].points)]);
        assert!(l.plot_right - l.plot_left > 400.0, "{l:?}");
    }

    #[test]
    fn empty_charts_render_a_no_data_note() {
        for chart in [
            Chart::new("Nothing yet", "x", "y"),
            Chart::new("Empty series", "x", "y").series(Series::new("meter", [])),
            Chart::new("Only non-finite", "t", "W")
                .x_format(AxisFormat::Time)
                .series(Series::new("meter", [(f64::NAN, 1.0)])),
        ] {
            let svg = chart.to_svg();
            assert_well_formed(&svg);
            assert!(svg.contains(">no data<"), "{svg}");
            assert!(!svg.contains("NaN"));
        }
        assert!(
            Chart::new("", "", "")
                .series(Series::new("meter", []))
                .to_svg()
                .contains("meter (no data)")
        );
    }

    #[test]
    fn degenerate_data_still_renders() {
        let cases = [
            Chart::new("one point", "x", "y").series(Series::new("p", [(3.0, 4.0)])),
            Chart::new("flat", "x", "y").series(Series::new("p", [(0.0, 7.0), (1.0, 7.0), (2.0, 7.0)])),
            Chart::new("flat zero", "x", "y")
                .y_from_zero(true)
                .series(Series::new("p", [(0.0, 0.0), (1.0, 0.0)])),
            Chart::new("huge", "x", "y").series(Series::new("p", [(0.0, 1e9), (1.0, 3.5e9), (2.0, f64::MAX)])),
            Chart::new("tiny", "x", "y").series(Series::new("p", [(1e-12, 1e-9), (2e-12, 3e-9)])),
            Chart::new("wide", "x", "y").series(Series::new("p", [(-1e300, -1e300), (1e300, 1e300)])),
            Chart::new("tiny image", "x", "y")
                .size(0, 0)
                .series(Series::new("p", [(0.0, 1.0), (1.0, 2.0)])),
            Chart::new("many", "x", "y").size(400, 250).series(Series::new(
                "p",
                (0..100_000).map(|i| (f64::from(i), f64::from(i % 97))),
            )),
        ];
        for chart in cases {
            let svg = chart.to_svg();
            assert_well_formed(&svg);
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{}: {svg}", chart.title);
            let data: Vec<_> = chart.series.iter().map(|s| drawable_points(&s.points)).collect();
            let l = Layout::new(&chart, &data);
            assert!(l.y.ticks.len() >= 2 && l.x.ticks.len() >= 2, "{}: {l:?}", chart.title);
            let mut labels = l.y.labels.clone();
            labels.dedup();
            assert_eq!(
                labels.len(),
                l.y.labels.len(),
                "{}: distinct y labels {:?}",
                chart.title,
                l.y.labels
            );
        }
        let flat_zero = Chart::new("", "", "")
            .y_from_zero(true)
            .series(Series::new("p", [(0.0, 0.0)]));
        let l = Layout::new(&flat_zero, &[vec![(0.0, 0.0)]]);
        assert_eq!((l.y.lo, l.y.hi), (0.0, 1.0));
        assert!(
            Chart::new("huge", "", "")
                .series(Series::new("p", [(0.0, 1e9), (1.0, 3.5e9)]))
                .to_svg()
                .contains("G<")
        );
    }

    #[test]
    fn markers_only_on_sparse_series_and_many_series_stay_distinct() {
        let dense = Chart::new("", "", "").series(Series::new("d", (0..31).map(|i| (f64::from(i), 1.0))));
        assert_eq!(dense.to_svg().matches("<circle").count(), 0);
        let mut many = Chart::new("", "", "");
        for i in 0..9 {
            many = many.series(Series::new(
                format!("s{i}"),
                [(0.0, f64::from(i)), (1.0, f64::from(i) + 1.0)],
            ));
        }
        let svg = many.to_svg();
        assert_well_formed(&svg);
        assert_eq!(
            svg.matches("stroke-dasharray=\"1.5 3.5\"").count(),
            2 * 2,
            "lines and legend swatches of series 8 and 9"
        );
    }

    #[test]
    fn time_axis_chart_with_ceiling_steps() {
        let start = 1_750_000_000.0;
        let meter: Vec<(f64, f64)> = (0..=240)
            .map(|i| (start + 15.0 * f64::from(i), 900.0 + 40.0 * (f64::from(i) / 9.0).sin()))
            .collect();
        let ceiling = [
            (start, 1000.0),
            (start + 1200.0, 850.0),
            (start + 3000.0, 1000.0),
            (start + 3600.0, 1000.0),
        ];
        let svg = Chart::new("Meter vs ceiling", "elapsed (hh:mm)", "kW")
            .x_format(AxisFormat::Time)
            .y_from_zero(true)
            .series(Series::new("meter", meter))
            .series(Series::new("ceiling", ceiling).style(LineStyle::Step))
            .to_svg();
        assert_well_formed(&svg);
        assert!(svg.contains(">00:00<") && svg.contains(">01:00<"), "{svg}");
    }

    /// A small XML well-formedness check: balanced, properly nested tags with one root, quoted
    /// and unique attributes, and no bare `<` or `&` in text or attribute values. Enough for
    /// the subset of XML this module writes (no CDATA, no comments containing `>`).
    fn assert_well_formed(doc: &str) {
        fn check_chars(s: &str, doc: &str) {
            assert!(!s.contains('<'), "bare < in {s:?}");
            let mut rest = s;
            while let Some(i) = rest.find('&') {
                rest = &rest[i + 1..];
                let end = rest.find(';').unwrap_or_else(|| panic!("bare & in {s:?}\n{doc}"));
                let entity = &rest[..end];
                let ok = ["amp", "lt", "gt", "quot", "apos"].contains(&entity)
                    || entity
                        .strip_prefix('#')
                        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
                assert!(ok, "bad entity &{entity}; in {doc}");
            }
            assert!(
                !s.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')),
                "control char in {s:?}"
            );
        }
        let mut stack: Vec<&str> = Vec::new();
        let mut roots = 0;
        let mut rest = doc;
        loop {
            let Some(open) = rest.find('<') else {
                assert!(rest.trim().is_empty() || !stack.is_empty(), "text after root");
                check_chars(rest, doc);
                break;
            };
            check_chars(&rest[..open], doc);
            if stack.is_empty() {
                assert!(rest[..open].trim().is_empty(), "text outside root: {:?}", &rest[..open]);
            }
            let close = rest[open..].find('>').expect("unterminated tag") + open;
            let tag = &rest[open + 1..close];
            rest = &rest[close + 1..];
            if tag.starts_with('?') || tag.starts_with("!--") {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name.trim()), "mismatched </{name}>");
                continue;
            }
            let self_closing = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
            let name = &body[..name_end];
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_:".contains(c)),
                "bad tag name {name:?}"
            );
            let mut attrs = body[name_end..].trim();
            let mut seen = Vec::new();
            while !attrs.is_empty() {
                let eq = attrs
                    .find('=')
                    .unwrap_or_else(|| panic!("attribute without value in <{tag}>"));
                let key = attrs[..eq].trim();
                assert!(
                    !key.is_empty() && !key.contains(char::is_whitespace),
                    "bad attribute {key:?} in <{tag}>"
                );
                assert!(!seen.contains(&key), "duplicate attribute {key} in <{tag}>");
                seen.push(key);
                let after = attrs[eq + 1..].trim_start();
                let quote = after.chars().next().expect("attribute value");
                assert!(quote == '"' || quote == '\'', "unquoted attribute in <{tag}>");
                let end = after[1..].find(quote).expect("unterminated attribute") + 1;
                check_chars(&after[1..end], doc);
                attrs = after[end + 1..].trim_start();
            }
            if stack.is_empty() {
                roots += 1;
                assert_eq!(name, "svg", "root element");
            }
            if !self_closing {
                stack.push(name);
            }
        }
        assert!(stack.is_empty(), "unclosed {stack:?}");
        assert_eq!(roots, 1, "exactly one root element");
    }

    #[test]
    fn the_well_formedness_check_catches_errors() {
        for bad in [
            "<svg><g></svg>",
            "<svg>a & b</svg>",
            "<svg x=1/>",
            "<svg/><svg/>",
            "<svg a=\"1\" a=\"2\"/>",
        ] {
            assert!(std::panic::catch_unwind(|| assert_well_formed(bad)).is_err(), "{bad}");
        }
        assert_well_formed("<svg a=\"&amp;\"><g/>x &lt; y</svg>\n");
    }

    /// A clock axis reads local wall-clock time in the zone, with each day's DST offset, and
    /// ticks fall on whole local hours; bands and markers are drawn and well formed.
    #[test]
    fn a_clock_axis_reads_local_time_and_bands_and_markers_render() {
        let tz: chrono_tz::Tz = "America/New_York".parse().expect("zone");
        // 13:00–17:00 EDT on 14 July 2026 (UTC−4) = 17:00–21:00 UTC.
        let t0 = 1_784_048_400.0; // 2026-07-14T17:00:00Z
        let points: Vec<(f64, f64)> = (0..=16).map(|i| (t0 + 900.0 * f64::from(i), 100.0)).collect();
        let svg = Chart::new(
            "t",
            clock_axis_label(tz, chrono::DateTime::from_timestamp(t0 as i64, 0).expect("t")),
            "kW",
        )
        .x_format(AxisFormat::Clock(tz))
        .y_from_zero(true)
        .series(Series::new("meter", points))
        .band(Band {
            from: t0 + 3600.0,
            to: t0 + 7200.0,
            label: "event in force".into(),
            colour: "#e69f00",
        })
        .marker(Marker {
            at: t0 + 5400.0,
            label: "opted out by a&b".into(),
        })
        .to_svg();
        assert_well_formed(&svg);
        assert!(svg.contains(">14:00<") && svg.contains(">16:00<"), "local hours: {svg}");
        assert!(!svg.contains(">18:00<"), "UTC hours are not local ones");
        assert!(svg.contains("local time, America/New_York (EDT, UTC−04:00)"));
        assert!(svg.contains("class=\"band\"") && svg.contains("event in force"));
        assert!(svg.contains("class=\"marker\"") && svg.contains("opted out by a&amp;b"));
        assert!(svg.contains(">0</text>"), "the y axis from zero");
        // Winter: the same local hours are UTC−5.
        let winter = 1_796_234_400.0; // 2026-12-02T18:00:00Z = 13:00 EST
        let labels = clock_labels(&[winter, winter + 3600.0], 3600.0, tz);
        assert_eq!(labels, ["13:00", "14:00"]);
        let ticks = clock_ticks(winter + 60.0, winter + 3.0 * 3600.0, 3, tz);
        assert!(
            ticks.values.iter().all(|v| (v - winter).rem_euclid(3600.0) == 0.0),
            "{ticks:?}"
        );
    }
}
