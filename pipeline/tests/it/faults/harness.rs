//! The fault scenarios' names for the shared test support: one project type, `gen` awaited or
//! spawned, progress from `status.json`, the audit and the seeded PRNG all live in
//! `crate::support`.

pub(crate) use crate::support::{
    Project, Rng, completion_ids, done, phase_of, sources, wait_for_status, walk,
};
