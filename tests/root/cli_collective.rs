//! `tpuemu bench collective` against facts that do not come from the program: what the
//! published link bandwidths allow at best (a chip receives an all-gather's bytes over its
//! links; every chip must send on its share of a reduce-scatter), the hop latency a far chip's
//! data needs at least, hand-counted link loads, the published pod sizes, and the same run
//! simulated chip by chip.

use std::process::{Command, Output};

/// One-way link bandwidths [SB]: v5e 45 GB/s, v5p 90 GB/s; about 1 us per hop [SB]. v5e
/// data-centre network: 6.4 Tbps per 256-chip pod [GC], 3.125 GB/s per chip.
const V5E_LINK: f64 = 45e9;
const V5P_LINK: f64 = 90e9;
/// v4: 45 GB/s one-way [SB].
const V4_LINK: f64 = 45e9;
const HOP: f64 = 1e-6;
const V5E_DCN: f64 = 6.4e12 / 8.0 / 256.0;

fn tpuemu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tpuemu"))
        .args(args)
        .output()
        .expect("the tpuemu binary runs")
}

/// Runs one collective; returns its JSON report.
fn bench(op: &str, slice: &str, axes: &str, bytes: u64, extra: &[&str]) -> serde_json::Value {
    let b = bytes.to_string();
    let mut args = vec![
        "bench",
        "collective",
        "--op",
        op,
        "--slice",
        slice,
        "--axes",
        axes,
        "--bytes",
        &b,
        "--json",
    ];
    args.extend(extra);
    let o = tpuemu(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON report")
}

fn seconds(v: &serde_json::Value) -> f64 {
    v["seconds_simulated"].as_f64().expect("seconds_simulated")
}

/// `got` lies in `[lo, hi]`.
fn between(got: f64, lo: f64, hi: f64, what: &str) {
    assert!(
        (lo..=hi).contains(&got),
        "{what}: {got:.4e} s, expected {lo:.4e} to {hi:.4e} s"
    );
}

/// Every op over every axis of the slice: no faster than `N-1` of the `N` shards crossing the
/// `2k` links of a chip (twice for all-reduce), and within 10% of the book's `V / (k W)`.
fn multi_axis(slice: &str, axes: &str, k: f64, chips: f64, link: f64) {
    multi_axis_of(64 << 20, slice, axes, k, chips, link);
}

/// [`multi_axis`] for `bytes` bytes.
fn multi_axis_of(bytes: u64, slice: &str, axes: &str, k: f64, chips: f64, link: f64) {
    let v = bytes as f64;
    for (op, f) in [
        ("all-gather", 1.0),
        ("reduce-scatter", 1.0),
        ("all-reduce", 2.0),
    ] {
        let r = bench(op, slice, axes, bytes, &["--timing-only"]);
        let least = f * (chips - 1.0) / chips * v / (2.0 * k * link);
        let book = f * v / (k * 2.0 * link);
        between(
            seconds(&r),
            least,
            1.10 * book,
            &format!("{op} {slice} {axes}"),
        );
    }
}

#[test]
fn collectives_over_several_axes_use_every_axis_at_once() {
    multi_axis("v5e:16x16", "0,1", 2.0, 256.0, V5E_LINK);
    multi_axis("v5p:4x4x4", "0,1,2", 3.0, 64.0, V5P_LINK);
}

#[test]
fn axes_of_different_lengths_take_turns() {
    // v4 4x4x8, every axis a ring (45 GB/s one-way links [SB], both ways): a chip still has
    // `2k` links to receive over, so the book's `V / (k W)` holds whatever the lengths. Parts
    // rotated over the axes with equal shares load the ring of 8 with 49 of every 127 bytes a
    // chip receives (hand count: 1.16x the book's figure).
    let v256 = 256 << 20;
    multi_axis_of(v256, "v4:4x4x8", "0,1,2", 3.0, 128.0, V4_LINK);
    multi_axis_of(v256, "v4:4x4x8", "0,2", 2.0, 32.0, V4_LINK);
    multi_axis_of(v256, "v4:4x4x8", "2", 1.0, 8.0, V4_LINK);
}

#[test]
fn axes_of_different_bandwidths_share_the_data_by_it() {
    // v5e 8x16: a line of 8 (no wraparound: one way round, 45 GB/s) and a ring of 16 (both
    // ways, 90 GB/s); the book's V / (W_0 + W_1). An even split of the data between the two
    // parts leaves the line the bottleneck (a hand count of its bytes: 1.40x the book's
    // figure); a split by the first axis's bandwidth took 1.11-1.16x at 256 MiB.
    let v = (64u64 << 20) as f64;
    let w = V5E_LINK + 2.0 * V5E_LINK;
    for (op, f) in [
        ("all-gather", 1.0),
        ("reduce-scatter", 1.0),
        ("all-reduce", 2.0),
    ] {
        let r = bench(op, "v5e:8x16", "0,1", 64 << 20, &["--timing-only"]);
        let least = f * 127.0 / 128.0 * v / w;
        between(seconds(&r), least, 1.15 * f * v / w, op);
    }
}

#[test]
fn one_axis_rings_reach_the_link_bandwidth() {
    // A 16-chip ring that wraps: each chip has two links on the axis.
    let v = (64u64 << 20) as f64;
    for (op, f) in [
        ("all-gather", 1.0),
        ("reduce-scatter", 1.0),
        ("all-reduce", 2.0),
    ] {
        let r = bench(op, "v5e:16x16", "1", 64 << 20, &["--timing-only"]);
        assert_eq!(r["bidirectional"], serde_json::json!([true]), "{op}");
        let least = f * 15.0 / 16.0 * v / (2.0 * V5E_LINK);
        between(seconds(&r), least, 1.10 * f * v / (2.0 * V5E_LINK), op);
    }
}

#[test]
fn without_wraparound_a_ring_has_half_the_links() {
    // A line of 16 (no wraparound): one chain, one link direction per chip.
    let v = (32u64 << 20) as f64;
    for (op, f) in [
        ("all-gather", 1.0),
        ("reduce-scatter", 1.0),
        ("all-reduce", 2.0),
    ] {
        let line = bench(
            op,
            "v5e:16x16",
            "0",
            32 << 20,
            &["--timing-only", "--set", "ici_wrap_multiple=1024"],
        );
        assert_eq!(line["wraparound"], serde_json::json!([false, false]));
        assert_eq!(line["bidirectional"], serde_json::json!([false]));
        let least = f * 15.0 / 16.0 * v / V5E_LINK;
        between(seconds(&line), least, 1.10 * f * v / V5E_LINK, op);
    }
    // v5e axes shorter than 16 chips do not wrap.
    let r = bench("all-gather", "v5e:4x4", "0", 16 << 20, &["--timing-only"]);
    let least = 0.75 * (16 << 20) as f64 / V5E_LINK;
    between(seconds(&r), least, 1.10 * least, "v5e:4x4");
}

#[test]
fn tiny_collectives_pay_the_hop_latency() {
    // 4 KiB: the farthest chip of a 16-chip ring is 8 hops away, of a 16x16 torus 16.
    for (axes, hops) in [("1", 8.0), ("0,1", 16.0)] {
        let ag = seconds(&bench("all-gather", "v5e:16x16", axes, 4096, &[]));
        between(ag, hops * HOP, 1.15 * hops * HOP, "all-gather");
        // Reduce-scatter also stages and adds at every hop; all-reduce goes there and back.
        let rs = seconds(&bench("reduce-scatter", "v5e:16x16", axes, 4096, &[]));
        between(rs, hops * HOP, 2.0 * hops * HOP, "reduce-scatter");
        let ar = seconds(&bench("all-reduce", "v5e:16x16", axes, 4096, &[]));
        between(ar, 2.0 * hops * HOP, 2.0 * 2.0 * hops * HOP, "all-reduce");
    }
}

#[test]
fn slices_joined_by_the_data_centre_network() {
    // Four v5e pods: ICI inside each, then each chip's 3.125 GB/s interface round the four.
    let v = (256u64 << 20) as f64;
    let r = bench(
        "all-reduce",
        "4xv5e:16x16",
        "0,1,2",
        256 << 20,
        &["--timing-only"],
    );
    assert_eq!(r["mesh"], serde_json::json!([16, 16, 4]));
    assert_eq!(r["dcn_axis"], serde_json::json!(2));
    assert_eq!(r["group_size"], serde_json::json!(1024));
    let ici = 2.0 * 255.0 / 256.0 * v / (4.0 * V5E_LINK);
    let dcn = 2.0 * 0.75 * (v / 256.0) / V5E_DCN;
    let book = 2.0 * v / (4.0 * V5E_LINK) + dcn;
    between(seconds(&r), ici + dcn, 1.10 * book, "4 x v5e:16x16");
}

#[test]
fn an_all_to_all_is_bound_by_its_busiest_link() {
    // 16 chips on a ring, each sending V/16 to every other the short way round (ties +): a +
    // link carries the blocks going 1..8 hops, 1 + 2 + ... + 8 = 36 blocks.
    let v = 64u64 << 20;
    let r = bench("all-to-all", "v5e:16x16", "1", v, &["--timing-only"]);
    let least = 36.0 * (v / 16) as f64 / V5E_LINK;
    between(seconds(&r), least, 1.10 * least, "all-to-all");
}

#[test]
fn one_chip_simulated_for_all_gives_every_chip_s_cycles() {
    // Slices where every ring wraps (v5e 4x4 given wraparound, a v5p cube, two slices joined
    // by the DCN): timing-only runs simulate one chip; `--full` simulates every chip, and
    // the cycles must be the same.
    let wrap = ["--timing-only", "--set", "ici_wrap_multiple=4"];
    for (slice, axes, args) in [
        ("v5e:4x4", "0,1", &wrap[..]),
        ("v5e:4x4", "1", &wrap[..]),
        ("v5p:4x4x4", "0,1,2", &["--timing-only"][..]),
        ("2xv5e:4x4", "0,1,2", &wrap[..]),
    ] {
        for op in ["all-gather", "reduce-scatter", "all-reduce"] {
            let one = bench(op, slice, axes, 3 << 20, args);
            let full = bench(op, slice, axes, 3 << 20, &[args, &["--full"]].concat());
            let what = format!("{op} {slice} {axes}");
            assert_eq!(one["simulated_chips"], serde_json::json!(1), "{what}");
            assert!(full["simulated_chips"].as_u64().unwrap() > 1, "{what}");
            assert_eq!(one["cycles"], full["cycles"], "{what}");
            assert_eq!(one["instructions"], full["instructions"], "{what}");
            assert_eq!(one["hbm_bytes"], full["hbm_bytes"], "{what}");
        }
    }
    // A ring that does not close in one hop is simulated chip by chip.
    let line = bench("all-gather", "v5e:4x4", "0", 1 << 20, &["--timing-only"]);
    assert_eq!(line["simulated_chips"], serde_json::json!(16));
}

#[test]
fn functional_runs_move_the_data_and_report_it() {
    let r = bench("all-reduce", "v5e:2x2", "0,1", 1 << 20, &[]);
    assert_eq!(r["functional"], serde_json::json!(true));
    assert_eq!(r["group_size"], serde_json::json!(4));
    assert_eq!(r["simulated_chips"], serde_json::json!(4));
    // Each chip sends at least its 3 of 4 blocks twice (reduce-scatter, all-gather).
    let least = 4 * 2 * 3 * ((1u64 << 20) / 4);
    assert!(
        r["ici_bytes"].as_u64().unwrap() >= least,
        "{}",
        r["ici_bytes"]
    );
}

#[test]
fn bad_arguments_are_clear_errors() {
    for (args, want) in [
        (vec!["--slice", "v5e:4y4"], "not a chip count"),
        (vec!["--slice", "v9:4x4"], "v9"),
        (vec!["--slice", "v5e:4x4x4"], "at most 2 axes"),
        // Larger than the largest published slice: the error names it.
        (vec!["--slice", "v5e:32x32"], "256 chips (16x16)"),
        (vec!["--slice", "v5e:8x32"], "16x16"),
        (vec!["--slice", "4xv5e:32x16"], "256 chips (16x16)"),
        (vec!["--slice", "v5p:16x16x32"], "6144 chips"),
        (vec!["--slice", "0xv5e:4x4"], "not a number of slices"),
        (vec!["--axes", "2"], "not an axis"),
        (vec!["--bytes", "6"], "multiple of the 4-byte"),
    ] {
        let mut full = vec!["bench", "collective", "--op", "all-gather"];
        full.extend(&args);
        if !args.contains(&"--bytes") {
            full.extend(["--bytes", "4096"]);
        }
        let o = tpuemu(&full);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
