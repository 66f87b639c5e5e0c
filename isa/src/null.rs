//! [`NullDevice`]: a [`Device`] that keeps track of what it is asked to hold and runs nothing,
//! for tests of code above the device (allocation, program loading, launch bookkeeping) that
//! need no emulator.
//!
//! It checks requests as a device must (unknown buffers, ranges outside a buffer, unknown
//! programs, empty launches and argument counts are errors), accounts HBM, stores written
//! bytes in pages made on first write (reads give them back, zeros elsewhere: a large buffer
//! costs only what is written), and completes every launch at once, on a clock that never
//! advances: launches compute nothing and take no time.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::device::{
    BufferId, ChipId, ChipInfo, Completion, CoreInfo, Device, DeviceError, Launch, LaunchId,
    ProgramId, Topology,
};
use crate::program::Program;
use crate::trace::TraceEvent;

/// Bytes per stored page.
const PAGE: u64 = 4096;

/// A buffer: its chip, size, and the pages written.
struct Buffer {
    chip: ChipId,
    size: u64,
    pages: HashMap<u64, Box<[u8]>>,
}

#[derive(Default)]
struct State {
    buffers: HashMap<u64, Buffer>,
    next_buffer: u64,
    programs: Vec<(String, usize)>,
    launches: u64,
    in_use: Vec<u64>,
}

/// A device that runs nothing (see the module documentation).
pub struct NullDevice {
    topology: Topology,
    state: Mutex<State>,
}

impl NullDevice {
    /// `chips` chips in a line, each with `hbm_bytes` of HBM and one core.
    pub fn new(chips: u32, hbm_bytes: u64) -> Self {
        let core = CoreInfo {
            vmem_bytes: 16 << 20,
            smem_bytes: 1 << 20,
            vregs: 32,
            mxus: 1,
            mxu_rows: 128,
            mxu_cols: 128,
            dma_engines: 1,
            clock_hz: 1e9,
        };
        let topology = Topology {
            generation: "null".into(),
            mesh: vec![chips],
            wraparound: vec![false],
            dcn_axis: None,
            chips: (0..chips)
                .map(|id| ChipInfo {
                    id,
                    coords: vec![id],
                    cores: 1,
                    hbm_bytes,
                    hbm_bytes_per_s: 1e12,
                    hbm_latency_ns: 0.0,
                    peak_bf16_flops: 0.0,
                    core: core.clone(),
                })
                .collect(),
        };
        NullDevice {
            topology,
            state: Mutex::new(State {
                next_buffer: 1,
                in_use: vec![0; chips as usize],
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks `[offset, offset + len)` of `buffer` and returns the buffer.
    fn range(
        s: &mut State,
        buffer: BufferId,
        offset: u64,
        len: usize,
    ) -> Result<&mut Buffer, DeviceError> {
        let b = s.buffers.get_mut(&buffer.0).ok_or_else(|| {
            DeviceError::InvalidRequest(format!("buffer {} does not exist (freed?)", buffer.0))
        })?;
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > b.size)
        {
            return Err(DeviceError::InvalidRequest(format!(
                "bytes [{offset}, {}) are outside buffer {} of {} bytes",
                offset.saturating_add(len as u64),
                buffer.0,
                b.size
            )));
        }
        Ok(b)
    }
}

fn at(ns: f64) -> Completion {
    Completion {
        start_ns: ns,
        end_ns: ns,
        counters: Default::default(),
    }
}

impl Device for NullDevice {
    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn alloc(&self, chip: ChipId, bytes: u64) -> Result<BufferId, DeviceError> {
        let Some(info) = self.topology.chips.get(chip as usize) else {
            return Err(DeviceError::InvalidRequest(format!(
                "chip {chip} does not exist ({} chips)",
                self.topology.chips.len()
            )));
        };
        let mut s = self.lock();
        let used = s.in_use[chip as usize];
        if bytes > info.hbm_bytes - used {
            return Err(DeviceError::OutOfMemory {
                chip,
                asked: bytes,
                free: info.hbm_bytes - used,
                capacity: info.hbm_bytes,
            });
        }
        let id = s.next_buffer;
        s.next_buffer += 1;
        s.in_use[chip as usize] += bytes;
        let pages = HashMap::new();
        s.buffers.insert(
            id,
            Buffer {
                chip,
                size: bytes,
                pages,
            },
        );
        Ok(BufferId(id))
    }

    fn free(&self, buffer: BufferId) -> Result<(), DeviceError> {
        let mut s = self.lock();
        let b = s.buffers.remove(&buffer.0).ok_or_else(|| {
            DeviceError::InvalidRequest(format!("buffer {} does not exist (freed?)", buffer.0))
        })?;
        s.in_use[b.chip as usize] -= b.size;
        Ok(())
    }

    fn hbm_in_use(&self, chip: ChipId) -> u64 {
        self.lock().in_use.get(chip as usize).copied().unwrap_or(0)
    }

    fn write(
        &self,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
        submit_ns: f64,
    ) -> Result<Completion, DeviceError> {
        let mut s = self.lock();
        let b = Self::range(&mut s, buffer, offset, data.len())?;
        for (i, x) in data.iter().enumerate() {
            let pos = offset + i as u64;
            let page = b
                .pages
                .entry(pos / PAGE)
                .or_insert_with(|| vec![0; PAGE as usize].into_boxed_slice());
            page[(pos % PAGE) as usize] = *x;
        }
        Ok(at(submit_ns))
    }

    fn read(
        &self,
        buffer: BufferId,
        offset: u64,
        out: &mut [u8],
        submit_ns: f64,
    ) -> Result<Completion, DeviceError> {
        let mut s = self.lock();
        let b = Self::range(&mut s, buffer, offset, out.len())?;
        for (i, x) in out.iter_mut().enumerate() {
            let pos = offset + i as u64;
            *x = b
                .pages
                .get(&(pos / PAGE))
                .map_or(0, |p| p[(pos % PAGE) as usize]);
        }
        Ok(at(submit_ns))
    }

    fn load(&self, program: &Program) -> Result<ProgramId, DeviceError> {
        let mut s = self.lock();
        s.programs.push((program.name.clone(), program.args.len()));
        Ok(ProgramId(s.programs.len() as u64 - 1))
    }

    fn launch(&self, launch: &Launch) -> Result<LaunchId, DeviceError> {
        let mut s = self.lock();
        let Some((name, nargs)) = s.programs.get(launch.program.0 as usize).cloned() else {
            return Err(DeviceError::InvalidRequest(format!(
                "program {} was never loaded",
                launch.program.0
            )));
        };
        if launch.targets.is_empty() {
            return Err(DeviceError::InvalidRequest(
                "a launch needs at least one target core".into(),
            ));
        }
        for t in &launch.targets {
            if t.args.len() != nargs {
                return Err(DeviceError::InvalidRequest(format!(
                    "program `{name}` takes {nargs} arguments, the launch gives {}",
                    t.args.len()
                )));
            }
        }
        s.launches += 1;
        Ok(LaunchId(s.launches - 1))
    }

    fn wait(&self, launch: LaunchId) -> Result<Completion, DeviceError> {
        if launch.0 >= self.lock().launches {
            return Err(DeviceError::InvalidRequest(format!(
                "launch {} does not exist",
                launch.0
            )));
        }
        Ok(at(0.0))
    }

    fn synchronize(&self) -> Result<Completion, DeviceError> {
        Ok(at(0.0))
    }

    fn set_profiling(&self, _on: bool) {}

    fn drain_events(&self) -> Vec<TraceEvent> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{CoreRef, KernelArg, LaunchTarget};
    use crate::text::assemble;

    #[test]
    fn holds_bytes_accounts_memory_and_checks_requests() {
        let d = NullDevice::new(2, 1 << 40);
        // A terabyte buffer costs only the page written.
        let big = d.alloc(0, 1 << 39).unwrap();
        d.write(big, (1 << 39) - 2, &[7, 8], 0.0).unwrap();
        let mut two = [0u8; 2];
        d.read(big, (1 << 39) - 2, &mut two, 0.0).unwrap();
        assert_eq!(two, [7, 8]);
        d.free(big).unwrap();
        let b = d.alloc(1, 1000).unwrap();
        assert_eq!(d.hbm_in_use(1), 1000);
        assert_eq!(d.hbm_in_use(0), 0);
        d.write(b, 10, &[1, 2, 3], 0.0).unwrap();
        let mut out = [9u8; 5];
        d.read(b, 9, &mut out, 0.0).unwrap();
        assert_eq!(out, [0, 1, 2, 3, 0]);
        assert!(d.read(b, 998, &mut out, 0.0).is_err(), "past the end");
        assert!(matches!(
            d.alloc(0, 2 << 40),
            Err(DeviceError::OutOfMemory { .. })
        ));
        assert!(d.alloc(5, 1).is_err(), "no chip 5");
        d.free(b).unwrap();
        assert_eq!(d.hbm_in_use(1), 0);
        assert!(d.free(b).is_err(), "freed twice");
    }

    #[test]
    fn launches_complete_at_once_and_bad_ones_are_refused() {
        let d = NullDevice::new(1, 1 << 20);
        let p = assemble(".program k\n.arg x buffer\n halt\n").unwrap();
        let pid = d.load(&p).unwrap();
        let b = d.alloc(0, 64).unwrap();
        let target = |args| LaunchTarget {
            core: CoreRef { chip: 0, core: 0 },
            args,
        };
        let launch = |targets| Launch {
            program: pid,
            targets,
            submit_ns: 5.0,
            op_id: None,
            group_id: None,
        };
        let id = d
            .launch(&launch(vec![target(vec![KernelArg::Buffer(b)])]))
            .unwrap();
        assert_eq!(d.wait(id).unwrap().end_ns, 0.0);
        assert!(d.wait(LaunchId(id.0 + 1)).is_err());
        assert!(d.launch(&launch(vec![])).is_err(), "no target");
        assert!(
            d.launch(&launch(vec![target(vec![])])).is_err(),
            "arguments"
        );
        let mut other = launch(vec![target(vec![KernelArg::Buffer(b)])]);
        other.program = ProgramId(7);
        assert!(d.launch(&other).is_err(), "never loaded");
        d.synchronize().unwrap();
        assert!(d.drain_events().is_empty());
    }
}
