//! The serialised form of a `pallas_call`, as `tpuemu.pallas` writes it from JAX's jaxpr, and
//! the checks Mosaic makes before it compiles one (block tiling, VMEM capacity).
//!
//! JSON: `{"name", "source", "grid": [n..], "num_inputs", "operands": [OPERAND], "scratch":
//! [AVAL], "body": JAXPR}`; an OPERAND is `{"shape", "dtype", "block": [n|null], "index_map":
//! JAXPR}` (inputs first, then outputs; a `null` block dimension is squeezed, `None` /
//! `pl.Squeezed()` in the `BlockSpec`); a JAXPR is `{"invars": [VAR], "eqns": [EQN],
//! "outvars": [ATOM]}`; a VAR `{"id", "shape", "dtype", "ref"}`; an ATOM `{"v": id}` or
//! `{"lit": number, "dtype"}`; an EQN `{"prim", "ins": [ATOM], "outs": [VAR], "params": {..},
//! "src"}` with the primitive's parameters as `tpuemu.pallas` writes them (sub-jaxprs in
//! `params.branches` / `params.jaxpr`).

use serde::Deserialize;

use super::PallasError;

/// Element types a kernel may use (JAX's names: `float32`, `bfloat16`, `int32`, `bool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dt {
    /// 32-bit float.
    F32,
    /// bfloat16: values in f32 lanes, rounded to bf16.
    Bf16,
    /// 32-bit signed integer.
    I32,
    /// Booleans: 0 or 1 in an i32 lane, one byte in memory.
    Bool,
    /// 8-bit signed integers: scalars in SMEM (scalar prefetch, such as splash attention's
    /// block masks), computed in 32-bit registers and wrapped to 8 bits; int8 arrays are not
    /// lowered.
    I8,
}

impl Dt {
    /// The dtype JAX names `s`.
    pub fn parse(s: &str) -> Option<Dt> {
        Some(match s {
            "float32" => Dt::F32,
            "bfloat16" => Dt::Bf16,
            "int32" => Dt::I32,
            "bool" => Dt::Bool,
            "int8" => Dt::I8,
            _ => return None,
        })
    }

    /// Bytes of one element in memory.
    pub fn bytes(self) -> u32 {
        match self {
            Dt::F32 | Dt::I32 => 4,
            Dt::Bf16 => 2,
            Dt::Bool | Dt::I8 => 1,
        }
    }

    /// Whether lanes hold the value as an f32.
    pub fn is_float(self) -> bool {
        matches!(self, Dt::F32 | Dt::Bf16)
    }
}

/// A variable of a jaxpr.
#[derive(Clone, Debug, Deserialize)]
pub struct Var {
    /// Unique within the kernel.
    pub id: u32,
    /// Its shape (a ref's: the block's).
    pub shape: Vec<usize>,
    /// JAX's dtype name.
    pub dtype: String,
    /// A reference (`Ref<vmem>`), not a value.
    #[serde(default, rename = "ref")]
    pub is_ref: bool,
}

/// An operand of an equation: a variable or a literal.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Atom {
    /// A variable.
    Var {
        /// Its id.
        v: u32,
    },
    /// A literal number (a bool is 0 or 1).
    Lit {
        /// Its value: a number, or `"inf"`, `"-inf"`, `"nan"`.
        lit: serde_json::Value,
        /// JAX's dtype name.
        dtype: String,
    },
}

/// A literal's value (`"inf"`, `"-inf"` and `"nan"` as Python writes them).
pub fn literal(v: &serde_json::Value) -> Option<f64> {
    match v {
        serde_json::Value::String(s) => match s.as_str() {
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            "nan" => Some(f64::NAN),
            _ => None,
        },
        serde_json::Value::Bool(b) => Some(*b as i32 as f64),
        _ => v.as_f64(),
    }
}

/// One equation.
#[derive(Clone, Debug, Deserialize)]
pub struct Eqn {
    /// The primitive's name (`add`, `dot_general`, `swap`, ...).
    pub prim: String,
    /// Operands.
    pub ins: Vec<Atom>,
    /// Results.
    pub outs: Vec<Var>,
    /// Parameters, as `tpuemu.pallas` writes them.
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
    /// Where the kernel's Python source wrote it (`file.py:12`), when JAX knows.
    #[serde(default)]
    pub src: String,
}

/// A jaxpr.
#[derive(Clone, Debug, Deserialize)]
pub struct Jaxpr {
    /// Inputs.
    pub invars: Vec<Var>,
    /// Equations, in order.
    pub eqns: Vec<Eqn>,
    /// Results.
    pub outvars: Vec<Atom>,
}

/// An array passed to or returned by the kernel, with its `BlockSpec`.
#[derive(Clone, Debug, Deserialize)]
pub struct Operand {
    /// The whole array's shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: String,
    /// The block shape; `None` for a squeezed dimension.
    pub block: Vec<Option<usize>>,
    /// The index map: grid indices to block indices, one per dimension.
    pub index_map: Jaxpr,
    /// `"any"` for `memory_space=pl.ANY`: the kernel gets the whole array in HBM and copies
    /// what it needs itself; `"smem"` for scalar prefetch; empty for a pipelined block.
    #[serde(default)]
    pub space: String,
    /// For a pipelined input passed as a broadcast of a smaller buffer: the element strides of
    /// `shape` in that buffer (0 where it repeats); row-major when empty.
    #[serde(default)]
    pub strides: Vec<i64>,
    /// With `strides`: the shape of the buffer passed (the operator's input).
    #[serde(default)]
    pub hbm_shape: Vec<usize>,
}

impl Operand {
    /// Whether the kernel gets the array in HBM (`memory_space=pl.ANY`).
    pub fn in_hbm(&self) -> bool {
        self.space == "any"
    }

    /// Whether it is a scalar-prefetch operand (`PrefetchScalarGridSpec`): copied into SMEM
    /// before the grid runs.
    pub fn in_smem(&self) -> bool {
        self.space == "smem"
    }
}

/// A scratch buffer's shape and dtype.
#[derive(Clone, Debug, Deserialize)]
pub struct Aval {
    /// Shape.
    pub shape: Vec<usize>,
    /// Dtype.
    pub dtype: String,
    /// `"smem"` for `pltpu.SMEM`; VMEM otherwise.
    #[serde(default)]
    pub space: String,
}

impl Aval {
    /// Whether it is an array of semaphores (`pltpu.SemaphoreType.DMA(...)`, `.REGULAR`).
    pub fn is_semaphore(&self) -> bool {
        self.dtype == "dma_sem" || self.dtype == "sem"
    }
}

/// A `pallas_call`.
#[derive(Clone, Debug, Deserialize)]
pub struct KernelSpec {
    /// The kernel function's name.
    pub name: String,
    /// Where it was defined (`file.py:12`).
    #[serde(default)]
    pub source: String,
    /// The grid.
    pub grid: Vec<u32>,
    /// How many operands are inputs (the rest are outputs).
    pub num_inputs: usize,
    /// Inputs, then outputs.
    pub operands: Vec<Operand>,
    /// VMEM scratch buffers (`scratch_shapes`).
    #[serde(default)]
    pub scratch: Vec<Aval>,
    /// The kernel body.
    pub body: Jaxpr,
}

/// Grid steps a kernel may take: the grid is unrolled into straight-line code (index maps and
/// `pl.when` conditions are evaluated while lowering), so this bounds the program's size.
pub const MAX_GRID_STEPS: u64 = 4096;

impl KernelSpec {
    /// Parses the JSON form.
    pub fn parse(json: &str) -> Result<KernelSpec, PallasError> {
        serde_json::from_str(json).map_err(|e| PallasError::Spec(e.to_string()))
    }

    /// Grid steps.
    pub fn steps(&self) -> u64 {
        self.grid.iter().map(|&g| g as u64).product()
    }

    /// The grid indices of step `t` (last axis fastest, as Mosaic iterates).
    pub fn grid_point(&self, mut t: u64) -> Vec<i64> {
        let mut ids = vec![0i64; self.grid.len()];
        for (d, &g) in self.grid.iter().enumerate().rev() {
            let g = g.max(1) as u64;
            ids[d] = (t % g) as i64;
            t /= g;
        }
        ids
    }

    /// Mosaic's checks of the call itself: dtypes, ranks, block shapes against the (8, 128)
    /// tiling, and a grid small enough to unroll.
    pub fn check(&self) -> Result<(), PallasError> {
        let k = &self.name;
        if self.operands.len() < self.num_inputs || self.operands.len() == self.num_inputs {
            return Err(PallasError::refused(
                k,
                "a kernel needs at least one output",
            ));
        }
        if self.grid.contains(&0) {
            return Err(PallasError::refused(k, "a grid dimension of size 0"));
        }
        if self.steps() > MAX_GRID_STEPS {
            return Err(PallasError::unsupported(
                k,
                format!(
                    "a grid of {} steps ({:?}): at most {MAX_GRID_STEPS} are lowered (the grid is unrolled)",
                    self.steps(),
                    self.grid
                ),
            ));
        }
        for (i, o) in self.operands.iter().enumerate() {
            let what = self.operand_name(i);
            let dt = Dt::parse(&o.dtype).ok_or_else(|| {
                PallasError::unsupported(k, format!("{what} has dtype {}", o.dtype))
            })?;
            if dt == Dt::I8 && !o.in_smem() {
                return Err(PallasError::unsupported(
                    k,
                    format!("{what}: an int8 array outside scalar prefetch"),
                ));
            }
            if !o.strides.is_empty() {
                let elems: usize = o.hbm_shape.iter().product();
                let reach: i64 = o
                    .shape
                    .iter()
                    .zip(&o.strides)
                    .map(|(&s, &st)| (s as i64 - 1).max(0) * st)
                    .sum();
                if i >= self.num_inputs
                    || o.in_hbm()
                    || o.in_smem()
                    || o.strides.len() != o.shape.len()
                    || o.strides.iter().any(|&s| s < 0)
                    || reach >= elems.max(1) as i64
                {
                    return Err(PallasError::Spec(format!(
                        "{what}: strides {:?} of a buffer of shape {:?} for an array of shape {:?}",
                        o.strides, o.hbm_shape, o.shape
                    )));
                }
            }
            if o.in_smem() {
                if dt.bytes() != 4 && dt != Dt::I8 {
                    return Err(PallasError::unsupported(
                        k,
                        format!(
                            "{what}: a scalar-prefetch array of {} (int32, float32 or int8)",
                            o.dtype
                        ),
                    ));
                }
                continue;
            }
            if o.block.len() != o.shape.len() {
                return Err(PallasError::refused(
                    k,
                    format!(
                        "{what}: block shape {} has {} dimensions, the array {:?} has {}",
                        show_block(&o.block),
                        o.block.len(),
                        o.shape,
                        o.shape.len()
                    ),
                ));
            }
            if o.in_hbm() {
                continue;
            }
            if o.shape.is_empty() {
                return Err(PallasError::unsupported(
                    k,
                    format!("{what} is a 0-dimensional array (pass it as shape (1, 1))"),
                ));
            }
            let n = o.shape.len();
            for (d, (b, s)) in o.block.iter().zip(&o.shape).enumerate() {
                let Some(b) = *b else { continue };
                if b == 0 {
                    return Err(PallasError::refused(
                        k,
                        format!(
                            "{what}: block shape {} has size 0 in dimension {d} (array {:?})",
                            show_block(&o.block),
                            o.shape
                        ),
                    ));
                }
                // Mosaic's rule: the last two dimensions of a block are divisible by 8 and
                // 128, or equal to the array's.
                let tile = if d + 1 == n {
                    128
                } else if d + 2 == n {
                    8
                } else {
                    1
                };
                if b % tile != 0 && b != *s {
                    return Err(PallasError::refused(
                        k,
                        format!(
                            "{what}: block shape {} breaks the (8, 128) tiling: dimension {d} is {b}, \
                             neither a multiple of {tile} nor the array's size {s}",
                            show_block(&o.block)
                        ),
                    ));
                }
            }
            if o.index_map.outvars.len() != n {
                return Err(PallasError::refused(
                    k,
                    format!(
                        "{what}: the index map returns {} indices for a {n}-dimensional array",
                        o.index_map.outvars.len()
                    ),
                ));
            }
        }
        for s in &self.scratch {
            if s.is_semaphore() {
                continue;
            }
            let dt = Dt::parse(&s.dtype).ok_or_else(|| {
                PallasError::unsupported(k, format!("a scratch buffer of dtype {}", s.dtype))
            })?;
            if dt == Dt::I8 {
                return Err(PallasError::unsupported(k, "an int8 scratch buffer".into()));
            }
        }
        Ok(())
    }

    /// `input 0`, `output 1`: how errors name operand `i`.
    pub fn operand_name(&self, i: usize) -> String {
        if i < self.num_inputs {
            format!("input {i}")
        } else {
            format!("output {}", i - self.num_inputs)
        }
    }
}

/// A block shape as Python writes it: `(8, 128)`, `(None, 8, 128)`.
pub fn show_block(b: &[Option<usize>]) -> String {
    let parts: Vec<String> = b
        .iter()
        .map(|x| x.map_or("None".to_string(), |v| v.to_string()))
        .collect();
    if parts.len() == 1 {
        format!("({},)", parts[0])
    } else {
        format!("({})", parts.join(", "))
    }
}
