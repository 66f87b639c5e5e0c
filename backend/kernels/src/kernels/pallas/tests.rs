//! The lowering without Python: hand-written kernel descriptions (what `tpuemu.pallas` writes
//! for the Pallas guide's kernels), built and run on the emulator, against values computed
//! here; and Mosaic's refusals.

use tpuemu_isa::{CoreRef, Device, KernelArg, Launch, LaunchTarget};

use super::spec::KernelSpec;
use super::{PallasError, build};

fn v5e() -> tpuemu_emulator::Emulator {
    tpuemu_emulator::Emulator::new(tpuemu_emulator::builtin("v5e").unwrap()).unwrap()
}

/// Runs `spec` on f32 `inputs`; its f32 outputs of `out_lens` elements.
fn run(spec: &str, inputs: &[Vec<f32>], out_lens: &[usize]) -> Vec<Vec<f32>> {
    let emu = v5e();
    let core = emu.topology().chips[0].core.clone();
    let program = build(&KernelSpec::parse(spec).unwrap(), &core).unwrap();
    let mut args = Vec::new();
    for x in inputs {
        let b = emu.alloc(0, 4 * x.len() as u64).unwrap();
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        emu.write(b, 0, &bytes, 0.0).unwrap();
        args.push(b);
    }
    let outs: Vec<_> = out_lens
        .iter()
        .map(|n| emu.alloc(0, 4 * *n as u64).unwrap())
        .collect();
    let id = emu.load(&program).unwrap();
    emu.launch(&Launch {
        program: id,
        targets: vec![LaunchTarget {
            core: CoreRef { chip: 0, core: 0 },
            args: args
                .iter()
                .chain(&outs)
                .map(|b| KernelArg::Buffer(*b))
                .collect(),
        }],
        submit_ns: 0.0,
        op_id: None,
        group_id: None,
    })
    .unwrap();
    emu.synchronize().unwrap();
    outs.iter()
        .zip(out_lens)
        .map(|(b, n)| {
            let mut raw = vec![0u8; 4 * n];
            emu.read(*b, 0, &mut raw, 0.0).unwrap();
            raw.chunks(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .collect()
}

/// `o_ref[...] = x_ref[...] * y_ref[...] + 1.0` on (rows, cols) arrays over a grid of
/// (rows / br,) blocks of (br, bc).
fn mul_add(rows: usize, cols: usize, br: usize, bc: usize) -> String {
    let block = format!("[{br},{bc}]");
    let map = r#"{"invars":[{"id":100,"shape":[],"dtype":"int32"}],"eqns":[],
        "outvars":[{"v":100},{"lit":0,"dtype":"int32"}]}"#;
    let op = |k: usize| {
        format!(
            r#"{{"shape":[{rows},{cols}],"dtype":"float32","block":{block},"index_map":{map}}}"#
        )
        .replace("KK", &k.to_string())
    };
    let r = |id: u32| format!(r#"{{"id":{id},"shape":[{br},{bc}],"dtype":"float32","ref":true}}"#);
    let v = |id: u32| format!(r#"{{"id":{id},"shape":[{br},{bc}],"dtype":"float32"}}"#);
    format!(
        r#"{{"name":"mul_add","grid":[{g}],"num_inputs":2,"operands":[{a},{b},{c}],
        "body":{{"invars":[{r0},{r1},{r2}],"eqns":[
          {{"prim":"get","ins":[{{"v":0}}],"outs":[{v3}],"src":"k.py:2"}},
          {{"prim":"get","ins":[{{"v":1}}],"outs":[{v4}],"src":"k.py:2"}},
          {{"prim":"mul","ins":[{{"v":3}},{{"v":4}}],"outs":[{v5}],"src":"k.py:2"}},
          {{"prim":"add","ins":[{{"v":5}},{{"lit":1.0,"dtype":"float32"}}],"outs":[{v6}],"src":"k.py:2"}},
          {{"prim":"swap","ins":[{{"v":2}},{{"v":6}}],"outs":[{v7}],"src":"k.py:2"}}
        ],"outvars":[]}}}}"#,
        g = rows / br,
        a = op(0),
        b = op(1),
        c = op(2),
        r0 = r(0),
        r1 = r(1),
        r2 = r(2),
        v3 = v(3),
        v4 = v(4),
        v5 = v(5),
        v6 = v(6),
        v7 = v(7),
    )
}

#[test]
fn a_pipelined_elementwise_kernel_computes_every_block() {
    let rows = 48;
    let x: Vec<f32> = (0..rows * 128)
        .map(|i| (i % 97) as f32 * 0.5 - 7.0)
        .collect();
    let y: Vec<f32> = (0..rows * 128).map(|i| (i % 13) as f32 - 3.25).collect();
    let out = run(
        &mul_add(rows, 128, 8, 128),
        &[x.clone(), y.clone()],
        &[rows * 128],
    );
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a * b + 1.0).collect();
    assert_eq!(out[0], want);
}

#[test]
fn blocks_that_break_the_tiling_are_refused_by_name() {
    let err = build(
        &KernelSpec::parse(&mul_add(48, 200, 8, 100)).unwrap(),
        &v5e().topology().chips[0].core,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PallasError::Refused { .. }), "{text}");
    assert!(
        text.contains("mul_add") && text.contains("(8, 100)") && text.contains("tiling"),
        "{text}"
    );
}

#[test]
fn vmem_is_checked_against_the_core() {
    // Three operands' (4096, 128) blocks, double-buffered: 12 MiB of VMEM (and the body's
    // values), more than a core with 4 MiB has.
    let spec = mul_add(4096, 128, 4096, 128);
    let mut core = v5e().topology().chips[0].core.clone();
    core.vmem_bytes = 4 << 20;
    let err = build(&KernelSpec::parse(&spec).unwrap(), &core).unwrap_err();
    assert!(err.to_string().contains("VMEM over capacity"), "{err}");
    // v5e's 128 MiB hold them.
    assert!(
        build(
            &KernelSpec::parse(&spec).unwrap(),
            &v5e().topology().chips[0].core
        )
        .is_ok()
    );
}

#[test]
fn an_unknown_primitive_is_named_with_its_line() {
    let spec = mul_add(8, 128, 8, 128).replace(r#""prim":"mul""#, r#""prim":"cumsum""#);
    let err = build(
        &KernelSpec::parse(&spec).unwrap(),
        &v5e().topology().chips[0].core,
    )
    .unwrap_err();
    assert!(matches!(err, PallasError::Unsupported { .. }), "{err}");
    assert!(
        err.to_string().contains("`cumsum`") && err.to_string().contains("k.py:2"),
        "{err}"
    );
}

#[test]
fn a_malformed_description_is_an_error_not_a_panic() {
    for bad in [
        "",
        "{}",
        r#"{"name":"k","grid":[1],"num_inputs":0,"operands":[],"body":7}"#,
    ] {
        assert!(KernelSpec::parse(bad).is_err(), "{bad}");
    }
}

/// A kernel of one grid step with one int32 scalar-prefetch array `s` of `n` elements and one
/// (8, 128) float32 output, whose body is `eqns` (JSON) over `s_ref` (variable 0) and `o_ref`
/// (variable 1).
fn prefetch_kernel(n: usize, eqns: &str) -> String {
    let empty = r#"{"invars":[],"eqns":[],"outvars":[]}"#;
    let map = r#"{"invars":[{"id":200,"shape":[],"dtype":"int32"},
        {"id":201,"shape":[5],"dtype":"int32","ref":true}],"eqns":[],
        "outvars":[{"lit":0,"dtype":"int32"},{"lit":0,"dtype":"int32"}]}"#;
    format!(
        r#"{{"name":"scalars","grid":[1],"num_inputs":1,"operands":[
          {{"shape":[{n}],"dtype":"int32","block":[],"index_map":{empty},"space":"smem"}},
          {{"shape":[8,128],"dtype":"float32","block":[8,128],"index_map":{map}}}],
        "body":{{"invars":[{{"id":0,"shape":[{n}],"dtype":"int32","ref":true}},
          {{"id":1,"shape":[8,128],"dtype":"float32","ref":true}}],"eqns":[{eqns}],
          "outvars":[]}}}}"#
    )
}

/// `{"prim": p, ...}` with integer scalar operands (variable ids, or `L<n>` literals) and one
/// int32 scalar result `out`.
fn scalar_eqn(p: &str, ins: &[&str], out: u32, dtype: &str) -> String {
    let ins: Vec<String> = ins
        .iter()
        .map(|a| match a.strip_prefix('L') {
            Some(lit) => format!(r#"{{"lit":{lit},"dtype":"int32"}}"#),
            None => format!(r#"{{"v":{a}}}"#),
        })
        .collect();
    format!(
        r#"{{"prim":"{p}","ins":[{}],"outs":[{{"id":{out},"shape":[],"dtype":"{dtype}"}}],"src":"k.py:3"}}"#,
        ins.join(",")
    )
}

/// `o_ref[...] = float32(v)` broadcast.
fn store_scalar(v: u32) -> String {
    format!(
        r#"{{"prim":"convert_element_type","ins":[{{"v":{v}}}],"outs":[{{"id":900,"shape":[],"dtype":"float32"}}],"src":"k.py:4"}},
        {{"prim":"broadcast_in_dim","ins":[{{"v":900}}],"outs":[{{"id":901,"shape":[8,128],"dtype":"float32"}}],
          "params":{{"shape":[8,128],"broadcast_dimensions":[]}},"src":"k.py:4"}},
        {{"prim":"swap","ins":[{{"v":1}},{{"v":901}}],"outs":[{{"id":902,"shape":[8,128],"dtype":"float32"}}],"src":"k.py:4"}}"#
    )
}

fn get_at(k: usize, out: u32) -> String {
    format!(
        r#"{{"prim":"get","ins":[{{"v":0}}],"outs":[{{"id":{out},"shape":[],"dtype":"int32"}}],
          "params":{{"idx":[{{"at":{k}}}]}},"src":"k.py:2"}}"#
    )
}

fn bits(xs: &[i32]) -> Vec<f32> {
    xs.iter().map(|&x| f32::from_bits(x as u32)).collect()
}

#[test]
fn scalars_read_from_smem_divide_as_xla() {
    // XLA's integer division, with divisors only known while running: 7 / -7 = -1, 7 / 0 = -1,
    // 7 % 0 = 7, MIN / -1 = MIN (wraps). Combined as -1 + 10 * -1 + 100 * 7 + 1000 * (MIN
    // / -1 == MIN) = 1689.
    let eqns = [
        get_at(0, 10),
        get_at(1, 11),
        get_at(2, 12),
        get_at(3, 13),
        get_at(4, 14),
        scalar_eqn("div", &["10", "11"], 20, "int32"),
        scalar_eqn("div", &["10", "12"], 21, "int32"),
        scalar_eqn("rem", &["10", "12"], 22, "int32"),
        scalar_eqn("div", &["13", "14"], 23, "int32"),
        scalar_eqn("mul", &["21", "L10"], 30, "int32"),
        scalar_eqn("mul", &["22", "L100"], 31, "int32"),
        scalar_eqn("eq", &["23", "13"], 32, "bool"),
        scalar_eqn("convert_element_type", &["32"], 33, "int32"),
        scalar_eqn("mul", &["33", "L1000"], 34, "int32"),
        scalar_eqn("add", &["20", "30"], 35, "int32"),
        scalar_eqn("add", &["35", "31"], 36, "int32"),
        scalar_eqn("add", &["36", "34"], 37, "int32"),
        store_scalar(37),
    ]
    .join(",");
    let out = run(
        &prefetch_kernel(5, &eqns),
        &[bits(&[7, -7, 0, i32::MIN, -1])],
        &[1024],
    );
    assert!(out[0].iter().all(|&x| x == 1689.0), "{:?}", &out[0][..4]);
}

#[test]
fn a_while_loop_bounded_by_data_runs_as_a_loop() {
    // acc = sum(i for i in range(s[0])): 45 for 10, 0 for a bound of 0 (the loop does not run).
    let cond = r#"{"invars":[{"id":50,"shape":[],"dtype":"int32"},{"id":51,"shape":[],"dtype":"int32"},
        {"id":52,"shape":[],"dtype":"int32"}],"eqns":[{"prim":"lt","ins":[{"v":51},{"v":50}],
        "outs":[{"id":53,"shape":[],"dtype":"bool"}]}],"outvars":[{"v":53}]}"#;
    let body = r#"{"invars":[{"id":60,"shape":[],"dtype":"int32"},{"id":61,"shape":[],"dtype":"int32"}],
        "eqns":[{"prim":"add","ins":[{"v":60},{"lit":1,"dtype":"int32"}],"outs":[{"id":62,"shape":[],"dtype":"int32"}]},
        {"prim":"add","ins":[{"v":61},{"v":60}],"outs":[{"id":63,"shape":[],"dtype":"int32"}]}],
        "outvars":[{"v":62},{"v":63}]}"#;
    let eqns = [
        get_at(0, 10),
        format!(
            r#"{{"prim":"while","ins":[{{"v":10}},{{"lit":0,"dtype":"int32"}},{{"lit":0,"dtype":"int32"}}],
            "outs":[{{"id":11,"shape":[],"dtype":"int32"}},{{"id":12,"shape":[],"dtype":"int32"}}],
            "params":{{"cond_jaxpr":{cond},"body_jaxpr":{body},"cond_nconsts":1,"body_nconsts":0}},
            "src":"k.py:3"}}"#
        ),
        store_scalar(12),
    ]
    .join(",");
    let spec = prefetch_kernel(1, &eqns);
    for (n, want) in [(10, 45.0), (0, 0.0), (1, 0.0)] {
        let out = run(&spec, &[bits(&[n])], &[1024]);
        assert!(
            out[0].iter().all(|&x| x == want),
            "n={n}: {:?}",
            &out[0][..4]
        );
    }
    // One loop in the program: the body is emitted once.
    let program = build(
        &KernelSpec::parse(&spec).unwrap(),
        &v5e().topology().chips[0].core,
    )
    .unwrap();
    let text = tpuemu_isa::disassemble(&program);
    assert_eq!(text.matches("\n    br ").count(), 1, "{text}");
}
