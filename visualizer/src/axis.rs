//! The time axis: the one mapping between trace time (ns) and screen pixels.
//!
//! [`TimeAxis::x`] is the only function that turns a time into a pixel; everything that paints
//! or hit-tests goes through it (or its inverse [`TimeAxis::t`]). Zoom keeps the time under the
//! pointer fixed, pan moves by whole pixels, fit frames a time range, and [`TimeAxis::ticks`]
//! picks 1-2-5 tick spacings with labels in ns, µs, ms or s.

use serde::{Deserialize, Serialize};

/// Finest zoom: a thousandth of a nanosecond per pixel.
pub const MIN_NS_PER_PX: f64 = 1e-3;
/// Coarsest zoom: a thousand seconds per pixel.
pub const MAX_NS_PER_PX: f64 = 1e12;

/// Which stretch of time is visible, and where on screen it is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeAxis {
    /// Time at the left edge of the plot, ns.
    pub left_ns: f64,
    /// Nanoseconds per pixel (the zoom).
    pub ns_per_px: f64,
    /// Screen x of the plot's left edge, px.
    pub x0: f32,
    /// Width of the plot, px.
    pub width: f32,
}

impl Default for TimeAxis {
    fn default() -> Self {
        TimeAxis {
            left_ns: 0.0,
            ns_per_px: 1.0,
            x0: 0.0,
            width: 1000.0,
        }
    }
}

/// One tick mark on the axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    /// Time, ns.
    pub t_ns: f64,
    /// Screen x, px.
    pub x: f32,
    /// Label (`1.5 µs`).
    pub label: String,
}

impl TimeAxis {
    /// The screen x of a time. The one time-to-pixel mapping of the viewer.
    #[inline]
    pub fn x(&self, t_ns: f64) -> f32 {
        self.x0 + ((t_ns - self.left_ns) / self.ns_per_px) as f32
    }

    /// The time at a screen x (inverse of [`Self::x`]).
    #[inline]
    pub fn t(&self, x: f32) -> f64 {
        self.left_ns + f64::from(x - self.x0) * self.ns_per_px
    }

    /// Time at the right edge of the plot, ns.
    pub fn right_ns(&self) -> f64 {
        self.t(self.x0 + self.width)
    }

    /// The same axis for a trace whose times are shifted by `offset_ns` on the shared axis
    /// (trace time `t` is drawn where shared time `t + offset_ns` is).
    pub fn shifted(&self, offset_ns: f64) -> TimeAxis {
        TimeAxis {
            left_ns: self.left_ns - offset_ns,
            ..*self
        }
    }

    /// Zooms by `factor` (below 1 zooms in) keeping the time under screen x `x` in place.
    pub fn zoom_about(&mut self, x: f32, factor: f64) {
        if !factor.is_finite() || factor <= 0.0 {
            return;
        }
        let anchor = self.t(x);
        self.ns_per_px = (self.ns_per_px * factor).clamp(MIN_NS_PER_PX, MAX_NS_PER_PX);
        self.left_ns = anchor - f64::from(x - self.x0) * self.ns_per_px;
    }

    /// Pans by `dx` pixels; positive moves the content right (earlier times come into view).
    pub fn pan_px(&mut self, dx: f32) {
        self.left_ns -= f64::from(dx) * self.ns_per_px;
    }

    /// Frames `[t0, t1]` with `margin` (a fraction of the range) on both sides.
    pub fn fit(&mut self, t0: f64, t1: f64, margin: f64) {
        let (t0, t1) = if t1 > t0 { (t0, t1) } else { (t0, t0 + 1.0) };
        let span = (t1 - t0) * (1.0 + 2.0 * margin);
        let width = f64::from(self.width.max(1.0));
        self.ns_per_px = (span / width).clamp(MIN_NS_PER_PX, MAX_NS_PER_PX);
        self.left_ns = t0 - (t1 - t0) * margin;
    }

    /// Ticks at least `min_spacing_px` apart, on multiples of 1, 2 or 5 times a power of ten.
    pub fn ticks(&self, min_spacing_px: f32) -> Vec<Tick> {
        let step = nice_step(self.ns_per_px * f64::from(min_spacing_px.max(1.0)));
        let first = (self.left_ns / step).ceil() as i64;
        let last = (self.right_ns() / step).floor() as i64;
        (first..=last.max(first - 1))
            .take(10_000)
            .map(|k| {
                let t_ns = k as f64 * step;
                Tick {
                    t_ns,
                    x: self.x(t_ns),
                    label: format_time(t_ns, step),
                }
            })
            .collect()
    }
}

/// The smallest 1, 2 or 5 times a power of ten that is at least `raw` (ns).
pub fn nice_step(raw: f64) -> f64 {
    let raw = if raw.is_finite() && raw > 0.0 {
        raw
    } else {
        1.0
    };
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * mag >= raw * (1.0 - 1e-9) {
            return m * mag;
        }
    }
    10.0 * mag
}

/// Formats a time in the unit that suits `resolution_ns` (ticks 500 ns apart read `1.5 µs`),
/// with as many decimals as the resolution needs.
pub fn format_time(t_ns: f64, resolution_ns: f64) -> String {
    let (unit, scale) = unit_for(resolution_ns * 10.0);
    let res = resolution_ns.abs() / scale;
    let decimals = if res >= 1.0 || res <= 0.0 {
        0
    } else {
        (-res.log10().floor()) as usize
    };
    let v = t_ns / scale;
    // Avoid printing "-0".
    let v = if v.abs() < 0.5 * 10f64.powi(-(decimals as i32)) {
        0.0
    } else {
        v
    };
    format!("{v:.decimals$} {unit}")
}

/// Formats a point in time in the unit of its size, to a thousandth of that unit.
pub fn format_instant(t_ns: f64) -> String {
    let (unit, scale) = unit_for(t_ns);
    format!("{:.3} {unit}", t_ns / scale)
}

/// Formats a duration with three significant-ish digits (`12.5 µs`).
pub fn format_duration(ns: f64) -> String {
    let (unit, scale) = unit_for(ns);
    let v = ns / scale;
    if v.abs() >= 100.0 {
        format!("{v:.0} {unit}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.2} {unit}")
    }
}

fn unit_for(ns: f64) -> (&'static str, f64) {
    let a = ns.abs();
    if a >= 1e9 {
        ("s", 1e9)
    } else if a >= 1e6 {
        ("ms", 1e6)
    } else if a >= 1e3 {
        ("µs", 1e3)
    } else {
        ("ns", 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis() -> TimeAxis {
        TimeAxis {
            left_ns: 1000.0,
            ns_per_px: 10.0,
            x0: 100.0,
            width: 500.0,
        }
    }

    #[test]
    fn time_and_pixel_are_inverse() {
        let a = axis();
        assert_eq!(a.x(1000.0), 100.0);
        assert_eq!(a.x(2000.0), 200.0);
        assert_eq!(a.t(200.0), 2000.0);
        for t in [0.0, 1234.5, 6000.0, -50.0] {
            assert!((a.t(a.x(t)) - t).abs() < 1e-3);
        }
        assert_eq!(a.right_ns(), 6000.0);
    }

    #[test]
    fn zoom_keeps_the_anchor_still() {
        let mut a = axis();
        let t = a.t(300.0);
        a.zoom_about(300.0, 0.5);
        assert_eq!(a.ns_per_px, 5.0);
        assert!((a.t(300.0) - t).abs() < 1e-9);
        a.zoom_about(300.0, 4.0);
        assert_eq!(a.ns_per_px, 20.0);
        assert!((a.t(300.0) - t).abs() < 1e-9);
        // Nonsense factors are ignored, extreme ones clamped.
        a.zoom_about(300.0, f64::NAN);
        a.zoom_about(300.0, -1.0);
        assert_eq!(a.ns_per_px, 20.0);
        a.zoom_about(300.0, 1e-30);
        assert_eq!(a.ns_per_px, MIN_NS_PER_PX);
    }

    #[test]
    fn pan_moves_by_pixels() {
        let mut a = axis();
        a.pan_px(10.0);
        assert_eq!(a.left_ns, 900.0);
        a.pan_px(-20.0);
        assert_eq!(a.left_ns, 1100.0);
    }

    #[test]
    fn fit_frames_the_range() {
        let mut a = axis();
        a.fit(0.0, 5000.0, 0.0);
        assert_eq!(a.x(0.0), 100.0);
        assert_eq!(a.x(5000.0), 600.0);
        a.fit(0.0, 5000.0, 0.1);
        assert!(a.x(0.0) > 100.0 && a.x(5000.0) < 600.0);
        // An empty range still gives a usable axis.
        a.fit(7.0, 7.0, 0.0);
        assert!(a.ns_per_px > 0.0 && a.ns_per_px.is_finite());
    }

    #[test]
    fn shifted_axis_moves_a_trace() {
        let a = axis();
        let b = a.shifted(500.0);
        assert_eq!(b.x(1500.0), a.x(2000.0));
    }

    #[test]
    fn nice_steps_are_1_2_5() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.0), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(420.0), 500.0);
        assert_eq!(nice_step(0.0), 1.0);
    }

    #[test]
    fn ticks_are_spaced_and_labelled() {
        let a = axis(); // 1000..6000 ns over 500 px
        let ticks = a.ticks(60.0); // 600 ns -> 1000 ns steps
        let times: Vec<f64> = ticks.iter().map(|t| t.t_ns).collect();
        assert_eq!(times, vec![1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0]);
        assert_eq!(ticks[1].label, "2 µs");
        assert_eq!(ticks[1].x, 200.0);
        for w in ticks.windows(2) {
            assert!(w[1].x - w[0].x >= 60.0);
        }
    }

    #[test]
    fn labels_pick_units_and_decimals() {
        assert_eq!(format_time(1500.0, 500.0), "1.5 µs");
        assert_eq!(format_time(1500.0, 1000.0), "2 µs");
        assert_eq!(format_time(1500.0, 100.0), "1.5 µs");
        assert_eq!(format_time(40.0, 10.0), "40 ns");
        assert_eq!(format_time(2.5e6, 5e5), "2.5 ms");
        assert_eq!(format_time(1.5e6, 1e6), "2 ms");
        assert_eq!(format_time(3e9, 1e9), "3 s");
        assert_eq!(format_time(-0.0001, 1.0), "0 ns");
        assert_eq!(format_instant(1_234_567.0), "1.235 ms");
        assert_eq!(format_instant(12.0), "12.000 ns");
        assert_eq!(format_duration(12_500.0), "12.5 µs");
        assert_eq!(format_duration(3.0), "3.00 ns");
        assert_eq!(format_duration(250e6), "250 ms");
    }
}
