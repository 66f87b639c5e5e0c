//! Every mnemonic spelling, and "did you mean" suggestions for unknown ones.
//!
//! The list is built from the `ALL` tables of [`crate::ops`], so it names exactly what the
//! assembler accepts; it is only computed when an error needs it.

use crate::ops::*;

/// Every complete mnemonic the assembler accepts (`vadd.f32`, `mxu.mm.f32.p3`, ...), including
/// type combinations that the validity checks then refuse.
pub fn all_mnemonics() -> Vec<String> {
    let mut out: Vec<String> = [
        "nop",
        "halt",
        "br",
        "brz",
        "brnz",
        "smov",
        "sld",
        "sst",
        "ssys",
        "vmask",
        "vtrans",
        "mnot",
        "mset",
        "mxu.pop",
        "mxu.pop.acc",
        "dma",
        "sem.signal",
        "sem.wait",
        "barrier",
        "mark.begin",
        "mark.end",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let tys = VType::ALL;
    out.extend(SAluOp::ALL.iter().map(|o| format!("s{o}")));
    out.extend(CmpOp::ALL.iter().map(|o| format!("scmp.{o}")));
    for f in MemFmt::ALL {
        out.extend(["vld", "vst", "vgather"].map(|m| format!("{m}.{f}")));
    }
    for t in tys {
        out.push(format!("vmov.{t}"));
        out.push(format!("vsel.{t}"));
        out.extend(
            VBinOp::ALL
                .iter()
                .filter(|o| o.supports(*t))
                .map(|o| format!("v{o}.{t}")),
        );
        out.extend(
            VUnOp::ALL
                .iter()
                .filter(|o| o.supports(*t))
                .map(|o| format!("v{o}.{t}")),
        );
        out.extend(CmpOp::ALL.iter().map(|o| format!("vcmp.{o}.{t}")));
        for o in RedOp::ALL {
            out.extend(Axis::ALL.iter().map(|a| format!("vred.{o}.{t}.{a}")));
        }
    }
    out.extend(CvtOp::ALL.iter().map(|o| format!("vcvt.{o}")));
    out.extend(IotaKind::ALL.iter().map(|k| format!("viota.{k}")));
    for a in Axis::ALL {
        out.push(format!("vrot.{a}"));
        out.push(format!("vperm.{a}"));
    }
    out.extend(MaskOp::ALL.iter().map(|o| format!("m{o}")));
    for f in MxuFmt::ALL {
        out.push(format!("mxu.lw.{f}"));
        out.extend(Precision::ALL.iter().map(|p| format!("mxu.mm.{f}.{p}")));
    }
    out
}

/// Up to three accepted mnemonics close to `name`: those within a small edit distance, or,
/// when `name` lacks its dotted suffixes, the ones it begins.
pub fn suggest(name: &str) -> Vec<String> {
    if name.len() > 40 {
        return Vec::new();
    }
    let all = all_mnemonics();
    let prefix = format!("{name}.");
    let mut scored: Vec<(usize, String)> = all
        .into_iter()
        .filter_map(|m| {
            let d = if m.starts_with(&prefix) {
                1
            } else {
                distance(name, &m)
            };
            (d <= (name.len() + 2).div_ceil(3).clamp(1, 3)).then_some((d, m))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, m)| m).collect()
}

/// Levenshtein distance between two short strings.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names() {
        assert!(suggest("vadd.f23").contains(&"vadd.f32".to_string()));
        assert!(suggest("vadd").contains(&"vadd.f32".to_string()));
        assert!(suggest("hlat").contains(&"halt".to_string()));
        assert!(suggest("zzzzzzzzz").is_empty());
    }
}
