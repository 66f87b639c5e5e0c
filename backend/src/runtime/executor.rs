//! The executors: what happens to the nodes an operator produces, one type per mode.
//!
//! | executor | an operator's node | an outermost operator ends | a flush |
//! |---|---|---|---|
//! | [`Strict`] | lowered and launched at once, asynchronously | — | — |
//! | [`Debug`] | launched, and the launch waited for (the queue is blocking) | — | — |
//! | [`DeferAndFuse`] | recorded | counted; at the size limit the graph runs (`size limit`), but for lone products among its latest operators, which stay recorded | the graph is fused and run |
//! | [`Capture`] | recorded for whole-graph compilation | — | refused: a compiled graph cannot read values |
//!
//! The runtime holds one executor at a time ([`super::State::exec`]); starting a capture sets
//! the current one aside until the capture ends.

use super::config::{HostCosts, Mode};
use super::{Core, Runtime};
use crate::error::{Result, TpuError};
use crate::ir::Node;

/// What the runtime does with the work operators produce.
pub(crate) trait Executor: Send {
    /// The eager mode this executor implements (`None` while capturing a graph).
    fn mode(&self) -> Option<Mode>;

    /// Host time an operator call costs.
    fn dispatch_cost(&self, costs: &HostCosts) -> f64 {
        costs.op_dispatch_ns
    }

    /// What an operator call's host time is spent on (`Metrics::host_ns_by`).
    fn dispatch_kind(&self) -> &'static str {
        "dispatch"
    }

    /// Takes one node of the operator being called.
    fn submit(&mut self, rt: &Runtime, core: &mut Core, node: Node) -> Result<()>;

    /// An outermost operator call ended.
    fn op_done(&mut self, _rt: &Runtime, _core: &mut Core) -> Result<()> {
        Ok(())
    }

    /// Runs whatever was held back, for `reason`.
    fn flush(&mut self, _rt: &Runtime, _core: &mut Core, _reason: &str) -> Result<()> {
        Ok(())
    }

    /// Whether a flush would run recorded work (and free what only that work holds).
    fn holds_work(&self) -> bool {
        false
    }

    /// Whether work held back reads or writes storage `id`.
    fn holds(&self, _id: u64) -> bool {
        false
    }

    /// Changes the operator count at which a deferring executor runs its graph.
    fn set_limit(&mut self, _max_ops: usize) {}

    /// The recorded graph, taken (a capture's result).
    fn take_nodes(&mut self) -> Vec<Node> {
        Vec::new()
    }
}

/// The executor for `mode`.
pub(crate) fn for_mode(mode: Mode, max_pending_ops: usize) -> Box<dyn Executor> {
    match mode {
        Mode::Strict => Box::new(Strict),
        Mode::Debug => Box::new(Debug),
        Mode::DeferAndFuse => Box::new(DeferAndFuse::new(max_pending_ops)),
    }
}

/// Each operator launches its kernels as it is called.
pub(crate) struct Strict;

impl Executor for Strict {
    fn mode(&self) -> Option<Mode> {
        Some(Mode::Strict)
    }

    fn submit(&mut self, rt: &Runtime, core: &mut Core, node: Node) -> Result<()> {
        rt.execute(core, &node, None)
    }
}

/// Shapes only ([`Runtime::shapes`]): an operator's nodes are dropped, so an operator computes
/// its outputs' shapes, dtypes and strides from its inputs' metadata — PyTorch's meta device —
/// and nothing is lowered, launched or timed.
///
/// [`Runtime::shapes`]: super::Runtime::shapes
pub(crate) struct Shapes;

impl Executor for Shapes {
    fn mode(&self) -> Option<Mode> {
        Some(Mode::Strict)
    }

    fn submit(&mut self, _rt: &Runtime, _core: &mut Core, _node: Node) -> Result<()> {
        Ok(())
    }
}

/// Each operator waits for its kernels: the runtime's queue is blocking while this executor
/// is current.
pub(crate) struct Debug;

impl Executor for Debug {
    fn mode(&self) -> Option<Mode> {
        Some(Mode::Debug)
    }

    fn submit(&mut self, rt: &Runtime, core: &mut Core, node: Node) -> Result<()> {
        rt.execute(core, &node, None)
    }
}

/// Whether a node of `nodes` reads or writes storage `id`.
fn touches(nodes: &[Node], id: u64) -> bool {
    nodes.iter().any(|n| {
        n.inputs
            .iter()
            .chain(&n.outputs)
            .any(|v| v.storage.id() == id)
    })
}

/// Operators are recorded and run, fused, at a synchronisation point or at the size limit.
pub(crate) struct DeferAndFuse {
    pending: Vec<Node>,
    /// Outermost operators recorded since the last flush.
    ops: usize,
    max_ops: usize,
}

impl DeferAndFuse {
    pub fn new(max_ops: usize) -> Self {
        DeferAndFuse {
            pending: Vec::new(),
            ops: 0,
            max_ops,
        }
    }
}

impl Executor for DeferAndFuse {
    fn mode(&self) -> Option<Mode> {
        Some(Mode::DeferAndFuse)
    }

    fn dispatch_cost(&self, costs: &HostCosts) -> f64 {
        costs.record_ns
    }

    fn dispatch_kind(&self) -> &'static str {
        "record"
    }

    fn submit(&mut self, _rt: &Runtime, _core: &mut Core, node: Node) -> Result<()> {
        self.pending.push(node);
        Ok(())
    }

    fn set_limit(&mut self, max_ops: usize) {
        self.max_ops = max_ops;
    }

    fn holds(&self, id: u64) -> bool {
        touches(&self.pending, id)
    }

    fn op_done(&mut self, rt: &Runtime, core: &mut Core) -> Result<()> {
        self.ops += 1;
        if self.ops >= self.max_ops {
            // Lone products among the latest eighth of the operators stay open for the next ones.
            self.run(rt, core, "size limit", self.max_ops / 8)?;
        }
        Ok(())
    }

    fn flush(&mut self, rt: &Runtime, core: &mut Core, reason: &str) -> Result<()> {
        self.run(rt, core, reason, 0)
    }

    fn holds_work(&self) -> bool {
        !self.pending.is_empty()
    }
}

impl DeferAndFuse {
    /// Runs what is recorded, but for the groups holding one of the `recent` latest operators
    /// (see [`super::flush::run_graph`]), which stay recorded.
    fn run(&mut self, rt: &Runtime, core: &mut Core, reason: &str, recent: usize) -> Result<()> {
        let ops = std::mem::take(&mut self.ops);
        if self.pending.is_empty() {
            return Ok(());
        }
        // The next recording starts with this one's room (no regrowth per operator).
        let room = self.pending.capacity();
        let nodes = std::mem::replace(&mut self.pending, Vec::with_capacity(room));
        *core
            .q
            .metrics
            .flushes
            .entry(reason.to_string())
            .or_default() += 1;
        let open = super::flush::run_graph(rt, core, nodes, ops, reason, recent)?;
        let mut ids: Vec<u64> = open.iter().map(|n| n.op.id).collect();
        ids.sort_unstable();
        ids.dedup();
        self.ops = ids.len();
        self.pending = open;
        Ok(())
    }
}

/// Records a graph for whole-graph compilation.
pub(crate) struct Capture {
    nodes: Vec<Node>,
    /// The mode the captured operators are charged as.
    charged_as: Option<Mode>,
}

impl Capture {
    pub fn new(charged_as: Option<Mode>) -> Self {
        Capture {
            nodes: Vec::new(),
            charged_as,
        }
    }
}

impl Executor for Capture {
    fn mode(&self) -> Option<Mode> {
        None
    }

    fn dispatch_cost(&self, costs: &HostCosts) -> f64 {
        match self.charged_as {
            Some(Mode::DeferAndFuse) => costs.record_ns,
            _ => costs.op_dispatch_ns,
        }
    }

    fn submit(&mut self, _rt: &Runtime, _core: &mut Core, node: Node) -> Result<()> {
        self.nodes.push(node);
        Ok(())
    }

    fn flush(&mut self, _rt: &Runtime, _core: &mut Core, reason: &str) -> Result<()> {
        Err(TpuError::Unsupported(format!(
            "{reason} inside a compiled function: compiled graphs cannot read tensor values or synchronise; return the tensor instead"
        )))
    }

    fn take_nodes(&mut self) -> Vec<Node> {
        std::mem::take(&mut self.nodes)
    }

    fn holds(&self, id: u64) -> bool {
        touches(&self.nodes, id)
    }
}
