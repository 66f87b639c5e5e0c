//! `tpuemu predict`: a training step's prediction checked against figures derived here by hand
//! from the model's shapes and the chip's published peak (not from the program's own model),
//! the Chrome trace it writes, the out-of-memory verdict, and clear errors for bad input.

use std::process::{Command, Output};

/// TPU v5e: 197 TFLOP/s bf16 and 16 GB (10^9 bytes) of HBM per chip (Google Cloud's published
/// figures).
const V5E_PEAK: f64 = 197e12;
const V5E_HBM: f64 = 16e9;

fn tpuemu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tpuemu"))
        .args(args)
        .output()
        .expect("the tpuemu binary runs")
}

/// A small Llama-shaped model: 2 layers, width 256, 4 heads of 64 (2 key/value heads), SwiGLU
/// width 512, vocabulary 1024, untied head.
const SMALL: &str =
    "name = 'small'\nlayers = 2\nd_model = 256\nheads = 4\nkv_heads = 2\nffn = 512\nvocab = 1024\n";

/// The small model's parameters, counted by hand: per layer q (256x256), k and v (128x256
/// each), o (256x256), gate, up, down (512x256 each), two norms (256 each); embedding and
/// head (1024x256 each) and the final norm.
fn small_params() -> (f64, f64) {
    let layer = 256.0 * 256.0 * 2.0 + 128.0 * 256.0 * 2.0 + 3.0 * 512.0 * 256.0 + 2.0 * 256.0;
    let outer = 2.0 * 1024.0 * 256.0 + 256.0;
    (2.0 * layer + outer, 1024.0 * 256.0)
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tpuemu-predict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn predict_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["predict"];
    all.extend(args);
    all.push("--json");
    let o = tpuemu(&all);
    assert!(
        o.status.success(),
        "predict failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("JSON report")
}

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn a_small_model_on_a_v5e_slice_obeys_hand_derived_bounds() {
    let model = temp("small.toml");
    std::fs::write(&model, SMALL).unwrap();
    let trace = temp("step.json");
    let (seq, batch, chips) = (256.0, 2.0, 4.0);
    let v = predict_json(&[
        "--model",
        model.to_str().unwrap(),
        "--slice",
        "v5e:2x2",
        "--seq",
        "256",
        "--batch-per-chip",
        "2",
        "--parallel",
        "fsdp=4",
        "--loss-chunk",
        "256",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(f(&v, "chips"), chips);
    let step = f(&v, "step_s");
    // Model FLOPs by PaLM's formula: 6 N T + 12 L H Q S T, N without the input embedding.
    let (params, lookup) = small_params();
    let tokens = seq * batch * chips;
    let model_flops = (6.0 * (params - lookup) + 12.0 * 2.0 * 256.0 * seq) * tokens;
    let got = f(&v, "model_flops");
    assert!(
        (got / model_flops - 1.0).abs() < 1e-9,
        "model FLOPs {got:e}, by hand {model_flops:e}"
    );
    // MFU: the model FLOPs over the slice's peak for the step time; in (0, 1].
    let mfu = f(&v, "mfu");
    assert!(mfu > 0.0 && mfu <= 1.0, "MFU {mfu}");
    let want = model_flops / (chips * V5E_PEAK * step);
    assert!((mfu / want - 1.0).abs() < 1e-6, "MFU {mfu}, by hand {want}");
    // The other convention (MaxText's): causal attention's masked half not counted,
    // 6 N T + 6 L H Q S T.
    let causal_flops = (6.0 * (params - lookup) + 6.0 * 2.0 * 256.0 * seq) * tokens;
    let got = f(&v, "model_flops_causal");
    assert!(
        (got / causal_flops - 1.0).abs() < 1e-9,
        "causal model FLOPs {got:e}, by hand {causal_flops:e}"
    );
    let mfu_causal = f(&v, "mfu_causal");
    let want = causal_flops / (chips * V5E_PEAK * step);
    assert!(
        (mfu_causal / want - 1.0).abs() < 1e-6 && mfu_causal < mfu,
        "causal MFU {mfu_causal}, by hand {want}"
    );
    // Nothing beats the matrix units at peak: the chip's share of the model FLOPs takes at
    // least that long.
    assert!(step >= model_flops / chips / V5E_PEAK);
    // Tokens per second per chip: the chip's tokens over the step time.
    let tps = f(&v, "tokens_per_s_per_chip");
    assert!(
        (tps / (seq * batch / step) - 1.0).abs() < 1e-9,
        "tokens/s/chip {tps}, step {step} s"
    );
    // The breakdown is the step: MXU busy + HBM-bound + exposed communication + idle.
    let parts = ["mxu_busy_s", "hbm_vector_s", "exposed_comm_s", "idle_s"];
    let sum: f64 = parts.iter().map(|k| f(&v, k)).sum();
    assert!(parts.iter().all(|k| f(&v, k) >= 0.0));
    assert!(
        (sum / step - 1.0).abs() < 1e-6,
        "breakdown {sum} s, step {step} s"
    );
    // The matrix units did at least the model's dense work on this chip's tokens (6 N per
    // token of the weights the chip's tokens pass through).
    let mxu = f(&v, "mxu_flops_per_chip");
    assert!(
        mxu >= 6.0 * (params - lookup) * seq * batch,
        "MXU FLOPs {mxu:e}"
    );
    // HBM: 16 bytes of state per parameter, sharded over 4 chips; small against 16 GB.
    let hbm = &v["hbm"];
    let state = f(hbm, "state");
    assert!(state >= 16.0 * params / chips && state < 16.0 * params / chips * 1.05);
    assert_eq!(f(hbm, "capacity"), V5E_HBM);
    assert_eq!(v["fits"], serde_json::json!(true));
    // The trace: Chrome JSON with the chip's compute and its collectives.
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().expect("traceEvents");
    let names: Vec<&str> = events.iter().filter_map(|e| e["name"].as_str()).collect();
    assert!(names.iter().any(|n| n.contains("attention fwd")));
    assert!(names.iter().any(|n| n.starts_with("all-gather")));
    assert!(names.iter().any(|n| n.starts_with("reduce-scatter")));
}

#[test]
fn the_text_report_names_every_figure() {
    let o = tpuemu(&[
        "predict",
        "--model",
        "llama3.1-8b",
        "--slice",
        "v5e:2x2",
        "--seq",
        "256",
        "--loss-chunk",
        "256",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for what in [
        "step time",
        "tokens/s/chip",
        "MFU",
        "MXU busy",
        "HBM-bound",
        "exposed communication",
        "idle",
        "HBM per chip",
    ] {
        assert!(text.contains(what), "no `{what}` in:\n{text}");
    }
    // 8B parameters x 16 bytes of state over 4 chips of 16 GB: 32 GB each, out of memory.
    assert!(text.contains("OUT OF MEMORY"), "{text}");
    assert!(text.contains("shard them over more chips"), "{text}");
}

#[test]
fn a_model_too_large_for_the_slice_gets_an_out_of_memory_verdict_and_advice() {
    let v = predict_json(&[
        "--model",
        "llama2-70b",
        "--slice",
        "v5e:2x2",
        "--seq",
        "128",
        "--loss-chunk",
        "128",
    ]);
    assert_eq!(v["fits"], serde_json::json!(false));
    // 69B parameters x 16 bytes over 4 chips: far beyond 16 GB each.
    assert!(f(&v["hbm"], "total") > 16.0 * 69e9 / 4.0);
    let advice = v["suggestion"].as_str().expect("advice");
    assert!(advice.contains("more chips"), "{advice}");
}

/// Runs a bad command: it fails with a message containing `want`, and does not panic.
fn fails(args: &[&str], want: &str) {
    let mut all = vec!["predict"];
    all.extend(args);
    let o = tpuemu(&all);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(err.contains(want), "{args:?}: expected `{want}` in: {err}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let base = |model: &'static str, slice: &'static str| vec!["--model", model, "--slice", slice];
    fails(&base("llama9-1t", "v5e:2x2"), "unknown model `llama9-1t`");
    fails(&base("llama3.1-8b", "v5e-2x2"), "expected GENERATION:AxB");
    fails(
        &base("llama3.1-8b", "v5e:2xq"),
        "is not a positive chip count",
    );
    fails(&base("llama3.1-8b", "v99:2x2"), "v99");
    let mut p = base("llama3.1-8b", "v5e:2x2");
    p.extend(["--parallel", "fsdp=8"]);
    fails(&p, "but the slice has 4");
    let mut p = base("llama3.1-8b", "v5e:2x2");
    p.extend(["--parallel", "fsdp=2,pp=2"]);
    fails(&p, "unknown dimension `pp`");
    let mut p = base("llama3.1-8b", "v5e:4x4");
    p.extend(["--parallel", "fsdp=5,tp=3"]);
    fails(&p, "but the slice has 16");
    // Llama 3.1 8B has 8 key/value heads: 16-way tensor parallelism cannot split them.
    let mut p = base("llama3.1-8b", "v5e:4x4");
    p.extend(["--tp", "16"]);
    fails(&p, "does not divide the model's kv_heads");
    // Expert parallelism: only for a mixture of experts, over a divisor of its experts, over
    // whole topology axes, and the flag and --parallel must agree.
    let mut p = base("llama3.1-8b", "v5e:2x2");
    p.extend(["--ep", "2"]);
    fails(&p, "needs a mixture-of-experts model");
    let mut p = base("mixtral-8x7b", "v5e:4x4");
    p.extend(["--parallel", "ep=16"]);
    fails(&p, "does not divide the model's 8 experts");
    let mut p = base("mixtral-8x7b", "v5e:16x16");
    p.extend(["--ep", "8"]);
    fails(&p, "does not cover whole topology axes");
    let mut p = base("mixtral-8x7b", "v5e:4x4");
    p.extend(["--ep", "2", "--parallel", "ep=4"]);
    fails(&p, "--ep 2 and --parallel ep=4 disagree");
    let mut p = base("llama3.1-8b", "v5e:2x2");
    p.extend(["--remat", "some"]);
    fails(&p, "expected none, attention, mlp or full");
    let mut p = base("llama3.1-8b", "v5e:2x2");
    p.extend(["--seq", "0"]);
    fails(&p, "must be positive");
    // The table: which rows, and never with a single run's arguments.
    fails(&["--table", "some"], "invalid value 'some'");
    fails(&["--table", "all", "--only", "gpt-5"], "no row matches");
    fails(
        &["--table", "published", "--model", "llama3.1-8b"],
        "cannot be used with",
    );
    fails(
        &[
            "--only",
            "v5p",
            "--model",
            "llama2-7b",
            "--slice",
            "v5e:2x2",
        ],
        "--only picks rows of --table",
    );
    fails(&["--table", "all", "--seq", "4096"], "cannot be used with");
    fails(&["--table", "published", "--set", "clock_hz=5"], "clock_hz");
}
