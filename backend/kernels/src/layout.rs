//! Layouts: shape, strides and offset over a storage, and the view arithmetic PyTorch does on
//! them (permute, expand, slice, select, view, ...), plus broadcasting.
//!
//! A view changes only the layout; the storage is shared. All quantities are in elements.

use crate::error::TpuError;

/// Shape, strides and storage offset of a tensor, in elements.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Layout {
    /// Size of each dimension.
    pub shape: Vec<usize>,
    /// Step between neighbours along each dimension (0 for broadcast dimensions).
    pub strides: Vec<isize>,
    /// Index of element `[0, 0, ...]` in the storage.
    pub offset: usize,
}

/// Row-major strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for d in (0..shape.len()).rev() {
        strides[d] = acc;
        // Saturating: a shape too large for any device must not wrap to small strides (its
        // storage, [`storage_bytes`], cannot be allocated, which is the error the user sees).
        acc = acc.saturating_mul(isize::try_from(shape[d].max(1)).unwrap_or(isize::MAX));
    }
    strides
}

/// Bytes of a contiguous tensor of `shape` with `elem_bytes` bytes per element, or `u64::MAX`
/// when the count overflows 64 bits: no device holds that much, so allocating it fails with an
/// out-of-memory error instead of wrapping to a small (or zero-byte) storage.
pub fn storage_bytes(shape: &[usize], elem_bytes: usize) -> u64 {
    shape
        .iter()
        .try_fold(elem_bytes as u64, |acc, &d| acc.checked_mul(d as u64))
        .unwrap_or(u64::MAX)
}

/// Normalises a possibly negative dimension index for a tensor of `ndim` dimensions
/// (a 0-d tensor accepts -1 and 0).
pub fn wrap_dim(dim: i64, ndim: usize) -> Result<usize, TpuError> {
    let n = ndim.max(1) as i64;
    if dim < -n || dim >= n {
        return Err(TpuError::BadDim(format!(
            "Dimension out of range (expected to be in range of [{}, {}], but got {dim})",
            -n,
            n - 1
        )));
    }
    Ok(if dim < 0 {
        (dim + n) as usize
    } else {
        dim as usize
    })
}

/// The broadcast of two shapes, as `torch.broadcast_shapes`.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, TpuError> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(TpuError::ShapeMismatch(format!(
                "The size of tensor a ({da}) must match the size of tensor b ({db}) at non-singleton dimension {i}"
            )));
        };
    }
    Ok(out)
}

/// Replaces a single `-1` in `shape` by what makes the element count `numel`.
pub fn infer_size(shape: &[i64], numel: usize) -> Result<Vec<usize>, TpuError> {
    let mut known = 1usize;
    let mut infer = None;
    for (i, &d) in shape.iter().enumerate() {
        if d == -1 {
            if infer.replace(i).is_some() {
                return Err(TpuError::BadArgs(
                    "only one dimension can be inferred".into(),
                ));
            }
        } else if d < 0 {
            return Err(TpuError::BadArgs(format!("invalid shape dimension {d}")));
        } else {
            known *= d as usize;
        }
    }
    let mut out: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    match infer {
        Some(i) => {
            if known == 0 || !numel.is_multiple_of(known) {
                return Err(TpuError::ShapeMismatch(format!(
                    "shape '{shape:?}' is invalid for input of size {numel}"
                )));
            }
            out[i] = numel / known;
        }
        None if known != numel => {
            return Err(TpuError::ShapeMismatch(format!(
                "shape '{shape:?}' is invalid for input of size {numel}"
            )));
        }
        None => {}
    }
    Ok(out)
}

impl Layout {
    /// A contiguous layout of `shape` at offset 0.
    pub fn contiguous(shape: &[usize]) -> Self {
        Self::contiguous_from(shape.to_vec())
    }

    /// [`Layout::contiguous`] of a shape the caller gives up.
    pub fn contiguous_from(shape: Vec<usize>) -> Self {
        Layout {
            strides: contiguous_strides(&shape),
            shape,
            offset: 0,
        }
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Saturating, as [`storage_bytes`]: such a tensor never gets storage.
        self.shape.iter().fold(1usize, |a, &d| a.saturating_mul(d))
    }

    /// Row-major contiguous (size-1 dimensions may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1isize;
        for d in (0..self.ndim()).rev() {
            if self.shape[d] != 1 {
                if self.strides[d] != expected {
                    return false;
                }
                expected *= self.shape[d] as isize;
            }
        }
        true
    }

    /// Every element at its own storage offset and the offsets a dense block, in some order
    /// of the dimensions (PyTorch's `is_non_overlapping_and_dense`).
    pub fn is_non_overlapping_and_dense(&self) -> bool {
        let mut dims: Vec<usize> = (0..self.ndim()).filter(|&d| self.shape[d] > 1).collect();
        dims.sort_by_key(|&d| self.strides[d]);
        let mut expected = 1isize;
        for d in dims {
            if self.strides[d] != expected {
                return false;
            }
            expected *= self.shape[d] as isize;
        }
        true
    }

    /// Storage elements `[lo, hi)` the layout can touch (empty for zero-size tensors).
    pub fn storage_span(&self) -> (usize, usize) {
        if self.numel() == 0 {
            return (self.offset, self.offset);
        }
        let (mut lo, mut hi) = (self.offset as isize, self.offset as isize);
        for (s, st) in self.shape.iter().zip(&self.strides) {
            let span = (*s as isize - 1) * st;
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
        }
        (lo.max(0) as usize, hi as usize + 1)
    }

    /// `permute(dims)`.
    pub fn permute(&self, dims: &[i64]) -> Result<Layout, TpuError> {
        if dims.len() != self.ndim() {
            return Err(TpuError::BadArgs(format!(
                "permute(sparse_coo): number of dimensions in the tensor input does not match the length of the desired ordering of dimensions i.e. input.dim() = {} is not equal to len(dims) = {}",
                self.ndim(),
                dims.len()
            )));
        }
        let mut seen = vec![false; self.ndim()];
        let mut out = Layout {
            shape: Vec::new(),
            strides: Vec::new(),
            offset: self.offset,
        };
        for &d in dims {
            let d = wrap_dim(d, self.ndim())?;
            if std::mem::replace(&mut seen[d], true) {
                return Err(TpuError::BadArgs(
                    "permute(): duplicate dims are not allowed.".into(),
                ));
            }
            out.shape.push(self.shape[d]);
            out.strides.push(self.strides[d]);
        }
        Ok(out)
    }

    /// `transpose(a, b)`.
    pub fn transpose(&self, a: i64, b: i64) -> Result<Layout, TpuError> {
        let (a, b) = (wrap_dim(a, self.ndim())?, wrap_dim(b, self.ndim())?);
        let mut out = self.clone();
        if self.ndim() > 0 {
            out.shape.swap(a, b);
            out.strides.swap(a, b);
        }
        Ok(out)
    }

    /// `expand(shape)`: `-1` keeps a size; new leading dimensions and size-1 dimensions
    /// broadcast with stride 0.
    pub fn expand(&self, shape: &[i64]) -> Result<Layout, TpuError> {
        if shape.len() < self.ndim() {
            return Err(TpuError::BadArgs(format!(
                "expand: the number of sizes provided ({}) must be greater or equal to the number of dimensions in the tensor ({})",
                shape.len(),
                self.ndim()
            )));
        }
        let lead = shape.len() - self.ndim();
        let mut out = Layout {
            shape: Vec::new(),
            strides: Vec::new(),
            offset: self.offset,
        };
        for (i, &want) in shape.iter().enumerate() {
            if i < lead {
                if want < 0 {
                    return Err(TpuError::BadArgs(format!(
                        "The expanded size of the tensor ({want}) isn't allowed in a leading, non-existing dimension {i}"
                    )));
                }
                out.shape.push(want as usize);
                out.strides.push(0);
                continue;
            }
            let (have, st) = (self.shape[i - lead], self.strides[i - lead]);
            if want == -1 || want as usize == have {
                out.shape.push(have);
                out.strides.push(st);
            } else if have == 1 && want >= 0 {
                out.shape.push(want as usize);
                out.strides.push(0);
            } else {
                return Err(TpuError::ShapeMismatch(format!(
                    "The expanded size of the tensor ({want}) must match the existing size ({have}) at non-singleton dimension {i}.  Target sizes: {shape:?}.  Tensor sizes: {:?}",
                    self.shape
                )));
            }
        }
        Ok(out)
    }

    /// Broadcasts to `shape` (which must be a broadcast of this shape).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Layout, TpuError> {
        if self.shape == shape {
            // What `expand` gives for the same shape (every size and stride kept), without
            // building the sizes: the common case of an elementwise operator's operands.
            return Ok(self.clone());
        }
        self.expand(&shape.iter().map(|d| *d as i64).collect::<Vec<_>>())
    }

    /// `slice(dim, start, end, step)` with Python clamping of `start` and `end`.
    pub fn slice(
        &self,
        dim: i64,
        start: Option<i64>,
        end: Option<i64>,
        step: i64,
    ) -> Result<Layout, TpuError> {
        if step <= 0 {
            return Err(TpuError::BadArgs("slice step must be positive".into()));
        }
        let d = wrap_dim(dim, self.ndim())?;
        if self.ndim() == 0 {
            return Err(TpuError::BadDim(
                "slice() cannot be applied to a 0-dim tensor.".into(),
            ));
        }
        let n = self.shape[d] as i64;
        let clamp = |v: i64| if v < 0 { (v + n).clamp(0, n) } else { v.min(n) };
        let s = clamp(start.unwrap_or(0));
        let e = clamp(end.unwrap_or(n)).max(s);
        let mut out = self.clone();
        out.offset = (self.offset as isize + s as isize * self.strides[d]) as usize;
        out.shape[d] = ((e - s + step - 1) / step) as usize;
        out.strides[d] *= step as isize;
        Ok(out)
    }

    /// `select(dim, index)`: removes a dimension.
    pub fn select(&self, dim: i64, index: i64) -> Result<Layout, TpuError> {
        if self.ndim() == 0 {
            return Err(TpuError::BadDim(
                "select() cannot be applied to a 0-dim tensor.".into(),
            ));
        }
        let d = wrap_dim(dim, self.ndim())?;
        let n = self.shape[d] as i64;
        if index < -n || index >= n {
            return Err(TpuError::IndexOutOfRange(format!(
                "select(): index {index} out of range for tensor of size {:?} at dimension {d}",
                self.shape
            )));
        }
        let i = if index < 0 { index + n } else { index };
        let mut out = self.clone();
        out.offset = (self.offset as isize + i as isize * self.strides[d]) as usize;
        out.shape.remove(d);
        out.strides.remove(d);
        Ok(out)
    }

    /// `unsqueeze(dim)`.
    pub fn unsqueeze(&self, dim: i64) -> Result<Layout, TpuError> {
        let d = wrap_dim(dim, self.ndim() + 1)?;
        let mut out = self.clone();
        let st = if d < self.ndim() {
            self.strides[d] * self.shape[d] as isize
        } else {
            1
        };
        out.shape.insert(d, 1);
        out.strides.insert(d, st);
        Ok(out)
    }

    /// `squeeze(dim)`: removes the dimension if its size is 1.
    pub fn squeeze(&self, dim: i64) -> Result<Layout, TpuError> {
        let mut out = self.clone();
        if self.ndim() == 0 {
            wrap_dim(dim, 0)?;
            return Ok(out);
        }
        let d = wrap_dim(dim, self.ndim())?;
        if self.shape[d] == 1 {
            out.shape.remove(d);
            out.strides.remove(d);
        }
        Ok(out)
    }

    /// `view(shape)` without copying, if the strides allow (PyTorch's `computeStride`).
    pub fn view(&self, shape: &[i64]) -> Result<Layout, TpuError> {
        let new = infer_size(shape, self.numel())?;
        self.view_as(&new).ok_or_else(|| {
            TpuError::BadArgs(
                "view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead.".into(),
            )
        })
    }

    /// The layout of `new` (same element count) over the same storage, if one exists.
    pub fn view_as(&self, new: &[usize]) -> Option<Layout> {
        let mk = |strides| {
            Some(Layout {
                shape: new.to_vec(),
                strides,
                offset: self.offset,
            })
        };
        if self.numel() == 0 || self.ndim() == 0 {
            return mk(contiguous_strides(new));
        }
        let (old, olds) = (&self.shape, &self.strides);
        let mut news = vec![0isize; new.len()];
        let mut view_d = new.len() as isize - 1;
        let mut chunk_base = *olds.last().expect("ndim > 0");
        let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
        for td in (0..old.len()).rev() {
            tensor_numel *= old[td];
            if td == 0 || (old[td - 1] != 1 && olds[td - 1] != tensor_numel as isize * chunk_base) {
                while view_d >= 0 && (view_numel < tensor_numel || new[view_d as usize] == 1) {
                    news[view_d as usize] = view_numel as isize * chunk_base;
                    view_numel *= new[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if td > 0 {
                    chunk_base = olds[td - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        mk(news)
    }

    /// `as_strided(size, stride, offset)`.
    pub fn as_strided(size: &[i64], stride: &[i64], offset: i64) -> Result<Layout, TpuError> {
        if size.len() != stride.len() {
            return Err(TpuError::BadArgs(format!(
                "mismatch in length of strides and shape: {} vs {}",
                stride.len(),
                size.len()
            )));
        }
        if size.iter().any(|s| *s < 0) || stride.iter().any(|s| *s < 0) || offset < 0 {
            return Err(TpuError::BadArgs(
                "as_strided: negative size, stride or offset".into(),
            ));
        }
        Ok(Layout {
            shape: size.iter().map(|s| *s as usize).collect(),
            strides: stride.iter().map(|s| *s as isize).collect(),
            offset: offset as usize,
        })
    }
}

/// The layout PyTorch's `TensorIterator` gives the output of an elementwise operation over
/// `inputs` (each broadcast to `shape`), so that `x.t() + 1` is as transposed as `x.t()`.
/// [`crate::ops::helpers::map`] writes its outputs so; checked against PyTorch's strides in
/// this module's tests. The rule:
///
/// - every input has `shape` and is contiguous: contiguous;
/// - every input has `shape` and the same strides, dense and non-overlapping: those strides;
/// - otherwise the dimensions are ordered as the inputs' strides order them (the first input
///   that tells two dimensions apart decides; broadcast dimensions tell nothing; equal strides
///   put the larger dimension outside), and the output is dense in that order.
pub fn elementwise_layout(shape: &[usize], inputs: &[&Layout]) -> Layout {
    let n = shape.len();
    let same_shape = inputs.iter().all(|l| l.shape == shape);
    if same_shape {
        if inputs.iter().all(|l| l.is_contiguous()) {
            return Layout::contiguous(shape);
        }
        let first = &inputs[0].strides;
        if inputs.iter().all(|l| &l.strides == first) && inputs[0].is_non_overlapping_and_dense() {
            return Layout {
                shape: shape.to_vec(),
                strides: first.clone(),
                offset: 0,
            };
        }
    }
    // Each input's strides over `shape`: 0 where it is broadcast or absent.
    let strides: Vec<Vec<isize>> = inputs
        .iter()
        .map(|l| {
            let off = n - l.ndim().min(n);
            (0..n)
                .map(|d| {
                    if d < off {
                        return 0;
                    }
                    let i = d - off;
                    if l.shape[i] == 1 && shape[d] != 1 {
                        0
                    } else {
                        l.strides[i]
                    }
                })
                .collect()
        })
        .collect();
    // 1: `d0` goes outside `d1`; -1: inside; 0: no input says.
    let should_swap = |d0: usize, d1: usize| -> i32 {
        for s in &strides {
            let (s0, s1) = (s[d0], s[d1]);
            if s0 == 0 || s1 == 0 {
                continue;
            }
            if s0 != s1 {
                return if s0 < s1 { -1 } else { 1 };
            }
            if shape[d0] > shape[d1] {
                return 1;
            }
        }
        0
    };
    // `perm[0]` is the innermost dimension; insertion sort as TensorIterator does.
    let mut perm: Vec<usize> = (0..n).rev().collect();
    for i in 1..n {
        let mut d1 = i;
        for d0 in (0..i).rev() {
            match should_swap(perm[d0], perm[d1]) {
                c if c > 0 => {
                    perm.swap(d0, d1);
                    d1 = d0;
                }
                c if c < 0 => break,
                _ => {}
            }
        }
    }
    let mut out = vec![0isize; n];
    let mut next = 1isize;
    for &d in &perm {
        out[d] = next;
        next *= shape[d] as isize;
    }
    Layout {
        shape: shape.to_vec(),
        strides: out,
        offset: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn broadcasting_to_the_same_shape_keeps_every_stride() {
        // A size-1 dim with an arbitrary stride, a zero stride and an offset: PyTorch's
        // `expand` to the same sizes keeps them all (`t = torch.empty(40).as_strided((3, 1, 4),
        // (9, 7, 0), 5)`: `t.expand(3, 1, 4).stride()` is `(9, 7, 0)`, `t.expand(2, 3, 6,
        // 4).stride()` is `(0, 9, 0, 0)`, offset 5; torch 2.15.0).
        let l = Layout {
            shape: vec![3, 1, 4],
            strides: vec![9, 7, 0],
            offset: 5,
        };
        let b = l.broadcast_to(&[3, 1, 4]).unwrap();
        assert_eq!(
            (b.shape.clone(), b.strides.clone(), b.offset),
            (vec![3, 1, 4], vec![9, 7, 0], 5)
        );
        // A real broadcast still goes through `expand`: the size-1 dim gets stride 0.
        let e = l.broadcast_to(&[2, 3, 6, 4]).unwrap();
        assert_eq!(
            (e.shape, e.strides, e.offset),
            (vec![2, 3, 6, 4], vec![0, 9, 0, 0], 5)
        );
        assert!(l.broadcast_to(&[3, 2, 5]).is_err());
    }

    #[test]
    fn views_follow_pytorch() {
        let l = Layout::contiguous(&[2, 3, 4]);
        let t = l.transpose(0, 2).unwrap();
        assert_eq!(
            (t.shape.clone(), t.strides.clone()),
            (vec![4, 3, 2], vec![1, 4, 12])
        );
        assert!(!t.is_contiguous());
        assert!(t.view(&[24]).is_err());
        let v = l.view(&[6, -1]).unwrap();
        assert_eq!(
            (v.shape.clone(), v.strides.clone()),
            (vec![6, 4], vec![4, 1])
        );
        let s = l.slice(1, Some(1), None, 2).unwrap();
        assert_eq!(
            (s.shape.clone(), s.strides.clone(), s.offset),
            (vec![2, 1, 4], vec![12, 8, 1], 4)
        );
        let e = Layout::contiguous(&[3, 1]).expand(&[2, 3, 5]).unwrap();
        assert_eq!(e.strides, vec![0, 1, 0]);
        assert!(Layout::contiguous(&[3, 2]).expand(&[3, 4]).is_err());
        assert!(l.select(1, 3).is_err());
        assert_eq!(l.select(1, -1).unwrap().offset, 8);
        assert!(wrap_dim(3, 3).is_err());
        assert_eq!(
            broadcast_shapes(&[3, 1], &[2, 1, 4]).unwrap(),
            vec![2, 3, 4]
        );
        assert!(broadcast_shapes(&[3], &[4]).is_err());
    }

    /// Element offsets a layout addresses, in row-major index order.
    fn offsets(l: &Layout) -> Vec<isize> {
        let mut out = Vec::new();
        let n = l.numel();
        for flat in 0..n {
            let mut rem = flat;
            let mut off = l.offset as isize;
            for d in (0..l.ndim()).rev() {
                off += (rem % l.shape[d]) as isize * l.strides[d];
                rem /= l.shape[d];
            }
            out.push(off);
        }
        out
    }

    proptest! {
        #[test]
        fn view_addresses_the_same_elements(dims in proptest::collection::vec(1usize..4, 1..4), split in 0usize..3) {
            let l = Layout::contiguous(&dims);
            let n = l.numel();
            // Any reshape of a contiguous tensor is a view with the same element order.
            let new = if split == 0 { vec![n as i64] } else { vec![-1, dims[0] as i64] };
            if let Ok(v) = l.view(&new) {
                prop_assert_eq!(offsets(&v), offsets(&l));
            }
            // A permuted tensor viewed back keeps its element order when a view exists.
            let perm: Vec<i64> = (0..dims.len() as i64).rev().collect();
            let p = l.permute(&perm).unwrap();
            if let Some(v) = p.view_as(&[p.numel()]) {
                prop_assert_eq!(offsets(&v), offsets(&p));
            }
        }
    }

    /// Strides PyTorch 2.15 gives (`(a + 1).stride()` etc., printed by torch on CPU).
    #[test]
    fn elementwise_output_strides_follow_pytorch() {
        let l = |shape: &[i64], strides: &[i64]| Layout::as_strided(shape, strides, 0).unwrap();
        let out = |shape: &[usize], ins: &[&Layout]| elementwise_layout(shape, ins).strides;
        // torch.randn(3, 4).t() + 1 -> (1, 4)
        let t = l(&[4, 3], &[1, 4]);
        assert_eq!(out(&[4, 3], &[&t]), vec![1, 4]);
        // torch.randn(2, 3, 4).permute(2, 0, 1) * 2 -> (1, 12, 4)
        let p = l(&[4, 2, 3], &[1, 12, 4]);
        assert_eq!(out(&[4, 2, 3], &[&p]), vec![1, 12, 4]);
        // t + torch.randn(4, 1) and the other order -> (1, 4)
        let c = l(&[4, 1], &[1, 1]);
        assert_eq!(out(&[4, 3], &[&t, &c]), vec![1, 4]);
        assert_eq!(out(&[4, 3], &[&c, &t]), vec![1, 4]);
        // torch.randn(5, 4)[::2] + 1 -> (4, 1): a strided but ordered input gives contiguous
        let e = l(&[3, 4], &[8, 1]);
        assert_eq!(out(&[3, 4], &[&e]), vec![4, 1]);
        // channels-last (2, 3, 4, 5) + 1 and + torch.randn(5) -> (60, 1, 15, 3)
        let f = l(&[2, 3, 4, 5], &[60, 1, 15, 3]);
        let v = l(&[5], &[1]);
        assert_eq!(out(&[2, 3, 4, 5], &[&f]), vec![60, 1, 15, 3]);
        assert_eq!(out(&[2, 3, 4, 5], &[&f, &v]), vec![60, 1, 15, 3]);
        // transposed + contiguous: the first input decides -> (1, 4); the other order (3, 1)
        let h = Layout::contiguous(&[4, 3]);
        assert_eq!(out(&[4, 3], &[&t, &h]), vec![1, 4]);
        assert_eq!(out(&[4, 3], &[&h, &t]), vec![3, 1]);
        // torch.randn(6, 4)[:, :3].t() + 1 -> (1, 3): not dense, ordered, made dense
        let k = l(&[3, 6], &[1, 4]);
        assert_eq!(out(&[3, 6], &[&k]), vec![1, 3]);
    }
}
