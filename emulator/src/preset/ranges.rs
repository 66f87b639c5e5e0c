//! The accepted range of every preset figure, checked once where a preset enters (a built-in,
//! a TOML file, a `--set` override) before any figure is used.
//!
//! The ranges keep every derived quantity finite and every cycle count far from 2^64: a clock of
//! at most 10 GHz and bandwidths of at least 1 GB/s make the slowest transfer of the largest HBM
//! (4 TiB, 4 KiB bursts) about 2^56 cycles. They are wide enough for any chip a user might want
//! to try (the built-ins sit well inside them) and say what each figure is measured in.

use toml::{Table, Value};

use super::PresetError;

/// What kind of number a field holds and its inclusive range.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A whole number from `lo` to `hi`.
    Int(u64, u64),
    /// A finite number from `lo` to `hi`.
    Real(f64, f64),
    /// A list of at most `len` whole numbers from `lo` to `hi`.
    Ints(u64, u64, usize),
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Cycle costs: at most a million cycles per instruction.
const CYCLES: u64 = 1_000_000;

/// Every numeric field: dotted name, range, unit.
const FIELDS: &[(&str, Kind, &str)] = &[
    ("cores_per_chip", Kind::Int(1, 16), "TensorCores"),
    (
        "mxus_per_core",
        Kind::Int(1, tpuemu_isa::reg::MAX_MXUS as u64),
        "matrix units",
    ),
    ("mxu_rows", Kind::Int(8, 1024), "rows"),
    ("mxu_cols", Kind::Int(8, 1024), "columns"),
    ("mxu_weight_buffers", Kind::Int(1, 2), "buffers"),
    ("clock_hz", Kind::Real(1e6, 1e10), "Hz"),
    ("hbm_bytes", Kind::Int(MIB, 4096 * GIB), "bytes"),
    ("hbm_bytes_per_s", Kind::Real(1e9, 1e15), "bytes per second"),
    ("hbm_latency_ns", Kind::Real(0.0, 1e6), "ns"),
    ("vmem_bytes", Kind::Int(64 * KIB, GIB), "bytes"),
    ("smem_bytes", Kind::Int(KIB, 16 * MIB), "bytes"),
    (
        "vregs",
        Kind::Int(1, tpuemu_isa::reg::NUM_VREGS as u64),
        "registers",
    ),
    ("dma_engines", Kind::Int(1, 64), "engines"),
    ("ici_dims", Kind::Int(1, 3), "mesh dimensions"),
    (
        "ici_link_bytes_per_s",
        Kind::Real(1e9, 1e15),
        "bytes per second",
    ),
    ("ici_hop_latency_ns", Kind::Real(0.0, 1e6), "ns"),
    ("ici_wrap_multiple", Kind::Int(1, 65536), "chips"),
    (
        "dcn_bytes_per_s",
        Kind::Real(1e9, 1e15),
        "bytes per second per chip",
    ),
    ("dcn_latency_ns", Kind::Real(0.0, 1e7), "ns"),
    ("max_slice_chips", Kind::Int(1, 1 << 20), "chips"),
    (
        "max_slice_shape",
        Kind::Ints(1, 65536, 3),
        "chips per axis; empty: any shape of at most max_slice_chips",
    ),
    (
        "host_link_bytes_per_s",
        Kind::Real(1e9, 1e15),
        "bytes per second",
    ),
    ("costs.scalar_slots", Kind::Int(1, 2), "slots"),
    ("costs.valu_slots", Kind::Int(1, 2), "slots"),
    (
        "costs.vector_units",
        Kind::Int(1, 4),
        "copies of the vector unit",
    ),
    ("costs.scalar_latency", Kind::Int(0, CYCLES), "cycles"),
    ("costs.sld_latency", Kind::Int(0, CYCLES), "cycles"),
    ("costs.branch_taken", Kind::Int(0, CYCLES), "cycles"),
    ("costs.valu_occupancy", Kind::Int(1, CYCLES), "cycles"),
    ("costs.valu_latency", Kind::Int(0, CYCLES), "cycles"),
    ("costs.vld_occupancy", Kind::Int(1, CYCLES), "cycles"),
    ("costs.vld_latency", Kind::Int(0, CYCLES), "cycles"),
    (
        "costs.vld_strided_occupancy",
        Kind::Int(1, CYCLES),
        "cycles",
    ),
    ("costs.vst_occupancy", Kind::Int(1, CYCLES), "cycles"),
    ("costs.eup_occupancy", Kind::Int(1, CYCLES), "cycles"),
    ("costs.eup_latency", Kind::Int(0, CYCLES), "cycles"),
    ("costs.xlu_reduce_occupancy", Kind::Int(1, CYCLES), "cycles"),
    ("costs.xlu_reduce_latency", Kind::Int(0, CYCLES), "cycles"),
    (
        "costs.xlu_permute_occupancy",
        Kind::Int(1, CYCLES),
        "cycles",
    ),
    ("costs.xlu_permute_latency", Kind::Int(0, CYCLES), "cycles"),
    ("costs.xlu_gather_occupancy", Kind::Int(1, CYCLES), "cycles"),
    ("costs.dma_issue", Kind::Int(0, CYCLES), "cycles"),
    ("costs.dma_burst_bytes", Kind::Int(1, 4 * KIB), "bytes"),
    (
        "costs.dma_local_bytes_per_cycle",
        Kind::Int(1, MIB),
        "bytes per cycle",
    ),
    (
        "costs.pop_rows_per_cycle",
        Kind::Int(1, 1024),
        "rows per cycle",
    ),
    ("costs.sem_latency", Kind::Int(0, CYCLES), "cycles"),
    ("costs.barrier_latency", Kind::Int(0, CYCLES), "cycles"),
    ("costs.kernel_launch", Kind::Int(0, CYCLES), "cycles"),
    ("costs.mxu_queue_depth", Kind::Int(1, 1024), "commands"),
    ("costs.dma_queue_depth", Kind::Int(1, 1024), "descriptors"),
];

/// Longest accepted preset name and description, in characters.
const MAX_TEXT: usize = 4096;

fn expected(kind: Kind, unit: &str) -> String {
    match kind {
        Kind::Int(lo, hi) => format!("a whole number from {lo} to {hi} ({unit})"),
        Kind::Real(lo, hi) => format!("a finite number from {lo:e} to {hi:e} ({unit})"),
        Kind::Ints(lo, hi, len) => {
            format!("a list of at most {len} whole numbers from {lo} to {hi} ({unit})")
        }
    }
}

/// The value's text as it would be written in TOML (`inf`, `-1`, `"big"`).
fn shown(v: &Value) -> String {
    match v {
        Value::Float(x) if x.is_nan() => "nan".into(),
        Value::Float(x) if x.is_infinite() => if *x > 0.0 { "inf" } else { "-inf" }.into(),
        other => other.to_string(),
    }
}

/// Checks one field's value; `Ok` for fields without a numeric range (strings, `sources`).
pub(super) fn check_value(preset: &str, field: &str, v: &Value) -> Result<(), PresetError> {
    let bad = |expected: String| PresetError::Range {
        preset: preset.to_string(),
        field: field.to_string(),
        value: shown(v),
        expected,
    };
    if field == "name" || field == "description" {
        return match v.as_str() {
            Some(s) if s.chars().count() <= MAX_TEXT && !s.chars().any(char::is_control) => Ok(()),
            _ => Err(bad(format!(
                "a string of at most {MAX_TEXT} characters without control characters"
            ))),
        };
    }
    let Some(&(_, kind, unit)) = FIELDS.iter().find(|(f, _, _)| *f == field) else {
        return Ok(());
    };
    let ok = match (kind, v) {
        (Kind::Int(lo, hi), Value::Integer(i)) => {
            u64::try_from(*i).is_ok_and(|i| (lo..=hi).contains(&i))
        }
        (Kind::Real(lo, hi), Value::Float(x)) => x.is_finite() && (lo..=hi).contains(x),
        (Kind::Real(lo, hi), Value::Integer(i)) => (lo..=hi).contains(&(*i as f64)),
        (Kind::Ints(lo, hi, len), Value::Array(xs)) => {
            xs.len() <= len
                && xs.iter().all(|x| {
                    x.as_integer()
                        .and_then(|i| u64::try_from(i).ok())
                        .is_some_and(|i| (lo..=hi).contains(&i))
                })
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(bad(expected(kind, unit)))
    }
}

/// Checks every field of a preset's TOML table (before it is turned into a [`super::ChipPreset`],
/// so no figure is misread or silently converted).
pub(super) fn check_table(t: &Table) -> Result<(), PresetError> {
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();
    fn walk(name: &str, prefix: &str, t: &Table) -> Result<(), PresetError> {
        for (k, v) in t {
            let field = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Table(inner) if field == "costs" => walk(name, &field, inner)?,
                _ => check_value(name, &field, v)?,
            }
        }
        Ok(())
    }
    walk(&name, "", t)
}

/// The documented ranges, one line per field (for `tpuemu chips --ranges` and the README).
pub fn describe() -> Vec<String> {
    FIELDS
        .iter()
        .map(|(f, k, u)| format!("{f}: {}", expected(*k, u)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_numeric_field_has_a_range() {
        let p = super::super::builtin("v5e").unwrap();
        let mut missing = Vec::new();
        for field in super::super::toml_io::flat_fields(&p) {
            let numeric = !matches!(field.as_str(), "name" | "description" | "mxu_model");
            if numeric && !FIELDS.iter().any(|(f, _, _)| *f == field) {
                missing.push(field);
            }
        }
        assert!(missing.is_empty(), "no range for {missing:?}");
    }

    #[test]
    fn nonsense_is_named_with_its_range() {
        let e = check_value("x", "clock_hz", &Value::Float(f64::INFINITY)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "preset `x`: clock_hz = inf; expected a finite number from 1e6 to 1e10 (Hz)"
        );
        let e = check_value("x", "hbm_bytes", &Value::Integer(-1)).unwrap_err();
        assert!(
            e.to_string()
                .contains("hbm_bytes = -1; expected a whole number from 1048576"),
            "{e}"
        );
        for (f, v) in [
            ("hbm_latency_ns", Value::Float(1e300)),
            ("ici_link_bytes_per_s", Value::Float(1e-300)),
            ("hbm_bytes_per_s", Value::Float(f64::NAN)),
            ("vmem_bytes", Value::Integer(1 << 40)),
            ("smem_bytes", Value::Integer(1 << 40)),
            ("mxu_rows", Value::String("big".into())),
            ("mxu_rows", Value::Float(128.0)),
            ("costs.valu_latency", Value::Integer(-3)),
            ("costs.valu_occupancy", Value::Integer(0)),
            ("name", Value::String("a\nb".into())),
            ("dcn_bytes_per_s", Value::Float(0.0)),
            ("dcn_latency_ns", Value::Float(-1.0)),
            ("max_slice_chips", Value::Integer(0)),
            ("max_slice_shape", Value::Array(vec![Value::Integer(0)])),
            ("max_slice_shape", Value::Array(vec![Value::Integer(4); 4])),
            ("max_slice_shape", Value::Integer(16)),
        ] {
            assert!(check_value("x", f, &v).is_err(), "{f} = {v} accepted");
        }
        // An integer is a fine real figure.
        assert!(check_value("x", "clock_hz", &Value::Integer(1_000_000_000)).is_ok());
    }
}
