//! Values as written in a manifest (`golden/README.md`, "Values"), before tensors are loaded.
//!
//! Every value is JSON `null` or an object with one tag key: `{"int": 3}`, `{"float": "nan"}`,
//! `{"ints": [2, 3]}`, `{"tensor": "t0", "view": {...}, "from": [0, 0]}`, ... A [`ValueSpec`] is
//! also checked against the schema type tag of its argument, so a hand-written case with a
//! mistyped value fails with a clear reason instead of confusing the executor.

use serde_json::{Map, Value as Json};

use crate::tensor::DType;

/// A manifest value: like [`crate::Value`], with tensors still by name.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueSpec {
    /// `null`.
    None,
    /// `{"bool": b}`.
    Bool(bool),
    /// `{"int": i}`.
    Int(i64),
    /// `{"float": x}`; NaN and infinities as the strings `"nan"`, `"inf"`, `"-inf"`.
    Float(f64),
    /// `{"str": s}`.
    Str(String),
    /// `{"dtype": "float32"}`.
    Dtype(DType),
    /// `{"layout": "strided"}`.
    Layout(String),
    /// `{"device": "cpu"}`.
    Device(String),
    /// `{"memory_format": "contiguous_format"}`.
    MemoryFormat(String),
    /// `{"ints": [..]}`.
    Ints(Vec<i64>),
    /// `{"floats": [..]}`.
    Floats(Vec<f64>),
    /// `{"bools": [..]}`.
    Bools(Vec<bool>),
    /// `{"tensor": name, "view"?: {..}, "from"?: [..]}`.
    Tensor(TensorRef),
    /// `{"tensors": [ref or null, ..]}`.
    Tensors(Vec<Option<TensorRef>>),
}

/// A tensor by name in the case file's safetensors file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorRef {
    /// Name in the safetensors file.
    pub name: String,
    /// When present, the stored tensor is a 1-D storage and the value is this view of it.
    pub view: Option<ViewSpec>,
    /// The call (index in the case), output index (and list element) that produced this tensor,
    /// when it is an earlier call's output. Informational: the runner replays recorded inputs.
    pub from: Option<Vec<usize>>,
}

/// A strided view of a 1-D storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewSpec {
    /// Sizes.
    pub size: Vec<usize>,
    /// Strides in elements.
    pub stride: Vec<usize>,
    /// Storage offset in elements.
    pub offset: usize,
}

impl ValueSpec {
    /// Parses one manifest value.
    pub fn from_json(v: &Json) -> Result<ValueSpec, String> {
        let obj = match v {
            Json::Null => return Ok(ValueSpec::None),
            Json::Object(o) => o,
            other => {
                return Err(format!(
                    "a value must be null or an object with one tag key, got {other}"
                ));
            }
        };
        if let Some(name) = obj.get("tensor") {
            return parse_tensor_ref(name, obj).map(ValueSpec::Tensor);
        }
        if obj.len() != 1 {
            let keys: Vec<&String> = obj.keys().collect();
            return Err(format!(
                "a value object has exactly one tag key, got {keys:?}"
            ));
        }
        let (tag, body) = obj.iter().next().expect("len checked");
        Ok(match tag.as_str() {
            "bool" => ValueSpec::Bool(body.as_bool().ok_or_else(|| expect("bool", body))?),
            "int" => ValueSpec::Int(body.as_i64().ok_or_else(|| expect("integer", body))?),
            "float" => ValueSpec::Float(parse_float(body)?),
            "str" => ValueSpec::Str(string(body)?),
            "dtype" => {
                let s = string(body)?;
                ValueSpec::Dtype(
                    DType::from_name(&s).ok_or_else(|| format!("unknown dtype {s:?}"))?,
                )
            }
            "layout" => ValueSpec::Layout(string(body)?),
            "device" => ValueSpec::Device(string(body)?),
            "memory_format" => ValueSpec::MemoryFormat(string(body)?),
            "ints" => ValueSpec::Ints(list(body, |x| {
                x.as_i64().ok_or_else(|| expect("integer", x))
            })?),
            "floats" => ValueSpec::Floats(list(body, parse_float)?),
            "bools" => ValueSpec::Bools(list(body, |x| {
                x.as_bool().ok_or_else(|| expect("bool", x))
            })?),
            "tensors" => ValueSpec::Tensors(list(body, |x| match x {
                Json::Null => Ok(None),
                Json::Object(o) if o.contains_key("tensor") => {
                    parse_tensor_ref(&o["tensor"], o).map(Some)
                }
                other => Err(format!(
                    "a tensor list holds tensor refs or null, got {other}"
                )),
            })?),
            other => return Err(format!("unknown value tag {other:?}")),
        })
    }

    /// Checks this value against a schema type tag (`Tensor`, `int[]?`, `Scalar`, ...). Unknown
    /// tags accept any value.
    pub fn check_type(&self, tag: &str) -> Result<(), String> {
        let (base, optional) = match tag.strip_suffix('?') {
            Some(b) => (b, true),
            None => (tag, false),
        };
        use ValueSpec as V;
        let ok = match (base, self) {
            (_, V::None) => optional || base == "Tensor",
            ("Tensor", V::Tensor(_) | V::Int(_) | V::Float(_) | V::Bool(_)) => true,
            ("Tensor[]", V::Tensors(ts)) => ts.iter().all(Option::is_some),
            ("Tensor?[]", V::Tensors(_)) => true,
            ("int" | "SymInt", V::Int(_)) => true,
            ("int[]" | "SymInt[]", V::Ints(_)) => true,
            ("float", V::Float(_) | V::Int(_)) => true,
            ("float[]", V::Floats(_) | V::Ints(_)) => true,
            ("bool", V::Bool(_)) => true,
            ("bool[]", V::Bools(_)) => true,
            ("Scalar", V::Int(_) | V::Float(_) | V::Bool(_)) => true,
            ("Scalar[]", V::Ints(_) | V::Floats(_)) => true,
            ("ScalarType", V::Dtype(_)) => true,
            ("Layout", V::Layout(_)) => true,
            ("Device", V::Device(_)) => true,
            ("MemoryFormat", V::MemoryFormat(_)) => true,
            ("str", V::Str(_)) => true,
            (
                "Tensor" | "Tensor[]" | "Tensor?[]" | "int" | "SymInt" | "int[]" | "SymInt[]"
                | "float" | "float[]" | "bool" | "bool[]" | "Scalar" | "Scalar[]" | "ScalarType"
                | "Layout" | "Device" | "MemoryFormat" | "str",
                _,
            ) => false,
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(format!("a {} value for schema type {tag}", self.kind()))
        }
    }

    /// Short name of the variant, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            ValueSpec::None => "null",
            ValueSpec::Bool(_) => "bool",
            ValueSpec::Int(_) => "int",
            ValueSpec::Float(_) => "float",
            ValueSpec::Str(_) => "str",
            ValueSpec::Dtype(_) => "dtype",
            ValueSpec::Layout(_) => "layout",
            ValueSpec::Device(_) => "device",
            ValueSpec::MemoryFormat(_) => "memory_format",
            ValueSpec::Ints(_) => "ints",
            ValueSpec::Floats(_) => "floats",
            ValueSpec::Bools(_) => "bools",
            ValueSpec::Tensor(_) => "tensor",
            ValueSpec::Tensors(_) => "tensors",
        }
    }
}

fn expect(what: &str, got: &Json) -> String {
    format!("expected {what}, got {got}")
}

fn string(v: &Json) -> Result<String, String> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| expect("string", v))
}

fn list<T>(v: &Json, item: impl Fn(&Json) -> Result<T, String>) -> Result<Vec<T>, String> {
    v.as_array()
        .ok_or_else(|| expect("array", v))?
        .iter()
        .map(item)
        .collect()
}

fn usize_of(v: &Json) -> Result<usize, String> {
    v.as_u64()
        .map(|x| x as usize)
        .ok_or_else(|| expect("non-negative integer", v))
}

/// A float: a JSON number, or `"nan"`, `"inf"`, `"-inf"`.
pub fn parse_float(v: &Json) -> Result<f64, String> {
    match v {
        Json::Number(n) => n.as_f64().ok_or_else(|| expect("float", v)),
        Json::String(s) => match s.as_str() {
            "nan" => Ok(f64::NAN),
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            _ => Err(format!(
                "a float string is \"nan\", \"inf\" or \"-inf\", got {s:?}"
            )),
        },
        _ => Err(expect("float", v)),
    }
}

fn parse_tensor_ref(name: &Json, obj: &Map<String, Json>) -> Result<TensorRef, String> {
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "tensor" | "view" | "from"))
    {
        return Err(format!("unknown key {k:?} in a tensor ref"));
    }
    let name = string(name)?;
    let view = match obj.get("view") {
        None => None,
        Some(Json::Object(v)) => {
            if let Some(k) = v
                .keys()
                .find(|k| !matches!(k.as_str(), "size" | "stride" | "offset"))
            {
                return Err(format!("unknown key {k:?} in a view"));
            }
            let field = |k: &str| {
                v.get(k)
                    .ok_or_else(|| format!("view of {name:?} lacks {k:?}"))
            };
            Some(ViewSpec {
                size: list(field("size")?, usize_of)?,
                stride: list(field("stride")?, usize_of)?,
                offset: usize_of(field("offset")?)?,
            })
        }
        Some(other) => return Err(expect("view object", other)),
    };
    let from = obj.get("from").map(|f| list(f, usize_of)).transpose()?;
    Ok(TensorRef { name, view, from })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_every_tag() {
        let v = |j| ValueSpec::from_json(&j).unwrap();
        assert_eq!(v(json!(null)), ValueSpec::None);
        assert_eq!(v(json!({"int": -3})), ValueSpec::Int(-3));
        assert!(matches!(v(json!({"float": "nan"})), ValueSpec::Float(x) if x.is_nan()));
        assert_eq!(
            v(json!({"floats": [1.5, "-inf"]})),
            ValueSpec::Floats(vec![1.5, f64::NEG_INFINITY])
        );
        assert_eq!(
            v(json!({"dtype": "bfloat16"})),
            ValueSpec::Dtype(DType::BF16)
        );
        let t = v(
            json!({"tensor": "t1", "view": {"size": [2], "stride": [3], "offset": 1}, "from": [0, 1]}),
        );
        let ValueSpec::Tensor(r) = t else {
            panic!("not a tensor")
        };
        assert_eq!(r.view.unwrap().stride, vec![3]);
        assert_eq!(r.from, Some(vec![0, 1]));
        assert_eq!(
            v(json!({"tensors": [{"tensor": "a"}, null]})).kind(),
            "tensors"
        );
    }

    #[test]
    fn rejects_bad_values_with_reasons() {
        let e = |j| ValueSpec::from_json(&j).unwrap_err();
        assert!(e(json!(3)).contains("null or an object"));
        assert!(e(json!({"int": 1.5})).contains("expected integer"));
        assert!(e(json!({"int": 1, "float": 2.0})).contains("exactly one tag key"));
        assert!(e(json!({"dtype": "complex64"})).contains("unknown dtype"));
        assert!(e(json!({"tensor": "t0", "strides": [1]})).contains("unknown key"));
        assert!(e(json!({"float": "NaN"})).contains("\"nan\""));
    }

    #[test]
    fn checks_schema_types() {
        assert!(ValueSpec::Int(2).check_type("Scalar").is_ok());
        assert!(ValueSpec::Float(2.0).check_type("Tensor").is_ok()); // a wrapped number
        assert!(ValueSpec::None.check_type("int[]?").is_ok());
        assert!(ValueSpec::None.check_type("int").is_err());
        assert!(ValueSpec::Ints(vec![1]).check_type("int").is_err());
        assert!(
            ValueSpec::Tensors(vec![None])
                .check_type("Tensor[]")
                .is_err()
        );
        assert!(
            ValueSpec::Str("x".into())
                .check_type("SomeFutureType")
                .is_ok()
        );
    }
}
