//! The built-in presets: v4, v5e, v5p, v6e, v7x from public figures, and `scalesim-ws-128`, the
//! SCALE-Sim parity configuration.
//!
//! Source tags: `[GC]` Google Cloud TPU architecture pages, `[SB]` "How to Scale Your Model",
//! `[TI]` `jax/_src/tpu_info.py`, `[PD]` Pallas TPU docs,
//! `[HC20]` Norrie and Patil, "Google's Training Chips Revealed: TPUv2 and TPUv3", Hot Chips 32
//! (2020): the TensorCore's 322-bit VLIW bundle (the later generations keep its structure).
//! Where no public figure exists the source says "assumed" and why the value was chosen.
//!
//! The clock is the parameter that makes the derived peak equal the published peak exactly:
//! `clock = peak / (cores x MXUs x rows x cols x 2)`. For v4, v5e and v5p that lands on the
//! published or derived clock (1.05, 1.50, 1.75 GHz). For v6e and v7x the published MXU count
//! (2 per core of 256x256) needs a 3.5 / 4.4 GHz clock and no clock is published: v7x models 4
//! MXUs per core at 2.2 GHz (the MXU count absorbs the difference); v6e keeps the published 2 at
//! 3.502 GHz, its clock declared as the preset's one calibrated figure (fitted to a published
//! run; the source of `clock_hz` gives the arithmetic).

use std::collections::BTreeMap;

use super::{ChipPreset, Costs, MxuModel};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// 10^9 bytes: the unit Google states v5e's and v6e's HBM in.
const GB: u64 = 1_000_000_000;

/// Names of the built-in presets.
pub fn builtin_names() -> &'static [&'static str] {
    &["v4", "v5e", "v5p", "v6e", "v7x", "scalesim-ws-128"]
}

/// A built-in preset by name.
pub fn builtin(name: &str) -> Option<ChipPreset> {
    Some(match name {
        "v4" => v4(),
        "v5e" => v5e(),
        "v5p" => v5p(),
        "v6e" => v6e(),
        "v7x" => v7x(),
        "scalesim-ws-128" => scalesim_ws_128(),
        _ => return None,
    })
}

fn costs() -> Costs {
    Costs {
        scalar_slots: 2,
        valu_slots: 2,
        vector_units: 1,
        scalar_latency: 1,
        sld_latency: 2,
        branch_taken: 1,
        valu_occupancy: 1,
        valu_latency: 2,
        vld_occupancy: 1,
        vld_latency: 2,
        vld_strided_occupancy: 8,
        vst_occupancy: 1,
        eup_occupancy: 2,
        eup_latency: 8,
        xlu_reduce_occupancy: 4,
        xlu_reduce_latency: 8,
        xlu_permute_occupancy: 2,
        xlu_permute_latency: 4,
        xlu_gather_occupancy: 8,
        dma_issue: 2,
        dma_burst_bytes: 32,
        dma_local_bytes_per_cycle: 512,
        pop_rows_per_cycle: 1,
        sem_latency: 2,
        barrier_latency: 16,
        kernel_launch: 200,
        mxu_queue_depth: 8,
        dma_queue_depth: 16,
    }
}

/// Sources shared by every generation (costs without public per-generation figures).
fn common_sources() -> BTreeMap<String, String> {
    let s = |k: &str, v: &str| (k.to_string(), v.to_string());
    [
        s("costs.scalar_slots", "[HC20] the VLIW bundle has 2 scalar slots"),
        s("costs.valu_slots", "[HC20] the VLIW bundle has 4 vector slots: 2 ALU, 1 load, 1 store"),
        s(
            "costs.vector_units",
            "[HC20,SB] one vector unit of 8x128 lanes per TensorCore, as the bundle above",
        ),
        s("costs.scalar_latency", "assumed: single-cycle scalar ALU, as in any in-order core"),
        s("costs.sld_latency", "assumed: SMEM is an SRAM next to the scalar unit; 2 cycles"),
        s("costs.branch_taken", "assumed: one bubble for a taken branch in the in-order front end"),
        s("costs.valu_occupancy", "[SB] most vector ops issue one per cycle"),
        s("costs.valu_latency", "[SB] ~2 cycles latency for most vector ops"),
        s("costs.vld_occupancy", "[SB] v5p loads up to 3 vregs per cycle from VMEM; one load slot modelled"),
        s("costs.vld_latency", "assumed: same as vector ALU latency ([SB] ~2 cycles)"),
        s(
            "costs.vld_strided_occupancy",
            "assumed: non-dense lane strides go element-wise through the sublane path; 8 cycles (one per sublane)",
        ),
        s("costs.vst_occupancy", "[SB] v5p stores 1 vreg per cycle to VMEM"),
        s(
            "costs.eup_occupancy",
            "assumed: the transcendental unit takes a vreg every 2 cycles (no public figure)",
        ),
        s("costs.eup_latency", "assumed: 8 cycles, a polynomial/Newton pipeline (no public figure)"),
        s(
            "costs.xlu_reduce_occupancy",
            "[SB] cross-lane work goes through a slower cross-lane unit; 4 cycles assumed",
        ),
        s("costs.xlu_reduce_latency", "assumed: log2(128) = 7 tree levels + 1"),
        s("costs.xlu_permute_occupancy", "assumed: half the reduction cost (one pass through the XLU)"),
        s("costs.xlu_permute_latency", "assumed: 4 cycles"),
        s("costs.xlu_gather_occupancy", "assumed: one cycle per sublane, as strided loads"),
        s("costs.dma_issue", "assumed: a descriptor takes 2 front-end cycles to issue"),
        s(
            "costs.dma_burst_bytes",
            "assumed: 32-byte HBM access granularity (HBM2e/HBM3 32-byte bursts per pseudo-channel)",
        ),
        s(
            "costs.dma_local_bytes_per_cycle",
            "assumed: VMEM-to-VMEM copies at one (8,128) f32 tile row per cycle: 512 B",
        ),
        s(
            "costs.pop_rows_per_cycle",
            "assumed: one result row (N f32 values) leaves the array per cycle, as rows enter",
        ),
        s("costs.sem_latency", "assumed: 2 cycles to update a local semaphore"),
        s("costs.barrier_latency", "assumed: 16 cycles for the last arrival to release all cores"),
        s(
            "costs.kernel_launch",
            "assumed: 200 cycles (~0.1 us) from kernel start to first instruction (argument setup)",
        ),
        s(
            "costs.mxu_queue_depth",
            "assumed: 8 matrix-unit commands in flight per unit before the front end stalls",
        ),
        s(
            "costs.dma_queue_depth",
            "assumed: 16 outstanding DMA descriptors per core before the front end stalls",
        ),
        s(
            "mxu_model",
            "TPU-like: weights double-buffered and rows streamed back to back [SB, chapter tpus: the MXU is a weight-stationary systolic array]",
        ),
        s("mxu_weight_buffers", "[SB] weights for the next tile load while the current tile computes"),
        s("hbm_latency_ns", "assumed: 400 ns, a typical HBM load-to-use latency; no TPU figure is published"),
        s("smem_bytes", "[TI] 1 MiB per TensorCore"),
        s("ici_hop_latency_ns", "[SB] about 1 us per hop (the collective latency floor)"),
        s("dma_engines", "assumed: 4 DMA engines per TensorCore (no public figure)"),
        s("host_link_bytes_per_s", "[SB] PCIe about 16 GB/s per chip"),
        s(
            "dcn_latency_ns",
            "assumed: 10 us one way through the data-centre network (no TPU figure is published; RDMA over a switched fabric takes microseconds to tens of microseconds)",
        ),
    ]
    .into_iter()
    .collect()
}

fn with_sources(mut p: ChipPreset, specific: &[(&str, &str)]) -> ChipPreset {
    p.sources = common_sources();
    for (k, v) in specific {
        p.sources.insert(k.to_string(), v.to_string());
    }
    p
}

/// `clock = peak / (cores x MXUs x rows x cols x 2)`.
fn clock_for(peak: f64, cores: u32, mxus: u32, rows: u32, cols: u32) -> f64 {
    peak / (cores as f64 * mxus as f64 * rows as f64 * cols as f64 * 2.0)
}

fn v4() -> ChipPreset {
    let p = ChipPreset {
        name: "v4".into(),
        description: "TPU v4: 2 TensorCores (megacore), 4 MXUs of 128x128 each, 275 TFLOP/s bf16"
            .into(),
        cores_per_chip: 2,
        mxus_per_core: 4,
        mxu_rows: 128,
        mxu_cols: 128,
        mxu_model: MxuModel::Pipelined,
        mxu_weight_buffers: 2,
        clock_hz: clock_for(275e12, 2, 4, 128, 128),
        hbm_bytes: 32 * GIB,
        hbm_bytes_per_s: 1.2e12,
        hbm_latency_ns: 400.0,
        vmem_bytes: 16 * MIB,
        smem_bytes: MIB,
        vregs: 32,
        dma_engines: 4,
        ici_dims: 3,
        ici_link_bytes_per_s: 45e9,
        ici_hop_latency_ns: 1000.0,
        ici_wrap_multiple: 4,
        host_link_bytes_per_s: 16e9,
        max_slice_shape: vec![],
        max_slice_chips: 4096,
        dcn_bytes_per_s: 6.25e9,
        dcn_latency_ns: 10_000.0,
        costs: costs(),
        sources: BTreeMap::new(),
    };
    with_sources(
        p,
        &[
            ("cores_per_chip", "[GC,TI] 2 TensorCores (megacore)"),
            ("mxus_per_core", "[GC,TI] 4 MXUs per TensorCore"),
            ("mxu_rows", "[GC,TI] 128x128 MXU"),
            ("mxu_cols", "[GC,TI] 128x128 MXU"),
            (
                "clock_hz",
                "derived: 275 TFLOP/s [GC] / (2 x 4 x 128 x 128 x 2) = 1.049 GHz",
            ),
            ("hbm_bytes", "[GC] 32 GiB"),
            ("hbm_bytes_per_s", "[GC] 1.2 TB/s"),
            (
                "vmem_bytes",
                "[TI] 16 MiB per TensorCore (the 128 MiB CMEM is not modelled)",
            ),
            ("vregs", "[SB] 32 vector registers"),
            ("ici_dims", "[GC] 3D torus, 6 neighbours"),
            ("ici_link_bytes_per_s", "[SB] 45 GB/s one-way per link"),
            (
                "ici_wrap_multiple",
                "[GC] wraparound on full 4x4x4 cubes joined by optical switches",
            ),
            (
                "max_slice_shape",
                "no largest shape published: only the chip count limits a slice",
            ),
            ("max_slice_chips", "[GC] TPU v4 Pod size: 4096 chips"),
            (
                "dcn_bytes_per_s",
                "[SB] data-centre network about 6.25 GB/s per chip (no per-generation figure)",
            ),
        ],
    )
}

fn v5e() -> ChipPreset {
    let p = ChipPreset {
        name: "v5e".into(),
        description: "TPU v5e: 1 TensorCore, 4 MXUs of 128x128, 197 TFLOP/s bf16, 16 GB HBM".into(),
        cores_per_chip: 1,
        mxus_per_core: 4,
        mxu_rows: 128,
        mxu_cols: 128,
        mxu_model: MxuModel::Pipelined,
        mxu_weight_buffers: 2,
        clock_hz: clock_for(197e12, 1, 4, 128, 128),
        hbm_bytes: 16 * GB,
        hbm_bytes_per_s: 8.2e11,
        hbm_latency_ns: 400.0,
        vmem_bytes: 128 * MIB,
        smem_bytes: MIB,
        vregs: 64,
        dma_engines: 4,
        ici_dims: 2,
        ici_link_bytes_per_s: 45e9,
        ici_hop_latency_ns: 1000.0,
        ici_wrap_multiple: 16,
        host_link_bytes_per_s: 16e9,
        max_slice_shape: vec![16, 16],
        max_slice_chips: 256,
        dcn_bytes_per_s: 3.125e9,
        dcn_latency_ns: 10_000.0,
        costs: costs(),
        sources: BTreeMap::new(),
    };
    with_sources(
        p,
        &[
            ("cores_per_chip", "[GC] 1 TensorCore"),
            ("mxus_per_core", "[GC] 4 MXUs"),
            ("mxu_rows", "[GC] 128x128 MXU"),
            ("mxu_cols", "[GC] 128x128 MXU"),
            (
                "clock_hz",
                "[SB] 1.5 GHz; set to 197 TFLOP/s [GC] / (4 x 128 x 128 x 2) = 1.503 GHz so the derived peak equals the published one (the published clock is rounded)",
            ),
            (
                "hbm_bytes",
                "[GC] 16 GB (10^9 bytes, as the vendor states it; reports show HBM in GB for this chip)",
            ),
            ("hbm_bytes_per_s", "[TI,SB] 8.2e11 B/s"),
            ("vmem_bytes", "[TI] 128 MiB"),
            (
                "vregs",
                "assumed: 64 as on v5p [SB] (no v5e figure published)",
            ),
            ("ici_dims", "[GC] 2D torus, 4 ports"),
            ("ici_link_bytes_per_s", "[SB] 45 GB/s one-way per link"),
            (
                "ici_wrap_multiple",
                "[GC] wraparound only on full 16-chip axes of the 16x16 pod",
            ),
            (
                "max_slice_shape",
                "[GC] TPU Pod size 256 chips, 2D torus: 16x16",
            ),
            ("max_slice_chips", "[GC] TPU Pod size: 256 chips"),
            (
                "dcn_bytes_per_s",
                "[GC] 6.4 Tbps data-centre network per 256-chip pod (2 x 100 Gbps NICs per 8-chip host): 25 Gbps = 3.125 GB/s per chip ([SB] gives about 6.25 GB/s per chip)",
            ),
        ],
    )
}

fn v5p() -> ChipPreset {
    let p = ChipPreset {
        name: "v5p".into(),
        description: "TPU v5p: 2 TensorCores (megacore), 4 MXUs of 128x128 each, 459 TFLOP/s bf16"
            .into(),
        cores_per_chip: 2,
        mxus_per_core: 4,
        mxu_rows: 128,
        mxu_cols: 128,
        mxu_model: MxuModel::Pipelined,
        mxu_weight_buffers: 2,
        clock_hz: clock_for(459e12, 2, 4, 128, 128),
        hbm_bytes: 95 * GIB,
        hbm_bytes_per_s: 2.765e12,
        hbm_latency_ns: 400.0,
        vmem_bytes: 64 * MIB,
        smem_bytes: MIB,
        vregs: 64,
        dma_engines: 4,
        ici_dims: 3,
        ici_link_bytes_per_s: 90e9,
        ici_hop_latency_ns: 1000.0,
        ici_wrap_multiple: 4,
        host_link_bytes_per_s: 16e9,
        max_slice_shape: vec![16, 16, 24],
        max_slice_chips: 6144,
        dcn_bytes_per_s: 6.25e9,
        dcn_latency_ns: 10_000.0,
        costs: costs(),
        sources: BTreeMap::new(),
    };
    with_sources(
        p,
        &[
            ("cores_per_chip", "[GC] 2 TensorCores (megacore)"),
            ("mxus_per_core", "[GC] 4 MXUs per TensorCore"),
            ("mxu_rows", "[GC] 128x128 MXU"),
            ("mxu_cols", "[GC] 128x128 MXU"),
            (
                "clock_hz",
                "[SB] ~1.75 GHz; exactly 459 TFLOP/s [GC] / (2 x 4 x 128 x 128 x 2) = 1.751 GHz",
            ),
            ("hbm_bytes", "[GC] 95 GiB usable"),
            (
                "hbm_bytes_per_s",
                "[GC] 2.765 TB/s (2.46 [TI], 2.8 [SB]); the [GC] figure is used",
            ),
            ("vmem_bytes", "[TI] 64 MiB"),
            ("vregs", "[SB] 64 vector registers"),
            ("ici_dims", "[GC] 3D torus"),
            ("ici_link_bytes_per_s", "[SB] 90 GB/s one-way per link"),
            ("ici_wrap_multiple", "[GC] wraparound on full 4x4x4 cubes"),
            (
                "max_slice_shape",
                "[GC] the maximum v5p shape is 16x16x24 (96 cubes)",
            ),
            (
                "max_slice_chips",
                "[GC] the largest job that can be scheduled is 96 cubes, 6144 chips (the pod has 8960)",
            ),
            (
                "dcn_bytes_per_s",
                "[GC] data-centre network bandwidth per chip 50 Gbps = 6.25 GB/s ([SB] the same)",
            ),
        ],
    )
}

fn v6e() -> ChipPreset {
    let p = ChipPreset {
        name: "v6e".into(),
        description: "TPU v6e (Trillium): 1 TensorCore, 2 MXUs of 256x256, 918 TFLOP/s bf16".into(),
        cores_per_chip: 1,
        mxus_per_core: 2,
        mxu_rows: 256,
        mxu_cols: 256,
        mxu_model: MxuModel::Pipelined,
        mxu_weight_buffers: 2,
        clock_hz: clock_for(918e12, 1, 2, 256, 256),
        hbm_bytes: 32 * GB,
        hbm_bytes_per_s: 1.64e12,
        hbm_latency_ns: 400.0,
        vmem_bytes: 128 * MIB,
        smem_bytes: MIB,
        vregs: 64,
        dma_engines: 4,
        ici_dims: 2,
        ici_link_bytes_per_s: 90e9,
        ici_hop_latency_ns: 1000.0,
        ici_wrap_multiple: 16,
        host_link_bytes_per_s: 32e9,
        max_slice_shape: vec![16, 16],
        max_slice_chips: 256,
        dcn_bytes_per_s: 6.25e9,
        dcn_latency_ns: 10_000.0,
        costs: costs(),
        sources: BTreeMap::new(),
    };
    with_sources(
        p,
        &[
            ("cores_per_chip", "[GC] 1 TensorCore"),
            ("mxus_per_core", "[GC,TI] 2 MXUs of 256x256"),
            ("mxu_rows", "[GC,TI] 256x256 MXU"),
            ("mxu_cols", "[GC,TI] 256x256 MXU"),
            (
                "clock_hz",
                "CALIBRATED (the one fitted figure of this preset): the clock is not published, and the published peak fixes only MXUs x clock. 918 TFLOP/s [GC] / (2 x 256 x 256 x 2) = 3.502 GHz with the published 2 MXUs, or 1.751 GHz with 4. Fitted to MaxText's Llama 3.1 8B on v6e-256 (seq 8192, 4 per chip, FSDP: 7,207 tokens/s/chip, 45.46% MFU; docs/reference/models/tiering.md): `tpuemu predict --model llama3.1-8b --slice v6e:16x16 --seq 8192 --batch-per-chip 4` gives 4,078 tokens/s at 1.751 GHz (0.57x) and 5,412 at 3.502 GHz (0.75x), so 3.502 GHz: the front end issues the vector work of the attention kernels, which bind the step, twice as fast (more vector units do not: at 3.502 GHz, `--set costs.vector_units=2` or 4 give 5,612 and 5,637, +4%). Validation: `tpuemu predict --table published`",
            ),
            (
                "hbm_bytes",
                "[GC] 32 GB (10^9 bytes, as the vendor states it)",
            ),
            ("hbm_bytes_per_s", "[GC] 1.64 TB/s"),
            ("vmem_bytes", "[TI] 128 MiB"),
            (
                "vregs",
                "assumed: 64 as on v5p [SB] (no v6e figure published)",
            ),
            ("ici_dims", "[GC] 2D torus, 4 ports"),
            ("ici_link_bytes_per_s", "[SB] 90 GB/s one-way per link"),
            (
                "ici_wrap_multiple",
                "[GC] wraparound only on full 16-chip axes of the 16x16 pod",
            ),
            (
                "host_link_bytes_per_s",
                "[SB] PCIe about 32 GB/s per chip on v6e",
            ),
            ("max_slice_shape", "[GC] 256 chips per pod, 2D torus: 16x16"),
            ("max_slice_chips", "[GC] 256 chips per pod"),
            (
                "dcn_bytes_per_s",
                "[SB] data-centre network about 6.25 GB/s per chip (no per-generation figure)",
            ),
        ],
    )
}

fn v7x() -> ChipPreset {
    let p = ChipPreset {
        name: "v7x".into(),
        description:
            "TPU v7x (Ironwood): 2 TensorCores, 256x256 MXUs, 2307 TFLOP/s bf16, 192 GiB HBM".into(),
        cores_per_chip: 2,
        mxus_per_core: 4,
        mxu_rows: 256,
        mxu_cols: 256,
        mxu_model: MxuModel::Pipelined,
        mxu_weight_buffers: 2,
        clock_hz: clock_for(2307e12, 2, 4, 256, 256),
        hbm_bytes: 192 * GIB,
        hbm_bytes_per_s: 7.38e12,
        hbm_latency_ns: 400.0,
        vmem_bytes: 64 * MIB,
        smem_bytes: MIB,
        vregs: 64,
        dma_engines: 4,
        ici_dims: 3,
        ici_link_bytes_per_s: 90e9,
        ici_hop_latency_ns: 1000.0,
        ici_wrap_multiple: 4,
        host_link_bytes_per_s: 16e9,
        max_slice_shape: vec![],
        max_slice_chips: 9216,
        dcn_bytes_per_s: 6.25e9,
        dcn_latency_ns: 10_000.0,
        costs: costs(),
        sources: BTreeMap::new(),
    };
    with_sources(
        p,
        &[
            (
                "cores_per_chip",
                "[GC,TI] 2 TensorCores, each its own device",
            ),
            (
                "mxus_per_core",
                "[TI] publishes 2 MXUs of 256x256; modelled as 4 so that the published peak needs a 2.2 GHz clock instead of 4.4 GHz (spec note 1: the MXU count absorbs the difference)",
            ),
            ("mxu_rows", "[TI] 256x256 MXU"),
            ("mxu_cols", "[TI] 256x256 MXU"),
            (
                "clock_hz",
                "not published; 2307 TFLOP/s [GC] / (2 x 4 x 256 x 256 x 2) = 2.2 GHz",
            ),
            ("hbm_bytes", "[GC] 192 GiB"),
            ("hbm_bytes_per_s", "[GC] 7.38 TB/s"),
            ("vmem_bytes", "[TI] 64 MiB"),
            (
                "vregs",
                "assumed: 64 as on v5p [SB] (no v7x figure published)",
            ),
            ("ici_dims", "[GC] 3D torus"),
            ("ici_link_bytes_per_s", "[SB] 90 GB/s one-way per link"),
            (
                "ici_wrap_multiple",
                "assumed: wraparound on full 4x4x4 cubes as on v4/v5p",
            ),
            (
                "max_slice_shape",
                "no largest shape published: only the chip count limits a slice",
            ),
            ("max_slice_chips", "[GC] 9,216-chip footprint per pod"),
            (
                "dcn_bytes_per_s",
                "[SB] data-centre network about 6.25 GB/s per chip (no per-generation figure)",
            ),
        ],
    )
}

/// One 128x128 weight-stationary array timed exactly as SCALE-Sim 3.0.0 counts compute cycles.
fn scalesim_ws_128() -> ChipPreset {
    let mut costs = costs();
    costs.kernel_launch = 0;
    let p = ChipPreset {
        name: "scalesim-ws-128".into(),
        description:
            "SCALE-Sim 3.0.0 parity: one 128x128 weight-stationary array, no overlap between folds"
                .into(),
        cores_per_chip: 1,
        mxus_per_core: 1,
        mxu_rows: 128,
        mxu_cols: 128,
        mxu_model: MxuModel::ScaleSim,
        mxu_weight_buffers: 1,
        clock_hz: 1e9,
        hbm_bytes: 16 * GIB,
        hbm_bytes_per_s: 1e12,
        hbm_latency_ns: 400.0,
        vmem_bytes: 512 * MIB,
        smem_bytes: MIB,
        vregs: 64,
        dma_engines: 4,
        ici_dims: 2,
        ici_link_bytes_per_s: 45e9,
        ici_hop_latency_ns: 1000.0,
        ici_wrap_multiple: 16,
        host_link_bytes_per_s: 16e9,
        max_slice_shape: vec![],
        max_slice_chips: 1,
        dcn_bytes_per_s: 6.25e9,
        dcn_latency_ns: 10_000.0,
        costs,
        sources: BTreeMap::new(),
    };
    let mut p = with_sources(
        p,
        &[
            ("cores_per_chip", "SCALE-Sim parity: a single core"),
            ("mxus_per_core", "SCALE-Sim parity: a single array"),
            ("mxu_rows", "SCALE-Sim config ArrayHeight = 128"),
            ("mxu_cols", "SCALE-Sim config ArrayWidth = 128"),
            (
                "mxu_model",
                "SCALE-Sim 3.0.0 weight stationary (Dataflow: ws), stall-free compute cycles",
            ),
            ("mxu_weight_buffers", "SCALE-Sim: no overlap between folds"),
            (
                "clock_hz",
                "arbitrary 1 GHz: SCALE-Sim counts cycles, not seconds",
            ),
            (
                "hbm_bytes",
                "arbitrary: operands are placed in VMEM before the timed region",
            ),
            (
                "hbm_bytes_per_s",
                "arbitrary: HBM traffic is outside the compared MXU cycles",
            ),
            (
                "vmem_bytes",
                "512 MiB so that whole operands fit on chip, as SCALE-Sim assumes",
            ),
            ("vregs", "ISA maximum"),
            ("ici_dims", "unused (single chip)"),
            ("ici_link_bytes_per_s", "unused (single chip)"),
            ("ici_wrap_multiple", "unused (single chip)"),
            ("max_slice_shape", "unused (single chip)"),
            ("max_slice_chips", "SCALE-Sim parity: a single chip"),
            ("dcn_bytes_per_s", "unused (single chip)"),
            ("dcn_latency_ns", "unused (single chip)"),
        ],
    );
    p.sources.insert(
        "costs.kernel_launch".into(),
        "0: parity counts only MXU cycles".into(),
    );
    p
}
