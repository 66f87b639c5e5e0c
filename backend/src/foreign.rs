//! What a foreign framework's bridge needs from the backend (the PyTorch bridge, `python/`).
//!
//! A framework such as PyTorch owns its tensors' metadata (shape, strides, offset, dtype) and
//! keeps only a handle to device memory; it asks the backend for storages by byte size, builds
//! backend tensors over them to run operators, and moves bytes between the host and any strided
//! view. The host↔device path moves raw little-endian bytes, so it is exact for every element
//! type — also for types the backend cannot compute with (float64, int8, ...), whose storages
//! simply hold the framework's bytes.

use crate::dtype::DType;
use crate::error::{Result, TpuError};
use crate::layout::Layout;
use crate::runtime::Runtime;
use crate::storage::StorageRef;
use crate::tensor::Tensor;

pub use crate::raw_view::RawView;

impl Tensor {
    /// A tensor over `storage` (which the caller allocated with [`Runtime::alloc_storage`]),
    /// seen through `shape`, `strides` and `offset` (elements).
    pub fn from_storage(
        rt: &Runtime,
        storage: StorageRef,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        dtype: DType,
    ) -> Result<Tensor> {
        let layout = Layout {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
        };
        if shape.len() != strides.len() || strides.iter().any(|s| *s < 0) {
            return Err(TpuError::BadArgs(format!(
                "layout {shape:?} / {strides:?} is not a strided view"
            )));
        }
        let (_, hi) = layout.storage_span();
        if layout.numel() > 0 && (hi * dtype.size()) as u64 > storage.bytes() {
            return Err(TpuError::BadArgs(format!(
                "view {shape:?} / {strides:?} + {offset} of {dtype} reaches past a storage of {} bytes",
                storage.bytes()
            )));
        }
        Ok(Tensor::from_parts(rt.clone(), storage, layout, dtype))
    }

    /// The storage the tensor views (its identity is [`Storage::id`]).
    pub fn storage(&self) -> &StorageRef {
        &self.storage
    }
}

impl Runtime {
    /// A new storage of `bytes` bytes, reserved in the chip's HBM now (out of memory when the
    /// live storages leave too little); device memory is allocated when it is first written.
    pub fn alloc_storage(&self, bytes: u64) -> Result<StorageRef> {
        let mut st = self.lock();
        self.new_storage(&mut st, bytes)
    }

    /// Copies `data` (the view's elements, row-major) into a strided view of `storage`. The
    /// write comes after every operator called before it: a DeferAndFuse graph that uses the
    /// storage runs first ("host to device copy").
    pub fn write_view(&self, storage: &StorageRef, view: &RawView, data: &[u8]) -> Result<()> {
        view.check_write(storage, data)?;
        if data.is_empty() {
            return Ok(());
        }
        let (lo, hi) = view.span();
        let es = view.elem_size;
        let bytes = if view.is_dense() {
            std::borrow::Cow::Borrowed(data)
        } else {
            // Read the span, scatter the elements into it, write it back.
            let mut span = self.read_bytes(storage, (lo * es) as u64, (hi - lo) * es)?;
            view.scatter(lo, data, &mut span);
            std::borrow::Cow::Owned(span)
        };
        self.write_bytes(storage, (lo * es) as u64, &bytes)
    }

    /// The elements of a strided view of `storage`, row-major, as raw bytes (a synchronisation
    /// point: everything recorded runs and every kernel is waited for).
    pub fn read_view(&self, storage: &StorageRef, view: &RawView) -> Result<Vec<u8>> {
        view.check(storage)?;
        let es = view.elem_size;
        let (lo, hi) = view.span();
        let span = self.read_bytes(storage, (lo * es) as u64, (hi - lo) * es)?;
        Ok(view.gather(lo, span))
    }

    /// Copies the first `bytes` bytes of `src` into `dst` (growing a storage: PyTorch's
    /// `resize_`), through the host.
    pub fn copy_storage_bytes(&self, src: &StorageRef, dst: &StorageRef, bytes: u64) -> Result<()> {
        let n = bytes.min(src.bytes()).min(dst.bytes());
        if n == 0 {
            return Ok(());
        }
        let data = self.read_bytes(src, 0, n as usize)?;
        self.write_bytes(dst, 0, &data)
    }

    /// Bytes of HBM in use on the runtime's chip.
    pub fn hbm_in_use(&self) -> u64 {
        self.collect_frees();
        self.inner.device.hbm_in_use(self.inner.chip)
    }

    /// Bytes reserved by this runtime's live storages (each from the call that made it; a new
    /// storage must fit beside them in the chip's HBM).
    pub fn memory_reserved(&self) -> u64 {
        self.inner.pool.reserved()
    }

    /// Records a span of host work done outside the backend (a PyTorch operator run on the
    /// CPU, a Python-level call) on the host lane `lane` of the trace, from `start_ns` to
    /// `end_ns` of the simulated host clock (when profiling).
    pub fn record_host_span(&self, lane: &str, name: &str, start_ns: f64, end_ns: f64) {
        let mut st = self.lock();
        if st.core.prof.on {
            let s = tpuemu_isa::trace::Span::new(
                tpuemu_isa::trace::Track::Host {
                    lane: lane.to_string(),
                },
                name.to_string(),
                start_ns,
                end_ns.max(start_ns),
            );
            st.core
                .prof
                .events
                .push(tpuemu_isa::trace::TraceEvent::Span(s));
        }
    }

    /// Advances the simulated host clock by `ns` of host work the backend does not see, of
    /// kind `what` (`Metrics::host_ns_by`).
    pub fn charge_host_ns(&self, what: &str, ns: f64) {
        self.lock().core.q.charge(what, ns.max(0.0));
    }

    fn read_bytes(&self, storage: &StorageRef, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.download(storage, offset as usize, len)
    }

    fn write_bytes(&self, storage: &StorageRef, offset: u64, data: &[u8]) -> Result<()> {
        let buf = self.ensure_buffer(storage)?;
        let mut st = self.lock();
        let held = st.exec.holds(storage.id());
        if held && st.exec.mode().is_none() {
            return Err(TpuError::Unsupported(
                "a host-to-device copy into a tensor the graph being compiled uses".into(),
            ));
        }
        if held {
            st.flush(self, "host to device copy")?;
        }
        if offset == 0 && data.len() as u64 == storage.bytes() {
            // Written whole from the host: a value that was not computed is replaced.
            st.checks.overwritten(storage);
            st.core.q.overwritten(storage);
        }
        let q = &mut st.core.q;
        let done = self
            .inner
            .device
            .write(buf, offset, data, q.start_ns([buf]))?;
        q.host_ns = q.host_ns.max(done.end_ns);
        q.metrics.h2d_transfers += 1;
        q.metrics.h2d_bytes += data.len() as u64;
        Ok(())
    }
}
