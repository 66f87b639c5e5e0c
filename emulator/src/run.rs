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
        if args.len() != program.args.len() {
            return Err(DeviceError::InvalidRequest(format!(
                "program `{}` takes {} arguments, {} given",
                program.name,
                program.args.len(),
                args.len()
            )));
        }
        let mut bufs: Vec<Option<BufferId>> = Vec::new();
        let mut kargs = Vec::new();
        let cleanup = |dev: &Emulator, bufs: &[Option<BufferId>]| {
            for b in bufs.iter().flatten() {
                let _ = dev.free(*b);
            }
        };
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
                    let id = match self.alloc(0, size) {
                        Ok(id) => id,
                        Err(e) => {
                            cleanup(self, &bufs);
                            return Err(e);
                        }
                    };
                    if let ArgInit::Bytes(b) = a {
                        self.write(id, 0, b, 0.0)?;
                    }
                    bufs.push(Some(id));
                    kargs.push(KernelArg::Buffer(id));
                }
                _ => {
                    cleanup(self, &bufs);
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
        let result = (|| {
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
            let seconds = stats.cycles() as f64 / self.preset().clock_hz;
            let mut buffers = Vec::new();
            for (b, a) in bufs.iter().zip(args) {
                let size = match a {
                    ArgInit::Bytes(b) => b.len(),
                    ArgInit::Zeroed(n) => *n as usize,
                    ArgInit::Scalar(_) => 0,
                };
                let mut out = vec![0u8; if read_back { size } else { 0 }];
                if let Some(id) = b
                    && read_back
                {
                    self.read(*id, 0, &mut out, 0.0)?;
                }
                buffers.push(out);
            }
            Ok(RunResult {
                buffers,
                stats,
                seconds,
            })
        })();
        cleanup(self, &bufs);
        result
    }
}
