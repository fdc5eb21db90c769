//! bio-core
