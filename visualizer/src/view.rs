//! The viewer: the state of one timeline window (traces, zoom, scroll, collapsed groups,
//! selection, selected range, search, the side panel's tables) and the egui code that lays out
//! the toolbar, the side panel and the timeline.
//!
//! The same [`Viewer::ui`] runs in the eframe window and in the headless screenshot path, so a
//! screenshot shows exactly what the window shows. Drawing lives in [`crate::paint`], input in
//! [`crate::input`], the side panel in [`crate::panel`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use eframe::egui::{self, Key, Pos2, Rect, Sense, Ui, pos2};

use crate::axis::TimeAxis;
use crate::diff::{DiffKey, DiffRow, diff};
use crate::lanes::{Group, LaneKind};
use crate::layout::{Item, LaneDesc, Layout, row_at};
use crate::marks::{Marks, search};
use crate::model::TraceModel;
use crate::options::ViewOptions;
use crate::paint;
use crate::profile::{Profile, ProfileKind, profile};
use crate::stats::{RangeStats, range_stats};

/// Height of the time ruler above the lanes, px.
pub const RULER_HEIGHT: f32 = 24.0;
/// Height of the status line below the lanes, px.
pub const STATUS_HEIGHT: f32 = 18.0;
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
    /// For a host call without an operator of its own (a Python-level call): the operators
    /// called inside it, whose kernels light up with it.
    pub calls: BTreeSet<u64>,
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
        let calls = if op.is_none() {
            model.ops_within(sel.span)
        } else {
            BTreeSet::new()
        };
        Highlight {
            trace: sel.trace,
            span: Some(sel.span),
            op,
            group,
            group_ops,
            calls,
        }
    }
}

/// Statistics computed for a range (`None`: the whole traces).
type StatsCache = (Option<(f64, f64)>, Vec<RangeStats>);

/// The side panel's tabs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    /// The diff table of two traces.
    Compare,
    /// The op profile of one trace.
    Profile,
    /// The selected span.
    Selection,
    /// Range statistics.
    Stats,
}

/// State of the profile and compare tables.
#[derive(Clone, Debug, PartialEq)]
pub struct Tables {
    /// Which rows.
    pub kind: ProfileKind,
    /// The trace the profile tab shows.
    pub trace: usize,
    /// Profile sort column (index into the profile's columns) and ascending.
    pub sort: (usize, bool),
    /// Compare sort column.
    pub diff_sort: DiffKey,
    /// The selected row's name.
    pub selected: Option<String>,
    /// Fusion group rows shown with their member operators.
    pub expanded: BTreeSet<String>,
}

impl Default for Tables {
    fn default() -> Self {
        Tables {
            kind: ProfileKind::Operator,
            trace: 0,
            sort: (4, false),
            diff_sort: DiffKey::TimeDelta,
            selected: None,
            expanded: BTreeSet::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Drag {
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
    /// The side panel's tab.
    pub tab: Tab,
    /// The tables' state.
    pub tables: Tables,
    /// The search box's text.
    pub search: String,
    /// Spans lit up by the search or the selected table row.
    pub marks: Option<Marks>,
    /// Show the key list.
    pub show_help: bool,
    /// Row height used in the last frame (fitted to the height when the options ask), px.
    pub row_height: f32,
    pub(crate) fit_pending: bool,
    /// Height of the lane area in the last frame, px.
    pub(crate) last_area_height: f32,
    pub(crate) drag: Drag,
    pub(crate) focus_search: bool,
    /// The search box took this frame's Enter (the timeline must not step again).
    pub(crate) consumed_enter: bool,
    highlight: Option<(Selection, Highlight)>,
    stats: Option<StatsCache>,
    profiles: HashMap<(usize, ProfileKind), Arc<Profile>>,
    diffs: HashMap<ProfileKind, Arc<Vec<DiffRow>>>,
}

impl Viewer {
    /// A viewer over `traces`, fitted to all of them on the first frame. The side panel
    /// opens on the comparison for two traces, on the op profile for one.
    pub fn new(traces: Vec<TraceModel>, options: ViewOptions) -> Viewer {
        let tab = if traces.len() > 1 {
            Tab::Compare
        } else {
            Tab::Profile
        };
        let row_height = options.row_height;
        // Tables open on operators when a trace has operator calls, else on kernels.
        let calls = traces.iter().any(|t| {
            t.lanes.iter().any(|l| {
                matches!(l.kind, LaneKind::HostPython | LaneKind::HostOps) && !l.spans.is_empty()
            })
        });
        let tables = Tables {
            kind: if calls {
                ProfileKind::Operator
            } else {
                ProfileKind::Kernel
            },
            ..Tables::default()
        };
        Viewer {
            traces,
            options,
            axis: TimeAxis::default(),
            collapsed: BTreeSet::new(),
            selection: None,
            range: None,
            scroll_y: 0.0,
            tab,
            tables,
            search: String::new(),
            marks: None,
            show_help: false,
            row_height,
            fit_pending: true,
            last_area_height: 0.0,
            drag: Drag::None,
            focus_search: false,
            consumed_enter: false,
            highlight: None,
            stats: None,
            profiles: HashMap::new(),
            diffs: HashMap::new(),
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

    /// Height of the lane area in the last frame, px.
    pub fn last_area_height(&self) -> f32 {
        self.last_area_height
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
            self.fit_rows(avail);
            if avail <= 0.0 || self.layout().height <= avail {
                break;
            }
            if self.collapsed.insert((ti, Group::Chip(c))) {
                collapsed += 1;
            }
        }
        self.fit_rows(avail);
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
                        rows: if l.kind == LaneKind::Counter {
                            2
                        } else {
                            l.rows.len().max(1)
                        },
                        bracket: l.kind == LaneKind::Kernel
                            && self.traces[ti].lane_groups(li).is_some(),
                    })
                    .collect()
            })
            .collect()
    }

    /// The options with the row height of the last frame.
    pub fn effective_options(&self) -> ViewOptions {
        ViewOptions {
            row_height: self.row_height,
            ..self.options.clone()
        }
    }

    /// The layout of the current traces and collapse state.
    pub fn layout(&self) -> Layout {
        Layout::new(
            &self.lane_descs(),
            &self.collapsed,
            &self.effective_options(),
        )
    }

    /// Picks the row height: the options' when the lanes fit `avail` px or fitting is off,
    /// else the largest that fits, down to `min_row_height`.
    pub fn fit_rows(&mut self, avail: f32) {
        let max = self.options.row_height;
        self.row_height = max;
        if !self.options.fit_rows || avail <= 0.0 {
            return;
        }
        let descs = self.lane_descs();
        let at = |r: f32| {
            let o = ViewOptions {
                row_height: r,
                ..self.options.clone()
            };
            Layout::new(&descs, &self.collapsed, &o).height
        };
        let (h0, h1) = (at(0.0), at(1.0));
        let per_px = h1 - h0;
        if per_px > 0.0 {
            let fit = ((avail - h0) / per_px).floor();
            self.row_height = fit.clamp(self.options.min_row_height.min(max), max);
        }
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

    /// Forgets cached statistics (after the alignment changed).
    pub(crate) fn clear_stats(&mut self) {
        self.stats = None;
    }

    /// The profile of one kind of one trace (computed once).
    pub fn profile(&mut self, trace: usize, kind: ProfileKind) -> Arc<Profile> {
        let model = &self.traces[trace.min(self.traces.len().saturating_sub(1))];
        self.profiles
            .entry((trace, kind))
            .or_insert_with(|| Arc::new(profile(model, kind)))
            .clone()
    }

    /// The diff of the two traces' profiles of one kind (computed once; empty for one
    /// trace).
    pub fn diff(&mut self, kind: ProfileKind) -> Arc<Vec<DiffRow>> {
        if let Some(d) = self.diffs.get(&kind) {
            return d.clone();
        }
        let rows = if self.traces.len() > 1 {
            let a = self.profile(0, kind);
            let b = self.profile(1, kind);
            diff(&a, &b)
        } else {
            Vec::new()
        };
        self.diffs.entry(kind).or_insert(Arc::new(rows)).clone()
    }

    /// Marks the spans of the table row `name` (of the profile of `trace`, or of both traces'
    /// profiles when `trace` is `None`), and selects the row.
    pub fn mark_row(&mut self, kind: ProfileKind, trace: Option<usize>, name: &str) {
        let mut per_trace = vec![Vec::new(); self.traces.len()];
        for (t, list) in per_trace.iter_mut().enumerate() {
            if trace.is_none_or(|x| x == t)
                && let Some(r) = self.profile(t, kind).row(name)
            {
                list.extend_from_slice(&r.spans);
            }
        }
        let offsets = self.offsets();
        self.marks = Some(Marks::new(name, per_trace, &self.traces, &offsets));
        self.tables.selected = Some(name.to_string());
    }

    /// Runs the search box's query: marks every span whose name contains it.
    pub fn run_search(&mut self) {
        let q = self.search.trim().to_string();
        if q.is_empty() {
            self.marks = None;
            return;
        }
        let hits = search(&self.traces, &q);
        let offsets = self.offsets();
        self.marks = Some(Marks::new(&q, hits, &self.traces, &offsets));
        self.tables.selected = None;
    }

    /// Steps to the next (or previous) mark: selects it and brings it into view.
    pub fn step_mark(&mut self, forward: bool) -> Option<Selection> {
        let center = self.axis.t(self.axis.x0 + self.axis.width / 2.0);
        let (trace, span) = self.marks.as_mut()?.step(center, forward)?;
        let sel = Selection { trace, span };
        self.selection = Some(sel);
        self.reveal(sel);
        Some(sel)
    }

    /// Brings span `sel` into view: centred at the current zoom, or fitted when it is wider
    /// than most of the view; its lane scrolled into the lane area.
    pub fn reveal(&mut self, sel: Selection) {
        let off = self.offsets().get(sel.trace).copied().unwrap_or(0.0);
        let Some(s) = self
            .traces
            .get(sel.trace)
            .and_then(|t| t.spans.get(sel.span))
        else {
            return;
        };
        let (a, b) = (s.start_ns + off, s.end_ns + off);
        let view = self.axis.right_ns() - self.axis.left_ns;
        if b - a > 0.8 * view || view <= 0.0 {
            self.axis.fit(a, b, 0.1);
        } else {
            self.axis.left_ns = (a + b) / 2.0 - view / 2.0;
        }
        self.fit_pending = false;
        let Some(lane) = self.traces[sel.trace].lane_of_span(sel.span) else {
            return;
        };
        // Its group expands so that the span can be seen.
        self.collapsed
            .remove(&(sel.trace, self.traces[sel.trace].lanes[lane].group));
        let layout = self.layout();
        if let Some(p) = layout.find_lane(sel.trace, lane) {
            let h = self.last_area_height.max(1.0);
            if p.y < self.scroll_y || p.y + p.h > self.scroll_y + h {
                self.scroll_y = (p.y - h / 3.0).max(0.0);
            }
        }
    }

    /// The whole viewer: toolbar, side panel, timeline.
    pub fn ui(&mut self, ui: &mut Ui) {
        self.consumed_enter = false;
        egui::Panel::top("tpuemu_viz_toolbar").show(ui, |ui| self.toolbar(ui));
        let width = ui.available_width();
        egui::Panel::right("tpuemu_viz_side")
            .resizable(true)
            .default_size((width * 0.38).clamp(340.0, 640.0))
            .show(ui, |ui| crate::panel::side_panel(ui, self));
        egui::CentralPanel::default().show(ui, |ui| self.timeline(ui));
        if self.show_help {
            crate::panel::help_window(ui, &mut self.show_help);
        }
    }

    fn toolbar(&mut self, ui: &mut Ui) {
        ui.horizontal_wrapped(|ui| {
            ui.strong("tpuemu viz");
            for (i, t) in self.traces.iter().enumerate() {
                ui.separator();
                if self.traces.len() > 1 {
                    ui.weak(if i == 0 { "A" } else { "B" });
                }
                ui.label(&t.label);
            }
            ui.separator();
            let search = ui.add(
                egui::TextEdit::singleline(&mut self.search)
                    .hint_text("search names ( / )")
                    .desired_width(170.0),
            );
            if self.focus_search {
                search.request_focus();
                self.focus_search = false;
            }
            if search.changed() {
                self.run_search();
            }
            if search.lost_focus() && ui.input(|i| i.key_pressed(Key::Enter)) {
                let back = ui.input(|i| i.modifiers.shift);
                self.step_mark(!back);
                self.consumed_enter = true;
                search.request_focus();
            }
            if let Some(m) = &self.marks {
                let pos = m.current.map_or(String::new(), |c| format!("{} / ", c + 1));
                ui.weak(format!("{pos}{} marked", m.len()));
            }
            ui.separator();
            if ui.button("Fit").clicked() {
                self.fit_all();
            }
            if self.range.is_some() && ui.button("Clear range").clicked() {
                self.range = None;
            }
            ui.checkbox(&mut self.options.show_flows, "flows");
            ui.checkbox(&mut self.options.show_brackets, "groups");
            ui.checkbox(&mut self.options.fit_rows, "fit lanes");
            if ui
                .checkbox(&mut self.options.align_starts, "align starts")
                .changed()
            {
                self.clear_stats();
            }
            if ui.button("Keys ?").clicked() {
                self.show_help = !self.show_help;
            }
        });
    }

    fn timeline(&mut self, ui: &mut Ui) {
        let full = ui.available_rect_before_wrap();
        let response = ui.allocate_rect(full, Sense::click_and_drag());
        let ruler = Rect::from_min_max(full.min, pos2(full.max.x, full.min.y + RULER_HEIGHT));
        let status = Rect::from_min_max(pos2(full.min.x, full.max.y - STATUS_HEIGHT), full.max);
        let area = Rect::from_min_max(
            pos2(full.min.x, ruler.max.y),
            pos2(full.max.x, status.min.y),
        );
        self.axis.x0 = area.min.x + self.options.gutter_width;
        self.axis.width = (area.max.x - self.axis.x0).max(1.0);
        if self.fit_pending {
            self.fit_all();
        }
        self.last_area_height = area.height();
        self.fit_rows(area.height());
        let layout = self.layout();
        crate::input::handle_input(self, ui, &response, ruler, area, &layout);
        let layout = self.layout();
        let max_scroll = (layout.height - area.height()).max(0.0);
        self.scroll_y = self.scroll_y.clamp(0.0, max_scroll);

        let highlight = self.highlight();
        let offsets = self.offsets();
        let options = self.effective_options();
        let scene = paint::Scene {
            painter: ui.painter_at(full),
            traces: &self.traces,
            offsets: &offsets,
            axis: self.axis,
            options: &options,
            layout: &layout,
            area,
            ruler,
            top: area.min.y - self.scroll_y,
            highlight: highlight.as_ref(),
            marks: self.marks.as_ref(),
            range: self.range,
        };
        scene.paint();
        crate::panel::status_line(&scene, status, self.selection);
        if let Some(p) = response.hover_pos()
            && self.drag == Drag::None
        {
            match self.hit(&layout, area, p) {
                Some(sel) => scene.tooltip(p, sel),
                None => scene.counter_tooltip(p),
            }
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
            self.fit_pending = false;
        }
    }
}
