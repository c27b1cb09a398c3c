//! `gen`'s exit codes: 0 everything finished, 1 some sources failed or the run stopped (a
//! rerun continues), 2 a usage or config error. A leaf: every layer may use it.

pub const OK: u8 = 0;
pub const FAILED: u8 = 1;
pub const USAGE: u8 = 2;

/// [`OK`] when `ok`, else [`FAILED`].
pub fn ok_if(ok: bool) -> u8 {
    if ok { OK } else { FAILED }
}
