//! Bad calls: wrong shapes, dtypes, dims, indices and arguments give errors that name the
//! operator and say what was expected and what came, in every eager mode, never a panic.

use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{DType, Runtime, Tensor};

use super::harness::{SuiteMode, runtime};

fn f32s(rt: &Runtime, shape: &[usize]) -> Value {
    let n: usize = shape.iter().product();
    Value::Tensor(Tensor::from_slice(rt, &vec![1.0f32; n], shape).unwrap())
}

fn i64s(rt: &Runtime, vals: &[i64], shape: &[usize]) -> Value {
    Value::Tensor(
        Tensor::from_f64s(
            rt,
            vals.iter().map(|&v| v as f64),
            vals.len(),
            shape,
            DType::I64,
        )
        .unwrap(),
    )
}

/// `(operator, arguments, words the message must hold)`.
type Case = (&'static str, Vec<Value>, &'static [&'static str]);

fn cases(rt: &Runtime) -> Vec<Case> {
    vec![
        (
            "aten::add.Tensor",
            vec![f32s(rt, &[2, 3]), f32s(rt, &[4]), Value::Int(1)],
            &["add", "3", "4"],
        ),
        (
            "aten::mm",
            vec![f32s(rt, &[2, 3]), f32s(rt, &[4, 5])],
            &["mm", "2x3", "4x5"],
        ),
        (
            "aten::mm",
            vec![f32s(rt, &[2, 3, 4]), f32s(rt, &[4, 5])],
            &["mm", "matrix"],
        ),
        (
            "aten::bmm",
            vec![f32s(rt, &[2, 3, 4]), f32s(rt, &[3, 4, 5])],
            &["bmm"],
        ),
        (
            "aten::sum.dim_IntList",
            vec![f32s(rt, &[2, 3]), Value::Ints(vec![2]), Value::Bool(false)],
            &["sum", "Dimension out of range", "2"],
        ),
        (
            "aten::_softmax",
            vec![f32s(rt, &[2, 3]), Value::Int(-3), Value::Bool(false)],
            &["softmax", "Dimension out of range"],
        ),
        (
            "aten::view",
            vec![f32s(rt, &[2, 3]), Value::Ints(vec![4, 2])],
            &["view", "[4, 2]", "6"],
        ),
        (
            "aten::index_select",
            vec![f32s(rt, &[4, 3]), Value::Int(0), i64s(rt, &[0, 7], &[2])],
            &["IndexError", "index_select", "index out of range in self"],
        ),
        (
            "aten::embedding",
            vec![f32s(rt, &[4, 3]), i64s(rt, &[1, 4], &[2])],
            &["IndexError", "embedding", "index out of range in self"],
        ),
        (
            "aten::gather",
            vec![f32s(rt, &[2, 3]), Value::Int(1), i64s(rt, &[0, 3], &[1, 2])],
            &[
                "gather",
                "index 3 is out of bounds for dimension 1 with size 3",
            ],
        ),
        (
            "aten::cat",
            vec![
                Value::Tensors(vec![
                    Tensor::from_slice(rt, &[0f32; 6], &[2, 3]).unwrap(),
                    Tensor::from_slice(rt, &[0f32; 8], &[2, 4]).unwrap(),
                ]),
                Value::Int(0),
            ],
            &["cat", "3", "4"],
        ),
        (
            "aten::logical_not",
            vec![Value::Int(3)],
            &["logical_not", "Tensor"],
        ),
        (
            "aten::where.self",
            vec![f32s(rt, &[2]), f32s(rt, &[2]), f32s(rt, &[2])],
            &["where", "boolean", "float32"],
        ),
        (
            "aten::permute",
            vec![f32s(rt, &[2, 3]), Value::Ints(vec![0, 0])],
            &["permute", "duplicate dims"],
        ),
        (
            "aten::expand",
            vec![f32s(rt, &[2, 3]), Value::Ints(vec![4, 3])],
            &["expand", "2", "4"],
        ),
        ("aten::no_such_op", vec![], &["no_such_op"]),
    ]
}

#[test]
fn bad_calls_are_errors_that_name_the_operator() {
    let mut wrong = Vec::new();
    for mode in [SuiteMode::Strict, SuiteMode::Debug, SuiteMode::DeferAndFuse] {
        let rt = runtime(mode);
        for (op, args, words) in cases(&rt) {
            let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                ops::call(&rt, op, args.clone())
            }));
            let Ok(res) = call else {
                panic!("{op} panicked in {mode:?}");
            };
            // An index is a device value: as on CUDA, Strict and DeferAndFuse report it when
            // the result is read, with PyTorch's message after the operator's name.
            let e = match res {
                Err(e) => e,
                Ok(outs) => {
                    let Some(Value::Tensor(out)) = outs.first() else {
                        panic!("{op} accepted a bad call in {mode:?}");
                    };
                    match out.to_f64_vec() {
                        Err(e) if mode != SuiteMode::Debug => e,
                        _ => panic!("{op} accepted a bad call in {mode:?}"),
                    }
                }
            };
            let msg = e.to_string();
            for w in words {
                if !msg.contains(w) {
                    wrong.push(format!("{op} ({mode:?}): `{msg}` does not say `{w}`"));
                }
            }
        }
        // Nothing was lost: the runtime still works after the errors.
        let x = Tensor::from_slice(&rt, &[1.0f32, 2.0], &[2]).unwrap();
        let y = x.add(&x).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
