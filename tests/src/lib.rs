//! Shared helpers for biosim cross-crate tests.
