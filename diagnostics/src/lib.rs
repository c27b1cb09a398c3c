//! `gen-diagnostics`: placeholder, filled by the diagnostics work.
