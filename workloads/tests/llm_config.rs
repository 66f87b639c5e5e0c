//! The built-in model configurations against the parameter counts their publishers state (an
//! independent fact: the counts are derived here from the shapes alone), TOML loading and its
//! errors, and the FLOP count against a hand computation.

use tpuemu_workloads::llm::{BUILTIN, ModelConfig, published};

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

// The published runs `tpuemu predict --table published` compares against: each row's figures agree
// with each other in the convention the module states, and each row is one `predict` can run.

/// Published bf16 peaks per chip, FLOP/s (Google Cloud's TPU pages), by generation.
fn published_peak(generation: &str) -> f64 {
    match generation {
        "v5e" => 197e12,
        "v5p" => 459e12,
        "v6e" => 918e12,
        other => panic!("no published peak for {other}"),
    }
}

#[test]
fn each_published_mfu_follows_from_its_tokens_per_second() {
    // MFU = tokens/s/chip x model FLOPs per token / peak, in the row's convention (causal
    // attention in full, or halved as MaxText counts since its PR #1988). A typo in a row's
    // tokens/s, MFU, sequence or model breaks this; so does a row that names the wrong
    // convention (the two differ by 3.5-11% at these sequence lengths).
    for r in published::PUBLISHED {
        let model = ModelConfig::builtin(r.run.model).expect("a built-in model");
        let generation = r.run.slice.split(':').next().unwrap();
        let (stated, other) = match r.convention {
            published::Convention::Full => (
                model.model_flops(1, r.run.seq as u64),
                model.model_flops_causal(1, r.run.seq as u64),
            ),
            published::Convention::Halved => (
                model.model_flops_causal(1, r.run.seq as u64),
                model.model_flops(1, r.run.seq as u64),
            ),
        };
        let mfu = r.tokens_per_s_per_chip * stated / published_peak(generation);
        let rel = (mfu - r.mfu).abs() / r.mfu;
        assert!(
            rel < 0.03,
            "{} on {}: {:.2}% from {} tokens/s against {:.2}% published",
            r.run.model,
            r.run.slice,
            100.0 * mfu,
            r.tokens_per_s_per_chip,
            100.0 * r.mfu
        );
        let in_other = r.tokens_per_s_per_chip * other / published_peak(generation);
        assert!(
            (in_other - r.mfu).abs() / r.mfu > rel,
            "{} on {}: the other convention fits the published MFU better",
            r.run.model,
            r.run.slice
        );
    }
}

#[test]
fn each_row_is_a_run_predict_can_set_up() {
    for r in published::PUBLISHED {
        let (generation, dims) = r.run.slice.split_once(':').unwrap();
        assert!(
            tpuemu_emulator::builtin(generation).is_some(),
            "{}: no preset {generation}",
            r.run.slice
        );
        let chips: usize = dims
            .split('x')
            .map(|d| d.parse::<usize>().unwrap())
            .product();
        let split: usize = r
            .run
            .parallel
            .split(',')
            .map(|p| p.split_once('=').unwrap().1.parse::<usize>().unwrap())
            .product();
        assert_eq!(
            split, chips,
            "{} on {}: the split covers the slice",
            r.run.model, r.run.slice
        );
        assert!(
            tpuemu_workloads::llm::Remat::parse(r.run.remat).is_some(),
            "{}",
            r.run.remat
        );
        assert!(!r.differences.is_empty() && !r.source.is_empty());
    }
    for g in ["v4", "v5e", "v5p", "v6e", "v7x"] {
        let fits = published::of_generation(g)
            .filter(|r| r.role == published::Role::Fit)
            .count();
        assert!(
            fits <= 1,
            "{g}: {fits} runs fitted; at most one calibrated figure a chip"
        );
    }
}

#[test]
fn a_layer_splits_into_micro_batches_only_past_what_a_kernel_addresses() {
    use tpuemu_workloads::llm::{Parallel, Remat, StepSpec};
    let spec = |model: &str, batch: usize, tp: usize| StepSpec {
        model: ModelConfig::builtin(model).unwrap(),
        seq: 8192,
        batch_per_chip: batch,
        par: Parallel {
            dp: 1,
            ep: 1,
            fsdp: 256 / tp,
            tp,
        },
        remat: Remat::Full,
        loss_chunk: 1024,
        kernel_operand_bytes: StepSpec::KERNEL_OPERAND_BYTES,
    };
    // Llama 3.1 70B's MLP product is [tokens, 28672] bf16: 57,344 bytes a token, the largest
    // per-token operand. 2^31 / 57,344 = 37,449 tokens fit one kernel: 4 sequences of 8192
    // (32,768) do, 5 (40,960) do not, so 5 run as 5 passes of one (5 is prime), 6 as 2 of 3.
    assert_eq!(spec("llama3.1-70b", 4, 1).micro_batches(), 1);
    assert_eq!(spec("llama3.1-70b", 5, 1).micro_batches(), 5);
    assert_eq!(spec("llama3.1-70b", 6, 1).micro_batches(), 2);
    // Tensor parallelism over 4 shares 4 x 5 sequences and a quarter of the MLP columns:
    // 163,840 tokens x 14,336 bytes = 2.35e9, so 5 passes of 4 x 1 again.
    assert_eq!(spec("llama3.1-70b", 5, 4).micro_batches(), 5);
    // Mixtral 8x7B with ep=8: an expert's rows are tokens x top_k (2) x ep (8) / experts (8),
    // twice the tokens, each 2 x 14,336 bytes: 4 sequences (65,536 rows, 1.88e9 bytes) fit, 5
    // (81,920 rows, 2.35e9) do not.
    let moe = |batch: usize| StepSpec {
        par: Parallel {
            dp: 1,
            ep: 8,
            fsdp: 32,
            tp: 1,
        },
        ..spec("mixtral-8x7b", batch, 1)
    };
    assert_eq!(moe(4).micro_batches(), 1);
    assert_eq!(moe(5).micro_batches(), 5);
    // Llama 3.1 8B: 28,672 bytes a token, 74,898 tokens a kernel: 9 sequences fit.
    assert_eq!(spec("llama3.1-8b", 9, 1).micro_batches(), 1);
    assert_eq!(spec("llama3.1-8b", 10, 1).micro_batches(), 2);
}
