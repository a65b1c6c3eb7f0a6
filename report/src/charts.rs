//! PNG charts of one node's timeline, for the HTML part of the end-of-job mail (inline, `cid:`).
//!
//! Drawn with plotters' lean feature set (bitmap backend, line and area series, `ab_glyph` text) into
//! an RGB buffer and encoded with the `png` crate: no font-kit, fontconfig or freetype, and no file is
//! written. Labels use the DejaVu Sans TTF bundled under `report-templates/fonts/` (licence beside it),
//! compiled in so a chart never depends on what fonts a compute node has.
//!
//! Gaps stay gaps: a point whose value is `None` (not measured) splits the line rather than drawing 0.
//! An empty timeline gives a chart with axes and "no samples"; a single point is drawn as a dot.

use crate::present::clean;
use jobscope_model::summary::{JobSummary, NodeSummary, Point};
use plotters::prelude::*;
use std::sync::OnceLock;

/// DejaVu Sans 2.37 (Bitstream Vera licence, see `report-templates/fonts/LICENSE-DejaVu.txt`).
pub const FONT_TTF: &[u8] = include_bytes!("../../report-templates/fonts/DejaVuSans.ttf");
/// The family name the font is registered under with plotters, and the one every label asks for.
pub(crate) const FAMILY: &str = "sans-serif";

/// Smallest and largest chart accepted, per side, in pixels.
pub const MIN_WIDTH: u32 = 64;
pub const MIN_HEIGHT: u32 = 48;
pub const MAX_SIDE: u32 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error(
        "chart size {0}x{1} px is out of range ({MIN_WIDTH}x{MIN_HEIGHT} to {MAX_SIDE}x{MAX_SIDE})"
    )]
    Size(u32, u32),
    #[error("the bundled chart font could not be loaded")]
    Font,
    #[error("drawing the chart: {0}")]
    Draw(String),
    #[error("encoding the PNG: {0}")]
    Encode(#[from] png::EncodingError),
}

/// Registers the bundled font with plotters once per process (plotters keeps a global font table).
pub(crate) fn font_ready() -> Result<(), ChartError> {
    static READY: OnceLock<bool> = OnceLock::new();
    let ok = *READY.get_or_init(|| {
        plotters::style::register_font(FAMILY, FontStyle::Normal, FONT_TTF).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(ChartError::Font)
    }
}

pub(crate) fn draw_err<E: std::fmt::Display>(e: E) -> ChartError {
    ChartError::Draw(e.to_string())
}

/// Busy cores over time on this node (mean per interval as a line, per-interval peak as a shaded band)
/// against the cores allocated there (a red line). `axis_s`: the job's time axis ([`job_axis_s`]),
/// shared by every chart of the job; spans without a reading are shaded and labelled.
pub fn busy_cores_png(
    n: &NodeSummary,
    axis_s: f64,
    width: u32,
    height: u32,
) -> Result<Vec<u8>, ChartError> {
    let mean = segments(&n.timeline, |p| p.busy_cores);
    let missing = missing_spans(&n.timeline, axis_s, |p| p.busy_cores);
    let peak = segments(&n.timeline, |p| p.busy_cores_max.or(p.busy_cores));
    let alloc = n.alloc_cores.map(f64::from);
    let spec = Spec {
        title: format!("{}: busy cores", clean(&n.node, 40)),
        axis_s,
        missing,
        lines: vec![Line {
            label: "busy (mean)".into(),
            color: LINE,
            segs: mean,
        }],
        peak,
        peak_label: "busy (peak)".into(),
        limit: alloc,
        limit_label: match n.alloc_cores {
            Some(c) => format!("allocated ({c})"),
            None => "allocated".into(),
        },
        scale: 1.0,
        unit: "cores".into(),
        y_top: None,
    };
    render(&spec, width, height)
}

/// Memory charged to the job's cgroup on this node over time (mean per interval as a line, peak as a
/// shaded band) against its limit (the cgroup limit, else the allocation), as a red line. `axis_s`
/// as for [`busy_cores_png`].
pub fn memory_png(
    n: &NodeSummary,
    axis_s: f64,
    width: u32,
    height: u32,
) -> Result<Vec<u8>, ChartError> {
    let as_f = |b: Option<u64>| b.map(|b| b as f64);
    let mean = segments(&n.timeline, |p| as_f(p.mem_bytes));
    let missing = missing_spans(&n.timeline, axis_s, |p| as_f(p.mem_bytes));
    let peak = segments(&n.timeline, |p| as_f(p.mem_bytes_max.or(p.mem_bytes)));
    let limit = n.mem.limit_bytes.or(n.alloc_mem_bytes).map(|b| b as f64);
    // One unit for the whole axis, picked from the largest value drawn.
    let top = peak
        .iter()
        .flatten()
        .map(|&(_, y)| y)
        .chain(limit)
        .fold(0.0, f64::max);
    let (scale, unit) = byte_unit(top);
    let spec = Spec {
        title: format!("{}: memory", clean(&n.node, 40)),
        axis_s,
        missing,
        lines: vec![Line {
            label: "memory (mean)".into(),
            color: LINE,
            segs: mean,
        }],
        peak,
        peak_label: "memory (peak)".into(),
        limit,
        limit_label: match limit {
            Some(l) => format!("limit ({})", crate::present::fmt_bytes(Some(l as u64))),
            None => "limit".into(),
        },
        scale,
        unit: unit.into(),
        y_top: None,
    };
    render(&spec, width, height)
}

/// The most nodes [`cpu_wait_png`] draws, one colour each.
pub const MAX_CPU_WAIT_NODES: usize = NODE_COLORS.len();

/// The nodes [`cpu_wait_png`] draws of a job's `nodes`: of its first `max` (the ones the mail
/// charts) and at most [`MAX_CPU_WAIT_NODES`], those whose timeline has the kernel view's waiting
/// for a CPU. Empty, so no chart, when none has two readings of it (a line needs two): a job
/// without a collector, or too short for a second sample.
pub fn cpu_wait_nodes(nodes: &[NodeSummary], max: usize) -> Vec<&NodeSummary> {
    let readings = |n: &NodeSummary| {
        n.timeline
            .iter()
            .filter(|p| p.t_s.is_finite() && p.cpu_wait_pct.is_some_and(f64::is_finite))
            .count()
    };
    let nodes: Vec<&NodeSummary> = nodes
        .iter()
        .take(max.min(MAX_CPU_WAIT_NODES))
        .filter(|n| readings(n) > 0)
        .collect();
    if nodes.iter().any(|n| readings(n) >= 2) {
        nodes
    } else {
        Vec::new()
    }
}

/// The share of the job's runnable time its threads spent waiting for a CPU, over time, one line
/// per node (the kernel view, `Point::cpu_wait_pct`): high where more threads were runnable than
/// there were cores for them. `nodes` from [`cpu_wait_nodes`]; `axis_s` as for
/// [`busy_cores_png`]. Spans where no node has a reading are shaded.
pub fn cpu_wait_png(
    nodes: &[&NodeSummary],
    axis_s: f64,
    width: u32,
    height: u32,
) -> Result<Vec<u8>, ChartError> {
    let wait = |p: &Point| p.cpu_wait_pct;
    let lines = nodes
        .iter()
        .zip(NODE_COLORS.iter().cycle())
        .map(|(n, &color)| Line {
            label: clean(&n.node, 24),
            color,
            segs: segments(&n.timeline, wait),
        })
        .collect();
    // Shaded where no line can be: the spans every node is missing.
    let missing = nodes
        .iter()
        .map(|n| missing_spans(&n.timeline, axis_s, wait))
        .reduce(|a, b| intersect_spans(&a, &b))
        .unwrap_or_default();
    let title = match nodes {
        [n] => format!("{}: waiting for a CPU", clean(&n.node, 40)),
        _ => "Waiting for a CPU, by node".into(),
    };
    let spec = Spec {
        title,
        axis_s,
        missing,
        lines,
        peak: Vec::new(),
        peak_label: String::new(),
        limit: None,
        limit_label: String::new(),
        scale: 1.0,
        unit: "waiting for a CPU, % of runnable time".into(),
        y_top: Some(100.0),
    };
    render(&spec, width, height)
}

/// Where both sorted, disjoint span lists `a` and `b` are.
fn intersect_spans(a: &[(f64, f64)], b: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (from, to) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if to > from {
            out.push((from, to));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The time axis of a job's charts, seconds: its elapsed time, or the last point of any node's
/// timeline if later, so every chart of the job runs to the job's end (a series that stops early
/// shows where its readings stop, issue 19 §3).
pub fn job_axis_s(s: &JobSummary) -> f64 {
    s.nodes
        .iter()
        .flat_map(|n| n.timeline.iter().map(|p| p.t_s).chain([n.elapsed_s]))
        .chain([s.elapsed_s])
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max)
}

/// The spans of `[0, axis_s]` where the series `f` has no reading: from the last point that had one
/// (or 0) to the next point that has one (or the axis's end), around every run of points without a
/// value, and after the last point when the axis runs past it.
fn missing_spans(
    timeline: &[Point],
    axis_s: f64,
    f: impl Fn(&Point) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let has = |p: &Point| p.t_s.is_finite() && f(p).is_some_and(f64::is_finite);
    let mut out = Vec::new();
    let mut last_seen = 0.0_f64;
    let mut gap_from: Option<f64> = None;
    for p in timeline.iter().filter(|p| p.t_s.is_finite()) {
        if has(p) {
            if let Some(from) = gap_from.take() {
                out.push((from, p.t_s.max(from)));
            }
            last_seen = p.t_s.max(0.0);
        } else if gap_from.is_none() {
            gap_from = Some(last_seen);
        }
    }
    let end = if axis_s.is_finite() { axis_s } else { 0.0 };
    match gap_from {
        Some(from) => out.push((from, end.max(from))),
        // The axis outlasts the series' last point only when other readings (or the job) went on.
        None if timeline.iter().any(has) && end > last_seen => {
            let cadence = timeline
                .windows(2)
                .map(|w| w[1].t_s - w[0].t_s)
                .filter(|d| d.is_finite() && *d > 0.0)
                .fold(f64::INFINITY, f64::min);
            // Less than one sampling interval after the last point is the normal end of a job.
            if end - last_seen > if cadence.is_finite() { cadence } else { 0.0 } {
                out.push((last_seen, end));
            }
        }
        None => {}
    }
    out.retain(|(a, b)| b > a);
    out
}

/// Binary unit for an axis whose largest value is `max_bytes`: (divisor, name).
fn byte_unit(max_bytes: f64) -> (f64, &'static str) {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut i = 0;
    let mut scale = 1.0;
    while max_bytes / scale >= 1024.0 && i < UNITS.len() - 1 {
        scale *= 1024.0;
        i += 1;
    }
    (scale, UNITS[i])
}

/// Unbroken runs of measured points `(t_s, value)`; a missing or non-finite value ends a run.
fn segments(timeline: &[Point], f: impl Fn(&Point) -> Option<f64>) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut cur: Vec<(f64, f64)> = Vec::new();
    for p in timeline {
        match f(p) {
            Some(v) if v.is_finite() && p.t_s.is_finite() => cur.push((p.t_s.max(0.0), v.max(0.0))),
            _ => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The mean line's colour (the only line of a node's busy-cores and memory charts).
const LINE: RGBColor = RGBColor(33, 113, 181);
/// One colour per node where a chart has a line per node: [`LINE`] first, then colours apart
/// from it, from the pale band, the red limit and the sand of the gaps.
const NODE_COLORS: [RGBColor; 8] = [
    LINE,
    RGBColor(230, 85, 13),
    RGBColor(49, 163, 84),
    RGBColor(117, 107, 177),
    RGBColor(140, 86, 75),
    RGBColor(231, 41, 138),
    RGBColor(99, 99, 99),
    RGBColor(23, 190, 207),
];

/// One line of a chart: unbroken runs of `(t_s, value)`, drawn in `color`, named in the legend.
struct Line {
    label: String,
    color: RGBColor,
    segs: Vec<Vec<(f64, f64)>>,
}

/// What one chart shows. Values are in raw units (seconds, cores or bytes); `scale` divides y for display.
struct Spec {
    title: String,
    /// The job's time axis, seconds (the x axis runs from 0 to it, or to the last point if later).
    axis_s: f64,
    /// Spans without a reading of this series, seconds: shaded and labelled "no reading".
    missing: Vec<(f64, f64)>,
    /// The means (one per node where a chart compares nodes).
    lines: Vec<Line>,
    /// Per-interval peaks, a shaded band under the lines (none: no band).
    peak: Vec<Vec<(f64, f64)>>,
    peak_label: String,
    limit: Option<f64>,
    limit_label: String,
    scale: f64,
    unit: String,
    /// The top of the y axis where it is fixed (a percentage's 100), in display units; else it
    /// is a little above the largest value drawn.
    y_top: Option<f64>,
}

/// Seconds per x-axis unit and its name, for a timeline spanning `span_s`.
fn time_unit(span_s: f64) -> (f64, &'static str) {
    if span_s <= 180.0 {
        (1.0, "s")
    } else if span_s <= 3.0 * 3600.0 {
        (60.0, "min")
    } else {
        (3600.0, "h")
    }
}

fn render(spec: &Spec, width: u32, height: u32) -> Result<Vec<u8>, ChartError> {
    png_of(width, height, |rgb| draw(spec, rgb, width, height))
}

/// A chart of `width` × `height` pixels (within [`MIN_WIDTH`]..[`MAX_SIDE`]) drawn by `draw` into
/// an RGB buffer, with the font registered, encoded as PNG: every chart of jobscope is made here.
pub(crate) fn png_of(
    width: u32,
    height: u32,
    draw: impl FnOnce(&mut [u8]) -> Result<(), ChartError>,
) -> Result<Vec<u8>, ChartError> {
    if !(MIN_WIDTH..=MAX_SIDE).contains(&width) || !(MIN_HEIGHT..=MAX_SIDE).contains(&height) {
        return Err(ChartError::Size(width, height));
    }
    font_ready()?;
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    draw(&mut rgb)?;
    let mut out = Vec::with_capacity(16 * 1024);
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header()?;
    w.write_image_data(&rgb)?;
    w.finish()?;
    Ok(out)
}

/// The chart's coordinates: the time axis's unit (seconds per unit, name) and the axes' tops in
/// display units.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Axes {
    t_div: f64,
    t_unit: &'static str,
    x_max: f64,
    y_max: f64,
}

/// The axes for `spec`: time runs to the job's end or the last point drawn, whichever is later;
/// y to the fixed top, or a little above the largest value (the limit included).
fn axes(spec: &Spec) -> Axes {
    let t_end = spec
        .peak
        .iter()
        .chain(spec.lines.iter().flat_map(|l| &l.segs))
        .flatten()
        .map(|&(t, _)| t)
        .chain(spec.missing.iter().map(|&(_, b)| b))
        .chain([spec.axis_s].into_iter().filter(|t| t.is_finite()))
        .fold(0.0, f64::max);
    let (t_div, t_unit) = time_unit(t_end);
    let y_top = spec
        .peak
        .iter()
        .chain(spec.lines.iter().flat_map(|l| &l.segs))
        .flatten()
        .map(|&(_, y)| y)
        .chain(spec.limit)
        .fold(0.0, f64::max)
        / spec.scale;
    Axes {
        t_div,
        t_unit,
        x_max: (t_end / t_div).max(1.0),
        y_max: match spec.y_top {
            Some(top) => top,
            None if y_top > 0.0 => y_top * 1.1,
            None => 1.0,
        },
    }
}

/// A chart's plotting area, in display units.
type Plot<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The light blue of the peak band.
const BAND_COLOR: RGBColor = RGBColor(158, 202, 225);

/// Draws `spec` into `rgb`: the frame and grid, then the data ([`draw_data`]), then the legend or,
/// with nothing to draw, "no samples".
fn draw(spec: &Spec, rgb: &mut [u8], width: u32, height: u32) -> Result<(), ChartError> {
    let root = BitMapBackend::with_buffer(rgb, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let ax = axes(spec);
    // Text scales with the image, within readable bounds.
    let font_px = (f64::from(height) / 16.0).clamp(9.0, 28.0);
    let small = (FAMILY, font_px * 0.85).into_font();
    let roomy = width >= 200 && height >= 120;
    let mut builder = ChartBuilder::on(&root);
    builder.margin((font_px * 0.5) as u32);
    if roomy {
        builder
            .caption(&spec.title, (FAMILY, font_px))
            .x_label_area_size((font_px * 2.4) as u32)
            .y_label_area_size((font_px * 3.6) as u32);
    }
    let mut chart = builder
        .build_cartesian_2d(0.0..ax.x_max, 0.0..ax.y_max)
        .map_err(draw_err)?;
    if roomy {
        draw_mesh(&mut chart, spec, &ax, &small)?;
    }
    draw_data(&mut chart, spec, &ax, roomy)?;
    let empty = spec.lines.iter().all(|l| l.segs.is_empty()) && spec.peak.is_empty();
    if empty {
        let (w, h) = root.dim_in_pixel();
        let style = TextStyle::from((FAMILY, font_px).into_font())
            .color(&RGBColor(120, 120, 120))
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Center,
            ));
        root.draw_text("no samples", &style, (w as i32 / 2, h as i32 / 2))
            .map_err(draw_err)?;
    } else if roomy {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(small)
            .background_style(WHITE.mix(0.7))
            .border_style(RGBColor(200, 200, 200))
            .draw()
            .map_err(draw_err)?;
    }
    root.present().map_err(draw_err)?;
    Ok(())
}

/// The grid, the axes' labels and their descriptions.
fn draw_mesh(
    chart: &mut Plot<'_, '_>,
    spec: &Spec,
    ax: &Axes,
    small: &FontDesc<'_>,
) -> Result<(), ChartError> {
    let y_fmt = |v: &f64| axis_label(*v, ax.y_max);
    let x_fmt = |v: &f64| axis_label(*v, ax.x_max);
    chart
        .configure_mesh()
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(TRANSPARENT)
        .label_style(small.clone())
        .axis_desc_style(small.clone())
        .x_desc(format!("time since start ({})", ax.t_unit))
        .y_desc(spec.unit.clone())
        .x_labels(6)
        .y_labels(5)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .draw()
        .map_err(draw_err)
}

/// An axis label: whole numbers on an axis that reaches 5, one decimal below.
fn axis_label(v: f64, axis_max: f64) -> String {
    if axis_max >= 5.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The data, bottom to top: spans without a reading, the peak band, the lines, single points, the
/// limit. Each kind is labelled once for the legend (when `roomy`).
fn draw_data(
    chart: &mut Plot<'_, '_>,
    spec: &Spec,
    ax: &Axes,
    roomy: bool,
) -> Result<(), ChartError> {
    let t_div = ax.t_div;
    let xy = |&(t, y): &(f64, f64)| (t / t_div, y / spec.scale);
    let band = BAND_COLOR;
    let limit_color = RGBColor(203, 24, 29);
    // A pale sand, apart from the grey grid and the blues of the data.
    let gap_color = RGBColor(240, 228, 190);

    // Where this series has no reading: shaded, under the data, so a line that stops is not
    // mistaken for the job's end.
    for (i, &(a, b)) in spec.missing.iter().enumerate() {
        let s = chart
            .draw_series([Rectangle::new(
                [(a / t_div, 0.0), (b / t_div, ax.y_max)],
                gap_color.mix(0.8).filled(),
            )])
            .map_err(draw_err)?;
        if i == 0 && roomy {
            s.label("no reading").legend(move |(x, y)| {
                Rectangle::new([(x, y - 4), (x + 14, y + 4)], gap_color.filled())
            });
        }
    }

    for (i, seg) in spec.peak.iter().enumerate() {
        let s = chart
            .draw_series(AreaSeries::new(
                seg.iter().map(xy),
                0.0,
                band.mix(0.6).filled(),
            ))
            .map_err(draw_err)?;
        if i == 0 && roomy {
            s.label(spec.peak_label.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 14, y + 4)], band.filled()));
        }
    }
    for l in &spec.lines {
        let line = l.color;
        for (i, seg) in l.segs.iter().enumerate() {
            let s = chart
                .draw_series(LineSeries::new(seg.iter().map(xy), line.stroke_width(2)))
                .map_err(draw_err)?;
            if i == 0 && roomy {
                s.label(l.label.as_str()).legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 14, y)], line.stroke_width(2))
                });
            }
        }
    }
    // A run of one point draws no line: mark it so a one-sample job still shows its value.
    for (runs, color) in
        std::iter::once((&spec.peak, band)).chain(spec.lines.iter().map(|l| (&l.segs, l.color)))
    {
        let dots = runs.iter().filter(|s| s.len() == 1).map(|s| xy(&s[0]));
        chart
            .draw_series(dots.map(|p| Circle::new(p, 3, color.filled())))
            .map_err(draw_err)?;
    }

    if let Some(l) = spec.limit {
        let l = l / spec.scale;
        let s = chart
            .draw_series(LineSeries::new(
                [(0.0, l), (ax.x_max, l)],
                limit_color.stroke_width(2),
            ))
            .map_err(draw_err)?;
        if roomy {
            s.label(spec.limit_label.as_str()).legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 14, y)], limit_color.stroke_width(2))
            });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jobscope_model::summary::MemTotals;

    fn node(timeline: Vec<Point>) -> NodeSummary {
        NodeSummary {
            node: "node-1".into(),
            job_id: 1234,
            uid: 1000,
            start_unix_ms: 1_795_305_466_000,
            end_unix_ms: 1_795_305_466_000 + 3_600_000,
            elapsed_s: 3600.0,
            alloc_cores: Some(8),
            alloc_mem_bytes: Some(16 << 30),
            mem: MemTotals {
                limit_bytes: Some(16 << 30),
                ..Default::default()
            },
            timeline,
            ..Default::default()
        }
    }

    fn point(t_s: f64, busy: Option<f64>, mem: Option<u64>) -> Point {
        Point {
            t_s,
            busy_cores: busy,
            busy_cores_max: busy.map(|b| b * 1.2),
            mem_bytes: mem,
            mem_bytes_max: mem.map(|m| m + (256 << 20)),
            io_bytes_per_s: None,
            tasks: None,
            cpu_wait_pct: None,
            runnable_threads: None,
        }
    }

    /// Decodes `bytes` as PNG and returns (width, height).
    fn png_size(bytes: &[u8]) -> (u32, u32) {
        let dec = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = dec.read_info().expect("a PNG header");
        let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
        let info = reader.next_frame(&mut buf).expect("a whole frame");
        (info.width, info.height)
    }

    /// Decodes `bytes` as an RGB(A) PNG: (width, height, rows of RGB pixels).
    pub(crate) fn png_rgb(bytes: &[u8]) -> (u32, u32, Vec<Vec<[u8; 3]>>) {
        let dec = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = dec.read_info().expect("a PNG header");
        let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
        let info = reader.next_frame(&mut buf).expect("a whole frame");
        let px = info.color_type.samples();
        assert!(px >= 3, "{:?}", info.color_type);
        let rows = buf[..info.buffer_size()]
            .chunks(info.line_size)
            .map(|row| {
                row.chunks(px)
                    .take(info.width as usize)
                    .map(|p| [p[0], p[1], p[2]])
                    .collect()
            })
            .collect();
        (info.width, info.height, rows)
    }

    /// The mean line's colour in [`draw`].
    const LINE: [u8; 3] = [33, 113, 181];

    /// Per pixel column, the lowest row (largest y) drawn in `color`, if any.
    fn lowest_in_columns(rows: &[Vec<[u8; 3]>], width: u32, color: [u8; 3]) -> Vec<Option<usize>> {
        (0..width as usize)
            .map(|x| (0..rows.len()).rev().find(|&y| rows[y][x] == color))
            .collect()
    }

    /// A timeline that rises from 0.5 to `top` at its middle and falls back (61 points over 1 h).
    fn peak_in_the_middle(top: f64) -> Vec<Point> {
        (0..=60)
            .map(|i| {
                let rise = 1.0 - (i as f64 - 30.0).abs() / 30.0;
                let v = 0.5 + (top - 0.5) * rise;
                point(
                    i as f64 * 60.0,
                    Some(v),
                    Some((v * (1u64 << 30) as f64) as u64),
                )
            })
            .collect()
    }

    /// The plotted data is in the picture: the mean line's colour runs across most of the width,
    /// and where the series peaks (the middle) it is drawn far higher than at its two ends.
    #[test]
    fn the_series_is_drawn_where_its_data_says() {
        let n = node(peak_in_the_middle(6.0));
        for png in [
            busy_cores_png(&n, n.elapsed_s, 640, 240).unwrap(),
            memory_png(&n, n.elapsed_s, 640, 240).unwrap(),
        ] {
            let (w, h, rows) = png_rgb(&png);
            let low = lowest_in_columns(&rows, w, LINE);
            let cols: Vec<usize> = (0..w as usize).filter(|&x| low[x].is_some()).collect();
            assert!(
                cols.len() > w as usize / 2,
                "the line covers {} of {w} columns",
                cols.len()
            );
            let (first, last) = (cols[0], *cols.last().unwrap());
            let mid = (first + last) / 2;
            let y_at = |x: usize| low[x].unwrap_or_else(|| panic!("no line in column {x}"));
            // Rows grow downwards: the peak is at a smaller y than both ends, by a good share of
            // the picture (0.5 -> 6 of a 0..8.8 or 0..17.6 axis).
            for end in [first + 2, last - 2] {
                assert!(
                    y_at(mid) + h as usize / 6 < y_at(end),
                    "middle y {} vs end y {} (column {end})",
                    y_at(mid),
                    y_at(end)
                );
            }
        }
    }

    /// The colour of the "no reading" shading in [`draw`]: (240, 228, 190) at 0.8 over white.
    fn is_gap_shade(p: [u8; 3]) -> bool {
        p[0].abs_diff(243) <= 3 && p[1].abs_diff(233) <= 3 && p[2].abs_diff(203) <= 3
    }

    /// Issue 19 §3: a job of 9.7 s whose memory readings stop at 5 s while its CPU readings go on.
    /// Both charts run to the job's end; the memory chart shades 5 s..9.7 s as "no reading" and its
    /// line stops where its data does, near half the width of the busy line.
    #[test]
    fn a_series_that_stops_early_shows_where_its_readings_are_missing() {
        let timeline: Vec<Point> = (1..=10)
            .map(|i| {
                let t = (i as f64 * 0.97).min(9.7);
                point(t, Some(1.0), (t <= 5.0).then_some(1 << 30))
            })
            .collect();
        let mut n = node(timeline);
        n.elapsed_s = 9.7;
        assert_eq!(missing_spans(&n.timeline, 9.7, |p| p.busy_cores), vec![]);
        let mem = missing_spans(&n.timeline, 9.7, |p| p.mem_bytes.map(|b| b as f64));
        assert!(
            mem.len() == 1 && (mem[0].0 - 4.85).abs() < 1e-9 && mem[0].1 == 9.7,
            "{mem:?}"
        );

        let right_of = |png: &[u8], color: &dyn Fn([u8; 3]) -> bool| {
            let (w, _, rows) = png_rgb(png);
            (0..w as usize)
                .filter(|&x| rows.iter().any(|r| color(r[x])))
                .max()
                .expect("the colour is drawn")
        };
        let busy = busy_cores_png(&n, 9.7, 640, 240).unwrap();
        let memory = memory_png(&n, 9.7, 640, 240).unwrap();
        let busy_end = right_of(&busy, &|p| p == LINE);
        let mem_end = right_of(&memory, &|p| p == LINE);
        let gap_end = right_of(&memory, &is_gap_shade);
        // Same axis: the busy line and the memory chart's shaded gap both reach the job's end.
        assert!(
            gap_end.abs_diff(busy_end) <= 3,
            "gap ends at {gap_end}, busy line at {busy_end}"
        );
        // The memory line stops about half-way (4.85 of 9.7 s of the plot's width).
        assert!(
            mem_end + 100 < busy_end,
            "memory line ends at {mem_end}, busy at {busy_end}"
        );
        // The busy chart has no gap to shade.
        let (w, _, rows) = png_rgb(&busy);
        let shaded = (0..w as usize)
            .filter(|&x| rows.iter().any(|r| is_gap_shade(r[x])))
            .count();
        assert!(shaded < 20, "{shaded} columns of the busy chart are shaded");
    }

    #[test]
    fn missing_spans_cover_gaps_head_and_tail() {
        let p = |t: f64, m: Option<u64>| point(t, Some(1.0), m);
        let tl = vec![
            p(30.0, None),
            p(60.0, Some(1)),
            p(90.0, None),
            p(120.0, None),
            p(150.0, Some(1)),
            p(180.0, Some(1)),
        ];
        let f = |p: &Point| p.mem_bytes.map(|b| b as f64);
        assert_eq!(
            missing_spans(&tl, 180.0, f),
            vec![(0.0, 60.0), (60.0, 150.0)]
        );
        // The axis past the last point by less than a sampling interval is the job's normal end.
        assert_eq!(
            missing_spans(&tl, 200.0, f),
            vec![(0.0, 60.0), (60.0, 150.0)]
        );
        assert_eq!(
            missing_spans(&tl, 400.0, f),
            vec![(0.0, 60.0), (60.0, 150.0), (180.0, 400.0)]
        );
        // No reading at all: the whole axis; no points: nothing to say.
        assert_eq!(missing_spans(&[p(30.0, None)], 60.0, f), vec![(0.0, 60.0)]);
        assert_eq!(missing_spans(&[], 60.0, f), vec![]);
        assert_eq!(
            missing_spans(&tl, f64::NAN, f),
            vec![(0.0, 60.0), (60.0, 150.0)]
        );
    }

    /// Both charts of `n` decode at the size asked for.
    fn both_at_size(n: &NodeSummary, w: u32, h: u32) {
        assert_eq!(
            png_size(&busy_cores_png(n, n.elapsed_s, w, h).unwrap()),
            (w, h)
        );
        assert_eq!(png_size(&memory_png(n, n.elapsed_s, w, h).unwrap()), (w, h));
    }

    fn ramp(n: usize) -> Vec<Point> {
        (0..n)
            .map(|i| {
                point(
                    i as f64 * 30.0,
                    Some((i % 9) as f64),
                    Some((i as u64 % 12) << 30),
                )
            })
            .collect()
    }

    #[test]
    fn charts_decode_at_the_requested_size() {
        let n = node(ramp(120));
        for (w, h) in [(640, 240), (320, 160), (1200, 500)] {
            both_at_size(&n, w, h);
        }
    }

    #[test]
    fn empty_one_point_and_gappy_timelines_do_not_panic() {
        let cases = vec![
            vec![],
            vec![point(0.0, Some(1.0), Some(1 << 30))],
            vec![point(12.0, None, None)],
            vec![
                point(0.0, Some(2.0), Some(1 << 20)),
                point(30.0, None, None),
                point(60.0, Some(f64::NAN), Some(3 << 20)),
                point(90.0, Some(f64::INFINITY), None),
                point(120.0, Some(4.0), Some(2 << 20)),
            ],
        ];
        for tl in cases {
            let mut n = node(tl);
            for (w, h) in [(640, 240), (MIN_WIDTH, MIN_HEIGHT)] {
                both_at_size(&n, w, h);
            }
            // Nothing allocated or limited known either.
            n.alloc_cores = None;
            n.alloc_mem_bytes = None;
            n.mem.limit_bytes = None;
            both_at_size(&n, 400, 200);
        }
    }

    #[test]
    fn hostile_node_name_and_sizes() {
        let mut n = node(ramp(3));
        n.node = format!("evil\r\n\x1b[31m{}", "x".repeat(10_000));
        assert!(busy_cores_png(&n, n.elapsed_s, 640, 240).is_ok());
        assert!(matches!(
            busy_cores_png(&n, n.elapsed_s, 10, 10),
            Err(ChartError::Size(10, 10))
        ));
        assert!(memory_png(&n, n.elapsed_s, 640, 100_000).is_err());
    }

    /// A node whose threads waited for a CPU `pct(t_s)` % of their runnable time, one point a
    /// minute for an hour (the first point has no share: no reading before it).
    fn waiting_node(name: &str, pct: impl Fn(f64) -> f64) -> NodeSummary {
        let mut n = node(
            (0..=60)
                .map(|i| {
                    let t = i as f64 * 60.0;
                    Point {
                        cpu_wait_pct: (i > 0).then(|| pct(t)),
                        runnable_threads: (i > 0).then_some(4.0),
                        ..point(t, Some(4.0), Some(1 << 30))
                    }
                })
                .collect(),
        );
        n.node = name.into();
        n
    }

    /// 8 threads on 4 cores from 20 to 40 min: half of their runnable time waiting; 4 % outside.
    fn oversubscribed_in_the_middle(t_s: f64) -> f64 {
        if (1200.0..=2400.0).contains(&t_s) {
            50.0
        } else {
            4.0
        }
    }

    /// The second node's colour in [`NODE_COLORS`].
    const ORANGE: [u8; 3] = [230, 85, 13];

    /// One line per node, each where its figures are: node 1's (the first colour) high in the
    /// middle third and low at both ends; node 2's (the second colour), flat at 2 %, along the
    /// bottom. The y axis is 0-100 %, so 50 % is near the plot's middle height.
    #[test]
    fn the_cpu_wait_chart_has_a_line_per_node_where_its_data_is() {
        let nodes = vec![
            waiting_node("n1", oversubscribed_in_the_middle),
            waiting_node("n2", |_| 2.0),
        ];
        let charted = cpu_wait_nodes(&nodes, 8);
        assert_eq!(charted.len(), 2);
        let png = cpu_wait_png(&charted, 3600.0, 640, 240).unwrap();
        let (w, h, rows) = png_rgb(&png);
        assert_eq!((w, h), (640, 240));
        let n1 = lowest_in_columns(&rows, w, LINE);
        let n2 = lowest_in_columns(&rows, w, ORANGE);
        let cols = |low: &[Option<usize>]| -> Vec<usize> {
            (0..w as usize).filter(|&x| low[x].is_some()).collect()
        };
        let (c1, c2) = (cols(&n1), cols(&n2));
        assert!(
            c1.len() > w as usize / 2,
            "node 1 covers {} columns",
            c1.len()
        );
        assert!(
            c2.len() > w as usize / 2,
            "node 2 covers {} columns",
            c2.len()
        );
        let (first, last) = (c1[0], *c1.last().unwrap());
        let at =
            |low: &[Option<usize>], x: usize| low[x].unwrap_or_else(|| panic!("no line at {x}"));
        // Node 1 at 30 min (the middle of the line) is far above its ends (4 %).
        let mid = (first + last) / 2;
        for end in [first + 5, last - 5] {
            assert!(
                at(&n1, mid) + h as usize / 4 < at(&n1, end),
                "node 1: y {} in the middle, {} at column {end}",
                at(&n1, mid),
                at(&n1, end)
            );
        }
        // Node 2 (2 %) runs along the bottom: below node 1's middle, and within a few pixels of
        // node 1's ends (4 %).
        let mid2 = c2[c2.len() / 2];
        assert!(at(&n2, mid2) > at(&n1, mid) + h as usize / 4);
        assert!(at(&n2, c2[2]).abs_diff(at(&n1, first + 5)) <= 6);
        // 50 % of a 0-100 axis: node 1's middle is near half the plot's height, between its
        // top (0 % row, the ends' baseline less 4 %) and its bottom.
        let bottom = at(&n2, mid2) as f64; // ~2 %, close enough to the 0 % row
        let y50 = at(&n1, mid) as f64;
        assert!(
            y50 < bottom - 60.0 && y50 > 40.0,
            "50 % drawn at y {y50}, 2 % at {bottom}"
        );
    }

    /// No chart for a job without the kernel view, or with only one reading of it; nodes past
    /// the ones charted, or without the view, are left out.
    #[test]
    fn no_cpu_wait_chart_without_two_readings_of_the_kernel_view() {
        let plain = node(ramp(10));
        assert!(cpu_wait_nodes(&[plain.clone(), plain.clone()], 8).is_empty());
        let mut once = node(ramp(10));
        once.timeline[3].cpu_wait_pct = Some(30.0);
        assert!(cpu_wait_nodes(&[once.clone(), plain.clone()], 8).is_empty());
        // A NaN is no reading.
        once.timeline[4].cpu_wait_pct = Some(f64::NAN);
        assert!(cpu_wait_nodes(&[once.clone()], 8).is_empty());
        let twice = waiting_node("n2", |_| 10.0);
        let nodes = [plain.clone(), twice.clone(), once.clone()];
        let names = |v: Vec<&NodeSummary>| v.iter().map(|n| n.node.clone()).collect::<Vec<_>>();
        // The one-reading node is drawn (a dot) beside a node with a line; the node without
        // the view is not.
        assert_eq!(names(cpu_wait_nodes(&nodes, 8)), ["n2", "node-1"]);
        // Only the nodes the mail charts.
        assert!(cpu_wait_nodes(&nodes, 1).is_empty());
        assert_eq!(names(cpu_wait_nodes(&nodes, 2)), ["n2"]);
        assert!(cpu_wait_nodes(&nodes, 0).is_empty());
        // At most one line per colour.
        let many: Vec<NodeSummary> = (0..20).map(|_| twice.clone()).collect();
        assert_eq!(cpu_wait_nodes(&many, 1024).len(), MAX_CPU_WAIT_NODES);
    }

    /// A node whose collector stopped at 30 min: its line ends there, and the rest is shaded "no
    /// reading" as in the other charts; with a second node whose line goes on, nothing is shaded
    /// (a line is there).
    #[test]
    fn the_cpu_wait_chart_shades_where_no_node_has_a_reading() {
        let mut stopped = waiting_node("n1", |_| 30.0);
        for p in stopped.timeline.iter_mut().filter(|p| p.t_s > 1800.0) {
            p.cpu_wait_pct = None;
            p.runnable_threads = None;
        }
        let shaded = |png: &[u8]| {
            let (w, _, rows) = png_rgb(png);
            (0..w as usize)
                .filter(|&x| rows.iter().any(|r| is_gap_shade(r[x])))
                .count()
        };
        let alone = cpu_wait_png(&[&stopped], 3600.0, 640, 240).unwrap();
        assert!(shaded(&alone) > 200, "{} columns shaded", shaded(&alone));
        let other = waiting_node("n2", |_| 5.0);
        let both = cpu_wait_png(&[&stopped, &other], 3600.0, 640, 240).unwrap();
        // Only the first minute (no reading before the first point on either node).
        assert!(shaded(&both) < 20, "{} columns shaded", shaded(&both));
    }

    #[test]
    fn spans_missing_on_every_node() {
        assert_eq!(
            intersect_spans(
                &[(0.0, 60.0), (100.0, 200.0)],
                &[(30.0, 120.0), (150.0, 400.0)]
            ),
            vec![(30.0, 60.0), (100.0, 120.0), (150.0, 200.0)]
        );
        assert_eq!(intersect_spans(&[(0.0, 60.0)], &[(60.0, 90.0)]), vec![]);
        assert_eq!(intersect_spans(&[], &[(0.0, 60.0)]), vec![]);
    }

    /// Odd figures and sizes: drawn, never a panic; the size bounds hold as for the other charts.
    #[test]
    fn cpu_wait_chart_with_odd_figures_and_sizes() {
        let mut n = waiting_node(
            "evil\r\n\u{202e}x",
            |t| if t > 1800.0 { 100.0 } else { 0.0 },
        );
        n.timeline[5].cpu_wait_pct = Some(f64::INFINITY);
        n.timeline[6].cpu_wait_pct = Some(-3.0);
        n.timeline[7].t_s = f64::NAN;
        for (w, h) in [(640, 240), (MIN_WIDTH, MIN_HEIGHT), (1200, 500)] {
            assert_eq!(
                png_size(&cpu_wait_png(&[&n], 3600.0, w, h).unwrap()),
                (w, h)
            );
        }
        assert!(matches!(
            cpu_wait_png(&[&n], 3600.0, 10, 10),
            Err(ChartError::Size(10, 10))
        ));
        let example = cpu_wait_png(&[&n], f64::NAN, 640, 240).unwrap();
        assert_eq!(png_size(&example), (640, 240));
    }

    #[test]
    fn segments_split_at_gaps_and_units() {
        let tl = vec![
            point(0.0, Some(1.0), None),
            point(1.0, None, None),
            point(2.0, Some(2.0), None),
            point(3.0, Some(3.0), None),
        ];
        let s = segments(&tl, |p| p.busy_cores);
        assert_eq!(s, vec![vec![(0.0, 1.0)], vec![(2.0, 2.0), (3.0, 3.0)]]);
        assert_eq!(byte_unit(512.0), (1.0, "B"));
        assert_eq!(byte_unit(3.0 * 1024.0 * 1024.0 * 1024.0).1, "GiB");
        assert_eq!(time_unit(100.0).1, "s");
        assert_eq!(time_unit(7200.0).1, "min");
        assert_eq!(time_unit(86_400.0).1, "h");
    }

    fn spec_of(
        axis_s: f64,
        points: Vec<(f64, f64)>,
        limit: Option<f64>,
        y_top: Option<f64>,
    ) -> Spec {
        Spec {
            title: "t".into(),
            axis_s,
            missing: vec![],
            lines: vec![Line {
                label: "l".into(),
                color: BLACK,
                segs: vec![points],
            }],
            peak: vec![],
            peak_label: String::new(),
            limit,
            limit_label: String::new(),
            scale: 2.0,
            unit: "u".into(),
            y_top,
        }
    }

    /// Time runs to the job's end or the last point, in the unit its span calls for; y to a
    /// tenth above the largest value or the limit, in display units, or to the fixed top.
    #[test]
    fn the_axes_hold_every_value_and_the_limit() {
        let a = axes(&spec_of(
            7200.0,
            vec![(0.0, 4.0), (600.0, 10.0)],
            None,
            None,
        ));
        assert_eq!((a.t_div, a.t_unit), (60.0, "min"));
        assert_eq!(a.x_max, 120.0);
        assert!((a.y_max - 5.5).abs() < 1e-9, "{a:?}");
        let a = axes(&spec_of(60.0, vec![(90.0, 1.0)], Some(20.0), None));
        assert_eq!((a.t_div, a.x_max), (1.0, 90.0));
        assert!((a.y_max - 11.0).abs() < 1e-9, "{a:?}");
        let a = axes(&spec_of(f64::NAN, vec![], None, Some(100.0)));
        assert_eq!((a.x_max, a.y_max), (1.0, 100.0));
        assert_eq!(axes(&spec_of(0.0, vec![], None, None)).y_max, 1.0);
    }

    #[test]
    fn axis_labels_are_whole_from_five() {
        assert_eq!(axis_label(2.25, 5.0), "2");
        assert_eq!(axis_label(2.25, 4.9), "2.2");
    }
}
