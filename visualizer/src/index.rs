//! Culling: finding the spans of one lane row that are on screen, and merging the ones thinner
//! than a pixel, so a frame costs about the same whether the trace has a thousand spans or a
//! million.
//!
//! A [`RowIndex`] holds one row of a lane: spans that do not overlap, sorted by start, with a
//! running maximum of their ends (so the first visible span is found by binary search even if
//! a foreign trace breaks the no-overlap rule). Nested lanes (regions) are split into one row
//! per nesting depth by [`crate::model`], so every row is flat.
//!
//! [`RowIndex::cull`] walks only the visible spans. Spans at least a pixel wide are drawn as
//! themselves; a span thinner than that starts a merged block that swallows every span starting
//! in the same pixel column (found by binary search, not by visiting them), and blocks in
//! adjacent columns join. So a row yields at most about two draw items per pixel column.

use std::ops::Range;

use crate::axis::TimeAxis;

/// One flat row of spans, sorted by start.
#[derive(Clone, Debug, Default)]
pub struct RowIndex {
    /// Index of this row's first span in the model's span list; span `i` of the row is
    /// `first + i` there.
    pub first: usize,
    starts: Vec<f64>,
    ends: Vec<f64>,
    /// `max_end[i]` = largest end among spans `0..=i`.
    max_end: Vec<f64>,
    /// `busy[i]` = total duration of spans `0..i` (one more entry than spans).
    busy: Vec<f64>,
    /// `weights[i]` = total weight (bytes of link spans) of spans `0..i`; empty when the row
    /// has no weights.
    weights: Vec<f64>,
}

/// Something to draw for one row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DrawItem {
    /// One span, at least a pixel wide (or the only span in its column).
    Span {
        /// Row-local span index.
        index: usize,
        /// Left edge, px.
        x0: f32,
        /// Right edge, px.
        x1: f32,
    },
    /// Several spans thinner than a pixel, drawn as one block.
    Merged {
        /// Row-local indices of the spans in the block.
        first: usize,
        /// How many spans.
        count: usize,
        /// Left edge, px.
        x0: f32,
        /// Right edge, px.
        x1: f32,
        /// Share of the block's time covered by its spans (0..=1), for shading.
        density: f32,
    },
}

impl DrawItem {
    /// Horizontal extent, px.
    pub fn x_range(&self) -> (f32, f32) {
        match *self {
            DrawItem::Span { x0, x1, .. } | DrawItem::Merged { x0, x1, .. } => (x0, x1),
        }
    }
}

impl RowIndex {
    /// Builds a row from `(start, end)` pairs that are already sorted by start.
    pub fn new(first: usize, spans: impl IntoIterator<Item = (f64, f64)>) -> RowIndex {
        let mut row = RowIndex {
            first,
            ..RowIndex::default()
        };
        let mut running = f64::NEG_INFINITY;
        row.busy.push(0.0);
        for (s, e) in spans {
            debug_assert!(row.starts.last().is_none_or(|&p| p <= s), "row not sorted");
            running = running.max(e);
            row.starts.push(s);
            row.ends.push(e);
            row.max_end.push(running);
            row.busy
                .push(row.busy.last().copied().unwrap_or(0.0) + (e - s));
        }
        row
    }

    /// Gives the spans weights (bytes, in span order), summed over ranges by [`Self::weight`].
    pub fn set_weights(&mut self, w: impl IntoIterator<Item = f64>) {
        self.weights.clear();
        self.weights.push(0.0);
        let mut total = 0.0;
        for x in w.into_iter().take(self.len()) {
            total += x;
            self.weights.push(total);
        }
        self.weights.resize(self.len() + 1, total);
    }

    /// Total weight of spans `r` (0 when the row has no weights).
    pub fn weight(&self, r: Range<usize>) -> f64 {
        match (self.weights.get(r.end), self.weights.get(r.start)) {
            (Some(b), Some(a)) => b - a,
            _ => 0.0,
        }
    }

    /// Number of spans.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether the row is empty.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Start and end of span `i`, ns.
    pub fn span(&self, i: usize) -> (f64, f64) {
        (self.starts[i], self.ends[i])
    }

    /// The spans that overlap `[t0, t1]` (touching counts), as a row-local index range. Spans
    /// outside it neither start before `t1` nor end after `t0`.
    pub fn visible(&self, t0: f64, t1: f64) -> Range<usize> {
        let lo = self.max_end.partition_point(|&e| e < t0);
        let hi = self.starts.partition_point(|&s| s <= t1);
        lo..hi.max(lo)
    }

    /// The span under time `t`, allowing `slack_ns` either side; the nearest wins.
    pub fn hit(&self, t: f64, slack_ns: f64) -> Option<usize> {
        let r = self.visible(t - slack_ns, t + slack_ns);
        let dist = |i: usize| {
            let (s, e) = self.span(i);
            if t < s {
                s - t
            } else if t > e {
                t - e
            } else {
                0.0
            }
        };
        r.filter(|&i| dist(i) <= slack_ns)
            .min_by(|&a, &b| dist(a).total_cmp(&dist(b)))
    }

    /// The draw items of the visible part of the row, in order. `min_px` is the width below
    /// which spans are merged (1 px is the usual choice).
    pub fn cull(&self, axis: &TimeAxis, min_px: f32, out: &mut Vec<DrawItem>) {
        let left = axis.t(axis.x0);
        let right = axis.t(axis.x0 + axis.width);
        let Range { start: mut i, end } = self.visible(left, right);
        let min_px = min_px.max(f32::EPSILON);
        // Pixel columns are counted from the plot's left edge so they do not drift with x0.
        let col_of = |x: f32| ((x - axis.x0) / min_px).floor();
        while i < end {
            let x0 = axis.x(self.starts[i]);
            let x1 = axis.x(self.ends[i]);
            // In a row of overlapping spans (occupancy), spans starting in one column merge
            // even when wide, so the row still yields a bounded number of items per column.
            let alone = i + 1 >= end || col_of(axis.x(self.starts[i + 1])) > col_of(x0);
            if x1 - x0 >= min_px && alone {
                out.push(DrawItem::Span { index: i, x0, x1 });
                i += 1;
                continue;
            }
            // Every span starting in this column joins the block.
            let col_end_t = axis.t(axis.x0 + (col_of(x0) + 1.0) * min_px);
            let j = i + 1 + gallop(&self.starts[i + 1..end], col_end_t);
            let bx1 = axis.x(self.max_end[j - 1]).max(x0 + min_px);
            let density = self.density(axis, i..j, x0, bx1);
            match out.last_mut() {
                // Blocks in neighbouring columns of about the same density join.
                Some(DrawItem::Merged {
                    first,
                    count,
                    x0: px0,
                    x1: px1,
                    density: pd,
                }) if *first + *count == i
                    && x0 <= *px1 + min_px
                    && density_level(*pd) == density_level(density) =>
                {
                    *count = j - *first;
                    *px1 = px1.max(bx1);
                    *pd = self.density(axis, *first..j, *px0, *px1);
                }
                _ => out.push(DrawItem::Merged {
                    first: i,
                    count: j - i,
                    x0,
                    x1: bx1,
                    density,
                }),
            }
            i = j;
        }
    }
}

impl RowIndex {
    /// Busy share of spans `r` over the screen extent `x0..x1`.
    fn density(&self, axis: &TimeAxis, r: Range<usize>, x0: f32, x1: f32) -> f32 {
        let busy = self.busy[r.end] - self.busy[r.start];
        let width_ns = f64::from((x1 - x0).max(f32::EPSILON)) * axis.ns_per_px;
        (busy / width_ns).clamp(0.0, 1.0) as f32
    }
}

/// Density quantized to eight shades (merged blocks join only within a shade).
pub fn density_level(d: f32) -> u8 {
    (d.clamp(0.0, 1.0).sqrt() * 7.0).round() as u8
}

/// How many leading elements of the sorted `starts` are below `t`: exponential then binary
/// search, so the cost is the log of the answer, not of the slice (columns are usually
/// sparse).
fn gallop(starts: &[f64], t: f64) -> usize {
    let mut hi = 1;
    while hi < starts.len() && starts[hi - 1] < t {
        hi *= 2;
    }
    let lo = hi / 2;
    let hi = hi.min(starts.len());
    lo + starts[lo..hi].partition_point(|&s| s < t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(left: f64, ns_per_px: f64, width: f32) -> TimeAxis {
        TimeAxis {
            left_ns: left,
            ns_per_px,
            x0: 0.0,
            width,
        }
    }

    #[test]
    fn visible_range_by_binary_search() {
        let row = RowIndex::new(0, (0..10).map(|i| (i as f64 * 10.0, i as f64 * 10.0 + 5.0)));
        assert_eq!(row.visible(12.0, 31.0), 1..4); // [10, 15] reaches into the range
        assert_eq!(row.visible(5.0, 5.0), 0..1); // touching the end counts
        assert_eq!(row.visible(6.0, 9.0), 1..1); // in a gap
        assert_eq!(row.visible(-100.0, -50.0), 0..0);
        assert_eq!(row.visible(1000.0, 2000.0), 10..10);
    }

    #[test]
    fn a_long_early_span_stays_visible() {
        // A foreign trace may break the no-overlap rule: the running max keeps it correct.
        let row = RowIndex::new(0, [(0.0, 100.0), (10.0, 11.0), (20.0, 21.0)]);
        assert_eq!(row.visible(50.0, 60.0), 0..3);
    }

    #[test]
    fn gallop_matches_partition_point() {
        let v: Vec<f64> = (0..100).map(|i| f64::from(i / 3)).collect();
        for t in [-1.0, 0.0, 0.5, 1.0, 7.0, 32.9, 33.0, 100.0] {
            assert_eq!(gallop(&v, t), v.partition_point(|&s| s < t), "t = {t}");
        }
        assert_eq!(gallop(&[], 1.0), 0);
    }

    #[test]
    fn weights_sum_over_ranges() {
        let mut row = RowIndex::new(0, [(0.0, 1.0), (2.0, 3.0), (4.0, 5.0)]);
        assert_eq!(row.weight(0..3), 0.0);
        row.set_weights([10.0, 20.0, 40.0]);
        assert_eq!(row.weight(0..3), 70.0);
        assert_eq!(row.weight(1..3), 60.0);
        assert_eq!(row.weight(1..1), 0.0);
    }

    #[test]
    fn hit_finds_the_nearest_span() {
        let row = RowIndex::new(0, [(0.0, 10.0), (20.0, 30.0)]);
        assert_eq!(row.hit(5.0, 0.0), Some(0));
        assert_eq!(row.hit(15.0, 1.0), None);
        assert_eq!(row.hit(18.0, 3.0), Some(1));
        assert_eq!(row.hit(12.0, 3.0), Some(0));
    }

    #[test]
    fn wide_spans_are_drawn_alone() {
        let row = RowIndex::new(0, [(0.0, 100.0), (200.0, 300.0), (5000.0, 6000.0)]);
        let mut out = Vec::new();
        row.cull(&axis(0.0, 1.0, 1000.0), 1.0, &mut out);
        assert_eq!(
            out,
            vec![
                DrawItem::Span {
                    index: 0,
                    x0: 0.0,
                    x1: 100.0
                },
                DrawItem::Span {
                    index: 1,
                    x0: 200.0,
                    x1: 300.0
                },
            ]
        );
    }

    #[test]
    fn thin_spans_merge_into_blocks() {
        // 100 spans of 0.1 ns every 0.2 ns over 20 ns, then a gap, then one more.
        let mut spans: Vec<(f64, f64)> = (0..100)
            .map(|i| (i as f64 * 0.2, i as f64 * 0.2 + 0.1))
            .collect();
        spans.push((500.0, 500.1));
        let row = RowIndex::new(0, spans);
        let mut out = Vec::new();
        row.cull(&axis(0.0, 1.0, 1000.0), 1.0, &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        match out[0] {
            DrawItem::Merged {
                first,
                count,
                x0,
                x1,
                density,
            } => {
                assert_eq!((first, count), (0, 100));
                assert_eq!(x0, 0.0);
                assert_eq!(x1, 20.0); // the last column's block is a full pixel wide
                assert!((density - 0.5).abs() < 1e-3, "{density}"); // 0.1 ns of every 0.2
            }
            other => panic!("expected a block, got {other:?}"),
        }
        assert!(matches!(
            out[1],
            DrawItem::Merged {
                first: 100,
                count: 1,
                ..
            }
        ));
    }

    #[test]
    fn blocks_of_different_density_stay_apart() {
        // 0.9 ns busy per ns for 10 ns, then 0.05 ns per ns for 10 ns.
        let mut spans: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i), f64::from(i) + 0.9))
            .collect();
        spans.extend((10..20).map(|i| (f64::from(i), f64::from(i) + 0.05)));
        let row = RowIndex::new(0, spans);
        let mut out = Vec::new();
        row.cull(&axis(0.0, 1.0, 1000.0), 1.0, &mut out);
        let d: Vec<u8> = out
            .iter()
            .map(|it| match *it {
                DrawItem::Merged { density, .. } => density_level(density),
                DrawItem::Span { .. } => 255,
            })
            .collect();
        assert_eq!(d, vec![density_level(0.9), density_level(0.05)]);
    }

    #[test]
    fn overlapping_wide_spans_stay_bounded_per_column() {
        // Pipelined instructions: 8 ns each, one issued every 0.25 ns, 4000 of them, so 32
        // are in flight at once. At 1 ns per px each is 8 px wide.
        let row = RowIndex::new(
            0,
            (0..4000).map(|i| (f64::from(i) * 0.25, f64::from(i) * 0.25 + 8.0)),
        );
        let mut out = Vec::new();
        row.cull(&axis(0.0, 1.0, 1200.0), 1.0, &mut out);
        assert!(out.len() <= 2 * 1200, "{} items", out.len());
        let mut next = 0;
        for item in &out {
            let (first, count) = match *item {
                DrawItem::Span { index, .. } => (index, 1),
                DrawItem::Merged { first, count, .. } => (first, count),
            };
            assert_eq!(first, next);
            next = first + count;
        }
        assert_eq!(next, 4000);
        // Zoomed in until starts are 2.5 px apart, each span is drawn as itself.
        out.clear();
        row.cull(&axis(100.0, 0.1, 1000.0), 1.0, &mut out);
        assert!(out.iter().all(|it| matches!(it, DrawItem::Span { .. })));
    }

    #[test]
    fn a_million_spans_give_at_most_two_items_per_column() {
        // Dense, irregular spans: some long, most tiny.
        let mut spans = Vec::with_capacity(1_000_000);
        let mut t = 0.0;
        for i in 0..1_000_000u64 {
            let d = if i % 997 == 0 {
                5000.0
            } else {
                1.0 + (i % 7) as f64
            };
            spans.push((t, t + d));
            t += d + (i % 3) as f64;
        }
        let row = RowIndex::new(0, spans);
        let width = 1500.0;
        for a in [
            axis(0.0, t / f64::from(width), width), // everything
            axis(t * 0.4, t / f64::from(width) / 50.0, width), // zoomed 50x
            axis(t * 0.7, 3.0, width),              // a few ns per px
        ] {
            let mut out = Vec::new();
            row.cull(&a, 1.0, &mut out);
            assert!(!out.is_empty());
            assert!(out.len() <= 2 * width as usize + 2, "{} items", out.len());
            let mut per_col = vec![0u32; width as usize + 2];
            for item in &out {
                let (x0, x1) = item.x_range();
                assert!(x1 >= x0);
                let c = x0.max(0.0).floor() as usize;
                per_col[c.min(width as usize + 1)] += 1;
            }
            assert!(
                per_col.iter().all(|&n| n <= 2),
                "max {:?}",
                per_col.iter().max()
            );
            // Items are in order and cover every visible span exactly once.
            let mut next = row.visible(a.t(0.0), a.t(width)).start;
            for item in &out {
                let (first, count) = match *item {
                    DrawItem::Span { index, .. } => (index, 1),
                    DrawItem::Merged { first, count, .. } => (first, count),
                };
                assert_eq!(first, next);
                next = first + count;
            }
            assert_eq!(next, row.visible(a.t(0.0), a.t(width)).end);
        }
    }
}
