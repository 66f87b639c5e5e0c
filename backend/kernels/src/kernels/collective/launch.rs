//! Running a collective on a device: per-chip buffers in, one SPMD launch out.
//!
//! The caller owns the input and output buffers (anywhere on their chips, at any offset); the
//! helper computes each chip's scalar arguments (offsets, its coordinate on each axis, its
//! neighbours, its rank in the group), allocates the scratch buffer a reduction needs on every
//! chip and frees it right after the launch (a launched kernel keeps what it uses).

use std::collections::HashMap;

use tpuemu_isa::{
    BufferId, ChipId, Completion, CoreRef, Device, DeviceError, KernelArg, LaunchId, LaunchTarget,
    ProgramId, Topology,
};

use super::plan::MAX_BYTES;
use super::{Collective, CollectiveOp, CollectiveSpec};
use crate::kernels::KernelError;

/// Bytes of a buffer starting at an offset.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct BufferSlice {
    /// The buffer, on the chip it is given for.
    pub buffer: BufferId,
    /// Byte offset of the first element.
    pub offset: u64,
}

impl BufferSlice {
    /// The buffer from its first byte.
    pub fn whole(buffer: BufferId) -> Self {
        BufferSlice { buffer, offset: 0 }
    }
}

/// One chip's part of a collective.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct ChipBuffers {
    /// The chip.
    pub chip: ChipId,
    /// Where its input starts ([`Collective::input_bytes`] bytes).
    pub input: BufferSlice,
    /// Where its output goes ([`Collective::output_bytes`] bytes).
    pub output: BufferSlice,
}

/// Why a collective could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CollectiveError {
    /// The spec does not fit the topology, or the program could not be generated.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// The buffers given do not make a valid launch.
    #[error("collective buffers: {0}")]
    Buffers(String),
    /// The device refused or the kernel failed (a fault, or a deadlock report).
    #[error(transparent)]
    Device(#[from] DeviceError),
}

fn bad(msg: String) -> CollectiveError {
    CollectiveError::Buffers(msg)
}

impl Collective {
    /// Coordinates of `chip`, checked.
    fn coords(topo: &Topology, chip: ChipId) -> Result<&[u32], CollectiveError> {
        topo.chips
            .get(chip as usize)
            .map(|c| c.coords.as_slice())
            .ok_or_else(|| {
                bad(format!(
                    "chip {chip} does not exist ({} chips)",
                    topo.num_chips()
                ))
            })
    }

    /// Chip index at `coords` (chips are numbered x-fastest; checked by the plan).
    fn chip_at(topo: &Topology, coords: &[u32]) -> u32 {
        coords
            .iter()
            .zip(&topo.mesh)
            .rev()
            .fold(0, |acc, (c, d)| acc * d + c)
    }

    /// The group a chip belongs to (its coordinates off the collective's axes) and its rank.
    pub fn group_and_rank(
        &self,
        topo: &Topology,
        chip: ChipId,
    ) -> Result<(Vec<u32>, u32), CollectiveError> {
        let coords = Self::coords(topo, chip)?;
        let mut key = coords.to_vec();
        let mut rank = 0;
        for &a in &self.spec.axes {
            rank = rank * topo.mesh[a] + coords[a];
            key[a] = 0;
        }
        Ok((key, rank))
    }

    /// The launch arguments of one chip. `scratch` is needed when
    /// [`Collective::scratch_bytes`] is not zero and must start at the same offset on every
    /// chip.
    pub fn args(
        &self,
        topo: &Topology,
        b: &ChipBuffers,
        scratch: Option<BufferSlice>,
    ) -> Result<Vec<KernelArg>, CollectiveError> {
        let coords = Self::coords(topo, b.chip)?;
        let mut args = vec![
            KernelArg::Buffer(b.input.buffer),
            KernelArg::Buffer(b.output.buffer),
        ];
        let scr_off = match (self.plan.scratch_bytes, scratch) {
            (0, _) => 0,
            (_, Some(s)) => {
                args.push(KernelArg::Buffer(s.buffer));
                s.offset
            }
            (n, None) => {
                return Err(bad(format!(
                    "{} needs {n} bytes of scratch on chip {}",
                    self.spec.op.name(),
                    b.chip
                )));
            }
        };
        let check = |what: &str, off: u64, len: u64| {
            if off + len > MAX_BYTES {
                return Err(bad(format!(
                    "chip {}: {what} ends at byte {}; collectives address at most {MAX_BYTES}",
                    b.chip,
                    off + len
                )));
            }
            Ok(off as u32)
        };
        args.push(KernelArg::Scalar(check(
            "input",
            b.input.offset,
            self.input_bytes(),
        )?));
        args.push(KernelArg::Scalar(check(
            "output",
            b.output.offset,
            self.output_bytes(),
        )?));
        args.push(KernelArg::Scalar(check(
            "scratch",
            scr_off,
            self.scratch_bytes(),
        )?));
        for &a in &self.spec.axes {
            let n = topo.mesh[a];
            let mut c = coords.to_vec();
            args.push(KernelArg::Scalar(coords[a]));
            c[a] = (coords[a] + 1) % n;
            args.push(KernelArg::Scalar(Self::chip_at(topo, &c)));
            c[a] = (coords[a] + n - 1) % n;
            args.push(KernelArg::Scalar(Self::chip_at(topo, &c)));
        }
        if self.spec.op == CollectiveOp::AllToAll {
            let (key, rank) = self.group_and_rank(topo, b.chip)?;
            args.push(KernelArg::Scalar(rank));
            args.push(KernelArg::Scalar(Self::chip_at(topo, &key)));
        }
        Ok(args)
    }

    /// Checks that the chips form whole groups and that the buffers are consistent; returns the
    /// launch targets (core 0 of every chip).
    pub fn targets(
        &self,
        topo: &Topology,
        bufs: &[ChipBuffers],
        scratch: &[BufferSlice],
    ) -> Result<Vec<LaunchTarget>, CollectiveError> {
        if bufs.is_empty() {
            return Err(bad("no chips given".into()));
        }
        if self.plan.scratch_bytes > 0 && scratch.len() != bufs.len() {
            return Err(bad(format!(
                "{} scratch buffers for {} chips",
                scratch.len(),
                bufs.len()
            )));
        }
        let mut groups: HashMap<Vec<u32>, (u32, Vec<u64>)> = HashMap::new();
        let mut seen = HashMap::new();
        for b in bufs {
            if seen.insert(b.chip, ()).is_some() {
                return Err(bad(format!("chip {} is given twice", b.chip)));
            }
            let (key, _) = self.group_and_rank(topo, b.chip)?;
            let g = groups.entry(key).or_insert((0, Vec::new()));
            g.0 += 1;
            g.1.push(b.output.offset);
            if b.input.buffer == b.output.buffer {
                let (i0, i1) = (b.input.offset, b.input.offset + self.input_bytes());
                let (o0, o1) = (b.output.offset, b.output.offset + self.output_bytes());
                if i0 < o1 && o0 < i1 {
                    return Err(bad(format!(
                        "chip {}: input bytes [{i0}, {i1}) and output bytes [{o0}, {o1}) of buffer {} overlap",
                        b.chip, b.input.buffer.0
                    )));
                }
            }
        }
        let remote_out = self.spec.op != CollectiveOp::ReduceScatter;
        for (key, (count, offs)) in &groups {
            if *count != self.plan.group {
                return Err(bad(format!(
                    "the group at {key:?} (axes {:?} set to 0) has {count} of its {} chips; a collective runs on whole groups",
                    self.spec.axes, self.plan.group
                )));
            }
            if remote_out && offs.iter().any(|o| *o != offs[0]) {
                return Err(bad(format!(
                    "{}: output offsets differ within the group at {key:?} ({offs:?}); peers write each other's outputs, so they must be equal",
                    self.spec.op.name()
                )));
            }
        }
        if let Some(s) = scratch.first()
            && scratch.iter().any(|x| x.offset != s.offset)
        {
            return Err(bad("scratch offsets must be equal on every chip".into()));
        }
        bufs.iter()
            .enumerate()
            .map(|(i, b)| {
                Ok(LaunchTarget {
                    core: CoreRef {
                        chip: b.chip,
                        core: 0,
                    },
                    args: self.args(topo, b, scratch.get(i).copied())?,
                })
            })
            .collect()
    }

    /// Launches the collective (its program already loaded as `program`), allocating scratch
    /// on every chip when needed and freeing it once launched. Returns at once; wait on the
    /// launch for completion or a fault.
    pub fn launch(
        &self,
        dev: &dyn Device,
        program: ProgramId,
        bufs: &[ChipBuffers],
        submit_ns: f64,
    ) -> Result<LaunchId, CollectiveError> {
        self.launch_with(dev, program, bufs, submit_ns, &|l| dev.launch(l))
    }

    /// [`Collective::launch`] through `launch` instead of [`Device::launch`] (say an
    /// emulator's launch of a translation-symmetric program, see
    /// [`Collective::translation_symmetric`]).
    pub fn launch_with(
        &self,
        dev: &dyn Device,
        program: ProgramId,
        bufs: &[ChipBuffers],
        submit_ns: f64,
        launch: &dyn Fn(&tpuemu_isa::Launch) -> Result<LaunchId, DeviceError>,
    ) -> Result<LaunchId, CollectiveError> {
        let topo = dev.topology();
        let mut scratch = Vec::new();
        let free = |s: &[BufferSlice]| {
            for x in s {
                let _ = dev.free(x.buffer);
            }
        };
        if self.plan.scratch_bytes > 0 {
            for b in bufs {
                match dev.alloc(b.chip, self.plan.scratch_bytes) {
                    Ok(id) => scratch.push(BufferSlice::whole(id)),
                    Err(e) => {
                        free(&scratch);
                        return Err(e.into());
                    }
                }
            }
        }
        let result = self.targets(topo, bufs, &scratch).and_then(|targets| {
            Ok(launch(&tpuemu_isa::Launch {
                program,
                targets,
                submit_ns,
                op_id: None,
                group_id: None,
            })?)
        });
        free(&scratch);
        result
    }

    /// Whether every chip's run is a translation of any other's when every chip of `topo`
    /// runs the collective with buffers at the same offsets: a ring collective (not an
    /// all-to-all) whose rings all close in one hop (every axis of more than two chips wraps,
    /// or is the data-centre network, and the ring choice does not force two chains onto a
    /// line). An emulator may then simulate one chip for all
    /// (`tpuemu_emulator::Emulator::launch_symmetric`).
    pub fn translation_symmetric(&self, topo: &Topology) -> bool {
        self.spec.op != CollectiveOp::AllToAll
            && self.spec.axes.iter().all(|&a| {
                topo.mesh[a] <= 2
                    || topo.dcn_axis == Some(a)
                    || topo.wraparound.get(a).copied().unwrap_or(false)
            })
    }
}

/// Generates, loads, launches and waits for one collective: the simplest way to run one.
pub fn run(
    dev: &dyn Device,
    spec: &CollectiveSpec,
    bufs: &[ChipBuffers],
    submit_ns: f64,
) -> Result<Completion, CollectiveError> {
    let c = Collective::new(spec, dev.topology())?;
    let pid = dev.load(c.program())?;
    let id = c.launch(dev, pid, bufs, submit_ns)?;
    Ok(dev.wait(id)?)
}
