//! Tensor files: loading a case file's safetensors file and resolving manifest values
//! ([`ValueSpec`]) into executor values ([`Value`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::SafeTensors;

use crate::error::FormatError;
use crate::spec::{TensorRef, ValueSpec};
use crate::tensor::{DType, HostTensor};
use crate::value::Value;

/// The tensors of one safetensors file, by name.
#[derive(Clone, Debug, Default)]
pub struct TensorStore {
    path: PathBuf,
    tensors: BTreeMap<String, HostTensor>,
}

impl TensorStore {
    /// Reads a safetensors file (little-endian data; dtypes F32, BF16, F16, F64, I64, I32, I16, I8,
    /// U8, BOOL).
    pub fn load(path: &Path) -> Result<TensorStore, FormatError> {
        let bytes = std::fs::read(path).map_err(|source| FormatError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        TensorStore::from_bytes(path, &bytes)
    }

    /// Parses safetensors bytes; `path` names the file in errors.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<TensorStore, FormatError> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| FormatError::Safetensors {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let mut tensors = BTreeMap::new();
        for (name, view) in st.tensors() {
            let dtype =
                DType::from_safetensors(view.dtype()).ok_or_else(|| FormatError::TensorDtype {
                    path: path.to_path_buf(),
                    name: name.clone(),
                    dtype: format!("{:?}", view.dtype()),
                })?;
            let t = HostTensor::new(dtype, view.shape().to_vec(), view.data().to_vec()).map_err(
                |source| FormatError::Tensor {
                    path: path.to_path_buf(),
                    name: name.clone(),
                    source,
                },
            )?;
            tensors.insert(name, t);
        }
        Ok(TensorStore {
            path: path.to_path_buf(),
            tensors,
        })
    }

    /// The tensor stored under `name`.
    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.tensors.get(name)
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// No tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The tensor a ref names: the stored tensor, or the strided view of it (then the stored
    /// tensor must be 1-D: the storage).
    pub fn tensor(&self, r: &TensorRef) -> Result<HostTensor, String> {
        let file = self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |f| f.to_string_lossy().into(),
        );
        let stored = self
            .get(&r.name)
            .ok_or_else(|| format!("tensor {:?} is not in {file}", r.name))?;
        match &r.view {
            None => Ok(stored.clone()),
            Some(v) => {
                if stored.shape().len() != 1 {
                    return Err(format!(
                        "tensor {:?} has a view, so it must be a 1-D storage, got shape {:?}",
                        r.name,
                        stored.shape()
                    ));
                }
                HostTensor::strided(
                    stored.dtype(),
                    stored.storage_bytes().to_vec(),
                    v.size.clone(),
                    v.stride.clone(),
                    v.offset,
                )
                .map_err(|e| format!("view of tensor {:?}: {e}", r.name))
            }
        }
    }

    /// Resolves a manifest value; `ty` (the schema type tag) decides between `Tensor[]` and
    /// `Tensor?[]`.
    pub fn resolve(&self, spec: &ValueSpec, ty: &str) -> Result<Value, String> {
        Ok(match spec {
            ValueSpec::None => Value::None,
            ValueSpec::Bool(b) => Value::Bool(*b),
            ValueSpec::Int(i) => Value::Int(*i),
            ValueSpec::Float(x) => Value::Float(*x),
            ValueSpec::Str(s) => Value::Str(s.clone()),
            ValueSpec::Dtype(d) => Value::Dtype(*d),
            ValueSpec::Layout(s) => Value::Layout(s.clone()),
            ValueSpec::Device(s) => Value::Device(s.clone()),
            ValueSpec::MemoryFormat(s) => Value::MemoryFormat(s.clone()),
            ValueSpec::Ints(v) => Value::IntList(v.clone()),
            ValueSpec::Floats(v) => Value::FloatList(v.clone()),
            ValueSpec::Bools(v) => Value::BoolList(v.clone()),
            ValueSpec::Tensor(r) => Value::Tensor(self.tensor(r)?),
            ValueSpec::Tensors(refs) => {
                let resolved: Vec<Option<HostTensor>> = refs
                    .iter()
                    .map(|r| r.as_ref().map(|r| self.tensor(r)).transpose())
                    .collect::<Result<_, _>>()?;
                if ty.starts_with("Tensor?[]") || resolved.iter().any(Option::is_none) {
                    Value::OptionalTensorList(resolved)
                } else {
                    Value::TensorList(resolved.into_iter().flatten().collect())
                }
            }
        })
    }
}
