//! Structural keys: a node or a recorded graph written out as machine words, for the caches
//! that stand between an operator and its kernel (the lowering memo of
//! `runtime::exec`, DeferAndFuse's plan cache).
//!
//! A key is an exact encoding, not a hash: two keys are equal only when everything written
//! into them is, so a cache lookup can never return another structure's kernel or plan.
//! Floats are written by their bits (`0.0` and `-0.0`, or two NaN payloads, stay apart);
//! every variable-length part is preceded by its length, so the encoding is prefix-free.
//! Building one costs a few words per node and no formatting.

use std::hash::{Hash, Hasher};

use super::{MatmulNode, Node, NodeKind, POp, Prog, View};
use crate::dtype::{DType, Scalar};
use crate::layout::Layout;

/// `bytes` as little-endian words, the last one zero-padded.
fn words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes.chunks(8).map(|c| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        u64::from_le_bytes(w)
    })
}

/// The words of a key being written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Key(pub Vec<u64>);

/// The multiplier of [`WordHasher`]'s mix.
const MIX: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hash for Key {
    /// The words folded in four independent lanes (so that the multiplies of neighbouring
    /// words overlap; a key of a recorded graph has thousands), then the lanes, the length
    /// and the words left over. Equal keys hash equally.
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut lanes = [0u64; 4];
        let chunks = self.0.chunks_exact(4);
        let rest = chunks.remainder();
        for c in chunks {
            for (l, w) in lanes.iter_mut().zip(c) {
                *l = (l.rotate_left(5) ^ w).wrapping_mul(MIX);
            }
        }
        state.write_usize(self.0.len());
        for w in lanes.iter().chain(rest) {
            state.write_u64(*w);
        }
    }
}

impl Hasher for Key {
    /// Collects what a derived `Hash` writes (discriminants and fields), word by word: the
    /// writes are the encoding. (`finish` is never used.)
    fn write(&mut self, bytes: &[u8]) {
        self.0.push(bytes.len() as u64);
        self.0.extend(words(bytes));
    }

    fn write_u8(&mut self, i: u8) {
        self.0.push(i as u64);
    }

    fn write_u32(&mut self, i: u32) {
        self.0.push(i as u64);
    }

    fn write_u64(&mut self, i: u64) {
        self.0.push(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.0.push(i as u64);
    }

    fn write_isize(&mut self, i: isize) {
        self.0.push(i as u64);
    }

    fn finish(&self) -> u64 {
        0
    }
}

/// Hashes keys for the caches' maps: a multiply-rotate mix of each word (the keys compared
/// for equality afterwards are exact; this only spreads them over buckets, several times
/// faster than the standard SipHash on keys of hundreds of words).
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        for w in words(bytes) {
            self.write_u64(w);
        }
    }

    #[inline]
    fn write_u64(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(MIX);
    }

    fn write_usize(&mut self, w: usize) {
        self.write_u64(w as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map keyed by [`Key`]s.
pub type KeyMap<V> = std::collections::HashMap<Key, V, std::hash::BuildHasherDefault<WordHasher>>;

/// A map keyed by ids (storages, operator calls): one multiply a lookup.
pub type IdMap<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<WordHasher>>;

impl Key {
    /// An empty key with room for `words`.
    pub fn with_capacity(words: usize) -> Self {
        Key(Vec::with_capacity(words))
    }

    /// Appends one word.
    #[inline]
    pub fn word(&mut self, w: u64) {
        self.0.push(w);
    }

    /// Appends anything with a derived (field-by-field) `Hash`: enums without floats.
    #[inline]
    pub fn hashed(&mut self, x: &impl Hash) {
        x.hash(self);
    }

    /// Appends a list of sizes, length first.
    pub fn sizes(&mut self, xs: &[usize]) {
        self.word(xs.len() as u64);
        self.0.extend(xs.iter().map(|x| *x as u64));
    }

    /// Appends a layout's shape and strides (not its offset).
    pub fn layout(&mut self, l: &Layout) {
        self.sizes(&l.shape);
        self.0.extend(l.strides.iter().map(|s| *s as u64));
    }

    /// Appends a dtype.
    pub fn dtype(&mut self, d: DType) {
        self.word(d as u64);
    }

    /// Appends a scalar, floats by their bits.
    pub fn scalar(&mut self, s: Scalar) {
        match s {
            Scalar::Bool(b) => self.0.extend([0, b as u64]),
            Scalar::Int(i) => self.0.extend([1, i as u64]),
            Scalar::Float(f) => self.0.extend([2, f.to_bits()]),
        }
    }

    /// Appends a tile program.
    pub fn prog(&mut self, p: &Prog) {
        self.word(p.nodes.len() as u64);
        for n in &p.nodes {
            self.dtype(n.dtype);
            self.word(n.per_row as u64);
            match n.op {
                POp::Input(i) => self.0.extend([0, i as u64]),
                POp::Const(c) => {
                    self.word(1);
                    self.scalar(c);
                }
                POp::Index(d) => self.0.extend([2, d as u64]),
                POp::Bin(k, a, b) => {
                    self.word(3);
                    self.hashed(&k);
                    self.0.extend([a as u64, b as u64]);
                }
                POp::Un(k, a) => {
                    self.word(4);
                    self.hashed(&k);
                    self.word(a as u64);
                }
                POp::Cmp(k, a, b) => {
                    self.word(5);
                    self.hashed(&k);
                    self.0.extend([a as u64, b as u64]);
                }
                POp::Select(c, a, b) => self.0.extend([6, c as u64, a as u64, b as u64]),
                POp::Cast(a) => self.0.extend([7, a as u64]),
                POp::Reduce(k, a) => {
                    self.word(8);
                    self.hashed(&k);
                    self.word(a as u64);
                }
                POp::ArgMax(a) => self.0.extend([9, a as u64]),
                POp::ArgMin(a) => self.0.extend([10, a as u64]),
            }
        }
        self.word(p.outputs.len() as u64);
        self.0.extend(p.outputs.iter().map(|o| *o as u64));
    }

    /// Appends a node's kind. Views a kind holds (a row epilogue's product) are written by
    /// `view`, which says how their storages are named.
    pub fn kind(&mut self, k: &NodeKind, view: &mut impl FnMut(&mut Key, &View)) {
        match k {
            NodeKind::Tile {
                shape,
                row_dims,
                prog,
            } => {
                self.word(0);
                self.sizes(shape);
                self.word(*row_dims as u64);
                self.prog(prog);
            }
            NodeKind::Matmul(m) => {
                self.word(1);
                self.matmul(m, view);
            }
            NodeKind::Gather(g) | NodeKind::IndexAdd(g) | NodeKind::IndexPut(g, _) => {
                let tag = match k {
                    NodeKind::Gather(_) => 2,
                    NodeKind::IndexAdd(_) => 3,
                    _ => 4,
                };
                self.0.extend([
                    tag,
                    g.rows as u64,
                    g.row_len as u64,
                    g.count as u64,
                    g.check_bounds as u64,
                    g.zero_table as u64,
                ]);
                if let NodeKind::IndexPut(_, c) = k {
                    self.hashed(c);
                }
            }
            NodeKind::Custom(c) => {
                // The program is the kernel itself: keyed by identity, as the kernel cache is.
                self.0
                    .extend([5, std::sync::Arc::as_ptr(&c.program) as usize as u64]);
                self.word(c.scalars.len() as u64);
                self.0.extend(c.scalars.iter().map(|s| *s as u64));
            }
            NodeKind::Attention(a) => {
                self.0.extend([
                    6,
                    a.batch as u64,
                    a.heads as u64,
                    a.kv_heads as u64,
                    a.l as u64,
                    a.s as u64,
                    a.e as u64,
                    a.ev as u64,
                    a.causal as u64,
                    a.scale.to_bits(),
                    a.backward as u64,
                ]);
                self.hashed(&a.precision);
            }
        }
    }

    fn matmul(&mut self, m: &MatmulNode, view: &mut impl FnMut(&mut Key, &View)) {
        self.0
            .extend([m.batch as u64, m.m as u64, m.n as u64, m.k as u64]);
        self.hashed(&m.precision);
        self.prog(&m.epilogue);
        match &m.twin {
            Some(t) => self.0.extend([1, t.n as u64]),
            None => self.word(0),
        }
        match &m.rows {
            Some(r) => {
                self.0.extend([1, r.product as u64, r.inputs as u64]);
                self.prog(&r.prog);
                self.sizes(&r.shape);
                view(self, &r.product_view);
                view(self, &r.product_out);
            }
            None => self.word(0),
        }
    }

    /// The key of a node's kernel: its kind, each operand's layout (shape and strides; with
    /// `offsets`, its storage offset too) and dtype, which operands share a storage, and how
    /// many cores it is split over. Storages are not part of it: they are the kernel's
    /// arguments.
    pub fn of_node(node: &Node, offsets: bool, parts: usize) -> Key {
        let mut k = Key::with_capacity(64);
        k.word(parts as u64);
        let mut operand = |k: &mut Key, v: &View| {
            k.layout(&v.layout);
            if offsets {
                k.word(v.layout.offset as u64);
            }
            k.dtype(v.dtype);
        };
        k.kind(&node.kind, &mut operand);
        k.word(node.inputs.len() as u64);
        for v in &node.inputs {
            operand(&mut k, v);
        }
        k.word(node.outputs.len() as u64);
        for v in &node.outputs {
            operand(&mut k, v);
        }
        // Aliasing: each operand's first operand of the same storage.
        let ids = || {
            node.inputs
                .iter()
                .chain(&node.outputs)
                .map(|v| v.storage.id())
        };
        for (i, id) in ids().enumerate() {
            k.word(ids().position(|x| x == id).unwrap_or(i) as u64);
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ProgBuilder;

    fn prog_with(c: f64) -> Prog {
        let mut b = ProgBuilder::new();
        let x = b.input(0, DType::F32, false);
        let k = b.constant(Scalar::Float(c), DType::F32);
        let r = b.bin(crate::ir::BinOp::Add, x, k, DType::F32);
        b.output(r);
        b.finish()
    }

    fn key_of(p: &Prog) -> Key {
        let mut k = Key::default();
        k.prog(p);
        k
    }

    #[test]
    fn constants_are_keyed_by_their_bits() {
        assert_eq!(key_of(&prog_with(1.5)), key_of(&prog_with(1.5)));
        assert_ne!(key_of(&prog_with(0.0)), key_of(&prog_with(-0.0)));
        let (a, b) = (f64::from_bits(0x7ff8_0000_0000_0001), f64::NAN);
        assert_ne!(key_of(&prog_with(a)), key_of(&prog_with(b)));
    }

    #[test]
    fn the_word_hasher_spreads_keys_that_differ_in_one_word() {
        use std::hash::BuildHasher;
        let b = std::hash::BuildHasherDefault::<WordHasher>::default();
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000u64 {
            seen.insert(b.hash_one(Key(vec![7, i, 9])));
        }
        assert_eq!(seen.len(), 1000);
    }

    #[test]
    fn layouts_are_prefix_free() {
        // [2, 3] strides [3, 1] against [2] strides [3] followed by more words.
        let mut a = Key::default();
        a.layout(&Layout {
            shape: vec![2, 3],
            strides: vec![3, 1],
            offset: 0,
        });
        let mut b = Key::default();
        b.layout(&Layout {
            shape: vec![2],
            strides: vec![3],
            offset: 0,
        });
        b.0.extend([3, 1]);
        assert_ne!(a, b);
    }
}
