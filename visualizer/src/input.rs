//! Turning mouse and keys into zoom, pan, selection, range, search steps and flow following
//! (the keys themselves are read by [`crate::keys`]).

use eframe::egui::{self, Rect, Ui};

use crate::keys::read_keys;
use crate::layout::{Item, Layout};
use crate::model::TraceModel;
use crate::view::{Drag, Selection, Viewer};

/// Handles one frame of input on the timeline.
pub(crate) fn handle_input(
    v: &mut Viewer,
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
        .map_or(v.axis.x0 + v.axis.width / 2.0, |p| p.x);
    if response.hovered() {
        if zoom != 1.0 && zoom > 0.0 {
            v.axis.zoom_about(pointer_x, 1.0 / f64::from(zoom));
        }
        if scroll.x != 0.0 {
            v.axis.pan_px(scroll.x);
        }
        v.scroll_y -= scroll.y;
    }
    if !ui.ctx().egui_wants_keyboard_input() {
        keys(v, ui, pointer_x);
    }
    mouse(v, response, ruler, area, layout, shift);
}

fn keys(v: &mut Viewer, ui: &Ui, pointer_x: f32) {
    let a = ui.input(|i| read_keys(i, v.options.key_zoom, f64::from(v.options.key_pan)));
    if a.zoom != 1.0 {
        v.axis.zoom_about(pointer_x, a.zoom);
    }
    if a.pan != 0.0 {
        v.axis.pan_px(-(a.pan as f32) * v.axis.width);
    }
    if a.held {
        ui.ctx().request_repaint();
    }
    if a.focus {
        match v.selection {
            Some(sel) => v.zoom_to(sel),
            None => v.fit_all(),
        }
    }
    if a.fit {
        v.fit_all();
    }
    if a.mark
        && let Some(sel) = v.selection
        && let Some(s) = v.traces.get(sel.trace).and_then(|t| t.spans.get(sel.span))
    {
        let off = v.offsets()[sel.trace];
        v.range = Some((s.start_ns + off, s.end_ns + off));
    }
    if let Some(forward) = a.step
        && !std::mem::take(&mut v.consumed_enter)
    {
        v.step_mark(forward);
    }
    if a.search {
        v.focus_search = true;
    }
    if let Some(forward) = a.follow
        && let Some(sel) = v.selection
        && let Some(to) = follow_flow(&v.traces[sel.trace], sel.span, forward)
    {
        let next = Selection {
            trace: sel.trace,
            span: to,
        };
        v.selection = Some(next);
        v.reveal(next);
    }
    if a.clear {
        if v.selection.is_some() {
            v.selection = None;
        } else if v.range.is_some() {
            v.range = None;
        } else {
            v.search.clear();
            v.marks = None;
            v.tables.selected = None;
        }
    }
    if a.help {
        v.show_help = !v.show_help;
    }
}

/// The span at the other end of a flow from span `span`: forward, the first flow leaving it
/// (host operator -> kernel); backward, the flow arriving at its start (kernel -> operator).
pub fn follow_flow(model: &TraceModel, span: usize, forward: bool) -> Option<usize> {
    let s = model.spans.get(span)?;
    if forward && s.op_id.is_none() {
        // A Python-level call: the first kernel of the operators it called.
        let ops = model.ops_within(span);
        if !ops.is_empty() {
            return model
                .lanes
                .iter()
                .filter(|l| l.kind == crate::lanes::LaneKind::Kernel)
                .flat_map(|l| l.spans.clone())
                .filter(|&i| model.spans[i].op_id.is_some_and(|o| ops.contains(&o)))
                .min_by(|&a, &b| model.spans[a].start_ns.total_cmp(&model.spans[b].start_ns));
        }
    }
    let f = model.flows.iter().find(|f| {
        if forward {
            f.from == s.track && f.from_ns >= s.start_ns && f.from_ns <= s.end_ns
        } else {
            f.to == s.track && (f.to_ns - s.start_ns).abs() <= 1e-3
        }
    })?;
    let (track, t) = if forward {
        (&f.to, f.to_ns)
    } else {
        (&f.from, f.from_ns)
    };
    let lane = model
        .lanes
        .iter()
        .position(|l| l.track.as_ref() == Some(track))?;
    // The innermost span of that lane at that time.
    model.lanes[lane]
        .rows
        .iter()
        .rev()
        .find_map(|row| row.hit(t, 1e-3).map(|i| row.first + i))
}

fn mouse(
    v: &mut Viewer,
    response: &egui::Response,
    ruler: Rect,
    area: Rect,
    layout: &Layout,
    shift: bool,
) {
    if response.drag_started()
        && let Some(p) = response.interact_pointer_pos()
    {
        v.drag = if shift || ruler.contains(p) {
            Drag::Range {
                anchor_t: v.axis.t(p.x),
            }
        } else {
            Drag::Pan
        };
    }
    if response.dragged() {
        match v.drag {
            Drag::Pan => {
                let d = response.drag_delta();
                v.axis.pan_px(d.x);
                v.scroll_y -= d.y;
            }
            Drag::Range { anchor_t } => {
                if let Some(p) = response.interact_pointer_pos() {
                    let t = v.axis.t(p.x);
                    v.range = Some((anchor_t.min(t), anchor_t.max(t)));
                }
            }
            Drag::None => {}
        }
    }
    if response.drag_stopped() {
        if let (Drag::Range { .. }, Some((a, b))) = (v.drag, v.range)
            && v.axis.x(b) - v.axis.x(a) < 2.0
        {
            v.range = None;
        }
        v.drag = Drag::None;
    }

    if let Some(p) = response
        .interact_pointer_pos()
        .filter(|_| response.clicked())
    {
        if ruler.contains(p) {
            v.range = None;
            return;
        }
        let y = p.y - area.min.y + v.scroll_y;
        match layout.at(y).map(|pl| pl.item) {
            Some(Item::GroupHeader { trace, group, .. }) => {
                if !v.collapsed.remove(&(trace, group)) {
                    v.collapsed.insert((trace, group));
                }
            }
            _ => v.selection = v.hit(layout, area, p),
        }
    }
    if response.double_clicked()
        && let Some(sel) = v.selection
    {
        v.zoom_to(sel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuemu_isa::trace::{Flow, Span, Trace, TraceEvent, TraceMeta, Track};

    #[test]
    fn flows_are_followed_both_ways() {
        let aten = Track::Host {
            lane: "aten".into(),
        };
        let k = Track::Kernel { chip: 0, core: 0 };
        let events = vec![
            TraceEvent::Span(Span::new(aten.clone(), "aten::mm", 0.0, 10.0)),
            TraceEvent::Span(Span::new(k.clone(), "mm", 20.0, 30.0)),
            TraceEvent::Span(Span::new(k.clone(), "other", 40.0, 50.0)),
            TraceEvent::Flow(Flow {
                id: 1,
                name: "launch".into(),
                from: aten,
                from_ns: 10.0,
                to: k,
                to_ns: 20.0,
            }),
        ];
        let m = TraceModel::new(
            Trace {
                meta: TraceMeta::default(),
                events,
            },
            "t",
        );
        let find = |n: &str| m.spans.iter().position(|s| s.name == n).unwrap();
        assert_eq!(follow_flow(&m, find("aten::mm"), true), Some(find("mm")));
        assert_eq!(follow_flow(&m, find("mm"), false), Some(find("aten::mm")));
        assert_eq!(follow_flow(&m, find("other"), false), None);
        assert_eq!(follow_flow(&m, find("mm"), true), None);
    }
}
