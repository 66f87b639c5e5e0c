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
    /// Instead of the registry: run PyTorch's operator database (`op_db`) on the tpu with the
    /// CPU fallback off and print which entries pass natively (`python -m tpuemu.op_db`, in the
    /// project's Python environment or `TPUEMU_PYTHON`; minutes). Arguments after `--` go to it,
    /// e.g. `tpuemu ops --op-db -- -k linalg --json op_db.json`.
    #[arg(long)]
    pub op_db: bool,
    /// Arguments for `--op-db`.
    #[arg(last = true, requires = "op_db")]
    pub rest: Vec<String>,
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

/// Runs PyTorch's operator database through the bridge (`python -m tpuemu.op_db`).
fn op_db(rest: &[String]) -> Result<(), CliError> {
    let py = super::bench::host::python();
    let status = std::process::Command::new(&py)
        .args(["-m", "tpuemu.op_db"])
        .args(rest)
        .status()
        .map_err(|e| CliError::Other(format!("cannot run {py} for the op_db run: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(CliError::Other(format!(
            "python -m tpuemu.op_db failed ({status}); scripts/python.sh builds the bridge into \
             the project's environment"
        )))
    }
}

/// Runs `tpuemu ops`.
pub fn run(args: &OpsArgs) -> Result<(), CliError> {
    if args.op_db {
        return op_db(&args.rest);
    }
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
