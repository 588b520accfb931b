//! Applying a [`Plan`](crate::plan::Plan): every setting as one [`Setting`]
//! (which, current value, new value), the diff, the writes with a read-back
//! of each, and the save file that `--restore` writes back.
//!
//! A setting is named by its [`Target`]: its kind and the device, queue or
//! IRQ it belongs to. The file or ethtool call behind it is derived from
//! the target by [`file_of`] and [`Sysroot`](crate::sysroot::Sysroot), for
//! `apply` and `--restore` alike; a save file names targets, never paths,
//! and every entry is validated ([`parse_save`]) and checked against the
//! host ([`restore_settings`]) before anything is written.
//!
//! Values are kept as the kernel's text (`rps_cpus` masks, CPU lists,
//! counts) or, for the ethtool settings, as hex (key) and a comma list
//! (table); comparisons parse them, so `0000000f` equals `f`.
//!
//! Split so that what needs no host is apart from what reads or writes it
//! (the plan, which has no I/O, uses only `setting`):
//! - `setting`: the setting model, value checks and safe text; no I/O.
//! - `save`: the save file's format, parsing and validation; no I/O.
//! - `diff`: the settings a plan or a save file changes, with current values.
//! - `write`: reading values, writing them with read-back, save files on disk.

mod diff;
mod save;
pub(crate) mod setting;
mod write;

pub use diff::{push_hash_fields, restore_settings, settings};
pub use save::{parse_save, save_of, save_text, Created, SaveFile, SavedValue, MAX_SAVE_BYTES, SAVE_VERSION};
pub use setting::{
    printable, quoted, same, valid_value, Kind, Setting, Target, MAX_KEY_BYTES, MAX_TABLE_ENTRIES,
    TARGET_KINDS,
};
// nicres
pub use setting::{coalesce_over, coalesce_pairs, coalesce_text, COALESCE_FIELDS, MAX_COALESCE};
pub use write::{
    current, file_of, prepare_save_dir, read_save, utc_stamp, write_one, write_save, Outcome, TuneError,
};
// nicres
pub use write::rewrite_save;
// symplan
pub use setting::{input_xfrm_bits, input_xfrm_text, INPUT_XFRM_VALUES};
