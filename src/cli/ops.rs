//! `tpuemu ops`: every registered ATen overload, its dtypes, and how it is implemented.

use clap::Args;
use serde_json::json;
use tpuemu_backend::ops::{OpImpl, registry};

use super::CliError;

/// Arguments of `tpuemu ops`.
#[derive(Args, Debug)]
pub struct OpsArgs {
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
}

fn kind(k: OpImpl) -> &'static str {
    match k {
        OpImpl::Kernel => "kernel",
        OpImpl::Decomposition => "decomposition",
        OpImpl::View => "view",
        OpImpl::InPlace => "in-place",
        OpImpl::Out => "out",
    }
}

/// Runs `tpuemu ops`.
pub fn run(args: &OpsArgs) -> Result<(), CliError> {
    let reg = registry();
    if args.json {
        let v: Vec<_> = reg
            .values()
            .map(|d| {
                json!({
                    "name": d.name,
                    "schema": d.schema.to_string(),
                    "implementation": kind(d.implementation),
                    "derived_from": d.derived_from(),
                    "sharding": d.sharding.family(),
                    "dtypes": d.dtypes.iter().map(|t| t.name()).collect::<Vec<_>>(),
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&json!({ "ops": v })).expect("JSON") + "\n";
        return super::write_output(None, text.as_bytes());
    }
    let mut out = format!(
        "{:<44} {:<34} {:<10} dtypes\n",
        "overload", "implementation", "sharding"
    );
    for d in reg.values() {
        let dts: Vec<&str> = d.dtypes.iter().map(|t| t.name()).collect();
        let imp = match d.derived_from() {
            Some(f) => format!(
                "{} of {}",
                kind(d.implementation),
                f.trim_start_matches("aten::")
            ),
            None => kind(d.implementation).to_string(),
        };
        out += &format!(
            "{:<44} {:<34} {:<10} {}\n",
            d.name,
            imp,
            d.sharding.family().unwrap_or("replicate"),
            dts.join(" ")
        );
    }
    out += &format!("\n{} overloads registered\n", reg.len());
    super::write_output(None, out.as_bytes())
}
