//! `tpuemu bench collective`: simulated times against the ICI cost model of the JAX scaling book
//! (figures computed here from the published link bandwidth, not from the report's own model),
//! the hop-latency floor of tiny messages, contention in an all-to-all, and clear errors.

use std::process::{Command, Output};

/// v5e ICI: 45 GB/s per link and direction (specs/tpu-generations.md), about 1 us per hop.
const LINK: f64 = 45e9;
const HOP: f64 = 1e-6;

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

fn within(got: f64, want: f64, tol: f64, what: &str) {
    assert!(
        (got - want).abs() <= tol * want,
        "{what}: {got:.3e} s, model {want:.3e} s ({:.2}x)",
        got / want
    );
}

#[test]
fn large_collectives_take_what_the_ici_model_says() {
    // 64 MiB over a wrapping 16-chip axis: the book's V / W, W both directions of a link.
    let v = (64u64 << 20) as f64;
    let w = 2.0 * LINK;
    for (op, model) in [
        ("all-gather", v / w),
        ("reduce-scatter", v / w),
        ("all-reduce", 2.0 * v / w),
    ] {
        let r = bench(op, "v5e:16x16", "1", 64 << 20, &["--timing-only"]);
        assert_eq!(r["bidirectional"], serde_json::json!([true]), "{op}");
        within(seconds(&r), model, 0.15, op);
        let algbw = r["algbw_bytes_per_s"].as_f64().unwrap();
        within(algbw, v / seconds(&r), 1e-9, "algbw");
    }
}

#[test]
fn without_wraparound_a_ring_takes_about_twice_as_long() {
    for op in ["all-gather", "reduce-scatter", "all-reduce"] {
        let wrap = bench(op, "v5e:16x16", "0", 32 << 20, &["--timing-only"]);
        let line = bench(
            op,
            "v5e:16x16",
            "0",
            32 << 20,
            &["--timing-only", "--set", "ici_wrap_multiple=1024"],
        );
        assert_eq!(line["wraparound"], serde_json::json!([false, false]));
        assert_eq!(line["bidirectional"], serde_json::json!([false]));
        within(seconds(&line) / seconds(&wrap), 2.0, 0.15, op);
    }
    // v5e axes shorter than 16 chips do not wrap: 4 chips in a line carry (n-1)/n V over one
    // direction of a link.
    let r = bench("all-gather", "v5e:4x4", "0", 16 << 20, &["--timing-only"]);
    within(
        seconds(&r),
        0.75 * (16 << 20) as f64 / LINK,
        0.15,
        "v5e:4x4",
    );
}

#[test]
fn tiny_collectives_pay_the_hop_latency() {
    // 4 KiB over a 16-chip ring: a chain walks n/2 = 8 hops.
    let ag = seconds(&bench("all-gather", "v5e:16x16", "1", 4096, &[]));
    within(ag, 8.0 * HOP, 0.15, "all-gather");
    // Reduce-scatter adds at every step, so each hop also waits for the partial sum to be
    // staged and added; all-reduce is both.
    let rs = seconds(&bench("reduce-scatter", "v5e:16x16", "1", 4096, &[]));
    assert!((8.0 * HOP..2.0 * 8.0 * HOP).contains(&rs), "{rs}");
    let ar = seconds(&bench("all-reduce", "v5e:16x16", "1", 4096, &[]));
    assert!((16.0 * HOP..2.0 * 16.0 * HOP).contains(&ar), "{ar}");
}

#[test]
fn an_all_to_all_is_bound_by_its_busiest_link() {
    // 16 chips on a ring, each sending V/16 to every other the short way round (ties +): a +
    // link carries the blocks going 1..8 hops, 1 + 2 + ... + 8 = 36 blocks.
    let v = 64u64 << 20;
    let r = bench("all-to-all", "v5e:16x16", "1", v, &["--timing-only"]);
    within(
        seconds(&r),
        36.0 * (v / 16) as f64 / LINK,
        0.15,
        "all-to-all",
    );
}

#[test]
fn functional_runs_move_the_data_and_report_it() {
    let r = bench("all-reduce", "v5e:2x2", "0,1", 1 << 20, &[]);
    assert_eq!(r["functional"], serde_json::json!(true));
    assert_eq!(r["group_size"], serde_json::json!(4));
    assert!(r["ici_bytes"].as_u64().unwrap() > 0);
    assert!(r["host_seconds"].as_f64().is_some());
}

#[test]
fn bad_arguments_are_clear_errors() {
    for (args, want) in [
        (vec!["--slice", "v5e:4y4"], "not a chip count"),
        (vec!["--slice", "v9:4x4"], "v9"),
        (vec!["--slice", "v5e:4x4x4"], "at most 2 axes"),
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
