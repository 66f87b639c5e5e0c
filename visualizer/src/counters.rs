//! Counter lanes: the samples of one counter (HBM bytes in use on a chip) as a step function,
//! its peak, and what a pixel column of it shows.
//!
//! A counter holds its value until the next sample (several samples at one instant, as when
//! a burst of buffers is freed, keep the last). [`Series::columns`] reduces the visible part to
//! one (low, high, last) triple per pixel column, so a frame costs the visible samples plus
//! the plot's width, however long the trace.

use tpuemu_isa::trace::Counter;

use crate::axis::TimeAxis;

/// The samples of one counter, sorted by time.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Chip, or `None` for a host counter.
    pub chip: Option<u32>,
    /// Counter name as written in the trace.
    pub name: String,
    /// Sample times, ns, ascending.
    pub times: Vec<f64>,
    /// Values, parallel to `times`.
    pub values: Vec<f64>,
    /// Largest value and the first time it was reached, ns.
    pub peak: (f64, f64),
    /// Smallest value.
    pub min: f64,
}

/// What one pixel column of a counter shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Column {
    /// Column index from the plot's left edge.
    pub col: usize,
    /// Lowest value held in the column.
    pub low: f64,
    /// Highest value held in the column.
    pub high: f64,
}

impl Series {
    /// Groups counter samples into series by (chip, name), each sorted by time (stable, so
    /// samples at one instant keep their order). Series come sorted by chip, then name.
    pub fn from_counters(counters: &[Counter]) -> Vec<Series> {
        let mut keyed: Vec<(Option<u32>, &str, f64, f64)> = counters
            .iter()
            .filter(|c| c.ns.is_finite() && c.value.is_finite())
            .map(|c| (c.chip, c.name.as_str(), c.ns, c.value))
            .collect();
        keyed.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(a.2.total_cmp(&b.2)));
        let mut out: Vec<Series> = Vec::new();
        for (chip, name, t, v) in keyed {
            match out.last_mut() {
                Some(s) if s.chip == chip && s.name == name => {
                    s.times.push(t);
                    s.values.push(v);
                }
                _ => out.push(Series {
                    chip,
                    name: name.to_string(),
                    times: vec![t],
                    values: vec![v],
                    peak: (0.0, 0.0),
                    min: 0.0,
                }),
            }
        }
        for s in &mut out {
            let mut peak = (s.times[0], s.values[0]);
            let mut min = s.values[0];
            for (&t, &v) in s.times.iter().zip(&s.values) {
                if v > peak.1 {
                    peak = (t, v);
                }
                min = min.min(v);
            }
            s.peak = peak;
            s.min = min;
        }
        out
    }

    /// The value held at time `t` (the last sample at or before it), if any sample is that old.
    pub fn value_at(&self, t: f64) -> Option<f64> {
        let i = self.times.partition_point(|&x| x <= t);
        (i > 0).then(|| self.values[i - 1])
    }

    /// A label for the lane: `HBM in use` for the HBM counter, the name otherwise.
    pub fn label(&self) -> String {
        match self.name.as_str() {
            "hbm_bytes_in_use" => "HBM in use".to_string(),
            other => other.to_string(),
        }
    }

    /// Whether the values are bytes (the name says so).
    pub fn is_bytes(&self) -> bool {
        self.name.contains("bytes")
    }

    /// The step function reduced to pixel columns of `axis`: for each column from the first
    /// sample on, the lowest and highest value held in it. Columns after the last sample keep
    /// its value (the counter holds it) up to `end_ns`, the end of the trace.
    pub fn columns(&self, axis: &TimeAxis, end_ns: f64, out: &mut Vec<Column>) {
        out.clear();
        let width = axis.width.max(0.0).ceil() as usize;
        if self.times.is_empty() || width == 0 {
            return;
        }
        let col_t = |c: usize| axis.t(axis.x0 + c as f32);
        // The sample in force at the left edge, then every sample up to the right edge.
        let mut i = self.times.partition_point(|&x| x <= col_t(0));
        let mut held = (i > 0).then(|| self.values[i - 1]);
        for col in 0..width {
            if col_t(col) > end_ns {
                break;
            }
            let end = col_t(col + 1);
            let (mut low, mut high) = match held {
                Some(v) => (v, v),
                None => (f64::INFINITY, f64::NEG_INFINITY),
            };
            while i < self.times.len() && self.times[i] < end {
                let v = self.values[i];
                low = low.min(v);
                high = high.max(v);
                held = Some(v);
                i += 1;
            }
            if held.is_some() {
                out.push(Column { col, low, high });
            }
        }
    }
}

/// `1536` -> `1.50 KiB`.
pub fn format_bytes(v: f64) -> String {
    let (div, p) = [
        (1024f64.powi(4), "TiB"),
        (1024f64.powi(3), "GiB"),
        (1024f64.powi(2), "MiB"),
        (1024.0, "KiB"),
    ]
    .into_iter()
    .find(|(d, _)| v.abs() >= *d)
    .unwrap_or((1.0, "B"));
    let x = v / div;
    if div == 1.0 || x.abs() >= 100.0 {
        format!("{x:.0} {p}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1} {p}")
    } else {
        format!("{x:.2} {p}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(chip: Option<u32>, name: &str, ns: f64, value: f64) -> Counter {
        Counter {
            chip,
            name: name.into(),
            ns,
            value,
        }
    }

    fn axis(left: f64, ns_per_px: f64, width: f32) -> TimeAxis {
        TimeAxis {
            left_ns: left,
            ns_per_px,
            x0: 0.0,
            width,
        }
    }

    #[test]
    fn series_group_sort_and_find_the_peak() {
        let s = Series::from_counters(&[
            c(Some(0), "hbm_bytes_in_use", 30.0, 100.0),
            c(None, "x", 5.0, 1.0),
            c(Some(0), "hbm_bytes_in_use", 10.0, 300.0),
            c(Some(0), "hbm_bytes_in_use", 10.0, 250.0),
            c(Some(0), "hbm_bytes_in_use", 20.0, 300.0),
            c(Some(0), "hbm_bytes_in_use", f64::NAN, 1e9),
        ]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].chip, None);
        let h = &s[1];
        assert_eq!(h.times, [10.0, 10.0, 20.0, 30.0]);
        assert_eq!(h.values, [300.0, 250.0, 300.0, 100.0]);
        // The first time the maximum was reached, not a later repeat.
        assert_eq!(h.peak, (10.0, 300.0));
        assert_eq!(h.min, 100.0);
        assert_eq!(h.value_at(5.0), None);
        // Samples at one instant: the last one holds.
        assert_eq!(h.value_at(10.0), Some(250.0));
        assert_eq!(h.value_at(25.0), Some(300.0));
        assert_eq!(h.value_at(1e6), Some(100.0));
        assert_eq!(h.label(), "HBM in use");
        assert!(h.is_bytes());
    }

    #[test]
    fn columns_hold_values_and_catch_spikes() {
        let s = &Series::from_counters(&[
            c(Some(0), "m", 2.0, 10.0),
            c(Some(0), "m", 5.2, 50.0), // a spike inside column 5
            c(Some(0), "m", 5.4, 20.0),
            c(Some(0), "m", 8.0, 0.0),
        ])[0];
        let mut cols = Vec::new();
        s.columns(&axis(0.0, 1.0, 10.0), f64::INFINITY, &mut cols);
        // Nothing before the first sample; columns 2..10 drawn.
        assert_eq!(cols.first().unwrap().col, 2);
        assert_eq!(cols.len(), 8);
        let at = |c: usize| *cols.iter().find(|x| x.col == c).unwrap();
        assert_eq!((at(3).low, at(3).high), (10.0, 10.0));
        // Column 5 held 10 at its start, then 50, then 20: all of it shows.
        assert_eq!((at(5).low, at(5).high), (10.0, 50.0));
        assert_eq!((at(6).low, at(6).high), (20.0, 20.0));
        assert_eq!((at(9).low, at(9).high), (0.0, 0.0));
        // Zoomed into the middle: the held value comes from before the left edge.
        s.columns(&axis(6.0, 0.5, 4.0), f64::INFINITY, &mut cols);
        assert_eq!(cols.len(), 4);
        assert!(cols.iter().all(|c| c.low == 20.0 && c.high == 20.0));
        // Nothing after the end of the trace.
        s.columns(&axis(0.0, 1.0, 10.0), 6.5, &mut cols);
        assert_eq!(cols.last().unwrap().col, 6);
    }

    #[test]
    fn rates_are_short() {
        assert_eq!(crate::paint::rate_label(45e9), "45GB/s");
        assert_eq!(crate::paint::rate_label(1.5e9), "1.5GB/s");
        assert_eq!(crate::paint::rate_label(12.0), "12B/s");
    }

    #[test]
    fn bytes_format_binary_units() {
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bytes(1536.0), "1.50 KiB");
        assert_eq!(format_bytes(116_734_976.0), "111 MiB");
        assert_eq!(format_bytes(47.07 * 1048576.0), "47.1 MiB");
    }
}
