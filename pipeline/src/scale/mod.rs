//! Scale-out on the schedulers users already have: a run's share of the prompts ([`shard`]),
//! `gen run --shard auto` as a Slurm array task or a Kubernetes Indexed Job pod
//! ([`launcher`]), each shard's run directory under one run root ([`root`]) with exactly one
//! writer ([`owner`]), the sources prepared once for all shards ([`prepared`]), the task's life
//! ([`task`]), a shard's server across several nodes ([`nodes`]), and the job scripts `gen
//! slurm` and `gen k8s` write ([`slurm`], [`k8s`]). `gen` does not schedule: the scheduler
//! starts, retries and places tasks.

pub mod k8s;
pub mod launcher;
pub mod nodes;
pub mod owner;
pub mod prepared;
pub mod root;
pub mod shard;
pub mod slurm;
pub mod task;
