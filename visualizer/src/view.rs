//! The viewer: the state of one timeline window (traces, zoom, scroll, collapsed groups,
//! selection, selected range) and the egui code that lays out the toolbar, the details panel
//! and the timeline, and turns mouse and keys into zoom, pan, selection and range changes.
//!
//! The same [`Viewer::ui`] runs in the eframe window and in the headless screenshot path, so a
//! screenshot shows exactly what the window shows. Drawing lives in [`crate::paint`], the
//! side panel in [`crate::details`].

use std::collections::BTreeSet;

use eframe::egui::{self, Key, Pos2, Rect, Sense, Ui, pos2};

use crate::axis::TimeAxis;
use crate::lanes::{Group, LaneKind};
use crate::layout::{Item, LaneDesc, Layout, row_at};
use crate::model::TraceModel;
use crate::options::ViewOptions;
use crate::paint;
use crate::stats::{RangeStats, range_stats};

/// Height of the time ruler above the lanes, px.
pub const RULER_HEIGHT: f32 = 24.0;
/// Hover and click tolerance, px.
const HIT_SLACK_PX: f32 = 3.0;

/// A selected span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    /// Which trace.
    pub trace: usize,
    /// Span index in that trace's model.
    pub span: usize,
}

/// What a selection lights up: the operator and fusion group it belongs to, and the
/// operators that group fused.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Highlight {
    /// The trace the selection is in.
    pub trace: usize,
    /// The selected span.
    pub span: Option<usize>,
    /// Its operator.
    pub op: Option<u64>,
    /// Its fusion group (its own, or the group that fused its operator).
    pub group: Option<u64>,
    /// Operators of that group.
    pub group_ops: BTreeSet<u64>,
}

impl Highlight {
    /// What `sel` lights up in `model`.
    pub fn new(model: &TraceModel, sel: Selection) -> Highlight {
        let Some(span) = model.spans.get(sel.span) else {
            return Highlight::default();
        };
        let op = span.op_id;
        let group = span.group_id.or_else(|| {
            let op = op?;
            let mut gs: Vec<u64> = model
                .group_ops
                .iter()
                .filter(|(_, ops)| ops.contains(&op))
                .map(|(g, _)| *g)
                .collect();
            gs.sort_unstable();
            gs.first().copied()
        });
        let group_ops = group
            .and_then(|g| model.group_ops.get(&g).cloned())
            .unwrap_or_default();
        Highlight {
            trace: sel.trace,
            span: Some(sel.span),
            op,
            group,
            group_ops,
        }
    }
}

/// Statistics computed for a range (`None`: the whole traces).
type StatsCache = (Option<(f64, f64)>, Vec<RangeStats>);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Drag {
    None,
    Pan,
    Range { anchor_t: f64 },
}

/// One timeline window's state.
pub struct Viewer {
    /// The traces, stacked top to bottom on one time axis.
    pub traces: Vec<TraceModel>,
    /// Look.
    pub options: ViewOptions,
    /// Zoom and pan.
    pub axis: TimeAxis,
    /// Collapsed groups, per trace.
    pub collapsed: BTreeSet<(usize, Group)>,
    /// The selected span.
    pub selection: Option<Selection>,
    /// The selected time range on the shared axis, ns.
    pub range: Option<(f64, f64)>,
    /// Vertical scroll of the lanes, px.
    pub scroll_y: f32,
    fit_pending: bool,
    /// Height of the lane area in the last frame, px.
    last_area_height: f32,
    drag: Drag,
    highlight: Option<(Selection, Highlight)>,
    stats: Option<StatsCache>,
}

impl Viewer {
    /// A viewer over `traces`, fitted to all of them on the first frame.
    pub fn new(traces: Vec<TraceModel>, options: ViewOptions) -> Viewer {
        Viewer {
            traces,
            options,
            axis: TimeAxis::default(),
            collapsed: BTreeSet::new(),
            selection: None,
            range: None,
            scroll_y: 0.0,
            fit_pending: true,
            last_area_height: 0.0,
            drag: Drag::None,
            highlight: None,
            stats: None,
        }
    }

    /// Where each trace's time 0 sits on the shared axis (added to its times).
    pub fn offsets(&self) -> Vec<f64> {
        self.traces
            .iter()
            .map(|t| {
                if self.options.align_starts {
                    -t.time_range.0
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// The shared-axis time range covering every trace.
    pub fn full_range(&self) -> (f64, f64) {
        let offs = self.offsets();
        let mut lo = f64::INFINITY;
        let mut hi = f64::NEG_INFINITY;
        for (t, off) in self.traces.iter().zip(offs) {
            lo = lo.min(t.time_range.0 + off);
            hi = hi.max(t.time_range.1 + off);
        }
        if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) }
    }

    /// Fits the whole of every trace into view (on the next frame if the size is not known).
    pub fn fit_all(&mut self) {
        let (lo, hi) = self.full_range();
        self.axis.fit(lo, hi, 0.02);
        self.fit_pending = false;
    }

    /// Fits everything into view on the next frame (when the plot's width is known).
    pub fn request_fit(&mut self) {
        self.fit_pending = true;
    }

    /// Collapses chips (the highest first, chip 0 of each trace last of all: never) until the
    /// lanes fit the height of the last frame's lane area. For screenshots, where no one can
    /// scroll. Returns how many groups it collapsed.
    pub fn collapse_to_fit(&mut self) -> usize {
        let avail = self.last_area_height;
        let mut chips: Vec<(u32, usize)> = self
            .traces
            .iter()
            .enumerate()
            .flat_map(|(ti, t)| {
                t.lanes.iter().filter_map(move |l| match l.group {
                    Group::Chip(c) if c > 0 => Some((c, ti)),
                    _ => None,
                })
            })
            .collect();
        chips.sort_unstable_by(|a, b| b.cmp(a));
        chips.dedup();
        let mut collapsed = 0;
        for (c, ti) in chips {
            if avail <= 0.0 || self.layout().height <= avail {
                break;
            }
            if self.collapsed.insert((ti, Group::Chip(c))) {
                collapsed += 1;
            }
        }
        collapsed
    }

    /// Lane descriptions for the layout.
    pub fn lane_descs(&self) -> Vec<Vec<LaneDesc>> {
        self.traces
            .iter()
            .enumerate()
            .map(|(ti, t)| {
                t.lanes
                    .iter()
                    .enumerate()
                    .map(|(li, l)| LaneDesc {
                        group: l.group,
                        rows: l.rows.len().max(1),
                        bracket: l.kind == LaneKind::Kernel
                            && self.traces[ti].lane_groups(li).is_some(),
                    })
                    .collect()
            })
            .collect()
    }

    /// The layout of the current traces and collapse state.
    pub fn layout(&self) -> Layout {
        Layout::new(&self.lane_descs(), &self.collapsed, &self.options)
    }

    /// What the selection lights up (cached per selection).
    pub fn highlight(&mut self) -> Option<Highlight> {
        let sel = self.selection?;
        match &self.highlight {
            Some((s, h)) if *s == sel => Some(h.clone()),
            _ => {
                let h = Highlight::new(self.traces.get(sel.trace)?, sel);
                self.highlight = Some((sel, h.clone()));
                Some(h)
            }
        }
    }

    /// Statistics of each trace over the selected range (the whole trace when none), cached.
    pub fn stats(&mut self) -> &[RangeStats] {
        let key = self.range;
        if self.stats.as_ref().is_none_or(|(k, _)| *k != key) {
            let offs = self.offsets();
            let all = self
                .traces
                .iter()
                .zip(offs)
                .map(|(t, off)| match key {
                    Some((a, b)) => range_stats(t, a - off, b - off),
                    None => range_stats(t, t.time_range.0, t.time_range.1),
                })
                .collect();
            self.stats = Some((key, all));
        }
        self.stats.as_ref().map_or(&[], |(_, s)| s.as_slice())
    }

    /// The whole viewer: toolbar, details panel, timeline.
    pub fn ui(&mut self, ui: &mut Ui) {
        egui::Panel::top("tpuemu_viz_toolbar").show(ui, |ui| self.toolbar(ui));
        egui::Panel::right("tpuemu_viz_details")
            .resizable(true)
            .default_size(330.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| crate::details::details_ui(ui, self));
            });
        egui::CentralPanel::default().show(ui, |ui| self.timeline(ui));
    }

    fn toolbar(&mut self, ui: &mut Ui) {
        ui.horizontal_wrapped(|ui| {
            ui.strong("tpuemu viz");
            for t in &self.traces {
                ui.separator();
                ui.label(&t.label);
            }
            ui.separator();
            if ui.button("Fit (F)").clicked() {
                self.fit_all();
            }
            if self.range.is_some() && ui.button("Clear range").clicked() {
                self.range = None;
            }
            ui.checkbox(&mut self.options.show_flows, "flows");
            ui.checkbox(&mut self.options.show_brackets, "groups");
            ui.checkbox(&mut self.options.show_labels, "labels");
            if ui
                .checkbox(&mut self.options.align_starts, "align starts")
                .changed()
            {
                self.stats = None;
            }
            ui.separator();
            ui.weak("drag: pan · ctrl+wheel or W/S: zoom · A/D: pan · shift+drag: range · F: fit");
        });
    }

    fn timeline(&mut self, ui: &mut Ui) {
        let full = ui.available_rect_before_wrap();
        let response = ui.allocate_rect(full, Sense::click_and_drag());
        let ruler = Rect::from_min_max(full.min, pos2(full.max.x, full.min.y + RULER_HEIGHT));
        let area = Rect::from_min_max(pos2(full.min.x, ruler.max.y), full.max);
        self.axis.x0 = area.min.x + self.options.gutter_width;
        self.axis.width = (area.max.x - self.axis.x0).max(1.0);
        if self.fit_pending {
            self.fit_all();
        }
        self.last_area_height = area.height();
        let layout = self.layout();
        self.handle_input(ui, &response, ruler, area, &layout);
        let max_scroll = (layout.height - area.height()).max(0.0);
        self.scroll_y = self.scroll_y.clamp(0.0, max_scroll);

        let highlight = self.highlight();
        let offsets = self.offsets();
        let scene = paint::Scene {
            painter: ui.painter_at(full),
            traces: &self.traces,
            offsets: &offsets,
            axis: self.axis,
            options: &self.options,
            layout: &layout,
            area,
            ruler,
            top: area.min.y - self.scroll_y,
            highlight: highlight.as_ref(),
            range: self.range,
        };
        scene.paint();
        if let Some(p) = response.hover_pos()
            && self.drag == Drag::None
            && let Some(sel) = self.hit(&layout, area, p)
        {
            scene.tooltip(p, sel);
        }
    }

    /// The span under screen point `p`, if any.
    pub fn hit(&self, layout: &Layout, area: Rect, p: Pos2) -> Option<Selection> {
        if !area.contains(p) || p.x < self.axis.x0 {
            return None;
        }
        let y = p.y - area.min.y + self.scroll_y;
        let placed = layout.at(y)?;
        let Item::Lane { trace, lane, .. } = placed.item else {
            return None;
        };
        let model = self.traces.get(trace)?;
        let row = model.lanes.get(lane)?.rows.get(row_at(placed, y)?)?;
        let axis = self.axis.shifted(self.offsets()[trace]);
        let slack = f64::from(HIT_SLACK_PX) * axis.ns_per_px;
        let i = row.hit(axis.t(p.x), slack)?;
        Some(Selection {
            trace,
            span: row.first + i,
        })
    }

    /// Zooms so that span `sel` fills most of the view.
    pub fn zoom_to(&mut self, sel: Selection) {
        let off = self.offsets().get(sel.trace).copied().unwrap_or(0.0);
        if let Some(s) = self
            .traces
            .get(sel.trace)
            .and_then(|t| t.spans.get(sel.span))
        {
            self.axis.fit(s.start_ns + off, s.end_ns + off, 0.1);
        }
    }

    fn handle_input(
        &mut self,
        ui: &Ui,
        response: &egui::Response,
        ruler: Rect,
        area: Rect,
        layout: &Layout,
    ) {
        let (zoom, scroll, shift) =
            ui.input(|i| (i.zoom_delta(), i.smooth_scroll_delta, i.modifiers.shift));
        let pointer_x = response
            .hover_pos()
            .map_or(self.axis.x0 + self.axis.width / 2.0, |p| p.x);
        if response.hovered() {
            if zoom != 1.0 && zoom > 0.0 {
                self.axis.zoom_about(pointer_x, 1.0 / f64::from(zoom));
            }
            if scroll.x != 0.0 {
                self.axis.pan_px(scroll.x);
            }
            self.scroll_y -= scroll.y;
        }
        if !ui.ctx().egui_wants_keyboard_input() {
            let pressed = |k: Key| ui.input(|i| i.key_pressed(k));
            let kz = self.options.key_zoom;
            if pressed(Key::W) || pressed(Key::ArrowUp) {
                self.axis.zoom_about(pointer_x, kz);
            }
            if pressed(Key::S) || pressed(Key::ArrowDown) {
                self.axis.zoom_about(pointer_x, 1.0 / kz);
            }
            let step = self.axis.width * self.options.key_pan;
            if pressed(Key::A) || pressed(Key::ArrowLeft) {
                self.axis.pan_px(step);
            }
            if pressed(Key::D) || pressed(Key::ArrowRight) {
                self.axis.pan_px(-step);
            }
            if pressed(Key::F) || pressed(Key::Home) {
                self.fit_all();
            }
            if pressed(Key::Escape) {
                self.selection = None;
                self.range = None;
            }
        }

        if response.drag_started()
            && let Some(p) = response.interact_pointer_pos()
        {
            self.drag = if shift || ruler.contains(p) {
                Drag::Range {
                    anchor_t: self.axis.t(p.x),
                }
            } else {
                Drag::Pan
            };
        }
        if response.dragged() {
            match self.drag {
                Drag::Pan => {
                    let d = response.drag_delta();
                    self.axis.pan_px(d.x);
                    self.scroll_y -= d.y;
                }
                Drag::Range { anchor_t } => {
                    if let Some(p) = response.interact_pointer_pos() {
                        let t = self.axis.t(p.x);
                        self.range = Some((anchor_t.min(t), anchor_t.max(t)));
                    }
                }
                Drag::None => {}
            }
        }
        if response.drag_stopped() {
            if let (Drag::Range { .. }, Some((a, b))) = (self.drag, self.range)
                && self.axis.x(b) - self.axis.x(a) < 2.0
            {
                self.range = None;
            }
            self.drag = Drag::None;
        }

        if let Some(p) = response
            .interact_pointer_pos()
            .filter(|_| response.clicked())
        {
            if ruler.contains(p) {
                self.range = None;
                return;
            }
            let y = p.y - area.min.y + self.scroll_y;
            match layout.at(y).map(|pl| pl.item) {
                Some(Item::GroupHeader { trace, group, .. }) => {
                    if !self.collapsed.remove(&(trace, group)) {
                        self.collapsed.insert((trace, group));
                    }
                }
                _ => self.selection = self.hit(layout, area, p),
            }
        }
        if response.double_clicked()
            && let Some(sel) = self.selection
        {
            self.zoom_to(sel);
        }
    }
}
