//! Choosing a chip on the command line: a built-in preset or a TOML file, plus overrides.

use clap::Args;
use tpuemu_emulator::{ChipPreset, builtin, builtin_names};

use super::CliError;

/// `--chip NAME|FILE.toml` and `--set FIELD=VALUE`.
#[derive(Args, Debug, Clone)]
pub struct ChipArgs {
    /// Chip preset: a built-in name (v4, v5e, v5p, v6e, v7x, scalesim-ws-128) or a TOML file.
    #[arg(long, default_value = "v5e")]
    pub chip: String,
    /// Override a preset field, e.g. `--set hbm_bytes_per_s=1.6e12 --set costs.eup_latency=12`.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
}

impl ChipArgs {
    /// The preset with overrides applied.
    pub fn preset(&self) -> Result<ChipPreset, CliError> {
        let mut p = load_preset(&self.chip)?;
        for s in &self.set {
            let (field, value) = s
                .split_once('=')
                .ok_or_else(|| CliError::Other(format!("--set `{s}`: expected FIELD=VALUE")))?;
            p.set(field.trim(), value.trim())
                .map_err(|e| CliError::Other(e.to_string()))?;
        }
        Ok(p)
    }
}

/// A built-in preset by name, or a preset read from a TOML file.
pub fn load_preset(name: &str) -> Result<ChipPreset, CliError> {
    if let Some(p) = builtin(name) {
        return Ok(p);
    }
    if name.ends_with(".toml") || std::path::Path::new(name).exists() {
        let text = std::fs::read_to_string(name).map_err(|source| CliError::Io {
            path: name.into(),
            source,
        })?;
        return ChipPreset::from_toml(&text).map_err(|e| CliError::Other(format!("{name}: {e}")));
    }
    Err(CliError::Other(format!(
        "unknown chip `{name}`: expected one of {} or a preset TOML file",
        builtin_names().join(", ")
    )))
}
