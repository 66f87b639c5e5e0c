//! The backend (being built).
