//! Memory planning of compiled graphs (`compile::plan::arena`): intermediates whose lifetimes do
//! not overlap share an offset of the arena.

use tpuemu_backend::compile::plan::arena;

#[test]
fn dead_values_give_their_space_back() {
    // a (0..1), b (1..2), c (2..3): a and c never overlap in time and share an offset.
    let p = arena(&[(1000, 0, 1), (1000, 1, 2), (1000, 2, 3)]);
    assert_eq!(p.offsets[0], p.offsets[2]);
    assert_ne!(p.offsets[0], p.offsets[1]);
    assert_eq!(p.bytes, 2048);
    // Everything alive at once stacks up.
    let q = arena(&[(100, 0, 5), (100, 0, 5), (100, 0, 5)]);
    assert_eq!(q.bytes, 3 * 512);
}
