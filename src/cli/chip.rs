//! Choosing a chip on the command line: a built-in preset or a TOML file, plus overrides, and
//! the run limits every command that runs programs takes.

use clap::Args;
use tpuemu_emulator::limits::{DEFAULT_MAX_CYCLES, DEFAULT_MAX_INSTRUCTIONS, MAX_LIMIT};
use tpuemu_emulator::{ChipPreset, Emulator, RunLimits, builtin, builtin_names};

use tpuemu_backend::HostCosts;

use super::CliError;

/// `--chip NAME|FILE.toml`, `--set FIELD=VALUE` and the run limits.
#[derive(Args, Debug, Clone)]
pub struct ChipArgs {
    /// Chip preset: a built-in name (v4, v5e, v5p, v6e, v7x, scalesim-ws-128) or a TOML file.
    #[arg(long, default_value = "v5e")]
    pub chip: String,
    /// Override a preset field, e.g. `--set hbm_bytes_per_s=1.6e12 --set costs.eup_latency=12`
    /// (`tpuemu chips --ranges` lists what each field accepts), or a host cost of the runtime's
    /// timing model, e.g. `--set host.record_ns=6000` (`host.op_dispatch_ns`, `host.view_ns`,
    /// `host.launch_ns`, `host.record_ns`, `host.flush_ns`, `host.flush_op_ns`, `host.compile_ns`;
    /// nanoseconds).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// `--max-instructions N` and `--max-cycles N`: how far one launch may run before it is stopped
/// with a fault naming the pc and the instruction (see `tpuemu_emulator::limits`).
#[derive(Args, Debug, Clone)]
pub struct LimitArgs {
    /// Stop a launch when a core has done more than this much work: one unit per instruction,
    /// one more per 256 bytes a DMA copies (1 to 2^62).
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_INSTRUCTIONS,
        value_parser = clap::value_parser!(u64).range(1..=MAX_LIMIT),
        allow_negative_numbers = true
    )]
    pub max_instructions: u64,
    /// Stop a launch when a core is more than this many cycles past its start (1 to 2^62).
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_CYCLES,
        value_parser = clap::value_parser!(u64).range(1..=MAX_LIMIT),
        allow_negative_numbers = true
    )]
    pub max_cycles: u64,
}

impl LimitArgs {
    /// The limits (clap has checked their range).
    pub fn limits(&self) -> Result<RunLimits, CliError> {
        RunLimits::new(self.max_instructions, self.max_cycles)
            .map_err(|e| CliError::Other(format!("--{}", e.to_string().replace('_', "-"))))
    }
}

impl ChipArgs {
    /// The preset with overrides applied (`host.*` overrides are the runtime's: see
    /// [`ChipArgs::host_costs`]).
    pub fn preset(&self) -> Result<ChipPreset, CliError> {
        if let Some(h) = self
            .set
            .iter()
            .find(|s| s.trim_start().starts_with(HOST_PREFIX))
        {
            return Err(CliError::Other(format!(
                "--set {h:?}: host costs apply to commands that run the backend's runtime \
                 (bench eager, demo), not to this one"
            )));
        }
        self.chip_preset()
    }

    /// [`ChipArgs::preset`] ignoring `host.*` overrides (commands that also read
    /// [`ChipArgs::host_costs`]).
    fn chip_preset(&self) -> Result<ChipPreset, CliError> {
        let mut p = load_preset(&self.chip)?;
        let chip_sets: Vec<String> = self
            .set
            .iter()
            .filter(|s| !s.trim_start().starts_with(HOST_PREFIX))
            .cloned()
            .collect();
        apply_sets(&mut p, &chip_sets)?;
        Ok(p)
    }

    /// The runtime's host costs: the defaults, then a `[host]` table of a chip TOML file, then
    /// `--set host.FIELD=NS` in order.
    pub fn host_costs(&self) -> Result<HostCosts, CliError> {
        let mut c = file_host_costs(&self.chip)?;
        for s in &self.set {
            let Some(rest) = s.trim_start().strip_prefix(HOST_PREFIX) else {
                continue;
            };
            let (field, value) = rest.split_once('=').ok_or_else(|| {
                CliError::Other(format!(
                    "--set {s:?}: expected host.FIELD=NANOSECONDS, e.g. host.record_ns=6000"
                ))
            })?;
            let ns: f64 = value.trim().parse().map_err(|_| {
                CliError::Other(format!("--set {s:?}: `{}` is not a number", value.trim()))
            })?;
            c.set(field.trim(), ns)
                .map_err(|e| CliError::Other(format!("--set {s:?}: {e}")))?;
        }
        Ok(c)
    }

    /// One chip of the preset, with the run limits set.
    pub fn emulator(&self) -> Result<(ChipPreset, Emulator), CliError> {
        let preset = self.preset()?;
        self.emulator_of(preset)
    }

    /// [`ChipArgs::emulator`] for a command that runs the backend's runtime: the chip, and the
    /// host costs of its timing model ([`ChipArgs::host_costs`]).
    pub fn runtime_parts(&self) -> Result<(ChipPreset, Emulator, HostCosts), CliError> {
        let (p, e) = self.emulator_of(self.chip_preset()?)?;
        Ok((p, e, self.host_costs()?))
    }

    fn emulator_of(&self, preset: ChipPreset) -> Result<(ChipPreset, Emulator), CliError> {
        let emu = Emulator::new(preset.clone()).map_err(|e| CliError::Other(e.to_string()))?;
        emu.set_run_limits(self.limits.limits()?);
        Ok((preset, emu))
    }
}

/// The host costs a chip names: the defaults, then a `[host]` table of a chip TOML file (a
/// built-in name has none).
pub fn file_host_costs(chip: &str) -> Result<HostCosts, CliError> {
    let mut c = HostCosts::default();
    if builtin(chip).is_some() {
        return Ok(c);
    }
    let bytes = super::run::read_bounded(
        std::path::Path::new(chip),
        MAX_PRESET_BYTES,
        "a preset file",
    )?;
    let text = String::from_utf8_lossy(&bytes);
    let table: toml::Table = text
        .parse()
        .map_err(|e| CliError::Other(format!("{chip}: {e}")))?;
    if let Some(host) = table.get("host") {
        let host = host
            .as_table()
            .ok_or_else(|| CliError::Other(format!("{chip}: `host` must be a table")))?;
        for (k, v) in host {
            let ns = v
                .as_float()
                .or(v.as_integer().map(|i| i as f64))
                .ok_or_else(|| CliError::Other(format!("{chip}: host.{k} must be a number")))?;
            c.set(k, ns)
                .map_err(|e| CliError::Other(format!("{chip}: {e}")))?;
        }
    }
    Ok(c)
}

/// The prefix of `--set` overrides that name a host cost rather than a chip field.
const HOST_PREFIX: &str = "host.";

/// Applies `--set FIELD=VALUE` overrides in order.
pub fn apply_sets(p: &mut ChipPreset, sets: &[String]) -> Result<(), CliError> {
    for s in sets {
        let (field, value) = s.split_once('=').ok_or_else(|| {
            CliError::Other(format!(
                "--set {s:?}: expected FIELD=VALUE, e.g. clock_hz=1.5e9"
            ))
        })?;
        p.set(field.trim(), value.trim())
            .map_err(|e| CliError::Other(format!("--set {s:?}: {e}")))?;
    }
    Ok(())
}

/// The largest preset file read: 1 MiB (a full preset with sources is about 10 KiB).
pub const MAX_PRESET_BYTES: u64 = 1 << 20;

/// A built-in preset by name, or a preset read from a TOML file.
pub fn load_preset(name: &str) -> Result<ChipPreset, CliError> {
    if let Some(p) = builtin(name) {
        return Ok(p);
    }
    if name.ends_with(".toml") || std::path::Path::new(name).exists() {
        let bytes = super::run::read_bounded(
            std::path::Path::new(name),
            MAX_PRESET_BYTES,
            "a preset file",
        )?;
        let text = String::from_utf8(bytes)
            .map_err(|_| CliError::Other(format!("{name}: a preset file is UTF-8 TOML text")))?;
        return ChipPreset::from_toml(&text).map_err(|e| CliError::Other(format!("{name}: {e}")));
    }
    Err(CliError::Other(format!(
        "unknown chip `{name}`: expected one of {} or a preset TOML file",
        builtin_names().join(", ")
    )))
}
