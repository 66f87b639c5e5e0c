//! Running one program by hand: allocate its buffers, fill them, launch, read them back.
//!
//! What `tpuemu run`, the benches and the tests use when there is no backend in between.

use tpuemu_isa::{
    ArgKind, BufferId, CoreRef, Device, DeviceError, KernelArg, Launch, LaunchTarget, Program,
};

use crate::Emulator;
use crate::stats::LaunchStats;

/// How to bind one argument.
#[derive(Clone, Debug)]
pub enum ArgInit {
    /// A buffer holding these bytes.
    Bytes(Vec<u8>),
    /// A zero-filled buffer of this many bytes.
    Zeroed(u64),
    /// A scalar.
    Scalar(u32),
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Contents of every buffer argument after the run (empty for scalars; empty too when the
    /// run was timing only).
    pub buffers: Vec<Vec<u8>>,
    /// What the launch did.
    pub stats: LaunchStats,
    /// Simulated time of the kernel, seconds.
    pub seconds: f64,
}

impl Emulator {
    /// Runs `program` on core `core` of chip 0 with `args` (one per slot) and returns the buffers.
    /// With `read_back` false, buffers are not copied back (for big timing-only runs).
    pub fn run_program(
        &self,
        program: &Program,
        args: &[ArgInit],
        cores: &[u32],
        read_back: bool,
    ) -> Result<RunResult, DeviceError> {
        let (stats, buffers) = self.run_program_then(program, args, cores, |dev, ids| {
            let mut buffers = Vec::new();
            for (b, a) in ids.iter().zip(args) {
                let size = match a {
                    ArgInit::Bytes(b) => b.len(),
                    ArgInit::Zeroed(n) => usize::try_from(*n).unwrap_or(usize::MAX),
                    ArgInit::Scalar(_) => 0,
                };
                let mut out = Vec::new();
                if let Some(id) = b
                    && read_back
                {
                    out.try_reserve_exact(size).map_err(|_| {
                        DeviceError::InvalidRequest(format!(
                            "cannot hold a {size}-byte buffer in host memory to read it back"
                        ))
                    })?;
                    out.resize(size, 0);
                    dev.read(*id, 0, &mut out, 0.0)?;
                }
                buffers.push(out);
            }
            Ok(buffers)
        })?;
        let seconds = stats.cycles() as f64 / self.preset().clock_hz;
        Ok(RunResult {
            buffers: buffers?,
            stats,
            seconds,
        })
    }

    /// Runs `program` as [`Emulator::run_program`] does, then calls `then` with the device and
    /// the buffer of every argument slot (`None` for scalars) while they still exist, so that a
    /// caller can read large results piece by piece; the buffers are freed afterwards.
    pub fn run_program_then<T>(
        &self,
        program: &Program,
        args: &[ArgInit],
        cores: &[u32],
        then: impl FnOnce(&Emulator, &[Option<BufferId>]) -> T,
    ) -> Result<(LaunchStats, T), DeviceError> {
        if args.len() != program.args.len() {
            return Err(DeviceError::InvalidRequest(format!(
                "program `{}` takes {} arguments, {} given",
                program.name,
                program.args.len(),
                args.len()
            )));
        }
        let mut bufs: Vec<Option<BufferId>> = Vec::new();
        let result = (|| {
            let mut kargs = Vec::new();
            for (a, decl) in args.iter().zip(&program.args) {
                match (a, decl.kind) {
                    (ArgInit::Scalar(v), ArgKind::Scalar) => {
                        bufs.push(None);
                        kargs.push(KernelArg::Scalar(*v));
                    }
                    (ArgInit::Bytes(_) | ArgInit::Zeroed(_), ArgKind::Buffer) => {
                        let size = match a {
                            ArgInit::Bytes(b) => b.len() as u64,
                            ArgInit::Zeroed(n) => *n,
                            ArgInit::Scalar(_) => 0,
                        };
                        let id = self.alloc(0, size)?;
                        bufs.push(Some(id));
                        if let ArgInit::Bytes(b) = a {
                            self.write(id, 0, b, 0.0)?;
                        }
                        kargs.push(KernelArg::Buffer(id));
                    }
                    _ => {
                        return Err(DeviceError::InvalidRequest(format!(
                            "argument `{}` is a {}; give it a {}",
                            decl.name,
                            decl.kind.name(),
                            if decl.kind == ArgKind::Buffer {
                                "buffer"
                            } else {
                                "scalar value"
                            }
                        )));
                    }
                }
            }
            let pid = self.load(program)?;
            let submit = self.synchronize()?.end_ns;
            let targets = cores
                .iter()
                .map(|c| LaunchTarget {
                    core: CoreRef { chip: 0, core: *c },
                    args: kargs.clone(),
                })
                .collect();
            let id = self.launch(&Launch {
                program: pid,
                targets,
                submit_ns: submit,
                op_id: None,
                group_id: None,
            })?;
            self.wait(id)?;
            let stats = self.stats(id).expect("launch exists");
            Ok((stats, then(self, &bufs)))
        })();
        for b in bufs.iter().flatten() {
            let _ = self.free(*b);
        }
        result
    }
}
