//! The threaded runtime (see the module docs of [`super`]).
