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
    }
}

/// Runs `tpuemu ops`.
pub fn run(args: &OpsArgs) -> Result<(), CliError> {
    let reg = registry();
    if args.json {
        let v: Vec<_> = reg
            .values()
            .map(|d| json!({"name": d.name, "schema": d.schema, "implementation": kind(d.implementation), "dtypes": d.dtypes.iter().map(|t| t.name()).collect::<Vec<_>>()}))
            .collect();
        let text = serde_json::to_string_pretty(&json!({ "ops": v })).expect("JSON") + "\n";
        return super::write_output(None, text.as_bytes());
    }
    let mut out = format!("{:<40} {:<14} dtypes\n", "overload", "implementation");
    for d in reg.values() {
        let dts: Vec<&str> = d.dtypes.iter().map(|t| t.name()).collect();
        out += &format!(
            "{:<40} {:<14} {}\n",
            d.name,
            kind(d.implementation),
            dts.join(" ")
        );
    }
    out += &format!("\n{} overloads registered\n", reg.len());
    super::write_output(None, out.as_bytes())
}
