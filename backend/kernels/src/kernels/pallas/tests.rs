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
