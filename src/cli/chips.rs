//! `tpuemu chips`: the chip presets and their derived figures.

use clap::Args;
use serde_json::json;
use tpuemu_emulator::{ChipPreset, builtin, builtin_names};

use super::{CliError, chip::load_preset};

/// Arguments of `tpuemu chips`.
#[derive(Args, Debug)]
pub struct ChipsArgs {
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
    /// Print one preset (built-in name or TOML file) as TOML, with the source of every figure;
    /// edit it and pass the file to `--chip`.
    #[arg(long, value_name = "CHIP")]
    pub toml: Option<String>,
    /// Print the range every preset figure must lie in (TOML files and `--set` are checked
    /// against them).
    #[arg(long)]
    pub ranges: bool,
}

fn row(p: &ChipPreset) -> serde_json::Value {
    json!({
        "name": p.name,
        "description": p.description,
        "cores_per_chip": p.cores_per_chip,
        "mxus_per_core": p.mxus_per_core,
        "mxu": format!("{}x{}", p.mxu_rows, p.mxu_cols),
        "clock_hz": p.clock_hz,
        "peak_bf16_flops": p.peak_bf16_flops(),
        "hbm_bytes": p.hbm_bytes,
        "hbm_bytes_per_s": p.hbm_bytes_per_s,
        "vmem_bytes": p.vmem_bytes,
        "smem_bytes": p.smem_bytes,
        "vregs": p.vregs,
        "dma_engines": p.dma_engines,
        "ici_link_bytes_per_s": p.ici_link_bytes_per_s,
        "ici_dims": p.ici_dims,
        "sources": p.sources,
    })
}

/// A capacity in the unit its vendor states it in (v5e's HBM: 16 GB; v4's: 32 GiB).
fn gib(b: u64) -> String {
    let u = tpuemu_isa::units::ByteUnit::of(b);
    format!("{} {}", u.of_bytes(b), u.name)
}

/// The runtime's host costs as a `[host]` table, each figure with what it costs.
fn host_table(c: &tpuemu_backend::runtime::HostCosts) -> String {
    let value = |field: &str| {
        serde_json::to_value(c)
            .ok()
            .and_then(|v| v.get(field).and_then(|x| x.as_f64()))
            .unwrap_or(0.0)
    };
    let mut s = String::from(
        "\n# The backend runtime's simulated host costs, in ns (`bench eager` and `demo` read\n\
         # this table; `--set host.FIELD=NS` overrides it; sources: backend/src/runtime/config.rs).\n[host]\n",
    );
    for (field, what) in tpuemu_backend::runtime::HOST_COST_FIELDS {
        s += &format!("{field} = {:.1} # {what}\n", value(field));
    }
    s
}

/// Runs `tpuemu chips`.
pub fn run(args: &ChipsArgs) -> Result<(), CliError> {
    if args.ranges {
        let text = tpuemu_emulator::preset::describe_ranges().join("\n") + "\n";
        return super::write_output(None, text.as_bytes());
    }
    if let Some(name) = &args.toml {
        let p = load_preset(name)?;
        let mut text = p.to_toml();
        text += &host_table(&super::chip::file_host_costs(name)?);
        super::write_output(None, text.as_bytes())?;
        return Ok(());
    }
    let presets: Vec<ChipPreset> = builtin_names().iter().filter_map(|n| builtin(n)).collect();
    if args.json {
        let v = json!({ "chips": presets.iter().map(row).collect::<Vec<_>>() });
        let text = serde_json::to_string_pretty(&v).expect("JSON serializes") + "\n";
        return super::write_output(None, text.as_bytes());
    }
    let mut out = format!(
        "{:<16} {:>5} {:>9} {:>9} {:>13} {:>11} {:>9} {:>8} {:>9}\n",
        "chip", "cores", "MXUs", "clock", "peak bf16", "HBM BW", "HBM", "VMEM", "ICI link"
    );
    for p in &presets {
        out += &format!(
            "{:<16} {:>5} {:>9} {:>5.3} GHz {:>7.1} TF/s {:>6.3} TB/s {:>9} {:>8} {:>6.0} GB/s\n",
            p.name,
            p.cores_per_chip,
            format!("{}x{}", p.mxus_per_core, p.mxu_rows),
            p.clock_hz / 1e9,
            p.peak_bf16_flops() / 1e12,
            p.hbm_bytes_per_s / 1e12,
            gib(p.hbm_bytes),
            gib(p.vmem_bytes),
            p.ici_link_bytes_per_s / 1e9
        );
    }
    out += "\nEvery figure cites its source: `tpuemu chips --toml v5e` (or --json).\n";
    // Figures fitted to a published run (at most one a chip), with the fit's arithmetic.
    for p in &presets {
        for (field, source) in p
            .sources
            .iter()
            .filter(|(_, s)| s.starts_with("CALIBRATED"))
        {
            out += &format!("\nCalibrated: {} {field}. {source}\n", p.name);
        }
    }
    super::write_output(None, out.as_bytes())
}
