//! The metrics report, in the spirit of PyTorch/XLA's `metrics_report()`.

use std::collections::BTreeMap;
use std::fmt::Write;

/// Counters the runtime keeps.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Metrics {
    /// Operator calls (decomposed operators count each call they make).
    pub ops: u64,
    /// Of `ops`, view operators (charged `HostCosts::view_ns`).
    #[serde(default)]
    pub view_calls: u64,
    /// Operator calls by overload.
    pub ops_by_name: BTreeMap<String, u64>,
    /// Kernels launched.
    pub kernels_launched: u64,
    /// Device time spent running kernels, ns (sum over launches, counted when they are waited
    /// for).
    pub device_busy_ns: f64,
    /// Bytes kernels moved between HBM and on-chip memory.
    pub hbm_bytes: u64,
    /// Useful matrix-unit FLOPs of the kernels.
    pub mxu_flops: u64,
    /// Bytes kernels sent over ICI.
    pub ici_bytes: u64,
    /// Fused groups run by DeferAndFuse and Compile.
    pub fused_groups: u64,
    /// Histogram of fused group sizes (operators per group).
    pub group_sizes: BTreeMap<usize, u64>,
    /// Operators DeferAndFuse merged into a group, by the fusion rule that merged them
    /// (`fusion::rules`).
    #[serde(default)]
    pub fusion_joins: BTreeMap<String, u64>,
    /// Kernel cache hits.
    pub cache_hits: u64,
    /// Kernel cache misses (kernels generated).
    pub cache_misses: u64,
    /// DeferAndFuse flushes whose graph was planned before (the plan was reused: see
    /// `fusion::plans`).
    #[serde(default)]
    pub plan_hits: u64,
    /// DeferAndFuse flushes whose graph was planned afresh.
    #[serde(default)]
    pub plan_misses: u64,
    /// Host time spent compiling, ns (simulated): generating kernels, and tracing graphs for
    /// whole-graph compilation.
    pub compile_ns: f64,
    /// Simulated host work, ns: dispatching or recording operators, launching kernels,
    /// flushing, generating kernels ([`super::HostCosts`]); not the time spent waiting for the
    /// device.
    #[serde(default)]
    pub host_busy_ns: f64,
    /// `host_busy_ns` by what it was spent on: `dispatch`, `record` (DeferAndFuse), `view`,
    /// `trace` (operators traced for whole-graph compilation), `launch`, `flush`, `compile`
    /// (kernels and graphs generated), `cpu fallback` (the Python bridge).
    #[serde(default)]
    pub host_ns_by: BTreeMap<String, f64>,
    /// Flushes of the deferred graph, by reason.
    pub flushes: BTreeMap<String, u64>,
    /// Host-to-device transfers.
    pub h2d_transfers: u64,
    /// Host-to-device bytes.
    pub h2d_bytes: u64,
    /// Device-to-host transfers.
    pub d2h_transfers: u64,
    /// Device-to-host bytes.
    pub d2h_bytes: u64,
    /// Operators with no sharding rule that replicated their inputs (DTensor).
    pub sharding_fallbacks: BTreeMap<String, u64>,
    /// Whole-graph compilations, and recompilations by reason.
    pub graph_compiles: BTreeMap<String, u64>,
    /// Collectives another engine carried out for this chip, by kind (`all_reduce`, ...):
    /// calls, bytes and simulated time ([`super::external`]).
    #[serde(default)]
    pub collectives: BTreeMap<String, super::external::CollectiveStats>,
}

impl Metrics {
    /// A human-readable report.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Metric: OperatorCalls\n  TotalSamples: {}\n  Views: {}",
            self.ops, self.view_calls
        );
        let _ = writeln!(
            s,
            "Metric: KernelsLaunched\n  TotalSamples: {}",
            self.kernels_launched
        );
        let _ = writeln!(
            s,
            "Metric: DeviceTime\n  Busy: {:.3} ms\n  HbmBytes: {}\n  MxuFlops: {}",
            self.device_busy_ns / 1e6,
            self.hbm_bytes,
            self.mxu_flops
        );
        if self.ici_bytes > 0 {
            let _ = writeln!(s, "  IciBytes: {}", self.ici_bytes);
        }
        let by: Vec<String> = self
            .host_ns_by
            .iter()
            .map(|(k, ns)| format!("{k} {:.3} ms", ns / 1e6))
            .collect();
        let _ = writeln!(
            s,
            "Metric: HostWork\n  Accumulator: {:.3} ms\n  By: {}",
            self.host_busy_ns / 1e6,
            by.join(", ")
        );
        let _ = writeln!(
            s,
            "Metric: KernelCache\n  Hits: {}\n  Misses: {}",
            self.cache_hits, self.cache_misses
        );
        if self.plan_hits + self.plan_misses > 0 {
            let _ = writeln!(
                s,
                "Metric: PlanCache\n  Hits: {}\n  Misses: {}",
                self.plan_hits, self.plan_misses
            );
        }
        let _ = writeln!(
            s,
            "Metric: CompileTime\n  Accumulator: {:.3} ms (kernels generated, graphs traced)",
            self.compile_ns / 1e6
        );
        if self.fused_groups > 0 {
            let _ = writeln!(
                s,
                "Metric: FusedGroups\n  TotalSamples: {}",
                self.fused_groups
            );
            let sizes: Vec<String> = self
                .group_sizes
                .iter()
                .map(|(k, v)| format!("{k} ops: {v}"))
                .collect();
            let _ = writeln!(s, "  Sizes: {}", sizes.join(", "));
            if !self.fusion_joins.is_empty() {
                let joins: Vec<String> = self
                    .fusion_joins
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect();
                let _ = writeln!(s, "  JoinsByRule: {}", joins.join(", "));
            }
        }
        if !self.flushes.is_empty() {
            let _ = writeln!(s, "Metric: Flushes");
            for (reason, n) in &self.flushes {
                let _ = writeln!(s, "  {reason}: {n}");
            }
        }
        if !self.graph_compiles.is_empty() {
            let _ = writeln!(s, "Metric: GraphCompiles");
            for (reason, n) in &self.graph_compiles {
                let _ = writeln!(s, "  {reason}: {n}");
            }
        }
        if !self.collectives.is_empty() {
            let _ = writeln!(s, "Metric: Collectives");
            for (kind, c) in &self.collectives {
                let _ = writeln!(
                    s,
                    "  {kind}: {} calls, {} bytes, {:.3} ms (waiting for peers {:.3} ms)",
                    c.calls,
                    c.bytes,
                    c.ns / 1e6,
                    c.wait_ns / 1e6
                );
            }
        }
        let _ = writeln!(
            s,
            "Metric: Transfers\n  HostToDevice: {} ({} bytes)\n  DeviceToHost: {} ({} bytes)",
            self.h2d_transfers, self.h2d_bytes, self.d2h_transfers, self.d2h_bytes
        );
        if !self.sharding_fallbacks.is_empty() {
            let _ = writeln!(s, "Metric: ShardingFallbacks (replicate-then-compute)");
            for (op, n) in &self.sharding_fallbacks {
                let _ = writeln!(s, "  {op}: {n}");
            }
        }
        let _ = writeln!(s, "Counter: OperatorCalls by overload");
        for (op, n) in &self.ops_by_name {
            let _ = writeln!(s, "  {op}: {n}");
        }
        s
    }
}
