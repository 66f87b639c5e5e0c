//! The backend's one integration test binary; each area is a module in `tests/backend/`.

#[path = "backend/inputs.rs"]
mod inputs;

#[path = "backend/host.rs"]
mod host;

#[path = "backend/tile_kernel.rs"]
mod tile_kernel;

#[path = "backend/eager.rs"]
mod eager;

#[path = "backend/strides.rs"]
mod strides;

#[path = "backend/unary_data.rs"]
mod unary_data;

#[path = "backend/reduce_nn.rs"]
mod reduce_nn;

#[path = "backend/matrix_backward.rs"]
mod matrix_backward;

#[path = "backend/op_suite.rs"]
mod op_suite;

#[path = "backend/custom.rs"]
mod custom;

#[path = "backend/compile.rs"]
mod compile;

#[path = "backend/flash.rs"]
mod flash;

#[path = "backend/megacore.rs"]
mod megacore;

#[path = "backend/fusion.rs"]
mod fusion;

#[path = "backend/collective.rs"]
mod collective;

#[path = "backend/layering.rs"]
mod layering;

#[path = "backend/host_costs.rs"]
mod host_costs;

#[path = "backend/external.rs"]
mod external;

#[path = "backend/plans.rs"]
mod plans;

#[path = "backend/memory.rs"]
mod memory;

#[path = "backend/fusion_rules.rs"]
mod fusion_rules;

#[path = "backend/runtime_checks.rs"]
mod runtime_checks;

#[path = "backend/schema_bind.rs"]
mod schema_bind;

#[path = "backend/op_table.rs"]
mod op_table;

#[path = "backend/foreign.rs"]
mod foreign;

#[path = "backend/arena_plan.rs"]
mod arena_plan;
