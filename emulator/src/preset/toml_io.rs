//! Reading, writing and overriding presets as TOML.
//!
//! A preset file is the TOML form of [`ChipPreset`]. It may instead start from a built-in with
//! `base = "v5e"` and give only the fields it changes:
//!
//! ```toml
//! base = "v5e"
//! name = "v5e-fast-hbm"
//! hbm_bytes_per_s = 1.6e12
//! [costs]
//! eup_latency = 12
//! [sources]
//! hbm_bytes_per_s = "what-if: doubled HBM bandwidth"
//! ```
//!
//! A field changed without a matching `[sources]` entry is recorded as overridden, so a preset
//! never claims a source for a figure it does not have.

use toml::{Table, Value};

use super::{ChipPreset, builtin};

/// Why a preset could not be loaded or changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PresetError {
    /// The TOML text does not parse.
    #[error("preset is not valid TOML: {0}")]
    Toml(String),
    /// `base` names no built-in preset.
    #[error("unknown base preset `{0}` (built-in presets: {list})", list = super::builtin_names().join(", "))]
    UnknownBase(String),
    /// A field is unknown, missing, or of the wrong type.
    #[error("preset field error: {0}")]
    Field(String),
    /// A slice larger than the generation's largest one.
    #[error("{0}")]
    SliceTooLarge(String),
    /// A figure is outside its documented range (or not a number of the right kind).
    #[error("preset `{preset}`: {field} = {value}; expected {expected}")]
    Range {
        /// Preset name.
        preset: String,
        /// Dotted field name (`costs.valu_latency`).
        field: String,
        /// The value as written.
        value: String,
        /// What the field accepts.
        expected: String,
    },
    /// The figures are unusable.
    #[error("preset `{preset}` is invalid: {why}")]
    Invalid {
        /// Preset name.
        preset: String,
        /// Why.
        why: String,
    },
}

pub(super) fn to_table(p: &ChipPreset) -> Table {
    match Value::try_from(p) {
        Ok(Value::Table(t)) => t,
        _ => unreachable!("a preset serializes to a TOML table"),
    }
}

fn from_table(t: Table) -> Result<ChipPreset, PresetError> {
    // Kinds and ranges first, so that a figure is never misread by the conversion below.
    super::ranges::check_table(&t)?;
    let p: ChipPreset = Value::Table(t)
        .try_into()
        .map_err(|e: toml::de::Error| PresetError::Field(e.to_string()))?;
    p.validate()?;
    Ok(p)
}

/// Every leaf field as a dotted name (`costs.valu_latency`), `sources` excluded.
#[cfg(test)]
pub(super) fn flat_fields(p: &ChipPreset) -> Vec<String> {
    fn walk(prefix: &str, t: &Table, out: &mut Vec<String>) {
        for (k, v) in t {
            let name = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Table(inner) if k != "sources" => walk(&name, inner, out),
                Value::Table(_) => {}
                _ => out.push(name),
            }
        }
    }
    let mut out = Vec::new();
    walk("", &to_table(p), &mut out);
    out
}

/// Merges `over` into `base`, recording the dotted names of the leaves it changed.
fn merge(base: &mut Table, over: Table, prefix: &str, changed: &mut Vec<String>) {
    for (k, v) in over {
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match (base.get_mut(&k), v) {
            (Some(Value::Table(b)), Value::Table(o)) if k != "sources" => {
                merge(b, o, &name, changed)
            }
            (Some(Value::Table(b)), Value::Table(o)) => b.extend(o),
            (_, v) => {
                base.insert(k, v);
                changed.push(name);
            }
        }
    }
}

impl ChipPreset {
    /// The preset as TOML text.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a preset serializes to TOML")
    }

    /// Reads a preset from TOML text: a complete preset, or `base = "<built-in>"` plus changes.
    pub fn from_toml(text: &str) -> Result<ChipPreset, PresetError> {
        let mut table: Table = text
            .parse()
            .map_err(|e: toml::de::Error| PresetError::Toml(e.to_string()))?;
        let Some(base) = table.remove("base") else {
            return from_table(table);
        };
        let base = base
            .as_str()
            .ok_or_else(|| PresetError::Field("`base` must be a string".into()))?;
        let base = builtin(base).ok_or_else(|| PresetError::UnknownBase(base.to_string()))?;
        let explicit_sources: Vec<String> = match table.get("sources") {
            Some(Value::Table(s)) => s.keys().cloned().collect(),
            _ => Vec::new(),
        };
        let mut merged = to_table(&base);
        let mut changed = Vec::new();
        merge(&mut merged, table, "", &mut changed);
        let mut p = from_table(merged)?;
        for field in changed {
            if field != "name" && field != "description" && !explicit_sources.contains(&field) {
                p.sources.insert(
                    field,
                    format!("overridden in a preset file based on `{}`", base.name),
                );
            }
        }
        Ok(p)
    }

    /// Overrides one field by its dotted name with a TOML value (`clock_hz=1.2e9`,
    /// `costs.eup_latency=12`, `mxu_model="scale_sim"`; a bare word is taken as a string).
    pub fn set(&mut self, field: &str, value: &str) -> Result<(), PresetError> {
        if field == "sources" || field.starts_with("sources.") {
            return Err(PresetError::Field(
                "sources are not set with overrides".into(),
            ));
        }
        if let Some(c) = value.chars().find(|c| c.is_control()) {
            return Err(PresetError::Field(format!(
                "`{field}` = {value:?}: the value holds the control character {c:?}; give one value on one line"
            )));
        }
        let parsed: Value = match format!("v = {value}").parse::<Table>() {
            Ok(mut t) if t.len() == 1 => t.remove("v").expect("the only key"),
            Ok(_) => {
                return Err(PresetError::Field(format!(
                    "`{field}` = {value}: expected one value"
                )));
            }
            Err(_) => Value::String(value.to_string()),
        };
        let mut table = to_table(self);
        let mut cursor = &mut table;
        let parts: Vec<&str> = field.split('.').collect();
        for part in &parts[..parts.len() - 1] {
            cursor = match cursor.get_mut(*part) {
                Some(Value::Table(t)) => t,
                _ => {
                    return Err(PresetError::Field(format!(
                        "unknown preset field `{field}`"
                    )));
                }
            };
        }
        let last = parts[parts.len() - 1];
        if !cursor.contains_key(last) || matches!(cursor.get(last), Some(Value::Table(_))) {
            return Err(PresetError::Field(format!(
                "unknown preset field `{field}`"
            )));
        }
        cursor.insert(last.to_string(), parsed);
        let mut p = from_table(table).map_err(|e| match e {
            PresetError::Field(m) => PresetError::Field(format!("`{field}` = {value}: {m}")),
            other => other,
        })?;
        p.sources.insert(
            field.to_string(),
            format!("overridden on the command line: {value}"),
        );
        *self = p;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_round_trip() {
        for name in super::super::builtin_names() {
            let p = builtin(name).unwrap();
            let back = ChipPreset::from_toml(&p.to_toml()).unwrap();
            assert_eq!(back, p);
        }
    }

    #[test]
    fn base_plus_overrides() {
        let p = ChipPreset::from_toml(
            "base = \"v5e\"\nname = \"x\"\nhbm_bytes_per_s = 1.6e12\n[costs]\neup_latency = 12\n[sources]\nhbm_bytes_per_s = \"what-if\"\n",
        )
        .unwrap();
        assert_eq!(p.name, "x");
        assert_eq!(p.hbm_bytes_per_s, 1.6e12);
        assert_eq!(p.costs.eup_latency, 12);
        assert_eq!(p.source("hbm_bytes_per_s"), Some("what-if"));
        assert!(
            p.source("costs.eup_latency")
                .unwrap()
                .starts_with("overridden")
        );
        assert_eq!(p.mxu_rows, 128);
    }

    #[test]
    fn set_overrides_and_rejects() {
        let mut p = builtin("v5e").unwrap();
        p.set("costs.valu_latency", "3").unwrap();
        assert_eq!(p.costs.valu_latency, 3);
        p.set("mxu_model", "scale_sim").unwrap();
        assert_eq!(p.mxu_model, super::super::MxuModel::ScaleSim);
        assert!(p.set("nonsense", "1").is_err());
        assert!(p.set("costs", "1").is_err());
        assert!(p.set("mxu_rows", "\"big\"").is_err());
        assert!(p.set("mxu_rows", "0").is_err());
        assert!(ChipPreset::from_toml("base = \"v9\"").is_err());
        assert!(ChipPreset::from_toml("name = 3").is_err());
        assert!(ChipPreset::from_toml("[[[").is_err());
    }
}
