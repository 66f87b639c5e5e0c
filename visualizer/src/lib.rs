//! Visualizer (being built).
