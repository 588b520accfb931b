//! The RSS core on the command line, no host needed: `hash` (a flow's hash,
//! bucket and CPU; `--iface` on this host's NIC), `table` (DragonFly's
//! ringmap) and `find` (tuples that land in a chosen bucket).

pub mod find;
pub mod hash;
pub mod table;
