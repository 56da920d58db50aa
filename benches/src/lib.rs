//! Shared helpers for the wakemeter benches.
