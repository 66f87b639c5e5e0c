//! Whole-graph compilation: `torch.compile(backend="tpu")` for Rust functions over tensors.
//!
//! [`compile`] wraps a function; the first call with a given input signature (shapes, strides,
//! offsets, dtypes) records the graph the function builds, fuses it exactly as DeferAndFuse does,
//! plans memory — every intermediate lives in one arena buffer, at an offset reused once its
//! lifetime ends — and links the fused kernels into one program ([`link`]; a graph binding more
//! buffers than one program takes, 64, is linked into several, split in kernel order). Each
//! call then binds its inputs and launches its program(s): one host dispatch for the whole
//! graph, and no gaps between kernels on the device. A new signature compiles again, and the runtime's
//! metrics say why (`graph_compiles`).

pub mod plan;
mod slots;

use crate::ir::Shapes;
use std::collections::HashMap;
use std::sync::Arc;

use tpuemu_isa::{CoreRef, KernelArg, Launch, LaunchTarget, ProgramId};

use crate::codegen::link::{self, Pending};
use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::fusion::{FusedGroup, plan_groups};
use crate::ir::{NodeKind, OpTag};
use crate::layout::Layout;
use crate::ops::helpers::OpScope;
use crate::runtime::checks::Check;
use crate::runtime::exec::ArgSpec;
use crate::runtime::{Compiled, Mode, Runtime};
use crate::storage::StorageRef;
use crate::tensor::Tensor;
use slots::Storages;

/// What binds to a buffer slot of a compiled graph at each call.
#[derive(Clone)]
enum Slot {
    /// The storage of input `i`.
    Input(usize),
    /// A storage the function captured (weights); written in place if the graph updates it.
    Fixed(StorageRef),
    /// A fresh storage per call for output storage `j`.
    Output(usize),
    /// The arena of intermediates (persistent).
    Arena,
}

/// One launch of a compiled graph.
struct Step {
    program: ProgramId,
    /// Argument `i`: whole-graph slot (buffers) or a scalar.
    args: Vec<Bound>,
}

#[derive(Clone, Copy)]
enum Bound {
    Slot(usize),
    Scalar(u32),
}

/// Where a returned tensor's storage comes from at each call.
#[derive(Clone)]
enum Returned {
    /// A fresh output storage.
    Output(usize),
    /// An input's storage (the function returned an input or a view of one).
    Input(usize),
    /// A captured storage (a weight, or a view of one).
    Fixed(StorageRef),
}

/// A compiled graph for one input signature.
struct Executable {
    slots: Vec<Slot>,
    steps: Vec<Step>,
    /// Output storages: bytes.
    out_storages: Vec<u64>,
    /// Returned tensors: their storage, layout, dtype.
    results: Vec<(Returned, Layout, DType)>,
    arena: Option<StorageRef>,
    kernels: usize,
    /// The graph's device-side checks, each flag an output storage (see [`GraphCheck`]).
    checks: Vec<GraphCheck>,
    /// The slots a call writes whole: what a broken check fails.
    written: Vec<usize>,
    /// The graph's random draws: each call after the first (which draws what the capture
    /// reserved) reserves their counters again and writes them into the draw's storage.
    draws: Vec<crate::runtime::CapturedDraw>,
}

/// A device-side check inside a compiled graph (an index, a divisor, an int64 result; see
/// `runtime::checks`): its flag is an output storage of every call, and each call registers
/// the check on what it wrote, raised by the first read of a failing result as in eager mode.
struct GraphCheck {
    /// Output storage of the flag.
    flag: usize,
    ok: i32,
    error: Arc<dyn Fn(i32) -> TpuError + Send + Sync>,
}

/// The input signature a compiled graph is specialised to.
type Signature = Vec<(Vec<usize>, Vec<isize>, usize, DType)>;

fn signature(inputs: &[Tensor]) -> Signature {
    inputs
        .iter()
        .map(|t| {
            (
                t.shape().to_vec(),
                t.strides().to_vec(),
                t.storage_offset(),
                t.dtype(),
            )
        })
        .collect()
}

/// Why a new signature differs from the last one.
fn why(old: Option<&Signature>, new: &Signature) -> String {
    let Some(old) = old else {
        return "first call".into();
    };
    if old.len() != new.len() {
        return format!("{} inputs instead of {}", new.len(), old.len());
    }
    for (i, (a, b)) in old.iter().zip(new).enumerate() {
        if a.0 != b.0 {
            return format!("input {i} shape changed from {:?} to {:?}", a.0, b.0);
        }
        if a.3 != b.3 {
            return format!(
                "input {i} dtype changed from {} to {}",
                a.3.name(),
                b.3.name()
            );
        }
        if a.1 != b.1 || a.2 != b.2 {
            return format!(
                "input {i} layout changed (strides {:?} -> {:?}, offset {} -> {})",
                a.1, b.1, a.2, b.2
            );
        }
    }
    "signature seen before".into()
}

type GraphFn = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync;

/// A compiled function (see the module docs).
pub struct CompiledFn {
    rt: Runtime,
    name: String,
    f: Box<GraphFn>,
    cache: HashMap<Signature, Arc<Executable>>,
    last: Option<Signature>,
}

/// Compiles `f` for `rt`: graphs are built on the first call with each input signature.
pub fn compile(
    rt: &Runtime,
    name: &str,
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
) -> CompiledFn {
    CompiledFn {
        rt: rt.clone(),
        name: name.to_string(),
        f: Box::new(f),
        cache: HashMap::new(),
        last: None,
    }
}

impl CompiledFn {
    /// Runs the compiled graph on `inputs` (compiling first for a new signature).
    pub fn call(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        for t in inputs {
            if !t.runtime().same(&self.rt) {
                return Err(TpuError::DeviceMismatch(format!(
                    "compiled `{}`: an input lives on another runtime",
                    self.name
                )));
            }
        }
        self.rt.flush_for("compiled call")?;
        let sig = signature(inputs);
        let exe = match self.cache.get(&sig) {
            Some(e) => {
                self.redraw(e)?;
                e.clone()
            }
            None => {
                let reason = why(self.last.as_ref(), &sig);
                let e = Arc::new(self.build(inputs)?);
                *self
                    .rt
                    .lock()
                    .core
                    .q
                    .metrics
                    .graph_compiles
                    .entry(reason)
                    .or_default() += 1;
                self.cache.insert(sig.clone(), e.clone());
                e
            }
        };
        self.last = Some(sig);
        self.run(&exe, inputs)
    }

    /// How many graphs were compiled (one per input signature seen).
    pub fn compiles(&self) -> usize {
        self.cache.len()
    }

    /// Records, fuses, plans and links the graph `f` builds on `inputs`.
    fn build(&self, inputs: &[Tensor]) -> Result<Executable> {
        let first_new = self.rt.begin_capture();
        let traced = (self.f)(inputs);
        let nodes = self.rt.end_capture();
        let captured = self.rt.take_captured_checks();
        let draws = self.rt.take_captured_draws();
        let returned = traced?;
        // Each check's flag is an output of the graph, after the returned tensors.
        let mut outputs = returned.clone();
        for c in &captured {
            outputs.push(Tensor::from_parts(
                self.rt.clone(),
                c.flag.clone(),
                c.layout.clone(),
                DType::I32,
            ));
        }
        // Each group's kernel; a product fused with a twin or a row reduction that this chip
        // cannot run as one kernel runs as its two parts (before the storages are classified:
        // the parts may write a value the fused kernel kept in VMEM).
        let mut groups = Vec::new();
        let mut prepared = Vec::new();
        for g in plan_groups(nodes) {
            let parts = self.rt.halves(&g.node, 1);
            let whole = match parts {
                Some(_) => None,
                None => match self.prepare(&g.node) {
                    Err(TpuError::NoKernel { .. }) if g.node.split_fused().is_some() => None,
                    // No kernel for the fused node (a row over more DMA dims than a
                    // descriptor holds, say): its operators run as recorded, one kernel each,
                    // as a DeferAndFuse flush runs them.
                    Err(TpuError::NoKernel { .. }) if g.members.len() > 1 => {
                        for node in g.members.clone() {
                            prepared.push(self.prepare(&node)?);
                            groups.push(part_of(&g, node));
                        }
                        continue;
                    }
                    r => Some(r?),
                },
            };
            match whole {
                Some(p) => {
                    prepared.push(p);
                    groups.push(g);
                }
                None => {
                    let parts = g.node.split_fused().expect("a fused product splits");
                    for node in parts {
                        prepared.push(self.prepare(&node)?);
                        groups.push(part_of(&g, node));
                    }
                }
            }
        }
        let storages = Storages::classify(inputs, &outputs, &groups, first_new);

        // Kernels, linked into programs between user kernels.
        let mut linker = Linker::new(&self.rt, &self.name, &storages);
        for (g, p) in groups.iter().zip(prepared) {
            let Some((compiled, args)) = p else {
                continue;
            };
            if matches!(g.node.kind, NodeKind::Custom(_)) {
                linker.push_user(&compiled, &args)?;
            } else {
                linker.push_fused(&compiled, &args)?;
            }
        }
        let (steps, kernels) = linker.finish()?;
        self.charge_compile();
        let arena = self.allocate_arena(&storages)?;
        let mut results = storages.results(&outputs);
        let mut checks = Vec::new();
        for (c, (src, _, _)) in captured.into_iter().zip(results.drain(returned.len()..)) {
            let Returned::Output(flag) = src else {
                return Err(TpuError::Unsupported(format!(
                    "compiled `{}`: the flag of a check of {} is not computed by the graph",
                    self.name, c.op
                )));
            };
            checks.push(GraphCheck {
                flag,
                ok: c.ok,
                error: c.error,
            });
        }
        let written = storages.written_slots();
        Ok(Executable {
            slots: storages.slots,
            steps,
            out_storages: storages.out_storages,
            results,
            arena,
            kernels,
            checks,
            written,
            draws,
        })
    }

    /// Reserves the counters of the graph's random draws for this call, as the same
    /// operators would eagerly, and writes each draw's seed and first counter into its
    /// storage (a captured one: the graph's kernels read it).
    fn redraw(&self, exe: &Executable) -> Result<()> {
        for d in &exe.draws {
            let (seed, offset) = self.rt.rng_state().reserve(d.generator, d.n);
            self.rt
                .upload(&d.storage, &crate::ops::random::stream_bytes(seed, offset))?;
        }
        Ok(())
    }

    /// A node's kernel and arguments, built or from the cache (`None`: nothing to run).
    fn prepare(
        &self,
        node: &crate::ir::Node,
    ) -> Result<Option<(crate::runtime::Compiled, Vec<ArgSpec>)>> {
        let mut st = self.rt.lock();
        self.rt.prepare(&mut st.core, node)
    }

    /// Charges the host the cost of compiling a graph.
    fn charge_compile(&self) {
        let q = &mut self.rt.lock().core.q;
        let ns = q.costs.compile_ns;
        q.charge("compile", ns);
    }

    /// The persistent arena of intermediates, if the graph has any.
    fn allocate_arena(&self, storages: &Storages) -> Result<Option<StorageRef>> {
        if storages.arena_slot.is_none() {
            return Ok(None);
        }
        let mut st = self.rt.lock();
        let s = self.rt.new_storage(&mut st, storages.arena_bytes.max(1))?;
        drop(st);
        self.rt.ensure_buffer(&s)?;
        Ok(Some(s))
    }

    fn run(&self, exe: &Executable, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let op = OpScope::new(
            &format!("compiled::{}", self.name),
            &inputs.iter().collect::<Vec<_>>(),
        )
        .or_else(|_| {
            Ok::<_, TpuError>(OpScope::on(
                &self.rt,
                &format!("compiled::{}", self.name),
                Shapes::text("[]"),
            ))
        })?;
        let outs: Vec<StorageRef> = {
            let mut st = self.rt.lock();
            exe.out_storages
                .iter()
                .map(|b| self.rt.new_storage(&mut st, *b))
                .collect::<Result<_>>()?
        };
        let mut buffers = Vec::new();
        for s in &exe.slots {
            let storage = match s {
                Slot::Input(i) => inputs[*i].storage.clone(),
                Slot::Fixed(st) => st.clone(),
                Slot::Output(j) => outs[*j].clone(),
                Slot::Arena => exe.arena.clone().expect("arena allocated with its slot"),
            };
            buffers.push(self.rt.ensure_buffer(&storage)?);
        }
        let written: Vec<&StorageRef> = exe
            .written
            .iter()
            .map(|slot| match &exe.slots[*slot] {
                Slot::Input(i) => &inputs[*i].storage,
                Slot::Fixed(s) => s,
                Slot::Output(j) => &outs[*j],
                Slot::Arena => unreachable!("the arena is not bound whole"),
            })
            .collect();
        // A step that faults leaves what the call writes not computed.
        let writes: Vec<_> = written.iter().map(|s| Arc::downgrade(s)).collect();
        let tag: OpTag = op.tag().clone();
        let mut st = self.rt.lock();
        for step in &exe.steps {
            let args = step
                .args
                .iter()
                .map(|b| match b {
                    Bound::Slot(i) => KernelArg::Buffer(buffers[*i]),
                    Bound::Scalar(s) => KernelArg::Scalar(*s),
                })
                .collect();
            let launch = Launch {
                program: step.program,
                targets: vec![LaunchTarget {
                    core: CoreRef {
                        chip: self.rt.chip(),
                        core: 0,
                    },
                    args,
                }],
                submit_ns: 0.0,
                op_id: Some(tag.id),
                group_id: None,
            };
            st.core
                .q
                .launch(self.rt.device().as_ref(), launch, &tag, writes.clone())?;
        }
        st.core.q.metrics.fused_groups += exe.kernels as u64;
        // What the call wrote fails with a broken check, and with a failing input.
        if st.checks.tracking() {
            st.checks.taint(inputs.iter().map(|t| &t.storage), &written);
        }
        for c in &exe.checks {
            let error = c.error.clone();
            st.checks.add(Check {
                // The launch's name: a fault of the graph that the broken rule explains (an
                // out-of-range gather's DMA) is not an error of its own.
                op: tag.name.to_string(),
                flag: outs[c.flag].clone(),
                ok: c.ok,
                error: Box::new(move |v| error(v)),
                outputs: written.iter().map(|s| Arc::downgrade(s)).collect(),
            });
        }
        if !exe.checks.is_empty() && st.mode() == Mode::Debug {
            // Debug waits for every kernel: a broken rule is raised by the call.
            if let Some((_, e)) = self.rt.synchronize(&mut st, "check")?.into_iter().next() {
                return Err(e);
            }
        }
        drop(st);
        Ok(exe
            .results
            .iter()
            .map(|(src, l, d)| {
                let storage = match src {
                    Returned::Output(j) => outs[*j].clone(),
                    Returned::Input(i) => inputs[*i].storage.clone(),
                    Returned::Fixed(st) => st.clone(),
                };
                Tensor::from_parts(self.rt.clone(), storage, l.clone(), *d)
            })
            .collect())
    }
}

/// Turns a graph's kernels, in order, into launch steps: runs of fused kernels are linked into
/// programs (as few as the buffer limit allows); user kernels launch as they are, between them.
struct Linker<'a> {
    rt: &'a Runtime,
    name: &'a str,
    storages: &'a Storages,
    /// Argument name of each slot.
    buffer_names: Vec<String>,
    /// Fused kernels not yet linked.
    sections: Vec<Pending>,
    steps: Vec<Step>,
    kernels: usize,
}

impl<'a> Linker<'a> {
    fn new(rt: &'a Runtime, name: &'a str, storages: &'a Storages) -> Self {
        Linker {
            rt,
            name,
            storages,
            buffer_names: (0..storages.slots.len()).map(|i| format!("b{i}")).collect(),
            sections: Vec::new(),
            steps: Vec::new(),
            kernels: 0,
        }
    }

    /// Links the pending fused kernels into programs, one step each.
    fn flush(&mut self) -> Result<()> {
        let max = tpuemu_isa::reg::MAX_ARGS as usize;
        for (used, secs) in link::chunks(&self.sections, max)? {
            let names: Vec<String> = used.iter().map(|g| self.buffer_names[*g].clone()).collect();
            let prog = link::link(self.name, &names, &secs)?;
            let pid = self.rt.inner.device.load(&prog)?;
            self.steps.push(Step {
                program: pid,
                args: used.into_iter().map(Bound::Slot).collect(),
            });
        }
        self.sections.clear();
        Ok(())
    }

    /// A user kernel: its own step, after the fused kernels before it.
    fn push_user(&mut self, compiled: &Compiled, args: &[ArgSpec]) -> Result<()> {
        self.kernels += 1;
        self.flush()?;
        let mut bound = Vec::new();
        for a in args {
            bound.push(match a {
                ArgSpec::Buffer(v) => {
                    if self.storages.in_arena(v) {
                        return Err(TpuError::Unsupported("a user kernel reading an intermediate of a compiled graph: return it or run the kernel eagerly".into()));
                    }
                    Bound::Slot(self.storages.slot_for(v)?)
                }
                ArgSpec::Offset { elems, .. } => Bound::Scalar(*elems as u32),
                ArgSpec::Scalar(s) => Bound::Scalar(*s),
            });
        }
        self.steps.push(Step {
            program: compiled.program,
            args: bound,
        });
        Ok(())
    }

    /// A fused kernel: a section of the next linked program, its offsets moved into the arena.
    fn push_fused(&mut self, compiled: &Compiled, args: &[ArgSpec]) -> Result<()> {
        self.kernels += 1;
        let mut sec_slots = Vec::new();
        let mut words = Vec::new();
        for a in args {
            match a {
                ArgSpec::Buffer(v) => {
                    sec_slots.push(Some(self.storages.slot_for(v)?));
                    words.push(v.storage.bytes() as u32);
                }
                ArgSpec::Offset { view, elems } => {
                    sec_slots.push(None);
                    words.push((*elems + self.storages.arena_elems(view)) as u32);
                }
                ArgSpec::Scalar(s) => {
                    sec_slots.push(None);
                    words.push(*s);
                }
            }
        }
        self.sections.push(Pending {
            program: compiled.prog.clone(),
            slots: sec_slots,
            words,
        });
        Ok(())
    }

    /// Links what is left; the steps and how many kernels they run.
    fn finish(mut self) -> Result<(Vec<Step>, usize)> {
        self.flush()?;
        Ok((self.steps, self.kernels))
    }
}

/// `node`, one part of group `g` run as its own kernel (its half, or one of its operators when
/// the group has no kernel), named by the group's operators.
fn part_of(g: &FusedGroup, node: crate::ir::Node) -> FusedGroup {
    FusedGroup {
        node,
        ops: g.ops.clone(),
        op_ids: g.op_ids.clone(),
        joins: g.joins.clone(),
        members: Vec::new(),
    }
}
