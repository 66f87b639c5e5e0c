//! What one chip's step is made of, as it runs: compute segments (kernels between two
//! collectives, timed on the chip's meta runtime), collectives (timed on the slice), and the
//! repetition shortcut.
//!
//! A step is written once against [`Ctx`]: local tensors of one chip's shapes, and
//! [`Ctx::collective`] wherever the chips exchange data. A [`Comm`] decides what a collective
//! does: [`SoloComm`](super::comm::SoloComm) records it and returns an output of the right shape
//! (one chip stands for its peers, the collective is timed separately on the slice);
//! [`PeerComm`](super::comm::PeerComm) runs it for real between every chip of a small slice (the
//! full simulation the shortcut is checked against).
//!
//! [`Ctx::repeat`] runs a body `n` times, or — with the repetition shortcut on — once, its
//! events counted `n` times. Identical layers and identical attention chunks (one sequence and
//! one group of heads sharing a key/value head) are repeated this way.

use tpuemu_backend::error::Result;
use tpuemu_backend::runtime::HostCosts;
use tpuemu_backend::runtime::Runtime;
use tpuemu_backend::tensor::Tensor;

/// What a collective does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum CollKind {
    /// Each chip's shard (dimension 0) to the whole on every chip.
    AllGather,
    /// Each chip's partial sum to its shard of the sum (dimension 0).
    ReduceScatter,
    /// Each chip's partial sum to the sum on every chip.
    AllReduce,
    /// Each chip's rows dealt in equal blocks to the chips of the group, block `j` to chip
    /// `j`; each chip receives one block from every chip (expert parallelism's dispatch and
    /// combine; balanced, so the output has the input's shape).
    AllToAll,
}

impl CollKind {
    /// `all-gather`, `reduce-scatter`, `all-reduce`.
    pub fn name(self) -> &'static str {
        match self {
            CollKind::AllGather => "all-gather",
            CollKind::ReduceScatter => "reduce-scatter",
            CollKind::AllReduce => "all-reduce",
            CollKind::AllToAll => "all-to-all",
        }
    }
}

/// When the compute that follows a collective needs it (the schedule's view).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum When {
    /// The next kernel needs the result (tensor-parallel activations).
    Now,
    /// As [`When::Now`], but the compute segment just before produces the data as a
    /// collective matmul does (Wang et al., "Overlap Communication with Dependent Computation
    /// via Decomposition in Large Deep Learning Models", ASPLOS 2023; XLA's collective matmul
    /// on TPUs): its matrix product split in `chunks` (the group's chips), each chunk's share
    /// sent while the next computes — the collective may start once the first chunk is done.
    Overlapped {
        /// Chunks of the producing segment (the chips of the collective's group).
        chunks: usize,
    },
    /// Issued one segment ahead of its use (FSDP's parameter prefetch).
    Prefetch,
    /// Nothing waits for it until the optimizer (gradient reduction).
    Background,
}

/// One collective of the step.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Coll {
    /// What it does.
    pub kind: CollKind,
    /// Mesh dimensions it runs over.
    pub dims: Vec<usize>,
    /// When its result is needed.
    pub when: When,
    /// What it moves (for the trace and the report).
    pub label: String,
}

/// Runs collectives for a [`Ctx`].
pub trait Comm {
    /// Runs `c` on this chip's local tensor `t` (1-D or 2-D; gathers and scatters along
    /// dimension 0), returning this chip's result.
    fn collective(&mut self, rt: &Runtime, c: &Coll, t: &Tensor) -> Result<Tensor>;
    /// Number of chips along mesh dimensions `dims`.
    fn group_size(&self, dims: &[usize]) -> usize;
}

/// An event of one chip's step.
#[derive(Clone, Debug, serde::Serialize)]
pub enum Event {
    /// Kernels between two synchronisation points.
    Compute {
        /// What ran.
        label: String,
        /// Simulated time, ns.
        ns: f64,
        /// Device busy time, ns.
        busy_ns: f64,
        /// Useful matrix-unit FLOPs.
        mxu_flops: u64,
        /// HBM bytes moved.
        hbm_bytes: u64,
        /// Kernels launched.
        kernels: u64,
    },
    /// A collective.
    Comm {
        /// What and where.
        coll: Coll,
        /// Bytes of this chip's input.
        bytes: u64,
        /// Simulated time, ns, where it was run in place ([`super::comm::PeerComm`]); the
        /// prediction times it on the slice otherwise.
        ns: Option<f64>,
    },
    /// The compute that follows waits for every collective issued so far (the optimizer
    /// needs every gradient).
    WaitAll,
}

/// An event and how many times it happens.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Counted {
    /// The event.
    pub event: Event,
    /// Times it happens in the step.
    pub times: u64,
}

/// One chip's step being simulated.
pub struct Ctx<'a> {
    /// The chip's runtime (a meta runtime: shapes and timing).
    pub rt: Runtime,
    comm: &'a mut dyn Comm,
    /// Simulate repeated bodies once.
    pub shortcut: bool,
    /// What happened.
    pub events: Vec<Counted>,
    label: String,
    mark_ns: f64,
    mark_busy: f64,
    mark_flops: u64,
    mark_hbm: u64,
    mark_kernels: u64,
    /// Largest device memory in use seen at a synchronisation point, bytes.
    pub peak_hbm: u64,
}

impl<'a> Ctx<'a> {
    /// A step on `rt` whose collectives go to `comm`. The step is a steady-state one: kernel
    /// generation is not charged to the host (`HostCosts::compile_ns` = 0; after the first
    /// step every kernel is cached), so a repeated body costs what its first run costs.
    ///
    /// The host is a pod host's, not this emulator's bridge: the runtime's defaults are what
    /// this project's Python bridge measured (`runtime/config.rs`) and move as it gets faster,
    /// so a prediction keeps the figures it was built and checked with (dispatch 6 µs, a view
    /// 1 µs, launch 3 µs, recording 6 µs, a flush 10 µs): the repetition shortcut's agreement
    /// with a full simulation (`tests/llm_predict.rs`, within 2%) was established with them.
    pub fn new(rt: Runtime, comm: &'a mut dyn Comm, shortcut: bool) -> Result<Self> {
        rt.set_costs(HostCosts {
            op_dispatch_ns: 6000.0,
            view_ns: 1000.0,
            launch_ns: 3000.0,
            record_ns: 6000.0,
            flush_ns: 10_000.0,
            flush_op_ns: 0.0,
            compile_ns: 0.0,
        });
        rt.sync()?;
        let mut c = Ctx {
            rt,
            comm,
            shortcut,
            events: Vec::new(),
            label: "start".into(),
            mark_ns: 0.0,
            mark_busy: 0.0,
            mark_flops: 0,
            mark_hbm: 0,
            mark_kernels: 0,
            peak_hbm: 0,
        };
        c.remark();
        Ok(c)
    }

    fn remark(&mut self) {
        let m = self.rt.metrics();
        self.mark_ns = self.rt.host_time_ns();
        self.mark_busy = m.device_busy_ns;
        self.mark_flops = m.mxu_flops;
        self.mark_hbm = m.hbm_bytes;
        self.mark_kernels = m.kernels_launched;
    }

    /// Names the compute that follows (until the next label or collective).
    pub fn label(&mut self, label: &str) -> Result<()> {
        self.boundary()?;
        self.label = label.to_string();
        Ok(())
    }

    /// Ends the current compute segment: waits for its kernels and records it.
    pub fn boundary(&mut self) -> Result<()> {
        self.rt.sync()?;
        let used = self.rt.device().hbm_in_use(self.rt.chip());
        self.peak_hbm = self.peak_hbm.max(used);
        let m = self.rt.metrics();
        let ns = self.rt.host_time_ns() - self.mark_ns;
        if m.kernels_launched > self.mark_kernels || ns > 0.0 {
            self.events.push(Counted {
                event: Event::Compute {
                    label: self.label.clone(),
                    ns,
                    busy_ns: m.device_busy_ns - self.mark_busy,
                    mxu_flops: m.mxu_flops - self.mark_flops,
                    hbm_bytes: m.hbm_bytes - self.mark_hbm,
                    kernels: m.kernels_launched - self.mark_kernels,
                },
                times: 1,
            });
        }
        self.remark();
        Ok(())
    }

    /// Runs collective `c` on `t`.
    pub fn collective(&mut self, c: Coll, t: &Tensor) -> Result<Tensor> {
        self.boundary()?;
        let before = self.rt.host_time_ns();
        let out = self.comm.collective(&self.rt, &c, t)?;
        self.rt.sync()?;
        let ns = self.rt.host_time_ns() - before;
        let bytes = (t.numel() * t.dtype().size()) as u64;
        self.events.push(Counted {
            event: Event::Comm {
                coll: c,
                bytes,
                ns: (ns > 0.0).then_some(ns),
            },
            times: 1,
        });
        self.remark();
        Ok(out)
    }

    /// Makes the compute that follows wait for every collective issued so far.
    pub fn wait_all(&mut self) -> Result<()> {
        self.boundary()?;
        self.events.push(Counted {
            event: Event::WaitAll,
            times: 1,
        });
        Ok(())
    }

    /// Chips along mesh dimensions `dims`.
    pub fn group_size(&self, dims: &[usize]) -> usize {
        self.comm.group_size(dims)
    }

    /// Runs `body` `n` times threading a value through it — or, with the shortcut, once: its
    /// events are counted `n` times (compute alone), or repeated `n` times in the list (with
    /// collectives, which the schedule places one by one).
    pub fn repeat<T>(
        &mut self,
        n: usize,
        mut x: T,
        mut body: impl FnMut(&mut Self, T, usize) -> Result<T>,
    ) -> Result<T> {
        if n == 0 {
            return Ok(x);
        }
        if self.shortcut && n > 1 {
            self.boundary()?;
            let start = self.events.len();
            x = body(self, x, 0)?;
            self.boundary()?;
            let block = self.events[start..].to_vec();
            if block
                .iter()
                .any(|e| !matches!(e.event, Event::Compute { .. }))
            {
                // Collectives inside: the schedule needs each occurrence in its place.
                for _ in 1..n {
                    self.events.extend(block.iter().cloned());
                }
            } else {
                for e in &mut self.events[start..] {
                    e.times *= n as u64;
                }
            }
            return Ok(x);
        }
        for i in 0..n {
            x = body(self, x, i)?;
        }
        Ok(x)
    }
}
