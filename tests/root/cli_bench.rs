//! `tpuemu bench eager` and `tpuemu demo` on small models: the figures every mode reports, the
//! gains of fusion and compilation, the traces, and clear errors for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tpuemu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tpuemu"))
        .args(args)
        .output()
        .expect("the tpuemu binary runs")
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn bench(workload: &str, mode: &str) -> serde_json::Value {
    let o = tpuemu(&[
        "bench",
        "eager",
        "--workload",
        workload,
        "--mode",
        mode,
        "--small",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON report")
}

#[test]
fn every_mode_reports_the_same_loss_and_fusion_saves_kernels() {
    for workload in ["mlp", "transformer-block"] {
        let reports: Vec<serde_json::Value> = ["strict", "debug", "defer", "compile"]
            .iter()
            .map(|m| bench(workload, m))
            .collect();
        for r in &reports {
            for field in [
                "seconds_simulated",
                "kernels_launched",
                "hbm_bytes",
                "host_seconds",
            ] {
                assert!(r[field].is_number(), "{workload}: {field} missing in {r}");
            }
            assert!(r["seconds_simulated"].as_f64().unwrap() > 0.0);
            assert_eq!(
                r["loss"], reports[0]["loss"],
                "{workload}: loss differs by mode"
            );
        }
        // Device-side facts, independent of the host cost constants: the fused kernels keep
        // intermediates on chip, so they move fewer HBM bytes and keep the device busy for less
        // time than Strict's one kernel per operator; Compile fuses the whole step into fewer
        // kernels than DeferAndFuse and also moves fewer bytes than Strict (since attention
        // became the flash kernels Compile moves about 1% more than DeferAndFuse on this block:
        // an open item, so the test does not claim Compile <= DeferAndFuse in bytes). The
        // device is busy for part of the step, never longer than the step itself.
        let f = |i: usize, field: &str| reports[i][field].as_f64().unwrap();
        for i in 0..4 {
            let busy = f(i, "device_busy_seconds");
            assert!(
                busy > 0.0 && busy <= f(i, "seconds_simulated"),
                "{workload}: busy {busy} s in a {} s step",
                f(i, "seconds_simulated")
            );
        }
        assert!(
            f(2, "hbm_bytes") < f(0, "hbm_bytes") && f(3, "hbm_bytes") < f(0, "hbm_bytes"),
            "{workload}: HBM bytes strict {} defer {} compile {}",
            f(0, "hbm_bytes"),
            f(2, "hbm_bytes"),
            f(3, "hbm_bytes")
        );
        assert!(
            f(2, "device_busy_seconds") < f(0, "device_busy_seconds"),
            "{workload}: device busy strict {} defer {}",
            f(0, "device_busy_seconds"),
            f(2, "device_busy_seconds")
        );
        let k = |i: usize| reports[i]["kernels_launched"].as_u64().unwrap();
        assert_eq!(k(0), k(1), "{workload}: Debug launches what Strict does");
        assert!(
            k(2) < k(0),
            "{workload}: DeferAndFuse fuses ({} vs {})",
            k(2),
            k(0)
        );
        assert_eq!(k(3), 1, "{workload}: Compile runs one program");
        // Debug runs Strict's kernels, one at a time: the same device work, never faster.
        assert_eq!(f(1, "hbm_bytes"), f(0, "hbm_bytes"), "{workload}");
        let t = |i: usize| f(i, "seconds_simulated");
        assert!(
            t(1) >= t(0),
            "{workload}: launch-blocking is no faster than Strict"
        );
        // Compile is never slower than DeferAndFuse. DeferAndFuse is never slower than doing its
        // host work and its device work one after the other; it beats Strict on the block,
        // whose 119 operators flush four times, so the device runs one part while the host
        // records the next. (The MLP's 18 operator calls are one graph: with the bridge's measured
        // host costs its device starts only when the host has recorded the whole step, and
        // Strict, overlapping the two, is faster.)
        let serial = f(2, "host_busy_seconds") + f(2, "device_busy_seconds");
        assert!(
            t(3) <= t(2) && t(2) <= serial * 1.0001,
            "{workload}: {} {} {serial}",
            t(2),
            t(3)
        );
        if workload == "transformer-block" {
            assert!(t(2) < t(0), "{workload}: {} {}", t(0), t(2));
        }
    }
}

#[test]
fn bench_trace_has_spans_and_flows() {
    let dir = scratch("cli_bench_trace");
    let path = dir.join("t.json");
    let o = tpuemu(&[
        "bench",
        "eager",
        "--workload",
        "mlp",
        "--mode",
        "defer",
        "--small",
        "--trace",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&path).expect("trace written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("trace is JSON");
    let ev = v["traceEvents"].as_array().expect("traceEvents");
    let count = |ph: &str| ev.iter().filter(|e| e["ph"] == ph).count();
    assert!(count("X") >= 10, "spans");
    assert!(
        count("s") > 0 && count("f") > 0,
        "flows from operators to kernels"
    );
    assert!(
        ev.iter().any(|e| e["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("fused group"))),
        "fused groups on the host timeline"
    );
}

#[test]
fn demo_prints_the_table_and_writes_a_trace_per_mode() {
    let dir = scratch("cli_demo");
    let o = tpuemu(&["demo", "--small", "--out", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for want in [
        "Strict",
        "DeferAndFuse",
        "Compile",
        "kernels launched",
        "HBM bytes",
        "tpuemu viz",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
    for mode in ["strict", "defer", "compile"] {
        assert!(dir.join(format!("{mode}.json")).is_file(), "{mode} trace");
    }
}

#[test]
fn bad_input_is_refused_clearly() {
    let o = tpuemu(&["bench", "eager", "--workload", "resnet"]);
    assert_eq!(o.status.code(), Some(2), "clap usage error");
    let o = tpuemu(&["bench", "eager", "--chip", "v99", "--small"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown chip `v99`") && !err.contains("panicked"),
        "{err}"
    );
    // Out of range: a usage error naming the argument and its range, never silently replaced.
    let o = tpuemu(&["bench", "eager", "--steps", "0", "--small"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--steps") && err.contains("1..=1000"), "{err}");
}

fn bench_with(mode: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "bench",
        "eager",
        "--workload",
        "mlp",
        "--mode",
        mode,
        "--small",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = tpuemu(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON report")
}

#[test]
fn host_costs_are_reported_and_overridable() {
    let base = bench_with("defer", &[]);
    let c = &base["host_costs"];
    // Every figure is reported (the defaults are the bridge's measured costs, runtime/config.rs).
    for f in [
        "op_dispatch_ns",
        "view_ns",
        "launch_ns",
        "record_ns",
        "flush_ns",
        "flush_op_ns",
        "compile_ns",
    ] {
        assert!(c[f].as_f64().is_some_and(|x| x > 0.0), "{f}: {c}");
    }
    for field in [
        "host_busy_seconds",
        "exposed_host_seconds",
        "device_busy_seconds",
    ] {
        assert!(base[field].as_f64().unwrap() >= 0.0, "{field} in {base}");
    }
    // Every operator of a DeferAndFuse step but its views is recorded once: lowering the
    // record cost by 5,000 ns lowers the host's work by 5,000 ns per such operator call, and
    // changes nothing the device does.
    let cheap = bench_with("defer", &["--set", "host.record_ns=1000"]);
    assert_eq!(cheap["host_costs"]["record_ns"].as_f64(), Some(1000.0));
    let views = base["view_calls"].as_f64().unwrap();
    assert!(views > 0.0, "the MLP transposes its weights: {base}");
    let ops = base["ops"].as_f64().unwrap() - views;
    let saved =
        base["host_busy_seconds"].as_f64().unwrap() - cheap["host_busy_seconds"].as_f64().unwrap();
    let want = ops * (c["record_ns"].as_f64().unwrap() - 1000.0) / 1e9;
    assert!(
        (saved - want).abs() <= 1e-9 * want.max(1e-9) + 1e-12,
        "saved {saved} s, want {ops} ops x the difference = {want} s"
    );
    for field in ["hbm_bytes", "kernels_launched"] {
        assert_eq!(base[field], cheap[field], "{field}");
    }
    // The same kernels start at other host times: their busy times sum to the same figure up
    // to the rounding of `end - start` in f64 nanoseconds.
    let (b0, b1) = (
        base["device_busy_seconds"].as_f64().unwrap(),
        cheap["device_busy_seconds"].as_f64().unwrap(),
    );
    assert!((b0 - b1).abs() <= 1e-9 * b0, "device busy {b0} vs {b1}");
    // The host's work by kind adds up to it; recording is what the non-view operators cost.
    let by = base["host_breakdown_seconds"].as_object().unwrap();
    let sum: f64 = by.values().map(|v| v.as_f64().unwrap()).sum();
    let busy = base["host_busy_seconds"].as_f64().unwrap();
    assert!(
        (sum - busy).abs() <= 1e-12 + 1e-9 * busy,
        "{by:?} vs {busy}"
    );
    let record = ops * c["record_ns"].as_f64().unwrap() / 1e9;
    assert!(
        (by["record"].as_f64().unwrap() - record).abs() <= 1e-12,
        "{by:?}"
    );
    // Views cost `view_ns` in every mode: at 0 a Strict step saves exactly that per view.
    let strict = bench_with("strict", &[]);
    let free = bench_with("strict", &["--set", "host.view_ns=0"]);
    let views = strict["view_calls"].as_f64().unwrap();
    let saved =
        strict["host_busy_seconds"].as_f64().unwrap() - free["host_busy_seconds"].as_f64().unwrap();
    let want = views * strict["host_costs"]["view_ns"].as_f64().unwrap() / 1e9;
    assert!(
        want > 0.0 && (saved - want).abs() <= 1e-9 * want + 1e-12,
        "saved {saved} s, want {views} views x view_ns = {want} s"
    );
    // A chip TOML file's [host] table, then --set, in that order.
    let dir = scratch("host_costs");
    let file = dir.join("chip.toml");
    std::fs::write(
        &file,
        "base = \"v5e\"\n[host]\nrecord_ns = 2000\nlaunch_ns = 500\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let r = bench_with("defer", &["--chip", f, "--set", "host.launch_ns=700"]);
    assert_eq!(r["host_costs"]["record_ns"].as_f64(), Some(2000.0));
    assert_eq!(r["host_costs"]["launch_ns"].as_f64(), Some(700.0));
    // `chips --toml` writes the host costs as a `[host]` table that reads back.
    let o = tpuemu(&["chips", "--toml", "v5e"]);
    assert!(o.status.success());
    // The exported figure, whatever the default is, edited to one no default has.
    let text: String = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| match l.starts_with("record_ns = ") {
            true => "record_ns = 2500.0\n".to_string(),
            false => format!("{l}\n"),
        })
        .collect();
    assert!(
        text.contains("[host]") && text.contains("record_ns = 2500.0"),
        "{text}"
    );
    let exported = dir.join("exported.toml");
    std::fs::write(&exported, text).unwrap();
    let r = bench_with("defer", &["--chip", exported.to_str().unwrap()]);
    assert_eq!(r["host_costs"]["record_ns"].as_f64(), Some(2500.0));
    assert_eq!(r["host_costs"]["view_ns"], base["host_costs"]["view_ns"]);
    // Bad names and values are clear errors, and a command without a runtime refuses them.
    for (set, says) in [
        ("host.bogus_ns=1", "host.record_ns"),
        ("host.record_ns=-5", "nanoseconds from 0"),
        ("host.record_ns=fast", "not a number"),
    ] {
        let o = tpuemu(&["bench", "eager", "--small", "--set", set]);
        assert_eq!(o.status.code(), Some(1), "{set}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(says) && !err.contains("panicked"),
            "{set}: {err}"
        );
    }
    let o = tpuemu(&["bench", "gemm", "--set", "host.record_ns=1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("host costs apply"),
        "{err}"
    );
}
