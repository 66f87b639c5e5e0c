//! The fusion planner's rules and passes (`src/fusion/`), each checked on a pattern run in
//! Strict and fused: the same values, and the kernels, HBM bytes and joins worked out by hand.
//!
//! - `testing`: a pattern run both ways, with the metrics of each;
//! - one file per join rule (`src/fusion/rules/`): `elementwise`, `reduction`, `per_row`,
//!   `matmul_epilogue`, `linear_backward`, `zero_table`, and `tile`, the splicing they share;
//! - one file per planner pass: `order` (moving groups out of a join's way), `consts`
//!   (constants read as constants), `row_epilogue` (a reduction run on a product's tiles).

#[path = "fusion_rules/testing.rs"]
mod testing;

#[path = "fusion_rules/elementwise.rs"]
mod elementwise;

#[path = "fusion_rules/reduction.rs"]
mod reduction;

#[path = "fusion_rules/per_row.rs"]
mod per_row;

#[path = "fusion_rules/matmul_epilogue.rs"]
mod matmul_epilogue;

#[path = "fusion_rules/linear_backward.rs"]
mod linear_backward;

#[path = "fusion_rules/zero_table.rs"]
mod zero_table;

#[path = "fusion_rules/tile.rs"]
mod tile;

#[path = "fusion_rules/order.rs"]
mod order;

#[path = "fusion_rules/consts.rs"]
mod consts;

#[path = "fusion_rules/row_epilogue.rs"]
mod row_epilogue;
