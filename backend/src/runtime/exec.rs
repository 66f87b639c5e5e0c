//! Running nodes: lowering to kernels, the kernel cache, launching.

use tpuemu_isa::{CoreRef, KernelArg, Launch, LaunchTarget, Program};

use super::{Compiled, Core, Runtime};
use crate::error::{Result, TpuError};
use crate::ir::key::Key;
use crate::ir::{Node, NodeKind, View};
use crate::kernels::{self, KernelError};

/// One argument of a lowered kernel.
#[derive(Clone, Debug)]
pub(crate) enum ArgSpec {
    /// The buffer holding a view's storage.
    Buffer(View),
    /// A view's storage offset, in elements (a scalar).
    Offset { view: View, elems: usize },
    /// A plain scalar.
    Scalar(u32),
}

/// A node ready to launch: its cache key, how to build its program, and its arguments.
pub(crate) struct Lowered {
    pub key: String,
    pub build: Box<dyn FnOnce() -> Result<Program, KernelError>>,
    pub args: Vec<ArgSpec>,
}

impl Runtime {
    /// Lowers `node` to a kernel split over up to `parts` cores (matrix products and
    /// attention; [`crate::codegen::parts`]); one core for the rest.
    fn lower(&self, node: &Node, parts: usize) -> Result<Option<Lowered>> {
        let info = self.inner.info.clone();
        let split_key = |key: String| {
            if parts > 1 {
                format!("{key} parts{parts}")
            } else {
                key
            }
        };
        let buf = |v: &View| -> Result<ArgSpec> { Ok(ArgSpec::Buffer(v.clone())) };
        match &node.kind {
            NodeKind::Tile {
                shape,
                row_dims,
                prog,
            } => {
                if shape.iter().product::<usize>() == 0 {
                    return Ok(None);
                }
                let ins: Vec<_> = node.inputs.iter().map(|v| (&v.layout, v.dtype)).collect();
                let outs: Vec<_> = node.outputs.iter().map(|v| (&v.layout, v.dtype)).collect();
                let (spec, offsets) = kernels::tile::lower(shape, *row_dims, prog, &ins, &outs)
                    .map_err(|e| in_op(node, e))?;
                let views: Vec<&View> = node.inputs.iter().chain(&node.outputs).collect();
                let args = with_offsets(node, &views, &offsets)?;
                let key = spec.key();
                let name = kernel_name(node);
                Ok(Some(Lowered {
                    key,
                    build: Box::new(move || kernels::tile::build(&spec, &info, &name)),
                    args,
                }))
            }
            NodeKind::Matmul(m) => {
                if m.batch * m.m * m.n == 0 {
                    return Ok(None);
                }
                let (spec, offsets) = kernels::matmul::spec_of(node, m, m.precision.isa())
                    .map_err(|e| in_op(node, e))?;
                let plan =
                    kernels::matmul::plan(&spec, &info, false).map_err(|e| in_op(node, e))?;
                let args = with_offsets(
                    node,
                    &node.inputs.iter().chain(&node.outputs).collect::<Vec<_>>(),
                    &offsets,
                )?;
                let key = split_key(format!("{} {plan:?}", spec.key()));
                let name = kernel_name(node);
                Ok(Some(Lowered {
                    key,
                    build: Box::new(move || {
                        kernels::matmul::build_parts(&spec, &plan, &info, &name, parts)
                    }),
                    args,
                }))
            }
            NodeKind::Attention(a) => {
                if a.batch * a.heads * a.l == 0 {
                    return Ok(None);
                }
                let (spec, offsets) =
                    kernels::attention::spec_of(node, a).map_err(|e| in_op(node, e))?;
                let views: Vec<&View> = node.inputs.iter().chain(&node.outputs).collect();
                let args = with_offsets(node, &views, &offsets)?;
                let key = split_key(spec.key());
                let name = kernel_name(node);
                let backward = a.backward;
                Ok(Some(Lowered {
                    key,
                    build: Box::new(move || {
                        if backward {
                            kernels::attention::build_backward(&spec, &info, &name, parts)
                        } else {
                            kernels::attention::build_forward(&spec, &info, &name, parts)
                        }
                    }),
                    args,
                }))
            }
            NodeKind::Custom(c) => {
                let mut args = Vec::new();
                for v in node.inputs.iter().chain(&node.outputs) {
                    args.push(buf(v)?);
                }
                if node
                    .inputs
                    .iter()
                    .chain(&node.outputs)
                    .any(|v| v.layout.offset != 0)
                {
                    return Err(TpuError::InOp {
                        op: node.op.name.to_string(),
                        message: "custom kernels take whole contiguous buffers".into(),
                    });
                }
                args.extend(c.scalars.iter().map(|s| ArgSpec::Scalar(*s)));
                let key = format!(
                    "custom {} {:p}",
                    c.program.name,
                    std::sync::Arc::as_ptr(&c.program)
                );
                let program = c.program.clone();
                Ok(Some(Lowered {
                    key,
                    build: Box::new(move || Ok((*program).clone())),
                    args,
                }))
            }
            NodeKind::Gather(g) | NodeKind::IndexAdd(g) | NodeKind::IndexPut(g, _) => {
                if g.count == 0 || g.row_len == 0 {
                    return Ok(None);
                }
                let combine = match &node.kind {
                    NodeKind::IndexAdd(_) => Some(crate::ir::Combine::Add),
                    NodeKind::IndexPut(_, c) => Some(*c),
                    _ => None,
                };
                let add = combine.is_some();
                let (spec, offsets) = if let Some(c) = combine {
                    kernels::gather::index_add_spec(node, g, c)
                } else {
                    kernels::gather::gather_spec(node, g)
                }
                .map_err(|e| in_op(node, e))?;
                let views: Vec<&crate::ir::View> = if add {
                    vec![&node.outputs[0], &node.inputs[0], &node.inputs[1]]
                } else {
                    vec![&node.inputs[0], &node.inputs[1], &node.outputs[0]]
                };
                let args = with_offsets(node, &views, &offsets)?;
                let key = spec.key();
                let name = kernel_name(node);
                Ok(Some(Lowered {
                    key,
                    build: Box::new(move || kernels::rows(&spec, &info, &name)),
                    args,
                }))
            }
        }
    }

    /// The kernel for a lowered node: from the cache, or built, loaded and cached.
    pub(crate) fn kernel(
        &self,
        core: &mut Core,
        node: &Node,
        key: String,
        build: Box<dyn FnOnce() -> Result<Program, KernelError>>,
        group: Option<u64>,
    ) -> Result<Compiled> {
        if let Some(c) = core.cache.get(&key) {
            core.q.metrics.cache_hits += 1;
            return Ok(c.clone());
        }
        core.q.metrics.cache_misses += 1;
        let mut program = build().map_err(|e| in_op(node, e))?;
        program.source_op = Some(node.op.name.to_string());
        program.fusion_group = group;
        if let Some(dir) = &core.dump_dir {
            dump_kernel(dir, core.q.metrics.cache_misses, &program);
        }
        let pid = self.inner.device.load(&program)?;
        let ns = core.q.costs.compile_ns;
        core.q.charge("compile", ns);
        let c = Compiled {
            program: pid,
            prog: std::sync::Arc::new(program),
        };
        core.cache.insert(key, c.clone());
        Ok(c)
    }

    /// Lowers a node and finds or builds its kernel, without launching (for whole-graph
    /// compilation). `None` when the node has nothing to do.
    pub(crate) fn prepare(
        &self,
        core: &mut Core,
        node: &Node,
    ) -> Result<Option<(Compiled, Vec<ArgSpec>)>> {
        // Whole-graph programs run on one core.
        let Some(low) = self.lower(node, 1)? else {
            return Ok(None);
        };
        let c = self.kernel(core, node, low.key, low.build, None)?;
        Ok(Some((c, low.args)))
    }

    /// A product fused with a twin product or a row reduction as two nodes of their own when
    /// its kernel cannot run here: split over `parts` cores (each product's own kernel splits;
    /// the fused one runs on one core), too large for this chip's VMEM, or (a pair) estimated
    /// slower than its two products apart.
    pub(crate) fn halves(&self, node: &Node, parts: usize) -> Option<[Node; 2]> {
        let NodeKind::Matmul(m) = &node.kind else {
            return None;
        };
        if m.twin.is_none() && m.rows.is_none() {
            return None;
        }
        let info = &self.inner.info;
        // A pair runs whole only where its cost model says it beats its two products apart.
        let whole = parts == 1
            && kernels::matmul::spec_of(node, m, m.precision.isa()).is_ok_and(|(spec, _)| {
                kernels::matmul::plan(&spec, info, false).is_ok()
                    && (spec.twin.is_none() || kernels::matmul::pair_pays(&spec, info))
            });
        if whole { None } else { node.split_fused() }
    }

    /// Runs one node now: allocates its outputs, finds or builds its kernel, launches it.
    pub(crate) fn execute(&self, core: &mut Core, node: &Node, group: Option<u64>) -> Result<()> {
        for v in node.outputs.iter().chain(&node.inputs) {
            self.ensure_buffer(&v.storage)?;
        }
        let cores = if core.megacore {
            self.inner.info.cores.max(1) as usize
        } else {
            1
        };
        if let Some(halves) = self.halves(node, cores) {
            for h in &halves {
                self.execute(core, h, group)?;
            }
            return Ok(());
        }
        let (compiled, args) = match self.lowered(core, node, cores, group)? {
            Some(found) => found,
            None => return Ok(()),
        };
        let parts = if crate::codegen::is_split(&compiled.prog) {
            cores
        } else {
            1
        };
        let targets = (0..parts)
            .map(|p| LaunchTarget {
                core: CoreRef {
                    chip: self.inner.chip,
                    core: p as u32,
                },
                args: if parts > 1 {
                    args.iter()
                        .copied()
                        .chain([KernelArg::Scalar(p as u32)])
                        .collect()
                } else {
                    args.clone()
                },
            })
            .collect();
        let launch = Launch {
            program: compiled.program,
            targets,
            submit_ns: 0.0,
            op_id: Some(node.op.id),
            group_id: group,
        };
        let writes = node
            .outputs
            .iter()
            .map(|v| std::sync::Arc::downgrade(&v.storage))
            .collect();
        core.q
            .launch(self.inner.device.as_ref(), launch, &node.op, writes)
    }
}

impl Runtime {
    /// The kernel of `node` and its arguments: from the lowering memo when a node of the same
    /// structure ran before ([`crate::ir::key`]), else lowered, found in (or added to) the
    /// kernel cache, and remembered. `None` when the node has nothing to do.
    fn lowered(
        &self,
        core: &mut Core,
        node: &Node,
        cores: usize,
        group: Option<u64>,
    ) -> Result<Option<(Compiled, Vec<KernelArg>)>> {
        let memo = match &node.kind {
            // A user kernel is its own program, named by identity: not remembered here.
            NodeKind::Custom(_) => None,
            NodeKind::Tile { shape, .. } if shape.iter().product::<usize>() == 0 => {
                return Ok(None);
            }
            // A tile kernel takes its operands' storage offsets as arguments: they are left
            // out of the key. Other kernels' offsets are part of their key.
            NodeKind::Tile { .. } => Some(Key::of_node(node, false, cores)),
            _ => Some(Key::of_node(node, true, cores)),
        };
        if let Some((c, template)) = memo.as_ref().and_then(|k| core.lowered.get(k)) {
            core.q.metrics.cache_hits += 1;
            let args = bind(node, template)?;
            return Ok(Some((c.clone(), args)));
        }
        let Some(low) = self.lower(node, cores)? else {
            return Ok(None);
        };
        let compiled = self.kernel(core, node, low.key, low.build, group)?;
        let args = resolve(&low.args)?;
        if let Some(k) = memo
            && let Some(template) = template_of(node, &low.args)
        {
            core.lowered.insert(k, (compiled.clone(), template));
        }
        Ok(Some((compiled, args)))
    }
}

/// One argument of a remembered kernel, as the node's operands give it.
#[derive(Clone, Debug)]
pub(crate) enum ArgTemplate {
    /// The buffer of operand `i` (inputs, then outputs).
    Buffer(usize),
    /// The storage offset of operand `i`, in elements.
    Offset(usize),
    /// A fixed scalar.
    Scalar(u32),
}

/// The operands of `node`, inputs then outputs.
fn operands(node: &Node) -> impl Iterator<Item = &View> {
    node.inputs.iter().chain(&node.outputs)
}

/// `args` as positions among `node`'s operands; `None` when an argument is not one of them.
/// An argument is the first operand of its storage and layout not named by an argument of
/// its kind before it (`x * x` names its two operands, not the first twice; the key tells
/// aliased operands apart). Offsets follow the operand only for tile kernels (whose keys
/// leave offsets out).
fn template_of(node: &Node, args: &[ArgSpec]) -> Option<Vec<ArgTemplate>> {
    let tile = matches!(node.kind, NodeKind::Tile { .. });
    let n = operands(node).count();
    let (mut buffers, mut offsets) = (vec![false; n], vec![false; n]);
    let find = |v: &View, used: &mut Vec<bool>| {
        let i = operands(node).enumerate().position(|(i, o)| {
            !used[i] && std::sync::Arc::ptr_eq(&o.storage, &v.storage) && o.layout == v.layout
        })?;
        used[i] = true;
        Some(i)
    };
    args.iter()
        .map(|a| match a {
            ArgSpec::Buffer(v) => find(v, &mut buffers).map(ArgTemplate::Buffer),
            ArgSpec::Offset { view, elems } if tile => {
                let i = find(view, &mut offsets)?;
                (view.layout.offset == *elems).then_some(ArgTemplate::Offset(i))
            }
            ArgSpec::Offset { elems, .. } => u32::try_from(*elems).ok().map(ArgTemplate::Scalar),
            ArgSpec::Scalar(s) => Some(ArgTemplate::Scalar(*s)),
        })
        .collect()
}

/// The kernel arguments of `node` for a remembered kernel.
fn bind(node: &Node, template: &[ArgTemplate]) -> Result<Vec<KernelArg>> {
    // Indexed once: a fused node has dozens of operands.
    let ops: Vec<&View> = operands(node).collect();
    let operand = |i: usize| ops[i];
    template
        .iter()
        .map(|a| match a {
            ArgTemplate::Buffer(i) => operand(*i)
                .storage
                .buffer()
                .map(KernelArg::Buffer)
                .ok_or_else(|| TpuError::Device("storage without a buffer".into())),
            ArgTemplate::Offset(i) => u32::try_from(operand(*i).layout.offset)
                .map(KernelArg::Scalar)
                .map_err(|_| TpuError::InOp {
                    op: node.op.name.to_string(),
                    message: "storage offset above 4G elements".into(),
                }),
            ArgTemplate::Scalar(s) => Ok(KernelArg::Scalar(*s)),
        })
        .collect()
}

/// Buffer arguments for `views`, then their offsets as scalars.
fn with_offsets(node: &Node, views: &[&View], offsets: &[usize]) -> Result<Vec<ArgSpec>> {
    let mut args: Vec<ArgSpec> = views
        .iter()
        .map(|v| ArgSpec::Buffer((*v).clone()))
        .collect();
    for (v, o) in views.iter().zip(offsets) {
        if u32::try_from(*o).is_err() {
            return Err(TpuError::InOp {
                op: node.op.name.to_string(),
                message: "storage offset above 4G elements".into(),
            });
        }
        args.push(ArgSpec::Offset {
            view: (*v).clone(),
            elems: *o,
        });
    }
    Ok(args)
}

/// Kernel arguments for allocated storages.
fn resolve(args: &[ArgSpec]) -> Result<Vec<KernelArg>> {
    args.iter()
        .map(|a| match a {
            ArgSpec::Buffer(v) => v
                .storage
                .buffer()
                .map(KernelArg::Buffer)
                .ok_or_else(|| TpuError::Device("storage without a buffer".into())),
            ArgSpec::Offset { elems, .. } => Ok(KernelArg::Scalar(*elems as u32)),
            ArgSpec::Scalar(s) => Ok(KernelArg::Scalar(*s)),
        })
        .collect()
}

fn kernel_name(node: &Node) -> String {
    node.op.name.trim_start_matches("aten::").to_string()
}

fn in_op(node: &Node, e: KernelError) -> TpuError {
    TpuError::NoKernel {
        op: node.op.name.to_string(),
        message: e.to_string(),
    }
}

/// Writes a generated kernel's assembly to `dir` (`TORCH_TPU_DUMP_KERNELS=dir`), numbered in
/// generation order. A failure to write is reported on stderr and does not stop the run.
fn dump_kernel(dir: &std::path::Path, n: u64, program: &Program) {
    let name: String = program
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    let path = dir.join(format!("{n:04}-{name}.s"));
    let text = tpuemu_isa::disassemble(program);
    if let Err(e) = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, text)) {
        eprintln!("[tpu] cannot dump kernel to {}: {e}", path.display());
    }
}
