//! The selection and statistics tabs: everything about the selected span (name, lane, times
//! in ns and cycles, operator, fusion group and every arg), what it is linked to, and the
//! statistics of the selected range (or the whole trace): busy share per lane, FLOP/s and
//! MFU, HBM and ICI bandwidth, the HBM peak, and the traffic of every ICI link.

use eframe::egui::{self, RichText, Ui};

use crate::axis::{format_duration, format_instant};
use crate::counters::format_bytes;
use crate::stats::RangeStats;
use crate::view::Viewer;

/// Draws the selected span's details.
pub fn selection_ui(ui: &mut Ui, viewer: &mut Viewer) {
    ui.heading("Selection");
    let Some(sel) = viewer.selection else {
        ui.weak("Click a span to see its details.");
        return;
    };
    let Some(model) = viewer.traces.get(sel.trace) else {
        return;
    };
    let Some(s) = model.spans.get(sel.span) else {
        return;
    };
    ui.label(RichText::new(&s.name).strong());
    let lane = model
        .lane_of_span(sel.span)
        .map_or(String::new(), |l| model.lanes[l].label.clone());
    let mut zoom = false;
    egui::Grid::new("tpuemu_viz_sel")
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| {
            let mut row = |k: &str, v: String| {
                ui.label(k);
                ui.label(v);
                ui.end_row();
            };
            row("trace", model.label.clone());
            row("lane", lane);
            if let Some(c) = s.track.chip() {
                row("chip", c.to_string());
            }
            row("duration", format_duration(s.duration_ns()));
            row(
                "start",
                format!("{} ({} ns)", format_instant(s.start_ns), exact(s.start_ns)),
            );
            row(
                "end",
                format!("{} ({} ns)", format_instant(s.end_ns), exact(s.end_ns)),
            );
            if let Some((a, b)) = s.cycles {
                row(
                    "cycles",
                    format!("{a} .. {b} ({} cycles)", b.saturating_sub(a)),
                );
            }
            if let Some(op) = s.op_id {
                row("op id", op.to_string());
            }
            if let Some(g) = s.group_id {
                row("group id", g.to_string());
            }
            for (k, v) in &s.args {
                let mut text = v.to_string();
                if text.len() > 300 {
                    let cut = (0..=300)
                        .rev()
                        .find(|&i| text.is_char_boundary(i))
                        .unwrap_or(0);
                    text.truncate(cut);
                    text.push('…');
                }
                row(k, text);
            }
        });
    if ui.button("Zoom to span").clicked() {
        zoom = true;
    }
    if let Some(h) = viewer.highlight()
        && let Some(g) = h.group
    {
        ui.label(format!("Fusion group {g}"));
        let model = &viewer.traces[sel.trace];
        let kernels: usize = model
            .groups
            .iter()
            .filter_map(|lg| lg.groups.iter().find(|x| x.group_id == g))
            .map(|x| x.kernels)
            .sum();
        ui.weak(format!("{kernels} kernels, fused from:"));
        for op in &h.group_ops {
            let name = model
                .host_ops
                .get(op)
                .and_then(|v| v.first())
                .map_or("?", |&i| model.spans[i].name.as_str());
            ui.label(format!("  op {op}: {name}"));
        }
    }
    if zoom {
        viewer.zoom_to(sel);
    }
}

/// Draws the statistics of the selected range (or the whole traces).
pub fn stats_ui(ui: &mut Ui, viewer: &mut Viewer) {
    let ranged = viewer.range.is_some();
    ui.heading(if ranged {
        "Selected range"
    } else {
        "Whole trace"
    });
    if !ranged {
        ui.weak("Shift+drag (or drag on the ruler) to select a range.");
    }
    let labels: Vec<String> = viewer.traces.iter().map(|t| t.label.clone()).collect();
    let ranks: Vec<bool> = viewer
        .traces
        .iter()
        .map(|t| t.meta.world_size.is_some())
        .collect();
    let peaks: Vec<Vec<String>> = viewer
        .traces
        .iter()
        .map(|t| {
            t.series
                .iter()
                .map(|s| {
                    let v = if s.is_bytes() {
                        format_bytes(s.peak.1)
                    } else {
                        format!("{}", s.peak.1)
                    };
                    let chip = s.chip.map_or(String::new(), |c| format!("chip {c} "));
                    format!(
                        "{chip}{} peak {v} at {}",
                        s.label(),
                        format_instant(s.peak.0 - t.time_range.0)
                    )
                })
                .collect()
        })
        .collect();
    let stats = viewer.stats().to_vec();
    for (((label, st), peaks), &ranks) in labels.iter().zip(&stats).zip(&peaks).zip(&ranks) {
        ui.separator();
        ui.label(RichText::new(label).strong());
        for p in peaks {
            ui.label(p);
        }
        stats_block(ui, label, st, ranks);
    }
}

fn stats_block(ui: &mut Ui, id: &str, st: &RangeStats, ranks: bool) {
    egui::Grid::new(("tpuemu_viz_stats", id))
        .num_columns(2)
        .show(ui, |ui| {
            let mut row = |k: &str, v: String| {
                ui.label(k);
                ui.label(v);
                ui.end_row();
            };
            row(
                "range",
                format!(
                    "{} (from {})",
                    format_duration(st.t1 - st.t0),
                    format_instant(st.t0)
                ),
            );
            row("kernels", st.kernels.to_string());
            row("FLOP/s", si(st.flops_per_s, "FLOP/s"));
            row(
                "MFU",
                st.mfu.map_or("n/a (no peak in trace)".into(), |m| {
                    format!("{:.2} %", m * 100.0)
                }),
            );
            row(
                "HBM",
                match st.hbm_util {
                    Some(u) => format!(
                        "{} ({:.1} % of peak)",
                        si(st.hbm_bytes_per_s, "B/s"),
                        u * 100.0
                    ),
                    None => si(st.hbm_bytes_per_s, "B/s"),
                },
            );
            row("ICI", si(st.link_bytes_per_s, "B/s"));
        });
    if st.groups.len() > 1 {
        per_chip(ui, id, st, ranks);
    }
    egui::Grid::new(("tpuemu_viz_busy", id))
        .num_columns(4)
        .striped(true)
        .show(ui, |ui| {
            let secs = (st.t1 - st.t0).max(f64::MIN_POSITIVE) * 1e-9;
            for l in &st.lanes {
                ui.weak(crate::lanes::group_label(l.group, "", ranks));
                ui.label(&l.label);
                ui.add(
                    egui::ProgressBar::new(l.share as f32)
                        .desired_width(90.0)
                        .text(format!("{:.1} %", l.share * 100.0)),
                );
                // Per-link (and per-engine) traffic: bytes and the average rate.
                if l.bytes > 0.0 {
                    ui.weak(format!(
                        "{} · {}",
                        format_bytes(l.bytes),
                        si(l.bytes / secs, "B/s")
                    ));
                } else {
                    ui.label("");
                }
                ui.end_row();
            }
        });
}

/// One row per chip (per rank in a merged run): kernels, FLOP/s, MFU, HBM, collectives.
fn per_chip(ui: &mut Ui, id: &str, st: &RangeStats, ranks: bool) {
    egui::Grid::new(("tpuemu_viz_chips", id))
        .num_columns(6)
        .striped(true)
        .show(ui, |ui| {
            for h in [
                if ranks { "rank" } else { "chip" },
                "kernels",
                "FLOP/s",
                "MFU",
                "HBM",
                "collectives",
            ] {
                ui.strong(h);
            }
            ui.end_row();
            for g in &st.groups {
                ui.label(g.chip.to_string());
                ui.label(g.kernels.to_string());
                ui.label(si(g.flops_per_s, "FLOP/s"));
                ui.label(
                    g.mfu
                        .map_or("n/a".into(), |m| format!("{:.2} %", m * 100.0)),
                );
                ui.label(si(g.hbm_bytes_per_s, "B/s"));
                ui.label(format!("{:.1} %", g.collective_share * 100.0));
                ui.end_row();
            }
        });
}

/// A time in ns to a thousandth, without trailing zeros (`19451.827`, `1000`).
fn exact(ns: f64) -> String {
    let s = format!("{ns:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `1.5e12` -> `1.50 T<unit>`.
pub fn si(v: f64, unit: &str) -> String {
    let (div, p) = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(d, _)| v.abs() >= *d)
        .unwrap_or((1.0, ""));
    format!("{:.2} {p}{unit}", v / div)
}

#[cfg(test)]
mod tests {
    use super::si;

    #[test]
    fn si_prefixes() {
        assert_eq!(si(1.5e12, "FLOP/s"), "1.50 TFLOP/s");
        assert_eq!(si(819e9, "B/s"), "819.00 GB/s");
        assert_eq!(si(12.0, "B/s"), "12.00 B/s");
        assert_eq!(super::exact(19451.826666666653), "19451.827");
        assert_eq!(super::exact(1000.0), "1000");
    }
}
