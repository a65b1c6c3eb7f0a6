//! The charts of the cluster report (`jobscope audit report`, admin/src/cluster/): columns (stacked
//! or not, in one or more panels side by side), bars (the same, lying down) and a grid shaded by
//! value (the hour-of-week heat map). PNG, drawn like the job report's charts ([`crate::charts`]:
//! plotters' bitmap backend, the bundled font, no file written), so one picture serves the HTML
//! page (a `data:` URI) and the mail (an inline part named by `cid:`).
//!
//! These know nothing of the audit: they draw labelled numbers. Every label is [`clean_line`]d and
//! cut (a user or account name is user text), and a value that is not a finite number ≥ 0 draws
//! nothing. A chart with nothing to draw says so in its unit ("no jobs", "no GB-hours") instead
//! of drawing empty bars.

use crate::charts::{draw_err, png_of, ChartError, FAMILY};
use crate::present::{clean_line, fmt_hours};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The colours of series, in order (Tableau 10: told apart by most readers, also in grey print).
const PALETTE: [(u8, u8, u8); 10] = [
    (78, 121, 167),
    (242, 142, 43),
    (225, 87, 89),
    (118, 183, 178),
    (89, 161, 79),
    (237, 201, 72),
    (176, 122, 161),
    (255, 157, 167),
    (156, 117, 95),
    (186, 176, 172),
];
/// How much of a pale shade is the colour (the rest is white): a series' second part (unused hours
/// over used ones, idle GPU-hours over busy ones) in the same hue.
const PALE: f64 = 0.4;
/// Longest label drawn, in characters (names are cut with `…`).
pub const LABEL_CHARS: usize = 22;

/// A series' colour: `hue` indexes the palette (wrapping), `pale` lightens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shade {
    pub hue: usize,
    pub pale: bool,
}

impl Shade {
    pub fn rgb(self) -> RGBColor {
        let (r, g, b) = PALETTE[self.hue % PALETTE.len()];
        if !self.pale {
            return RGBColor(r, g, b);
        }
        let mix = |c: u8| (f64::from(c) * PALE + 255.0 * (1.0 - PALE)).round() as u8;
        RGBColor(mix(r), mix(g), mix(b))
    }
}

/// One series: a value per category, drawn in `shade`, named in the legend when `label` is set.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub label: Option<String>,
    pub shade: Shade,
    pub values: Vec<f64>,
}

/// One panel of columns or bars: per category, the segments stacked in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Bars {
    pub title: String,
    /// The value axis' name, with its unit (`core-hours`).
    pub unit: String,
    pub categories: Vec<String>,
    pub segments: Vec<Segment>,
    /// The values count things (jobs): whole numbers on the axis and at the bars.
    pub counts: bool,
}

impl Bars {
    fn value(&self, seg: usize, cat: usize) -> f64 {
        self.segments[seg]
            .values
            .get(cat)
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(0.0)
    }

    fn total(&self, cat: usize) -> f64 {
        (0..self.segments.len()).map(|s| self.value(s, cat)).sum()
    }

    /// A value as the bars write it (the axis writes its ticks: [`ValueAxis::label`]).
    fn fmt(&self, v: f64) -> String {
        if self.counts {
            format!("{v:.0}")
        } else {
            fmt_hours(Some(v))
        }
    }

    fn top(&self) -> f64 {
        (0..self.categories.len())
            .map(|c| self.total(c))
            .fold(0.0, f64::max)
    }
}

/// The most ticks a value axis has.
const MOST_TICKS: usize = 6;
/// Tick marks' length in pixels; plotters puts the labels twice as far from the axis.
const TICK_PX: u32 = 4;
/// Pixels between a value axis' tick labels and its title.
const TITLE_GAP_PX: u32 = 6;

/// A value axis: from 0 to `max`, ticks at `ticks` (0, then every `step`), each label distinct.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueAxis {
    pub max: f64,
    pub ticks: Vec<f64>,
    step: f64,
    /// Decimals the labels need for the step (0 for counts).
    decimals: usize,
}

impl ValueAxis {
    /// The axis for values up to `top`: ticks every 1, 2 or 5 × 10^k, at most `most` of them
    /// (0 included), the last at or above `top` and the axis ending there. Counts (`counts`:
    /// jobs) step by whole numbers, so a chart of one job reads `0, 1`, never `0, 0, 1, 1` (what
    /// fractional ticks rounded to integers read).
    pub fn new(top: f64, counts: bool, most: usize) -> ValueAxis {
        let top = if top.is_finite() && top > 0.0 {
            top
        } else {
            1.0
        };
        let intervals = most.max(2) - 1;
        // The smallest step of 1, 2, 5 × 10^k that covers `top` in `intervals` steps.
        let mut exp = (top / intervals as f64).log10().floor() as i32 - 1;
        let step = 'found: loop {
            for m in [1.0, 2.0, 5.0] {
                let step = m * 10f64.powi(exp);
                if counts && step < 1.0 {
                    continue;
                }
                if (top / step - 1e-9).ceil() as usize <= intervals {
                    break 'found step;
                }
            }
            exp += 1;
        };
        let n = ((top / step - 1e-9).ceil() as usize).max(1);
        let decimals = if counts {
            0
        } else {
            (-(step.log10() + 1e-9).floor()).max(0.0) as usize
        };
        let ticks: Vec<f64> = (0..=n).map(|i| i as f64 * step).collect();
        ValueAxis {
            max: n as f64 * step,
            ticks,
            step,
            decimals,
        }
    }

    /// A tick's label: as many decimals as the step needs (`0.05`, `0.10`; `2000`), so no two
    /// labels read alike.
    pub fn label(&self, v: f64) -> String {
        // On the step's grid, so that 0.30000000000000004 reads 0.3.
        let v = (v / self.step).round() * self.step;
        if v == 0.0 {
            return "0".into();
        }
        format!("{v:.*}", self.decimals)
    }

    pub fn labels(&self) -> Vec<String> {
        self.ticks.iter().map(|v| self.label(*v)).collect()
    }
}

/// A value axis' coordinate: mapped as plotters maps `0..max`, with the ticks and mesh lines at
/// [`ValueAxis::ticks`] only (plotters' own choice of ticks for a float range goes below 1).
struct Ticked {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ticked {
    /// `axis` drawn from 0 to `max` (at least to its last tick).
    fn of(axis: &ValueAxis, max: f64) -> Ticked {
        Ticked {
            inner: (0.0..max.max(axis.max)).into(),
            ticks: axis.ticks.clone(),
        }
    }
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

/// Pixels a value axis' label area needs across the axis so that its title never overlaps its
/// labels: plotters puts the labels `2 × TICK_PX` from the axis and the title at the area's far
/// edge; between them, the widest (left axis) or tallest (bottom axis) label and a gap.
fn value_area(a: &Area, labels: &[String], title: &str, px: f64, left: bool) -> u32 {
    let style = TextStyle::from((FAMILY, px).into_font());
    let size = |t: &str| a.estimate_text_size(t, &style).unwrap_or((0, 0));
    let label = labels
        .iter()
        .map(|l| if left { size(l).0 } else { size(l).1 })
        .max()
        .unwrap_or(0);
    // The title is drawn along the axis: its height is what it takes across.
    let title = size(title).1;
    2 * TICK_PX + label + TITLE_GAP_PX + title + 2
}

/// A grid of cells shaded from white (0) to the darkest blue (the largest value): `values[row][col]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    pub title: String,
    /// What a cell's value counts, with its unit (`core-hours`).
    pub unit: String,
    pub rows: Vec<String>,
    pub cols: Vec<String>,
    pub values: Vec<Vec<f64>>,
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn font_px(height: u32) -> f64 {
    (f64::from(height) / 22.0).clamp(10.0, 16.0)
}

fn text_style(px: f64, pos: Pos) -> TextStyle<'static> {
    TextStyle::from((FAMILY, px).into_font())
        .color(&RGBColor(40, 40, 40))
        .pos(pos)
}

fn label(s: &str) -> String {
    clean_line(s, LABEL_CHARS)
}

/// `no {unit}` in the middle of `a`: "no jobs", and a chart of unused GB-hours where none went
/// unused "no GB-hours" (not "no jobs": there were jobs).
fn say_empty(a: &Area, px: f64, unit: &str) -> Result<(), ChartError> {
    let (w, h) = a.dim_in_pixel();
    a.draw_text(
        &format!("no {}", label(unit)),
        &text_style(px, Pos::new(HPos::Center, VPos::Center)).color(&RGBColor(120, 120, 120)),
        (w as i32 / 2, h as i32 / 2),
    )
    .map_err(draw_err)
}

/// The legend of `panels`' labelled segments (each label once, in order) in a row, wrapped, at
/// the top of `a`; returns the area below it.
fn legend<'a>(a: &Area<'a>, panels: &[Bars], px: f64) -> Result<Area<'a>, ChartError> {
    let mut items: Vec<(String, Shade)> = Vec::new();
    for p in panels {
        for s in &p.segments {
            if let Some(l) = &s.label {
                let l = label(l);
                if !items.iter().any(|(x, _)| *x == l) {
                    items.push((l, s.shade));
                }
            }
        }
    }
    if items.is_empty() {
        return Ok(a.clone());
    }
    let (w, _) = a.dim_in_pixel();
    let line_h = (px * 1.5) as i32;
    let box_px = (px * 0.8) as i32;
    // Lay the items out first, to know the strip's height.
    let mut at: Vec<(i32, i32)> = Vec::new();
    let (mut x, mut y) = (8i32, 4i32);
    for (l, _) in &items {
        let item_w = box_px + 6 + (l.chars().count() as f64 * px * 0.6) as i32 + 14;
        if x > 8 && x + item_w > w as i32 - 8 {
            x = 8;
            y += line_h;
        }
        at.push((x, y));
        x += item_w;
    }
    let strip_h = (y + line_h + 2) as u32;
    let (top, rest) = a.split_vertically(strip_h);
    let style = text_style(px * 0.9, Pos::new(HPos::Left, VPos::Center));
    for ((l, shade), (x, y)) in items.iter().zip(at) {
        let mid = y + line_h / 2;
        top.draw(&Rectangle::new(
            [(x, mid - box_px / 2), (x + box_px, mid + box_px / 2)],
            shade.rgb().filled(),
        ))
        .map_err(draw_err)?;
        top.draw_text(l, &style, (x + box_px + 6, mid))
            .map_err(draw_err)?;
    }
    Ok(rest)
}

/// Which of `n` category labels to draw so that labels of `chars` characters do not overlap in
/// `width_px`: every k-th.
fn label_step(n: usize, chars: usize, width_px: f64, px: f64) -> usize {
    let need = (chars as f64 * px * 0.6 + 8.0).max(1.0);
    let fit = (width_px / need).floor().max(1.0) as usize;
    n.div_ceil(fit).max(1)
}

/// Upright columns, one panel per entry of `panels`, side by side; a legend of every labelled
/// segment above them.
pub fn columns_png(panels: &[Bars], width: u32, height: u32) -> Result<Vec<u8>, ChartError> {
    png_of(width, height, |rgb| {
        let root = BitMapBackend::with_buffer(rgb, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let px = font_px(height);
        let body = legend(&root, panels, px)?;
        let cells = body.split_evenly((1, panels.len().max(1)));
        for (p, a) in panels.iter().zip(&cells) {
            draw_columns(a, p, px)?;
        }
        root.present().map_err(draw_err)
    })
}

fn draw_columns(a: &Area, b: &Bars, px: f64) -> Result<(), ChartError> {
    let n = b.categories.len();
    let top = b.top();
    let small = px * 0.85;
    let axis = ValueAxis::new(top, b.counts, MOST_TICKS);
    let y_area = value_area(a, &axis.labels(), &b.unit, small, true);
    let mut chart = ChartBuilder::on(a)
        .caption(label_title(&b.title), (FAMILY, px * 1.1))
        .margin((px * 0.6) as u32)
        .x_label_area_size((px * 1.8) as u32)
        .y_label_area_size(y_area)
        .build_cartesian_2d(0.0..(n.max(1) as f64), Ticked::of(&axis, axis.max))
        .map_err(draw_err)?;
    let y_fmt = |v: &f64| axis.label(*v);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(TRANSPARENT)
        .set_all_tick_mark_size(TICK_PX)
        .x_labels(0)
        .y_label_formatter(&y_fmt)
        .label_style((FAMILY, small))
        .axis_desc_style((FAMILY, small))
        .y_desc(b.unit.clone())
        .draw()
        .map_err(draw_err)?;
    if top <= 0.0 {
        return say_empty(&chart.plotting_area().strip_coord_spec(), px, &b.unit);
    }
    for c in 0..n {
        let mut base = 0.0;
        for (s, seg) in b.segments.iter().enumerate() {
            let v = b.value(s, c);
            if v > 0.0 {
                chart
                    .draw_series([Rectangle::new(
                        [(c as f64 + 0.12, base), (c as f64 + 0.88, base + v)],
                        seg.shade.rgb().filled(),
                    )])
                    .map_err(draw_err)?;
            }
            base += v;
        }
    }
    // Category names under their columns, every k-th when they would overlap.
    let names: Vec<String> = b.categories.iter().map(|c| label(c)).collect();
    let longest = names.iter().map(|l| l.chars().count()).max().unwrap_or(1);
    let (x0, _) = chart.backend_coord(&(0.0, 0.0));
    let (x1, _) = chart.backend_coord(&(n as f64, 0.0));
    let step = label_step(n, longest, f64::from(x1 - x0), px * 0.85);
    let base = a.get_base_pixel();
    let style = text_style(px * 0.85, Pos::new(HPos::Center, VPos::Top));
    for (c, name) in names.iter().enumerate().step_by(step) {
        let (x, y) = chart.backend_coord(&(c as f64 + 0.5, 0.0));
        a.draw_text(name, &style, (x - base.0, y - base.1 + 4))
            .map_err(draw_err)?;
    }
    Ok(())
}

fn label_title(t: &str) -> String {
    clean_line(t, 80)
}

/// Bars lying down, one panel per entry of `panels`, side by side: categories top to bottom
/// (the first on top), each with its total written at its end; a legend above.
pub fn bars_png(panels: &[Bars], width: u32, height: u32) -> Result<Vec<u8>, ChartError> {
    png_of(width, height, |rgb| {
        let root = BitMapBackend::with_buffer(rgb, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let px = font_px(height);
        let body = legend(&root, panels, px)?;
        let cells = body.split_evenly((1, panels.len().max(1)));
        for (p, a) in panels.iter().zip(&cells) {
            draw_bars(a, p, px)?;
        }
        root.present().map_err(draw_err)
    })
}

fn draw_bars(a: &Area, b: &Bars, px: f64) -> Result<(), ChartError> {
    let n = b.categories.len();
    let top = b.top();
    let names: Vec<String> = b.categories.iter().map(|c| label(c)).collect();
    let small = px * 0.85;
    let longest = names.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let (w, _) = a.dim_in_pixel();
    let name_px = ((longest as f64 * small * 0.6) as u32 + 10).min(w / 2);
    let axis = ValueAxis::new(top, b.counts, MOST_TICKS);
    // Room right of the longest bar for its total.
    let x_max = axis.max.max(top * 1.3);
    let labels = axis.labels();
    let x_area = value_area(a, &labels, &b.unit, small, false);
    // The last tick may be where the axis ends: room right of it for half its label, centred
    // there.
    let last = labels.last().map_or(0, |l| {
        a.estimate_text_size(l, &TextStyle::from((FAMILY, small).into_font()))
            .map_or(0, |s| s.0)
    });
    let margin = (px * 0.6) as u32;
    let mut chart = ChartBuilder::on(a)
        .caption(label_title(&b.title), (FAMILY, px * 1.1))
        .margin(margin)
        .margin_right(margin.max(last / 2 + 2))
        .x_label_area_size(x_area)
        .y_label_area_size(name_px)
        .build_cartesian_2d(Ticked::of(&axis, x_max), 0.0..(n.max(1) as f64))
        .map_err(draw_err)?;
    let x_fmt = |v: &f64| axis.label(*v);
    chart
        .configure_mesh()
        .disable_y_mesh()
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(TRANSPARENT)
        .set_all_tick_mark_size(TICK_PX)
        .y_labels(0)
        .x_label_formatter(&x_fmt)
        .label_style((FAMILY, small))
        .axis_desc_style((FAMILY, small))
        .x_desc(b.unit.clone())
        .draw()
        .map_err(draw_err)?;
    if top <= 0.0 {
        return say_empty(&chart.plotting_area().strip_coord_spec(), px, &b.unit);
    }
    let row_y = |c: usize| (n - 1 - c) as f64;
    for c in 0..n {
        let mut base = 0.0;
        for (s, seg) in b.segments.iter().enumerate() {
            let v = b.value(s, c);
            if v > 0.0 {
                chart
                    .draw_series([Rectangle::new(
                        [(base, row_y(c) + 0.15), (base + v, row_y(c) + 0.85)],
                        seg.shade.rgb().filled(),
                    )])
                    .map_err(draw_err)?;
            }
            base += v;
        }
    }
    let origin = a.get_base_pixel();
    let rel = |(x, y): (i32, i32)| (x - origin.0, y - origin.1);
    let name_style = text_style(small, Pos::new(HPos::Right, VPos::Center));
    let value_style = text_style(small, Pos::new(HPos::Left, VPos::Center));
    for (c, name) in names.iter().enumerate() {
        let (x, y) = rel(chart.backend_coord(&(0.0, row_y(c) + 0.5)));
        a.draw_text(name, &name_style, (x - 5, y))
            .map_err(draw_err)?;
        let total = b.total(c);
        let (x, y) = rel(chart.backend_coord(&(total, row_y(c) + 0.5)));
        a.draw_text(&b.fmt(total), &value_style, (x + 4, y))
            .map_err(draw_err)?;
    }
    Ok(())
}

/// The grid of `g`, each cell shaded by its share of the largest value, with a scale beside it.
pub fn grid_png(g: &Grid, width: u32, height: u32) -> Result<Vec<u8>, ChartError> {
    png_of(width, height, |rgb| {
        let root = BitMapBackend::with_buffer(rgb, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let px = font_px(height);
        let scale_w = (px * 6.0) as u32;
        let (main, side) = root.split_horizontally(width.saturating_sub(scale_w));
        let (nr, nc) = (g.rows.len(), g.cols.len());
        let cell = |r: usize, c: usize| {
            g.values
                .get(r)
                .and_then(|row| row.get(c))
                .copied()
                .filter(|v| v.is_finite() && *v > 0.0)
                .unwrap_or(0.0)
        };
        let max = (0..nr)
            .flat_map(|r| (0..nc).map(move |c| (r, c)))
            .map(|(r, c)| cell(r, c))
            .fold(0.0, f64::max);
        let names: Vec<String> = g.rows.iter().map(|r| label(r)).collect();
        let longest = names.iter().map(|l| l.chars().count()).max().unwrap_or(0);
        let small = px * 0.85;
        let mut chart = ChartBuilder::on(&main)
            .caption(label_title(&g.title), (FAMILY, px * 1.1))
            .margin((px * 0.6) as u32)
            .x_label_area_size((px * 1.8) as u32)
            .y_label_area_size((longest as f64 * small * 0.6) as u32 + 10)
            .build_cartesian_2d(0.0..(nc.max(1) as f64), 0.0..(nr.max(1) as f64))
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(0)
            .draw()
            .map_err(draw_err)?;
        let row_y = |r: usize| (nr - 1 - r) as f64;
        for r in 0..nr {
            for c in 0..nc {
                let share = if max > 0.0 { cell(r, c) / max } else { 0.0 };
                chart
                    .draw_series([Rectangle::new(
                        [(c as f64, row_y(r)), (c as f64 + 1.0, row_y(r) + 1.0)],
                        ramp(share).filled(),
                    )])
                    .map_err(draw_err)?;
            }
        }
        // Thin white lines between cells, so neighbouring equal cells stay countable.
        for c in 1..nc {
            chart
                .draw_series([PathElement::new(
                    [(c as f64, 0.0), (c as f64, nr as f64)],
                    WHITE.stroke_width(1),
                )])
                .map_err(draw_err)?;
        }
        for r in 1..nr {
            chart
                .draw_series([PathElement::new(
                    [(0.0, r as f64), (nc as f64, r as f64)],
                    WHITE.stroke_width(1),
                )])
                .map_err(draw_err)?;
        }
        let origin = main.get_base_pixel();
        let rel = |(x, y): (i32, i32)| (x - origin.0, y - origin.1);
        let name_style = text_style(small, Pos::new(HPos::Right, VPos::Center));
        for (r, name) in names.iter().enumerate() {
            let (x, y) = rel(chart.backend_coord(&(0.0, row_y(r) + 0.5)));
            main.draw_text(name, &name_style, (x - 5, y))
                .map_err(draw_err)?;
        }
        let cols: Vec<String> = g.cols.iter().map(|c| label(c)).collect();
        let longest = cols.iter().map(|l| l.chars().count()).max().unwrap_or(1);
        let (x0, _) = chart.backend_coord(&(0.0, 0.0));
        let (x1, _) = chart.backend_coord(&(nc as f64, 0.0));
        let step = label_step(nc, longest, f64::from(x1 - x0), small);
        let col_style = text_style(small, Pos::new(HPos::Center, VPos::Top));
        for (c, name) in cols.iter().enumerate().step_by(step) {
            let (x, y) = rel(chart.backend_coord(&(c as f64 + 0.5, 0.0)));
            main.draw_text(name, &col_style, (x, y + 4))
                .map_err(draw_err)?;
        }
        // The scale: the ramp from 0 to the largest cell, with both ends written.
        let (sw, sh) = side.dim_in_pixel();
        let (top, bottom) = ((px * 2.5) as i32, sh as i32 - (px * 2.5) as i32);
        let (x0, x1) = (6, (sw as i32 / 3).max(12));
        let steps = 40;
        for i in 0..steps {
            let share = 1.0 - f64::from(i) / f64::from(steps);
            let y = top + (bottom - top) * i / steps;
            let y2 = top + (bottom - top) * (i + 1) / steps;
            side.draw(&Rectangle::new([(x0, y), (x1, y2)], ramp(share).filled()))
                .map_err(draw_err)?;
        }
        side.draw(&Rectangle::new(
            [(x0, top), (x1, bottom)],
            RGBColor(200, 200, 200).stroke_width(1),
        ))
        .map_err(draw_err)?;
        let style = text_style(small, Pos::new(HPos::Left, VPos::Center));
        side.draw_text(&fmt_hours(Some(max)), &style, (x1 + 4, top))
            .map_err(draw_err)?;
        side.draw_text("0", &style, (x1 + 4, bottom))
            .map_err(draw_err)?;
        if max <= 0.0 {
            say_empty(&main, px, &g.unit)?;
        }
        root.present().map_err(draw_err)
    })
}

/// White (0) to dark blue (1), through the palette's blue.
fn ramp(share: f64) -> RGBColor {
    let s = if share.is_finite() {
        share.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let (from, to) = ((255.0, 255.0, 255.0), (8.0, 48.0, 107.0));
    let mix = |a: f64, b: f64| (a + (b - a) * s).round() as u8;
    RGBColor(mix(from.0, to.0), mix(from.1, to.1), mix(from.2, to.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    // (width, height, rows of RGB pixels) of a PNG: the job charts' test decoder
    use crate::charts::tests::png_rgb as decode;

    fn rgb(s: Shade) -> [u8; 3] {
        let c = s.rgb();
        [c.0, c.1, c.2]
    }

    /// Pixels of `color` in column `x`.
    fn count_in_column(rows: &[Vec<[u8; 3]>], x: usize, color: [u8; 3]) -> usize {
        rows.iter().filter(|r| r[x] == color).count()
    }

    fn shade(hue: usize, pale: bool) -> Shade {
        Shade { hue, pale }
    }

    fn two_days() -> Bars {
        Bars {
            title: "core-hours per day".into(),
            unit: "core-hours".into(),
            categories: vec!["Mon".into(), "Tue".into()],
            segments: vec![
                Segment {
                    label: Some("cpu".into()),
                    shade: shade(0, false),
                    values: vec![10.0, 30.0],
                },
                Segment {
                    label: None,
                    shade: shade(0, true),
                    values: vec![10.0, 0.0],
                },
            ],
            counts: false,
        }
    }

    /// Columns stand as tall as their values: Tuesday's 30 used is 1.5 times Monday's 10 used + 10
    /// unused, and Monday's pale part is as tall as its solid part.
    #[test]
    fn columns_are_as_tall_as_their_values() {
        let (w, h, rows) = decode(&columns_png(&[two_days()], 600, 300).unwrap());
        assert_eq!((w, h), (600, 300));
        let solid = rgb(shade(0, false));
        let pale = rgb(shade(0, true));
        // The tallest run of each colour in any column, per half of the picture (a column each).
        let tallest = |from: usize, to: usize, c: [u8; 3]| {
            (from..to)
                .map(|x| count_in_column(&rows, x, c))
                .max()
                .unwrap()
        };
        let mid = w as usize / 2 + 20;
        let (mon_solid, mon_pale) = (tallest(0, mid, solid), tallest(0, mid, pale));
        let tue_solid = tallest(mid, w as usize, solid);
        assert!(mon_solid > 20, "{mon_solid}");
        assert!(
            mon_pale.abs_diff(mon_solid) <= 2,
            "{mon_pale} vs {mon_solid}"
        );
        let ratio = tue_solid as f64 / (mon_solid + mon_pale) as f64;
        assert!(
            (ratio - 1.5).abs() < 0.05,
            "{tue_solid} / {mon_solid}+{mon_pale}"
        );
        assert_eq!(tallest(mid, w as usize, pale), 0);
    }

    /// Bars lie in order, the first on top, as long as their values (30 against 10).
    #[test]
    fn bars_are_as_long_as_their_values_first_on_top() {
        let mut b = two_days();
        b.categories = vec!["<b>bob</b>\u{202E}".into(), "alice".into()];
        b.segments[0].values = vec![30.0, 10.0];
        b.segments.truncate(1);
        let png = bars_png(&[b], 600, 300).unwrap();
        keep_for_a_look("bars.png", &png);
        let (w, _, rows) = decode(&png);
        let solid = rgb(shade(0, false));
        let runs: Vec<(usize, usize)> = rows
            .iter()
            .enumerate()
            .map(|(y, r)| (y, r.iter().filter(|p| **p == solid).count()))
            // The legend's box is a short run of the colour too.
            .filter(|(_, n)| *n > 20)
            .collect();
        let (first_y, first_len) = runs[0];
        let (last_y, last_len) = *runs.last().unwrap();
        assert!(first_y < last_y);
        let ratio = first_len as f64 / last_len as f64;
        assert!(
            (ratio - 3.0).abs() < 0.1,
            "{first_len} vs {last_len} of {w}"
        );
    }

    /// The busiest cell is the darkest; an empty cell is white.
    #[test]
    fn the_grid_shades_by_value() {
        let g = Grid {
            title: "hour of week".into(),
            unit: "core-hours".into(),
            rows: vec!["Mon".into(), "Tue".into()],
            cols: (0..4).map(|h| format!("{h:02}")).collect(),
            values: vec![vec![0.0, 1.0, 4.0, 0.0], vec![2.0, 0.0, 0.0, 0.0]],
        };
        let (_, _, rows) = decode(&grid_png(&g, 500, 200).unwrap());
        let darkest = [8, 48, 107];
        let n = rows.iter().flatten().filter(|p| **p == darkest).count();
        // The one 4.0 cell, and the scale's top step (40 steps of its height).
        assert!(n > 200, "{n} darkest pixels");
        let half = rgb_of(ramp(0.5));
        assert!(rows.iter().flatten().any(|p| *p == half), "Tuesday 00h");
    }

    fn rgb_of(c: RGBColor) -> [u8; 3] {
        [c.0, c.1, c.2]
    }

    /// Count axes tick whole numbers, each label once: one job reads `0, 1` (it read `0, 0, 0,
    /// 1, 1, 1`: ticks at fifths rounded to integers). Every axis: at most the ticks asked for,
    /// distinct labels, the last tick at or above the top.
    #[test]
    fn value_axes_tick_distinct_labels_and_counts_whole_numbers() {
        let one = ValueAxis::new(1.0, true, MOST_TICKS);
        assert_eq!(one.labels(), ["0", "1"]);
        assert_eq!(one.max, 1.0);
        assert_eq!(ValueAxis::new(3.0, true, 6).labels(), ["0", "1", "2", "3"]);
        assert_eq!(
            ValueAxis::new(10_000.0, true, 6).labels(),
            ["0", "2000", "4000", "6000", "8000", "10000"]
        );
        assert_eq!(
            ValueAxis::new(1.1, false, 6).labels(),
            ["0", "0.5", "1.0", "1.5"]
        );
        assert_eq!(
            ValueAxis::new(0.003, false, 6).labels(),
            ["0", "0.001", "0.002", "0.003"]
        );
        let mut tops: Vec<f64> = (1..=300).map(f64::from).collect();
        tops.extend([
            0.0,
            -1.0,
            f64::NAN,
            0.0021,
            0.05,
            0.5,
            0.99,
            1.01,
            7.3,
            99.9,
            1234.5,
            10_001.0,
            3e7,
        ]);
        for counts in [true, false] {
            for most in [2, 3, 5, 6] {
                for &top in &tops {
                    let a = ValueAxis::new(top, counts, most);
                    let labels = a.labels();
                    assert!(
                        a.ticks.len() >= 2 && a.ticks.len() <= most,
                        "{top}: {labels:?}"
                    );
                    let mut seen = labels.clone();
                    seen.dedup();
                    assert_eq!(seen, labels, "{top} ({counts}): labels repeat");
                    if top.is_finite() && top > 0.0 {
                        assert!(a.max >= top && *a.ticks.last().unwrap() == a.max, "{top}");
                    }
                    if counts {
                        for (v, l) in a.ticks.iter().zip(&labels) {
                            assert_eq!(v.fract(), 0.0, "{top}: tick {v}");
                            assert_eq!(l.parse::<f64>().unwrap(), *v, "{top}: {l}");
                        }
                    }
                }
            }
        }
    }

    /// Runs of non-white pixels along `line` (column or row indices where something is drawn),
    /// as (first, last) pairs.
    fn runs(inked: impl Iterator<Item = bool>) -> Vec<(usize, usize)> {
        let mut v: Vec<(usize, usize)> = Vec::new();
        for (i, ink) in inked.enumerate() {
            if !ink {
                continue;
            }
            match v.last_mut() {
                Some(r) if r.1 + 1 == i => r.1 = i,
                _ => v.push((i, i)),
            }
        }
        v
    }

    const MESH: [u8; 3] = [225, 225, 225];

    /// With `JOBSCOPE_PLOTS_OUT=<dir>`, a test's chart is also written there, to look at.
    fn keep_for_a_look(name: &str, png: &[u8]) {
        if let Some(d) = std::env::var_os("JOBSCOPE_PLOTS_OUT") {
            std::fs::write(std::path::Path::new(&d).join(name), png).unwrap();
        }
    }

    /// The value axis' title stands apart from its tick labels, however wide the labels: left of
    /// the columns, between the picture's edge and the mesh, the title and the labels are two
    /// runs of ink with white between them (the title overlapped 5-digit labels).
    #[test]
    fn the_value_axis_title_never_overlaps_its_labels() {
        for top in [3.0, 0.0042, 12_345.0, 3.5e6] {
            let mut b = two_days();
            b.segments[0].values = vec![top, top / 2.0];
            b.segments.truncate(1);
            b.segments[0].label = None;
            let png = columns_png(std::slice::from_ref(&b), 450, 300).unwrap();
            keep_for_a_look(&format!("columns-{top}.png"), &png);
            let (w, h, rows) = decode(&png);
            let (w, h) = (w as usize, h as usize);
            let (y0, y1) = (h / 8, h * 7 / 8);
            // Where the horizontal mesh lines begin (a long run of their grey: text is
            // anti-aliased and has that grey in places too).
            let mesh_x = (y0..y1)
                .filter_map(|y| {
                    runs((0..w).map(|x| rows[y][x] == MESH))
                        .into_iter()
                        .find(|r| r.1 - r.0 > 12)
                        .map(|r| r.0)
                })
                .min()
                .unwrap_or_else(|| panic!("{top}: no mesh line"));
            // The title at the left edge, then the labels (then tick marks): the first two runs.
            let inked = (0..mesh_x).map(|x| (y0..y1).any(|y| rows[y][x] != [255, 255, 255]));
            let r = runs(inked);
            // The title is one line of text on its side: a narrow run, white after it (before:
            // "1000000" ran into it, and at 12 345 core-hours 3 pixels parted them).
            assert!(
                r.len() >= 2 && r[0].1 - r[0].0 < 12 && r[1].0 - r[0].1 > 4,
                "{top}: the title and the labels left of x={mesh_x} touch: {r:?}"
            );
            // Bars: the same below the plot, the title under the labels.
            let mut bars = b.clone();
            bars.categories = vec!["alice".into(), "bob".into()];
            let png = bars_png(std::slice::from_ref(&bars), 450, 200).unwrap();
            keep_for_a_look(&format!("bars-{top}.png"), &png);
            let (w, h, rows) = decode(&png);
            let (w, h) = (w as usize, h as usize);
            let (x0, x1) = (w / 4, w - 4);
            // Where the vertical mesh lines end.
            let mesh_y = (x0..x1)
                .filter_map(|x| {
                    runs((0..h).map(|y| rows[y][x] == MESH))
                        .into_iter()
                        .filter(|r| r.1 - r.0 > 20)
                        .map(|r| r.1)
                        .max()
                })
                .max()
                .unwrap_or_else(|| panic!("{top}: no mesh line"));
            let inked = (mesh_y + 1..h).map(|y| (x0..x1).any(|x| rows[y][x] != [255, 255, 255]));
            // Tick marks, labels, then the title at the bottom: the last two runs.
            let r = runs(inked);
            let n = r.len();
            assert!(
                n >= 2 && r[n - 1].0 - r[n - 2].1 > 2,
                "{top}: the bars' labels and title below y={mesh_y} touch: {r:?}"
            );
        }
    }

    #[test]
    fn nothing_to_draw_hostile_labels_and_sizes_do_not_panic() {
        let empty = Bars {
            title: "x".into(),
            unit: "h".into(),
            categories: vec![],
            segments: vec![],
            counts: true,
        };
        let mut hostile = two_days();
        let evil = format!("\u{202E}<script>x</script>\r\n{}", "W".repeat(5000));
        hostile.title = evil.clone();
        hostile.categories = vec![evil.clone(); 40];
        hostile.segments[0].values = vec![f64::NAN, f64::INFINITY, -3.0, 1e300];
        hostile.segments[0].label = Some(evil.clone());
        for p in [&empty, &hostile] {
            for (w, h) in [(900, 320), (64, 48)] {
                let (pw, ph, _) = decode(&columns_png(std::slice::from_ref(p), w, h).unwrap());
                assert_eq!((pw, ph), (w, h));
                decode(&bars_png(&[p.clone(), p.clone(), p.clone()], w, h).unwrap());
            }
        }
        let g = Grid {
            title: evil.clone(),
            unit: "h".into(),
            rows: vec![evil.clone(); 3],
            cols: vec![],
            values: vec![vec![f64::NAN]],
        };
        decode(&grid_png(&g, 600, 200).unwrap());
        assert!(matches!(
            columns_png(std::slice::from_ref(&empty), 10, 10),
            Err(ChartError::Size(10, 10))
        ));
        assert!(grid_png(&g, 600, 100_000).is_err());
    }
}
