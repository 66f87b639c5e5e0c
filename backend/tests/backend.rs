//! The backend's one integration test binary; each area is a module in `tests/backend/`.

#[path = "backend/tile_kernel.rs"]
mod tile_kernel;
