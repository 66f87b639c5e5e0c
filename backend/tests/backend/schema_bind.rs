//! Binding a call's values to a schema (`ops::schema::Bind`): defaults by type, keywords and
//! conversions, and errors that name the overload and the argument.

use tpuemu_backend::DType;
use tpuemu_backend::ops::schema::{Bind, Schema, parse};
use tpuemu_backend::ops::{MemoryFormat, Value};

fn s(text: &str) -> Schema {
    parse(text).unwrap()
}

#[test]
fn defaults_fill_in_by_type() {
    let sch = s(
        "aten::f(Tensor? a, int[2] stride=1, float eps=1, Scalar alpha=1, int[] d=[], bool k=False, ScalarType? t=None) -> Tensor",
    );
    let v = sch.bind(vec![Value::None], vec![]).unwrap();
    assert!(matches!(&v[1], Value::Ints(l) if l == &[1, 1]));
    assert!(matches!(v[2], Value::Float(x) if x == 1.0));
    assert!(matches!(v[3], Value::Int(1)));
    assert!(matches!(&v[4], Value::Ints(l) if l.is_empty()));
    assert!(matches!(v[5], Value::Bool(false)));
    assert!(matches!(v[6], Value::None));
}

#[test]
fn keywords_and_conversions() {
    let sch = s(
        "aten::f(int a, *, float b=2., int[2] c=0, MemoryFormat? m=None, ScalarType? d=None) -> Tensor",
    );
    let v = sch
        .bind(
            vec![Value::Int(3)],
            vec![
                ("c".into(), Value::Int(4)),
                ("b".into(), Value::Int(5)),
                ("m".into(), Value::Str("channels_last".into())),
                ("d".into(), Value::Str("bfloat16".into())),
            ],
        )
        .unwrap();
    assert!(matches!(v[1], Value::Float(x) if x == 5.0));
    assert!(matches!(&v[2], Value::Ints(l) if l == &[4, 4]));
    assert!(matches!(
        v[3],
        Value::MemoryFormat(MemoryFormat::ChannelsLast)
    ));
    assert!(matches!(v[4], Value::Dtype(DType::BF16)));
}

#[test]
fn errors_name_the_overload_and_the_argument() {
    let sch = s("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
    let e = |p: Vec<Value>, k: Vec<(String, Value)>| sch.bind(p, k).unwrap_err().to_string();
    assert!(
        e(vec![Value::Str("x".into())], vec![])
            .contains("aten::add.Tensor(): argument 'self' (position 1) must be Tensor, not str")
    );
    let m = e(vec![], vec![("beta".into(), Value::Int(1))]);
    assert!(m.contains("unexpected keyword argument 'beta'"), "{m}");
    let m = e(vec![Value::None; 4], vec![]);
    assert!(m.contains("takes 3 arguments but 4 were given"), "{m}");
    let m = e(vec![], vec![]);
    assert!(m.contains("missing required argument 'self'"), "{m}");
}
