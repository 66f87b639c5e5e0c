//! Painting the timeline: the time ruler, trace and group headers, lanes with their culled
//! spans (link lanes as traffic: each span as tall as its rate), marked spans (search, table
//! row), fusion-group brackets, flow arrows, the lines from a selected group to its host
//! operators, the selected range and the hover tooltip. Counter lanes are painted by
//! [`crate::paint_counter`].
//!
//! Nothing here decides where things go: x comes from [`TimeAxis::x`], y from the
//! [`Layout`], visible spans from [`RowIndex::cull`](crate::index::RowIndex::cull). All span
//! rectangles of a frame go into one mesh.

use std::borrow::Cow;

use eframe::egui::{
    Align2, Color32, FontId, Mesh, Painter, Pos2, Rect, Shape, Stroke, StrokeKind, Vec2, pos2, vec2,
};
use eframe::epaint::Hsva;

use crate::axis::{TimeAxis, format_duration, format_instant};
use crate::index::DrawItem;
use crate::lanes::{Group, LaneKind, group_label};
use crate::layout::{Item, Layout, Placed};
use crate::marks::Marks;
use crate::model::{TraceModel, arg_number};
use crate::options::ViewOptions;
use crate::view::{Highlight, Selection};

const TEXT: Color32 = Color32::from_gray(220);
const WEAK_TEXT: Color32 = Color32::from_gray(150);
const GRID: Color32 = Color32::from_gray(48);
const HEADER_BG: Color32 = Color32::from_gray(38);
const TRACE_HEADER_BG: Color32 = Color32::from_rgb(30, 44, 66);
const MERGED: Color32 = Color32::from_gray(120);
const SELECT: Color32 = Color32::WHITE;
const LINKED: Color32 = Color32::from_rgb(255, 210, 60);
const FLOW: Color32 = Color32::from_rgba_premultiplied(110, 125, 160, 160);
const RANGE_FILL: Color32 = Color32::from_rgba_premultiplied(14, 22, 40, 40);
const RANGE_EDGE: Color32 = Color32::from_rgb(120, 160, 255);
/// Outline of marked spans (search matches, the selected table row's spans).
pub const MARK: Color32 = Color32::from_rgb(60, 230, 255);

/// Everything one frame of the timeline needs.
pub struct Scene<'a> {
    /// Painter clipped to the whole timeline (ruler and lanes).
    pub painter: Painter,
    /// The traces.
    pub traces: &'a [TraceModel],
    /// Shared-axis offset of each trace.
    pub offsets: &'a [f64],
    /// The shared axis.
    pub axis: TimeAxis,
    /// Look.
    pub options: &'a ViewOptions,
    /// Vertical layout.
    pub layout: &'a Layout,
    /// Screen rect of the lane area (below the ruler).
    pub area: Rect,
    /// Screen rect of the ruler.
    pub ruler: Rect,
    /// Screen y of layout y = 0 (area top minus scroll).
    pub top: f32,
    /// What the selection lights up.
    pub highlight: Option<&'a Highlight>,
    /// Marked spans.
    pub marks: Option<&'a Marks>,
    /// Selected range on the shared axis.
    pub range: Option<(f64, f64)>,
}

/// A stable colour for a name (FNV-1a hash to a hue).
pub fn name_color(name: &str) -> Color32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    let hue = (h % 360) as f32 / 360.0;
    let sat = 0.35 + (h >> 9 & 0xff) as f32 / 255.0 * 0.2;
    Hsva::new(hue, sat, 0.78, 1.0).into()
}

/// Grey of a merged block: brighter the busier (square root, so sparse work still shows).
pub fn merged_color(density: f32) -> Color32 {
    let level = f32::from(crate::index::density_level(density)) / 7.0;
    Color32::from_gray((55.0 + 165.0 * level) as u8)
}

fn group_color(id: u64) -> Color32 {
    name_color(&format!("group {id}"))
}

impl<'a> Scene<'a> {
    /// Paints the frame.
    pub fn paint(&self) {
        let plot = Rect::from_min_max(pos2(self.axis.x0, self.area.min.y), self.area.max);
        let ticks = self.axis.ticks(90.0);
        // Grid and ruler.
        for t in &ticks {
            self.painter
                .vline(t.x, self.area.y_range(), Stroke::new(1.0, GRID));
            self.painter.vline(
                t.x,
                (self.ruler.max.y - 6.0)..=self.ruler.max.y,
                Stroke::new(1.0, WEAK_TEXT),
            );
            self.painter.text(
                pos2(t.x + 3.0, self.ruler.min.y + 4.0),
                Align2::LEFT_TOP,
                &t.label,
                FontId::proportional(11.0),
                WEAK_TEXT,
            );
        }
        self.painter.hline(
            self.ruler.x_range(),
            self.ruler.max.y,
            Stroke::new(1.0, GRID),
        );

        let lanes_painter = self.painter.with_clip_rect(self.area);
        let plot_painter = self.painter.with_clip_rect(plot);
        let mut mesh = Mesh::default();
        let mut outlines: Vec<(Rect, Color32)> = Vec::new();
        let mut labels: Vec<(Rect, Cow<'a, str>)> = Vec::new();
        let visible = self
            .layout
            .visible(self.area.min.y - self.top, self.area.max.y - self.top);
        for placed in visible {
            let y = self.top + placed.y;
            match placed.item {
                Item::TraceHeader { trace } => {
                    self.trace_header(&lanes_painter, trace, y, placed.h)
                }
                Item::GroupHeader {
                    trace,
                    group,
                    collapsed,
                } => {
                    self.group_header(&lanes_painter, trace, group, collapsed, y, placed.h);
                    if collapsed {
                        self.collapsed_summary(trace, group, y, placed.h, &mut mesh);
                    }
                }
                Item::Lane {
                    trace, lane, row, ..
                } => {
                    let model = &self.traces[trace];
                    let l = &model.lanes[lane];
                    if l.series.is_some() {
                        self.counter_lane(&lanes_painter, placed, trace, lane, &mut mesh);
                    } else {
                        self.lane(placed, trace, lane, &mut mesh, &mut outlines, &mut labels);
                    }
                    let size = (row - 4.0).clamp(8.5, 11.0);
                    let mut label = l.label.clone();
                    if l.folded > 0 {
                        label.push_str(" …");
                    }
                    lanes_painter.text(
                        pos2(self.area.min.x + 14.0, y + (row - size) / 2.0 - 1.0),
                        Align2::LEFT_TOP,
                        label,
                        FontId::proportional(size),
                        TEXT,
                    );
                }
            }
        }
        plot_painter.add(Shape::mesh(mesh));
        for (r, c) in outlines {
            plot_painter.rect_stroke(r, 0.0, Stroke::new(1.5, c), StrokeKind::Inside);
        }
        if self.options.show_labels {
            for (r, name) in labels {
                let max_chars = ((r.width() - 6.0) / 6.5).max(0.0) as usize;
                if max_chars < 2 {
                    continue;
                }
                let text: String = if name.chars().count() > max_chars {
                    name.chars()
                        .take(max_chars - 1)
                        .chain(std::iter::once('…'))
                        .collect()
                } else {
                    name.to_string()
                };
                plot_painter.with_clip_rect(r).text(
                    pos2(r.min.x.max(plot.min.x) + 3.0, r.center().y),
                    Align2::LEFT_CENTER,
                    text,
                    FontId::proportional((r.height() - 1.0).clamp(8.0, 11.0)),
                    Color32::from_gray(20),
                );
            }
        }
        if self.options.show_brackets {
            self.brackets(&plot_painter, visible);
        }
        if self.options.show_flows {
            self.flows(&plot_painter);
        }
        self.group_links(&plot_painter);
        if let Some((a, b)) = self.range {
            let (x0, x1) = (self.axis.x(a), self.axis.x(b));
            let r = Rect::from_x_y_ranges(x0..=x1, self.ruler.min.y..=self.area.max.y);
            self.painter.rect_filled(r, 0.0, RANGE_FILL);
            for x in [x0, x1] {
                self.painter.vline(
                    x,
                    self.ruler.min.y..=self.area.max.y,
                    Stroke::new(1.0, RANGE_EDGE),
                );
            }
            self.painter.text(
                pos2(x1 + 4.0, self.ruler.max.y + 2.0),
                Align2::LEFT_TOP,
                format_duration(b - a),
                FontId::proportional(11.0),
                RANGE_EDGE,
            );
        }
    }

    fn trace_header(&self, p: &Painter, trace: usize, y: f32, h: f32) {
        let r = Rect::from_x_y_ranges(self.area.x_range(), y..=y + h);
        p.rect_filled(r, 0.0, TRACE_HEADER_BG);
        let m = &self.traces[trace];
        let mut text = m.label.clone();
        if !m.meta.generation.is_empty() {
            text.push_str(&format!("  ·  {} × {}", m.chips(), m.meta.generation));
        }
        text.push_str(&format!(
            "  ·  {} spans  ·  {}",
            m.spans.len(),
            format_duration(m.time_range.1 - m.time_range.0)
        ));
        p.text(
            pos2(r.min.x + 6.0, r.center().y),
            Align2::LEFT_CENTER,
            text,
            FontId::proportional(13.0),
            Color32::WHITE,
        );
    }

    fn group_header(
        &self,
        p: &Painter,
        trace: usize,
        group: Group,
        collapsed: bool,
        y: f32,
        h: f32,
    ) {
        let r = Rect::from_x_y_ranges(self.area.x_range(), y..=y + h);
        p.rect_filled(r, 0.0, HEADER_BG);
        let c = pos2(r.min.x + 9.0, r.center().y);
        let tri = if collapsed {
            vec![
                c + vec2(-3.0, -5.0),
                c + vec2(4.0, 0.0),
                c + vec2(-3.0, 5.0),
            ]
        } else {
            vec![
                c + vec2(-5.0, -3.0),
                c + vec2(5.0, -3.0),
                c + vec2(0.0, 4.0),
            ]
        };
        p.add(Shape::convex_polygon(tri, TEXT, Stroke::NONE));
        p.text(
            pos2(r.min.x + 18.0, r.center().y),
            Align2::LEFT_CENTER,
            group_label(
                group,
                &self.traces[trace].meta.generation,
                self.traces[trace].meta.world_size.is_some(),
            ),
            FontId::proportional(12.0),
            TEXT,
        );
    }

    /// A collapsed chip still shows its kernels, merged, in the header row.
    fn collapsed_summary(&self, trace: usize, group: Group, y: f32, h: f32, mesh: &mut Mesh) {
        let model = &self.traces[trace];
        let axis = self.axis.shifted(self.offsets[trace]);
        let mut items = Vec::new();
        for lane in model
            .lanes
            .iter()
            .filter(|l| l.group == group && matches!(l.kind, LaneKind::Kernel | LaneKind::HostOps))
        {
            if let Some(row) = lane.rows.first() {
                items.clear();
                row.cull(&axis, self.options.merge_px, &mut items);
                for it in &items {
                    let (x0, x1) = it.x_range();
                    let r =
                        Rect::from_x_y_ranges(x0..=x1.max(x0 + 1.0), y + h * 0.55..=y + h - 3.0);
                    mesh.add_colored_rect(r, MERGED);
                }
            }
        }
    }

    fn lane(
        &self,
        placed: &Placed,
        trace: usize,
        lane: usize,
        mesh: &mut Mesh,
        outlines: &mut Vec<(Rect, Color32)>,
        labels: &mut Vec<(Rect, Cow<'a, str>)>,
    ) {
        let Item::Lane {
            bracket,
            row: row_h,
            ..
        } = placed.item
        else {
            return;
        };
        let traces: &'a [TraceModel] = self.traces;
        let model = &traces[trace];
        let l = &model.lanes[lane];
        let axis = self.axis.shifted(self.offsets[trace]);
        let y0 = self.top + placed.y + bracket;
        let hl = self.highlight.filter(|h| h.trace == trace);
        let marks = self
            .marks
            .filter(|m| m.spans.get(trace).is_some_and(|s| !s.is_empty()));
        // Link lanes show traffic: a span's height is its rate over the trace's peak rate.
        let traffic = (l.kind == LaneKind::Link && model.link_peak_rate > 0.0)
            .then_some(model.link_peak_rate);
        let tall = |yr: &std::ops::RangeInclusive<f32>, rate: f64| match traffic {
            Some(peak) => {
                let f = (rate / peak).clamp(0.15, 1.0) as f32;
                (yr.end() - (yr.end() - yr.start()) * f)..=*yr.end()
            }
            None => yr.clone(),
        };
        let mut items = Vec::new();
        for (d, row) in l.rows.iter().enumerate() {
            items.clear();
            row.cull(&axis, self.options.merge_px, &mut items);
            let top = y0 + row_h * d as f32;
            let yr = top + 1.0..=top + row_h - 1.0;
            for it in &items {
                match *it {
                    DrawItem::Span { index, x0, x1 } => {
                        let i = row.first + index;
                        let s = &model.spans[i];
                        let rate = arg_number(s, "bytes") / s.duration_ns().max(f64::MIN_POSITIVE);
                        let r = Rect::from_x_y_ranges(x0..=x1, tall(&yr, rate));
                        mesh.add_colored_rect(r, name_color(&s.name));
                        if x1 - x0 > 24.0 && r.height() >= 9.0 {
                            let text = match traffic {
                                // Link spans say their rate.
                                Some(_) => Cow::Owned(rate_label(rate * 1e9)),
                                None => Cow::Borrowed(s.name.as_str()),
                            };
                            labels.push((r, text));
                        }
                        if let Some(h) = hl {
                            if h.span == Some(i) {
                                outlines.push((r, SELECT));
                            } else if linked(h, l.kind.is_host(), s.op_id, s.group_id) {
                                outlines.push((r, LINKED));
                            }
                        }
                        if marks.is_some_and(|m| m.contains(trace, i)) {
                            outlines.push((r.expand(1.0), MARK));
                        }
                    }
                    DrawItem::Merged {
                        first,
                        count,
                        x0,
                        x1,
                        density,
                    } => {
                        let ns = f64::from(x1 - x0) * axis.ns_per_px;
                        let rate = row.weight(first..first + count) / ns.max(f64::MIN_POSITIVE);
                        let r = Rect::from_x_y_ranges(x0..=x1, tall(&yr, rate));
                        mesh.add_colored_rect(r, merged_color(density));
                        let (a, b) = (row.first + first, row.first + first + count);
                        if marks.is_some_and(|m| m.any_in(trace, a..b)) {
                            let strip = Rect::from_x_y_ranges(
                                x0 - 1.0..=x1.max(x0 + 2.0) + 1.0,
                                top..=top + 3.0,
                            );
                            mesh.add_colored_rect(strip, MARK);
                        }
                    }
                }
            }
        }
        // The selected span, even when it is merged away at this zoom.
        if let Some(sel) = hl.and_then(|h| h.span).filter(|s| l.spans.contains(s))
            && let Some(d) = l
                .rows
                .iter()
                .position(|r| (r.first..r.first + r.len()).contains(&sel))
        {
            let s = &model.spans[sel];
            let top = y0 + row_h * d as f32;
            let (x0, x1) = (axis.x(s.start_ns), axis.x(s.end_ns));
            let r = Rect::from_x_y_ranges(x0 - 1.0..=x1.max(x0 + 1.0) + 1.0, top..=top + row_h);
            outlines.push((r, SELECT));
        }
    }

    fn brackets(&self, p: &Painter, visible: &[Placed]) {
        let hl = self.highlight;
        let mut items = Vec::new();
        for placed in visible {
            let Item::Lane {
                trace,
                lane,
                bracket,
                ..
            } = placed.item
            else {
                continue;
            };
            let Some(groups) = self.traces[trace]
                .lane_groups(lane)
                .filter(|_| bracket > 0.0)
            else {
                continue;
            };
            let axis = self.axis.shifted(self.offsets[trace]);
            let y = self.top + placed.y + 2.0;
            let yb = y + bracket - 2.0;
            items.clear();
            groups.index.cull(&axis, 3.0, &mut items);
            for it in &items {
                match *it {
                    DrawItem::Span { index, x0, x1 } => {
                        let g = &groups.groups[index];
                        let lit =
                            hl.is_some_and(|h| h.trace == trace && h.group == Some(g.group_id));
                        let (c, w) = if lit {
                            (LINKED, 2.0)
                        } else {
                            (group_color(g.group_id), 1.5)
                        };
                        let st = Stroke::new(w, c);
                        p.line(
                            vec![pos2(x0, yb), pos2(x0, y), pos2(x1, y), pos2(x1, yb)],
                            st,
                        );
                        if x1 - x0 > 60.0 {
                            p.text(
                                pos2((x0 + x1) / 2.0, y - 1.0),
                                Align2::CENTER_BOTTOM,
                                format!("group {} · {} kernels", g.group_id, g.kernels),
                                FontId::proportional(9.0),
                                c,
                            );
                        }
                    }
                    DrawItem::Merged { x0, x1, .. } => {
                        p.hline(x0..=x1, y, Stroke::new(1.0, MERGED));
                    }
                }
            }
        }
    }

    /// Screen y of the middle of lane `lane`'s first row (or its collapsed group header).
    fn lane_y(&self, trace: usize, lane: usize) -> Option<f32> {
        let placed = self.layout.anchor(trace, lane)?;
        Some(match placed.item {
            Item::Lane { bracket, row, .. } => self.top + placed.y + bracket + row / 2.0,
            _ => self.top + placed.y + placed.h / 2.0,
        })
    }

    fn flows(&self, p: &Painter) {
        for (ti, model) in self.traces.iter().enumerate() {
            let axis = self.axis.shifted(self.offsets[ti]);
            let vis = model.visible_flows(axis.t(axis.x0), axis.right_ns());
            // Flows closer than ~12 px apart on average would hide the lanes under them.
            let crowded =
                vis.len() > self.options.max_flows || vis.len() as f32 > self.axis.width / 12.0;
            let sel_span = self
                .highlight
                .filter(|h| h.trace == ti)
                .and_then(|h| h.span)
                .and_then(|i| model.spans.get(i));
            for fi in vis {
                let f = &model.flows[fi];
                let touches_sel = sel_span.is_some_and(|s| {
                    (s.track == f.to && s.start_ns == f.to_ns)
                        || (s.track == f.from && f.from_ns >= s.start_ns && f.from_ns <= s.end_ns)
                });
                if crowded && !touches_sel {
                    continue;
                }
                let (lf, lt) = model.flow_lanes[fi];
                let (Some(y0), Some(y1)) = (self.lane_y(ti, lf), self.lane_y(ti, lt)) else {
                    continue;
                };
                let a = pos2(axis.x(f.from_ns), y0);
                let b = pos2(axis.x(f.to_ns), y1);
                let c = if touches_sel { LINKED } else { FLOW };
                arrow(p, a, b, Stroke::new(if touches_sel { 2.0 } else { 1.0 }, c));
            }
            if crowded {
                p.text(
                    pos2(self.axis.x0 + self.axis.width - 6.0, self.area.max.y - 4.0),
                    Align2::RIGHT_BOTTOM,
                    "flows hidden at this zoom: zoom in, or select a span",
                    FontId::proportional(10.0),
                    WEAK_TEXT,
                );
            }
        }
    }

    /// Lines from a highlighted fusion group's brackets to the host operators it fused.
    fn group_links(&self, p: &Painter) {
        let Some(h) = self.highlight else { return };
        let Some(g) = h.group else { return };
        let Some(model) = self.traces.get(h.trace) else {
            return;
        };
        let axis = self.axis.shifted(self.offsets[h.trace]);
        let stroke = Stroke::new(1.0, LINKED.gamma_multiply(0.8));
        let mut targets: Vec<Pos2> = Vec::new();
        for lg in &model.groups {
            if let (Some(fg), Some(placed)) = (
                lg.groups.iter().find(|x| x.group_id == g),
                self.layout.find_lane(h.trace, lg.lane),
            ) {
                let x = axis.x(fg.start_ns).max(self.axis.x0);
                targets.push(pos2(x, self.top + placed.y + 2.0));
            }
        }
        for op in &h.group_ops {
            for &si in model.host_ops.get(op).map_or(&[][..], Vec::as_slice) {
                let Some(lane) = model.lane_of_span(si) else {
                    continue;
                };
                let Some(placed) = self.layout.find_lane(h.trace, lane) else {
                    continue;
                };
                let s = &model.spans[si];
                let (x0, x1) = (axis.x(s.start_ns), axis.x(s.end_ns));
                let y = self.top + placed.y + placed.h - 2.0;
                p.rect_stroke(
                    Rect::from_x_y_ranges(x0..=x1.max(x0 + 1.0), y - placed.h + 3.0..=y),
                    0.0,
                    Stroke::new(1.5, LINKED),
                    StrokeKind::Inside,
                );
                for &t in &targets {
                    p.line_segment([pos2((x0 + x1) / 2.0, y), t], stroke);
                }
            }
        }
    }

    /// A tooltip box for the span `sel` near `at`.
    pub fn tooltip(&self, at: Pos2, sel: Selection) {
        let Some(model) = self.traces.get(sel.trace) else {
            return;
        };
        let Some(s) = model.spans.get(sel.span) else {
            return;
        };
        let mut lines = vec![
            s.name.clone(),
            format!(
                "{}  ·  {}",
                model
                    .lane_of_span(sel.span)
                    .map_or(String::new(), |l| model.lanes[l].label.clone()),
                format_duration(s.duration_ns())
            ),
            format!(
                "{} .. {}",
                format_instant(s.start_ns),
                format_instant(s.end_ns)
            ),
        ];
        if let Some(op) = s.op_id {
            lines.push(format!("op {op}"));
        }
        if let Some(g) = s.group_id {
            lines.push(format!("group {g}"));
        }
        for key in ["flops", "hbm_bytes", "bytes", "shapes", "ops"] {
            if let Some(v) = s.args.get(key) {
                let mut text = v.to_string();
                if text.len() > 120 {
                    let cut = (0..=120)
                        .rev()
                        .find(|&i| text.is_char_boundary(i))
                        .unwrap_or(0);
                    text.truncate(cut);
                    text.push('…');
                }
                lines.push(format!("{key}: {text}"));
            }
        }
        let bytes = arg_number(s, "bytes");
        if bytes > 0.0 && s.duration_ns() > 0.0 {
            lines.push(format!(
                "rate: {}",
                crate::details::si(bytes / s.duration_ns() * 1e9, "B/s")
            ));
        }
        self.tooltip_box(at, lines);
    }

    /// A tooltip box with `lines` near `at`.
    pub fn tooltip_box(&self, at: Pos2, lines: Vec<String>) {
        let galley =
            self.painter
                .layout_no_wrap(lines.join("\n"), FontId::proportional(12.0), TEXT);
        let size = galley.size() + vec2(12.0, 10.0);
        let mut pos = at + vec2(14.0, 14.0);
        let clip = self.painter.clip_rect();
        if pos.x + size.x > clip.max.x {
            pos.x = at.x - 14.0 - size.x;
        }
        if pos.y + size.y > clip.max.y {
            pos.y = (clip.max.y - size.y).max(clip.min.y);
        }
        let r = Rect::from_min_size(pos, size);
        self.painter
            .rect_filled(r, 4.0, Color32::from_rgba_premultiplied(20, 20, 24, 240));
        self.painter
            .rect_stroke(r, 4.0, Stroke::new(1.0, GRID), StrokeKind::Inside);
        self.painter.galley(r.min + vec2(6.0, 5.0), galley, TEXT);
    }
}

/// Whether a span relates to the highlight: the same operator, an operator called inside the
/// selected Python-level call (and its kernels), the highlighted group's kernels, or a host
/// operator that group fused.
fn linked(h: &Highlight, host: bool, op: Option<u64>, gid: Option<u64>) -> bool {
    (h.op.is_some() && op == h.op)
        || op.is_some_and(|o| h.calls.contains(&o))
        || (!host && h.group.is_some() && gid == h.group)
        || (host && op.is_some_and(|o| h.group_ops.contains(&o)))
}

/// A transfer rate in bytes per second, short (`45GB/s`), for link span labels.
pub fn rate_label(bytes_per_s: f64) -> String {
    let (div, p) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(d, _)| bytes_per_s >= *d)
        .unwrap_or((1.0, ""));
    let v = bytes_per_s / div;
    if v >= 10.0 {
        format!("{v:.0}{p}B/s")
    } else {
        format!("{v:.1}{p}B/s")
    }
}

fn arrow(p: &Painter, a: Pos2, b: Pos2, stroke: Stroke) {
    p.line_segment([a, b], stroke);
    let d: Vec2 = b - a;
    let len = d.length();
    if len < 4.0 {
        return;
    }
    let dir = d / len;
    let n = vec2(-dir.y, dir.x);
    let tip = 6.0_f32.min(len / 2.0);
    p.add(Shape::convex_polygon(
        vec![
            b,
            b - dir * tip + n * tip * 0.5,
            b - dir * tip - n * tip * 0.5,
        ],
        stroke.color,
        Stroke::NONE,
    ));
}
