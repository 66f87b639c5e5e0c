//! Placements: how a [`DTensor`](super::DTensor) is laid out along each mesh dimension, and the
//! shard arithmetic that follows from them.
//!
//! Along one mesh dimension a tensor is either split along one of its dimensions
//! ([`Placement::Shard`]), held whole by every rank ([`Placement::Replicate`]), or held as
//! per-rank terms that reduce to the value ([`Placement::Partial`]). When several mesh
//! dimensions shard the same tensor dimension the shards nest in mesh order, as in PyTorch:
//! the earlier mesh dimension splits first, the later one splits each piece again.
//!
//! Shards are even: a sharded dimension must be a multiple of the number of pieces it is cut
//! into (an error says which dimension and why otherwise). PyTorch also allows uneven shards
//! (the first pieces one larger); here they are refused so that every rank holds the same
//! local shape, which keeps collectives one fixed-size block per rank.

use std::fmt;

use crate::error::{Result, TpuError};

/// How partial values combine.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Reduce {
    /// The value is the sum of the ranks' terms (`Partial("sum")`).
    Sum,
    /// The value is the elementwise maximum of the ranks' terms (`Partial("max")`).
    Max,
    /// The value is the elementwise minimum of the ranks' terms (`Partial("min")`).
    Min,
}

impl Reduce {
    /// `sum`, `max`, `min`.
    pub fn name(self) -> &'static str {
        match self {
            Reduce::Sum => "sum",
            Reduce::Max => "max",
            Reduce::Min => "min",
        }
    }
}

/// The layout of a tensor along one mesh dimension.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Placement {
    /// Split evenly along this tensor dimension; rank `i` of the mesh dimension holds piece `i`.
    Shard(usize),
    /// Every rank holds the whole value.
    Replicate,
    /// Every rank holds a term; the value is their reduction.
    Partial(Reduce),
}

impl Placement {
    /// `Partial("sum")`, the usual partial placement.
    pub const PARTIAL: Placement = Placement::Partial(Reduce::Sum);

    /// The sharded tensor dimension, if this is a shard.
    pub fn shard_dim(self) -> Option<usize> {
        match self {
            Placement::Shard(d) => Some(d),
            _ => None,
        }
    }

    /// Whether this is a shard.
    pub fn is_shard(self) -> bool {
        matches!(self, Placement::Shard(_))
    }

    /// Whether this is a partial placement.
    pub fn is_partial(self) -> bool {
        matches!(self, Placement::Partial(_))
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Shard(d) => write!(f, "Shard(dim={d})"),
            Placement::Replicate => write!(f, "Replicate()"),
            Placement::Partial(r) => write!(f, "Partial({})", r.name()),
        }
    }
}

/// `[Shard(dim=0), Replicate()]`.
pub fn describe(placements: &[Placement]) -> String {
    let parts: Vec<String> = placements.iter().map(|p| p.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// How many pieces each of `ndim` tensor dimensions is cut into.
pub(crate) fn shard_counts(placements: &[Placement], mesh: &[usize], ndim: usize) -> Vec<usize> {
    let mut counts = vec![1; ndim];
    for (p, k) in placements.iter().zip(mesh) {
        if let Placement::Shard(d) = p
            && *d < ndim
        {
            counts[*d] *= k;
        }
    }
    counts
}

/// Checks placements against a mesh and a global shape: one per mesh dimension, shard
/// dimensions in range, sharded dimensions divisible by their piece count.
pub(crate) fn validate(placements: &[Placement], mesh: &[usize], shape: &[usize]) -> Result<()> {
    if placements.len() != mesh.len() {
        return Err(TpuError::BadArgs(format!(
            "DTensor: {} placements {} for a mesh of {} dimensions: give one placement per mesh dimension",
            placements.len(),
            describe(placements),
            mesh.len()
        )));
    }
    for p in placements {
        if let Placement::Shard(d) = p
            && *d >= shape.len()
        {
            return Err(TpuError::BadDim(format!(
                "DTensor: {p} of a tensor of shape {shape:?} (dimensions 0 to {})",
                shape.len() as i64 - 1
            )));
        }
    }
    let counts = shard_counts(placements, mesh, shape.len());
    for (d, (n, k)) in shape.iter().zip(&counts).enumerate() {
        if !n.is_multiple_of(*k) {
            return Err(TpuError::ShapeMismatch(format!(
                "DTensor: dimension {d} of size {n} cannot be split evenly into {k} shards ({} over mesh {mesh:?}); uneven shards are not supported",
                describe(placements)
            )));
        }
    }
    Ok(())
}

/// The shape each rank holds.
pub(crate) fn local_shape(placements: &[Placement], mesh: &[usize], shape: &[usize]) -> Vec<usize> {
    let counts = shard_counts(placements, mesh, shape.len());
    shape.iter().zip(&counts).map(|(n, k)| n / k).collect()
}

/// The global shape from a local one.
pub(crate) fn global_shape(
    placements: &[Placement],
    mesh: &[usize],
    local: &[usize],
) -> Vec<usize> {
    let counts = shard_counts(placements, mesh, local.len());
    local.iter().zip(&counts).map(|(n, k)| n * k).collect()
}

/// The `(start, length)` of each dimension that the rank at mesh coordinates `coords` holds
/// (nested shards: earlier mesh dimensions split first).
pub(crate) fn local_region(
    placements: &[Placement],
    mesh: &[usize],
    coords: &[usize],
    shape: &[usize],
) -> Vec<(usize, usize)> {
    let mut region: Vec<(usize, usize)> = shape.iter().map(|n| (0, *n)).collect();
    for ((p, k), c) in placements.iter().zip(mesh).zip(coords) {
        if let Placement::Shard(d) = p
            && let Some(r) = region.get_mut(*d)
        {
            r.1 /= k;
            r.0 += c * r.1;
        }
    }
    region
}
