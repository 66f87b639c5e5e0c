//! Painting counter lanes: the step graph of a counter (HBM bytes in use) reduced to pixel
//! columns ([`crate::counters::Series::columns`]), filled below, its peak marked with a
//! triangle, a line and its value; and the hover tooltip giving the value under the pointer.
//!
//! When two traces are compared, counters of the same name share one scale (the larger
//! peak), so their heights compare.

use eframe::egui::{Align2, Color32, FontId, Mesh, Painter, Pos2, Rect, Shape, Stroke, pos2, vec2};

use crate::axis::format_instant;
use crate::counters::{Column, Series, format_bytes};
use crate::layout::{Item, Placed};
use crate::paint::Scene;

const FILL: Color32 = Color32::from_rgba_premultiplied(36, 66, 96, 110);
const LINE: Color32 = Color32::from_rgb(120, 190, 255);
const PEAK: Color32 = Color32::from_rgb(255, 170, 60);

fn value_text(s: &Series, v: f64) -> String {
    if s.is_bytes() {
        format_bytes(v)
    } else if v.abs() >= 1e4 {
        crate::details::si(v, "")
    } else {
        format!("{v:.2}")
    }
}

impl Scene<'_> {
    /// The scale of counters named `name`, shared by every trace: from a baseline to the
    /// largest peak. The baseline is 0 unless every value stays above a third of the peak;
    /// then it is a little under the smallest value, so that the changes show (the lane
    /// says the baseline).
    fn counter_scale(&self, name: &str) -> (f64, f64) {
        let all = self
            .traces
            .iter()
            .flat_map(|t| t.series.iter())
            .filter(|s| s.name == name);
        let hi = all.clone().map(|s| s.peak.1).fold(0.0, f64::max);
        let lo = all.map(|s| s.min).fold(f64::INFINITY, f64::min);
        if lo.is_finite() && lo > hi / 3.0 && hi > lo {
            (lo - (hi - lo) * 0.15, hi)
        } else {
            (0.0, hi)
        }
    }

    /// Paints counter lane `lane` of trace `trace`.
    pub(crate) fn counter_lane(
        &self,
        p: &Painter,
        placed: &Placed,
        trace: usize,
        lane: usize,
        mesh: &mut Mesh,
    ) {
        let model = &self.traces[trace];
        let Some(series) = model.lanes[lane].series.and_then(|i| model.series.get(i)) else {
            return;
        };
        let axis = self.axis.shifted(self.offsets[trace]);
        let top = self.top + placed.y + 2.0;
        let bottom = self.top + placed.y + placed.h - self.options.lane_gap - 1.0;
        let (base, peak) = self.counter_scale(&series.name);
        let range = (peak - base).max(f64::MIN_POSITIVE);
        let y = |v: f64| bottom - (bottom - top) * ((v - base).max(0.0) / range).min(1.0) as f32;
        let mut cols: Vec<Column> = Vec::new();
        series.columns(&axis, model.time_range.1, &mut cols);
        for c in &cols {
            let x = axis.x0 + c.col as f32;
            let (yh, yl) = (y(c.high), y(c.low));
            mesh.add_colored_rect(Rect::from_x_y_ranges(x..=x + 1.0, yh..=bottom), FILL);
            mesh.add_colored_rect(
                Rect::from_x_y_ranges(x..=x + 1.0, yh..=(yl + 1.0).max(yh + 1.0)),
                LINE,
            );
        }
        // The peak: a triangle on top, a line down, the value beside it.
        let (pt, pv) = series.peak;
        let x = axis.x(pt);
        let plot = axis.x0..=axis.x0 + axis.width;
        if plot.contains(&x) {
            let yp = y(pv);
            p.vline(x, yp..=bottom, Stroke::new(1.0, PEAK));
            p.add(Shape::convex_polygon(
                vec![
                    pos2(x - 4.0, yp - 6.0),
                    pos2(x + 4.0, yp - 6.0),
                    pos2(x, yp),
                ],
                PEAK,
                Stroke::NONE,
            ));
            let text = format!("peak {}", value_text(series, pv));
            let right = x + 6.0 + 7.0 * text.len() as f32 > *plot.end();
            let (anchor, tx) = if right {
                (Align2::RIGHT_TOP, x - 6.0)
            } else {
                (Align2::LEFT_TOP, x + 6.0)
            };
            p.text(
                pos2(tx, top),
                anchor,
                text,
                FontId::proportional(10.0),
                PEAK,
            );
        }
        if base > 0.0 {
            p.text(
                pos2(axis.x0 + 3.0, bottom - 1.0),
                Align2::LEFT_BOTTOM,
                format!("from {}", value_text(series, base)),
                FontId::proportional(9.0),
                Color32::from_gray(150),
            );
        }
        // Under the lane label: the peak value.
        if bottom - top > 20.0 {
            p.text(
                pos2(self.area.min.x + 14.0, bottom - 1.0),
                Align2::LEFT_BOTTOM,
                format!("peak {}", value_text(series, pv)),
                FontId::proportional(9.5),
                PEAK,
            );
        }
    }

    /// A tooltip with the counter's value under `at`, when `at` is over a counter lane.
    pub fn counter_tooltip(&self, at: Pos2) {
        if !self.area.contains(at) || at.x < self.axis.x0 {
            return;
        }
        let Some(placed) = self.layout.at(at.y - self.top) else {
            return;
        };
        let Item::Lane { trace, lane, .. } = placed.item else {
            return;
        };
        let model = &self.traces[trace];
        let Some(series) = model.lanes[lane].series.and_then(|i| model.series.get(i)) else {
            return;
        };
        let t = self.axis.shifted(self.offsets[trace]).t(at.x);
        let Some(v) = series.value_at(t) else { return };
        self.tooltip_box(
            at + vec2(0.0, 0.0),
            vec![
                format!("{}: {}", series.label(), value_text(series, v)),
                format!("at {}", format_instant(t - model.time_range.0)),
                format!(
                    "peak {} at {}",
                    value_text(series, series.peak.1),
                    format_instant(series.peak.0 - model.time_range.0)
                ),
            ],
        );
    }
}
