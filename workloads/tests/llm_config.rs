//! The built-in model configurations against the parameter counts their publishers state (an
//! independent fact: the counts are derived here from the shapes alone), TOML loading and its
//! errors, and the FLOP count against a hand computation.

use tpuemu_workloads::llm::{BUILTIN, ModelConfig};

/// `(model, published total, last published digit, source)`: the total must match to half a
/// unit of the last digit the publisher gives.
const PUBLISHED: [(&str, f64, f64, &str); 7] = [
    // Hugging Face model pages, "Model size" (from the safetensors files).
    (
        "llama2-7b",
        6.74e9,
        0.01e9,
        "huggingface.co/meta-llama/Llama-2-7b-hf: 6.74B params",
    ),
    (
        "llama2-70b",
        69.0e9,
        0.1e9,
        "huggingface.co/meta-llama/Llama-2-70b-hf: 69B params",
    ),
    (
        "llama3.1-8b",
        8.03e9,
        0.01e9,
        "huggingface.co/meta-llama/Llama-3.1-8B: 8.03B params",
    ),
    (
        "llama3.1-70b",
        70.6e9,
        0.1e9,
        "huggingface.co/meta-llama/Llama-3.1-70B: 70.6B params",
    ),
    (
        "llama3.1-405b",
        406e9,
        1e9,
        "huggingface.co/meta-llama/Llama-3.1-405B: 406B params",
    ),
    // Qwen3-8B model card: "Number of Parameters: 8.2B".
    (
        "qwen3-8b",
        8.2e9,
        0.1e9,
        "huggingface.co/Qwen/Qwen3-8B model card",
    ),
    // mistral.ai/news/mixtral-of-experts: "46.7B total parameters".
    (
        "mixtral-8x7b",
        46.7e9,
        0.1e9,
        "mistral.ai/news/mixtral-of-experts",
    ),
];

#[test]
fn parameter_counts_match_the_published_totals() {
    for (name, total, digit, src) in PUBLISHED {
        let m = ModelConfig::builtin(name).unwrap();
        let p = m.params() as f64;
        assert!(
            (p - total).abs() <= digit / 2.0,
            "{name}: {p:.4e} parameters from the shapes, published {total:e} ({src})"
        );
    }
    assert_eq!(PUBLISHED.len(), BUILTIN.len());
}

#[test]
fn active_and_non_embedding_counts_match_the_published_ones() {
    // mistral.ai: Mixtral "only uses 12.9B parameters per token".
    let mx = ModelConfig::builtin("mixtral-8x7b").unwrap();
    assert!(
        (mx.active_params() as f64 - 12.9e9).abs() <= 0.05e9,
        "{}",
        mx.active_params()
    );
    // Qwen3-8B model card: "Number of Paramaters (Non-Embedding): 6.95B".
    let q = ModelConfig::builtin("qwen3-8b").unwrap();
    let non_emb = q.params() - 2 * (q.vocab * q.d_model) as u64;
    assert!((non_emb as f64 - 6.95e9).abs() <= 0.005e9, "{non_emb}");
}

#[test]
fn model_flops_follow_palm_by_hand() {
    // A toy model, by hand: d 8, 2 heads of 4, 1 kv head, ffn 16, vocab 10, 2 layers.
    let m = ModelConfig::from_toml(
        "name='toy'\nlayers=2\nd_model=8\nheads=2\nkv_heads=1\nffn=16\nvocab=10\n",
    )
    .unwrap();
    // Per layer: q 64 + o 64 + k 32 + v 32 + MLP 3*128 + norms 16 = 592; outer 80+80+8.
    assert_eq!(m.params(), 2 * 592 + 168);
    // 6 * (params - 80 lookup) per token + 12 * 2 layers * 8 * seq 4.
    let f = m.model_flops(3, 4);
    assert_eq!(f, 3.0 * (6.0 * (1352.0 - 80.0) + 12.0 * 2.0 * 8.0 * 4.0));
}

#[test]
fn toml_files_load_and_bad_ones_are_explained() {
    let dir = std::env::temp_dir().join(format!("tpuemu-llm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("m.toml");
    std::fs::write(
        &good,
        "name='m'\nlayers=4\nd_model=256\nheads=4\nkv_heads=2\nffn=512\nvocab=1000\nexperts=4\ntop_k=2\n",
    )
    .unwrap();
    let m = ModelConfig::load(good.to_str().unwrap()).unwrap();
    assert_eq!((m.experts, m.top_k, m.head_dim()), (4, 2, 64));
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name='b'\nlayers=4\nd_model=256\nheads=3\nkv_heads=2\nffn=1\nvocab=1\n",
    )
    .unwrap();
    let e = ModelConfig::load(bad.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a multiple of heads"), "{e}");
    let e = ModelConfig::load("llama9-1t").unwrap_err().to_string();
    assert!(
        e.contains("unknown model") && e.contains("llama3.1-8b"),
        "{e}"
    );
    let e = ModelConfig::load(dir.join("missing.toml").to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read"), "{e}");
    let typo = dir.join("typo.toml");
    std::fs::write(&typo, "name='t'\nlayer=4\n").unwrap();
    let e = ModelConfig::load(typo.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("typo.toml"), "{e}");
}
