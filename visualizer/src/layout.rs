//! Vertical layout: where each trace header, group header and lane goes, given the lanes of
//! each trace, which groups are collapsed and the row sizes.
//!
//! Pure arithmetic with no egui in it, so it is unit-tested directly. y = 0 is the top of the
//! lane area; the painter adds the screen offset and the scroll position.

use std::collections::BTreeSet;

use crate::lanes::Group;
use crate::options::ViewOptions;

/// What the layout needs to know about a lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaneDesc {
    /// Its group.
    pub group: Group,
    /// Rows (nesting depth + 1; at least 1).
    pub rows: usize,
    /// Whether a fusion bracket strip is drawn above it.
    pub bracket: bool,
}

/// One laid-out item.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Item {
    /// The label bar of a whole trace.
    TraceHeader {
        /// Which trace.
        trace: usize,
    },
    /// A group header (click to collapse).
    GroupHeader {
        /// Which trace.
        trace: usize,
        /// Which group.
        group: Group,
        /// Whether it is collapsed.
        collapsed: bool,
    },
    /// A lane.
    Lane {
        /// Which trace.
        trace: usize,
        /// Lane index in that trace's model.
        lane: usize,
        /// Height of the bracket strip at the top, px (0 when none).
        bracket: f32,
        /// Height of one row, px.
        row: f32,
    },
}

/// An item and its vertical place.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Placed {
    /// The item.
    pub item: Item,
    /// Top, px from the top of the lane area.
    pub y: f32,
    /// Height, px.
    pub h: f32,
}

/// The whole vertical layout.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Layout {
    /// Items from top to bottom.
    pub items: Vec<Placed>,
    /// Total height, px.
    pub height: f32,
    /// `lanes[trace][lane]`: the item of that lane, or of its group's header when collapsed.
    lanes: Vec<Vec<usize>>,
}

impl Layout {
    /// Lays out `traces` (the lanes of each trace, in display order).
    pub fn new(
        traces: &[Vec<LaneDesc>],
        collapsed: &BTreeSet<(usize, Group)>,
        opts: &ViewOptions,
    ) -> Layout {
        let mut items = Vec::new();
        let mut lane_items = Vec::new();
        let mut y = 0.0;
        fn push(items: &mut Vec<Placed>, item: Item, h: f32, y: &mut f32) {
            items.push(Placed { item, y: *y, h });
            *y += h;
        }
        for (t, lanes) in traces.iter().enumerate() {
            if traces.len() > 1 || opts.always_show_trace_header {
                push(
                    &mut items,
                    Item::TraceHeader { trace: t },
                    opts.header_height,
                    &mut y,
                );
            }
            let mut current: Option<Group> = None;
            let mut of_lane = Vec::with_capacity(lanes.len());
            for (l, lane) in lanes.iter().enumerate() {
                let is_collapsed = collapsed.contains(&(t, lane.group));
                if current != Some(lane.group) {
                    current = Some(lane.group);
                    push(
                        &mut items,
                        Item::GroupHeader {
                            trace: t,
                            group: lane.group,
                            collapsed: is_collapsed,
                        },
                        opts.header_height,
                        &mut y,
                    );
                }
                if is_collapsed {
                    of_lane.push(items.len() - 1);
                    continue;
                }
                of_lane.push(items.len());
                let bracket = if lane.bracket && opts.show_brackets {
                    opts.bracket_height
                } else {
                    0.0
                };
                let h = bracket + opts.row_height * lane.rows.max(1) as f32 + opts.lane_gap;
                push(
                    &mut items,
                    Item::Lane {
                        trace: t,
                        lane: l,
                        bracket,
                        row: opts.row_height,
                    },
                    h,
                    &mut y,
                );
            }
            lane_items.push(of_lane);
            y += opts.trace_gap;
        }
        Layout {
            items,
            height: y,
            lanes: lane_items,
        }
    }

    /// The item at height `y`, if any.
    pub fn at(&self, y: f32) -> Option<&Placed> {
        let i = self.items.partition_point(|p| p.y + p.h <= y);
        self.items.get(i).filter(|p| p.y <= y)
    }

    /// The items that overlap `[y0, y1]`.
    pub fn visible(&self, y0: f32, y1: f32) -> &[Placed] {
        let lo = self.items.partition_point(|p| p.y + p.h < y0);
        let hi = self.items.partition_point(|p| p.y <= y1);
        &self.items[lo..hi.max(lo)]
    }

    /// Where lane `lane` of trace `trace` is, if it is shown.
    pub fn find_lane(&self, trace: usize, lane: usize) -> Option<&Placed> {
        self.anchor(trace, lane)
            .filter(|p| matches!(p.item, Item::Lane { .. }))
    }

    /// Where lane `lane` of trace `trace` is drawn: the lane, or its group's header when the
    /// group is collapsed.
    pub fn anchor(&self, trace: usize, lane: usize) -> Option<&Placed> {
        let i = *self.lanes.get(trace)?.get(lane)?;
        self.items.get(i)
    }

    /// Where the header of a group is.
    pub fn find_group(&self, trace: usize, group: Group) -> Option<&Placed> {
        self.items.iter().find(
            |p| matches!(p.item, Item::GroupHeader { trace: t, group: g, .. } if t == trace && g == group),
        )
    }
}

/// The row of a lane at a y inside it, or `None` in the bracket strip or the gap.
pub fn row_at(placed: &Placed, y: f32) -> Option<usize> {
    let Item::Lane { bracket, row, .. } = placed.item else {
        return None;
    };
    let dy = y - placed.y - bracket;
    (dy >= 0.0 && row > 0.0).then(|| (dy / row) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ViewOptions {
        ViewOptions {
            row_height: 10.0,
            header_height: 20.0,
            bracket_height: 4.0,
            lane_gap: 2.0,
            trace_gap: 8.0,
            always_show_trace_header: false,
            ..ViewOptions::default()
        }
    }

    fn lanes() -> Vec<LaneDesc> {
        let l = |group, rows, bracket| LaneDesc {
            group,
            rows,
            bracket,
        };
        vec![
            l(Group::Host, 1, false),
            l(Group::Host, 1, false),
            l(Group::Chip(0), 1, true),
            l(Group::Chip(0), 3, false),
            l(Group::Chip(1), 1, false),
        ]
    }

    #[test]
    fn groups_get_headers_and_lanes_stack() {
        let lay = Layout::new(&[lanes()], &BTreeSet::new(), &opts());
        let ys: Vec<(f32, f32)> = lay.items.iter().map(|p| (p.y, p.h)).collect();
        assert_eq!(
            ys,
            vec![
                (0.0, 20.0),   // host header
                (20.0, 12.0),  // lane 0
                (32.0, 12.0),  // lane 1
                (44.0, 20.0),  // chip 0 header
                (64.0, 16.0),  // lane 2: bracket 4 + row 10 + gap 2
                (80.0, 32.0),  // lane 3: three nested rows
                (112.0, 20.0), // chip 1 header
                (132.0, 12.0), // lane 4
            ]
        );
        assert_eq!(lay.height, 152.0);
        assert!(matches!(
            lay.items[3].item,
            Item::GroupHeader {
                group: Group::Chip(0),
                ..
            }
        ));
    }

    #[test]
    fn collapsed_groups_keep_only_their_header() {
        let collapsed = BTreeSet::from([(0, Group::Chip(0))]);
        let lay = Layout::new(&[lanes()], &collapsed, &opts());
        assert_eq!(lay.items.len(), 6);
        assert!(matches!(
            lay.items[3].item,
            Item::GroupHeader {
                group: Group::Chip(0),
                collapsed: true,
                ..
            }
        ));
        assert!(matches!(
            lay.items[4].item,
            Item::GroupHeader {
                group: Group::Chip(1),
                ..
            }
        ));
        assert!(lay.find_lane(0, 3).is_none());
        assert!(lay.find_lane(0, 4).is_some());
        // Flows to a hidden lane end at its group's header.
        assert_eq!(lay.anchor(0, 3).unwrap().y, lay.items[3].y);
    }

    #[test]
    fn two_traces_stack_with_headers() {
        let lay = Layout::new(
            &[lanes(), lanes()],
            &BTreeSet::from([(1, Group::Host)]),
            &opts(),
        );
        let heads: Vec<usize> = lay
            .items
            .iter()
            .filter_map(|p| match p.item {
                Item::TraceHeader { trace } => Some(trace),
                _ => None,
            })
            .collect();
        assert_eq!(heads, [0, 1]);
        // The second trace's host group is collapsed, the first's is not.
        assert!(lay.find_lane(0, 0).is_some() && lay.find_lane(1, 0).is_none());
        let second = lay
            .items
            .iter()
            .position(|p| p.item == Item::TraceHeader { trace: 1 });
        assert_eq!(lay.items[second.unwrap()].y, 20.0 + 144.0 + 8.0);
    }

    #[test]
    fn hit_testing_by_height() {
        let lay = Layout::new(&[lanes()], &BTreeSet::new(), &opts());
        assert!(matches!(
            lay.at(25.0).unwrap().item,
            Item::Lane { lane: 0, .. }
        ));
        assert!(matches!(
            lay.at(44.0).unwrap().item,
            Item::GroupHeader { .. }
        ));
        assert!(lay.at(1000.0).is_none());
        let nested = lay.find_lane(0, 3).unwrap();
        assert_eq!(row_at(nested, 80.0 + 25.0), Some(2));
        let bracketed = lay.find_lane(0, 2).unwrap();
        assert_eq!(row_at(bracketed, 65.0), None);
        assert_eq!(row_at(bracketed, 70.0), Some(0));
        assert_eq!(lay.visible(30.0, 70.0).len(), 4);
    }
}
