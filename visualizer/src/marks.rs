//! Marked spans: what a search or a selected profile row lights up, and stepping through them
//! in time order (Enter / Shift+Enter).
//!
//! Search is a case-insensitive substring match on span names (ASCII case folding without
//! allocating, so a million names take a few tens of ms; a query with other letters folds
//! with Unicode rules). Marks are kept per trace as sorted span indices, so "is this span
//! marked" and "does this merged block hold a mark" are binary searches.

use std::ops::Range;

use crate::model::TraceModel;

/// Spans lit up in each trace, and a cursor for stepping through them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Marks {
    /// What made them (the query, or the profile row's name).
    pub what: String,
    /// Per trace: marked span indices, sorted.
    pub spans: Vec<Vec<usize>>,
    /// Every mark by start time on the shared axis: (time, trace, span).
    order: Vec<(f64, usize, usize)>,
    /// Index in `order` of the mark last stepped to.
    pub current: Option<usize>,
}

impl Marks {
    /// Marks `spans` (per trace, any order); `offsets` place each trace on the shared axis.
    pub fn new(
        what: &str,
        mut spans: Vec<Vec<usize>>,
        traces: &[TraceModel],
        offsets: &[f64],
    ) -> Marks {
        let mut order = Vec::new();
        for (t, list) in spans.iter_mut().enumerate() {
            list.sort_unstable();
            list.dedup();
            let off = offsets.get(t).copied().unwrap_or(0.0);
            if let Some(model) = traces.get(t) {
                list.retain(|&i| i < model.spans.len());
                order.extend(list.iter().map(|&i| (model.spans[i].start_ns + off, t, i)));
            }
        }
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        Marks {
            what: what.to_string(),
            spans,
            order,
            current: None,
        }
    }

    /// Number of marked spans.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing is marked.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Whether span `span` of trace `trace` is marked.
    pub fn contains(&self, trace: usize, span: usize) -> bool {
        self.spans
            .get(trace)
            .is_some_and(|l| l.binary_search(&span).is_ok())
    }

    /// Whether any span in `r` of trace `trace` is marked.
    pub fn any_in(&self, trace: usize, r: Range<usize>) -> bool {
        self.spans.get(trace).is_some_and(|l| {
            let i = l.partition_point(|&x| x < r.start);
            l.get(i).is_some_and(|&x| x < r.end)
        })
    }

    /// Steps to the next mark (or the previous one, `forward` false) from the current one,
    /// or, with none current, the first that starts after `t` (the last before it). Wraps
    /// around. Returns (trace, span).
    pub fn step(&mut self, t: f64, forward: bool) -> Option<(usize, usize)> {
        if self.order.is_empty() {
            return None;
        }
        let n = self.order.len();
        let i = match (self.current, forward) {
            (Some(c), true) => (c + 1) % n,
            (Some(c), false) => (c + n - 1) % n,
            (None, true) => self.order.partition_point(|m| m.0 < t) % n,
            (None, false) => (self.order.partition_point(|m| m.0 <= t) + n - 1) % n,
        };
        self.current = Some(i);
        let (_, tr, s) = self.order[i];
        Some((tr, s))
    }
}

/// Spans of each trace whose name contains `query`, ignoring case (empty query: none).
pub fn search(traces: &[TraceModel], query: &str) -> Vec<Vec<usize>> {
    let q = query.trim();
    if q.is_empty() {
        return vec![Vec::new(); traces.len()];
    }
    let ascii = q.is_ascii();
    let folded = q.to_lowercase();
    traces
        .iter()
        .map(|m| {
            m.spans
                .iter()
                .enumerate()
                .filter(|(_, s)| {
                    if ascii {
                        contains_ascii_ci(s.name.as_bytes(), q.as_bytes())
                    } else {
                        s.name.to_lowercase().contains(&folded)
                    }
                })
                .map(|(i, _)| i)
                .collect()
        })
        .collect()
}

/// Whether `hay` contains `needle`, ASCII letters compared without case.
fn contains_ascii_ci(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuemu_isa::trace::{Span, Trace, TraceEvent, TraceMeta, Track};

    fn model(names: &[(&str, f64)]) -> TraceModel {
        let events = names
            .iter()
            .map(|(n, t)| {
                TraceEvent::Span(Span::new(
                    Track::Host {
                        lane: "aten".into(),
                    },
                    *n,
                    *t,
                    *t + 1.0,
                ))
            })
            .collect();
        TraceModel::new(
            Trace {
                meta: TraceMeta::default(),
                events,
            },
            "t",
        )
    }

    #[test]
    fn search_ignores_case_and_finds_substrings() {
        let m = model(&[
            ("aten::MM", 0.0),
            ("aten::add", 2.0),
            ("mm", 4.0),
            ("Größe", 6.0),
        ]);
        let hits = search(std::slice::from_ref(&m), "mm");
        let names: Vec<&str> = hits[0].iter().map(|&i| m.spans[i].name.as_str()).collect();
        assert_eq!(names, ["aten::MM", "mm"]);
        assert_eq!(search(std::slice::from_ref(&m), "GRÖ")[0].len(), 1);
        assert!(search(std::slice::from_ref(&m), "  ")[0].is_empty());
        assert!(search(std::slice::from_ref(&m), "zzz")[0].is_empty());
    }

    #[test]
    fn stepping_goes_in_time_order_across_traces_and_wraps() {
        let a = model(&[("x", 10.0), ("x", 30.0)]);
        let b = model(&[("x", 0.0)]);
        let traces = vec![a, b];
        // Trace b is shifted to start at 20 on the shared axis.
        let hits = search(&traces, "x");
        let mut marks = Marks::new("x", hits, &traces, &[0.0, 20.0]);
        assert_eq!(marks.len(), 3);
        let span_at = |tr: usize, t: f64| {
            traces[tr]
                .spans
                .iter()
                .position(|s| s.start_ns == t)
                .unwrap()
        };
        assert_eq!(marks.step(15.0, true), Some((1, span_at(1, 0.0))));
        assert_eq!(marks.step(0.0, true), Some((0, span_at(0, 30.0))));
        assert_eq!(marks.step(0.0, true), Some((0, span_at(0, 10.0)))); // wrapped
        assert_eq!(marks.step(0.0, false), Some((0, span_at(0, 30.0))));
        marks.current = None;
        assert_eq!(marks.step(15.0, false), Some((0, span_at(0, 10.0))));
        assert!(marks.contains(0, span_at(0, 30.0)));
        assert!(marks.any_in(1, 0..1) && !marks.any_in(1, 1..5));
        assert_eq!(Marks::default().step(0.0, true), None);
    }
}
