//! Comparing two traces: the rows of their profiles ([`crate::profile`]) of one kind matched
//! by name, with counts, device time, host time and HBM bytes side by side and the
//! differences B − A, plus a total row. Rows only one trace has keep the other side empty.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::profile::{Profile, Row};

/// One name in both traces.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffRow {
    /// The name.
    pub name: String,
    /// Its row in trace A, if A has it.
    pub a: Option<Side>,
    /// Its row in trace B, if B has it.
    pub b: Option<Side>,
}

/// The figures of one side.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Side {
    /// Count.
    pub count: usize,
    /// Device time, ns.
    pub device_ns: f64,
    /// Total time, ns (host time for operators).
    pub total_ns: f64,
    /// HBM bytes.
    pub bytes: f64,
    /// FLOPs.
    pub flops: f64,
}

impl From<&Row> for Side {
    fn from(r: &Row) -> Side {
        Side {
            count: r.count,
            device_ns: r.device_ns,
            total_ns: r.total_ns,
            bytes: r.bytes,
            flops: r.flops,
        }
    }
}

/// A column to sort the diff by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffKey {
    /// Name.
    Name,
    /// Count in A, in B.
    CountA,
    /// Count in B.
    CountB,
    /// Device time in A.
    TimeA,
    /// Device time in B.
    TimeB,
    /// Device time B − A.
    TimeDelta,
    /// Host (total) time B − A.
    HostDelta,
    /// Bytes in A.
    BytesA,
    /// Bytes in B.
    BytesB,
    /// Bytes B − A.
    BytesDelta,
}

impl DiffRow {
    fn side(s: Option<Side>) -> Side {
        s.unwrap_or_default()
    }

    /// Device time B − A, ns.
    pub fn time_delta(&self) -> f64 {
        Self::side(self.b).device_ns - Self::side(self.a).device_ns
    }

    /// Total (host for operators) time B − A, ns.
    pub fn host_delta(&self) -> f64 {
        Self::side(self.b).total_ns - Self::side(self.a).total_ns
    }

    /// Bytes B − A.
    pub fn bytes_delta(&self) -> f64 {
        Self::side(self.b).bytes - Self::side(self.a).bytes
    }

    /// The value of a sort column (names sort separately).
    pub fn value(&self, key: DiffKey) -> f64 {
        let (a, b) = (Self::side(self.a), Self::side(self.b));
        match key {
            DiffKey::Name => 0.0,
            DiffKey::CountA => a.count as f64,
            DiffKey::CountB => b.count as f64,
            DiffKey::TimeA => a.device_ns,
            DiffKey::TimeB => b.device_ns,
            DiffKey::TimeDelta => self.time_delta(),
            DiffKey::HostDelta => self.host_delta(),
            DiffKey::BytesA => a.bytes,
            DiffKey::BytesB => b.bytes,
            DiffKey::BytesDelta => self.bytes_delta(),
        }
    }
}

/// The diff of two profiles of one kind: every name of either, by decreasing |device time
/// difference| (then name).
pub fn diff(a: &Profile, b: &Profile) -> Vec<DiffRow> {
    let mut by_name: BTreeMap<&str, DiffRow> = BTreeMap::new();
    for (side, p) in [(0, a), (1, b)] {
        for r in &p.rows {
            let e = by_name.entry(r.name.as_str()).or_insert_with(|| DiffRow {
                name: r.name.clone(),
                a: None,
                b: None,
            });
            if side == 0 {
                e.a = Some(r.into());
            } else {
                e.b = Some(r.into());
            }
        }
    }
    let mut rows: Vec<DiffRow> = by_name.into_values().collect();
    sort(&mut rows, DiffKey::TimeDelta, true);
    rows
}

/// Sorts diff rows by a column; `by_magnitude` sorts deltas by their absolute value, largest
/// first (other columns: largest first; names: alphabetical).
pub fn sort(rows: &mut [DiffRow], key: DiffKey, by_magnitude: bool) {
    rows.sort_by(|x, y| {
        let o = match key {
            DiffKey::Name => x.name.cmp(&y.name),
            _ => {
                let (vx, vy) = (x.value(key), y.value(key));
                if by_magnitude {
                    vy.abs().total_cmp(&vx.abs())
                } else {
                    vy.total_cmp(&vx)
                }
            }
        };
        o.then_with(|| x.name.cmp(&y.name))
    });
}

/// Totals of each side over all rows.
pub fn totals(rows: &[DiffRow]) -> DiffRow {
    let mut a = Side::default();
    let mut b = Side::default();
    let (mut any_a, mut any_b) = (false, false);
    for r in rows {
        for (acc, s, any) in [(&mut a, r.a, &mut any_a), (&mut b, r.b, &mut any_b)] {
            if let Some(s) = s {
                *any = true;
                acc.count += s.count;
                acc.device_ns += s.device_ns;
                acc.total_ns += s.total_ns;
                acc.bytes += s.bytes;
                acc.flops += s.flops;
            }
        }
    }
    DiffRow {
        name: "all".into(),
        a: any_a.then_some(a),
        b: any_b.then_some(b),
    }
}

/// `B / A` as a ratio string (`0.57x`), or `new`/`gone` when a side is missing or zero.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => format!("{:.2}x", b / a),
        (None | Some(_), Some(b)) if b > 0.0 => "new".into(),
        (Some(a), None | Some(_)) if a > 0.0 => "gone".into(),
        _ => "".into(),
    }
}

/// Orders two optional floats (missing last).
pub fn cmp_opt(a: Option<f64>, b: Option<f64>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, count: usize, device_ns: f64, bytes: f64) -> Row {
        Row {
            name: name.into(),
            count,
            total_ns: device_ns * 2.0,
            self_ns: device_ns,
            device_ns,
            flops: 0.0,
            bytes,
            spans: vec![],
            members: vec![],
        }
    }

    fn p(rows: Vec<Row>) -> Profile {
        Profile {
            rows,
            ..Profile::default()
        }
    }

    #[test]
    fn matches_names_and_orders_by_time_difference() {
        let a = p(vec![
            row("mm", 30, 300.0, 3000.0),
            row("add", 10, 50.0, 500.0),
            row("clone", 3, 30.0, 100.0),
        ]);
        let b = p(vec![
            row("mm", 30, 280.0, 2800.0),
            row("add", 2, 10.0, 100.0),
            row("fused", 4, 90.0, 900.0),
        ]);
        let d = diff(&a, &b);
        let names: Vec<&str> = d.iter().map(|r| r.name.as_str()).collect();
        // |Δ|: fused +90, add −40, clone −30, mm −20.
        assert_eq!(names, ["fused", "add", "clone", "mm"]);
        assert_eq!(d[0].a, None);
        assert_eq!(d[2].b, None);
        assert_eq!(d[1].time_delta(), -40.0);
        assert_eq!(d[1].bytes_delta(), -400.0);
        assert_eq!(d[1].host_delta(), -80.0);
        let t = totals(&d);
        assert_eq!(t.a.unwrap().count, 43);
        assert_eq!(t.b.unwrap().device_ns, 380.0);
        let mut by_count = d.clone();
        sort(&mut by_count, DiffKey::CountA, false);
        assert_eq!(by_count[0].name, "mm");
        sort(&mut by_count, DiffKey::Name, false);
        assert_eq!(by_count[0].name, "add");
    }

    #[test]
    fn ratios_say_new_and_gone() {
        assert_eq!(ratio(Some(200.0), Some(100.0)), "0.50x");
        assert_eq!(ratio(None, Some(1.0)), "new");
        assert_eq!(ratio(Some(1.0), None), "gone");
        assert_eq!(ratio(Some(0.0), Some(0.0)), "");
        assert_eq!(cmp_opt(Some(1.0), None), Ordering::Less);
    }
}
