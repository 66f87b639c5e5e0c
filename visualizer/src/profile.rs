//! The op profile: time, count, FLOPs and bytes aggregated by name, as XProf's op profile
//! does, for four kinds of rows:
//!
//! - **operators**: host calls (`python`, `aten` and foreign host lanes; not the queue or
//!   dispatch lanes). Total is the call's host time, self is that minus the calls nested in
//!   it. Device time, FLOPs and HBM bytes are those of the kernels the operator caused: a
//!   kernel of a fusion group is shared evenly by the group's operators (the group's `op_ids`
//!   on the queue lane), a kernel outside a group belongs to its `op_id`. A call with no
//!   operator id (a Python-level call) gets the cost of the operators called inside it.
//! - **kernels**: kernel spans by program name; total = self = device time, with the kernels'
//!   `flops` and `hbm_bytes`.
//! - **fusion groups**: kernels by what they fused: the names of the group's operators joined
//!   with ` + ` (a kernel outside any group counts as a group of its one operator, so Strict
//!   and DeferAndFuse runs compare). A row lists its member operators with their counts.
//! - **regions**: `mark.begin` regions on the cores (a compiled program's parts), with self
//!   time as for operators.
//!
//! Achieved FLOP/s and HBM bandwidth divide by device time; the peaks are the trace's
//! per-chip `peak_bf16_flops` and `hbm_bytes_per_s` (a kernel runs on one chip).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tpuemu_isa::trace::Span;

use crate::lanes::LaneKind;
use crate::model::{TraceModel, arg_number};

/// Spans closer than this are taken to touch, not nest (as in the model).
const TOUCH_NS: f64 = 1e-3;

/// What the rows of a profile aggregate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProfileKind {
    /// Host operator calls.
    Operator,
    /// Device kernels.
    Kernel,
    /// Fusion groups, by their operators.
    Group,
    /// Profiling regions on the cores.
    Region,
}

impl ProfileKind {
    /// All kinds, in tab order.
    pub const ALL: [ProfileKind; 4] = [
        ProfileKind::Operator,
        ProfileKind::Kernel,
        ProfileKind::Group,
        ProfileKind::Region,
    ];

    /// Tab label.
    pub fn label(self) -> &'static str {
        match self {
            ProfileKind::Operator => "Operators",
            ProfileKind::Kernel => "Kernels",
            ProfileKind::Group => "Fusion groups",
            ProfileKind::Region => "Regions",
        }
    }
}

/// One row: everything with one name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    /// The name (operator, kernel, or a group's operators joined with ` + `).
    pub name: String,
    /// Calls, kernels or group instances.
    pub count: usize,
    /// Total time, ns (host time for operators, device time otherwise).
    pub total_ns: f64,
    /// Total minus nested calls, ns.
    pub self_ns: f64,
    /// Device time, ns (for operators: of the kernels they caused).
    pub device_ns: f64,
    /// FLOPs done.
    pub flops: f64,
    /// HBM bytes moved.
    pub bytes: f64,
    /// Spans to light up when the row is selected (sorted span indices).
    pub spans: Vec<usize>,
    /// For fusion groups: the member operators and how often each occurs.
    pub members: Vec<(String, usize)>,
}

impl Row {
    /// Achieved FLOP/s over the device time (0 without device time).
    pub fn flops_per_s(&self) -> f64 {
        per_s(self.flops, self.device_ns)
    }

    /// Achieved HBM bytes per second over the device time.
    pub fn bytes_per_s(&self) -> f64 {
        per_s(self.bytes, self.device_ns)
    }
}

fn per_s(x: f64, ns: f64) -> f64 {
    if ns > 0.0 { x / (ns * 1e-9) } else { 0.0 }
}

/// The rows of one kind for one trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    /// Rows, by decreasing device time (then total time, then name).
    pub rows: Vec<Row>,
    /// Peak bf16 FLOP/s of one chip (0: unknown).
    pub peak_flops: f64,
    /// Peak HBM bytes per second of one chip (0: unknown).
    pub peak_bytes_per_s: f64,
}

impl Profile {
    /// The row named `name`.
    pub fn row(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// Share of the peak FLOP/s a row achieved, when the peak is known.
    pub fn flops_util(&self, r: &Row) -> Option<f64> {
        (self.peak_flops > 0.0).then(|| r.flops_per_s() / self.peak_flops)
    }

    /// Share of the peak HBM bandwidth a row achieved, when the peak is known.
    pub fn bytes_util(&self, r: &Row) -> Option<f64> {
        (self.peak_bytes_per_s > 0.0).then(|| r.bytes_per_s() / self.peak_bytes_per_s)
    }
}

/// Device cost attributed to something: time, FLOPs, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Cost {
    ns: f64,
    flops: f64,
    bytes: f64,
}

impl Cost {
    fn of(s: &Span) -> Cost {
        Cost {
            ns: s.duration_ns(),
            flops: arg_number(s, "flops"),
            bytes: arg_number(s, "hbm_bytes"),
        }
    }

    fn add(&mut self, c: Cost, share: f64) {
        self.ns += c.ns * share;
        self.flops += c.flops * share;
        self.bytes += c.bytes * share;
    }
}

/// Builds the profile of one kind.
pub fn profile(model: &TraceModel, kind: ProfileKind) -> Profile {
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    match kind {
        ProfileKind::Operator => operators(model, &mut rows),
        ProfileKind::Kernel => {
            for i in kernel_spans(model) {
                let s = &model.spans[i];
                let r = rows.entry(s.name.clone()).or_default();
                add_cost(r, Cost::of(s), i);
            }
        }
        ProfileKind::Group => groups(model, &mut rows),
        ProfileKind::Region => {
            nested_rows(model, &mut rows, |k| k == LaneKind::Region, |_, _| None);
        }
    }
    let mut rows: Vec<Row> = rows
        .into_iter()
        .map(|(name, mut r)| {
            r.name = name;
            r.spans.sort_unstable();
            r.spans.dedup();
            r
        })
        .collect();
    rows.sort_by(|a, b| {
        b.device_ns
            .total_cmp(&a.device_ns)
            .then(b.total_ns.total_cmp(&a.total_ns))
            .then(a.name.cmp(&b.name))
    });
    Profile {
        rows,
        peak_flops: model.meta.peak_bf16_flops.max(0.0),
        peak_bytes_per_s: model.meta.hbm_bytes_per_s.max(0.0),
    }
}

fn add_cost(r: &mut Row, c: Cost, span: usize) {
    r.count += 1;
    r.total_ns += c.ns;
    r.self_ns += c.ns;
    r.device_ns += c.ns;
    r.flops += c.flops;
    r.bytes += c.bytes;
    r.spans.push(span);
}

/// Indices of every kernel span.
fn kernel_spans(model: &TraceModel) -> impl Iterator<Item = usize> + '_ {
    model
        .lanes
        .iter()
        .filter(|l| l.kind == LaneKind::Kernel)
        .flat_map(|l| l.spans.clone())
}

/// Whether host spans of this lane kind are operator calls.
fn is_call_lane(k: LaneKind) -> bool {
    matches!(
        k,
        LaneKind::HostPython | LaneKind::HostOps | LaneKind::HostOther
    )
}

fn operators(model: &TraceModel, rows: &mut BTreeMap<String, Row>) {
    // Device cost per operator id, and the kernels each operator caused.
    let mut cost: HashMap<u64, Cost> = HashMap::new();
    let mut kernels: HashMap<u64, Vec<usize>> = HashMap::new();
    for i in kernel_spans(model) {
        let s = &model.spans[i];
        let c = Cost::of(s);
        let members = s.group_id.and_then(|g| model.group_ops.get(&g));
        match (members, s.op_id) {
            (Some(ops), _) if !ops.is_empty() => {
                let share = 1.0 / ops.len() as f64;
                for op in ops {
                    cost.entry(*op).or_default().add(c, share);
                    kernels.entry(*op).or_default().push(i);
                }
            }
            (_, Some(op)) => {
                cost.entry(op).or_default().add(c, 1.0);
                kernels.entry(op).or_default().push(i);
            }
            _ => {}
        }
    }
    nested_rows(model, rows, is_call_lane, |i, s| {
        let ops = match s.op_id {
            Some(op) => BTreeSet::from([op]),
            // A Python-level call: the operators it called.
            None => model.ops_within(i),
        };
        let mut c = Cost::default();
        let mut ks = Vec::new();
        for op in &ops {
            if let Some(x) = cost.get(op) {
                c.add(*x, 1.0);
            }
            ks.extend(kernels.get(op).into_iter().flatten());
        }
        (!ks.is_empty()).then_some((c, ks))
    });
}

/// Rows of spans that nest (host calls, regions): total, self (minus direct children) and
/// count per name; `device` gives a span's device cost and kernels (operators only).
fn nested_rows(
    model: &TraceModel,
    rows: &mut BTreeMap<String, Row>,
    lane_kind: impl Fn(LaneKind) -> bool,
    device: impl Fn(usize, &Span) -> Option<(Cost, Vec<usize>)>,
) {
    for lane in model.lanes.iter().filter(|l| lane_kind(l.kind)) {
        let mut idx: Vec<usize> = lane.spans.clone().collect();
        idx.sort_by(|&a, &b| {
            let (x, y) = (&model.spans[a], &model.spans[b]);
            x.start_ns
                .total_cmp(&y.start_ns)
                .then(y.end_ns.total_cmp(&x.end_ns))
                .then(a.cmp(&b))
        });
        // Self time: each span's duration minus its direct children's.
        let mut self_ns: HashMap<usize, f64> = HashMap::new();
        let mut open: Vec<usize> = Vec::new();
        for &i in &idx {
            let s = &model.spans[i];
            let tolerance = TOUCH_NS + s.start_ns.abs() * 1e-12;
            while open
                .last()
                .is_some_and(|&p| model.spans[p].end_ns <= s.start_ns + tolerance)
            {
                open.pop();
            }
            if let Some(&parent) = open.last() {
                *self_ns
                    .entry(parent)
                    .or_insert(model.spans[parent].duration_ns()) -=
                    s.duration_ns().min(model.spans[parent].duration_ns());
            }
            open.push(i);
        }
        for &i in &idx {
            let s = &model.spans[i];
            let r = rows.entry(s.name.clone()).or_default();
            r.count += 1;
            r.total_ns += s.duration_ns();
            r.self_ns += self_ns.get(&i).copied().unwrap_or(s.duration_ns()).max(0.0);
            r.spans.push(i);
            if let Some((c, ks)) = device(i, s) {
                r.device_ns += c.ns;
                r.flops += c.flops;
                r.bytes += c.bytes;
                r.spans.extend(ks);
            }
        }
    }
}

/// A fusion group's operator names, in the order the queue lists them.
pub fn group_members(model: &TraceModel) -> HashMap<u64, Vec<String>> {
    let mut out: HashMap<u64, Vec<String>> = HashMap::new();
    for lane in model.lanes.iter().filter(|l| l.kind == LaneKind::HostQueue) {
        for s in &model.spans[lane.spans.clone()] {
            let Some(g) = s.group_id else { continue };
            if let Some(ops) = s.args.get("ops").and_then(|v| v.as_array()) {
                out.insert(
                    g,
                    ops.iter()
                        .filter_map(|o| o.as_str().map(str::to_string))
                        .collect(),
                );
            }
        }
    }
    // Groups the queue did not name: their operators' names by id.
    for (g, ops) in &model.group_ops {
        out.entry(*g).or_insert_with(|| {
            ops.iter()
                .filter_map(|op| model.host_ops.get(op)?.first())
                .map(|&i| model.spans[i].name.clone())
                .collect()
        });
    }
    out
}

/// The operator a kernel outside any group belongs to: its `op_id`'s host call, or the
/// `source_op` it names, or its own name.
fn lone_op(model: &TraceModel, s: &Span) -> String {
    s.op_id
        .and_then(|op| model.host_ops.get(&op)?.first())
        .map(|&i| model.spans[i].name.clone())
        .or_else(|| {
            s.args
                .get("source_op")
                .and_then(|v| v.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| s.name.clone())
}

fn groups(model: &TraceModel, rows: &mut BTreeMap<String, Row>) {
    let members = group_members(model);
    // Instances: a group id, or a lone kernel.
    let mut seen: HashMap<u64, String> = HashMap::new();
    for i in kernel_spans(model) {
        let s = &model.spans[i];
        let grouped = s
            .group_id
            .and_then(|g| Some((g, members.get(&g).filter(|m| !m.is_empty())?)));
        let (name, new_instance, ops) = match grouped {
            Some((g, ops)) => {
                let new = !seen.contains_key(&g);
                let name = seen.entry(g).or_insert_with(|| ops.join(" + ")).clone();
                (name, new, ops.clone())
            }
            None => {
                let op = lone_op(model, s);
                (op.clone(), true, vec![op])
            }
        };
        let r = rows.entry(name).or_default();
        let c = Cost::of(s);
        r.total_ns += c.ns;
        r.self_ns += c.ns;
        r.device_ns += c.ns;
        r.flops += c.flops;
        r.bytes += c.bytes;
        r.spans.push(i);
        if new_instance {
            r.count += 1;
            for op in ops {
                match r.members.iter_mut().find(|(n, _)| *n == op) {
                    Some((_, k)) => *k += 1,
                    None => r.members.push((op, 1)),
                }
            }
            // The group's operators on the host light up with it.
            let ids = s.group_id.and_then(|g| model.group_ops.get(&g));
            for op in ids.into_iter().flatten().chain(s.op_id.as_ref()) {
                r.spans
                    .extend(model.host_ops.get(op).into_iter().flatten().copied());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tpuemu_isa::trace::{Trace, TraceEvent, TraceMeta, Track};

    fn host(lane: &str, name: &str, s: f64, e: f64, op: Option<u64>) -> TraceEvent {
        let mut x = Span::new(Track::Host { lane: lane.into() }, name, s, e);
        x.op_id = op;
        TraceEvent::Span(x)
    }

    fn kernel(name: &str, s: f64, e: f64, op: u64, group: Option<u64>, flops: f64) -> TraceEvent {
        let mut k = Span::new(Track::Kernel { chip: 0, core: 0 }, name, s, e);
        k.op_id = Some(op);
        k.group_id = group;
        k.args.insert("flops".into(), json!(flops));
        k.args.insert("hbm_bytes".into(), json!(1000));
        TraceEvent::Span(k)
    }

    /// Host: a Python call [0, 100) around linear [0, 100), which calls mm [10, 40) (op 2) and
    /// add [50, 60) (op 3); a second mm
    /// [200, 220) (op 4). Queue: group 9 fused ops 2 and 3. Kernels: the group's kernel
    /// [300, 400) 1e6 FLOPs, and op 4's kernel [400, 450) 2e6 FLOPs.
    fn model() -> TraceModel {
        let mut q = Span::new(
            Track::Host {
                lane: "queue".into(),
            },
            "fused group 9",
            100.0,
            110.0,
        );
        q.group_id = Some(9);
        q.args.insert("op_ids".into(), json!([2, 3]));
        q.args
            .insert("ops".into(), json!(["aten::mm", "aten::add"]));
        let events = vec![
            host("python", "Linear.forward", 0.0, 100.0, None),
            host("aten", "aten::linear", 0.0, 100.0, Some(1)),
            host("aten", "aten::mm", 10.0, 40.0, Some(2)),
            host("aten", "aten::add", 50.0, 60.0, Some(3)),
            host("aten", "aten::mm", 200.0, 220.0, Some(4)),
            TraceEvent::Span(q),
            kernel("fused[mm+add]", 300.0, 400.0, 2, Some(9), 1e6),
            kernel("mm", 400.0, 450.0, 4, None, 2e6),
        ];
        let meta = TraceMeta {
            peak_bf16_flops: 1e15,
            hbm_bytes_per_s: 1e12,
            ..TraceMeta::default()
        };
        TraceModel::new(Trace { meta, events }, "t")
    }

    #[test]
    fn operators_have_self_time_and_shared_device_cost() {
        let m = model();
        let p = profile(&m, ProfileKind::Operator);
        let linear = p.row("aten::linear").unwrap();
        assert_eq!((linear.count, linear.total_ns), (1, 100.0));
        assert_eq!(linear.self_ns, 100.0 - 30.0 - 10.0);
        assert_eq!(linear.device_ns, 0.0);
        let mm = p.row("aten::mm").unwrap();
        assert_eq!((mm.count, mm.total_ns, mm.self_ns), (2, 50.0, 50.0));
        // Half of the fused kernel (100 ns, 1e6 FLOPs) and all of its own (50 ns, 2e6).
        assert_eq!(mm.device_ns, 50.0 + 50.0);
        assert_eq!(mm.flops, 0.5e6 + 2e6);
        assert_eq!(mm.bytes, 500.0 + 1000.0);
        let add = p.row("aten::add").unwrap();
        assert_eq!((add.device_ns, add.flops), (50.0, 0.5e6));
        // 2.5e6 FLOP in 100 ns = 2.5e13 FLOP/s, 2.5 % of 1e15.
        assert!((p.flops_util(mm).unwrap() - 0.025).abs() < 1e-12);
        // Sorted by device time: the two 50/100 ns rows before linear.
        assert_eq!(p.rows.last().unwrap().name, "aten::linear");
        // Selecting mm lights its calls and both kernels.
        assert_eq!(mm.spans.len(), 4);
        // The Python call holds linear, mm and add: the fused kernel's two halves.
        let py = p.row("Linear.forward").unwrap();
        assert_eq!((py.total_ns, py.device_ns, py.flops), (100.0, 100.0, 1e6));
        assert_eq!(m.ops_within(py.spans[0]), BTreeSet::from([1, 2, 3]));
    }

    #[test]
    fn kernels_and_groups() {
        let m = model();
        let k = profile(&m, ProfileKind::Kernel);
        assert_eq!(k.rows.len(), 2);
        assert_eq!(k.rows[0].name, "fused[mm+add]");
        assert_eq!(k.rows[0].device_ns, 100.0);
        let g = profile(&m, ProfileKind::Group);
        let fused = g.row("aten::mm + aten::add").unwrap();
        assert_eq!(fused.count, 1);
        assert_eq!(
            fused.members,
            vec![("aten::mm".to_string(), 1), ("aten::add".to_string(), 1)]
        );
        // Its kernel and the two operators it fused.
        assert_eq!(fused.spans.len(), 3);
        // A kernel outside a group is a group of its operator.
        let lone = g.row("aten::mm").unwrap();
        assert_eq!((lone.count, lone.device_ns, lone.flops), (1, 50.0, 2e6));
        assert_eq!(lone.members, vec![("aten::mm".to_string(), 1)]);
    }

    #[test]
    fn regions_nest() {
        let r = Track::Marker { chip: 0, core: 0 };
        let t = Trace {
            meta: TraceMeta::default(),
            events: vec![
                TraceEvent::Span(Span::new(r.clone(), "outer", 0.0, 10.0)),
                TraceEvent::Span(Span::new(r.clone(), "inner", 2.0, 5.0)),
                TraceEvent::Span(Span::new(r, "outer", 20.0, 30.0)),
            ],
        };
        let p = profile(&TraceModel::new(t, "t"), ProfileKind::Region);
        let outer = p.row("outer").unwrap();
        assert_eq!(
            (outer.count, outer.total_ns, outer.self_ns),
            (2, 20.0, 17.0)
        );
        assert_eq!(p.flops_util(outer), None);
    }
}
