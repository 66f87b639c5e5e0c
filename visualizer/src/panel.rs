//! The side panel: tabs for the comparison of two traces (a diff table per operator, kernel,
//! fusion group or region), the op profile of one trace, the selected span and the range
//! statistics; the status line under the timeline; the key list.

use std::sync::Arc;

use eframe::egui::{self, Align2, Color32, FontId, Rect, RichText, Ui, pos2};

use crate::axis::format_duration;
use crate::counters::format_bytes;
use crate::details::si;
use crate::diff::{DiffKey, DiffRow, Side, ratio, sort, totals};
use crate::paint::Scene;
use crate::profile::{Profile, ProfileKind, Row};
use crate::table::{Cell, Col, Lead, table};
use crate::view::{Selection, Tab, Viewer};

const BETTER: Color32 = Color32::from_rgb(120, 200, 120);
const WORSE: Color32 = Color32::from_rgb(235, 120, 110);
const WEAK: Color32 = Color32::from_gray(140);

/// Draws the side panel.
pub fn side_panel(ui: &mut Ui, v: &mut Viewer) {
    ui.horizontal(|ui| {
        if v.traces.len() > 1 {
            ui.selectable_value(&mut v.tab, Tab::Compare, "Compare A vs B");
        }
        ui.selectable_value(&mut v.tab, Tab::Profile, "Op profile");
        ui.selectable_value(&mut v.tab, Tab::Selection, "Selection");
        ui.selectable_value(&mut v.tab, Tab::Stats, "Stats");
    });
    ui.separator();
    match v.tab {
        Tab::Compare | Tab::Profile => {
            ui.horizontal(|ui| {
                for k in ProfileKind::ALL {
                    if ui.selectable_label(v.tables.kind == k, k.label()).clicked() {
                        v.tables.kind = k;
                    }
                }
            });
            if v.tab == Tab::Compare && v.traces.len() > 1 {
                compare_tab(ui, v);
            } else {
                profile_tab(ui, v);
            }
        }
        Tab::Selection => {
            egui::ScrollArea::vertical().show(ui, |ui| crate::details::selection_ui(ui, v));
        }
        Tab::Stats => {
            egui::ScrollArea::vertical().show(ui, |ui| crate::details::stats_ui(ui, v));
        }
    }
}

fn dur(ns: f64) -> String {
    if ns > 0.0 {
        format_duration(ns)
    } else {
        String::new()
    }
}

fn num(v: f64, unit: &str) -> String {
    if v > 0.0 {
        si(v, unit).replace(".00 ", " ")
    } else {
        String::new()
    }
}

fn bytes(v: f64) -> String {
    if v > 0.0 {
        format_bytes(v)
    } else {
        String::new()
    }
}

fn pct(v: Option<f64>) -> String {
    v.filter(|x| *x > 0.0)
        .map_or(String::new(), |x| format!("{:.1}%", x * 100.0))
}

const PROFILE_COLS: [Col; 11] = [
    Col::name(
        "name",
        "operator, kernel, fusion group (its operators) or region",
    ),
    Col::num("count", 40.0, 0, "calls, kernels or group instances"),
    Col::num("total", 56.0, 0, "total time (host time for operators)"),
    Col::num("self", 56.0, 2, "total minus nested calls"),
    Col::num(
        "device",
        56.0,
        0,
        "device time (operators: their kernels, fused kernels shared evenly)",
    ),
    Col::num("FLOPs", 50.0, 3, "FLOPs done"),
    Col::num("FLOP/s", 56.0, 4, "achieved FLOP/s over the device time"),
    Col::num("%pk", 42.0, 1, "share of the chip's peak bf16 FLOP/s"),
    Col::num("HBM", 58.0, 1, "HBM bytes moved"),
    Col::num(
        "B/s",
        54.0,
        4,
        "achieved HBM bandwidth over the device time",
    ),
    Col::num("%BW", 42.0, 2, "share of the chip's peak HBM bandwidth"),
];

fn profile_value(p: &Profile, r: &Row, col: usize) -> f64 {
    match col {
        1 => r.count as f64,
        2 => r.total_ns,
        3 => r.self_ns,
        4 => r.device_ns,
        5 => r.flops,
        6 => r.flops_per_s(),
        7 => p.flops_util(r).unwrap_or(0.0),
        8 => r.bytes,
        9 => r.bytes_per_s(),
        10 => p.bytes_util(r).unwrap_or(0.0),
        _ => 0.0,
    }
}

fn profile_cell(p: &Profile, r: &Row, col: usize) -> String {
    match col {
        0 => r.name.clone(),
        1 => r.count.to_string(),
        2 => dur(r.total_ns),
        3 => dur(r.self_ns),
        4 => dur(r.device_ns),
        5 => num(r.flops, ""),
        6 => num(r.flops_per_s(), ""),
        7 => pct(p.flops_util(r)),
        8 => bytes(r.bytes),
        9 => num(r.bytes_per_s(), ""),
        10 => pct(p.bytes_util(r)),
        _ => String::new(),
    }
}

/// A table line: a row, or one member operator of an expanded fusion group row.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Line {
    Row(usize),
    Member(usize, usize),
}

fn lines(rows: &[&Row], expanded: &std::collections::BTreeSet<String>) -> Vec<Line> {
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        out.push(Line::Row(i));
        if expanded.contains(&r.name) {
            out.extend((0..r.members.len()).map(|m| Line::Member(i, m)));
        }
    }
    out
}

fn profile_tab(ui: &mut Ui, v: &mut Viewer) {
    if v.traces.len() > 1 {
        ui.horizontal(|ui| {
            for (t, label) in ["A", "B"].into_iter().enumerate() {
                let text = format!("{label}: {}", v.traces[t].label);
                ui.selectable_value(&mut v.tables.trace, t, text);
            }
        });
    }
    let kind = v.tables.kind;
    let trace = v.tables.trace.min(v.traces.len() - 1);
    let p = v.profile(trace, kind);
    let (sc, asc) = v.tables.sort;
    let mut rows: Vec<&Row> = p.rows.iter().collect();
    if sc == 0 {
        rows.sort_by(|a, b| a.name.cmp(&b.name));
    } else {
        rows.sort_by(|a, b| profile_value(&p, b, sc).total_cmp(&profile_value(&p, a, sc)));
    }
    if asc {
        rows.reverse();
    }
    let device: f64 = p.rows.iter().map(|r| r.device_ns).sum();
    ui.weak(format!(
        "{} {} · device {} · click: light up (and list members) · double-click: go to",
        rows.len(),
        kind.label().to_lowercase(),
        dur(device)
    ));
    let ls = lines(&rows, &v.tables.expanded);
    let selected = v.tables.selected.clone();
    let expanded = v.tables.expanded.clone();
    let resp = table(
        ui,
        "tpuemu_viz_profile",
        &PROFILE_COLS,
        Some((sc, asc)),
        ls.len(),
        &|i| matches!(ls[i], Line::Row(r) if Some(&rows[r].name) == selected.as_ref()),
        &|i| match ls[i] {
            Line::Member(..) => Lead::Member,
            Line::Row(r) if rows[r].members.is_empty() => Lead::Plain,
            Line::Row(r) if expanded.contains(&rows[r].name) => Lead::Open,
            Line::Row(_) => Lead::Closed,
        },
        &mut |i, c| -> Cell {
            match ls[i] {
                Line::Row(r) => (profile_cell(&p, rows[r], c), None),
                Line::Member(r, m) => {
                    let (name, n) = &rows[r].members[m];
                    match c {
                        0 => (name.clone(), Some(WEAK)),
                        1 => (n.to_string(), Some(WEAK)),
                        _ => (String::new(), None),
                    }
                }
            }
        },
    );
    if let Some(c) = resp.sort {
        v.tables.sort = if v.tables.sort.0 == c {
            (c, !v.tables.sort.1)
        } else {
            (c, c == 0)
        };
    }
    let row_of = |i: usize| match ls[i] {
        Line::Row(r) | Line::Member(r, _) => rows[r].name.clone(),
    };
    if let Some(i) = resp.clicked {
        let name = row_of(i);
        if matches!(ls[i], Line::Row(r) if !rows[r].members.is_empty())
            && !v.tables.expanded.remove(&name)
        {
            v.tables.expanded.insert(name.clone());
        }
        v.mark_row(kind, Some(trace), &name);
    }
    if resp.double_clicked.is_some() {
        v.step_mark(true);
    }
}

const DIFF_COLS: [Col; 10] = [
    Col::name("name", "matched by name in both traces"),
    Col::num("#A", 36.0, 0, "count in A"),
    Col::num("#B", 36.0, 0, "count in B"),
    Col::num("dev A", 58.0, 0, "device time in A"),
    Col::num("dev B", 58.0, 0, "device time in B"),
    Col::num("Δ dev", 60.0, 1, "device time B − A"),
    Col::num("B/A", 44.0, 0, "device time B / A"),
    Col::num("HBM A", 58.0, 2, "HBM bytes in A"),
    Col::num("HBM B", 58.0, 2, "HBM bytes in B"),
    Col::num("Δ HBM", 58.0, 1, "HBM bytes B − A"),
];

const DIFF_KEYS: [DiffKey; 10] = [
    DiffKey::Name,
    DiffKey::CountA,
    DiffKey::CountB,
    DiffKey::TimeA,
    DiffKey::TimeB,
    DiffKey::TimeDelta,
    DiffKey::TimeDelta,
    DiffKey::BytesA,
    DiffKey::BytesB,
    DiffKey::BytesDelta,
];

fn signed(v: f64, f: impl Fn(f64) -> String) -> Cell {
    if v == 0.0 {
        return (String::new(), None);
    }
    let sign = if v > 0.0 { "+" } else { "−" };
    (
        format!("{sign}{}", f(v.abs())),
        Some(if v > 0.0 { WORSE } else { BETTER }),
    )
}

fn diff_cell(r: &DiffRow, c: usize) -> Cell {
    let side = |s: Option<Side>, f: &dyn Fn(&Side) -> String| -> Cell {
        (
            s.as_ref().map_or("—".into(), f),
            s.is_none().then_some(WEAK),
        )
    };
    match c {
        0 => (r.name.clone(), None),
        1 => side(r.a, &|s| s.count.to_string()),
        2 => side(r.b, &|s| s.count.to_string()),
        3 => side(r.a, &|s| dur(s.device_ns)),
        4 => side(r.b, &|s| dur(s.device_ns)),
        5 => signed(r.time_delta(), format_duration),
        6 => (
            ratio(r.a.map(|s| s.device_ns), r.b.map(|s| s.device_ns)),
            None,
        ),
        7 => side(r.a, &|s| bytes(s.bytes)),
        8 => side(r.b, &|s| bytes(s.bytes)),
        9 => signed(r.bytes_delta(), format_bytes),
        _ => (String::new(), None),
    }
}

fn compare_tab(ui: &mut Ui, v: &mut Viewer) {
    let kind = v.tables.kind;
    let key = v.tables.diff_sort;
    let mut rows: Vec<DiffRow> = v.diff(kind).as_ref().clone();
    sort(
        &mut rows,
        key,
        matches!(key, DiffKey::TimeDelta | DiffKey::BytesDelta),
    );
    let total = totals(&rows);
    ui.label(
        RichText::new(format!(
            "A: {}   B: {}",
            v.traces[0].label, v.traces[1].label
        ))
        .small(),
    );
    let (a, b) = (total.a.unwrap_or_default(), total.b.unwrap_or_default());
    ui.weak(format!(
        "{} names · device {} vs {} ({}) · host {} vs {} · HBM {} vs {}",
        rows.len(),
        dur(a.device_ns),
        dur(b.device_ns),
        ratio(Some(a.device_ns), Some(b.device_ns)),
        dur(a.total_ns),
        dur(b.total_ns),
        bytes(a.bytes),
        bytes(b.bytes),
    ));
    // Line 0 is the total; then the rows, with members of expanded groups.
    let profiles: Vec<Arc<Profile>> = (0..2).map(|t| v.profile(t, kind)).collect();
    let members = |name: &str| -> Vec<(String, usize)> {
        profiles
            .iter()
            .find_map(|p| p.row(name).filter(|r| !r.members.is_empty()))
            .map_or_else(Vec::new, |r| r.members.clone())
    };
    let mut ls: Vec<(usize, Option<(String, usize)>)> = vec![(usize::MAX, None)];
    for (i, r) in rows.iter().enumerate() {
        ls.push((i, None));
        if v.tables.expanded.contains(&r.name) {
            ls.extend(members(&r.name).into_iter().map(|m| (i, Some(m))));
        }
    }
    let selected = v.tables.selected.clone();
    let expanded = v.tables.expanded.clone();
    let sort_col = DIFF_KEYS.iter().position(|k| *k == key);
    let resp = table(
        ui,
        "tpuemu_viz_diff",
        &DIFF_COLS,
        sort_col.map(|c| (c, c == 0)),
        ls.len(),
        &|i| {
            ls[i].1.is_none()
                && ls[i].0 != usize::MAX
                && Some(&rows[ls[i].0].name) == selected.as_ref()
        },
        &|i| match &ls[i] {
            (_, Some(_)) => Lead::Member,
            (usize::MAX, None) => Lead::Plain,
            (r, None) if kind != ProfileKind::Group || members(&rows[*r].name).is_empty() => {
                Lead::Plain
            }
            (r, None) if expanded.contains(&rows[*r].name) => Lead::Open,
            (_, None) => Lead::Closed,
        },
        &mut |i, c| -> Cell {
            match &ls[i] {
                (usize::MAX, _) => {
                    let (s, col) = diff_cell(&total, c);
                    (s, col.or(Some(Color32::WHITE)))
                }
                (r, None) => diff_cell(&rows[*r], c),
                (_, Some((name, n))) => match c {
                    0 => (format!("{name} ×{n}"), Some(WEAK)),
                    _ => (String::new(), None),
                },
            }
        },
    );
    if let Some(c) = resp.sort {
        v.tables.diff_sort = DIFF_KEYS[c];
    }
    if let Some(i) = resp.clicked
        && ls[i].0 != usize::MAX
    {
        let name = rows[ls[i].0].name.clone();
        if ls[i].1.is_none()
            && kind == ProfileKind::Group
            && !members(&name).is_empty()
            && !v.tables.expanded.remove(&name)
        {
            v.tables.expanded.insert(name.clone());
        }
        v.mark_row(kind, None, &name);
    }
    if resp.double_clicked.is_some() {
        v.step_mark(true);
    }
}

/// The status line under the timeline: the selected span, and the marks.
pub fn status_line(scene: &Scene<'_>, r: Rect, sel: Option<Selection>) {
    let p = scene.painter.with_clip_rect(r);
    p.rect_filled(r, 0.0, Color32::from_gray(30));
    let mut parts = Vec::new();
    if let Some(sel) = sel
        && let Some(m) = scene.traces.get(sel.trace)
        && let Some(s) = m.spans.get(sel.span)
    {
        let lane = m
            .lane_of_span(sel.span)
            .map_or(String::new(), |l| m.lanes[l].label.clone());
        let mut text = format!(
            "{} · {} · {}",
            s.name,
            lane,
            format_duration(s.duration_ns())
        );
        if scene.traces.len() > 1 {
            text = format!("{}: {text}", if sel.trace == 0 { "A" } else { "B" });
        }
        parts.push(text);
    }
    if let Some(m) = scene.marks {
        let at = m
            .current
            .map_or(String::new(), |c| format!("{} of ", c + 1));
        parts.push(format!(
            "{at}{} marked ({}) · Enter / Shift+Enter to step",
            m.len(),
            m.what
        ));
    }
    if parts.is_empty() {
        parts.push(
            "W/S zoom · A/D pan · / search · F focus · M mark · [ ] follow flows · ? keys".into(),
        );
    }
    p.text(
        pos2(r.min.x + 6.0, r.center().y),
        Align2::LEFT_CENTER,
        parts.join("   |   "),
        FontId::proportional(11.0),
        Color32::from_gray(190),
    );
}

/// The key list.
pub fn help_window(ui: &mut Ui, open: &mut bool) {
    egui::Window::new("Keys")
        .open(open)
        .collapsible(false)
        .resizable(false)
        .show(ui.ctx(), |ui| {
            egui::Grid::new("tpuemu_viz_keys")
                .striped(true)
                .show(ui, |ui| {
                    for (k, what) in [
                        ("W / S (hold)", "zoom in / out about the pointer"),
                        ("A / D (hold)", "pan left / right"),
                        ("ctrl + wheel", "zoom"),
                        ("drag, wheel", "pan, scroll lanes"),
                        ("shift + drag", "select a time range"),
                        ("F", "zoom to the selected span (fit all when none)"),
                        ("Home, 0", "fit everything"),
                        ("M", "mark the selected span's range"),
                        ("/ or Ctrl+F", "search names"),
                        (
                            "Enter / Shift+Enter",
                            "next / previous match or table row span",
                        ),
                        ("] / [", "follow the selected span's flow forward / back"),
                        ("Esc", "clear selection, then range, then search"),
                        ("click a header", "collapse a chip or the host"),
                    ] {
                        ui.strong(k);
                        ui.label(what);
                        ui.end_row();
                    }
                });
        });
}
